//! Single-op cases for the Core ATen opset (`testdata/ops/`, made by `testdata/gen_ops.py`):
//! every op that lowers is compiled for CPU and must reproduce PyTorch eager on every sample
//! within its dtype's tolerance; every op that does not lower is refused by `check` with a
//! reason. `docs/ops.md` is the coverage table these runs produce: the test fails when it is
//! stale, and `cargo xtask coverage` rewrites it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::parity::TempDir;
use super::testdata;
use crate::check::check;
use crate::compile::{compile, CompileRequest};
use crate::emit::Precision;
use crate::import::import;
use crate::npy::Array;
use crate::run::{run, RunRequest};
use crate::target::Target;

#[derive(Debug, Deserialize)]
struct Case {
    status: String,
    reason: Option<String>,
    #[serde(default)]
    samples: Vec<Sample>,
    #[serde(default)]
    tolerance: BTreeMap<String, f64>,
    #[serde(default)]
    random: bool,
    #[serde(default)]
    data_dependent: bool,
    #[serde(default)]
    backward: bool,
}

#[derive(Debug, Deserialize)]
struct Sample {
    desc: String,
    #[serde(default)]
    outputs: Vec<usize>,
    #[serde(default)]
    dtypes: Vec<String>,
    /// Dtypes of the sample's outputs as torch produced them (bf16 is widened in the `.npy`).
    #[serde(default)]
    out_dtypes: Vec<String>,
    /// `values` (the default), `moments` (random outputs: distribution) or `shape_dtype`.
    #[serde(default)]
    compare: Option<String>,
    /// Per output, the distribution a random output must show.
    #[serde(default)]
    moments: Option<Vec<Moments>>,
}

/// The expected distribution of a random output.
#[derive(Debug, Deserialize)]
struct Moments {
    mean: f64,
    std: f64,
    min: Option<f64>,
    max: Option<f64>,
    /// Every element is one of these.
    #[serde(default)]
    values: Option<Vec<f64>>,
    /// The output is a permutation of `0..n`.
    #[serde(default)]
    permutation: bool,
}

/// A random output against its distribution: mean and standard deviation within six
/// standard errors (a false alarm about once in 10⁹ runs for a fixed seed, and the seed is
/// fixed), every element in range and, where given, in the allowed set or a permutation.
fn check_moments(out: &Array, m: &Moments) -> Result<(), String> {
    let values: Vec<f64> = (0..out.numel() as usize).filter_map(|i| out.get_f64(i)).collect();
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    let slack = 6.0 * m.std / n.sqrt() + 1e-9;
    let mut errors = Vec::new();
    if (mean - m.mean).abs() > slack {
        errors.push(format!("mean {mean:.4} (expected {:.4} ± {slack:.4})", m.mean));
    }
    if (std - m.std).abs() > slack {
        errors.push(format!("std {std:.4} (expected {:.4} ± {slack:.4})", m.std));
    }
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    if m.min.is_some_and(|min| lo < min) || m.max.is_some_and(|max| hi > max) || values.iter().any(|v| v.is_nan()) {
        errors.push(format!("range [{lo}, {hi}] outside [{:?}, {:?}]", m.min, m.max));
    }
    if let Some(allowed) = &m.values {
        if let Some(v) = values.iter().find(|v| !allowed.contains(v)) {
            errors.push(format!("value {v} is not one of {allowed:?}"));
        }
    }
    if m.permutation {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted.iter().enumerate().any(|(i, &v)| v != i as f64) {
            errors.push("not a permutation of 0..n".into());
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join(", "))
    }
}

/// Ops whose result values torch leaves uninitialized: only shapes and dtypes are compared.
const UNINITIALIZED: &[&str] = &["empty.memory_format", "empty_strided.default"];

/// What happened to one op.
enum Outcome {
    /// Lowered, compiled and matched eager on every sample.
    Passed,
    /// Export refused by the generator, or no lowering: the reason.
    NotSupported(String),
    /// Lowered but wrong or failing: the op is broken.
    Failed(String),
}

fn cases() -> BTreeMap<String, Case> {
    let text = std::fs::read_to_string(testdata().join("ops/cases.json")).expect("testdata/ops/cases.json");
    serde_json::from_str(&text).expect("valid cases.json")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    (0..).map(|i| dir.join(format!("in_{i}.npy"))).take_while(|p| p.exists()).collect()
}

/// Float outputs within `tol` of the reference's scale; integers and bools exact.
fn compare(out: &Array, reference: &Array, tol: f64) -> Result<(), String> {
    let c = crate::run::compare(out, reference);
    let ok =
        if out.dtype.is_float() || out.dtype.is_complex() { c.max_rel_diff <= tol && c.note.is_none() } else { c.ok };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "max abs diff {:.3e} (rel {:.3e}, tolerance {tol:.0e}){}",
            c.max_abs_diff,
            c.max_rel_diff,
            c.note.map_or_else(String::new, |n| format!(", {n}"))
        ))
    }
}

/// Output `k` of sample `s` against eager: same shape and dtype, then values, moments or
/// nothing more, as the sample asks.
fn check_output(s: &Sample, k: usize, (ours, eager): (&Array, &Array), tol: f64, op: &str) -> Result<(), String> {
    if ours.shape != eager.shape {
        return Err(format!("shape {:?}, eager {:?}", ours.shape, eager.shape));
    }
    if ours.dtype != eager.dtype {
        return Err(format!("dtype {}, eager {}", ours.dtype, eager.dtype));
    }
    match s.compare.as_deref() {
        _ if UNINITIALIZED.contains(&op) => Ok(()),
        Some("shape_dtype") => Ok(()),
        Some("moments") => {
            let m = s.moments.as_ref().and_then(|m| m.get(k)).ok_or("no moments recorded for this output")?;
            check_moments(ours, m)
        }
        _ => compare(ours, eager, tol),
    }
}

/// A CPU compile at full precision, without the cache.
fn cpu_request() -> CompileRequest {
    CompileRequest::new(vec![Target::Cpu], Precision::Highest)
}

fn run_case(op: &str, case: &Case, tmp: &Path) -> Outcome {
    if case.status != "ok" {
        return Outcome::NotSupported(format!("not exported: {}", case.reason.as_deref().unwrap_or("no reason given")));
    }
    let model = testdata().join(format!("ops/{op}.pt2"));
    let program = match import(&model) {
        Ok(p) => p,
        Err(e) => return Outcome::NotSupported(format!("import: {e}")),
    };
    let report = check(&program, op);
    // The op's own problem says most; nodes around it (size checks) may fail too.
    let own = report.problems.iter().find(|p| p.target == format!("aten.{op}"));
    if let Some(p) = own.or(report.problems.first()) {
        return Outcome::NotSupported(p.reason.clone());
    }
    let art = tmp.join(format!("{op}.tpuexe"));
    let mut req = cpu_request();
    // The samples have the example sizes: one bucket at those.
    req.buckets = crate::buckets::at_example_sizes(&program);
    if let Err(e) = compile(&program, &model, &art, &req) {
        return Outcome::Failed(format!("compile: {e:#}"));
    }
    let dir = testdata().join("ops").join(op);
    let out_dir = tmp.join(op);
    let req = RunRequest {
        artifact: art,
        inputs: inputs(&dir),
        out_dir: out_dir.clone(),
        plugin: None,
        reference: None,
        seed: 0,
    };
    if let Err(e) = run(&req) {
        return Outcome::Failed(format!("run: {e:#}"));
    }
    let mut errors = Vec::new();
    for s in &case.samples {
        for (k, &o) in s.outputs.iter().enumerate() {
            let ours = Array::read(&out_dir.join(format!("out_{o}.npy")));
            let eager = Array::read(&dir.join(format!("out_{o}.npy")));
            let (Ok(ours), Ok(eager)) = (ours, eager) else {
                errors.push(format!("sample `{}` output {k}: missing output", s.desc));
                continue;
            };
            let dtype = s.out_dtypes.get(k).map_or(ours.dtype.name(), String::as_str);
            let tol = case.tolerance.get(dtype).copied().unwrap_or(1e-5);
            if let Err(e) = check_output(s, k, (&ours, &eager), tol, op) {
                errors.push(format!("sample `{}` output {k}: {e}", s.desc));
            }
        }
    }
    if errors.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(errors.join("; "))
    }
}

/// An op's status word in the table and its note.
fn status(case: &Case, outcome: &Outcome) -> (&'static str, String) {
    match outcome {
        Outcome::Passed => ("supported", String::new()),
        Outcome::NotSupported(r) if case.status != "ok" || case.data_dependent => ("refused", r.clone()),
        Outcome::NotSupported(r) => ("not yet", r.clone()),
        Outcome::Failed(r) => ("FAILING", r.clone()),
    }
}

/// The coverage table of `docs/ops.md`.
fn coverage(results: &[(String, &Case, Outcome)]) -> String {
    let supported = results.iter().filter(|(_, _, o)| matches!(o, Outcome::Passed)).count();
    let mut out = String::from(
        "# Core ATen coverage\n\n\
         Generated by `cargo xtask coverage` from the single-op cases in `testdata/ops/` (made by `testdata/gen_ops.py` with torch 2.15); do not edit.\n\
         An op is supported when it lowers, compiles for CPU and matches PyTorch eager on every sample within its dtype's tolerance \
         (random ops: on shape, dtype, range and distribution moments). \
         Refused ops cannot be compiled to a static program, or never appear in an exported graph; the note says why. \
         `check --format json` reports each unsupported op's status from this table.\n\n\
         | op | status | samples | dtypes | notes |\n|---|---|---|---|---|\n",
    );
    for (op, case, outcome) in results {
        let mut dtypes: Vec<&str> = case.samples.iter().flat_map(|s| s.dtypes.iter().map(String::as_str)).collect();
        dtypes.sort_unstable();
        dtypes.dedup();
        let mut tags = Vec::new();
        for (flag, tag) in
            [(case.random, "random"), (case.data_dependent, "data-dependent shape"), (case.backward, "backward")]
        {
            if flag {
                tags.push(tag.to_string());
            }
        }
        let (status, note) = status(case, outcome);
        tags.push(note.replace('|', "\\|").replace('\n', " "));
        let notes: Vec<String> = tags.into_iter().filter(|t| !t.is_empty()).collect();
        let _ = writeln!(
            out,
            "| `{op}` | {status} | {} | {} | {} |",
            case.samples.len(),
            dtypes.join(", "),
            notes.join("; ")
        );
    }
    let refused = results.iter().filter(|(_, c, o)| status(c, o).0 == "refused").count();
    let _ = writeln!(
        out,
        "\n{supported} of {} Core ATen ops supported, {refused} refused with the reason given, {} not yet",
        results.len(),
        results.len() - supported - refused
    );
    out
}

/// Runs every op case; fails on any op that lowers but is wrong, and on a stale `docs/ops.md`.
/// With `TORCHTPU_WRITE_COVERAGE=1` (what `cargo xtask coverage` sets) it rewrites the table.
#[test]
fn core_aten_op_cases() {
    let tmp = TempDir::new("ops");
    let cases = cases();
    let results: Vec<(String, &Case, Outcome)> =
        cases.iter().map(|(op, case)| (op.clone(), case, run_case(op, case, &tmp.0))).collect();
    let table = coverage(&results);
    if std::env::var_os("TORCHTPU_PRINT_OPS").is_some() {
        for (op, case, outcome) in &results {
            let (status, note) = status(case, outcome);
            let note = if status == "supported" { String::new() } else { format!("  {note}") };
            println!("{op:<48} {status:<10} {:>3} samples{note}", case.samples.len());
        }
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ops.md");
    if std::env::var_os("TORCHTPU_WRITE_COVERAGE").is_some() {
        std::fs::write(&path, &table).expect("writes docs/ops.md");
    }
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(op, _, o)| match o {
            Outcome::Failed(e) => Some(format!("op `{op}`: {e}")),
            _ => None,
        })
        .collect();
    for f in &failures {
        eprintln!("{f}");
    }
    assert!(failures.is_empty(), "{} op(s) lower but fail", failures.len());
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == table, "docs/ops.md is stale: run `cargo xtask coverage` and commit it");
}

/// The seed decides a random program's numbers: the same seed gives the same bytes, another
/// seed other numbers; the manifest says the program takes one.
#[test]
fn random_ops_follow_the_seed() {
    let tmp = TempDir::new("seed");
    let model = testdata().join("ops/native_dropout.default.pt2");
    let program = import(&model).expect("imports");
    let art = tmp.0.join("dropout.tpuexe");
    let req = cpu_request();
    compile(&program, &model, &art, &req).expect("compiles");
    let manifest = crate::artifact::Artifact::open(&art).expect("opens").manifest;
    assert!(manifest.signature.rng_seed);
    let mask_with = |seed: u64, name: &str| {
        let out_dir = tmp.0.join(name);
        let inputs = inputs(&testdata().join("ops/native_dropout.default"));
        run(&RunRequest {
            artifact: art.clone(),
            inputs,
            out_dir: out_dir.clone(),
            plugin: None,
            reference: None,
            seed,
        })
        .expect("runs");
        std::fs::read(out_dir.join("out_1.npy")).expect("mask written")
    };
    let (a, again, other) = (mask_with(1, "a"), mask_with(1, "again"), mask_with(2, "other"));
    assert_eq!(a, again, "same seed, same mask");
    assert_ne!(a, other, "another seed, another mask");
}
