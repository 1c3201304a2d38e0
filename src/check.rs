//! `check`: does every op lower to StableHLO? Lowers without compiling and lists every problem
//! at once, grouped by op, so CI can gate graph lowering with one run.
//!
//! The JSON form ([`CheckReport`], `"format": "torchtpu-check/1"`) is documented in README.md.

use std::collections::BTreeMap;
use std::fmt::Write;
use torchtpu_passes::ir::ops::Unsupported;

use serde::Serialize;
use torchtpu_passes::ir::Op;

use crate::driver::{self, LowerError};
use crate::emit::{EmitError, NodeFailure};
use crate::import::Program;

/// Identifies the layout of the JSON report.
pub(crate) const CHECK_FORMAT: &str = "torchtpu-check/1";

/// The result of `check`.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    /// `torchtpu-check/1`: the report's layout version.
    pub format: &'static str,
    /// The archive checked, as given.
    pub file: String,
    /// True when the whole program lowers.
    pub ok: bool,
    /// FX nodes in the program.
    pub nodes: usize,
    /// Problems grouped by op target, sorted by target.
    pub problems: Vec<OpProblem>,
    /// What the default bucket plan chose, as `compile` says it: the sizes of a program whose
    /// dynamic dims would make more buckets than a compile makes by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<String>,
    /// Advice for the whole program: ops outside Core ATen mean it was saved without
    /// `run_decompositions()` (see [`crate::coverage::undecomposed_hint`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// All nodes of one target that cannot be lowered.
#[derive(Debug, Serialize)]
pub struct OpProblem {
    /// FX target without the `torch.ops.` prefix, e.g. `aten.cholesky.default`.
    pub target: String,
    /// Why (from the first node; nodes of one target fail for the same reason).
    pub reason: String,
    /// The nodes, in graph order.
    pub nodes: Vec<String>,
    /// The user's source line of the first node, when the export recorded it.
    pub source_line: Option<String>,
    /// The op's status in the Core ATen coverage table (`docs/ops.md`): `supported` (this use
    /// of it is what fails), `refused` or `not yet`; absent for ops outside Core ATen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_aten: Option<&'static str>,
}

/// Lowers `program` at its example sizes, and a dynamic one through the passes of every bucket
/// `compile` makes by default, and reports what fails.
pub fn check(program: &Program, file: &str) -> CheckReport {
    check_with(program, file, &[])
}

/// [`check`] of the buckets `compile` makes with `choices` (`--buckets`, `--max`).
pub(crate) fn check_with(program: &Program, file: &str, choices: &[crate::buckets::Choice]) -> CheckReport {
    let nodes = program.graph.node_ids().filter(|&id| !matches!(program.graph.node(id).op, Op::Input(_))).count();
    let failures: Vec<NodeFailure> = match driver::example_bindings(program)
        .map_err(LowerError::from)
        .and_then(|b| driver::lower(program, b, &driver::LowerOptions::default()).map(|_| ()))
    {
        Ok(()) => vec![],
        Err(LowerError::Emit(EmitError::Lowering(f))) => f,
        // Unsupported nodes (e.g. data-dependent shapes) can make specialization impossible;
        // they are the cause to report.
        Err(_) if !program.unsupported_nodes().is_empty() => unsupported_failures(program),
        Err(other) => vec![program_failure("(program)", other.to_string())],
    };
    let (failures, buckets) = if failures.is_empty() { bucket_failures(program, choices) } else { (failures, None) };
    let mut groups: BTreeMap<String, OpProblem> = BTreeMap::new();
    for f in failures {
        let target = f.target.strip_prefix("torch.ops.").unwrap_or(&f.target).to_string();
        let g = groups.entry(target.clone()).or_insert_with(|| OpProblem {
            target,
            reason: f.reason.clone(),
            nodes: vec![],
            source_line: f.source_line.clone(),
            core_aten: crate::coverage::core_aten_status(&f.target),
        });
        if !f.node.is_empty() {
            g.nodes.push(f.node);
        }
    }
    let problems: Vec<OpProblem> = groups.into_values().collect();
    let hint = crate::coverage::undecomposed_hint(problems.iter().map(|p| p.target.as_str()));
    CheckReport {
        format: CHECK_FORMAT,
        file: file.to_string(),
        ok: problems.is_empty(),
        nodes,
        problems,
        buckets,
        hint,
    }
}

/// A dynamic program must also compile into its size buckets: each bucket `compile` makes with
/// `choices` is put through the passes with its masks (not emitted again), and an op that cannot
/// be made exact under padding is a failure, with the message compile gives and the first bucket
/// that meets it; so is a plan compile refuses (an unbounded dim). With it, what the default
/// plan chose.
fn bucket_failures(program: &Program, choices: &[crate::buckets::Choice]) -> (Vec<NodeFailure>, Option<String>) {
    if program.graph.symbols().is_empty() {
        return (vec![], None);
    }
    let planned =
        crate::buckets::plan(program, choices).and_then(|plan| Ok((plan, crate::buckets::bounds(program, choices)?)));
    let (plan, bounds) = match planned {
        Ok(both) => both,
        Err(e) => return (vec![program_failure("(size buckets)", e.to_string())], None),
    };
    let crate::buckets::Plan { buckets, note } = plan;
    let mut seen = std::collections::BTreeSet::new();
    let mut failures = vec![];
    for crate::buckets::Planned { name, values, .. } in buckets {
        let Ok(values) = driver::with_computed_sizes(program, values) else { continue };
        let mut opts = driver::LowerOptions::default();
        let spec = torchtpu_passes::bucket_masks::BucketSpec { values: values.clone(), bounds: bounds.clone() };
        opts.pass_options.bucket = Some(spec);
        if let Err(e @ LowerError::Pass(_)) = driver::transform(program, &values, &opts) {
            let reason = e.to_string();
            if seen.insert(reason.clone()) {
                failures.push(program_failure("(size buckets)", format!("{reason} (bucket {name})")));
            }
        }
    }
    (failures, note)
}

/// A failure of the whole program, not of one node.
fn program_failure(target: &str, reason: String) -> NodeFailure {
    NodeFailure { node: String::new(), target: target.into(), reason, source_line: None }
}

/// The unsupported nodes of the imported graph, as failures.
fn unsupported_failures(program: &Program) -> Vec<NodeFailure> {
    program
        .unsupported_nodes()
        .into_iter()
        .map(|id| {
            let node = program.graph.node(id);
            let reason = match &node.op {
                Op::Unsupported(Unsupported { target, reason }) => {
                    reason.clone().unwrap_or_else(|| format!("no lowering for `{target}`"))
                }
                _ => String::new(),
            };
            NodeFailure {
                node: node.name.clone(),
                target: node.origin.target.clone(),
                reason,
                source_line: node.origin.source_line().map(str::to_string),
            }
        })
        .collect()
}

/// The human-readable form.
pub(crate) fn render_text(r: &CheckReport) -> String {
    let mut out = String::new();
    if r.ok {
        let _ = writeln!(out, "{}: ok, all {} nodes lower to StableHLO", r.file, r.nodes);
        if let Some(note) = &r.buckets {
            let _ = writeln!(out, "note: {note}");
        }
        return out;
    }
    // Problems of the whole program (specialization, size buckets) are not ops: not counted as such.
    let ops: Vec<&OpProblem> = r.problems.iter().filter(|p| !p.target.starts_with('(')).collect();
    let count: usize = ops.iter().map(|p| p.nodes.len().max(1)).sum();
    let _ = match ops.len() {
        0 => writeln!(out, "{}: the program cannot be lowered:", r.file),
        n => writeln!(out, "{}: {n} op(s) cannot be lowered ({count} of {} nodes):", r.file, r.nodes),
    };
    for p in &r.problems {
        let shown: Vec<&str> = p.nodes.iter().take(5).map(String::as_str).collect();
        let more = if p.nodes.len() > 5 { format!(", … {} more", p.nodes.len() - 5) } else { String::new() };
        let _ = writeln!(out, "  {}: {}", p.target, p.reason);
        if !shown.is_empty() {
            let _ = writeln!(out, "    nodes: {}{more}", shown.join(", "));
        }
        if let Some(line) = &p.source_line {
            let _ = writeln!(out, "    at {line}");
        }
    }
    if let Some(hint) = &r.hint {
        let _ = writeln!(out, "hint: {hint}");
    }
    out
}
