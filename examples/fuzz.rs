//! Fuzzes a reader with mutated real inputs: `cargo xtask fuzz [--target T] --seconds N` runs
//! it. Target `archive` (the default) imports `.pt2` archives, seeded with the committed ones
//! (`testdata/models`, `testdata/bad`); target `artifact` opens `.tpuexe` artifacts as `run`
//! and `inspect` do (the container, every entry's CRC-32, the manifest and its checks), seeded
//! with the committed artifacts of `testdata/fuzz/artifacts/`.
//!
//! Each input is a seed with a few mutations — bits flipped, bytes set to edge values, a
//! truncation, a copied chunk (all of which the container checks mostly catch) — or, half of
//! the time, one stored entry's bytes changed in place (a digit run rewritten at the same
//! length, or bits flipped) with its CRC-32 recomputed, so that the zip stays valid and the
//! damage reaches the JSON, the payload configs, the graph or the manifest. The input is
//! written to `OUT/current.pt2` (or `.tpuexe`) and read. A panic is a finding, saved under
//! `OUT/findings/`; an input that takes longer than the time limit is a hang, saved and fatal;
//! an abort (stack overflow) kills the process, and `cargo xtask fuzz` keeps the current input
//! as its finding. The run is deterministic for a given `--seed`.
//!
//! ```text
//! fuzz [--target archive|artifact] --seconds N [--seed S] [--out DIR]
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest one read may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(10);

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Same-length replacements for a run of digits: edge values a size, offset or dtype can take.
fn digit_replacement(rng: &mut Rng, len: usize) -> Vec<u8> {
    match rng.below(5) {
        0 => vec![b'9'; len],
        1 => vec![b'0'; len],
        2 if len > 1 => std::iter::once(b'-').chain(std::iter::repeat_n(b'9', len - 1)).collect(),
        3 => std::iter::repeat_n(b'0', len - 1).chain(std::iter::once(b'1')).collect(),
        _ => (0..len).map(|_| b'0' + rng.below(10) as u8).collect(),
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if data.is_empty() {
            break;
        }
        let at = rng.below(data.len());
        match rng.below(6) {
            0 => data[at] ^= 1 << rng.below(8),
            1 => data[at] = [0x00, 0xff, 0x7f, 0x80, b'"', b'['][rng.below(6)],
            2 => data.truncate(at),
            3 => {
                let len = rng.below(64).min(data.len() - at);
                let chunk = data[at..at + len].to_vec();
                let to = rng.below(data.len());
                data.splice(to..to, chunk);
            }
            _ => {
                // The next run of ASCII digits after `at`, rewritten at the same length.
                let Some(start) = data[at..].iter().position(u8::is_ascii_digit).map(|p| p + at) else { continue };
                let len = data[start..].iter().take_while(|b| b.is_ascii_digit()).count();
                let new = digit_replacement(rng, len);
                data[start..start + len].copy_from_slice(&new);
            }
        }
    }
    data
}

/// One stored entry's bytes changed in place, its directory CRC-32 recomputed to match.
fn mutate_entry(rng: &mut Rng, seed: &[u8]) -> Option<Vec<u8>> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(seed)).ok()?;
    let file = zip.by_index_raw(rng.below(zip.len())).ok()?;
    let (start, len, record) =
        (file.data_start() as usize, file.compressed_size() as usize, file.central_header_start() as usize);
    drop(file);
    if len == 0 || start + len > seed.len() || record + 20 > seed.len() {
        return None;
    }
    let mut data = seed.to_vec();
    let entry = &mut data[start..start + len];
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(len);
        match entry[at..].iter().position(u8::is_ascii_digit) {
            Some(p) if rng.below(3) > 0 => {
                let run = entry[at + p..].iter().take_while(|b| b.is_ascii_digit()).count();
                let new = digit_replacement(rng, run);
                entry[at + p..at + p + run].copy_from_slice(&new);
            }
            _ => entry[at] ^= 1 << rng.below(8),
        }
    }
    let crc = crc32fast::hash(&data[start..start + len]);
    data[record + 16..record + 20].copy_from_slice(&crc.to_le_bytes());
    Some(data)
}

/// What is fuzzed: the reader, its seeds' folders and their extension.
#[derive(Clone, Copy)]
enum Target {
    Archive,
    Artifact,
}

impl Target {
    fn parse(name: &str) -> Target {
        match name {
            "archive" => Target::Archive,
            "artifact" => Target::Artifact,
            other => panic!("unknown fuzz target `{other}` (archive or artifact)"),
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Target::Archive => "pt2",
            Target::Artifact => "tpuexe",
        }
    }

    fn seed_dirs(self) -> &'static [&'static str] {
        match self {
            Target::Archive => &["testdata/models", "testdata/bad"],
            Target::Artifact => &["testdata/fuzz/artifacts"],
        }
    }

    /// Reads `path`: `Ok(true)` accepted, `Ok(false)` refused with an error.
    /// Reads `path`: `None` when it is taken, else the refusal's message.
    fn read(self, path: &Path) -> Option<String> {
        match self {
            Target::Archive => torchtpu_compile::import(path).err().map(|e| e.to_string()),
            Target::Artifact => torchtpu_compile::Artifact::open(path).err().map(|e| e.to_string()),
        }
    }
}

fn seeds(root: &Path, target: Target) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in target.seed_dirs() {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        paths.sort();
        for p in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == target.extension())) {
            // Large archives slow every iteration down without adding structure.
            match std::fs::read(&p) {
                Ok(bytes) if bytes.len() < 2_000_000 => {
                    out.push((p.file_name().unwrap_or_default().to_string_lossy().into_owned(), bytes));
                }
                _ => {}
            }
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let seconds: u64 = value("--seconds").and_then(|s| s.parse().ok()).unwrap_or(60);
    let mut rng = Rng(value("--seed").and_then(|s| s.parse().ok()).unwrap_or(1).max(1));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = value("--out").map_or_else(|| root.join("target/fuzz"), PathBuf::from);
    let findings = out.join("findings");
    std::fs::create_dir_all(&findings).expect("the output folder can be made");
    let target = Target::parse(&value("--target").unwrap_or_else(|| "archive".into()));
    let current = out.join(format!("current.{}", target.extension()));
    let seeds = seeds(&root, target);
    assert!(!seeds.is_empty(), "no seeds under {:?}", target.seed_dirs());

    // Panics are findings, not noise: keep the default hook's message out of the way.
    std::panic::set_hook(Box::new(|_| {}));
    let started = Arc::new(AtomicU64::new(0));
    let clock = Instant::now();
    watchdog(Arc::clone(&started), clock, current.clone(), findings.clone());

    // `--messages FILE`: every distinct refusal message, one per line, for reading them.
    let mut messages = value("--messages").map(|_| std::collections::BTreeSet::<String>::new());
    let deadline = Duration::from_secs(seconds);
    let (mut runs, mut panics, mut refused) = (0u64, 0u64, 0u64);
    while clock.elapsed() < deadline {
        let (name, seed) = &seeds[rng.below(seeds.len())];
        let input = match rng.below(2) {
            0 => mutate_entry(&mut rng, seed).unwrap_or_else(|| mutate(&mut rng, seed)),
            _ => mutate(&mut rng, seed),
        };
        std::fs::write(&current, &input).expect("the current input can be written");
        started.store(clock.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
        let result = std::panic::catch_unwind(|| target.read(&current));
        started.store(0, Ordering::SeqCst);
        runs += 1;
        match result {
            Ok(None) => {}
            Ok(Some(message)) => {
                refused += 1;
                if let Some(m) = messages.as_mut() {
                    m.insert(message);
                }
            }
            Err(cause) => {
                panics += 1;
                let why = cause
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| cause.downcast_ref::<&str>().map(|s| s.to_string()));
                let file = findings.join(format!("panic-{runs}-from-{name}"));
                std::fs::write(&file, &input).expect("a finding can be saved");
                eprintln!(
                    "fuzz: panic ({}) on a mutant of {name}, saved as {}",
                    why.unwrap_or_default(),
                    file.display()
                );
            }
        }
    }
    let _ = std::fs::remove_file(&current);
    if let (Some(file), Some(m)) = (value("--messages"), &messages) {
        let lines: Vec<String> = m.iter().map(|s| s.replace('\n', "\\n")).collect();
        std::fs::write(&file, lines.join("\n") + "\n").expect("the messages can be written");
    }
    println!(
        "fuzz: {runs} inputs in {:.0} s ({refused} refused with an error, {} accepted): {panics} panics, 0 aborts, 0 hangs",
        clock.elapsed().as_secs_f64(),
        runs - refused - panics
    );
    std::process::exit(i32::from(panics > 0));
}

/// Ends the process when one read runs longer than [`HANG`], keeping its input.
fn watchdog(started: Arc<AtomicU64>, clock: Instant, current: PathBuf, findings: PathBuf) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(250));
        let since = started.load(Ordering::SeqCst);
        if since != 0 && clock.elapsed().as_millis() as u64 > since + HANG.as_millis() as u64 {
            let file = findings.join(format!("hang.{}", current.extension().unwrap_or_default().to_string_lossy()));
            let _ = std::fs::rename(&current, &file);
            eprintln!("fuzz: a read ran over {} s; its input is {}", HANG.as_secs(), file.display());
            std::process::exit(2);
        }
    });
}
