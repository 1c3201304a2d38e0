//! `generate`: the decode loop for a decode-step export, in one [`Session`] whose KV caches stay
//! on the device. The prompt is fed one token per call, or, when the step takes a dynamic number
//! of tokens (a prefill program, compiled with size buckets), as many tokens a call as its
//! largest bucket holds; then each call's logits choose the next token (greedily, or by
//! sampling at a temperature with a seed), which the next call reads. The step's conventions
//! are `step`'s.
//!
//! Several prompts of different lengths, more than the batch holds, go through [`super::batch`].

use std::path::PathBuf;
use std::time::Instant;

use super::step::{feed, prompt_rows, step, Generated, Record, Sampler, Sampling, Timing};
use super::weights::Verification;
use super::{DeviceKind, RunError, Session};
use crate::artifact::{Artifact, Manifest};
use crate::npy::Array;
use crate::Error;

/// What to generate, from which artifact.
pub struct GenerateRequest {
    /// The artifact of a decode step.
    pub artifact: PathBuf,
    /// The device whose executables run (`--device`).
    pub device: DeviceKind,
    /// The plugin (`--plugin`); `None`: the environment's or the set-up folder's.
    pub plugin: Option<PathBuf>,
    /// What to decode.
    pub decoding: Decoding,
    /// Whether calls donate the caches (see [`Session::set_donation`]).
    pub donate: bool,
    /// Another checkpoint of the program whose weights run instead of the artifact's (see
    /// [`Session::swap_weights`]).
    pub checkpoint: Option<PathBuf>,
}

/// What to decode.
pub struct Decoding {
    /// Token ids, `[T]` or `[B, T]`, of an integer dtype.
    pub prompt: Array,
    /// How many tokens to generate after the prompt.
    pub max_new_tokens: usize,
    /// `None` or 0: greedy.
    pub temperature: Option<f64>,
    /// The seed of sampling (with a temperature).
    pub seed: u64,
    /// Whether to keep the logits that chose each token ([`Generated::logits`]): `B × N × V`
    /// f32 values, 4 GiB for 8 rows of 1,000 tokens over a 128k vocabulary.
    pub keep_logits: bool,
}

/// Runs the decode loop in a session of its own.
pub fn generate(req: &GenerateRequest, verification: &Verification) -> Result<Generated, Error> {
    decode(&mut open(req, verification)?, &req.decoding)
}

/// Serves `requests` (prompts of any lengths, more than the batch holds) in a session of its
/// own through a [`super::batch::Batcher`]; `req.decoding`'s prompt is not read.
pub fn generate_requests(
    req: &GenerateRequest,
    requests: Vec<super::batch::Request>,
    verification: &Verification,
) -> Result<super::batch::Served, Error> {
    super::batch::serve_all(&mut open(req, verification)?, requests)
}

/// The session `req` asks for.
fn open(req: &GenerateRequest, verification: &Verification) -> Result<Session, Error> {
    let plugin = req.plugin.as_deref();
    let mut session = match &req.checkpoint {
        Some(checkpoint) => {
            Session::with_checkpoint(Artifact::open_but_weights(&req.artifact)?, req.device, plugin, checkpoint)?
        }
        None => Session::open(&req.artifact, req.device, plugin, verification)?,
    };
    session.set_donation(req.donate);
    Ok(session)
}

/// The rows a decode step takes at once (its batch), from `m`'s signature.
pub fn batch_of(m: &Manifest) -> Result<i64, Error> {
    Ok(step(m)?.batch)
}

/// Runs the decode loop in `session`, from the state it holds (the artifact's, after a reset).
pub fn decode(session: &mut Session, req: &Decoding) -> Result<Generated, Error> {
    let s = step(session.manifest())?;
    let prompt = prompt_rows(&req.prompt, s.batch)?;
    let t = prompt[0].len();
    let total = t + req.max_new_tokens;
    if let Some(limit) = s.positions.filter(|&l| total as i64 > l) {
        let n = req.max_new_tokens;
        let reason = format!("{t} prompt tokens and {n} new ones need {total} positions; the caches hold {limit}");
        return Err(RunError::Decode(reason).into());
    }
    let mut sampler = Sampler::new(Sampling::at(req.temperature.unwrap_or(0.0)), req.seed, &[]);
    let mut record = Record::new(prompt.len(), s.vocab, req.keep_logits);
    session.load_executables()?;
    let started = Instant::now();
    // The prompt, as many tokens a call as the program takes; its last logits choose the
    // first new token.
    let (mut at, mut last, mut prompt_calls) = (0, Vec::new(), 0);
    while at < t {
        let n = s.chunk.min(t - at);
        let ids: Vec<i64> = prompt.iter().flat_map(|row| row[at..at + n].iter().copied()).collect();
        last = feed(session, &s, &ids, &vec![at as i64; prompt.len()], n, &vec![n; prompt.len()])?;
        at += n;
        prompt_calls += 1;
    }
    let prefill_ms = started.elapsed().as_secs_f64() * 1e3;
    for k in 0..req.max_new_tokens {
        let next: Vec<i64> = last.iter().map(|r| sampler.pick(r)).collect();
        for (b, row) in std::mem::take(&mut last).into_iter().enumerate() {
            record.push(b, next[b], row);
        }
        if k + 1 < req.max_new_tokens {
            last = feed(session, &s, &next, &vec![at as i64; prompt.len()], 1, &vec![1; prompt.len()])?;
            at += 1;
        }
    }
    let decode_ms = started.elapsed().as_secs_f64() * 1e3 - prefill_ms;
    let decode_calls = req.max_new_tokens.saturating_sub(1);
    Ok(record.finish(Timing { prompt_tokens: t, prompt_calls, prefill_ms, decode_ms, decode_calls }))
}
