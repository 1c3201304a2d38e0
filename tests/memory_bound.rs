//! A compile's memory does not grow with the weights: the test MLP scaled to 256 MiB of
//! weights (`fc1` 8200 × 8192 in f32) compiles for CPU with padding to 128 (so `fc1` and `fc2`
//! are derived weights, padded to 8320 rows and columns), cold and as a cache hit, with the
//! weights embedded and external, under 10% of the weights + 300 MB of peak RSS, and `run`
//! holds one copy of the weights (the CPU device's) + 300 MB; measured on the child process.
//! And a run's memory does not grow with the square of the sequence: a 32,768-token prompt
//! through attention stays under 1 GB.
//! Its own test binary, so that nothing else runs in the children it waits for.
#![cfg(feature = "mlir")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use torchtpu_passes::ir::DType;

use common::scaled_mlp;

/// The MLP's dims, scaled: in 16 → K, hidden 32 → H (not a multiple of 128), out 8, batch 4.
const K: i64 = 8192;
const H: i64 = 8200;

/// Runs the binary with `args`; its exit status and peak resident memory in bytes.
fn peak_rss(args: &[&str], env: &[(&str, &Path)]) -> (bool, u64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_torchtpu-compile"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Reaped by `wait4` below, which also gives its resource usage.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("the binary starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not waited for yet; `status` and `usage` outlive the call.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (ok, usage.ru_maxrss as u64 * 1024) // Linux reports kilobytes
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn compiling_256_mib_of_weights_stays_under_the_memory_bound() {
    let dir = TempDir(std::env::temp_dir().join(format!("memory-bound-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("a temp dir");
    let model = dir.0.join("mlp_wide.pt2");
    let weights = scaled_mlp(&model, K, H);
    assert!(weights >= 256 << 20, "{weights} bytes of weights");
    let bound = weights / 10 + 300_000_000;
    let (model, out) = (model.to_str().expect("utf-8"), dir.0.join("out.tpuexe"));
    let out = out.to_str().expect("utf-8");
    let cache = dir.0.join("cache");
    let compile = ["compile", model, "-o", out, "--target", "cpu", "--pad-multiple", "128", "-q"];
    for run in ["cold", "cache hit"] {
        let (ok, rss) = peak_rss(&compile, &[("TORCHTPU_CACHE_DIR", &cache)]);
        assert!(ok, "{run}: the compile failed");
        assert!(
            rss <= bound,
            "{run}: peak RSS {} MB for {} MB of weights (bound {} MB)",
            rss >> 20,
            weights >> 20,
            bound >> 20
        );
        eprintln!("{run}: peak RSS {} MiB for {} MiB of weights (bound {} MiB)", rss >> 20, weights >> 20, bound >> 20);
    }
    let artifact = std::fs::metadata(out).expect("written").len();
    assert!(artifact >= weights, "the artifact ({artifact} bytes) holds the weights");

    let external = dir.0.join("ext.tpuexe");
    let external = external.to_str().expect("utf-8");
    let mut compile_ext = compile.to_vec();
    compile_ext[3] = external;
    compile_ext.extend(["--weights", "external"]);
    let (ok, rss) = peak_rss(&compile_ext, &[("TORCHTPU_CACHE_DIR", &cache)]);
    assert!(ok && rss <= bound, "external weights: peak RSS {} MB (bound {} MB)", rss >> 20, bound >> 20);
    eprintln!("external weights: peak RSS {} MiB", rss >> 20);

    // `run`: the device's copy of the (padded) weights, and no second one.
    let input = dir.0.join("x.npy");
    let zeros = torchtpu_compile::Array { dtype: DType::F32, shape: vec![4, K], data: vec![0; 16 * K as usize] };
    zeros.write(&input).expect("writes the input");
    let run_bound = artifact + 300_000_000;
    for art in [out, external] {
        let args = ["run", art, input.to_str().expect("utf-8"), "--out-dir", dir.0.to_str().expect("utf-8")];
        let (ok, rss) = peak_rss(&args, &[("TORCHTPU_CACHE_DIR", &cache)]);
        assert!(ok, "run {art} failed");
        assert!(rss <= run_bound, "run {art}: peak RSS {} MB (bound {} MB)", rss >> 20, run_bound >> 20);
        eprintln!("run {art}: peak RSS {} MiB (bound {} MiB)", rss >> 20, run_bound >> 20);
    }
}

/// A 32,768-token prompt through attention runs in memory linear in its length: the test model
/// `long_context_dyn` (bidirectional attention, 2 heads) compiled for its largest bucket, where
/// `--attention auto` blocks the attention (its scores would take 8 GiB as f32), runs its
/// 32,768-token case equal to eager under 1 GB of peak RSS (measured: about 390 MB).
#[test]
fn a_32k_token_prompt_runs_in_linear_memory() {
    let dir = TempDir(std::env::temp_dir().join(format!("long-context-{}", std::process::id())));
    std::fs::create_dir_all(dir.0.join("ref")).expect("a temp dir");
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models");
    let cases = testdata.join("long_context_dyn");
    std::fs::copy(cases.join("out_0_case4.npy"), dir.0.join("ref/out_0.npy")).expect("the 32k reference");
    let (model, out) = (testdata.join("long_context_dyn.pt2"), dir.0.join("long.tpuexe"));
    let (model, out) = (model.to_str().expect("utf-8"), out.to_str().expect("utf-8"));
    let compile =
        ["compile", model, "-o", out, "--target", "cpu", "--buckets", "input_ids:1=32768", "--no-cache", "-q"];
    let (ok, _) = peak_rss(&compile, &[]);
    assert!(ok, "the compile failed");
    let input = cases.join("in_0_case4.npy");
    let (reference, outputs) = (dir.0.join("ref"), dir.0.join("out"));
    let args = [
        "run",
        out,
        input.to_str().expect("utf-8"),
        "--out-dir",
        outputs.to_str().expect("utf-8"),
        "--reference",
        reference.to_str().expect("utf-8"),
    ];
    let (ok, rss) = peak_rss(&args, &[]);
    assert!(ok, "the 32k-token run failed or differs from eager");
    let scores = 2 * 32768 * 32768 * 4_u64;
    assert!(rss <= 1_000_000_000, "peak RSS {} MB (the naive scores alone take {} MB)", rss >> 20, scores >> 20);
    eprintln!("32,768 tokens: peak RSS {} MiB; the naive scores alone would take {} MiB", rss >> 20, scores >> 20);
}
