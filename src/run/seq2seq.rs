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

use super::step::{
    cache_positions, dim_of, feed, integers, prompt_rows, unrecognized, Generated, Record, Sampler, Sampling, Step,
    Timing,
};
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

/// The decoder step's layout: a [`Step`] of one row, one token a call, whose encoder states
/// the session holds.
pub(super) fn decoder_step(session: &Session) -> Result<Step, Error> {
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
    let logits_dims: Vec<Option<i64>> = sig.outputs[logits].dims.iter().map(dim_of).collect();
    let vocab = logits_dims.last().copied().flatten().unwrap_or(0);
    Ok(Step {
        ids,
        pos,
        states: Some(states),
        pos_dims: vec![Some(1)],
        pos_dtype: dtype(pos).unwrap_or(DType::I64),
        ids_dtype: dtype(ids).unwrap_or(DType::I64),
        logits,
        logits_per_token: logits_dims.len() == 3,
        vocab,
        batch: 1,
        chunk: 1,
        positions: cache_positions(m),
        refused: Default::default(),
    })
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

/// The prompt lengths `encoder` takes, at least and at most: its token ids' last dim, static or
/// a symbol's range. An encoder of float features (Whisper's) is refused: requests carry ids.
pub(super) fn prompt_lengths(encoder: &Session) -> Result<(usize, usize), Error> {
    let sig = &encoder.manifest().signature;
    let ids = sig.inputs.first().filter(|i| parse_dtype(&i.dtype).is_some_and(DType::is_integer));
    let Some((ids, last)) = ids.and_then(|i| Some((i, i.dims.len().checked_sub(1)?))) else {
        let takes = sig.inputs.first().map_or("nothing".to_string(), |i| format!("{} {:?}", i.dtype, i.dims));
        return Err(RunError::Decode(format!(
            "its encoder takes {takes}, not token ids: requests carry token ids (an encoder of features is run by \
             `generate --encoder`)"
        ))
        .into());
    };
    let size = |v: Option<i64>, default: usize| v.and_then(|v| usize::try_from(v).ok()).unwrap_or(default);
    Ok(match dim_of(&ids.dims[last]) {
        Some(n) => (size(Some(n), 0), size(Some(n), 0)),
        None => {
            let symbol = sig.symbols.iter().find(|s| s.input == 0 && s.dim == last);
            (size(symbol.and_then(|s| s.min), 1), size(symbol.and_then(|s| s.max), usize::MAX))
        }
    })
}

/// Why `encoder` refuses a prompt of `t` tokens for breaking a guard of its export, if it does:
/// its token ids `[…, t]` checked as a call would check them.
pub(super) fn refused_lengths(encoder: &Session) -> std::sync::Arc<dyn Fn(usize) -> Option<String> + Send + Sync> {
    let m = encoder.manifest().clone();
    std::sync::Arc::new(move |t: usize| {
        let ids = m.signature.inputs.first()?;
        let shape: Vec<i64> = ids.dims.iter().map(|d| dim_of(d).unwrap_or(t as i64)).collect();
        super::broken_guard(&m, &[shape.as_slice()])
    })
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
    encoder.load_executables()?;
    decoder.load_executables()?;
    decoder.reset()?;
    let started = Instant::now();
    let (states, t) = encode(encoder, &req.prompt)?;
    let prefill_ms = started.elapsed().as_secs_f64() * 1e3;
    // The states go to the devices once and stay there across the calls; only the token and
    // its position change.
    hold_states(decoder, &step, states)?;
    let decoded = decode(decoder, &step, req);
    decoder.release_inputs();
    let record = decoded?;
    let decode_ms = started.elapsed().as_secs_f64() * 1e3 - prefill_ms;
    let decode_calls = record.chosen();
    Ok(record.finish(Timing { prompt_tokens: t, prompt_calls: 1, prefill_ms, decode_ms, decode_calls }))
}

/// The encoder's states of `prompt` (see `encoder_input`) and the prompt's length.
pub(super) fn encode(encoder: &mut Session, prompt: &Array) -> Result<(Array, usize), Error> {
    let (input, t) = encoder_input(encoder, prompt)?;
    let mut encoded = encoder.call(&[input], &[PathBuf::from("prompt")], 0)?.outputs;
    match encoded.len() {
        1 => Ok((encoded.swap_remove(0), t)),
        n => Err(RunError::Decode(format!("the encoder returns {n} outputs, not its states")).into()),
    }
}

/// Holds `states` in `decoder`'s session as its step's input of the encoder's states.
pub(super) fn hold_states(decoder: &mut Session, step: &Step, states: Array) -> Result<(), Error> {
    let index = step.states.ok_or_else(|| RunError::Decode("not an encoder–decoder step".into()))?;
    decoder.hold_input(index, states)
}

/// The decoder's calls, one per new token, its encoder states held by the session.
fn decode(decoder: &mut Session, step: &Step, req: &Seq2Seq) -> Result<Record, Error> {
    let mut sampler = Sampler::new(Sampling::at(req.temperature.unwrap_or(0.0)), req.seed, &[]);
    let mut record = Record::new(1, step.vocab, req.keep_logits);
    let mut next = req.start_token;
    for k in 0..req.max_new_tokens {
        let row = feed(decoder, step, &[next], &[k as i64], 1, &[1])?.swap_remove(0);
        next = sampler.pick(&row);
        record.push(0, next, row);
        if req.eos == Some(next) {
            break;
        }
    }
    Ok(record)
}
