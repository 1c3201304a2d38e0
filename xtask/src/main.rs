//! cargo xtask: project automation — set-up, code generation, test data, snapshot review,
//! parity and benchmarks, and the CI gate.
//!
//! Run from anywhere in the workspace as `cargo xtask <command>`.

mod bucket_cost;
mod codegen;
mod cold_compile;
mod large;
mod long_context;
mod measure;
mod measuring;
mod serve_bench;
mod setup;

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "torchtpu-compile project automation")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need (idempotent): the MLIR 22 Debian packages (as
    /// root) and the sha256-pinned PJRT plugins, outside git.
    Setup,
    /// Regenerate the committed prost output in src/proto/ from schemas/*.proto.
    Codegen {
        /// Only check that the committed output is up to date.
        #[arg(long)]
        check: bool,
    },
    /// Compile and run every test model on CPU (release build) and compare with PyTorch eager.
    Parity,
    /// Run the Core ATen single-op cases and rewrite docs/ops.md (the coverage table).
    Coverage,
    /// Time lowering, XLA compile and run of every test model (release build), then the
    /// sections: passes, bucketing, cache, grouped-mm, avg-pool, tensor-parallel, donation, serve, long-context.
    Bench {
        /// Only these sections (default: everything but --large and --peers).
        sections: Vec<String>,
        /// Real-size models (GPT-2 124M, a 1B-parameter Llama in bf16, and an 8B-shaped one whose
        /// weights are holes; generated with torch on first use): lowering, cold and cached
        /// compiles against `cp`, memory against the bounds, `run`.
        #[arg(long)]
        large: bool,
        /// Our programs against torchax's and torch-mlir's for the models of ../shared/peers
        /// (or $TORCHTPU_PEERS_DIR), on the same plugin in one process.
        #[arg(long)]
        peers: bool,
    },
    /// The architecture sweep: a tiny random-init instance of every model type in transformers'
    /// auto mappings, exported at one size and with a dynamic batch and sequence (with torch,
    /// into the set-up folder's `zoo/`), compiled (release build) for CPU with buckets and for
    /// `tpu:v6e:1x1`, run at several sizes against eager; writes docs/zoo.md. Resumes where it
    /// stopped; takes one to two hours on two cores. Not run by CI.
    Zoo {
        /// Passed to testdata/zoo.py: `--tasks causal-lm,…`, `--only TYPE,…`, `--limit N`,
        /// `--recheck` (again what did not pass, from the same exports), `--again`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Regenerate testdata/ with real PyTorch in a private venv (a 5 GB install, not run by CI).
    Testdata {
        /// Only these models (default: all).
        models: Vec<String>,
    },
    /// Run the tests and accept every changed snapshot; review the result with `git diff snapshots/`.
    Bless,
    /// The CI gate: set-up, fmt check, clippy with warnings denied, all tests, snapshot check
    /// with unreferenced snapshots rejected.
    Ci,
    /// Fuzz a reader with mutated real inputs (examples/fuzz.rs): the importer with archives,
    /// or the artifact reader with artifacts; findings are kept in testdata/fuzz/findings/
    /// (commit them with the fix), and the run fails on any.
    Fuzz {
        /// What to fuzz: `archive` (the importer) or `artifact` (what `inspect` reads of a
        /// `.tpuexe`; its seeds are compiled into testdata/fuzz/artifacts/ when missing).
        #[arg(long, default_value = "archive", value_parser = ["archive", "artifact"])]
        target: String,
        /// How long to run.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// The mutation sequence's seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Task::Setup => setup::setup(),
        Task::Codegen { check } => codegen::codegen(check),
        Task::Parity => measure::parity(),
        Task::Coverage => coverage(),
        Task::Bench { sections, large, peers } => measure::bench(&sections, large, peers),
        Task::Testdata { models } => testdata(&models),
        Task::Zoo { args } => zoo(&args),
        Task::Bless => bless(),
        Task::Ci => ci(),
        Task::Fuzz { target, seconds, seed } => fuzz(&target, seconds, seed),
    }
}

/// Runs the fuzzer as a child process, so that an abort (a stack overflow) is caught too: the
/// input it died on is kept as a finding.
fn fuzz(target: &str, seconds: u64, seed: u64) -> Result<()> {
    let out = root().join("testdata/fuzz");
    if target == "artifact" {
        artifact_seeds(&out.join("artifacts"))?;
    }
    let (secs, seed_text, out_text) = (seconds.to_string(), seed.to_string(), path_str(&out)?.to_string());
    let args = [
        "run",
        "-q",
        "-p",
        "torchtpu-compile",
        "--no-default-features",
        "--example",
        "fuzz",
        "--",
        "--target",
        target,
        "--seconds",
        &secs,
        "--seed",
        &seed_text,
        "--out",
        &out_text,
    ];
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new("cargo").args(args).current_dir(root()).status().context("cannot start the fuzzer")?;
    let extension = if target == "artifact" { "tpuexe" } else { "pt2" };
    let current = out.join(format!("current.{extension}"));
    if current.exists() {
        let kept = out.join("findings").join(format!("abort-seed{seed}.{extension}"));
        std::fs::rename(&current, &kept)?;
        bail!("the fuzzer died ({status}) importing {}: 0 panics counted, 1 abort", kept.display());
    }
    if !status.success() {
        bail!("the fuzzer found problems ({status}); see testdata/fuzz/findings/");
    }
    Ok(())
}

/// The artifact fuzzer's seeds, compiled when missing (commit them): the MLP for CPU and a TPU,
/// the CNN with size buckets for CPU (its TPU executables would make it megabytes).
fn artifact_seeds(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (model, targets) in [("mlp", &["cpu", "tpu:v5e:1x1"][..]), ("cnn_dynbatch", &["cpu"][..])] {
        let out = dir.join(format!("{model}.tpuexe"));
        if out.exists() {
            continue;
        }
        let src = root().join(format!("testdata/models/{model}.pt2"));
        let (src, out) = (path_str(&src)?.to_string(), path_str(&out)?.to_string());
        let args = ["run", "-q", "-p", "torchtpu-compile", "--", &src, "-o", &out, "--no-cache"];
        let targets = targets.iter().flat_map(|t| ["--target", t]);
        let all: Vec<&str> = args.iter().copied().chain(targets).collect();
        run("cargo", &all, &[])?;
    }
    Ok(())
}

/// The workspace root: the parent of this crate's folder.
pub fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Runs a command in the workspace root, failing with its command line if it fails.
pub fn run(program: &str, args: &[&str], envs: &[(&str, &OsStr)]) -> Result<()> {
    eprintln!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot start `{program}`"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Pinned versions of the generator's environment (see testdata/README.md).
const TESTDATA_PACKAGES: &[&str] = &[
    "torch==2.15.0",
    "transformers==5.24.0",
    "numpy==2.4.6",
    "safetensors==0.8.0",
    "pillow",
    // diffusers' own imports.
    "requests==2.34.2",
    "importlib_metadata==10.2.0",
];
/// Installed without their dependencies (they would pull another torch); the sweep's libraries.
const TESTDATA_NO_DEPS: &[&str] = &["torchvision==0.29.2", "timm==1.0.31", "diffusers==0.42.1"];

fn testdata(models: &[String]) -> Result<()> {
    let python = testdata_python()?;
    let py = path_str(&python)?;
    let mut gen = vec!["testdata/gen.py"];
    gen.extend(models.iter().map(String::as_str));
    run(py, &gen, &[])?;
    run(py, &["testdata/make_bad.py"], &[])?;
    eprintln!("testdata: regenerated; review with `git status testdata/` and `cargo xtask bless`");
    Ok(())
}

/// `cargo xtask zoo`: testdata/zoo.py with the release compiler, its models in the set-up folder.
fn zoo(args: &[String]) -> Result<()> {
    let python = testdata_python()?;
    run("cargo", &["build", "--release", "-q", "-p", "torchtpu-compile"], &[])?;
    let compiler = root().join("target/release/torchtpu-compile");
    let out = setup::setup_dir().join("zoo");
    let mut zoo = vec!["testdata/zoo.py", "--compiler", path_str(&compiler)?, "--out", path_str(&out)?];
    zoo.extend(args.iter().map(String::as_str));
    run(path_str(&python)?, &zoo, &[])
}

/// The generator's Python (torch, transformers), its venv made in the set-up folder if needed.
pub fn testdata_python() -> Result<PathBuf> {
    let venv = setup::setup_dir().join("testdata-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        std::fs::create_dir_all(setup::setup_dir())?;
        run("python3", &["-m", "venv", path_str(&venv)?], &[])?;
    }
    let py = path_str(&python)?;
    let mut install = vec!["-m", "pip", "install", "-q"];
    install.extend_from_slice(TESTDATA_PACKAGES);
    run(py, &install, &[])?;
    let mut no_deps = vec!["-m", "pip", "install", "-q", "--no-deps"];
    no_deps.extend_from_slice(TESTDATA_NO_DEPS);
    run(py, &no_deps, &[])?;
    Ok(python)
}

pub fn path_str(p: &Path) -> Result<&str> {
    p.to_str().with_context(|| format!("path `{}` is not UTF-8", p.display()))
}

/// The op-case test writes the table when asked; it then checks it like CI does.
/// The Core ATen op-case test: every sample of every op against eager.
pub const OP_CASES_TEST: [&str; 8] =
    ["test", "-q", "-p", "torchtpu-compile", "--lib", "--", "--exact", "tests::ops::core_aten_op_cases"];

fn coverage() -> Result<()> {
    run("cargo", &OP_CASES_TEST, &[("TORCHTPU_WRITE_COVERAGE", OsStr::new("1"))])?;
    let table = std::fs::read_to_string(root().join("docs/ops.md"))?;
    println!("{}", table.lines().last().unwrap_or_default());
    Ok(())
}

fn bless() -> Result<()> {
    run("cargo", &["test", "--workspace"], &[("INSTA_UPDATE", OsStr::new("always")), ("CI", OsStr::new(""))])?;
    run("git", &["status", "--short", "snapshots/", "passes/tests/", "tests/emit/", "docs/cli.md"], &[])
}

fn ci() -> Result<()> {
    // A CI run builds once from a clean clone: incremental compilation's caches would only add
    // gigabytes to its disk.
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        std::env::set_var("CARGO_INCREMENTAL", "0");
    }
    setup::setup()?;
    run("cargo", &["fmt", "--all", "--check"], &[])?;
    codegen::codegen(true)?;
    run("cargo", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"], &[])?;
    let refs = root().join("target").join("insta-references.txt");
    let _ = std::fs::remove_file(&refs);
    let insta = [("INSTA_UPDATE", OsStr::new("no")), ("INSTA_FORCE_PASS", OsStr::new("0"))];
    // Without the emitter: the IR, import and run paths must build and pass on their own.
    let (p1, f1) = test_counting(&["-p", "torchtpu-compile", "--no-default-features"], &insta)?;
    let mut envs = insta.to_vec();
    envs.push(("INSTA_SNAPSHOT_REFERENCES_FILE", refs.as_os_str()));
    let (p2, f2) = test_counting(&["--workspace", "--exclude", "torchtpu-compile-python"], &envs)?;
    reject_unreferenced_snapshots(&refs)?;
    let (p3, f3) = python_tests()?;
    let (passed, failed) = (p1 + p2 + p3, f1 + f2 + f3);
    println!("ci: {passed} passed, {failed} failed");
    Ok(())
}

/// The set-up folder's Python test environment with the package built into it (`maturin
/// develop`: the dev profile, so it shares the test build's compiled crates): its python and
/// the environment variables that select it.
pub fn python_env() -> Result<(PathBuf, Vec<(OsString, OsString)>)> {
    let venv = setup::setup_dir().join(setup::PYTHON_TESTS_DIR);
    let bin = venv.join("bin");
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let envs = [("VIRTUAL_ENV", venv.as_os_str()), ("PATH", path.as_os_str())];
    run(path_str(&bin.join("maturin"))?, &["develop", "--manifest-path", "python/Cargo.toml"], &envs)?;
    Ok((bin.join("python"), envs.iter().map(|(k, v)| (OsString::from(k), v.to_os_string())).collect()))
}

/// Runs the Python package's pytest suite in its test environment; the numbers passed and
/// failed.
fn python_tests() -> Result<(u64, u64)> {
    let (python, envs) = python_env()?;
    eprintln!("$ python -m pytest python/tests");
    let output = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"])
        .envs(envs)
        .current_dir(root())
        .output()
        .context("cannot start pytest")?;
    let text = String::from_utf8_lossy(&output.stdout);
    print!("{text}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    let summary = text.lines().last().unwrap_or_default();
    let (passed, failed) = (count_before(summary, " passed"), count_before(summary, " failed"));
    if !output.status.success() || passed == 0 {
        bail!("the Python package's tests failed ({summary})");
    }
    Ok((passed, failed))
}

/// Runs `cargo test ARGS`, echoing its output, and adds up the `test result:` lines of every
/// test binary so that the run ends with one total.
fn test_counting(args: &[&str], envs: &[(&str, &OsStr)]) -> Result<(u64, u64)> {
    use std::io::{BufRead, BufReader};
    eprintln!("$ cargo test {}", args.join(" "));
    let mut child = Command::new("cargo")
        .arg("test")
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start `cargo test`")?;
    let (mut passed, mut failed) = (0, 0);
    let stdout = child.stdout.take().context("no stdout")?;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            passed += count_before(rest, " passed");
            failed += count_before(rest, " failed");
        }
    }
    let status = child.wait()?;
    if !status.success() {
        println!("ci: {passed} passed, {failed} failed");
        bail!("`cargo test {}` failed ({status})", args.join(" "));
    }
    if passed == 0 {
        bail!("`cargo test {}` ran no test", args.join(" "));
    }
    Ok((passed, failed))
}

/// In `ok. 18 passed; 0 failed; …`, the number right before `word`.
fn count_before(text: &str, word: &str) -> u64 {
    text.find(word).and_then(|end| text[..end].rsplit(|c: char| !c.is_ascii_digit()).next()?.parse().ok()).unwrap_or(0)
}

/// Every `.snap` file under `snapshots/` must have been asserted by some test in this run.
fn reject_unreferenced_snapshots(refs: &Path) -> Result<()> {
    let text = std::fs::read_to_string(refs).context("no snapshot references were recorded")?;
    let referenced: BTreeSet<PathBuf> = text.lines().map(|l| canonical(Path::new(l))).collect();
    let mut on_disk = Vec::new();
    collect_snaps(&root().join("snapshots"), &mut on_disk)?;
    let stray: Vec<String> =
        on_disk.iter().filter(|p| !referenced.contains(&canonical(p))).map(|p| p.display().to_string()).collect();
    if !stray.is_empty() {
        bail!("unreferenced snapshots (delete them or restore their tests):\n  {}", stray.join("\n  "));
    }
    eprintln!("snapshots: {} files, all referenced", on_disk.len());
    Ok(())
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

fn collect_snaps(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_snaps(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "snap") {
            out.push(path);
        } else if path.extension().is_some_and(|e| e == "new") || path.to_string_lossy().ends_with(".pending-snap") {
            bail!("pending snapshot {} — review it with `cargo xtask bless`", path.display());
        }
    }
    Ok(())
}
