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
    /// Not a Core ATen op (the table's second section).
    #[serde(default)]
    extra: bool,
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

/// The cases of `testdata/<folder>/cases.json`.
fn cases(folder: &str) -> BTreeMap<String, Case> {
    let path = testdata().join(folder).join("cases.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("valid cases.json")
}

/// The FX target of a case name: `add.Tensor` is `aten.add.Tensor`; names with a namespace
/// (`prims.collapse.default`) are themselves.
fn qualified(op: &str) -> String {
    if op.matches('.').count() == 2 {
        op.to_string()
    } else {
        format!("aten.{op}")
    }
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
    CompileRequest::new(vec![Target::cpu()], Precision::Highest)
}

fn run_case(folder: &str, (op, case): (&str, &Case), tmp: &Path) -> Outcome {
    if case.status != "ok" {
        return Outcome::NotSupported(format!("not exported: {}", case.reason.as_deref().unwrap_or("no reason given")));
    }
    let model = testdata().join(folder).join(format!("{op}.pt2"));
    let program = match import(&model) {
        Ok(p) => p,
        Err(e) => return Outcome::NotSupported(format!("import: {e}")),
    };
    let report = check(&program, op);
    // The op's own problem says most; nodes around it (size checks) may fail too.
    let own = report.problems.iter().find(|p| p.target == qualified(op));
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
    let dir = testdata().join(folder).join(op);
    let out_dir = tmp.join(op);
    let req = RunRequest {
        artifact: art,
        inputs: inputs(&dir),
        out_dir: out_dir.clone(),
        plugin: None,
        device: crate::run::DeviceKind::Cpu,
        reference: None,
        seed: 0,
        verify_weights: false,
        cache_dir: None,
        tolerance: Default::default(),
        state_in: None,
        checkpoint: None,
        state_out: None,
        repeat: 1,
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

/// The coverage table of `docs/ops.md`: the Core ATen ops, then the others.
fn coverage(results: &[(String, &Case, Outcome)]) -> String {
    let (core, extra): (Vec<_>, Vec<_>) = results.iter().partition(|(_, c, _)| !c.extra);
    let mut out = String::from(
        "# Core ATen coverage\n\n\
         Generated by `cargo xtask coverage` from the single-op cases in `testdata/ops/` (made by `testdata/gen_ops.py` with torch 2.15); do not edit.\n\
         An op is supported when it lowers, compiles for CPU and matches PyTorch eager on every sample within its dtype's tolerance \
         (random ops: on shape, dtype, range and distribution moments). \
         Refused ops cannot be compiled to a static program, or never appear in an exported graph; the note says why. \
         `check --format json` reports each unsupported op's status from this table.\n\n\
         | op | status | samples | dtypes | notes |\n|---|---|---|---|---|\n",
    );
    table_rows(&mut out, &core, false);
    let _ = writeln!(out, "\n{} Core ATen ops supported, {}", count(&core), rest(&core));
    out.push_str(
        "\n## Beyond Core ATen\n\n\
         Ops outside the Core ATen set that exported programs hold: PT2E quantization (`quantized_decomposed`), \
         `prims`, and ATen ops that `run_decompositions()` keeps. Same cases, same rule.\n\n\
         | op | status | samples | dtypes | notes |\n|---|---|---|---|---|\n",
    );
    table_rows(&mut out, &extra, true);
    let _ = writeln!(out, "\n{} other ops supported, {}", count(&extra), rest(&extra));
    out
}

/// `k of n`: how many of these ops pass.
fn count(results: &[&(String, &Case, Outcome)]) -> String {
    let supported = results.iter().filter(|(_, _, o)| matches!(o, Outcome::Passed)).count();
    format!("{supported} of {}", results.len())
}

/// How many of these ops are refused with a reason, and how many are not yet supported.
fn rest(results: &[&(String, &Case, Outcome)]) -> String {
    let supported = results.iter().filter(|(_, _, o)| matches!(o, Outcome::Passed)).count();
    let refused = results.iter().filter(|(_, c, o)| status(c, o).0 == "refused").count();
    format!("{refused} refused with the reason given, {} not yet", results.len() - supported - refused)
}

/// One table row per op; `qualified` names them with their namespace.
fn table_rows(out: &mut String, results: &[&(String, &Case, Outcome)], qualified_names: bool) {
    for (op, case, outcome) in results {
        let op = if qualified_names { qualified(op) } else { op.clone() };
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
}

/// Runs every op case; fails on any op that lowers but is wrong, and on a stale `docs/ops.md`.
/// With `TORCHTPU_WRITE_COVERAGE=1` (what `cargo xtask coverage` sets) it rewrites the table.
#[test]
fn core_aten_op_cases() {
    let tmp = TempDir::new("ops");
    let cases = cases("ops");
    let results: Vec<(String, &Case, Outcome)> =
        cases.iter().map(|(op, case)| (op.clone(), case, run_case("ops", (op, case), &tmp.0))).collect();
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
            device: crate::run::DeviceKind::Cpu,
            reference: None,
            seed,
            verify_weights: false,
            cache_dir: None,
            tolerance: Default::default(),
            state_in: None,
            checkpoint: None,
            state_out: None,
            repeat: 1,
        })
        .expect("runs");
        std::fs::read(out_dir.join("out_1.npy")).expect("mask written")
    };
    let (a, again, other) = (mask_with(1, "a"), mask_with(1, "again"), mask_with(2, "other"));
    assert_eq!(a, again, "same seed, same mask");
    assert_ne!(a, other, "another seed, another mask");
}

/// Edge cases that eager accepts and that are refused, with the reason they are malformed.
const EDGE_REFUSALS: &[(&str, &str)] = &[
    (
        "_trilinear.default",
        "empty operands whose summed dims disagree (0 against 3): eager skips the size check when one is empty",
    ),
    (
        "native_layer_norm_backward.default",
        "a gradient of size 1 for a [3, 5] input: eager's kernel does not check the shape and reads past it",
    ),
];

/// The edge sweep (`testdata/ops_edge/`, made by `gen_ops.py --edge`): each op's samples with
/// every operand made 0-d, size 0 along the first or last dim, or size 1 in every dim, where
/// eager and export accept that. Each case must compile, run and match eager, or be refused by
/// `check` with a reason, and only ops that the op cases do not support may be refused.
#[test]
fn edge_op_cases() {
    let tmp = TempDir::new("ops_edge");
    let table = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ops.md")).unwrap_or_default();
    let core = cases("ops");
    let supported = |op: &str| {
        let name = if core.get(op).is_some_and(|c| c.extra) { qualified(op) } else { op.to_string() };
        table.contains(&format!("| `{name}` | supported |"))
    };
    let (mut passed, mut refused, mut failures) = (0, Vec::new(), Vec::new());
    for (op, case) in &cases("ops_edge") {
        // A panic is a failure of this op; the sweep goes on to report every op.
        match std::panic::catch_unwind(|| run_case("ops_edge", (op, case), &tmp.0)) {
            Ok(Outcome::Passed) => passed += 1,
            Ok(Outcome::NotSupported(r)) => refused.push((op.clone(), r)),
            Ok(Outcome::Failed(e)) => failures.push(format!("op `{op}`: {e}")),
            Err(_) => failures.push(format!("op `{op}`: panicked")),
        }
    }
    for (op, r) in &refused {
        eprintln!("refused `{op}`: {r}");
    }
    for f in &failures {
        eprintln!("{f}");
    }
    eprintln!("edge sweep: {passed} ops pass, {} refused, {} fail", refused.len(), failures.len());
    assert!(passed > 0, "no edge case ran");
    assert!(failures.is_empty(), "{} op(s) fail on 0-d, empty or size-1 operands", failures.len());
    let known = |op: &str| EDGE_REFUSALS.iter().any(|(k, _)| *k == op);
    let gaps: Vec<&String> = refused.iter().map(|(op, _)| op).filter(|op| supported(op) && !known(op)).collect();
    assert!(gaps.is_empty(), "ops supported in the op cases refuse their edge cases: {gaps:?}");
    let stale: Vec<&str> =
        EDGE_REFUSALS.iter().map(|(op, _)| *op).filter(|op| !refused.iter().any(|(r, _)| r == op)).collect();
    assert!(stale.is_empty(), "EDGE_REFUSALS lists ops that are no longer refused: {stale:?}");
}
