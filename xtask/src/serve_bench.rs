//! `bench serve`: `torchtpu-compile serve` on loopback, CPU. For each decode step: the time
//! from starting the server to its first answered request (loading the executables and
//! weights; nothing is compiled). For the small ones, a load test: the same prompts sent by 1,
//! 4 and 16 clients at once, streamed, checking that every request gets the tokens it gets
//! alone, with the tokens per second, the time to first token (p50, p99) and the host's share
//! of the steps (`/metrics`: the steps' time outside the program's calls). For GPT-2 small,
//! exported from transformers by `torchtpu_compile.export`, the same prompts through
//! transformers' batched `generate` in the same run. (The 1B-shaped step takes seconds a call
//! on this CPU: a load test of it would take an hour.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::measuring::{bench_model, measure};

/// Prompts of the load test, tokens per request, and the clients sending them at once.
const PROMPTS: usize = 32;
const TOKENS: usize = 32;
const CLIENTS: [usize; 3] = [1, 4, 16];
/// GPT-2's decode step: rows and cache positions.
const GPT2_SLOTS: usize = 8;
const GPT2_LEN: usize = 128;

/// A decode step to serve: its archive, and the transformers model it was exported from.
struct Step {
    name: &'static str,
    pt2: PathBuf,
    transformers: Option<PathBuf>,
    load: bool,
}

pub(crate) fn serve_bench(bin: &Path, tmp: &Path) -> Result<()> {
    let gpt2 = gpt2_decode_step()?;
    let steps = [
        Step { name: "decoder_rows_bench", pt2: bench_model("decoder_rows_bench")?, transformers: None, load: true },
        Step {
            name: "gpt2_124m_decode",
            pt2: gpt2.join("gpt2_124m_decode.pt2"),
            transformers: Some(gpt2.join("gpt2_124m_hf")),
            load: true,
        },
        Step { name: "decoder_rows_1b", pt2: bench_model("decoder_rows_1b")?, transformers: None, load: false },
    ];
    println!("`serve` on loopback, CPU: {PROMPTS} prompts of 1 to 7 tokens, {TOKENS} greedy tokens each, streamed");
    println!(
        "{:<20} {:>5} {:>9} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "decode step", "slots", "artifact", "ready ms", "clients", "tok/s", "TTFT p50", "TTFT p99", "host"
    );
    for step in &steps {
        serve_one(bin, tmp, step)?;
    }
    println!(
        "ready: start to the first answered request. TTFT in ms, from sending to the first streamed token. \
         host: the steps' time outside the program's calls (/metrics)"
    );
    println!("every request got the tokens it gets alone (greedy)");
    Ok(())
}

/// Compiles and serves `step`, printing its rows.
fn serve_one(bin: &Path, tmp: &Path, step: &Step) -> Result<()> {
    let art = tmp.join(format!("{}.tpuexe", step.name));
    let args = ["compile", crate::path_str(&step.pt2)?, "-o", crate::path_str(&art)?, "-q", "--no-cache"];
    let compiled = measure(bin, &args)?;
    if !compiled.ok {
        bail!("{}: compile failed:\n{}", step.name, compiled.stderr);
    }
    let started = Instant::now();
    let server = Server::start(bin, &art)?;
    server.complete(&[1, 2, 3], 1)?;
    let ready_ms = started.elapsed().as_secs_f64() * 1e3;
    let mib = std::fs::metadata(&art)?.len() as f64 / (1u64 << 20) as f64;
    let slots = server.health()?["slots"].as_u64().unwrap_or(0);
    let head = format!("{:<20} {slots:>5} {mib:>5.0} MiB {ready_ms:>8.0}", step.name);
    if !step.load {
        server.stop()?;
        println!("{head} {:>7} {:>9} {:>9} {:>9} {:>9}", "-", "-", "-", "-", "-");
        return Ok(());
    }
    let prompts: Vec<Vec<i64>> =
        (0..PROMPTS).map(|i| (0..1 + i % 7).map(|k| ((i * 31 + k * 17) % 200) as i64).collect()).collect();
    let mut alone: Option<Vec<Vec<i64>>> = None;
    let mut best: f64 = 0.0;
    for clients in CLIENTS {
        let before = server.step_seconds()?;
        let load = concurrently(&server, &prompts, clients)?;
        let after = server.step_seconds()?;
        let reference = alone.get_or_insert_with(|| load.tokens.clone());
        if let Some(at) = (0..prompts.len()).find(|&i| load.tokens[i] != reference[i]) {
            bail!(
                "{}: request {at} got other tokens with {clients} clients than alone:\n  {:?}\n  {:?}",
                step.name,
                load.tokens[at],
                reference[at]
            );
        }
        let per_second = (prompts.len() * TOKENS) as f64 / load.secs;
        best = best.max(per_second);
        let (steps, calls) = (after.0 - before.0, after.1 - before.1);
        let host = if steps > 0.0 { 1.0 - calls / steps } else { f64::NAN };
        let (p50, p99) = (percentile(&load.first_ms, 0.50), percentile(&load.first_ms, 0.99));
        println!("{head} {clients:>7} {per_second:>9.1} {p50:>9.1} {p99:>9.1} {:>8.1}%", host * 100.0);
    }
    server.stop()?;
    if let (Some(model), Some(alone)) = (&step.transformers, &alone) {
        compare_generate(model, tmp, &prompts, alone, best, slots as usize)?;
    }
    Ok(())
}

/// GPT-2 small's decode step and its transformers model, exported into the set-up folder on
/// first use (`xtask/serve_bench.py export`, in the generator's torch venv).
fn gpt2_decode_step() -> Result<PathBuf> {
    let dir = crate::setup::setup_dir().join("bench");
    if !dir.join("gpt2_124m_decode.pt2").exists() || !dir.join("gpt2_124m_hf/config.json").exists() {
        std::fs::create_dir_all(&dir)?;
        let python = crate::testdata_python()?;
        let (slots, len) = (GPT2_SLOTS.to_string(), GPT2_LEN.to_string());
        let args = ["xtask/serve_bench.py", "export", crate::path_str(&dir)?, slots.as_str(), len.as_str()];
        crate::run(crate::path_str(&python)?, &args, &[])?;
    }
    Ok(dir)
}

/// The same prompts through transformers' batched greedy `generate`, `batch` at a time: its
/// tokens per second against `best` (ours, the best of the client counts), and how many
/// requests got the same tokens as ours alone.
fn compare_generate(
    model: &Path,
    tmp: &Path,
    prompts: &[Vec<i64>],
    alone: &[Vec<i64>],
    best: f64,
    batch: usize,
) -> Result<()> {
    let file = tmp.join("serve_prompts.json");
    std::fs::write(&file, serde_json::to_string(prompts)?)?;
    let python = crate::testdata_python()?;
    let (tokens, batch) = (TOKENS.to_string(), batch.max(1).to_string());
    let args = ["xtask/serve_bench.py", "generate", crate::path_str(model)?, crate::path_str(&file)?, &tokens, &batch];
    let ran = measure(&python, &args)?;
    let out = crate::measuring::json(&ran, "transformers' generate")?;
    let secs = out["seconds"].as_f64().context("seconds")?;
    let theirs: Vec<Vec<i64>> = serde_json::from_value(out["tokens"].clone()).context("tokens")?;
    let equal = theirs.iter().zip(alone).filter(|(a, b)| a == b).count();
    let per_second = (prompts.len() * TOKENS) as f64 / secs;
    println!(
        "{:<20} transformers' generate, {batch} prompts a call: {per_second:.1} tok/s; ours (best) {:.2}x; \
         {equal} of {} requests with the same tokens",
        "",
        best / per_second,
        prompts.len()
    );
    Ok(())
}

/// The value below which a share `q` of `v` lies (nearest rank).
fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// A streamed answer: its tokens and the time to the first (ms).
struct Streamed {
    tokens: Vec<i64>,
    first_ms: f64,
}

/// The server as a child process, with its address.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(bin: &Path, art: &Path) -> Result<Server> {
        let mut child = Command::new(bin)
            .args(["serve", crate::path_str(art)?, "--port", "0", "--max-waiting", "1024"])
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start the server")?;
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().context("stdout")?).read_line(&mut line)?;
        let addr = line.split("http://").nth(1).and_then(|r| r.split(' ').next()).map(str::to_string);
        let addr = addr.with_context(|| format!("the server said `{line}`"))?;
        Ok(Server { child, addr })
    }

    /// A request sent on a new connection, to be read to its end.
    fn send(&self, method: &str, path: &str, body: &str) -> Result<TcpStream> {
        let mut s = TcpStream::connect(&self.addr)?;
        s.set_read_timeout(Some(Duration::from_secs(600)))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        s.write_all(head.as_bytes())?;
        s.write_all(body.as_bytes())?;
        Ok(s)
    }

    /// One HTTP/1.1 exchange; the status and the body.
    fn exchange(&self, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
        let mut s = self.send(method, path, body)?;
        let mut response = String::new();
        s.read_to_string(&mut response)?;
        let status = response.split(' ').nth(1).and_then(|c| c.parse().ok()).context("no status")?;
        let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
        Ok((status, body))
    }

    fn health(&self) -> Result<Value> {
        Ok(serde_json::from_str(&self.exchange("GET", "/health", "")?.1)?)
    }

    /// The greedy tokens of `prompt`.
    fn complete(&self, prompt: &[i64], tokens: usize) -> Result<Vec<i64>> {
        let body = json!({"prompt": prompt, "max_tokens": tokens, "temperature": 0}).to_string();
        let (status, text) = self.exchange("POST", "/v1/completions", &body)?;
        if status != 200 {
            bail!("status {status}: {text}");
        }
        let v: Value = serde_json::from_str(&text)?;
        let ids = v["choices"][0]["token_ids"].as_array().context("token_ids")?;
        Ok(ids.iter().filter_map(Value::as_i64).collect())
    }

    /// The greedy tokens of `prompt`, streamed, and the time to the first one.
    fn stream(&self, prompt: &[i64], tokens: usize) -> Result<Streamed> {
        let body = json!({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": true}).to_string();
        let started = Instant::now();
        let s = self.send("POST", "/v1/completions", &body)?;
        let mut reader = BufReader::new(s);
        let mut status = String::new();
        reader.read_line(&mut status)?;
        if status.split(' ').nth(1) != Some("200") {
            let mut rest = String::new();
            reader.read_to_string(&mut rest)?;
            bail!("{}: {rest}", status.trim());
        }
        let (mut ids, mut first_ms) = (Vec::new(), None);
        for line in reader.lines() {
            let line = line?;
            // The events' lines; the chunked encoding's size lines and the `[DONE]` end pass by.
            let Some(event) = line.strip_prefix("data: ").filter(|e| e.starts_with('{')) else { continue };
            let v: Value = serde_json::from_str(event).with_context(|| format!("a streamed event: {event}"))?;
            let got = v["choices"][0]["token_ids"].as_array().context("token_ids")?;
            if !got.is_empty() && first_ms.is_none() {
                first_ms = Some(started.elapsed().as_secs_f64() * 1e3);
            }
            ids.extend(got.iter().filter_map(Value::as_i64));
        }
        Ok(Streamed { tokens: ids, first_ms: first_ms.context("no token streamed")? })
    }

    /// `/metrics`' time in the steps and in their calls, in seconds.
    fn step_seconds(&self) -> Result<(f64, f64)> {
        let (_, text) = self.exchange("GET", "/metrics", "")?;
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse::<f64>().ok()))
                .with_context(|| format!("/metrics has no `{name}`"))
        };
        Ok((value("torchtpu_step_seconds_total ")?, value("torchtpu_step_call_seconds_total ")?))
    }

    fn stop(mut self) -> Result<()> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the server exited with {status}");
        }
        Ok(())
    }
}

/// What a load test saw: per request, its tokens and its time to first token (ms); the seconds
/// it took.
struct Load {
    tokens: Vec<Vec<i64>>,
    first_ms: Vec<f64>,
    secs: f64,
}

/// `clients` clients, each sending its share of `prompts` one after another, all at once.
fn concurrently(server: &Server, prompts: &[Vec<i64>], clients: usize) -> Result<Load> {
    let started = Instant::now();
    let answers: Vec<Result<Vec<(usize, Streamed)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                scope.spawn(move || {
                    (c..prompts.len()).step_by(clients).map(|i| Ok((i, server.stream(&prompts[i], TOKENS)?))).collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a client panicked")))).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let mut got: Vec<Option<Streamed>> = (0..prompts.len()).map(|_| None).collect();
    for answer in answers {
        for (i, s) in answer? {
            if got[i].replace(s).is_some() {
                bail!("request {i} answered twice");
            }
        }
    }
    let got: Option<Vec<Streamed>> = got.into_iter().collect();
    let got = got.context("a request was not answered")?;
    let first_ms = got.iter().map(|s| s.first_ms).collect();
    Ok(Load { tokens: got.into_iter().map(|s| s.tokens).collect(), first_ms, secs })
}
