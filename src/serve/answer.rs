//! Answers: a request's choices (`n` of them, each a request of its own to the scheduler with
//! its own seed), sent whole once every choice is done, or as server-sent events, a chunk per
//! token of whichever choice it came to, each chunk naming its choice's `index`.
//!
//! Streamed, with one choice, its last chunk also carries the usage; with
//! `stream_options.include_usage`, a chunk with no choices and the usage of all of them follows
//! the last choice's end; then `[DONE]`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{BoxStream, StreamExt};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error;
use super::logprobs::{self, Entry};
use super::output::Output;
use super::scheduler::Event;
use super::text::Text;
use crate::run::Finished;

/// What every response and chunk of one request repeats.
pub(super) struct Head {
    pub id: String,
    /// Answered as a chat completion (a message, or a delta per chunk).
    pub chat: bool,
    pub created: u64,
    pub model: String,
    pub prompt_tokens: usize,
    /// Streamed: end with a chunk of the usage alone (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The request asked for log probabilities.
    pub logprobs: bool,
    /// The tokenizer, for the text of each token whose log probability is given.
    pub text: Option<Arc<Text>>,
}

/// One choice in flight.
pub(super) struct Choice {
    /// Where its tokens come from.
    pub rx: UnboundedReceiver<Event>,
    /// Its text so far.
    pub output: Output,
    /// Set when a stop string ends it: the scheduler frees its slot.
    pub stopped: Arc<AtomicBool>,
}

impl Head {
    /// Choice `index` of `text`, the text of the tokens `ids` (with the log probabilities of
    /// `logged` when asked for): whole, or its chunk `chunk` of a stream (a chat stream names
    /// the assistant's role in each choice's first delta).
    fn choice(
        &self,
        index: usize,
        text: String,
        ids: &[i64],
        logged: &[Entry],
        finish: Option<&str>,
        chunk: Option<usize>,
    ) -> Value {
        let lp = match (self.logprobs, self.chat) {
            (false, _) => Value::Null,
            (true, false) => logprobs::completion(logged, self.text.as_deref()),
            (true, true) => logprobs::chat(logged, self.text.as_deref()),
        };
        let mut choice = match (self.chat, chunk) {
            (false, _) => json!({"text": text, "token_ids": ids}),
            (true, None) => json!({"message": {"role": "assistant", "content": text}}),
            (true, Some(0)) => json!({"delta": {"role": "assistant", "content": text}}),
            (true, Some(_)) => json!({"delta": {"content": text}}),
        };
        choice["index"] = json!(index);
        choice["logprobs"] = lp;
        choice["finish_reason"] = json!(finish);
        choice
    }

    /// The object around `choices`: a whole answer, or a chunk of a stream.
    fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Map<String, Value> {
        let object = match (self.chat, chunk) {
            (false, _) => "text_completion",
            (true, false) => "chat.completion",
            (true, true) => "chat.completion.chunk",
        };
        let mut o = Map::new();
        o.insert("id".into(), json!(self.id));
        o.insert("object".into(), json!(object));
        o.insert("created".into(), json!(self.created));
        o.insert("model".into(), json!(self.model));
        o.insert("choices".into(), Value::Array(choices));
        o
    }

    fn usage(&self, generated: usize) -> Value {
        let prompt = self.prompt_tokens;
        json!({"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated})
    }
}

/// Why a done choice ended: at a stop string of its text or a stop token (`stop`), else at its
/// length.
fn finish_reason(f: &Finished, output: &Output) -> &'static str {
    if f.stopped || output.stopped() {
        "stop"
    } else {
        "length"
    }
}

/// What one choice came to.
struct Whole {
    text: String,
    tokens: Vec<i64>,
    logged: Vec<Entry>,
    finish: &'static str,
}

/// Choice `c` once done (or at a stop string); the message of a call that failed.
async fn collect(mut c: Choice) -> Result<Whole, String> {
    let (mut text, mut tokens, mut logged) = (String::new(), Vec::new(), Vec::new());
    while let Some(event) = c.rx.recv().await {
        match event {
            Event::Token(t, lp) => {
                tokens.push(t);
                logged.extend(lp.map(|logprobs| Entry { token: t, logprobs, offset: c.output.offset() }));
                text.push_str(&c.output.push(t));
                if c.output.stopped() {
                    c.stopped.store(true, Ordering::SeqCst);
                    return Ok(Whole { text, tokens, logged, finish: "stop" });
                }
            }
            Event::Done(f) => {
                text.push_str(&c.output.finish());
                let finish = finish_reason(&f, &c.output);
                return Ok(Whole { text, tokens: f.tokens, logged, finish });
            }
            Event::Failed(message) => return Err(message),
        }
    }
    Err("the scheduler stopped".into())
}

/// The whole answer, once every choice is done.
pub(super) async fn whole(head: Head, choices: Vec<Choice>) -> Response {
    let done = futures_util::future::join_all(choices.into_iter().map(collect)).await;
    let (mut values, mut generated) = (Vec::new(), 0);
    for (index, d) in done.into_iter().enumerate() {
        match d {
            Ok(d) => {
                generated += d.tokens.len();
                values.push(head.choice(index, d.text, &d.tokens, &d.logged, Some(d.finish), None));
            }
            Err(message) => return error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message),
        }
    }
    let mut o = head.envelope(false, values);
    o.insert("usage".into(), head.usage(generated));
    axum::Json(Value::Object(o)).into_response()
}

/// What a choice's stream gives.
enum Piece {
    /// A choice's chunk; with the tokens it generated when it is its last.
    Chunk(Value, Option<usize>),
    Failed(String),
}

/// Choice `index` as chunks: one per token (the text it lets go, possibly none while a
/// character or a stop string is undecided), a last one with the text left and the finish
/// reason. A stop string ends it at the token that completes it.
fn pieces(head: Arc<Head>, index: usize, c: Choice) -> BoxStream<'static, Piece> {
    futures_util::stream::unfold(Some((head, c, 0usize)), move |state| async move {
        let (head, mut c, sent) = state?;
        let piece = match c.rx.recv().await {
            Some(Event::Token(t, lp)) => {
                let logged: Vec<Entry> =
                    lp.map(|logprobs| Entry { token: t, logprobs, offset: c.output.offset() }).into_iter().collect();
                let text = c.output.push(t);
                let stopped = c.output.stopped();
                let value = head.choice(index, text, &[t], &logged, stopped.then_some("stop"), Some(sent));
                if !stopped {
                    return Some((Piece::Chunk(value, None), Some((head, c, sent + 1))));
                }
                c.stopped.store(true, Ordering::SeqCst);
                Piece::Chunk(value, Some(sent + 1))
            }
            Some(Event::Done(f)) => {
                let rest = c.output.finish();
                let value = head.choice(index, rest, &[], &[], Some(finish_reason(&f, &c.output)), Some(sent));
                Piece::Chunk(value, Some(f.tokens.len()))
            }
            Some(Event::Failed(message)) => Piece::Failed(message),
            None => Piece::Failed("the scheduler stopped".into()),
        };
        Some((piece, None))
    })
    .boxed()
}

/// Where a stream of chunks is.
enum Phase {
    /// Choices are still going, this many.
    Choices(usize),
    /// Every choice ended, having generated this many tokens: the usage chunk follows.
    Usage(usize),
    /// `[DONE]` follows.
    Done,
    Over,
}

/// The answer as server-sent events (see the module doc).
pub(super) fn stream(head: Head, choices: Vec<Choice>) -> BoxStream<'static, Result<SseEvent, Infallible>> {
    let head = Arc::new(head);
    let n = choices.len();
    let merged = futures_util::stream::select_all(
        choices.into_iter().enumerate().map(|(index, c)| pieces(head.clone(), index, c)),
    );
    let data = |v: Value| Ok(SseEvent::default().data(v.to_string()));
    let failed = |message: String| json!({"error": {"message": message, "type": "server_error", "code": null}});
    futures_util::stream::unfold((head, merged, 0usize, Phase::Choices(n)), move |state| async move {
        let (head, mut merged, generated, phase) = state;
        let (event, generated, next) = match phase {
            Phase::Over => return None,
            Phase::Done => (Ok(SseEvent::default().data("[DONE]")), generated, Phase::Over),
            Phase::Usage(all) => {
                let mut o = head.envelope(true, Vec::new());
                o.insert("usage".into(), head.usage(all));
                (data(Value::Object(o)), generated, Phase::Done)
            }
            Phase::Choices(left) => match merged.next().await {
                Some(Piece::Chunk(value, None)) => {
                    (data(Value::Object(head.envelope(true, vec![value]))), generated, Phase::Choices(left))
                }
                Some(Piece::Chunk(value, Some(tokens))) => {
                    let mut o = head.envelope(true, vec![value]);
                    if n == 1 {
                        o.insert("usage".into(), head.usage(tokens));
                    }
                    let (generated, left) = (generated + tokens, left - 1);
                    let next = match (left, head.include_usage) {
                        (0, true) => Phase::Usage(generated),
                        (0, false) => Phase::Done,
                        _ => Phase::Choices(left),
                    };
                    (data(Value::Object(o)), generated, next)
                }
                Some(Piece::Failed(message)) => (data(failed(message)), generated, Phase::Over),
                None => (data(failed("the scheduler stopped".into())), generated, Phase::Over),
            },
        };
        Some((event, (head, merged, generated, next)))
    })
    .boxed()
}
