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
//!
//! Every request stops at the model's EOS ids (`eos`) unless it asks `ignore_eos`. A body
//! over the limit (`max_body_bytes`) gets 413, in the same JSON error shape as every refusal,
//! and counts as invalid.

mod answer;
mod chat;
mod eos;
mod files;
mod logprobs;
mod output;
mod request;
mod scheduler;
mod text;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use crate::run::{Batcher, Session};
use crate::Error;
use answer::{Choice, Head};
use chat::Chat;
use output::Output;
use request::{parse, parse_chat, Completion, Reader};
use scheduler::{Job, Metrics};
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
    /// Default: the one the artifact stores (`compile --tokenizer`), if any.
    pub tokenizer: Option<std::path::PathBuf>,
    /// A chat template (a `.jinja` file or a `tokenizer_config.json`), for
    /// `POST /v1/chat/completions`; it needs the tokenizer. Default: the stored one, if any.
    pub chat_template: Option<std::path::PathBuf>,
    /// A `generation_config.json` whose `eos_token_id` ends every request (default: the one
    /// beside the tokenizer, else the stored one, if any); the chat template's EOS token ends
    /// them too.
    pub generation_config: Option<std::path::PathBuf>,
    /// The largest request body taken, in bytes; a larger one gets 413.
    pub max_body_bytes: usize,
}

/// The body limit of `serve`'s command line: 2 MiB, a prompt of some 500,000 tokens as JSON.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 2 << 20;

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
    /// The model's EOS ids (see `eos`).
    eos: Vec<i64>,
    max_body_bytes: usize,
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
    let files = files::model_files(opts, session.artifact())?;
    let text = files.tokenizer.as_ref().map(|f| Text::read(f, checker.vocab()).map(Arc::new)).transpose()?;
    let chat = match (&files.chat_template, &text) {
        (Some(file), Some(_)) => Some(Chat::read(file, files.chat_tokens.as_ref())?),
        (Some(_), None) => {
            return Err(Error::bad_input("a chat template needs the model's tokenizer (`--tokenizer`)".into()));
        }
        (None, _) => None,
    };
    let eos = eos::eos_ids(&eos::Sources {
        config: files.generation_config.as_ref(),
        text: text.as_deref(),
        chat: chat.as_ref(),
        vocab: checker.vocab(),
    })?;
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
        eos,
        max_body_bytes: opts.max_body_bytes,
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
        .layer(DefaultBodyLimit::max(shared.max_body_bytes))
        .with_state(shared)
}

/// An OpenAI-style error response.
fn error(status: StatusCode, kind: &str, message: String) -> Response {
    (status, axum::Json(json!({"error": {"message": message, "type": kind, "code": null}}))).into_response()
}

async fn completions(State(shared): State<Arc<Shared>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return shared.refused(&rejection),
    };
    let parsed = parse(&body, &shared.reader());
    respond(&shared, parsed, false).await
}

/// `POST /v1/chat/completions`: the conversation through the chat template, then as a
/// completion of that text; answered in the chat API's shape.
async fn chat_completions(State(shared): State<Arc<Shared>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return shared.refused(&rejection),
    };
    let parsed = match (&shared.chat, shared.text.as_deref()) {
        (Some(chat), Some(text)) => parse_chat(&body, &shared.reader(), text, chat),
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
    let n = completion.n;
    if n > shared.limit {
        m.invalid.fetch_add(1, Ordering::Relaxed);
        let message = format!("`n` is {n}, more than the {} requests this server holds at once", shared.limit);
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", message);
    }
    if m.outstanding.fetch_add(n, Ordering::SeqCst) + n > shared.limit {
        m.outstanding.fetch_sub(n, Ordering::SeqCst);
        m.rejected.fetch_add(1, Ordering::Relaxed);
        let message = format!("{} requests are in flight, the most this server takes; try again later", shared.limit);
        return error(StatusCode::TOO_MANY_REQUESTS, "overloaded", message);
    }
    let prompt = completion.request.prompt.clone();
    let logprobs = completion.request.logprobs.is_some();
    // Each choice is a request of its own, with a seed of its own.
    let mut choices = Vec::with_capacity(n);
    for i in 0..n {
        let mut request = completion.request.clone();
        request.seed = request.seed.wrapping_add(i as u64);
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let stopped = Arc::new(AtomicBool::new(false));
        let job = Job::Request { request, events, accepted: Instant::now(), stopped: stopped.clone() };
        if !shared.hand(job) {
            // Those handed over are the scheduler's to count; the others never were.
            m.outstanding.fetch_sub(n - i, Ordering::SeqCst);
            return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the server is shutting down".into());
        }
        let output = Output::new(shared.text.as_ref().map(|t| t.stream(&prompt)), completion.stops.clone());
        choices.push(Choice { rx, output, stopped });
    }
    let head = Head {
        id: format!("{}-{}", if chat { "chatcmpl" } else { "cmpl" }, shared.next_id.fetch_add(1, Ordering::Relaxed)),
        chat,
        created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        model: shared.model.clone(),
        prompt_tokens: prompt.len(),
        include_usage: completion.include_usage,
        logprobs,
        text: shared.text.clone(),
    };
    if completion.stream {
        return Sse::new(answer::stream(head, choices)).into_response();
    }
    answer::whole(head, choices).await
}

impl Shared {
    /// The refusal of a body that could not be read, in the API's shape (a body over the
    /// limit: 413), counted as invalid.
    fn refused(&self, rejection: &BytesRejection) -> Response {
        self.metrics.invalid.fetch_add(1, Ordering::Relaxed);
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            let limit = self.max_body_bytes;
            format!("the body is over {limit} bytes, the most this server takes (`serve --max-body-bytes`)")
        } else {
            format!("cannot read the body: {}", rejection.body_text())
        };
        error(status, "invalid_request_error", message)
    }

    /// What reading a request needs of this server.
    fn reader(&self) -> Reader<'_> {
        Reader { model: &self.model, text: self.text.as_deref(), eos: &self.eos }
    }

    /// Hands `job` to the scheduler; false once the server stops.
    fn hand(&self, job: Job) -> bool {
        self.jobs.lock().ok().and_then(|j| j.as_ref().map(|j| j.send(job).is_ok())).unwrap_or(false)
    }
}

/// `POST /admin/weights` `{"checkpoint": PATH}`: the weights of another checkpoint of the same
/// program (see `Session::swap_weights`), taken once the requests in flight are done; those
/// that come meanwhile wait. A checkpoint refused leaves the weights as they were.
async fn swap_weights(State(shared): State<Arc<Shared>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return shared.refused(&rejection),
    };
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
    let seconds = |a: &AtomicU64| one(get(a) as f64 / 1e6);
    family(
        "torchtpu_step_seconds_total",
        "counter",
        "Time in the decode step's calls with the host's work around them (sampling, relaying the tokens).",
        &seconds(&m.step_us),
    );
    family(
        "torchtpu_step_call_seconds_total",
        "counter",
        "Time of the steps in the program's calls (inputs up, execute, logits back); the rest is the host's.",
        &seconds(&m.call_us),
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
