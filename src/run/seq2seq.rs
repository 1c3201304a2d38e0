//! Encoder–decoder generation, as transformers' seq2seq export recipe writes the two halves
//! (`Seq2SeqLMEncoderExportableModule`, `Seq2SeqLMDecoderExportableModuleWithStaticCache`;
//! tested with T5, and with Whisper, whose encoder takes log-mel features):
//! the encoder runs once per request, then the decoder step runs once per new token over the
//! encoder's states, its self-attention caches staying on the device (the cross-attention is
//! computed from the states at every step, as the exported step does). The states go to the
//! devices once per request: the session holds them for the decoder's calls.
//!
//! The conventions:
//! - the encoder takes the prompt's token ids `[1, S]` and returns the states `[1, S, D]`, or
//!   takes float features (Whisper's log-mel `[1, mels, frames]`, given as the prompt) and
//!   returns the states of its positions;
//! - the decoder step takes three inputs: the decoder's token ids `[1, 1]` (named
//!   `decoder_input_ids`, else the first integer input), the encoder's states (the float one)
//!   and the position `[1]` (the other integer input), and returns the logits `[1, 1, V]` or
//!   `[1, V]`; its caches are updated buffers, whose length bounds the new tokens;
//! - the first decoder token is the start token (T5's and BART's 0, Whisper's its own).

use std::path::PathBuf;
use std::time::Instant;

use torchtpu_passes::ir::DType;

use super::generate::{cache_positions, integers, prompt_rows, unrecognized, Generated, Record, Sampler, Timing};
use super::{parse_dtype, RunError, Session};
use crate::npy::Array;
use crate::Error;

/// What to generate with an encoder and a decoder step.
pub struct Seq2Seq {
    /// The encoder's token ids, `[S]` or `[1, S]`, or its float features (Whisper's log-mel).
    pub prompt: Array,
    /// The first decoder token.
    pub start_token: i64,
    /// How many tokens to generate.
    pub max_new_tokens: usize,
    /// A token that ends the generation (kept).
    pub eos: Option<i64>,
    /// `None` or 0: greedy.
    pub temperature: Option<f64>,
    /// The seed of sampling.
    pub seed: u64,
    /// Whether to keep the logits that chose each token.
    pub keep_logits: bool,
}

/// Where the decoder step's inputs and logits are.
struct DecoderStep {
    ids: usize,
    states: usize,
    pos: usize,
    vocab: i64,
    /// The new tokens its caches hold, when a rank-4 cache says.
    positions: Option<i64>,
}

fn decoder_step(session: &Session) -> Result<DecoderStep, Error> {
    let m = session.manifest();
    let sig = &m.signature;
    let dtype = |i: usize| parse_dtype(&sig.inputs[i].dtype);
    let ints: Vec<usize> = (0..sig.inputs.len()).filter(|&i| dtype(i).is_some_and(DType::is_integer)).collect();
    let floats: Vec<usize> = (0..sig.inputs.len()).filter(|&i| dtype(i).is_some_and(DType::is_float)).collect();
    let (&[a, b], &[states]) = (&ints[..], &floats[..]) else {
        return Err(unrecognized(format!(
            "an encoder–decoder step takes two integer inputs (ids, position) and the encoder's states; \
             this one takes {} inputs",
            sig.inputs.len()
        )));
    };
    let ids = if sig.inputs[b].name == "decoder_input_ids" { b } else { a };
    let pos = if ids == a { b } else { a };
    let returned = session.returned_outputs();
    let [logits] = returned[..] else {
        return Err(unrecognized(format!("it returns {} outputs besides its state, not the logits", returned.len())));
    };
    let vocab = sig.outputs[logits].dims.last().and_then(serde_json::Value::as_i64).unwrap_or(0);
    let positions = cache_positions(m);
    Ok(DecoderStep { ids, states, pos, vocab, positions })
}

/// What the encoder takes, and the prompt's length: token ids `[1, S]` from a prompt of ids
/// (`[S]` or `[1, S]`), or the prompt itself for an encoder of float features (Whisper's
/// log-mel `[1, mels, frames]`; its length: the frames).
fn encoder_input(encoder: &Session, prompt: &Array) -> Result<(Array, usize), Error> {
    let takes_ids = encoder.manifest().signature.inputs.first().and_then(|i| parse_dtype(&i.dtype));
    if takes_ids.is_some_and(|d| !d.is_integer()) {
        let frames = prompt.shape.last().copied().unwrap_or(0).max(0) as usize;
        return Ok((prompt.clone(), frames));
    }
    let prompt = prompt_rows(prompt, 1)?.swap_remove(0);
    Ok((integers(DType::I64, &[1, prompt.len() as i64], &prompt), prompt.len()))
}

/// Generates with `encoder` (run once) and `decoder` (once per new token, from its artifact's
/// caches).
pub fn generate_seq2seq(encoder: &mut Session, decoder: &mut Session, req: &Seq2Seq) -> Result<Generated, Error> {
    let step = decoder_step(decoder)?;
    if let Some(limit) = step.positions.filter(|&l| req.max_new_tokens as i64 > l) {
        let reason =
            format!("{} new tokens need as many positions; the decoder's caches hold {limit}", req.max_new_tokens);
        return Err(RunError::Decode(reason).into());
    }
    let (input, t) = encoder_input(encoder, &req.prompt)?;
    encoder.load_executables()?;
    decoder.load_executables()?;
    decoder.reset()?;
    let started = Instant::now();
    let mut encoded = encoder.call(&[input], &[PathBuf::from("prompt")], 0)?.outputs;
    let states = match encoded.len() {
        1 => encoded.swap_remove(0),
        n => return Err(RunError::Decode(format!("the encoder returns {n} outputs, not its states")).into()),
    };
    let prefill_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut labels = vec![PathBuf::new(); 3];
    labels[step.ids] = PathBuf::from("token id");
    labels[step.states] = PathBuf::from("encoder states");
    labels[step.pos] = PathBuf::from("position");
    // The states go to the devices once and stay there across the calls; only the token and
    // its position change.
    decoder.hold_input(step.states, states)?;
    let decoded = decode(decoder, &step, &labels, req);
    decoder.release_inputs();
    let record = decoded?;
    let decode_ms = started.elapsed().as_secs_f64() * 1e3 - prefill_ms;
    let decode_calls = record.chosen();
    Ok(record.finish(Timing { prompt_tokens: t, prompt_calls: 1, prefill_ms, decode_ms, decode_calls }))
}

/// The decoder's calls, one per new token, its encoder states held by the session.
fn decode(decoder: &mut Session, step: &DecoderStep, labels: &[PathBuf], req: &Seq2Seq) -> Result<Record, Error> {
    let mut sampler = Sampler::new(req.temperature.unwrap_or(0.0), req.seed);
    let mut record = Record::new(1, step.vocab, req.keep_logits);
    let mut next = req.start_token;
    let mut inputs = vec![Array { dtype: DType::I64, shape: vec![], data: vec![] }; 3];
    for k in 0..req.max_new_tokens {
        inputs[step.ids] = integers(DType::I64, &[1, 1], &[next]);
        inputs[step.pos] = integers(DType::I64, &[1], &[k as i64]);
        let out = decoder.call(&inputs, labels, 0)?.outputs.swap_remove(0);
        let row = out.f32_range(0, step.vocab.max(0) as usize).ok_or_else(|| {
            RunError::Decode(format!(
                "the logits, {} {:?}, hold fewer than {} values",
                out.dtype, out.shape, step.vocab
            ))
        })?;
        next = sampler.pick(&row);
        record.push(0, next, row);
        if req.eos == Some(next) {
            break;
        }
    }
    Ok(record)
}
