//! `inspect`: a description of an exported program — signature, symbols, weights, op histogram.
//!
//! The JSON form ([`Report`]) is a stable interface for scripts; its fields are documented in
//! README.md ("`inspect --format json`") and `schemas/inspect.schema.json`. Fields are only
//! ever added, and `format` changes if an existing field's meaning changes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde::Serialize;
use torchtpu_passes::ir::{InputKind, Op, OutputKind, TensorType};

use crate::artifact::{describe_output, dims_json};
use crate::display::human_bytes;
use crate::import::{Program, Weight};

/// Identifies the layout of the JSON report.
pub(crate) const REPORT_FORMAT: &str = "torchtpu-inspect/1";

/// The `inspect` report of a `.pt2` archive.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `torchtpu-inspect/1`: the report's layout version (fields are only ever added).
    pub format: &'static str,
    /// `pt2`.
    pub kind: &'static str,
    /// The archive, as given.
    pub file: String,
    /// The export schema version the archive was written with.
    pub schema_version: String,
    /// The torch that exported it, when recorded.
    pub torch_version: Option<String>,
    /// The user inputs, dims static or symbolic.
    pub inputs: Vec<ValueInfo>,
    /// The user outputs.
    pub outputs: Vec<ValueInfo>,
    /// Each symbolic size with its bounds and the input dim it is read from.
    pub symbols: Vec<SymbolInfo>,
    /// The export's guards: conditions on the inputs' sizes every call must meet.
    pub guards: Vec<String>,
    /// The parameters: tensors, elements, bytes.
    pub parameters: WeightSummary,
    /// The buffers.
    pub buffers: WeightSummary,
    /// The lifted tensor constants.
    pub constants: WeightSummary,
    /// The buffers and parameters the program updates.
    pub mutations: Vec<String>,
    /// Python constants baked into the signature.
    pub constant_inputs: Vec<ConstantInput>,
    /// Nodes of the graph.
    pub nodes: usize,
    /// Nodes per ATen target.
    pub ops: BTreeMap<String, usize>,
    /// Nodes per target that has no translation.
    pub unsupported_ops: BTreeMap<String, usize>,
}

/// A user input or output.
#[derive(Debug, Serialize)]
pub struct ValueInfo {
    pub name: String,
    pub dtype: String,
    /// Integers for static sizes, expression strings (`"s70"`, `"2*s70"`) for symbolic ones.
    pub dims: Vec<serde_json::Value>,
    /// For outputs: `user`, `loss`, `gradient <fqn>`, `buffer_mutation <fqn>`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// A symbol with its bounds and the input dimension that defines it.
#[derive(Debug, Serialize)]
pub struct SymbolInfo {
    pub name: String,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub input: Option<String>,
    pub dim: Option<usize>,
}

/// Counts over a class of stored tensors; tensors viewing the same bytes count once.
#[derive(Debug, Default, Serialize)]
pub struct WeightSummary {
    pub tensors: usize,
    pub elements: i64,
    pub bytes: u64,
}

/// A Python constant baked into the signature.
#[derive(Debug, Serialize)]
pub struct ConstantInput {
    pub name: String,
    pub value: String,
}

fn value_info(name: &str, ty: &TensorType) -> ValueInfo {
    ValueInfo { name: name.to_string(), dtype: ty.dtype.to_string(), dims: dims_json(ty), kind: None }
}

/// Builds the report of an imported program.
pub fn report(program: &Program, file: &str) -> Report {
    let g = &program.graph;
    let inputs = g
        .graph_inputs()
        .iter()
        .map(|&id| g.node(id))
        .filter(|n| matches!(n.op, Op::Input(InputKind::User { .. })))
        .map(|n| value_info(&n.name, &n.outputs[0]))
        .collect();
    let mut outputs = Vec::new();
    let mut mutations = Vec::new();
    for o in g.outputs() {
        // Every graph output, in graph order: what the program returns and `run` writes.
        let info = value_info(g.value_name(o.value), g.value_type(o.value));
        outputs.push(ValueInfo { kind: Some(describe_output(&o.kind)), ..info });
        match &o.kind {
            OutputKind::BufferMutation { fqn } => mutations.push(format!("buffer {fqn}")),
            OutputKind::ParameterMutation { fqn } => mutations.push(format!("parameter {fqn}")),
            OutputKind::UserInputMutation { input } => mutations.push(format!("user input {input}")),
            _ => {}
        }
    }
    let symbols = g
        .symbols()
        .iter()
        .map(|(name, b)| {
            let binding = program.bindings.get(name);
            SymbolInfo {
                name: name.clone(),
                min: b.min,
                max: b.max,
                input: binding.map(|b| b.input_name.clone()),
                dim: binding.map(|b| b.dim),
            }
        })
        .collect();
    let (mut ops, mut unsupported) = (BTreeMap::new(), BTreeMap::new());
    let mut nodes = 0;
    for id in g.node_ids() {
        let node = g.node(id);
        if matches!(node.op, Op::Input(_)) {
            continue;
        }
        nodes += 1;
        let target = node.origin.target.strip_prefix("torch.ops.").unwrap_or(&node.origin.target).to_string();
        if matches!(node.op, Op::Unsupported(_)) {
            *unsupported.entry(target.clone()).or_insert(0) += 1;
        }
        *ops.entry(target).or_insert(0) += 1;
    }
    Report {
        format: REPORT_FORMAT,
        kind: "pt2",
        file: file.to_string(),
        schema_version: format!("{}.{}", program.info.schema_version.0, program.info.schema_version.1),
        torch_version: program.info.torch_version.clone(),
        inputs,
        outputs,
        symbols,
        guards: program.guards.iter().map(|g| g.text().to_string()).collect(),
        parameters: summarize(program, |k| matches!(k, InputKind::Parameter { .. })),
        buffers: summarize(program, |k| matches!(k, InputKind::Buffer { .. })),
        constants: summarize(program, |k| matches!(k, InputKind::Constant { .. })),
        mutations,
        constant_inputs: program
            .constant_inputs
            .iter()
            .map(|(name, value)| ConstantInput { name: name.clone(), value: value.clone() })
            .collect(),
        nodes,
        ops,
        unsupported_ops: unsupported,
    }
}

/// Sums the graph inputs of one kind; views of the same bytes (tied weights) count once.
fn summarize(program: &Program, want: impl Fn(&InputKind) -> bool) -> WeightSummary {
    let mut seen = BTreeSet::new();
    let mut s = WeightSummary::default();
    for &id in program.graph.graph_inputs() {
        let Op::Input(kind) = &program.graph.node(id).op else {
            continue;
        };
        if !want(kind) {
            continue;
        }
        let Some(w) = kind.weight_fqn().and_then(|fqn| program.weights.get(fqn)) else {
            continue;
        };
        if seen.insert(view_key(w)) {
            s.tensors += 1;
            s.elements += w.numel();
            s.bytes += w.nbytes();
        }
    }
    s
}

fn view_key(w: &Weight) -> (String, i64, Vec<i64>, Vec<i64>) {
    (w.entry.clone(), w.storage_offset, w.sizes.clone(), w.strides.clone())
}

fn dims_text(dims: &[serde_json::Value]) -> String {
    let v: Vec<String> = dims.iter().map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_string)).collect();
    format!("[{}]", v.join(", "))
}

/// The human-readable form.
pub(crate) fn render_text(r: &Report) -> String {
    let mut out = String::new();
    let torch = r.torch_version.as_deref().unwrap_or("unknown torch");
    let _ = writeln!(out, "{}: torch.export archive (schema {}, torch {torch})", r.file, r.schema_version);
    let _ = writeln!(out, "inputs:");
    for v in &r.inputs {
        let _ = writeln!(out, "  {}: {}{}", v.name, v.dtype, dims_text(&v.dims));
    }
    let _ = writeln!(out, "outputs:");
    for (i, v) in r.outputs.iter().enumerate() {
        let kind = v.kind.as_deref().filter(|k| *k != "user").map_or_else(String::new, |k| format!("  ({k})"));
        let _ = writeln!(out, "  {i}: {} {}{}{kind}", v.name, v.dtype, dims_text(&v.dims));
    }
    if !r.symbols.is_empty() {
        let _ = writeln!(out, "symbols:");
        for s in &r.symbols {
            let show = |v: Option<i64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
            let declared = |i: &str, d: usize| {
                let dims = r.inputs.iter().find(|v| v.name == i).map(|v| &v.dims);
                dims.and_then(|dims| dims.get(d)?.as_str().map(str::to_string)).filter(|e| *e != s.name)
            };
            let from = match (&s.input, s.dim) {
                (Some(i), Some(d)) => match declared(i, d) {
                    Some(e) => format!("  (`{i}` dim {d} is {e})"),
                    None => format!("  (size of `{i}` dim {d})"),
                },
                _ => "  (not bound by any input dimension)".to_string(),
            };
            let from = match (s.max, &s.input) {
                (None, Some(_)) => format!("{from}, unbounded: compile with --max {}=N or --buckets", s.name),
                _ => from,
            };
            let _ = writeln!(out, "  {} in [{}, {}]{from}", s.name, show(s.min), show(s.max));
        }
    }
    render_guards(&mut out, r.guards.iter().map(String::as_str));
    for (label, w) in [("parameters", &r.parameters), ("buffers", &r.buffers), ("constants", &r.constants)] {
        let _ = writeln!(out, "{label}: {} tensors, {} elements, {}", w.tensors, w.elements, human_bytes(w.bytes));
    }
    for m in &r.mutations {
        let _ = writeln!(out, "mutates: {m}");
    }
    for c in &r.constant_inputs {
        let _ = writeln!(out, "constant input: {} = {}", c.name, c.value);
    }
    let _ = writeln!(out, "ops ({} nodes, {} distinct):", r.nodes, r.ops.len());
    let mut by_count: Vec<(&String, &usize)> = r.ops.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (op, n) in by_count {
        let mark = if r.unsupported_ops.contains_key(op) { "  (no lowering)" } else { "" };
        let _ = writeln!(out, "  {n:>5}  {op}{mark}");
    }
    out
}

/// The `inspect` report of a `.tpuexe` artifact: its manifest, as written.
#[derive(Debug, Serialize)]
pub(crate) struct ArtifactReport<'a> {
    pub format: &'static str,
    pub kind: &'static str,
    pub file: String,
    pub manifest: &'a crate::artifact::Manifest,
}

/// Builds the report of an artifact.
pub(crate) fn artifact_report(art: &crate::artifact::Artifact) -> ArtifactReport<'_> {
    ArtifactReport {
        format: REPORT_FORMAT,
        kind: "artifact",
        file: art.path().display().to_string(),
        manifest: &art.manifest,
    }
}

/// The export's guards, one a line, when it has any.
fn render_guards<'a>(out: &mut String, guards: impl Iterator<Item = &'a str>) {
    let mut guards = guards.peekable();
    if guards.peek().is_some() {
        let _ = writeln!(out, "guards (every call's inputs must meet each; others are refused):");
        for g in guards {
            let _ = writeln!(out, "  {g}");
        }
    }
}

/// The human-readable form of an artifact's manifest.
pub(crate) fn render_artifact(art: &crate::artifact::Artifact) -> String {
    let m = &art.manifest;
    let (algorithm, digest) = m.source.digest().unwrap_or(("digest", ""));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: torchtpu-compile artifact ({}, {} {}) from {} ({algorithm} {})",
        art.path().display(),
        m.format,
        m.compiler.name,
        m.compiler.version,
        m.source.file,
        &digest[..digest.len().min(12)]
    );
    let _ = writeln!(out, "inputs:");
    for v in &m.signature.inputs {
        let _ = writeln!(out, "  {}: {}{}", v.name, v.dtype, dims_text(&v.dims));
    }
    if m.signature.rng_seed {
        let _ = writeln!(out, "  (random ops: `run --seed N` picks their numbers; default 0)");
    }
    let _ = writeln!(out, "outputs (the file `run` writes each to):");
    let files = crate::artifact::output_files(&m.signature.outputs);
    for (v, file) in m.signature.outputs.iter().zip(&files) {
        let kind = v.kind.as_deref().filter(|k| *k != "user").map_or_else(String::new, |k| format!("  ({k})"));
        let _ = writeln!(out, "  {file}: {} {}{}{kind}", v.name, v.dtype, dims_text(&v.dims));
    }
    render_guards(&mut out, m.signature.guards.iter().map(crate::Guard::text));
    let _ = writeln!(
        out,
        "precision: {}{}; weights: {} tensors, {}{}",
        m.options.precision,
        m.options.grouped_mm.as_ref().map_or(String::new(), |f| format!("; grouped matmuls: {f}")),
        m.weights.order.len(),
        human_bytes(m.weights.bytes),
        if m.weights.external { format!(" in `{}` beside the artifact", m.weights.entry) } else { String::new() }
    );
    if !m.serving.is_empty() {
        let files: Vec<String> = m.serving.iter().map(|f| format!("{} ({})", f.name, human_bytes(f.bytes))).collect();
        let _ = writeln!(out, "for `serve`: {}", files.join(", "));
    }
    if let Some(sh) = &m.sharding {
        let mesh: Vec<String> = sh.mesh.iter().map(|a| format!("{}={}", a.name, a.size)).collect();
        let devices: i64 = sh.mesh.iter().map(|a| a.size).product();
        let _ = writeln!(
            out,
            "split over a mesh of {devices} devices ({}), plan `{}`: {} of {} weights split, every result whole",
            mesh.join(", "),
            sh.plan,
            sh.weights.len(),
            m.weights.order.len()
        );
        for (v, split) in m.signature.inputs.iter().zip(&sh.inputs) {
            if split.iter().any(|d| !d.is_empty()) {
                let dims: Vec<String> =
                    split.iter().map(|d| if d.is_empty() { "-".to_string() } else { d.join("×") }).collect();
                let _ = writeln!(out, "  input {}: [{}]", v.name, dims.join(", "));
            }
        }
    }
    let _ = writeln!(out, "buckets:");
    for b in &m.buckets {
        let bind: Vec<String> = b.bindings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let shown = if bind.is_empty() { "static".to_string() } else { bind.join(", ") };
        let serves: Vec<String> = b.serves.iter().map(|(k, [lo, hi])| format!("{k} in [{lo}, {hi}]")).collect();
        let serves = if serves.is_empty() {
            String::new()
        } else {
            format!("; serves {}, padding waste {:.0}%", serves.join(", "), b.padding_waste * 100.0)
        };
        let _ = writeln!(out, "  {}: {shown}, inputs {:?}{serves}", b.name, b.input_dims);
        let padded: Vec<_> = b.passes.iter().flat_map(|p| &p.padded).collect();
        if let (Some(multiple), false) = (m.options.pad_multiple, padded.is_empty()) {
            let flops: u64 = padded.iter().map(|c| c.extra_flops).sum();
            let _ =
                writeln!(out, "    padded to multiples of {multiple}: {} contractions, +{flops} FLOPs", padded.len());
        }
    }
    let _ = writeln!(out, "targets:");
    for t in &m.targets {
        render_target(&mut out, t);
    }
    for w in m.targets.iter().flat_map(crate::artifact::TargetEntry::hbm_overflows) {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// One target: its plugin build, the slice, and per executable its size and memory needs.
fn render_target(out: &mut String, t: &crate::artifact::TargetEntry) {
    let platform = t.plugin.platform_version.lines().next().unwrap_or_default();
    let version = t.plugin.version.as_deref().map_or_else(String::new, |v| format!(" {v}"));
    let _ = writeln!(
        out,
        "  {} via {}{version} ({platform}, PJRT C API {})",
        t.target, t.plugin.file, t.plugin.api_version
    );
    if let Some(tpu) = &t.tpu {
        let how = if tpu.partitions > 1 {
            "split over every chip: memory figures are per chip"
        } else {
            "a replicated single-partition program: no `--mesh`"
        };
        let _ = writeln!(out, "    slice of {} chip(s); the program spans {} ({how})", tpu.chips, tpu.partitions);
    }
    for e in &t.executables {
        let _ =
            writeln!(out, "    {}: {} ({}), compiled in {} ms", e.bucket, e.entry, human_bytes(e.bytes), e.compile_ms);
        if let Some(mem) = &e.memory {
            let hbm = t.tpu.as_ref().and_then(|t| t.hbm_bytes_per_chip);
            let fit = hbm.map_or_else(String::new, |h| {
                let pct = 100.0 * mem.peak_bytes as f64 / h as f64;
                let verdict = if (mem.peak_bytes as u64) <= h { "fits" } else { "does NOT fit" };
                format!(" — {verdict} in {} of HBM per chip ({pct:.2}%)", human_bytes(h))
            });
            let _ = writeln!(
                out,
                "      device memory: peak {}{fit}; arguments {}, outputs {}, temporaries {}, code {}",
                human_bytes(mem.peak_bytes.max(0) as u64),
                human_bytes(mem.argument_bytes.max(0) as u64),
                human_bytes(mem.output_bytes.max(0) as u64),
                human_bytes(mem.temp_bytes.max(0) as u64),
                human_bytes(e.generated_code_bytes.unwrap_or(0).max(0) as u64),
            );
        }
        if let Some(cost) = &e.cost {
            let _ = writeln!(
                out,
                "      XLA cost model: {:.3} GFLOP, {} accessed per run",
                cost.flops / 1e9,
                human_bytes(cost.bytes_accessed.max(0.0) as u64)
            );
        }
        if !e.collectives.is_empty() {
            let kinds: Vec<String> =
                e.collectives.iter().map(|(k, c)| format!("{} {k} ({})", c.count, human_bytes(c.bytes))).collect();
            let _ = writeln!(out, "      collectives per run, per device: {}", kinds.join(", "));
        }
    }
}
