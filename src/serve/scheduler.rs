//! The thread that owns the session: it takes the requests the HTTP handlers hand it, runs
//! them through a [`Batcher`] call after call, and sends each request's tokens back to its
//! handler as they come. A handler that went away (its client closed the connection) has its
//! request cancelled at the next token, so its slot is free for the next request.
//!
//! It also keeps the counters `/metrics` reports.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use crate::run::{Batcher, Finished, Logprobs, NewToken, Request, Session};

/// What the handlers hand the scheduler.
pub(super) enum Job {
    /// A request, with where its events go.
    Request {
        request: Request,
        events: UnboundedSender<Event>,
        /// When the handler accepted it (time to first token counts from here).
        accepted: Instant,
        /// Set by the handler when the text reached a stop string: the request is complete.
        stopped: Arc<AtomicBool>,
    },
    /// Take another checkpoint's weights once the requests in flight are done (those that
    /// come meanwhile wait); the outcome goes to `reply`.
    Swap { checkpoint: PathBuf, reply: tokio::sync::oneshot::Sender<Result<(), String>> },
}

/// What the scheduler tells a request's handler.
pub(super) enum Event {
    /// A generated token, with its log probabilities when the request asks for them.
    Token(i64, Option<Logprobs>),
    /// The request is done.
    Done(Finished),
    /// A call failed: the request is lost (the message says why).
    Failed(String),
}

/// The counters of `/metrics`, shared by the handlers and the scheduler.
#[derive(Default)]
pub(super) struct Metrics {
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    pub rejected: AtomicU64,
    pub invalid: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub calls: AtomicU64,
    pub busy_slots_total: AtomicU64,
    pub busy: AtomicUsize,
    pub waiting: AtomicUsize,
    /// Requests accepted and not yet done: what the handlers bound.
    pub outstanding: AtomicUsize,
    /// Sum (µs) and count of the times to first token.
    pub first_token_us: AtomicU64,
    pub first_tokens: AtomicU64,
    /// Sum (µs) and count of the times between a request's tokens.
    pub per_token_us: AtomicU64,
    pub per_tokens: AtomicU64,
    /// Time (µs) in the scheduler's steps: the program's call, sampling, relaying the tokens.
    pub step_us: AtomicU64,
    /// Time (µs) of those steps in the program's calls: inputs up, execute, logits back.
    pub call_us: AtomicU64,
    /// The server no longer takes requests.
    pub closing: AtomicBool,
}

/// A request in flight: where its events go and its times.
struct Client {
    events: UnboundedSender<Event>,
    accepted: Instant,
    last_token: Option<Instant>,
    stopped: Arc<AtomicBool>,
}

/// The scheduler's state besides the session.
struct Scheduler<'m> {
    batcher: Batcher,
    clients: HashMap<u64, Client>,
    /// A swap waiting for the requests in flight, and the requests come meanwhile.
    swap: Option<(PathBuf, tokio::sync::oneshot::Sender<Result<(), String>>)>,
    held: VecDeque<Job>,
    metrics: &'m Metrics,
}

/// Runs until `jobs` is closed and every request is done.
pub(super) fn run(mut session: Session, batcher: Batcher, jobs: Receiver<Job>, metrics: &Metrics) {
    let mut s = Scheduler { batcher, clients: HashMap::new(), swap: None, held: VecDeque::new(), metrics };
    loop {
        if s.batcher.is_idle() {
            if let Some((checkpoint, reply)) = s.swap.take() {
                let _ = reply.send(session.swap_weights(&checkpoint).map_err(|e| e.to_string()));
                while let Some(job) = s.held.pop_front() {
                    s.receive(job);
                }
                continue;
            }
            match jobs.recv() {
                Ok(job) => s.receive(job),
                Err(_) => return,
            }
        }
        while let Ok(job) = jobs.try_recv() {
            s.receive(job);
        }
        if !s.batcher.is_idle() {
            s.step(&mut session);
        }
    }
}

impl Scheduler<'_> {
    /// A job: a request queued (or held while a swap waits), a swap noted.
    fn receive(&mut self, job: Job) {
        match job {
            Job::Request { .. } if self.swap.is_some() => self.held.push_back(job),
            Job::Request { request, events, accepted, stopped } => {
                let client = Client { events, accepted, last_token: None, stopped };
                take(&mut self.batcher, &mut self.clients, request, client, self.metrics);
            }
            Job::Swap { reply, .. } if self.swap.is_some() => {
                let _ = reply.send(Err("another swap is under way".into()));
            }
            Job::Swap { checkpoint, reply } => self.swap = Some((checkpoint, reply)),
        }
    }

    /// One call of the step, its tokens relayed.
    fn step(&mut self, session: &mut Session) {
        let started = Instant::now();
        let (batcher, clients, metrics) = (&mut self.batcher, &mut self.clients, self.metrics);
        match batcher.step(session) {
            Ok(stepped) => {
                for new in stepped.tokens {
                    let id = new.request;
                    let Some(c) = clients.get_mut(&id) else { continue };
                    // Its text reached a stop string (complete), or its client went away.
                    let outcome = if c.stopped.load(Ordering::SeqCst) {
                        &metrics.completed
                    } else if !sent_token(c, new, metrics) {
                        &metrics.cancelled
                    } else {
                        continue;
                    };
                    batcher.cancel(session, id);
                    clients.remove(&id);
                    done(metrics, outcome);
                }
                for f in stepped.finished {
                    if let Some(c) = clients.remove(&f.id) {
                        let _ = c.events.send(Event::Done(f));
                        done(metrics, &metrics.completed);
                    }
                }
            }
            Err(e) => {
                // Every request in flight is lost; the session starts again from its weights.
                let reason = format!("{e:#}");
                for (id, c) in clients.drain() {
                    batcher.cancel(session, id);
                    let _ = c.events.send(Event::Failed(reason.clone()));
                    done(metrics, &metrics.failed);
                }
                let _ = session.reset();
            }
        }
        metrics.calls.store(batcher.figures().calls, Ordering::Relaxed);
        metrics.busy_slots_total.store(batcher.figures().busy_slots, Ordering::Relaxed);
        metrics.busy.store(batcher.busy(), Ordering::Relaxed);
        metrics.waiting.store(batcher.waiting(), Ordering::Relaxed);
        metrics.call_us.store((batcher.figures().ms * 1e3) as u64, Ordering::Relaxed);
        metrics.step_us.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// Queues `request`, or tells its handler why not.
fn take(
    batcher: &mut Batcher,
    clients: &mut HashMap<u64, Client>,
    request: Request,
    client: Client,
    metrics: &Metrics,
) {
    let prompt = request.prompt.len() as u64;
    match batcher.submit(request) {
        Ok(id) => {
            metrics.prompt_tokens.fetch_add(prompt, Ordering::Relaxed);
            clients.insert(id, client);
        }
        Err(e) => {
            let _ = client.events.send(Event::Failed(e.to_string()));
            done(metrics, &metrics.invalid);
        }
    }
    metrics.waiting.store(batcher.waiting(), Ordering::Relaxed);
}

/// Sends `new` to `c`, timing it; false when its handler is gone.
fn sent_token(c: &mut Client, new: NewToken, metrics: &Metrics) -> bool {
    let now = Instant::now();
    let (elapsed, sum, count) = match c.last_token {
        None => (now - c.accepted, &metrics.first_token_us, &metrics.first_tokens),
        Some(last) => (now - last, &metrics.per_token_us, &metrics.per_tokens),
    };
    sum.fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    count.fetch_add(1, Ordering::Relaxed);
    c.last_token = Some(now);
    metrics.generated_tokens.fetch_add(1, Ordering::Relaxed);
    c.events.send(Event::Token(new.token, new.logprobs)).is_ok()
}

/// A request left: counted under `outcome`, no longer outstanding.
fn done(metrics: &Metrics, outcome: &AtomicU64) {
    outcome.fetch_add(1, Ordering::Relaxed);
    metrics.outstanding.fetch_sub(1, Ordering::Relaxed);
}
