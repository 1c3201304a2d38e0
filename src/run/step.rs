//! The decode step as `generate`, `seq2seq` and the batcher drive it: where its inputs and
//! logits are ([`Step`], read from the artifact's signature), one call ([`feed`]), the tokens
//! chosen ([`Record`]) and the sampler that chooses them.
//!
//! The conventions it recognizes (gpt-fast, torchchat, and transformers' `StaticCache` export
//! recipe, `TorchExportableModuleWithStaticCache`; tested on a gpt-fast-style decoder and on
//! that recipe's export):
//! - two integer user inputs: the token ids `[B, 1]`, or `[B, T]` with `T` dynamic from 1 (named
//!   `input_ids`, `idx`, `tokens` or `ids`, else the first), and the positions, `[1]`, `[B]`,
//!   `[B, 1]`, or `[T]`/`[B, T]` (the other, e.g. `input_pos` or `cache_position`), of any
//!   integer dtype;
//! - one float user output, the logits, `[B, 1, V]` (`[B, T, V]`) or `[B, V]`;
//! - the caches as updated buffers; a rank-4 cache `[B, H, S, D]` or `[B, S, H, D]` bounds the
//!   positions to `S` (taken as the larger of its middle dims).

use std::path::PathBuf;

use serde::Serialize;
use torchtpu_passes::ir::DType;

use super::{parse_dtype, RunError, Session};
use crate::artifact::{output_files, Manifest};
use crate::npy::Array;
use crate::Error;

/// What `generate` did.
#[derive(Debug, Serialize)]
pub struct Generated {
    /// The new tokens, `[B, N]` (i64).
    #[serde(skip)]
    pub tokens: Array,
    /// The logits that chose each of them, `[B, N, V]` (f32), when they were kept.
    #[serde(skip)]
    pub logits: Option<Array>,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// The calls that fed the prompt: one per token, or fewer through a prefill program.
    pub prompt_calls: usize,
    /// Tokens generated.
    pub new_tokens: usize,
    /// Time feeding the prompt.
    pub prefill_ms: f64,
    /// Time generating the new tokens.
    pub decode_ms: f64,
    /// New tokens per second of decoding (the calls after the prompt's).
    pub tokens_per_second: f64,
}

/// Where the decode step's inputs and logits are.
#[derive(Clone)]
pub(super) struct Step {
    pub(super) ids: usize,
    pub(super) pos: usize,
    /// An encoder–decoder step's input of the encoder's states, which the session holds (see
    /// `seq2seq`); `None` for a decoder-only step.
    pub(super) states: Option<usize>,
    /// The position input's dims, `None` for the dynamic token count of a prefill program.
    pub(super) pos_dims: Vec<Option<i64>>,
    pub(super) pos_dtype: DType,
    pub(super) ids_dtype: DType,
    pub(super) logits: usize,
    /// Whether the logits have a token dim (`[B, T, V]`, not `[B, V]`).
    pub(super) logits_per_token: bool,
    pub(super) vocab: i64,
    pub(super) batch: i64,
    /// The most tokens one call takes: 1, or a prefill program's largest token count.
    pub(super) chunk: usize,
    /// The positions the caches hold, when a rank-4 cache says.
    pub(super) positions: Option<i64>,
    /// The token counts up to `chunk` whose calls break a guard of the export (a prefill
    /// program traced where `T != 16`): a batcher feeds fewer tokens instead.
    pub(super) refused: std::collections::BTreeSet<usize>,
}

impl Step {
    /// Whether each row of the batch takes a position of its own (`[B]`, `[B, 1]`, `[B, T]`
    /// with `B > 1`), rather than one for all.
    pub(super) fn per_row(&self) -> bool {
        self.batch > 1 && self.pos_dims.first() == Some(&Some(self.batch))
    }
}

pub(super) fn unrecognized(reason: String) -> Error {
    RunError::Decode(format!("not a decode step `generate` knows: {reason}")).into()
}

/// A signature dim: its size, or `None` for a symbol.
pub(super) fn dim_of(d: &serde_json::Value) -> Option<i64> {
    d.as_i64()
}

/// The decode step's layout, from the manifest's signature.
pub(super) fn step(m: &Manifest) -> Result<Step, Error> {
    let sig = &m.signature;
    let dims = |v: &crate::artifact::SignatureValue| -> Vec<Option<i64>> { v.dims.iter().map(dim_of).collect() };
    let ints: Vec<usize> =
        (0..sig.inputs.len()).filter(|&i| parse_dtype(&sig.inputs[i].dtype).is_some_and(DType::is_integer)).collect();
    if sig.inputs.len() != 2 || ints.len() != 2 {
        let floats = sig.inputs.len() - ints.len();
        let hint = if sig.inputs.len() == 3 && floats == 1 {
            "; it looks like the decoder of an encoder–decoder model: give the encoder's artifact with `--encoder`"
        } else {
            ""
        };
        return Err(unrecognized(format!(
            "it takes {} inputs, not two integer ones (ids, position){hint}",
            sig.inputs.len()
        )));
    }
    let named = ["input_ids", "idx", "tokens", "ids"];
    let ids = ints.iter().copied().find(|&i| named.contains(&sig.inputs[i].name.as_str())).unwrap_or(ints[0]);
    let pos = ints.iter().copied().find(|&i| i != ids).unwrap_or(ints[1]);
    let ids_name = &sig.inputs[ids].name;
    let (batch, chunk) = match dims(&sig.inputs[ids])[..] {
        [Some(b), Some(1)] => (b, 1),
        [Some(b), None] => (b, prefill_chunk(m, ids, ids_name)?),
        ref other => {
            return Err(unrecognized(format!("its token ids `{ids_name}` are {other:?}, not [B, 1] or [B, T]")))
        }
    };
    let files = output_files(&sig.outputs);
    let users: Vec<usize> = (0..sig.outputs.len()).filter(|&o| files[o].starts_with("out_")).collect();
    let [logits] = users[..] else {
        return Err(unrecognized(format!("it has {} outputs besides its state, not one (the logits)", users.len())));
    };
    let (vocab, logits_per_token) = match dims(&sig.outputs[logits])[..] {
        [Some(b), t, Some(v)] if b == batch && (t == Some(1) || chunk > 1) => (v, true),
        [Some(b), Some(v)] if b == batch && chunk == 1 => (v, false),
        ref other => return Err(unrecognized(format!("its output is {other:?}, not logits [B, T, V] or [B, V]"))),
    };
    let positions = cache_positions(m);
    let dtype = |i: usize| parse_dtype(&sig.inputs[i].dtype).unwrap_or(DType::I64);
    let pos_dims = dims(&sig.inputs[pos]);
    let refused = (1..=chunk)
        .filter(|&n| {
            let mut shapes = vec![vec![]; 2];
            shapes[ids] = vec![batch, n as i64];
            shapes[pos] = pos_dims.iter().map(|d| d.unwrap_or(n as i64)).collect();
            super::broken_guard(m, &shapes.iter().map(Vec::as_slice).collect::<Vec<_>>()).is_some()
        })
        .collect();
    Ok(Step {
        ids,
        pos,
        states: None,
        pos_dims,
        pos_dtype: dtype(pos),
        ids_dtype: dtype(ids),
        logits,
        logits_per_token,
        vocab,
        batch,
        chunk,
        positions,
        refused,
    })
}

/// The most tokens a call of a prefill program takes (its token count's largest size), after
/// checking that it also takes one (so that it decodes too).
fn prefill_chunk(m: &Manifest, ids: usize, name: &str) -> Result<usize, Error> {
    let symbol = m.signature.symbols.iter().find(|s| s.input == ids && s.dim == 1);
    let (min, max) = symbol.map_or((None, None), |s| (s.min, s.max));
    if min.unwrap_or(1) > 1 {
        let reason =
            format!("its token ids `{name}` take at least {} tokens a call, so it cannot decode one", min.unwrap_or(1));
        return Err(unrecognized(reason));
    }
    let largest = m.buckets.iter().filter_map(|b| symbol.and_then(|s| b.bindings.get(&s.name)).copied()).max();
    Ok(largest.or(max).map_or(1, |n| usize::try_from(n).unwrap_or(1).max(1)))
}

/// The positions the caches hold: the least over the updated rank-4 buffers (`[B, H, S, D]`
/// or `[B, S, H, D]`) of their larger middle dim (the positions outnumber the heads).
pub(super) fn cache_positions(m: &Manifest) -> Option<i64> {
    let files = output_files(&m.signature.outputs);
    let outputs = &m.signature.outputs;
    (0..outputs.len())
        .filter(|&o| files[o].starts_with("state_"))
        .filter_map(|o| match outputs[o].dims.iter().map(dim_of).collect::<Vec<_>>()[..] {
            [_, Some(a), Some(b), _] => Some(a.max(b)),
            _ => None,
        })
        .min()
}

/// An integer array of `dtype` and `dims` with every element `values[i / per]`.
pub(super) fn integers(dtype: DType, dims: &[i64], values: &[i64]) -> Array {
    let n = dims.iter().product::<i64>().max(0) as usize;
    let per = (n / values.len().max(1)).max(1);
    let mut data = Vec::with_capacity(n * dtype.size_bytes());
    for i in 0..n {
        let v = values[(i / per).min(values.len() - 1)];
        match dtype.size_bytes() {
            1 => data.push(v as u8),
            2 => data.extend_from_slice(&(v as i16).to_le_bytes()),
            4 => data.extend_from_slice(&(v as i32).to_le_bytes()),
            _ => data.extend_from_slice(&v.to_le_bytes()),
        }
    }
    Array { dtype, shape: dims.to_vec(), data }
}

/// One call of the decode step: `ids` (`n` tokens per row, rows after rows), row `b`'s at
/// positions `at[b]..at[b] + n` (a step with one position for all rows takes row 0's); per
/// row, the logits of its token `real[b] - 1` (its last real one; the rest pad it).
pub(super) fn feed(
    session: &mut Session,
    s: &Step,
    ids: &[i64],
    at: &[i64],
    n: usize,
    real: &[usize],
) -> Result<Vec<Vec<f32>>, Error> {
    let pos_dims: Vec<i64> = s.pos_dims.iter().map(|d| d.unwrap_or(n as i64)).collect();
    let count = pos_dims.iter().product::<i64>().max(0) as usize;
    // Positions along the token dim (the last), for each row its own or row 0's.
    let row = |i: usize| if s.per_row() { i / n } else { 0 };
    let positions: Vec<i64> = (0..count).map(|i| at[row(i)] + (i % n) as i64).collect();
    // The encoder's states, held by the session, are not given.
    let arity = 2 + usize::from(s.states.is_some());
    let mut inputs = vec![Array { dtype: DType::I64, shape: vec![], data: vec![] }; arity];
    let mut labels = vec![PathBuf::from("encoder states"); arity];
    (labels[s.ids], labels[s.pos]) = (PathBuf::from("token ids"), PathBuf::from("position"));
    inputs[s.ids] = integers(s.ids_dtype, &[s.batch, n as i64], ids);
    inputs[s.pos] = integers(s.pos_dtype, &pos_dims, &positions);
    let logits = session.returned_outputs().iter().position(|&j| j == s.logits);
    let logits = logits.ok_or_else(|| RunError::Decode("the call does not return the logits".into()))?;
    let out = session.call(&inputs, &labels, 0)?.outputs.swap_remove(logits);
    let per_row = if s.logits_per_token { n } else { 1 };
    let vocab = s.vocab.max(0) as usize;
    let last_row = |b: usize| {
        let token = if s.logits_per_token { real[b].clamp(1, n) - 1 } else { 0 };
        out.f32_range((b * per_row + token) * vocab, vocab).ok_or_else(|| {
            let reason = format!("the logits, {} {:?}, hold no row {b} of {vocab} values", out.dtype, out.shape);
            Error::from(RunError::Decode(reason))
        })
    };
    (0..s.batch as usize).map(last_row).collect()
}

/// The tokens a decode loop chose, row by row, and (when kept) the logits that chose them.
pub(super) struct Record {
    tokens: Vec<Vec<i64>>,
    logits: Option<Vec<Vec<f32>>>,
    vocab: i64,
}

/// How the prompt was fed and how long decoding took.
pub(super) struct Timing {
    pub(super) prompt_tokens: usize,
    pub(super) prompt_calls: usize,
    pub(super) prefill_ms: f64,
    pub(super) decode_ms: f64,
    /// The calls after the prompt's that chose tokens.
    pub(super) decode_calls: usize,
}

impl Record {
    pub(super) fn new(rows: usize, vocab: i64, keep_logits: bool) -> Record {
        Record { tokens: vec![Vec::new(); rows], logits: keep_logits.then(|| vec![Vec::new(); rows]), vocab }
    }

    /// Row `row`'s next token, chosen by `logits`; every row gets one before the next round.
    pub(super) fn push(&mut self, row: usize, token: i64, logits: Vec<f32>) {
        self.tokens[row].push(token);
        if let Some(kept) = &mut self.logits {
            kept[row].extend(logits);
        }
    }

    /// The tokens chosen for each row so far.
    pub(super) fn chosen(&self) -> usize {
        self.tokens.first().map_or(0, Vec::len)
    }

    pub(super) fn finish(self, timing: Timing) -> Generated {
        let (rows, n) = (self.tokens.len() as i64, self.chosen());
        let tokens = self.tokens.concat().iter().flat_map(|v| v.to_le_bytes()).collect();
        let logits = self.logits.map(|kept| Array {
            dtype: DType::F32,
            shape: vec![rows, n as i64, self.vocab],
            data: kept.concat().iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
        let Timing { prompt_tokens, prompt_calls, prefill_ms, decode_ms, decode_calls } = timing;
        Generated {
            tokens: Array { dtype: DType::I64, shape: vec![rows, n as i64], data: tokens },
            logits,
            prompt_tokens,
            prompt_calls,
            new_tokens: n,
            prefill_ms,
            decode_ms,
            tokens_per_second: if decode_ms > 0.0 { decode_calls as f64 * 1e3 / decode_ms } else { 0.0 },
        }
    }
}

/// The prompt as `batch` rows of token ids (`[T]` for one row).
pub(super) fn prompt_rows(prompt: &Array, batch: i64) -> Result<Vec<Vec<i64>>, Error> {
    let bad = |reason: String| Error::from(RunError::Decode(format!("the prompt: {reason}")));
    if !prompt.dtype.is_integer() {
        return Err(bad(format!("token ids must be integers, not {}", prompt.dtype)));
    }
    let (rows, t) = match prompt.shape[..] {
        [t] => (1, t),
        [b, t] => (b, t),
        _ => return Err(bad(format!("shape {:?}: give token ids as [T] or [B, T]", prompt.shape))),
    };
    if rows != batch || t < 1 {
        return Err(bad(format!(
            "shape {:?}: the artifact decodes a batch of {batch}, at least one token each",
            prompt.shape
        )));
    }
    let ids: Vec<i64> = (0..(rows * t) as usize).filter_map(|i| prompt.get_f64(i).map(|v| v as i64)).collect();
    Ok(ids.chunks(t as usize).map(<[i64]>::to_vec).collect())
}

/// A chosen token's log probability and the likeliest tokens' with theirs, likeliest first
/// (ties by id): the model's own distribution, the log-softmax of the raw logits before
/// temperature, restrictions and penalties (what vLLM reports by default).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Logprobs {
    /// The chosen token's.
    pub token: f32,
    /// The likeliest tokens' ids and theirs.
    pub top: Vec<(i64, f32)>,
}

impl Logprobs {
    /// Those of `token` and of the `k` likeliest tokens under `logits`.
    pub fn of(logits: &[f32], token: i64, k: usize) -> Logprobs {
        let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| (f64::from(l) - f64::from(top)).exp()).sum();
        let norm = f64::from(top) + sum.ln();
        let lp = |l: f32| (f64::from(l) - norm) as f32;
        let mut ranked: Vec<usize> = (0..logits.len()).collect();
        let k = k.min(logits.len());
        if k > 0 {
            ranked.select_nth_unstable_by(k - 1, |&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        }
        ranked.truncate(k);
        ranked.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let chosen = usize::try_from(token).ok().and_then(|t| logits.get(t)).map_or(f32::NEG_INFINITY, |&l| lp(l));
        Logprobs { token: chosen, top: ranked.into_iter().map(|i| (i as i64, lp(logits[i]))).collect() }
    }
}

/// How a request's tokens are chosen: greedily (`temperature` 0), or by sampling from
/// `softmax(logits / temperature)` restricted, as vLLM and transformers restrict it, to the
/// `top_k` likeliest tokens, to those at least `min_p` times as likely as the likeliest, and
/// to the fewest likeliest whose probabilities add up to `top_p`. The penalties change the
/// logits first, as vLLM applies them: `repetition_penalty` divides a positive logit (and
/// multiplies a negative one) of every token of the prompt or the output so far; then each
/// token of the output loses `presence_penalty` once and `frequency_penalty` per time it came.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// `0`: greedy.
    pub temperature: f64,
    /// `0`: every token.
    pub top_k: usize,
    /// In `(0, 1]`; `1`: every token.
    pub top_p: f64,
    /// In `[0, 1]`; `0`: every token.
    pub min_p: f64,
    /// Above 0; `1`: none.
    pub repetition_penalty: f64,
    /// `0`: none.
    pub presence_penalty: f64,
    /// `0`: none.
    pub frequency_penalty: f64,
}

impl Sampling {
    /// The likeliest token every time.
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repetition_penalty: 1.0,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
    };

    /// Sampling at `temperature` from every token (`0`: greedy).
    pub fn at(temperature: f64) -> Sampling {
        Sampling { temperature, ..Sampling::GREEDY }
    }

    fn penalizes(&self) -> bool {
        self.repetition_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }
}

/// Greedy choice, or sampling as [`Sampling`] says with a seeded generator (SplitMix64: the
/// same seed gives the same tokens).
pub(super) struct Sampler {
    sampling: Sampling,
    state: u64,
    /// With penalties: the prompt's tokens, and how often each token came in the output.
    prompt: std::collections::BTreeSet<i64>,
    output: std::collections::BTreeMap<i64, u32>,
}

impl Sampler {
    /// A sampler for the tokens that follow `prompt` (which only the repetition penalty reads).
    pub(super) fn new(sampling: Sampling, seed: u64, prompt: &[i64]) -> Sampler {
        let prompt =
            if sampling.repetition_penalty != 1.0 { prompt.iter().copied().collect() } else { Default::default() };
        Sampler { sampling, state: seed, prompt, output: Default::default() }
    }

    /// The next token after the output so far, chosen from `logits`.
    pub(super) fn pick(&mut self, logits: &[f32]) -> i64 {
        let token = if self.sampling.penalizes() { self.choose(&self.penalized(logits)) } else { self.choose(logits) };
        if self.sampling.penalizes() {
            *self.output.entry(token).or_default() += 1;
        }
        token
    }

    /// `logits` with the penalties applied.
    fn penalized(&self, logits: &[f32]) -> Vec<f32> {
        let s = self.sampling;
        let mut out = logits.to_vec();
        let mut at = |token: i64, change: &dyn Fn(f32) -> f32| {
            if let Some(l) = usize::try_from(token).ok().and_then(|t| out.get_mut(t)) {
                *l = change(*l);
            }
        };
        let r = s.repetition_penalty as f32;
        let output_only = self.output.keys().filter(|t| !self.prompt.contains(t));
        for &t in self.prompt.iter().chain(output_only) {
            at(t, &|l| if l > 0.0 { l / r } else { l * r });
        }
        for (&t, &n) in &self.output {
            at(t, &|l| l - (s.presence_penalty + s.frequency_penalty * f64::from(n)) as f32);
        }
        out
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / u64::MAX as f64
    }

    fn choose(&mut self, logits: &[f32]) -> i64 {
        let argmax = logits.iter().enumerate().fold(0, |best, (i, &v)| if v > logits[best] { i } else { best });
        let s = self.sampling;
        if s.temperature <= 0.0 {
            return argmax as i64;
        }
        // Unnormalized probabilities: the likeliest token's is 1.
        let top = f64::from(logits[argmax]);
        let mut kept: Vec<(usize, f64)> =
            logits.iter().map(|&v| ((f64::from(v) - top) / s.temperature).exp()).enumerate().collect();
        if s.top_k > 0 || s.min_p > 0.0 || s.top_p < 1.0 {
            kept = restricted(kept, s);
        }
        let mut left = self.uniform() * kept.iter().map(|(_, w)| w).sum::<f64>();
        for &(i, w) in &kept {
            left -= w;
            if left <= 0.0 {
                return i as i64;
            }
        }
        // Rounding left a sliver, or the logits were not numbers.
        kept.last().map_or(argmax, |&(i, _)| i) as i64
    }
}

/// The tokens `sampling`'s restrictions keep of `weights` (each token's unnormalized
/// probability, the likeliest's 1), likeliest first (ties by id), never fewer than one: those
/// at least `min_p` as likely as the likeliest, of them the `top_k` likeliest, of those the
/// fewest likeliest whose probabilities reach `top_p` of theirs. Selection first, so that a
/// small `top_k` sorts only what it keeps.
fn restricted(mut weights: Vec<(usize, f64)>, s: Sampling) -> Vec<(usize, f64)> {
    let likelier = |a: &(usize, f64), b: &(usize, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if s.min_p > 0.0 {
        weights.retain(|&(_, w)| w >= s.min_p);
    }
    if s.top_k > 0 && s.top_k < weights.len() {
        weights.select_nth_unstable_by(s.top_k - 1, likelier);
        weights.truncate(s.top_k);
    }
    weights.sort_by(likelier);
    if s.top_p < 1.0 {
        let total: f64 = weights.iter().map(|(_, w)| w).sum();
        let mut sum = 0.0;
        let within = weights
            .iter()
            .take_while(|(_, w)| {
                let before = sum;
                sum += w;
                before < s.top_p * total
            })
            .count();
        weights.truncate(within.max(1));
    }
    weights
}

#[cfg(test)]
mod tests {
    use std::f32::consts::LN_2;

    use super::{Logprobs, Sampler, Sampling};

    /// The tokens drawn from `logits` in 4,000 draws, by id.
    fn drawn(sampling: Sampling, logits: &[f32]) -> Vec<usize> {
        let mut sampler = Sampler::new(sampling, 7, &[]);
        let mut counts = vec![0; logits.len()];
        for _ in 0..4000 {
            counts[sampler.pick(logits) as usize] += 1;
        }
        counts
    }

    /// Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (logits of their logarithms).
    const LOGITS: [f32; 5] = [-LN_2, -2.0 * LN_2, -3.0 * LN_2, -4.0 * LN_2, -4.0 * LN_2];

    #[test]
    fn each_restriction_keeps_the_likeliest_tokens() {
        let t = Sampling::at(1.0);
        // Unrestricted, every token is drawn, about as often as its probability says.
        let all = drawn(t, &LOGITS);
        assert!(all.iter().all(|&c| c > 0), "{all:?}");
        assert!((1800..2200).contains(&all[0]), "{all:?}");
        // top_k 2: the two likeliest only.
        let two = drawn(Sampling { top_k: 2, ..t }, &LOGITS);
        assert!(two[2..].iter().all(|&c| c == 0) && two[0] > two[1] && two[1] > 0, "{two:?}");
        // top_p 0.7: 0.5 is not enough, 0.5 + 0.25 is: the same two.
        let p = drawn(Sampling { top_p: 0.7, ..t }, &LOGITS);
        assert!(p[2..].iter().all(|&c| c == 0) && p[1] > 0, "{p:?}");
        // min_p 0.2: at least a fifth of 0.5, so 0.125 stays and 0.0625 goes.
        let m = drawn(Sampling { min_p: 0.2, ..t }, &LOGITS);
        assert!(m[3..].iter().all(|&c| c == 0) && m[2] > 0, "{m:?}");
        // The tightest keeps the likeliest token alone; greedy ignores the restrictions.
        assert_eq!(drawn(Sampling { top_p: 0.01, ..t }, &LOGITS)[0], 4000);
        assert_eq!(drawn(Sampling { top_k: 1, ..Sampling::GREEDY }, &LOGITS)[0], 4000);
    }

    /// Log probabilities are the raw logits' log-softmax; the top ones come likeliest first.
    #[test]
    fn log_probabilities_of_the_token_and_the_likeliest() {
        let got = Logprobs::of(&LOGITS, 2, 3);
        assert!((got.token - (-3.0 * LN_2)).abs() < 1e-6, "{got:?}");
        let ids: Vec<i64> = got.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [0, 1, 2]);
        assert!((got.top[1].1 - (-2.0 * LN_2)).abs() < 1e-6, "{got:?}");
        // Shifting every logit changes nothing; ties go to the lower id; k may exceed the vocabulary.
        let shifted: Vec<f32> = LOGITS.iter().map(|l| l + 5.0).collect();
        let all = Logprobs::of(&shifted, 4, 9);
        assert_eq!(all.top.iter().map(|t| t.0).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert!((all.token - (-4.0 * LN_2)).abs() < 1e-5, "{all:?}");
        assert_eq!(Logprobs::of(&LOGITS, 0, 0).top, vec![]);
    }

    /// Greedy with penalties: a token once chosen loses to the next likeliest.
    #[test]
    fn penalties_lower_the_tokens_already_seen() {
        let logits = [2.0, 1.6, 1.1, -1.0];
        let greedy = |sampling: Sampling, prompt: &[i64]| -> Vec<i64> {
            let mut sampler = Sampler::new(sampling, 0, prompt);
            (0..4).map(|_| sampler.pick(&logits)).collect()
        };
        assert_eq!(greedy(Sampling::GREEDY, &[]), [0, 0, 0, 0]);
        // Each token seen loses 1 once: 2 → 1 < 1.6, then 1.6 → 0.6 < 1.1, then 1.1 → 0.1 < 1.
        assert_eq!(greedy(Sampling { presence_penalty: 1.0, ..Sampling::GREEDY }, &[]), [0, 1, 2, 0]);
        // 0.3 per time: 2 → 1.7 > 1.6, → 1.4 < 1.6, then 1.6 → 1.3 < 1.4.
        assert_eq!(greedy(Sampling { frequency_penalty: 0.3, ..Sampling::GREEDY }, &[]), [0, 0, 1, 0]);
        // A repetition penalty of 2 halves every token seen, once: the prompt's 0 to 1, then
        // 1.6 to 0.8 and 1.1 to 0.55, which leaves 0 the likeliest.
        assert_eq!(greedy(Sampling { repetition_penalty: 2.0, ..Sampling::GREEDY }, &[0]), [1, 2, 0, 0]);
    }
}
