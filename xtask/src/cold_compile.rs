//! Part of `cargo xtask bench --large`: where a cold compile's time goes at real size.
//!
//! The 1B-shaped bf16 Llama for CPU and TPU v6e and the 8B-shaped sparse archive for CPU, each
//! compiled with an empty cache folder (XLA compiles, the archive is hashed, the weights are
//! written): every phase of `-v` (`read`, `lower`, `compile` = XLA, `write` = what writing added
//! after XLA finished), the wall time, our time (the wall time less XLA's) over XLA's, and peak
//! RSS against the compile bound (10% of the weights + 300 MB; a peak that XLA alone reaches
//! too is marked as such: libtpu's compile of the 1B model alone peaks above it). XLA's time
//! inside a cold compile grows with what competes with it for the cores, so each round also
//! times XLA alone (the same compile with `--cache-only`: lowered and compiled into the cache,
//! nothing hashed or written), and the wall time over that is the cold compile's cost against
//! XLA's own. The process's CPU time (user and system, all threads) and how busy it kept the
//! machine's cores (CPU time over wall time × cores) tell a wall spent waiting from one spent
//! working: where the cores are busy, the wall is the work over the cores. With
//! `$BENCH_BASELINE` naming another build, that build is measured too, interleaved round by
//! round, so that before and after come from one run on one machine.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::measuring::{bench_model, measure, median, Measured};
use crate::path_str;

const MIB: f64 = 1024.0 * 1024.0;
const ROUNDS: usize = 3;

/// One build's cold compiles of one model and target: per round, the phases (s) and the
/// process's wall and CPU time; the peak RSS of all rounds.
#[derive(Default)]
struct Rounds {
    read: Vec<f64>,
    lower: Vec<f64>,
    xla: Vec<f64>,
    write: Vec<f64>,
    wall: Vec<f64>,
    cpu: Vec<f64>,
    rss: f64,
}

impl Rounds {
    fn add(&mut self, m: &Measured, summary: &Value) {
        let phase = |name: &str| {
            let phases = summary["phases"].as_array().into_iter().flatten();
            phases.filter(|p| p["phase"] == name).filter_map(|p| p["ms"].as_f64()).sum::<f64>() / 1e3
        };
        self.read.push(phase("read"));
        self.lower.push(phase("lower"));
        self.xla.push(phase("compile"));
        self.write.push(phase("write"));
        self.wall.push(m.secs);
        self.cpu.push(m.cpu_secs);
        self.rss = self.rss.max(m.max_rss_mib);
    }

    /// One line of the table; `alone` is XLA alone's (time, peak RSS). A peak over the bound is
    /// told apart from one that XLA alone reaches too (libtpu's own, for the 1B model).
    fn row(&self, build: &str, bound: f64, alone: (f64, f64)) -> String {
        let m = |v: &Vec<f64>| median(v.clone());
        let (xla, wall, cpu) = (m(&self.xla), m(&self.wall), m(&self.cpu));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let (xla_alone, alone_rss) = alone;
        let verdict = match (self.rss <= bound, alone_rss <= bound) {
            (true, _) => "within".to_string(),
            (false, true) => "OVER".to_string(),
            (false, false) => format!("over, as XLA alone ({alone_rss:.0} MiB)"),
        };
        format!(
            "  {build:<10} {:>7.2} {:>7.2} {:>8.2} {:>7.2} {wall:>7.2} {cpu:>7.2} {:>5.0}% {:>9.2} {:>9.2} {:>9.0} {}",
            m(&self.read),
            m(&self.lower),
            xla,
            m(&self.write),
            100.0 * cpu / (wall * cores),
            (wall - xla) / xla,
            (wall - xla_alone) / xla_alone,
            self.rss,
            verdict
        )
    }
}

/// The throughput of the digests a cold compile may spend its own time on, over 1 GiB in GB/s:
/// one core's sha256 (the archive's, which artifact formats 1 and 2 record) and BLAKE3 (the
/// weights', since format 2), and BLAKE3 as a tree over every core (the archive's, since format
/// 3). A 16 MiB buffer hashed 64 times, so that this process stays small: a child's peak RSS
/// starts from its parent's.
fn digest_speeds() -> (f64, f64, f64) {
    use sha2::Digest;
    let data = vec![0x5au8; 16 << 20];
    let speed = |hash: &dyn Fn(&[u8]) -> u8| {
        let started = std::time::Instant::now();
        for _ in 0..64 {
            std::hint::black_box(hash(&data));
        }
        (64 * data.len()) as f64 / started.elapsed().as_secs_f64() / 1e9
    };
    let every_core = |d: &[u8]| blake3::Hasher::new().update_rayon(d).finalize().as_bytes()[0];
    (speed(&|d| sha2::Sha256::digest(d)[0]), speed(&|d| blake3::hash(d).as_bytes()[0]), speed(&every_core))
}

pub fn cold_compiles(bin: &Path, tmp: &Path) -> Result<()> {
    let (sha256, blake3, tree) = digest_speeds();
    println!(
        "one core hashes {sha256:.2} GB/s with sha256 and {blake3:.2} GB/s with BLAKE3; every core {tree:.2} GB/s \
         with BLAKE3"
    );
    let baseline = std::env::var_os("BENCH_BASELINE").map(PathBuf::from);
    let mut builds: Vec<(&str, &Path)> = vec![("this", bin)];
    if let Some(b) = &baseline {
        builds.insert(0, ("baseline", b.as_path()));
        println!("cold compiles, this build against {} ({ROUNDS} rounds, interleaved):", b.display());
    } else {
        println!("cold compiles ({ROUNDS} rounds; BENCH_BASELINE=OTHER_BINARY adds a build to compare):");
    }
    for (model, target) in [("llama_1b_bf16", "cpu"), ("llama_1b_bf16", "tpu:v6e:1x1"), ("llama_8b_sparse", "cpu")] {
        let pt2 = bench_model(model)?;
        let pt2 = path_str(&pt2)?;
        let bound = std::fs::metadata(pt2)?.len() as f64 / 10.0 / MIB + 300e6 / MIB;
        let (art, cache) = (tmp.join("cold.tpuexe"), tmp.join("cold-cache"));
        let args = ["compile", pt2, "-o", path_str(&art)?, "--target", target, "--cache-dir", path_str(&cache)?];
        let args = [&args[..], &["-v", "-q", "--format", "json"]].concat();
        let mut rounds: Vec<Rounds> = builds.iter().map(|_| Rounds::default()).collect();
        let mut alone = Rounds::default();
        for _ in 0..ROUNDS {
            let _ = std::fs::remove_dir_all(&cache);
            // The same arguments less `-o ART` (args[2..4]): nothing is written but the cache.
            let only_xla = [&args[..2], &args[4..], &["--cache-only"]].concat();
            let m = measure(bin, &only_xla)?;
            if !m.ok {
                bail!("XLA alone: compile of {model} for {target} --cache-only failed:\n{}", m.stderr);
            }
            let summary: Value = serde_json::from_str(&m.stdout).with_context(|| m.stderr.clone())?;
            alone.add(&m, &summary);
            for ((name, build), into) in builds.iter().zip(&mut rounds) {
                let _ = std::fs::remove_dir_all(&cache);
                let m = measure(build, &args)?;
                if !m.ok {
                    bail!("{name} build: cold compile of {model} for {target} failed:\n{}", m.stderr);
                }
                let summary: Value = serde_json::from_str(&m.stdout).with_context(|| m.stderr.clone())?;
                into.add(&m, &summary);
            }
        }
        let _ = std::fs::remove_dir_all(&cache);
        let _ = std::fs::remove_file(&art);
        let (xla_alone, cpu_alone) = (median(alone.xla.clone()), median(alone.cpu.clone()));
        println!(
            "{model} --target {target} (medians, s; bound {bound:.0} MiB; XLA alone {xla_alone:.2} s, \
             its process {cpu_alone:.2} CPU-s)"
        );
        println!(
            "  {:<10} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>6} {:>9} {:>9} {:>9}",
            "build", "read", "lower", "XLA", "write", "wall", "CPU-s", "busy", "ours/XLA", "vs alone", "peak MiB"
        );
        for ((name, _), r) in builds.iter().zip(&rounds) {
            println!("{}", r.row(name, bound, (xla_alone, alone.rss)));
        }
    }
    println!(
        "write: what writing the artifact added after XLA finished (it starts alongside); ours/XLA: (wall - XLA) / XLA; \
         vs alone: (wall - XLA alone) / XLA alone, XLA alone being XLA's time in the same compile with --cache-only; \
         CPU-s: user + system time of the process; busy: CPU-s / (wall x {} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    Ok(())
}
