//! Continuous batching: one session of a decode step serves many requests at once, each in a
//! slot (a row of the batch) of its own. Every call feeds each busy slot its next tokens — its
//! prompt, then the tokens it generates — and a request that is done leaves its slot at once,
//! for the next one waiting.
//!
//! A step that takes one token a call feeds the prompts one token a call. A prefill program
//! (token ids `[B, T]`, `T` dynamic, compiled with size buckets) takes a chunk of each prompt
//! a call, up to its largest bucket, while the other slots go on decoding (chunked prefill): a
//! row with fewer tokens than the call's `T` is padded with its last token, its logits are
//! read at its last real token, and what the padding writes into its caches, past its own
//! position, is overwritten before it is read (the contract below). The padding's positions
//! must lie in the caches, so `T` never takes a row past the positions the caches hold; where
//! they are not known, or the step has one position for all rows, every row gets real tokens
//! only (`T` is the fewest any busy slot has left).
//!
//! A step that takes a position per row (`[B]`, `[B, 1]`) lets each slot be at its own
//! position: a request takes a free slot at any call and starts at position 0 while the others
//! go on. A step with one position for all rows (`[1]`, `[T]`) batches requests that start
//! together: the next ones wait until every slot is free (a wave); within a wave, prompts of
//! different lengths still share the calls, the shorter ones generating while the longer ones
//! are still fed.
//!
//! A slot is not cleared between requests: a decode step reads its caches through a causal
//! mask up to the position it writes, and a request writes every position up to its own before
//! it reads it, so what an earlier request left beyond is never read. This holds for caches
//! read by position (gpt-fast's, transformers' static caches); it is the contract of the steps
//! `generate` knows. A free slot is fed token 0 at position 0 (or the wave's position), whose
//! result is dropped.
//!
//! An encoder–decoder model ([`Batcher::seq2seq`]) runs its encoder on a request's prompt as
//! the request takes the decoder's slot (the session holds the states for its calls, its caches
//! reset), then feeds the decoder the start token and what it generates.
//!
//! The criterion of correctness: every request gets the tokens it would get alone.

use std::collections::VecDeque;
use std::time::Instant;

use serde::Serialize;

use torchtpu_passes::ir::DType;

use super::step::{feed, integers, step, Logprobs, Sampler, Sampling, Step};
use super::{RunError, Session};
use crate::Error;

/// One request: a prompt and how to continue it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Token ids, at least one.
    pub prompt: Vec<i64>,
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
    /// Tokens that end the request when generated (the one generated is kept).
    pub stop: Vec<i64>,
    /// How its tokens are chosen.
    pub sampling: Sampling,
    /// With each token, its log probability and those of this many likeliest tokens.
    pub logprobs: Option<usize>,
    /// The seed of its sampling.
    pub seed: u64,
}

/// A request that is done.
#[derive(Clone, Debug, Serialize)]
pub struct Finished {
    /// What [`Batcher::submit`] returned for it.
    pub id: u64,
    /// The tokens it generated.
    pub tokens: Vec<i64>,
    /// Calls it waited for a slot.
    pub waited: u64,
    /// Calls it took in its slot.
    pub calls: u64,
    /// It ended at a stop token, not at its `max_new_tokens`.
    pub stopped: bool,
}

/// What one call of the step gave.
#[derive(Debug, Default)]
pub struct Stepped {
    /// Each token generated, in slot order.
    pub tokens: Vec<NewToken>,
    /// The requests that are done.
    pub finished: Vec<Finished>,
}

/// A token one call generated.
#[derive(Debug)]
pub struct NewToken {
    /// Its request's id.
    pub request: u64,
    /// The token's id.
    pub token: i64,
    /// When the request asks for them.
    pub logprobs: Option<Logprobs>,
}

/// A request in a slot.
struct Active {
    id: u64,
    request: Request,
    /// Tokens fed so far, which is the position of the next one.
    fed: usize,
    tokens: Vec<i64>,
    sampler: Sampler,
    waited: u64,
    calls: u64,
}

impl Active {
    /// Token `i` of the request's sequence: its prompt, then what it generated.
    fn token_at(&self, i: usize) -> i64 {
        let prompt = &self.request.prompt;
        if i < prompt.len() {
            prompt[i]
        } else {
            self.tokens[i - prompt.len()]
        }
    }

    /// Tokens of the sequence not fed yet: the rest of the prompt, or the one just generated.
    fn unfed(&self) -> usize {
        (self.request.prompt.len() + self.tokens.len()).saturating_sub(self.fed)
    }
}

/// The figures of a batcher's work so far.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    /// Calls of the step.
    pub calls: u64,
    /// Slots busy summed over the calls: over `calls × slots`, the occupancy.
    pub busy_slots: u64,
    /// Tokens generated (prompts not counted).
    pub new_tokens: u64,
    /// Time in the calls.
    pub ms: f64,
}

/// The slots of one session's decode step and the requests waiting for them.
pub struct Batcher {
    step: Step,
    slots: Vec<Option<Active>>,
    queue: VecDeque<(u64, Request, u64)>,
    next_id: u64,
    figures: Figures,
    /// The encoder of an encoder–decoder model.
    encoder: Option<Encoder>,
}

/// An encoder–decoder model's encoder, run on a request's prompt as it takes the slot.
struct Encoder {
    /// `None` in a batcher that only checks requests ([`Batcher::checker`]).
    session: Option<Session>,
    /// The decoder's first token.
    start_token: i64,
    /// The prompt lengths it takes, at least and at most.
    lengths: (usize, usize),
    /// Why the encoder's guards refuse a prompt of a length in that range, where they do.
    refuses: std::sync::Arc<dyn Fn(usize) -> Option<String> + Send + Sync>,
}

impl Batcher {
    /// A batcher for `session`'s decode step (see `generate` for the steps it knows); as many
    /// slots as its batch.
    pub fn new(session: &Session) -> Result<Batcher, Error> {
        Ok(Batcher::of(step(session.manifest())?, None))
    }

    /// A batcher for an encoder–decoder model (see `seq2seq`): `decoder`'s step, one request
    /// at a time, each request's prompt encoded by `encoder` as it takes the slot (once), then
    /// its tokens decoded from `start_token`. Its encoder takes token ids.
    pub fn seq2seq(decoder: &Session, encoder: Session, start_token: i64) -> Result<Batcher, Error> {
        let step = super::seq2seq::decoder_step(decoder)?;
        let lengths = super::seq2seq::prompt_lengths(&encoder)?;
        let refuses = super::seq2seq::refused_lengths(&encoder);
        if start_token < 0 || start_token >= step.vocab {
            let reason =
                format!("the start token {start_token} is not an id of the vocabulary (0 to {})", step.vocab - 1);
            return Err(RunError::Decode(reason).into());
        }
        Ok(Batcher::of(step, Some(Encoder { session: Some(encoder), start_token, lengths, refuses })))
    }

    fn of(step: Step, encoder: Option<Encoder>) -> Batcher {
        let slots = (0..step.batch.max(1)).map(|_| None).collect();
        Batcher { step, slots, queue: VecDeque::new(), next_id: 0, figures: Figures::default(), encoder }
    }

    /// A batcher with this one's step and limits and no session, for checking requests
    /// ([`Batcher::check`]) where the sessions are elsewhere.
    pub fn checker(&self) -> Batcher {
        let encoder = self.encoder.as_ref().map(|e| Encoder {
            session: None,
            start_token: e.start_token,
            lengths: e.lengths,
            refuses: e.refuses.clone(),
        });
        Batcher::of(self.step.clone(), encoder)
    }

    /// The ids the step's logits cover.
    pub fn vocab(&self) -> i64 {
        self.step.vocab
    }

    /// How many requests run at once.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether each slot is at a position of its own (requests join at any call), or all at
    /// one (requests join in waves).
    pub fn continuous(&self) -> bool {
        self.step.per_row()
    }

    /// Why `request` cannot be served: no prompt token or no new token asked for, a token id
    /// outside the vocabulary, or more positions than the caches hold.
    pub fn check(&self, request: &Request) -> Result<(), String> {
        if request.prompt.is_empty() || request.max_new_tokens == 0 {
            return Err("a request needs at least one prompt token and one new token".into());
        }
        if let Some(&id) = request.prompt.iter().find(|&&t| t < 0 || t >= self.step.vocab) {
            return Err(format!("token id {id} in the prompt: the vocabulary has ids 0 to {}", self.step.vocab - 1));
        }
        if let Some(e) = &self.encoder {
            let (t, (min, max)) = (request.prompt.len(), e.lengths);
            if t < min || t > max {
                return Err(format!("{t} prompt tokens: the encoder takes {min} to {max}"));
            }
            if let Some(why) = (e.refuses)(t) {
                return Err(format!("{t} prompt tokens: {why}"));
            }
        }
        // The decoder's positions: the prompt's and the new tokens', or (with an encoder) the
        // new tokens' only.
        let prompt = if self.encoder.is_some() { 0 } else { request.prompt.len() };
        let needed = prompt.saturating_add(request.max_new_tokens);
        if let Some(limit) = self.step.positions.filter(|&l| needed as i64 > l) {
            if self.encoder.is_some() {
                return Err(format!("{needed} new tokens need as many positions; the decoder's caches hold {limit}"));
            }
            let (t, n) = (request.prompt.len(), request.max_new_tokens);
            return Err(format!("{t} prompt tokens and {n} new ones need {needed} positions; the caches hold {limit}"));
        }
        Ok(())
    }

    /// Queues `request`, after checking it ([`Batcher::check`]); its id.
    pub fn submit(&mut self, request: Request) -> Result<u64, Error> {
        self.check(&request).map_err(RunError::Decode)?;
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back((id, request, self.figures.calls));
        Ok(id)
    }

    /// Whether no request is waiting or running.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(Option::is_none)
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Slots holding a request.
    pub fn busy(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// Drops request `id`, waiting or in its slot (a client that went away); whether it was
    /// there. An encoder–decoder request's states leave `session`'s devices with it.
    pub fn cancel(&mut self, session: &mut Session, id: u64) -> bool {
        if let Some(at) = self.queue.iter().position(|(q, _, _)| *q == id) {
            self.queue.remove(at);
            return true;
        }
        let Some(slot) = self.slots.iter_mut().find(|s| s.as_ref().is_some_and(|a| a.id == id)) else {
            return false;
        };
        *slot = None;
        if self.encoder.is_some() {
            session.release_inputs();
        }
        true
    }

    /// The figures so far.
    pub fn figures(&self) -> &Figures {
        &self.figures
    }

    /// One call of the step: waiting requests take the free slots they may, every busy slot is
    /// fed its next token, and the requests that are done leave.
    pub fn step(&mut self, session: &mut Session) -> Result<Stepped, Error> {
        self.admit(session)?;
        let busy = self.busy() as u64;
        if busy == 0 {
            return Ok(Stepped::default());
        }
        let n = self.tokens_per_call();
        let idle_at =
            if self.continuous() { 0 } else { self.slots.iter().flatten().map(|a| a.fed).next().unwrap_or(0) };
        let (mut ids, mut at, mut real) = (Vec::new(), Vec::new(), Vec::new());
        for slot in &self.slots {
            let (from, k) = slot.as_ref().map_or((idle_at, 1), |a| (a.fed, a.unfed().min(n)));
            // A row's real tokens, then its last one again as padding.
            ids.extend((0..n).map(|i| slot.as_ref().map_or(0, |a| a.token_at(from + i.min(k - 1)))));
            at.push(from as i64);
            real.push(k);
        }
        let started = Instant::now();
        let logits = feed(session, &self.step, &ids, &at, n, &real)?;
        self.figures.ms += started.elapsed().as_secs_f64() * 1e3;
        self.figures.calls += 1;
        self.figures.busy_slots += busy;
        let mut stepped = Stepped::default();
        for ((slot, row), k) in self.slots.iter_mut().zip(&logits).zip(real) {
            let Some(a) = slot else { continue };
            a.fed += k;
            a.calls += 1;
            if a.unfed() > 0 {
                continue;
            }
            let token = a.sampler.pick(row);
            a.tokens.push(token);
            self.figures.new_tokens += 1;
            let logprobs = a.request.logprobs.map(|k| Logprobs::of(row, token, k));
            stepped.tokens.push(NewToken { request: a.id, token, logprobs });
            let stopped = a.request.stop.contains(&token);
            if stopped || a.tokens.len() >= a.request.max_new_tokens {
                if self.encoder.is_some() {
                    session.release_inputs();
                }
                if let Some(a) = slot.take() {
                    let (id, tokens, waited, calls) = (a.id, a.tokens, a.waited, a.calls);
                    stepped.finished.push(Finished { id, tokens, waited, calls, stopped });
                }
            }
        }
        Ok(stepped)
    }

    /// The tokens each row takes in the next call (its `T`): 1 for a step that takes one; for a
    /// prefill program, as many as the busiest slot has left, up to its largest bucket, kept
    /// within the caches' positions for every row (padding included); where those are not
    /// known, or the rows share one position, the fewest any busy slot has left.
    /// A count the export's guards refuse is lowered to the next they allow.
    fn tokens_per_call(&self) -> usize {
        let left = || self.slots.iter().flatten().map(Active::unfed);
        let chunk = self.step.chunk.max(1);
        let n = match self.step.positions {
            Some(limit) if chunk > 1 && self.continuous() => {
                let room = self.slots.iter().map(|s| limit - s.as_ref().map_or(0, |a| a.fed as i64)).min();
                let room = usize::try_from(room.unwrap_or(1)).unwrap_or(1);
                left().max().unwrap_or(1).min(chunk).min(room).max(1)
            }
            _ => left().min().unwrap_or(1).min(chunk).max(1),
        };
        (1..=n).rev().find(|k| !self.step.refused.contains(k)).unwrap_or(n)
    }

    /// Waiting requests into free slots: any free slot when each is at its own position, else
    /// only when every slot is free (a new wave). With an encoder, a request's prompt is
    /// encoded as it takes the slot, and its states held by `session` for its calls.
    fn admit(&mut self, session: &mut Session) -> Result<(), Error> {
        if !self.continuous() && self.slots.iter().any(Option::is_some) {
            return Ok(());
        }
        let now = self.figures.calls;
        for slot in self.slots.iter_mut().filter(|s| s.is_none()) {
            let Some((id, mut request, queued)) = self.queue.pop_front() else { break };
            if let Some(e) = &mut self.encoder {
                let started = Instant::now();
                request.prompt = e.start(session, &self.step, &request.prompt)?;
                self.figures.ms += started.elapsed().as_secs_f64() * 1e3;
            }
            let sampler = Sampler::new(request.sampling, request.seed, &request.prompt);
            let waited = now - queued;
            *slot = Some(Active { id, request, fed: 0, tokens: Vec::new(), sampler, waited, calls: 0 });
        }
        Ok(())
    }
}

impl Encoder {
    /// Encodes `prompt`, and readies the decoder's `session` for it: its caches reset, the
    /// states held. What the decoder is fed first: the start token.
    fn start(&mut self, session: &mut Session, step: &Step, prompt: &[i64]) -> Result<Vec<i64>, Error> {
        let encoder = self.session.as_mut().ok_or_else(|| RunError::Decode("a checker runs no request".into()))?;
        let ids = integers(DType::I64, &[prompt.len() as i64], prompt);
        let (states, _) = super::seq2seq::encode(encoder, &ids)?;
        session.reset()?;
        super::seq2seq::hold_states(session, step, states)?;
        Ok(vec![self.start_token])
    }
}

/// What [`serve_all`] did.
#[derive(Clone, Debug, Serialize)]
pub struct Served {
    /// Every request, in the order given.
    pub requests: Vec<Finished>,
    /// Requests served at once.
    pub slots: usize,
    /// Whether requests joined at any call (a position per row) or in waves.
    pub continuous: bool,
    /// Calls, busy slots, tokens and time.
    pub figures: Figures,
    /// Busy slots over all the slots of all the calls.
    pub occupancy: f64,
    /// New tokens per second of calls.
    pub tokens_per_second: f64,
}

/// Runs every request of `requests` through a batcher over `session` until all are done.
pub fn serve_all(session: &mut Session, requests: Vec<Request>) -> Result<Served, Error> {
    let mut batcher = Batcher::new(session)?;
    let n = requests.len();
    for r in requests {
        batcher.submit(r)?;
    }
    session.load_executables()?;
    let mut done: Vec<Option<Finished>> = (0..n).map(|_| None).collect();
    while !batcher.is_idle() {
        for f in batcher.step(session)?.finished {
            let at = f.id as usize;
            done[at] = Some(f);
        }
    }
    let f = batcher.figures().clone();
    let all_slots = f.calls.saturating_mul(batcher.slots() as u64);
    Ok(Served {
        requests: done.into_iter().flatten().collect(),
        slots: batcher.slots(),
        continuous: batcher.continuous(),
        occupancy: if all_slots > 0 { f.busy_slots as f64 / all_slots as f64 } else { 0.0 },
        tokens_per_second: if f.ms > 0.0 { f.new_tokens as f64 * 1e3 / f.ms } else { 0.0 },
        figures: f,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefill program whose export excludes 16 tokens a call (`L['input_ids'].size()[1] != 16`):
    /// a slot with 20 tokens to feed gets 15, not 16; with 16 left it gets 15 then 1.
    #[test]
    fn a_call_takes_no_token_count_the_guards_exclude() {
        let step = Step {
            ids: 0,
            pos: 1,
            states: None,
            pos_dims: vec![Some(1), None],
            pos_dtype: DType::I64,
            ids_dtype: DType::I64,
            logits: 0,
            logits_per_token: true,
            vocab: 8,
            batch: 1,
            chunk: 16,
            positions: Some(64),
            refused: [16].into_iter().collect(),
        };
        let mut batcher = Batcher::of(step, None);
        let request = |n: usize| Request {
            prompt: vec![1; n],
            max_new_tokens: 1,
            stop: vec![],
            sampling: Sampling::GREEDY,
            logprobs: None,
            seed: 0,
        };
        for (prompt, fed, want) in [(20, 0, 15), (16, 0, 15), (16, 15, 1), (12, 0, 12)] {
            batcher.slots[0] = Some(Active {
                id: 0,
                request: request(prompt),
                fed,
                tokens: vec![],
                sampler: Sampler::new(Sampling::GREEDY, 0, &[]),
                waited: 0,
                calls: 0,
            });
            assert_eq!(batcher.tokens_per_call(), want, "{prompt} tokens, {fed} fed");
        }
    }
}
