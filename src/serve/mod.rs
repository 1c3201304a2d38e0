//! `serve`: an artifact of a decode step behind an HTTP server that speaks the OpenAI
//! completions API with token ids (`POST /v1/completions`, streamed as server-sent events when
//! asked), with `GET /health`, `GET /metrics` (Prometheus text) and `GET /v1/models`.
//!
//! One thread owns the session and runs every request through a [`Batcher`]
//! (`scheduler`): requests share the decode step's rows, joining and leaving at any call. The
//! handlers (axum on one tokio thread) parse and check a request, hand it over and relay its
//! tokens. The requests accepted and not done are bounded (the slots plus `max_waiting`):
//! beyond, a request gets 429; once shutting down, 503. A shutdown (the future given, on the
//! command line SIGINT or SIGTERM) stops accepting connections and lets the requests in flight
//! finish.
//!
//! With `admin`, `POST /admin/weights` swaps the weights for another checkpoint's between
//! requests (the scheduler lets the requests in flight finish, swaps, then takes the others).
//!
//! With a tokenizer (`text`), a prompt may be text and a completion's `text` is the text of its
//! tokens; without one, a prompt is token ids and a completion's `text` is its token ids in
//! decimal, separated by spaces. `token_ids` holds the ids as numbers either way. With a chat
//! template too (`chat`), `POST /v1/chat/completions` takes a conversation, answered in the
//! chat API's shape (a message, or a delta per streamed chunk).

mod chat;
mod output;
mod scheduler;
mod text;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::run::{Batcher, Finished, Request, Session};
use crate::Error;
use chat::Chat;
use output::Output;
use scheduler::{Event, Job, Metrics};
use text::Text;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where to listen (port 0: any free port, told to `ready`).
    pub addr: SocketAddr,
    /// Requests that may wait for a slot; one more gets 429.
    pub max_waiting: usize,
    /// The name the API gives the model (`model`).
    pub model: String,
    /// Offer `POST /admin/weights`, which swaps the weights for a checkpoint file on this
    /// machine: for a server that only trusted clients reach.
    pub admin: bool,
    /// A Hugging Face `tokenizer.json`: prompts may be text, completions come with their text.
    pub tokenizer: Option<std::path::PathBuf>,
    /// A chat template (a `.jinja` file or a `tokenizer_config.json`), for
    /// `POST /v1/chat/completions`; it needs the tokenizer.
    pub chat_template: Option<std::path::PathBuf>,
}

/// What a server did, once shut down.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ServeSummary {
    /// Requests completed (at their length or a stop token).
    pub completed: u64,
    /// Requests whose client went away before they were done.
    pub cancelled: u64,
    /// Tokens generated.
    pub tokens: u64,
}

/// What the handlers share.
struct Shared {
    /// The scheduler's queue; `None` once the server stops.
    jobs: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    /// Checks requests as the scheduler's batcher will (vocabulary, positions).
    checker: Batcher,
    metrics: Arc<Metrics>,
    /// Requests accepted and not done, at most.
    limit: usize,
    model: String,
    next_id: AtomicU64,
    text: Option<Arc<Text>>,
    chat: Option<Chat>,
}

/// Serves `session` until `shutdown` completes, then lets the requests in flight finish;
/// `ready` is told the address once the executables are loaded and the server listens.
pub fn serve(
    session: Session,
    opts: &ServeOptions,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ServeSummary, Error> {
    let batcher = Batcher::new(&session)?;
    serve_with(session, batcher, opts, ready, shutdown)
}

/// [`serve`] through `batcher` (one of `session`'s step: an encoder–decoder model's, say).
pub fn serve_with(
    mut session: Session,
    batcher: Batcher,
    opts: &ServeOptions,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ServeSummary, Error> {
    let checker = batcher.checker();
    let text = opts.tokenizer.as_deref().map(|path| Text::load(path, checker.vocab()).map(Arc::new)).transpose()?;
    let chat = match (&opts.chat_template, &text) {
        (Some(path), Some(_)) => Some(Chat::load(path)?),
        (Some(_), None) => {
            return Err(Error::bad_input("a chat template needs the model's tokenizer (`--tokenizer`)".into()));
        }
        (None, _) => None,
    };
    session.load_executables()?;
    let (jobs, queue) = std::sync::mpsc::channel();
    let metrics = Arc::new(Metrics::default());
    let limit = batcher.slots().saturating_add(opts.max_waiting);
    let shared = Arc::new(Shared {
        jobs: Mutex::new(Some(jobs)),
        checker,
        metrics: metrics.clone(),
        limit,
        model: opts.model.clone(),
        next_id: AtomicU64::new(0),
        text,
        chat,
    });
    let io = |reason: std::io::Error| Error::Io { path: format!("http://{}", opts.addr), reason: reason.to_string() };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io)?;
    let worker_metrics = metrics.clone();
    let worker = std::thread::spawn(move || scheduler::run(session, batcher, queue, &worker_metrics));
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(opts.addr).await?;
        ready(listener.local_addr()?);
        let closing = metrics.clone();
        let stop = async move {
            shutdown.await;
            closing.closing.store(true, Ordering::SeqCst);
        };
        // Each chunk of a streamed answer goes out as it is written: without TCP_NODELAY, Nagle's
        // algorithm holds it back for the client's delayed ACK (about 40 ms a chunk on a kept
        // connection, which the `openai` client keeps).
        let listener = axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
            let _ = stream.set_nodelay(true);
        });
        axum::serve(listener, router(shared.clone(), opts.admin)).with_graceful_shutdown(stop).await
    });
    // No request comes any more: the scheduler finishes those it holds and stops.
    shared.jobs.lock().map(|mut j| j.take()).ok();
    let _ = worker.join();
    served.map_err(io)?;
    let count = |a: &AtomicU64| a.load(Ordering::SeqCst);
    Ok(ServeSummary {
        completed: count(&metrics.completed),
        cancelled: count(&metrics.cancelled),
        tokens: count(&metrics.generated_tokens),
    })
}

fn router(shared: Arc<Shared>, admin: bool) -> Router {
    let router = if admin { Router::new().route("/admin/weights", post(swap_weights)) } else { Router::new() };
    router
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such route; see /v1/completions".into()) })
        .with_state(shared)
}

/// An OpenAI-style error response.
fn error(status: StatusCode, kind: &str, message: String) -> Response {
    (status, axum::Json(json!({"error": {"message": message, "type": kind, "code": null}}))).into_response()
}

async fn completions(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let parsed = parse(&body, &shared.model, shared.text.as_deref());
    respond(&shared, parsed, false).await
}

/// `POST /v1/chat/completions`: the conversation through the chat template, then as a
/// completion of that text; answered in the chat API's shape.
async fn chat_completions(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let parsed = match (&shared.chat, shared.text.as_deref()) {
        (Some(chat), Some(text)) => parse_chat(&body, &shared.model, text, chat),
        _ => Err("chat needs a chat template and the model's tokenizer, which this server does not have \
                  (`serve --tokenizer ... --chat-template ...`): use /v1/completions"
            .into()),
    };
    respond(&shared, parsed, true).await
}

/// Runs a parsed request (`chat`: answered as a chat completion) and answers it.
async fn respond(shared: &Shared, parsed: Result<Completion, String>, chat: bool) -> Response {
    let m = &shared.metrics;
    if m.closing.load(Ordering::SeqCst) {
        m.rejected.fetch_add(1, Ordering::Relaxed);
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the server is shutting down".into());
    }
    let parsed = parsed.and_then(|c| shared.checker.check(&c.request).map(|()| c));
    let completion = match parsed {
        Ok(c) => c,
        Err(message) => {
            m.invalid.fetch_add(1, Ordering::Relaxed);
            return error(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        }
    };
    if m.outstanding.fetch_add(1, Ordering::SeqCst) >= shared.limit {
        m.outstanding.fetch_sub(1, Ordering::SeqCst);
        m.rejected.fetch_add(1, Ordering::Relaxed);
        let message = format!("{} requests are in flight, the most this server takes; try again later", shared.limit);
        return error(StatusCode::TOO_MANY_REQUESTS, "overloaded", message);
    }
    let (events, rx) = tokio::sync::mpsc::unbounded_channel();
    let prompt = completion.request.prompt.clone();
    let stopped = Arc::new(AtomicBool::new(false));
    let job = Job::Request { request: completion.request, events, accepted: Instant::now(), stopped: stopped.clone() };
    if !shared.hand(job) {
        m.outstanding.fetch_sub(1, Ordering::SeqCst);
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the server is shutting down".into());
    }
    let head = Head {
        id: format!("{}-{}", if chat { "chatcmpl" } else { "cmpl" }, shared.next_id.fetch_add(1, Ordering::Relaxed)),
        chat,
        created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        model: shared.model.clone(),
        prompt_tokens: prompt.len(),
        stopped,
    };
    let output = Output::new(shared.text.as_ref().map(|t| t.stream(&prompt)), completion.stops);
    if completion.stream {
        return Sse::new(stream(head, rx, output)).into_response();
    }
    whole(head, rx, output).await
}

impl Shared {
    /// Hands `job` to the scheduler; false once the server stops.
    fn hand(&self, job: Job) -> bool {
        self.jobs.lock().ok().and_then(|j| j.as_ref().map(|j| j.send(job).is_ok())).unwrap_or(false)
    }
}

/// `POST /admin/weights` `{"checkpoint": PATH}`: the weights of another checkpoint of the same
/// program (see `Session::swap_weights`), taken once the requests in flight are done; those
/// that come meanwhile wait. A checkpoint refused leaves the weights as they were.
async fn swap_weights(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(path) =
        v.get("checkpoint").and_then(Value::as_str).filter(|_| v.as_object().is_some_and(|o| o.len() == 1))
    else {
        let message = "the body must be {\"checkpoint\": PATH}, a `.pt2` or `.safetensors` on the server's machine";
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", message.into());
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    if !shared.hand(Job::Swap { checkpoint: path.into(), reply }) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the server is shutting down".into());
    }
    match answer.await {
        Ok(Ok(())) => axum::Json(json!({"status": "swapped", "checkpoint": path})).into_response(),
        Ok(Err(message)) => error(StatusCode::BAD_REQUEST, "invalid_request_error", message),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the scheduler stopped".into()),
    }
}

/// What every response and chunk of one completion repeats.
struct Head {
    id: String,
    /// Answered as a chat completion (a message, or a delta per chunk).
    chat: bool,
    created: u64,
    model: String,
    prompt_tokens: usize,
    /// Set when a stop string ends the completion: the scheduler frees its slot.
    stopped: Arc<AtomicBool>,
}

impl Head {
    /// The answer of `text`, the text of the tokens `ids`: whole, or chunk `chunk` of a stream
    /// (a chat stream names the assistant's role in its first delta).
    fn object(&self, text: String, ids: &[i64], finish: Option<&str>, chunk: Option<usize>) -> Map<String, Value> {
        let (object, choice) = match (self.chat, chunk) {
            (false, _) => (
                "text_completion",
                json!({"index": 0, "text": text, "token_ids": ids, "logprobs": null, "finish_reason": finish}),
            ),
            (true, None) => {
                let message = json!({"role": "assistant", "content": text});
                ("chat.completion", json!({"index": 0, "message": message, "logprobs": null, "finish_reason": finish}))
            }
            (true, Some(k)) => {
                let delta =
                    if k == 0 { json!({"role": "assistant", "content": text}) } else { json!({"content": text}) };
                (
                    "chat.completion.chunk",
                    json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}),
                )
            }
        };
        let mut o = Map::new();
        o.insert("id".into(), json!(self.id));
        o.insert("object".into(), json!(object));
        o.insert("created".into(), json!(self.created));
        o.insert("model".into(), json!(self.model));
        o.insert("choices".into(), json!([choice]));
        o
    }

    fn usage(&self, generated: usize) -> Value {
        let prompt = self.prompt_tokens;
        json!({"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated})
    }

    /// The completion ended at a stop string: no more tokens for it.
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

/// Why a done request ended: at a stop string of its text or a stop token (`stop`), else at
/// its length.
fn finish_reason(f: &Finished, output: &Output) -> &'static str {
    if f.stopped || output.stopped() {
        "stop"
    } else {
        "length"
    }
}

/// The whole completion, once done (or at a stop string).
async fn whole(head: Head, mut rx: UnboundedReceiver<Event>, mut output: Output) -> Response {
    let (mut text, mut tokens) = (String::new(), Vec::new());
    let answer = |text: String, tokens: &[i64], finish: &str| {
        let mut o = head.object(text, tokens, Some(finish), None);
        o.insert("usage".into(), head.usage(tokens.len()));
        axum::Json(Value::Object(o)).into_response()
    };
    while let Some(event) = rx.recv().await {
        match event {
            Event::Token(t) => {
                tokens.push(t);
                text.push_str(&output.push(t));
                if output.stopped() {
                    head.stop();
                    return answer(text, &tokens, "stop");
                }
            }
            Event::Done(f) => {
                text.push_str(&output.finish());
                return answer(text, &f.tokens, finish_reason(&f, &output));
            }
            Event::Failed(message) => return error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message),
        }
    }
    error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the scheduler stopped".into())
}

/// Where a stream of chunks is.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Tokens,
    /// The last chunk was sent: `[DONE]` follows.
    Done,
    Over,
}

/// The completion as server-sent events: a chunk per token (the text it lets go, possibly none
/// while a character or a stop string is undecided), a last one with the text left, the finish
/// reason and the usage, then `[DONE]`. A stop string ends it at the token that completes it.
fn stream(
    head: Head,
    rx: UnboundedReceiver<Event>,
    output: Output,
) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>> {
    let data = |v: Value| Ok(SseEvent::default().data(v.to_string()));
    let failed = |message: String| json!({"error": {"message": message, "type": "server_error", "code": null}});
    futures_util::stream::unfold((head, rx, output, 0usize, Phase::Tokens), move |state| async move {
        let (head, mut rx, mut output, sent, phase) = state;
        let (event, next) = match phase {
            Phase::Over => return None,
            Phase::Done => (Ok(SseEvent::default().data("[DONE]")), Phase::Over),
            Phase::Tokens => match rx.recv().await {
                Some(Event::Token(t)) => {
                    let piece = output.push(t);
                    let mut o = head.object(piece, &[t], output.stopped().then_some("stop"), Some(sent));
                    if !output.stopped() {
                        (data(Value::Object(o)), Phase::Tokens)
                    } else {
                        head.stop();
                        o.insert("usage".into(), head.usage(sent + 1));
                        (data(Value::Object(o)), Phase::Done)
                    }
                }
                Some(Event::Done(f)) => {
                    let rest = output.finish();
                    let mut o = head.object(rest, &[], Some(finish_reason(&f, &output)), Some(sent));
                    o.insert("usage".into(), head.usage(f.tokens.len()));
                    (data(Value::Object(o)), Phase::Done)
                }
                Some(Event::Failed(message)) => (data(failed(message)), Phase::Over),
                None => (data(failed("the scheduler stopped".into())), Phase::Over),
            },
        };
        Some((event, (head, rx, output, sent + 1, next)))
    })
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let model = json!({"id": shared.model, "object": "model", "owned_by": "torchtpu-compile"});
    axum::Json(json!({"object": "list", "data": [model]})).into_response()
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    let m = &shared.metrics;
    let status = if m.closing.load(Ordering::SeqCst) { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    let body = json!({
        "status": if status == StatusCode::OK { "ok" } else { "shutting down" },
        "slots": shared.checker.slots(),
        "busy": m.busy.load(Ordering::Relaxed),
        "waiting": m.waiting.load(Ordering::Relaxed),
    });
    (status, axum::Json(body)).into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let text = prometheus(&shared.metrics, shared.checker.slots());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// The counters in Prometheus' text format.
fn prometheus(m: &Metrics, slots: usize) -> String {
    use std::fmt::Write as _;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let outcomes = [
        ("completed", &m.completed),
        ("cancelled", &m.cancelled),
        ("failed", &m.failed),
        ("rejected", &m.rejected),
        ("invalid", &m.invalid),
    ];
    let by_outcome: Vec<(String, f64)> =
        outcomes.iter().map(|(o, a)| (format!("{{outcome=\"{o}\"}}"), get(a) as f64)).collect();
    let one = |v: f64| vec![(String::new(), v)];
    family("torchtpu_requests_total", "counter", "Requests by outcome.", &by_outcome);
    family(
        "torchtpu_prompt_tokens_total",
        "counter",
        "Prompt tokens of the requests taken.",
        &one(get(&m.prompt_tokens) as f64),
    );
    family("torchtpu_generated_tokens_total", "counter", "Tokens generated.", &one(get(&m.generated_tokens) as f64));
    family("torchtpu_slots", "gauge", "Requests the decode step serves at once.", &one(slots as f64));
    family("torchtpu_slots_busy", "gauge", "Slots holding a request.", &one(m.busy.load(Ordering::Relaxed) as f64));
    family(
        "torchtpu_requests_waiting",
        "gauge",
        "Requests waiting for a slot.",
        &one(m.waiting.load(Ordering::Relaxed) as f64),
    );
    family("torchtpu_step_calls_total", "counter", "Calls of the decode step.", &one(get(&m.calls) as f64));
    family(
        "torchtpu_step_busy_slots_total",
        "counter",
        "Busy slots summed over the calls (over calls times slots: the batch occupancy).",
        &one(get(&m.busy_slots_total) as f64),
    );
    for (name, help, sum, count) in [
        (
            "torchtpu_time_to_first_token_seconds",
            "From a request's arrival to its first token.",
            &m.first_token_us,
            &m.first_tokens,
        ),
        ("torchtpu_time_per_output_token_seconds", "Between a request's tokens.", &m.per_token_us, &m.per_tokens),
    ] {
        let samples = [("_sum".to_string(), get(sum) as f64 / 1e6), ("_count".to_string(), get(count) as f64)];
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
        for (suffix, v) in samples {
            let _ = writeln!(out, "{name}{suffix} {v}");
        }
    }
    out
}

/// A parsed completion request.
struct Completion {
    request: Request,
    stream: bool,
    /// Strings that end the completion's text (cut before them).
    stops: Vec<String>,
}

/// The fields `/v1/completions` takes.
const FIELDS: [&str; 18] = [
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "seed",
    "stream",
    "stop",
    "stop_token_ids",
    "n",
    "user",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "stream_options",
    "response_format",
    "echo",
    "best_of",
];

/// Parses a completion request's body, in the API's words where it is wrong; a text prompt
/// goes through `text`, when the server has a tokenizer.
fn parse(body: &[u8], model: &str, text: Option<&Text>) -> Result<Completion, String> {
    let v = request_object(body, model, &FIELDS)?;
    let o = v.as_object().ok_or("the body is not a JSON object")?;
    let prompt = match o.get("prompt") {
        None => return Err("`prompt` is missing: give token ids, a list of integers".into()),
        Some(Value::String(s)) => match text {
            Some(text) => text.encode(s)?,
            None => {
                let message = "`prompt` is text, which needs a tokenizer this server does not have (`serve \
                               --tokenizer`): give token ids";
                return Err(message.into());
            }
        },
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => match (text, a[0].as_str()) {
            (Some(text), Some(s)) => text.encode(s)?,
            _ => return Err("`prompt` is text, which needs a tokenizer this server does not have".into()),
        },
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_array() => ids(&a[0], "prompt")?,
        Some(p) => ids(p, "prompt")?,
    };
    options(o, prompt, text.is_some())
}

/// The fields `/v1/chat/completions` takes.
const CHAT_FIELDS: [&str; 18] = [
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "seed",
    "stream",
    "stop",
    "stop_token_ids",
    "n",
    "user",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "stream_options",
    "response_format",
];

/// A field, whether its value asks for nothing, and why another value is refused.
type Neutral = (&'static str, fn(&Value) -> bool, &'static str);

/// The fields clients send with a value that asks for nothing (what several send by default),
/// with the values that do and why they are refused: `top_p` 1 samples from the whole softmax,
/// as this server does; a penalty of 0 changes nothing; …
const NEUTRAL: [Neutral; 9] = [
    ("top_p", |v| v.as_f64() == Some(1.0), "nucleus sampling (`top_p` below 1) is not supported: give 1"),
    ("presence_penalty", |v| v.as_f64() == Some(0.0), "penalties are not supported: give 0"),
    ("frequency_penalty", |v| v.as_f64() == Some(0.0), "penalties are not supported: give 0"),
    ("logprobs", |v| matches!(v, Value::Bool(false)) || v.as_u64() == Some(0), "log probabilities are not returned"),
    ("top_logprobs", |v| v.as_u64() == Some(0), "log probabilities are not returned"),
    ("echo", |v| matches!(v, Value::Bool(false)), "`echo` (the prompt in the answer) is not supported: give false"),
    ("best_of", |v| v.as_u64() == Some(1), "`best_of` must be 1: one completion per request"),
    (
        "stream_options",
        |v| v.get("include_usage").is_none_or(|u| u == &Value::Bool(false)),
        "`stream_options.include_usage` is not supported: the usage chunk is not sent",
    ),
    (
        "response_format",
        |v| v.get("type").and_then(Value::as_str) == Some("text"),
        "only `response_format` {\"type\": \"text\"} is supported (no JSON modes)",
    ),
];

/// Parses a chat request: its `messages` through the chat template, then tokenized.
fn parse_chat(body: &[u8], model: &str, text: &Text, chat: &Chat) -> Result<Completion, String> {
    let mut v = request_object(body, model, &CHAT_FIELDS)?;
    let o = v.as_object_mut().ok_or("the body is not a JSON object")?;
    let messages = o.get("messages").ok_or("`messages` is missing: give the conversation")?;
    let prompt = text.encode_plain(&chat.render(messages)?)?;
    // The newer name of the same limit.
    if let Some(limit) = o.remove("max_completion_tokens") {
        o.insert("max_tokens".into(), limit);
    }
    options(o, prompt, true)
}

/// A request's body: a JSON object of `fields` only, for `model` if it names one.
fn request_object(body: &[u8], model: &str, fields: &[&str]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let o = v.as_object().ok_or("the body is not a JSON object")?;
    if let Some(k) = o.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(format!("unknown field `{k}`; the fields are {}", fields.join(", ")));
    }
    if let Some(m) = o.get("model").filter(|m| m.as_str() != Some(model)) {
        return Err(format!("model {m} is not served here; this server serves \"{model}\""));
    }
    Ok(v)
}

/// The options of a request for `prompt` (`tokenizer`: whether the server has one). A field
/// given as `null` is as if absent.
fn options(o: &Map<String, Value>, prompt: Vec<i64>, tokenizer: bool) -> Result<Completion, String> {
    static SEEDS: AtomicU64 = AtomicU64::new(0);
    let get = |name: &str| o.get(name).filter(|v| !v.is_null());
    for (name, asks_nothing, why) in NEUTRAL {
        if let Some(v) = get(name).filter(|v| !asks_nothing(v)) {
            return Err(format!("`{name}`: {v}: {why}"));
        }
    }
    let integer = |name: &str, default: u64| match get(name) {
        None => Ok(default),
        Some(v) => v.as_u64().ok_or(format!("`{name}` must be a non-negative integer, not {v}")),
    };
    let max_new_tokens =
        match get("max_tokens") {
            None => 16,
            Some(v) => v.as_u64().filter(|&n| n >= 1).and_then(|n| usize::try_from(n).ok()).ok_or(format!(
                "`max_tokens` must be a positive integer (the tokens to generate, at least 1), not {v}"
            ))?,
        };
    if integer("n", 1)? != 1 {
        return Err("`n` must be 1: one completion per request".into());
    }
    let temperature = match get("temperature") {
        None => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|t| (0.0..=100.0).contains(t))
            .ok_or(format!("`temperature` must be a number from 0 to 100, not {v}"))?,
    };
    let seed = integer("seed", SEEDS.fetch_add(1, Ordering::Relaxed))?;
    let stream = match get("stream") {
        None => false,
        Some(v) => v.as_bool().ok_or(format!("`stream` must be true or false, not {v}"))?,
    };
    let stop = match o.get("stop_token_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => ids(v, "stop_token_ids")?,
    };
    if let Some(u) = get("user").filter(|u| !u.is_string()) {
        return Err(format!("`user` must be a string, not {u}"));
    }
    let stops = stop_strings(o.get("stop"), tokenizer)?;
    Ok(Completion { request: Request { prompt, max_new_tokens, stop, temperature, seed }, stream, stops })
}

/// `stop`: a string or a list of up to 4, none empty; they are matched in the completion's
/// text, so they need a tokenizer.
fn stop_strings(v: Option<&Value>, tokenizer: bool) -> Result<Vec<String>, String> {
    let bad = || "`stop` must be a string or a list of up to 4 non-empty strings".to_string();
    let stops: Vec<String> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 4 => {
            a.iter().map(|s| s.as_str().map(str::to_string).ok_or_else(bad)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad()),
    };
    if stops.iter().any(String::is_empty) {
        return Err(bad());
    }
    if !stops.is_empty() && !tokenizer {
        return Err("`stop` strings are matched in the text, which needs a tokenizer this server does not have \
                    (`serve --tokenizer`): give `stop_token_ids`"
            .into());
    }
    Ok(stops)
}

/// A list of token ids.
fn ids(v: &Value, name: &str) -> Result<Vec<i64>, String> {
    let bad = || format!("`{name}` must be a list of token ids (integers)");
    v.as_array().ok_or_else(bad)?.iter().map(|t| t.as_i64().ok_or_else(bad)).collect()
}

#[cfg(test)]
mod tests {
    use super::{parse, Text};

    #[test]
    fn requests_are_read_and_wrong_ones_named() {
        let c = parse(br#"{"prompt": [5, 9], "max_tokens": 3, "temperature": 0, "stream": true}"#, "m", None).unwrap();
        assert_eq!((c.request.prompt, c.request.max_new_tokens, c.stream), (vec![5, 9], 3, true));
        let c = parse(br#"{"model": "m", "prompt": [[7]], "stop_token_ids": [2]}"#, "m", None).unwrap();
        assert_eq!((c.request.prompt, c.request.stop, c.request.max_new_tokens), (vec![7], vec![2], 16));
        // What clients send by default asks for nothing: taken, and `null` is as if absent.
        let defaults = br#"{"prompt": [7], "top_p": 1.0, "presence_penalty": 0, "frequency_penalty": 0.0,
            "logprobs": null, "n": 1, "echo": false, "best_of": 1, "stream_options": {"include_usage": false},
            "response_format": {"type": "text"}, "temperature": null, "max_tokens": null, "seed": null,
            "stream": null, "user": null, "stop": null}"#;
        let c = parse(defaults, "m", None).unwrap();
        assert_eq!((c.request.max_new_tokens, c.request.temperature, c.stream), (16, 1.0, false));
        for (body, message) in [
            (&br#"{"prompt": [1], "echo": true}"#[..], "`echo`: true: `echo` (the prompt in the answer) is not"),
            (br#"{"prompt": [1], "logit_bias": {}}"#, "unknown field `logit_bias`"),
            (br#"{"prompt": [1], "top_p": 0.9}"#, "`top_p`: 0.9: nucleus sampling (`top_p` below 1) is not supported"),
            (br#"{"prompt": [1], "presence_penalty": 0.5}"#, "penalties are not supported"),
            (br#"{"prompt": [1], "logprobs": 2}"#, "log probabilities are not returned"),
            (br#"{"prompt": [1], "stream_options": {"include_usage": true}}"#, "the usage chunk is not sent"),
            (br#"{"prompt": [1], "response_format": {"type": "json_object"}}"#, "no JSON modes"),
            (br#"{"prompt": [1], "max_tokens": 0}"#, "`max_tokens` must be a positive integer"),
            (br#"{"prompt": "hello"}"#, "needs a tokenizer"),
            (br#"{"prompt": [1.5]}"#, "`prompt` must be a list of token ids"),
            (
                br#"{"prompt": [1], "max_tokens": -1}"#,
                "`max_tokens` must be a positive integer (the tokens to generate, at least 1), not -1",
            ),
            (br#"{"prompt": [1], "model": "other"}"#, "model \"other\" is not served here"),
            (br#"{"prompt": [1], "n": 2}"#, "`n` must be 1"),
            (br#"{"max_tokens": 2}"#, "`prompt` is missing"),
            (br#"[1, 2]"#, "not a JSON object"),
            (br#"{"prompt": [1]"#, "the body is not JSON"),
            (br#"{"prompt": [1], "stop": "x"}"#, "`stop` strings are matched in the text, which needs a tokenizer"),
        ] {
            let got = parse(body, "m", None).err().unwrap_or_default();
            assert!(got.contains(message), "{}: {got}", String::from_utf8_lossy(body));
        }
        // With a tokenizer, a text prompt (alone or in a list of one) is its ids.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer/tokenizer.json");
        let text = Text::load(&path, 64).expect("a tokenizer");
        let ids = text.encode("the lazy dog").expect("encodes");
        for body in [&br#"{"prompt": "the lazy dog"}"#[..], br#"{"prompt": ["the lazy dog"]}"#] {
            assert_eq!(parse(body, "m", Some(&text)).expect("parses").request.prompt, ids);
        }
        let c = parse(br#"{"prompt": "a", "stop": ["x", "yz"]}"#, "m", Some(&text)).expect("parses");
        assert_eq!(c.stops, ["x", "yz"]);
        for body in [&br#"{"prompt": "a", "stop": ""}"#[..], br#"{"prompt": "a", "stop": ["a","b","c","d","e"]}"#] {
            let got = parse(body, "m", Some(&text)).err().unwrap_or_default();
            assert!(got.contains("a string or a list of up to 4 non-empty strings"), "{got}");
        }
    }
}
