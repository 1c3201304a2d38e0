//! The artifact's manifest, built from the imported program, the lowered buckets and the
//! executables: the signature comes from the `Graph`, the source hash from the mapped archive.

use std::path::Path;

use torchtpu_passes::ir::{Dim, Graph, InputKind, Op, OutputKind, TensorType};

use super::{CompileRequest, LoweredBucket};
use crate::artifact::{
    describe_output, dims_json, Bucket, CompilerInfo, Manifest, MeshAxisInfo, OptionsInfo, PaddedContraction,
    PaddedDim, PassRecord, ShardingInfo, Signature, SignatureValue, SourceInfo, SymbolInfo, TargetEntry, WeightsInfo,
    ARTIFACT_FORMAT,
};
use crate::emit::{Attention, GroupedMm};
use crate::import::Program;

/// The manifest of an artifact whose weights, as written, are `weights` (the caller adds the
/// [`sharding`] of a split program).
pub(super) fn build(
    program: &Program,
    model: &Path,
    req: &CompileRequest,
    buckets: Vec<Bucket>,
    targets: Vec<TargetEntry>,
    source_blake3: String,
    weights: WeightsInfo,
) -> Manifest {
    let passes = buckets.first().map(|b| &b.passes[..]).unwrap_or_default();
    Manifest {
        format: ARTIFACT_FORMAT.to_string(),
        compiler: CompilerInfo { name: env!("CARGO_PKG_NAME").into(), version: env!("CARGO_PKG_VERSION").into() },
        source: source(program, model, source_blake3),
        signature: signature(program),
        options: options_info(req, passes.iter().map(|r| r.pass.clone()).collect()),
        weights,
        sharding: None,
        buckets,
        targets,
        serving: Vec::new(),
    }
}

/// The options that shaped the programs, with the passes that ran (`bucket_masks`, which
/// every dynamic program runs, left out).
pub(super) fn options_info(req: &CompileRequest, passes: Vec<String>) -> OptionsInfo {
    OptionsInfo {
        precision: req.precision.name().into(),
        passes: passes.into_iter().filter(|p| p != "bucket_masks").collect(),
        compute_dtype: req.pass_options.compute_dtype.map(|d| d.to_string()),
        pad_multiple: req.pass_options.pad_multiple,
        grouped_mm: (req.grouped_mm != GroupedMm::Dense).then(|| req.grouped_mm.name().to_string()),
        attention: match req.attention {
            (Attention::Auto, None) => None,
            (mode, None) => Some(mode.name().to_string()),
            (mode, Some(block)) => Some(format!("{}:{block}", mode.name())),
        },
    }
}

/// How a lowered program (any bucket: they split their arguments alike) is split over its
/// mesh, if it has one.
pub(super) fn sharding(graph: &Graph) -> Option<ShardingInfo> {
    let mesh = graph.mesh()?;
    let mut weights = std::collections::BTreeMap::new();
    let mut inputs = Vec::new();
    for &id in graph.graph_inputs() {
        let node = graph.node(id);
        let split = node.sharding.as_ref().filter(|s| !s.is_replicated()).map(|s| s.dims.clone());
        match &node.op {
            Op::Input(InputKind::User { .. }) => {
                inputs.push(split.unwrap_or_else(|| vec![Vec::new(); node.outputs[0].rank()]));
            }
            Op::Input(InputKind::Derived { fqn, .. }) => {
                weights.extend(split.map(|s| (fqn.clone(), s)));
            }
            Op::Input(k) => {
                if let (Some(fqn), Some(s)) = (k.weight_fqn(), split) {
                    weights.insert(fqn.to_string(), s);
                }
            }
            _ => {}
        }
    }
    let mesh = mesh.axes.iter().map(|a| MeshAxisInfo { name: a.name.clone(), size: a.size }).collect();
    Some(ShardingInfo { mesh, plan: "auto".into(), weights, inputs, chosen: None })
}

/// The source archive: its file name and the BLAKE3 of its bytes.
fn source(program: &Program, model: &Path, blake3: String) -> SourceInfo {
    SourceInfo {
        file: model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        blake3: Some(blake3),
        sha256: None,
        torch_version: program.info.torch_version.clone(),
        schema_version: format!("{}.{}", program.info.schema_version.0, program.info.schema_version.1),
    }
}

/// The user inputs and every graph output of the imported (symbolic) graph, with the symbols
/// and where their values come from.
fn signature(program: &Program) -> Signature {
    let g = &program.graph;
    let dynamic = !g.symbols().is_empty();
    let value = |name: &str, ty: &TensorType, kind: Option<String>| SignatureValue {
        name: name.to_string(),
        dtype: ty.dtype.to_string(),
        dims: dims_json(ty),
        kind,
        sym_dims: if dynamic { ty.dims.iter().map(Dim::to_expr).collect() } else { Vec::new() },
    };
    let inputs = user_inputs(g).map(|id| value(&g.node(id).name, &g.node(id).outputs[0], None)).collect();
    let outputs =
        g.outputs().iter().map(|o| value(g.value_name(o.value), g.value_type(o.value), Some(describe_output(&o.kind))));
    let symbols = g
        .symbols()
        .iter()
        .filter_map(|(name, b)| {
            let binding = program.bindings.get(name)?;
            Some(SymbolInfo { name: name.clone(), min: b.min, max: b.max, input: binding.input, dim: binding.dim })
        })
        .collect();
    let rng_seed = g.graph_inputs().iter().any(|&id| g.node(id).op == Op::Input(InputKind::RngSeed));
    Signature { inputs, outputs: outputs.collect(), symbols, guards: program.guards.clone(), rng_seed }
}

fn user_inputs(g: &Graph) -> impl Iterator<Item = torchtpu_passes::ir::NodeId> + '_ {
    g.graph_inputs().iter().copied().filter(|&id| matches!(g.node(id).op, Op::Input(InputKind::User { .. })))
}

/// A bucket's entry: its static user input and output shapes, what it serves and what the
/// passes did.
pub(super) fn bucket(b: &LoweredBucket, entry: &str) -> Bucket {
    let (p, lowered) = (&b.planned, &b.lowered);
    let g = &lowered.graph;
    let dims = |ty: &TensorType| -> Vec<i64> { ty.dims.iter().filter_map(|d| d.as_static()).collect() };
    let sizes = g
        .graph_inputs()
        .iter()
        .filter_map(|&id| match &g.node(id).op {
            Op::Input(InputKind::Size { symbol }) => Some(symbol.clone()),
            _ => None,
        })
        .collect();
    let computed = g
        .outputs()
        .iter()
        .filter_map(|o| match &o.kind {
            OutputKind::Size { symbol } => Some(symbol.clone()),
            _ => None,
        })
        .collect();
    Bucket {
        name: p.name.clone(),
        bindings: lowered.bindings.clone(),
        sizes,
        computed,
        serves: p.serves.iter().map(|(s, &(lo, hi))| (s.clone(), [lo, hi])).collect(),
        padding_waste: p.padding_waste,
        program: entry.to_string(),
        program_sha256: crate::digest::sha256_hex(lowered.module.text.as_bytes()),
        input_dims: user_inputs(g).map(|id| dims(&g.node(id).outputs[0])).collect(),
        output_dims: g
            .outputs()
            .iter()
            .filter(|o| !matches!(o.kind, OutputKind::Size { .. }))
            .map(|o| dims(g.value_type(o.value)))
            .collect(),
        passes: lowered
            .passes
            .iter()
            .map(|r| PassRecord {
                pass: r.pass.clone(),
                nodes_before: r.nodes_before,
                nodes_after: r.nodes_after,
                notes: r.notes.clone(),
                padded: r.padded.iter().map(padded_contraction).collect(),
            })
            .collect(),
    }
}

/// The manifest's record of a contraction the `pad` pass widened.
fn padded_contraction(c: &torchtpu_passes::pass::PaddedContraction) -> PaddedContraction {
    let dims = c
        .dims
        .iter()
        .map(|d| PaddedDim { role: d.role.clone(), size: d.size, padded: d.padded, blocks: d.blocks })
        .collect();
    PaddedContraction { node: c.node.clone(), dims, extra_flops: c.extra_flops }
}
