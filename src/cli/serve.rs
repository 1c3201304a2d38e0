//! `serve`: its arguments, the signals that stop it, and what it prints.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use crate::run::{Batcher, DeviceKind, Session, Verification};
use crate::serve::{serve_with, ServeOptions, DEFAULT_MAX_BODY_BYTES};

#[derive(Args)]
pub(super) struct ServeArgs {
    /// An artifact (.tpuexe) of a decode step, as `generate` takes.
    artifact: PathBuf,
    /// The port to listen on (0: any free port, printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The address to listen on; the default answers this machine only.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Requests that may wait for a slot; one more is answered 429 (too many requests).
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_waiting: usize,
    /// The model's name in the API (`model`); default the artifact's file name without its
    /// extension.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Where to run: this machine's CPU, or its TPU chips (exit 3 where it has none).
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    device: DeviceKind,
    /// The PJRT plugin; default for the CPU `$TORCHTPU_PJRT_PLUGIN`, for a TPU
    /// `$TORCHTPU_LIBTPU`, then the `cargo xtask setup` folder.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Serve the weights of another checkpoint of the same program (as `run --checkpoint`).
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// Offer `POST /admin/weights` `{"checkpoint": PATH}`, which swaps the weights for those of
    /// another checkpoint file on this machine between requests, without a restart. Only for a
    /// server that only trusted clients reach.
    #[arg(long)]
    admin: bool,
    /// A Hugging Face `tokenizer.json` for the model: prompts may then be text, and completions
    /// come with their text (decoded as a continuation of the prompt, streamed as whole
    /// characters); without one, prompts and completions are token ids. Default: the one the
    /// artifact stores (`compile --tokenizer DIR`), if any, as for the two options below.
    #[arg(long, value_name = "TOKENIZER.json")]
    tokenizer: Option<PathBuf>,
    /// The model's chat template — a `.jinja` file, or the `tokenizer_config.json` that holds
    /// it (with its BOS and EOS tokens) — for `POST /v1/chat/completions`: a conversation is
    /// rendered as Hugging Face's `apply_chat_template` renders it, then tokenized. Needs a
    /// tokenizer.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<PathBuf>,
    /// The model's `generation_config.json`: every request stops at its `eos_token_id` (and at
    /// the chat template's EOS token) unless it asks `"ignore_eos": true`. Default: the
    /// `generation_config.json` beside `--tokenizer`, if there is one, else the stored one.
    #[arg(long, value_name = "FILE")]
    generation_config: Option<PathBuf>,
    /// The largest request body taken, in bytes; a larger one is answered 413 in the API's
    /// error shape.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// For an encoder–decoder model (T5, BART, as transformers' seq2seq recipe exports them):
    /// the encoder's artifact, the positional one being the decoder step's. Each request's
    /// prompt (token ids) is encoded once as it takes the decoder's slot; one request runs at
    /// a time.
    #[arg(long, value_name = "ENCODER.tpuexe")]
    encoder: Option<PathBuf>,
    /// With `--encoder`: the decoder's first token (T5's and BART's is 0).
    #[arg(long, value_name = "ID", default_value_t = 0, requires = "encoder")]
    start_token: i64,
}

pub(super) fn serve_artifact(args: &ServeArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let started = Instant::now();
    let context = || format!("cannot serve `{}`", args.artifact.display());
    let art = crate::artifact::Artifact::open_but_weights(&args.artifact)
        .map_err(crate::Error::from)
        .with_context(context)?;
    let plugin = args.plugin.as_deref();
    let verification = Verification { always_hash: false, cache: None };
    let session = match &args.checkpoint {
        Some(checkpoint) => Session::with_checkpoint(art, args.device, plugin, checkpoint),
        None => Session::with(art, args.device, plugin, &verification),
    }
    .with_context(context)?;
    let model = args.model.clone().unwrap_or_else(|| {
        args.artifact.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
    });
    let addr = SocketAddr::new(args.host, args.port);
    let opts = ServeOptions {
        addr,
        max_waiting: args.max_waiting,
        model,
        admin: args.admin,
        tokenizer: args.tokenizer.clone(),
        chat_template: args.chat_template.clone(),
        generation_config: args.generation_config.clone(),
        max_body_bytes: args.max_body_bytes,
    };
    let ready = |addr: SocketAddr| {
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let _ = writeln!(out, "serving `{}` at http://{addr} (ready in {ms:.0} ms); stop with Ctrl-C", opts.model);
        let _ = out.flush();
    };
    let batcher = match &args.encoder {
        Some(path) => {
            let encoder = Session::open(path, args.device, plugin, &verification)
                .with_context(|| format!("cannot serve with the encoder `{}`", path.display()))?;
            Batcher::seq2seq(&session, encoder, args.start_token)
        }
        None => Batcher::new(&session),
    }
    .with_context(context)?;
    let summary = serve_with(session, batcher, &opts, ready, stop_signal()).with_context(context)?;
    writeln!(
        out,
        "stopped: {} requests completed, {} cancelled by their clients, {} tokens generated",
        summary.completed, summary.cancelled, summary.tokens
    )?;
    Ok(0)
}

/// Completes at SIGINT (Ctrl-C) or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
