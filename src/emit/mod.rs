//! IR → StableHLO, built with melior as generic operations.
//!
//! The emitted module is `func.func @main(%weights..., %inputs...) -> outputs`, with graph
//! inputs in calling order (parameters, buffers, constants, then user inputs). Every op's
//! location is `"<node name>"("<file>":<line>:0)` from the FX stack trace, so an XLA
//! diagnostic points at the PyTorch source line. The graph must be static (specialized).
//! A node that cannot be lowered does not stop the emitter: all failures are collected and
//! reported together, which is what `check` lists. A graph split over a mesh gets Shardy's
//! annotations (`sharding`): the mesh, every argument's and result's sharding, and the
//! constraints the `shard` pass set. A weight the program returns updated is aliased to that
//! result (`signature`), so a caller that donates it gets the update in place.

mod attention;
mod bag;
mod builder;
mod complex;
mod composite;
mod control;
mod distance;
mod elementwise;
mod fft;
mod layout;
mod linalg;
mod math;
mod nms;
mod nn;
mod pool;
mod random;
mod reduce;
mod sample;
mod scatter;
mod shape;
mod sharding;
mod signature;
mod sort;
mod tensor;

use std::collections::BTreeMap;
use torchtpu_passes::ir::ops::{
    AdaptiveAvgPoolBackward, After, Arange, ArangeSym, AsStrided, AvgPoolBackward, Binary, Bmm, Cat, Cdist, Clamp,
    ClampTensor, Convert, ConvolutionBackward, CopyFrom, Cumulative, Embedding, EmbeddingBackward, ExtremumDim, Flip,
    Full, FullLike, Gather, Identity, Index, IndexPut, IndexSelect, LeakyRelu, Literal, MaskedScatter, MaxPoolBackward,
    Mm, Pad, PadMode, Pdist, Permute, RandPerm, Repeat, ScalarTensor, Scatter, Select, SelectScatter, Slice,
    SliceScatter, Sort, SplitWithSizes, SymInt, SymSize, TopK, Unsupported, Var, Where,
};

use melior::dialect::DialectHandle;
use melior::ir::attribute::Attribute;
use melior::ir::block::BlockLike;
use melior::ir::operation::{OperationBuilder, OperationLike, OperationPrintingFlags};
use melior::ir::RegionLike;
use melior::ir::{Block, Identifier, Location, Module, Region, Value};
use melior::Context;
use thiserror::Error;
use torchtpu_passes::ir::{DType, Dim, Graph, Node, NodeId, Op, Scalar, TensorType, ValueRef};

pub(crate) use attention::Attention;
use builder::{bug, static_dims, static_list, tensor_type_text, Builder, Fail, LowerResult};
pub(crate) use composite::naive_attentions;

pub use torchtpu_passes::ir::Precision;

/// Options of the emitter.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EmitOptions {
    /// Precision of every contraction.
    pub precision: Precision,
    /// How `_grouped_mm` (mixture-of-experts layers) is lowered.
    pub grouped_mm: GroupedMm,
    /// How attention (`torchtpu.sdpa` groups) is lowered.
    pub attention: Attention,
    /// Keys per block of blocked attention; `None`: [`attention::DEFAULT_BLOCK`].
    pub attention_block: Option<i64>,
}

/// The two exact lowerings of `_grouped_mm`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupedMm {
    /// A masked dense product over every group: any XLA backend, G times the FLOPs.
    #[default]
    Dense,
    /// One `chlo.ragged_dot`: TPU only (XLA:CPU has no ragged dot).
    Ragged,
}

impl GroupedMm {
    /// The name `--grouped-mm` takes.
    pub fn name(self) -> &'static str {
        match self {
            GroupedMm::Dense => "dense",
            GroupedMm::Ragged => "ragged",
        }
    }
}

/// One node that could not be lowered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeFailure {
    /// FX node name.
    pub node: String,
    /// FX target.
    pub target: String,
    /// Why.
    pub reason: String,
    /// `File "…", line N, in f` from the stack trace, when known.
    pub source_line: Option<String>,
}

/// Why a module could not be emitted.
#[derive(Debug, Error)]
pub enum EmitError {
    /// Some nodes have no lowering or invalid attributes; all of them are listed.
    #[error("{} node(s) cannot be lowered to StableHLO:{}", .0.len(), list_failures(.0))]
    Lowering(Vec<NodeFailure>),
    /// MLIR rejected what we built: a compiler bug.
    #[error("internal error while building StableHLO, a bug in torchtpu-compile (please report it): {0}")]
    Internal(String),
}

fn list_failures(failures: &[NodeFailure]) -> String {
    let mut s = String::new();
    for f in failures {
        s.push_str(&format!("\n  node `{}` ({}): {}", f.node, f.target, f.reason));
        if let Some(line) = &f.source_line {
            s.push_str(&format!("\n    at {line}"));
        }
    }
    if let Some(hint) = crate::coverage::undecomposed_hint(failures.iter().map(|f| f.target.as_str())) {
        s.push_str(&format!("\nhint: {hint}"));
    }
    s
}

/// The emitted module in both serializations.
#[derive(Clone, Debug)]
pub(crate) struct Emitted {
    /// Generic-form StableHLO text with locations: deterministic, readable, parsed by every
    /// StableHLO consumer.
    pub text: String,
    /// MLIR bytecode of the same module.
    pub bytecode: Vec<u8>,
}

/// A lowered value with its static shape and dtype.
#[derive(Clone, Copy)]
pub(crate) struct Arg<'c, 'b, 't> {
    pub v: Value<'c, 'b>,
    pub ty: &'t TensorType,
}

/// Runs `f` with every 0-d operand viewed as `[1]` and a `[1]` result, viewed back as 0-d: ops
/// that index along a dim see a 0-d tensor as one of size 1, as PyTorch does.
fn on_unit_vectors<'c, 'b>(
    b: &Builder<'c, 'b>,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
    f: impl for<'t> FnOnce(&[Arg<'c, 'b, 't>], &TensorType) -> LowerResult<Value<'c, 'b>>,
) -> LowerResult<Value<'c, 'b>> {
    let unit = |ty: &TensorType| if ty.rank() == 0 { TensorType::new(ty.dtype, &[1]) } else { ty.clone() };
    let types: Vec<TensorType> = args.iter().map(|a| unit(a.ty)).collect();
    let mut lifted = Vec::with_capacity(args.len());
    for (a, ty) in args.iter().zip(&types) {
        let v = if a.ty.rank() == 0 { b.reshape(a.v, &[1], a.ty.dtype)? } else { a.v };
        lifted.push(Arg { v, ty });
    }
    let r = f(&lifted, &unit(out))?;
    b.reshape(r, &[], out.dtype)
}

/// Emits the StableHLO module of a static graph.
pub(crate) fn emit(graph: &Graph, opts: &EmitOptions) -> Result<Emitted, EmitError> {
    let ctx = Context::new();
    ctx.set_allow_unregistered_dialects(true);
    DialectHandle::func().load_dialect(&ctx);
    let unknown = Location::unknown(&ctx);
    let module = Module::new(unknown);

    if !graph.symbols().is_empty() {
        let symbols: Vec<&str> = graph.symbols().keys().map(String::as_str).collect();
        return Err(EmitError::Internal(format!(
            "the graph has symbolic sizes ({}): the emitter takes a graph specialized to one size bucket",
            symbols.join(", ")
        )));
    }
    let inputs: Vec<&TensorType> = graph.graph_inputs().iter().map(|&id| &graph.node(id).outputs[0]).collect();
    let arg_types = inputs
        .iter()
        .map(|ty| mlir_type(&ctx, ty).map(|t| (t, unknown)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(EmitError::Internal)?;
    let block = Block::new(&arg_types);
    let mut decompositions = Vec::new();
    let result_types = emit_body(&ctx, &block, graph, opts, &mut decompositions)?;

    let region = Region::new();
    region.append_block(block);
    let arg_text: Vec<String> =
        inputs.iter().map(|t| type_text(t)).collect::<Result<_, _>>().map_err(EmitError::Internal)?;
    let fn_type = format!("({}) -> ({})", arg_text.join(", "), result_types.join(", "));
    let attr =
        |text: &str| Attribute::parse(&ctx, text).ok_or_else(|| EmitError::Internal(format!("cannot parse `{text}`")));
    let mut attributes = vec![
        (Identifier::new(&ctx, "sym_name"), attr("\"main\"")?),
        (Identifier::new(&ctx, "function_type"), attr(&fn_type)?),
    ];
    if let Some(mesh) = graph.mesh() {
        module.body().append_operation(sharding::mesh_op(&ctx, mesh).map_err(EmitError::Internal)?);
    }
    let (args, results) = signature::attributes(graph);
    if let Some(args) = args {
        attributes.push((Identifier::new(&ctx, "arg_attrs"), attr(&args)?));
    }
    if let Some(results) = results {
        attributes.push((Identifier::new(&ctx, "res_attrs"), attr(&results)?));
    }
    let func = OperationBuilder::new("func.func", unknown)
        .add_attributes(&attributes)
        .add_regions([region])
        .build()
        .map_err(|e| EmitError::Internal(e.to_string()))?;
    module.body().append_operation(func);
    for f in decompositions {
        module.body().append_operation(f);
    }
    if !module.as_operation().verify() {
        return Err(EmitError::Internal("the module does not verify".into()));
    }
    let flags = OperationPrintingFlags::new().enable_debug_info(true, false).print_generic_operation_form();
    let text = module.as_operation().to_string_with_flags(flags).map_err(|e| EmitError::Internal(e.to_string()))?;
    let bytecode = module.as_operation().write_bytecode();
    Ok(Emitted { text, bytecode })
}

fn type_text(ty: &TensorType) -> Result<String, String> {
    Ok(tensor_type_text(&static_dims(ty).map_err(Fail::reason)?, ty.dtype))
}

fn mlir_type<'c>(ctx: &'c Context, ty: &TensorType) -> Result<melior::ir::Type<'c>, String> {
    let text = type_text(ty)?;
    melior::ir::Type::parse(ctx, &text).ok_or_else(|| format!("cannot parse type `{text}`"))
}

/// Lowers every node into `block` and appends the `func.return`; returns the result types.
/// Each composite group becomes one `stablehlo.composite`, its decomposition function pushed
/// to `decompositions`.
fn emit_body<'c>(
    ctx: &'c Context,
    block: &Block<'c>,
    graph: &Graph,
    opts: &EmitOptions,
    decompositions: &mut Vec<melior::ir::operation::Operation<'c>>,
) -> Result<Vec<String>, EmitError> {
    let args = (0..graph.graph_inputs().len())
        .map(|i| block.argument(i).map(Into::into).map_err(|e| EmitError::Internal(e.to_string())))
        .collect::<Result<Vec<Value>, _>>()?;
    let results = emit_nodes(ctx, block, graph, args, opts, decompositions)?;
    let types = graph
        .outputs()
        .iter()
        .map(|o| type_text(graph.value_type(o.value)).map_err(EmitError::Internal))
        .collect::<Result<Vec<_>, _>>()?;
    let ret = OperationBuilder::new("func.return", Location::unknown(ctx))
        .add_operands(&results)
        .build()
        .map_err(|e| EmitError::Internal(e.to_string()))?;
    block.append_operation(ret);
    Ok(types)
}

/// Lowers every node of `graph` into `block`, its inputs being `inputs` (in calling order);
/// returns the values of its outputs. All failures are collected.
fn emit_nodes<'c, 'a>(
    ctx: &'c Context,
    block: &'a Block<'c>,
    graph: &Graph,
    inputs: Vec<Value<'c, 'a>>,
    opts: &EmitOptions,
    decompositions: &mut Vec<melior::ir::operation::Operation<'c>>,
) -> Result<Vec<Value<'c, 'a>>, EmitError> {
    let order = graph.topo_order().map_err(|_| EmitError::Internal("the graph has a cycle".into()))?;
    let groups = composite::groups(graph, &order, opts);
    let inner: std::collections::BTreeSet<NodeId> = groups.values().flat_map(|g| g.inner().to_vec()).collect();
    let mut values: BTreeMap<ValueRef, Value<'c, 'a>> = BTreeMap::new();
    for (&id, arg) in graph.graph_inputs().iter().zip(inputs) {
        values.insert(ValueRef { node: id, slot: 0 }, arg);
    }
    let mut failures = Vec::new();
    let mut failed = std::collections::BTreeSet::new();
    let mut rng_state = None;
    for &id in &order {
        let node = graph.node(id);
        if matches!(node.op, Op::Input(_)) || inner.contains(&id) {
            continue;
        }
        let group = groups.get(&id);
        let ins = group.map_or_else(|| graph.inputs(id), |g| g.operands.clone());
        if let Some(missing) = ins.iter().find(|v| !values.contains_key(v)) {
            // A node fed by a failed node is skipped: only root causes are reported, and every
            // op without a lowering is one.
            if let Op::Unsupported(Unsupported { target, reason }) = &node.op {
                failures.push(failure(node, unsupported_reason(target, reason.as_deref())));
            } else if !failed.contains(&missing.node) {
                let producer = &graph.node(missing.node).name;
                failures.push(failure(
                    node,
                    format!("reads output {} of `{producer}`, which has no lowering", missing.slot),
                ));
            }
            failed.insert(id);
            continue;
        }
        let args: Vec<Arg> = ins.iter().map(|v| Arg { v: values[v], ty: graph.value_type(*v) }).collect();
        let b = Builder { ctx, block, loc: node_location(ctx, node) };
        let lowered = if let Some(g) = group {
            composite::emit(&b, graph, g, &args, opts).map(|(values, decomposition)| {
                decompositions.push(decomposition);
                values
            })
        } else {
            emit_node(&b, graph, id, &args, opts, &mut rng_state)
        };
        // A sharding on an op's result is a constraint the partitioner follows.
        let lowered = match (lowered, &node.sharding) {
            (Ok(mut outs), Some(s)) if group.is_none() && !outs.is_empty() => {
                sharding::constrain(&b, outs[0], &node.outputs[0], s).map(|v| {
                    outs[0] = v;
                    outs
                })
            }
            (other, _) => other,
        };
        match lowered {
            Ok(outs) => {
                for (slot, v) in outs.into_iter().enumerate() {
                    values.insert(ValueRef { node: id, slot: slot as u16 }, v);
                }
            }
            Err(Fail::Refused(reason)) => {
                failed.insert(id);
                failures.push(failure(node, reason));
            }
            Err(Fail::Bug(reason)) => {
                let at = format!("node `{}` ({}): {reason}", node.name, node.origin.target);
                return Err(EmitError::Internal(at));
            }
        }
    }
    let mut results = Vec::new();
    for o in graph.outputs() {
        match values.get(&o.value) {
            Some(v) => results.push(*v),
            None if failures.is_empty() => failures.push(failure(
                graph.node(o.value.node),
                format!("output {} of this node is returned but cannot be computed", o.value.slot),
            )),
            None => {}
        }
    }
    if !failures.is_empty() {
        return Err(EmitError::Lowering(failures));
    }
    Ok(results)
}

fn unsupported_reason(target: &str, reason: Option<&str>) -> String {
    reason.map_or_else(|| format!("no lowering for `{target}`"), str::to_string)
}

fn failure(node: &Node, reason: String) -> NodeFailure {
    NodeFailure {
        node: node.name.clone(),
        target: node.origin.target.clone(),
        reason,
        source_line: node.origin.source_line().map(str::to_string),
    }
}

/// `loc("addmm"("model.py":12:0))` from the stack trace's last frame.
fn node_location<'c>(ctx: &'c Context, node: &Node) -> Location<'c> {
    let child = node
        .origin
        .source_line()
        .and_then(parse_frame)
        .map_or_else(|| Location::unknown(ctx), |(file, line)| Location::new(ctx, file, line, 0));
    Location::name(ctx, &node.name, child)
}

/// `File "x.py", line 12, in forward` → (`x.py`, 12).
fn parse_frame(frame: &str) -> Option<(&str, usize)> {
    let rest = frame.strip_prefix("File \"")?;
    let (file, rest) = rest.split_once('"')?;
    let line = rest.trim_start_matches(", line ").split(',').next()?.trim().parse().ok()?;
    Some((file, line))
}

/// True when output `slot` of `id` is read by a node or returned.
fn slot_used(graph: &Graph, id: NodeId, slot: u16) -> bool {
    graph.users(id).iter().any(|&(_, _, s)| s == slot)
        || graph.outputs().iter().any(|o| o.value == ValueRef { node: id, slot })
}

/// A random op's values, drawn from the generator state `rng` holds, which it advances: the
/// first random op of the program starts from the seed argument (its last operand).
fn draw<'c, 'b>(
    rng: &mut Option<Value<'c, 'b>>,
    args: &[Arg<'c, 'b, '_>],
    draw: impl FnOnce(Value<'c, 'b>) -> LowerResult<random::Drawn<'c, 'b>>,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let seed = args.last().ok_or("a random op without its seed operand")?.v;
    let drawn = draw(rng.unwrap_or(seed))?;
    *rng = Some(drawn.state);
    Ok(drawn.values)
}

/// Lowers one node; returns one value per output slot. `rng` is the random generator's state
/// (see [`draw`]).
fn emit_node<'c, 'b>(
    b: &Builder<'c, 'b>,
    graph: &Graph,
    id: NodeId,
    args: &[Arg<'c, 'b, '_>],
    opts: &EmitOptions,
    rng: &mut Option<Value<'c, 'b>>,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let node = graph.node(id);
    let out = &node.outputs;
    // Results with no elements need no computation, and XLA's shape checks reject some ops
    // whose operands are empty (a gather from a size-0 storage): they are empty constants. A
    // random op still advances the generator.
    let empty = out.iter().all(|t| t.dims.contains(&Dim::Static(0)));
    if !out.is_empty() && !matches!(node.op, Op::Input(_)) && !node.op.is_random() && empty {
        return out.iter().map(|t| b.splat(Scalar::Int(0), &static_dims(t)?, t.dtype)).collect();
    }
    let one = |v: LowerResult<Value<'c, 'b>>| v.map(|v| vec![v]);
    // The `precision` pass may have set this node's; the program-wide one otherwise.
    let precision = node.precision.unwrap_or(opts.precision);
    match &node.op {
        Op::Input(_) => Err(bug("graph inputs are function arguments")),
        Op::Unary(u) => one(elementwise::unary(b, *u, args[0], &out[0])),
        Op::Binary(Binary { op, lhs, rhs, alpha }) => {
            one(elementwise::binary(b, *op, *lhs, *rhs, *alpha, args, &out[0]))
        }
        Op::Where(Where { on_true, on_false }) => one(elementwise::select(b, *on_true, *on_false, args, &out[0])),
        Op::Clamp(Clamp { min, max }) => one(elementwise::clamp(b, *min, *max, args[0], &out[0])),
        Op::ClampTensor(ClampTensor { has_min, has_max }) => {
            one(elementwise::clamp_tensor(b, *has_min, *has_max, args, &out[0]))
        }
        Op::Elu(e) => one(elementwise::elu(b, e, args[0], &out[0])),
        Op::LeakyRelu(LeakyRelu { slope }) => one(elementwise::leaky_relu(b, *slope, args[0], &out[0])),
        Op::Mm(Mm) => one(linalg::matmul(b, false, (args[0], args[1]), &out[0], precision)),
        Op::Bmm(Bmm) => one(linalg::matmul(b, true, (args[0], args[1]), &out[0], precision)),
        Op::Addmm(a) => one(linalg::addmm(b, a, args, &out[0], precision)),
        Op::Convolution(c) => one(linalg::convolution(b, c, args, &out[0], precision)),
        Op::GroupedMm(_) => one(linalg::grouped_mm(b, opts.grouped_mm, args, &out[0], precision)),
        Op::Histc(h) => one(reduce::histc(b, h, args[0], &out[0])),
        Op::MaxPool(p) => pool::max_pool(b, p, args[0], out, slot_used(graph, id, 1)),
        Op::AvgPool(p) => one(pool::avg_pool(b, p, args[0], &out[0])),
        Op::AdaptiveAvgPool(p) => one(pool::adaptive_avg_pool(b, p, args[0], &out[0])),
        Op::Upsample(u) => one(pool::upsample(b, u, args[0], &out[0])),
        Op::UpsampleNearestBackward(u) => one(pool::upsample_nearest_backward(b, u, args[0], &out[0])),
        Op::GroupNorm(n) => nn::group_norm(b, n, args, out),
        Op::BatchNormTraining(n) => nn::batch_norm_training(b, n, args, out),
        Op::BatchNormInference(n) => nn::batch_norm(b, n, args, out),
        Op::LayerNorm(n) => nn::layer_norm(b, n, args, out),
        Op::Softmax(s) => one(nn::softmax(b, s, args[0], &out[0])),
        Op::Embedding(Embedding) => one(shape::index(b, args[0], &[Some(args[1])], &out[0])),
        Op::EmbeddingBag(e) => bag::embedding_bag(b, e, args, out),
        Op::Col2Im(c) => one(sample::col2im(b, c, args[0], &out[0])),
        Op::GridSampler(g) => one(sample::grid_sampler(b, g, args, &out[0])),
        Op::Reduce(r) => one(reduce::reduce(b, r, args[0], &out[0])),
        Op::ArgReduce(r) => one(reduce::arg_reduce(b, r, args[0], &out[0])),
        Op::Var(Var { dims, correction, .. }) => one(reduce::var(b, dims, *correction, args[0], &out[0])),
        Op::ExtremumDim(ExtremumDim { max, dim, .. }) => reduce::extremum_dim(b, *max, *dim, args[0], out),
        Op::Sort(Sort { dim, descending, .. }) => sort::sort(b, *dim, *descending, args[0]),
        Op::Nonzero(_) => one(sort::nonzero(b, args[0], &out[0])),
        Op::NmsKeep(k) => nms::nms_keep(b, k.iou_threshold, args[0], args[1]),
        Op::Item(_) => {
            let dims = static_dims(args[0].ty)?;
            let v = b.convert(args[0].v, &dims, args[0].ty.dtype, DType::I64)?;
            one(if dims.is_empty() { Ok(v) } else { b.reshape(v, &[], DType::I64) })
        }
        Op::TopK(TopK { k, dim, largest }) => {
            let k = k.as_static().ok_or_else(|| format!("topk's k `{k}` is still symbolic"))?;
            sort::topk(b, k, *dim, *largest, args[0], out)
        }
        Op::Select(Select { dim, index }) => one(layout::select(b, *dim, *index, args[0], &out[0])),
        Op::Diagonal(d) => one(layout::diagonal(b, d, args[0], &out[0])),
        Op::Flip(Flip { dims }) => one(layout::flip(b, dims, args[0], &out[0])),
        Op::Repeat(Repeat { repeats }) => {
            one(layout::repeat(b, &static_list(repeats, "repeat count")?, args[0], &out[0]))
        }
        Op::Pad(Pad { pad, value }) => one(layout::pad(b, pad, *value, args[0], &out[0])),
        Op::AsStrided(AsStrided { size, stride, offset }) => {
            one(layout::as_strided(b, size, stride, *offset, args[0], &out[0]))
        }
        Op::Cdist(Cdist { p }) => one(distance::cdist(b, *p, args[0], args[1], &out[0])),
        Op::Pdist(Pdist { p }) => one(distance::pdist(b, *p, args[0], &out[0])),
        Op::MaxPoolBackward(MaxPoolBackward { spatial }) => one(pool::max_pool_backward(b, *spatial, args, &out[0])),
        Op::AvgPoolBackward(AvgPoolBackward { forward }) => one(pool::avg_pool_backward(b, forward, args, &out[0])),
        Op::LayerNormBackward(n) => nn::layer_norm_backward(b, n, args, out),
        Op::GroupNormBackward(n) => nn::group_norm_backward(b, n, args, out),
        Op::ConvolutionBackward(ConvolutionBackward { forward, mask }) => {
            linalg::convolution_backward(b, forward, *mask, args, out, precision)
        }
        Op::AdaptiveAvgPoolBackward(AdaptiveAvgPoolBackward) => one(pool::adaptive_avg_pool_backward(b, args, &out[0])),
        Op::PadMode(PadMode { pad, reflect }) => one(layout::pad_mode(b, pad, *reflect, args[0], &out[0])),
        Op::CopyFrom(CopyFrom) => one(layout::copy_from(b, args[1], &out[0])),
        Op::Scatter(Scatter { dim, reduce, include_self, value }) if args[0].ty.rank() == 0 => {
            one(on_unit_vectors(b, args, &out[0], |a, o| {
                scatter::scatter(b, (*dim, *reduce, *include_self), *value, a, o)
            }))
        }
        Op::Scatter(Scatter { dim, reduce, include_self, value }) => {
            one(scatter::scatter(b, (*dim, *reduce, *include_self), *value, args, &out[0]))
        }
        Op::IndexPut(IndexPut { present, accumulate }) => {
            let per_row = scatter::writes_per_row(graph, id, present);
            one(scatter::index_put(b, (present, per_row), *accumulate, args, &out[0]))
        }
        Op::SliceScatter(SliceScatter { dim, start, end, step }) => {
            one(scatter::slice_scatter(b, *dim, (start, end, *step), args, &out[0]))
        }
        Op::SelectScatter(SelectScatter { dim, index }) => one(scatter::select_scatter(b, *dim, *index, args, &out[0])),
        Op::MaskedScatter(MaskedScatter) => one(scatter::masked_scatter(b, args, &out[0])),
        Op::EmbeddingBackward(EmbeddingBackward { num_weights, padding_idx, scale_grad_by_freq }) => {
            one(scatter::embedding_backward(b, (*num_weights, *padding_idx, *scale_grad_by_freq), args, &out[0]))
        }
        Op::Cumulative(Cumulative { op, dim, .. }) => one(reduce::cumulative(b, (*op, *dim), args[0], &out[0])),
        Op::View(_) | Op::Unsqueeze(_) | Op::Squeeze(_) => one(shape::reshape(b, args[0], &out[0])),
        Op::Permute(Permute { dims }) => one(shape::permute(b, dims, args[0], &out[0])),
        Op::Expand(_) => one(shape::expand(b, args[0], &out[0])),
        Op::Identity(Identity) => Ok(vec![args[0].v]),
        Op::After(After) => one(sharding::after(b, args[0], args[1])),
        Op::Slice(Slice { dim, start, end, step }) => one(shape::slice(b, *dim, start, end, *step, args[0], &out[0])),
        Op::Cat(Cat { dim }) => one(shape::cat(b, *dim, args, &out[0])),
        Op::SplitWithSizes(SplitWithSizes { dim, .. }) => shape::split(b, *dim, args[0], out),
        Op::Index(Index { present }) => {
            let mut rest = args[1..].iter().copied();
            let idx: Vec<Option<Arg>> = present.iter().map(|&p| if p { rest.next() } else { None }).collect();
            one(shape::index(b, args[0], &idx, &out[0]))
        }
        Op::IndexSelect(IndexSelect { dim }) => one(shape::index_select(b, *dim, args[0], args[1], &out[0])),
        Op::Gather(Gather { dim }) if args[0].ty.rank() == 0 => {
            one(on_unit_vectors(b, args, &out[0], |a, o| shape::gather(b, *dim, a[0], a[1], o)))
        }
        Op::Gather(Gather { dim }) => one(shape::gather(b, *dim, args[0], args[1], &out[0])),
        Op::Arange(Arange { start, step, .. }) => one(tensor::arange(b, *start, *step, &out[0])),
        Op::ArangeSym(ArangeSym { start, step, .. }) => {
            let start = start.as_static().ok_or("the start of an arange was not specialized")?;
            one(tensor::arange(b, Scalar::Int(start), Scalar::Int(*step), &out[0]))
        }
        Op::Literal(Literal { values }) => one(tensor::literal(b, values, &out[0])),
        Op::Full(Full { value, .. }) | Op::FullLike(FullLike { value }) | Op::ScalarTensor(ScalarTensor { value }) => {
            one(b.splat(*value, &static_dims(&out[0])?, out[0].dtype))
        }
        Op::Convert(Convert) => {
            one(b.convert_taking_real_part(args[0].v, &static_dims(&out[0])?, args[0].ty.dtype, out[0].dtype))
        }
        Op::AssertMetadata(_) => Ok(vec![]),
        Op::SymSize(SymSize { dim }) => {
            let dims = static_dims(args[0].ty)?;
            let (_, size) = builder::dim_size(&dims, *dim)?;
            one(b.splat(Scalar::Int(size), &[], DType::I64))
        }
        Op::SymInt(SymInt { value }) => {
            let v = value.as_static().ok_or("symbolic int was not specialized")?;
            one(b.splat(Scalar::Int(v), &[], DType::I64))
        }
        Op::Fft(f) => one(fft::fft(b, f, args[0], &out[0])),
        Op::Complex(_) => one(complex::complex(b, false, args, &out[0])),
        Op::Polar(_) => one(complex::complex(b, true, args, &out[0])),
        Op::ViewAsComplex(_) => one(complex::view_as_complex(b, args[0], &out[0])),
        Op::ViewAsReal(_) => one(complex::view_as_real(b, args[0], &out[0])),
        Op::Rand(r) => draw(rng, args, |state| random::rand(b, r.normal, state, &out[0])),
        Op::RandPerm(RandPerm) => draw(rng, args, |state| random::randperm(b, state, &out[0])),
        Op::Dropout(d) => draw(rng, args, |state| random::dropout(b, d, args[0], state, out)),
        Op::Cond(c) => control::cond(b, c, args, out, opts),
        Op::WhileLoop(w) => control::while_loop(b, w, args, opts),
        Op::Scan(s) => control::scan(b, s, args, out, opts),
        Op::Unsupported(Unsupported { target, reason }) => Err(unsupported_reason(target, reason.as_deref()).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_frame;

    #[test]
    fn frames_give_file_and_line() {
        assert_eq!(parse_frame("File \"gen.py\", line 49, in forward"), Some(("gen.py", 49)));
        assert_eq!(parse_frame("File \"a b.py\", line 7"), Some(("a b.py", 7)));
        assert_eq!(parse_frame("line 7"), None);
    }
}
