//! `bench serve`: `torchtpu-compile serve` on loopback. For a small decode step and a 1B-shaped
//! one: the time from starting the server to its first answered request (loading the
//! executables and weights; nothing is compiled). For the small one, a load test — N clients
//! sending M requests each at the same time, against the same requests one at a time — checking
//! that every request is answered once, with the tokens it gets alone, and printing the
//! throughput of both in the same run. (The 1B-shaped step takes seconds a call on this CPU: a
//! load test of it would take an hour.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::measuring::{bench_model, measure};

/// Concurrent clients, requests per client, tokens per request.
const CLIENTS: usize = 8;
const PER_CLIENT: usize = 8;
const TOKENS: usize = 32;

pub(crate) fn serve_bench(bin: &Path, tmp: &Path) -> Result<()> {
    println!("`serve` on loopback, CPU: time to ready (start to first answered request, nothing compiled), then");
    println!(
        "{CLIENTS} clients x {PER_CLIENT} requests of {TOKENS} greedy tokens at once against the same one at a time"
    );
    println!(
        "{:<20} {:>6} {:>9} {:>10} {:>13} {:>13} {:>7}",
        "decode step", "slots", "artifact", "ready ms", "tok/s batched", "tok/s alone", "ratio"
    );
    for (model, load) in [("decoder_rows_bench", true), ("decoder_rows_1b", false)] {
        let pt2 = bench_model(model)?;
        let art = tmp.join(format!("{model}.tpuexe"));
        let compiled =
            measure(bin, &["compile", crate::path_str(&pt2)?, "-o", crate::path_str(&art)?, "-q", "--no-cache"])?;
        if !compiled.ok {
            bail!("{model}: compile failed:\n{}", compiled.stderr);
        }
        let started = Instant::now();
        let server = Server::start(bin, &art)?;
        server.complete(&[1, 2, 3], 1)?;
        let ready_ms = started.elapsed().as_secs_f64() * 1e3;
        let weights = std::fs::metadata(&art)?.len() as f64 / (1u64 << 20) as f64;
        let slots = server.health()?["slots"].as_u64().unwrap_or(0);
        if !load {
            server.stop()?;
            println!("{model:<20} {slots:>6} {weights:>7.0} MiB {ready_ms:>8.0} {:>13} {:>13} {:>7}", "-", "-", "-");
            continue;
        }
        let prompts: Vec<Vec<i64>> = (0..CLIENTS * PER_CLIENT)
            .map(|i| (0..1 + i % 7).map(|k| ((i * 31 + k * 17) % 200) as i64).collect())
            .collect();
        let (alone, alone_s) = one_at_a_time(&server, &prompts)?;
        let (batched, batched_s) = concurrently(&server, &prompts)?;
        if batched != alone {
            let at = batched.iter().zip(&alone).position(|(a, b)| a != b).unwrap_or(0);
            bail!(
                "{model}: request {at} got other tokens with others than alone:\n  {:?}\n  {:?}",
                batched[at],
                alone[at]
            );
        }
        server.stop()?;
        let tokens = (prompts.len() * TOKENS) as f64;
        let (b, a) = (tokens / batched_s, tokens / alone_s);
        println!("{model:<20} {slots:>6} {weights:>7.0} MiB {ready_ms:>8.0} {b:>13.1} {a:>13.1} {:>6.2}x", b / a);
    }
    println!("every request answered once, with the tokens it gets alone (greedy); ratio: batched over one at a time");
    Ok(())
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

    /// One HTTP/1.1 exchange; the status and the body.
    fn exchange(&self, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
        let mut s = TcpStream::connect(&self.addr)?;
        s.set_read_timeout(Some(Duration::from_secs(600)))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        s.write_all(head.as_bytes())?;
        s.write_all(body.as_bytes())?;
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

fn one_at_a_time(server: &Server, prompts: &[Vec<i64>]) -> Result<(Vec<Vec<i64>>, f64)> {
    let started = Instant::now();
    let tokens = prompts.iter().map(|p| server.complete(p, TOKENS)).collect::<Result<Vec<_>>>()?;
    Ok((tokens, started.elapsed().as_secs_f64()))
}

/// A client's answers: per request, its index and tokens.
type Answers = Vec<(usize, Vec<i64>)>;

/// Every client sends its share of `prompts` in turn, all clients at once.
fn concurrently(server: &Server, prompts: &[Vec<i64>]) -> Result<(Vec<Vec<i64>>, f64)> {
    let started = Instant::now();
    let answers: Vec<Result<Answers>> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                scope.spawn(move || {
                    (c..prompts.len())
                        .step_by(CLIENTS)
                        .map(|i| Ok((i, server.complete(&prompts[i], TOKENS)?)))
                        .collect()
                })
            })
            .collect();
        clients.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a client panicked")))).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let mut tokens: Vec<Option<Vec<i64>>> = vec![None; prompts.len()];
    for answer in answers {
        for (i, t) in answer? {
            if tokens[i].replace(t).is_some() {
                bail!("request {i} answered twice");
            }
        }
    }
    let tokens: Option<Vec<Vec<i64>>> = tokens.into_iter().collect();
    Ok((tokens.context("a request was not answered")?, secs))
}
