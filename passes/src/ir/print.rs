//! Deterministic text form of a graph, for snapshots, `--dump-dir` and debugging.
//!
//! Values are renumbered `%0, %1, …` in topological order, so holes left by removed nodes never
//! show up in diffs. One line per node:
//!
//! ```text
//! %4 = addmm(%1, %3, %2) {beta=1, alpha=1} : f32[4,32]  # addmm
//! ```
//!
//! The text is lossless for what it shows: [`parse`](super::parse) reads it back, and
//! `print(&parse(t)?) == t`. Origins, `Node::symbolic` and the calling order of the inputs
//! are not printed. Strings (fqns, a reason, names that need it) are quoted with `\\`, `\"`
//! and control characters escaped (`\n`, `\r`, `\t`, `\u{1b}`).
//! Node and graph names print as they are unless they start with `"` or hold a control
//! character; then they print quoted. A derived weight prints its recipe after `from`, as a
//! call of the recipe's snake_case name:
//!
//! ```text
//! input.derived "conv.w.bn" from bn_folded_weight("conv.w", gamma="bn.w", var="bn.var", eps=1e-5)
//! input.derived "bn.b.bn" from bn_folded_bias(bias=none, gamma=none, beta="bn.b", mean="bn.m", var="bn.v", eps=1e-5)
//! input.derived "qkv" from concat_rows("q.weight", "k.weight", "v.weight")
//! input.derived "w.pad" from pad(cast("w"), dims=[10, 4], padded=[128, 4], blocks=[1, 1])
//! ```
//!
//! (`blocks` is left out when empty; `cast("w")` is the stored weight `w` in the input's dtype.)
//!
//! A graph split over devices has a `mesh ["dp"=2, "tp"=2]` line, and a node whose result has
//! a set sharding ends its types with `sharded [{"tp"}, {}]` (per dim, the mesh axes that split
//! it).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::graph::{Graph, OutputKind};
use super::node::{NodeId, ValueRef};
use super::op::{InputKind, Op, Operand, WeightRecipe};
use super::types::{Dim, Scalar};

/// Prints the whole graph. Falls back to index order if the graph has a cycle (the verifier
/// reports cycles; the printer must still be usable to show them).
pub fn print(graph: &Graph) -> String {
    let order = graph.topo_order().unwrap_or_else(|_| graph.node_ids().collect());
    let mut names: BTreeMap<ValueRef, usize> = BTreeMap::new();
    for &id in &order {
        for slot in 0..graph.node(id).outputs.len() {
            let next = names.len();
            names.insert(ValueRef { node: id, slot: slot as u16 }, next);
        }
    }
    let value = |v: &ValueRef| names.get(v).map_or_else(|| "%?".to_string(), |n| format!("%{n}"));

    let mut out = String::new();
    let _ = writeln!(out, "graph {} {{", label(&graph.name));
    for (sym, bounds) in graph.symbols() {
        let _ = writeln!(out, "  sym {sym} in {bounds}");
    }
    if let Some(mesh) = graph.mesh() {
        let _ = writeln!(out, "  mesh {mesh}");
    }
    for &id in &order {
        print_node(&mut out, graph, id, &value);
    }
    for o in graph.outputs() {
        let _ = writeln!(out, "  return {} = {}", output_kind(&o.kind), value(&o.value));
    }
    out.push_str("}\n");
    out
}

fn print_node(out: &mut String, graph: &Graph, id: NodeId, value: &dyn Fn(&ValueRef) -> String) {
    let node = graph.node(id);
    let results: Vec<String> =
        (0..node.outputs.len()).map(|slot| value(&ValueRef { node: id, slot: slot as u16 })).collect();
    let inputs: Vec<String> = graph.inputs(id).iter().map(value).collect();
    out.push_str("  ");
    if !results.is_empty() {
        let _ = write!(out, "{} = ", results.join(", "));
    }
    match &node.op {
        Op::Unsupported { target, .. } if needs_quotes(target) || target.contains('>') => {
            let _ = write!(out, "unsupported<{}>", quote(target));
        }
        op => out.push_str(&op.name()),
    }
    match &node.op {
        Op::Input(kind) => {
            let _ = write!(out, " {}", input_kind(kind));
        }
        op => {
            let _ = write!(out, "({})", operands(op, &inputs).join(", "));
            let mut attrs = attributes(op);
            if let Some(p) = node.precision {
                attrs.push(format!("precision={}", p.name()));
            }
            if let Some(c) = node.composite {
                attrs.push(format!("composite={}#{}", c.name, c.instance));
            }
            if !attrs.is_empty() {
                let _ = write!(out, " {{{}}}", attrs.join(", "));
            }
        }
    }
    if !node.outputs.is_empty() {
        let types: Vec<String> = node.outputs.iter().map(ToString::to_string).collect();
        let _ = write!(out, " : {}", types.join(", "));
    }
    if let Some(s) = &node.sharding {
        let _ = write!(out, " sharded {s}");
    }
    let _ = writeln!(out, "  # {}", label(&node.name));
}

/// `s` in double quotes, with `\\`, `"` and control characters escaped.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Names print as they are, unless reading them back would need quotes.
fn needs_quotes(s: &str) -> bool {
    s.starts_with('"') || s.chars().any(char::is_control)
}

/// A node or graph name: as it is, or quoted when [`needs_quotes`].
fn label(s: &str) -> String {
    if needs_quotes(s) {
        quote(s)
    } else {
        s.to_string()
    }
}

fn input_kind(kind: &InputKind) -> String {
    match kind {
        InputKind::Parameter { fqn } | InputKind::Constant { fqn } => quote(fqn),
        InputKind::Buffer { fqn, persistent } => {
            format!("{}{}", quote(fqn), if *persistent { "" } else { " non_persistent" })
        }
        InputKind::User { index } => format!("#{index}"),
        InputKind::RngSeed => "rng_seed".into(),
        InputKind::Size { symbol } => symbol.clone(),
        InputKind::Derived { fqn, recipe: r } => format!("{} from {}", quote(fqn), recipe(r)),
    }
}

/// A derived weight's recipe, as a call (see the module doc).
fn recipe(r: &WeightRecipe) -> String {
    let name = |n: &Option<String>| n.as_deref().map_or_else(|| "none".to_string(), quote);
    let eps = |e: f64| Scalar::Float(e).to_string();
    match r {
        WeightRecipe::Cast { weight } => format!("cast({})", quote(weight)),
        WeightRecipe::ConcatRows { weights } => {
            let v: Vec<String> = weights.iter().map(|w| quote(w)).collect();
            format!("concat_rows({})", v.join(", "))
        }
        WeightRecipe::BnFoldedWeight { weight, gamma, var, eps: e } => {
            format!("bn_folded_weight({}, gamma={}, var={}, eps={})", quote(weight), name(gamma), quote(var), eps(*e))
        }
        WeightRecipe::BnFoldedBias { bias, gamma, beta, mean, var, eps: e } => format!(
            "bn_folded_bias(bias={}, gamma={}, beta={}, mean={}, var={}, eps={})",
            name(bias),
            name(gamma),
            name(beta),
            quote(mean),
            quote(var),
            eps(*e)
        ),
        WeightRecipe::Narrow { source, dims, dim, start, len } => {
            format!("narrow({}, dims={}, dim={dim}, start={start}, len={len})", recipe(source), ints(dims))
        }
        WeightRecipe::Permute { source, dims, perm } => {
            format!("permute({}, dims={}, perm={})", recipe(source), ints(dims), ints(perm))
        }
        WeightRecipe::Pad { source, dims, padded, blocks } => {
            let blocks = if blocks.is_empty() { String::new() } else { format!(", blocks={}", ints(blocks)) };
            format!("pad({}, dims={}, padded={}{blocks})", recipe(source), ints(dims), ints(padded))
        }
    }
}

fn output_kind(kind: &OutputKind) -> String {
    match kind {
        OutputKind::User { index } => format!("user[{index}]"),
        OutputKind::BufferMutation { fqn } => format!("buffer_mutation {}", quote(fqn)),
        OutputKind::ParameterMutation { fqn } => format!("parameter_mutation {}", quote(fqn)),
        OutputKind::UserInputMutation { input } => format!("user_input_mutation {}", quote(input)),
        OutputKind::Loss => "loss".to_string(),
        OutputKind::GradientToParameter { fqn } => format!("grad {}", quote(fqn)),
        OutputKind::GradientToUserInput { input } => format!("grad_input {}", quote(input)),
    }
}

/// Operands in call order: tensor inputs interleaved with scalar operands.
fn operands(op: &Op, inputs: &[String]) -> Vec<String> {
    let mut tensors = inputs.iter().cloned();
    let mut take = |o: &Operand| match o {
        Operand::Tensor => tensors.next().unwrap_or_else(|| "%?".to_string()),
        Operand::Scalar(s) => s.to_string(),
    };
    match op {
        Op::Binary { lhs, rhs, .. } => vec![take(lhs), take(rhs)],
        Op::Where { on_true, on_false } => {
            let cond = take(&Operand::Tensor);
            vec![cond, take(on_true), take(on_false)]
        }
        _ => inputs.to_vec(),
    }
}

fn dims(ds: &[Dim]) -> String {
    let v: Vec<String> = ds.iter().map(ToString::to_string).collect();
    format!("[{}]", v.join(", "))
}

fn ints(v: &[i64]) -> String {
    format!("{v:?}")
}

/// Floats as [`Scalar`] prints them (exact, NaN payloads included).
fn floats(v: &[f64]) -> String {
    let v: Vec<String> = v.iter().map(|&x| Scalar::Float(x).to_string()).collect();
    format!("[{}]", v.join(", "))
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "none".to_string(), ToString::to_string)
}

/// `key=value` attributes of an op, in a fixed order.
fn attributes(op: &Op) -> Vec<String> {
    let kv = |k: &str, v: String| format!("{k}={v}");
    match op {
        Op::Input(_) | Op::Unary(_) | Op::Mm | Op::Bmm | Op::Copy | Op::Embedding | Op::Convert | Op::Where { .. } => {
            vec![]
        }
        Op::GroupedMm => vec![],
        Op::Histc { bins, min, max } => vec![
            kv("bins", bins.to_string()),
            kv("min", Scalar::Float(*min).to_string()),
            kv("max", Scalar::Float(*max).to_string()),
        ],
        Op::Binary { alpha, .. } => alpha.iter().map(|a| kv("alpha", a.to_string())).collect(),
        Op::Clamp { min, max } => vec![kv("min", opt(min)), kv("max", opt(max))],
        Op::ClampTensor { has_min, has_max } => vec![kv("min", has_min.to_string()), kv("max", has_max.to_string())],
        Op::Elu { alpha, scale, input_scale } => vec![
            kv("alpha", Scalar::Float(*alpha).to_string()),
            kv("scale", Scalar::Float(*scale).to_string()),
            kv("input_scale", Scalar::Float(*input_scale).to_string()),
        ],
        Op::LeakyRelu { slope } => vec![kv("slope", Scalar::Float(*slope).to_string())],
        Op::Addmm { beta, alpha } => {
            vec![kv("beta", beta.to_string()), kv("alpha", alpha.to_string())]
        }
        Op::Convolution { stride, padding, dilation, transposed, output_padding, groups, has_bias } => vec![
            kv("stride", ints(stride)),
            kv("padding", ints(padding)),
            kv("dilation", ints(dilation)),
            kv("transposed", transposed.to_string()),
            kv("output_padding", ints(output_padding)),
            kv("groups", groups.to_string()),
            kv("bias", has_bias.to_string()),
        ],
        Op::AvgPool { kernel, stride, padding, ceil_mode, count_include_pad, divisor_override } => vec![
            kv("kernel", ints(kernel)),
            kv("stride", ints(stride)),
            kv("padding", ints(padding)),
            kv("ceil_mode", ceil_mode.to_string()),
            kv("count_include_pad", count_include_pad.to_string()),
            kv("divisor", opt(divisor_override)),
        ],
        Op::AdaptiveAvgPool { spatial } => vec![kv("spatial", spatial.to_string())],
        Op::Upsample { bilinear, align_corners, scales } => vec![
            kv("mode", (if *bilinear { "bilinear" } else { "nearest" }).to_string()),
            kv("align_corners", align_corners.to_string()),
            kv("scales", scales.as_ref().map_or_else(|| "none".to_string(), |s| floats(s))),
        ],
        Op::GroupNorm { groups, eps, has_weight, has_bias } => vec![
            kv("groups", groups.to_string()),
            kv("eps", Scalar::Float(*eps).to_string()),
            kv("weight", has_weight.to_string()),
            kv("bias", has_bias.to_string()),
        ],
        Op::BatchNormTraining { eps, has_weight, has_bias, running_stats, momentum } => vec![
            kv("eps", Scalar::Float(*eps).to_string()),
            kv("weight", has_weight.to_string()),
            kv("bias", has_bias.to_string()),
            kv("running_stats", running_stats.to_string()),
            kv("momentum", momentum.map_or_else(|| "none".to_string(), |m| Scalar::Float(m).to_string())),
        ],
        Op::MaxPool { kernel, stride, padding, dilation, ceil_mode } => vec![
            kv("kernel", ints(kernel)),
            kv("stride", ints(stride)),
            kv("padding", ints(padding)),
            kv("dilation", ints(dilation)),
            kv("ceil_mode", ceil_mode.to_string()),
        ],
        Op::BatchNormInference { eps, has_weight, has_bias } => vec![
            kv("eps", Scalar::Float(*eps).to_string()),
            kv("weight", has_weight.to_string()),
            kv("bias", has_bias.to_string()),
        ],
        Op::LayerNorm { normalized_rank, eps, has_weight, has_bias } => vec![
            kv("normalized_rank", normalized_rank.to_string()),
            kv("eps", Scalar::Float(*eps).to_string()),
            kv("weight", has_weight.to_string()),
            kv("bias", has_bias.to_string()),
        ],
        Op::Softmax { dim, log, safe } => {
            let mut v = vec![kv("dim", dim.to_string()), kv("log", log.to_string())];
            if *safe {
                v.push(kv("safe", "true".to_string()));
            }
            v
        }
        Op::Reduce { dims, keepdim, dtype, .. } => {
            vec![kv("dims", ints(dims)), kv("keepdim", keepdim.to_string()), kv("dtype", opt(dtype))]
        }
        Op::ArgReduce { dim, keepdim, .. } => {
            vec![kv("dim", opt(dim)), kv("keepdim", keepdim.to_string())]
        }
        Op::Var { dims, correction, keepdim } => vec![
            kv("dims", ints(dims)),
            kv("correction", Scalar::Float(*correction).to_string()),
            kv("keepdim", keepdim.to_string()),
        ],
        Op::ExtremumDim { max, dim, keepdim } => {
            vec![kv("max", max.to_string()), kv("dim", dim.to_string()), kv("keepdim", keepdim.to_string())]
        }
        Op::Sort { dim, descending, stable } => {
            vec![kv("dim", dim.to_string()), kv("descending", descending.to_string()), kv("stable", stable.to_string())]
        }
        Op::TopK { k, dim, largest } => {
            vec![kv("k", k.to_string()), kv("dim", dim.to_string()), kv("largest", largest.to_string())]
        }
        Op::Select { dim, index } => vec![kv("dim", dim.to_string()), kv("index", index.to_string())],
        Op::Diagonal { offset, dim1, dim2 } => {
            vec![kv("offset", offset.to_string()), kv("dim1", dim1.to_string()), kv("dim2", dim2.to_string())]
        }
        Op::Flip { dims } => vec![kv("dims", ints(dims))],
        Op::Repeat { repeats } => vec![kv("repeats", ints(repeats))],
        Op::Pad { pad, value } => vec![kv("pad", ints(pad)), kv("value", value.to_string())],
        Op::PadMode { pad, reflect } => {
            vec![kv("pad", ints(pad)), kv("mode", (if *reflect { "reflect" } else { "replicate" }).to_string())]
        }
        Op::CopyFrom | Op::MaskedScatter | Op::AdaptiveAvgPoolBackward => vec![],
        Op::MaxPoolBackward { spatial } => vec![format!("spatial={spatial}")],
        Op::AvgPoolBackward(forward) => attributes(forward),
        Op::ConvolutionBackward { forward, mask } => {
            let mut v = attributes(forward);
            v.push(kv("mask", format!("{mask:?}")));
            v
        }
        Op::GroupNormBackward { groups, has_weight, mask } => {
            vec![
                kv("groups", groups.to_string()),
                kv("weight", has_weight.to_string()),
                kv("mask", format!("{mask:?}")),
            ]
        }
        Op::LayerNormBackward { normalized_rank, has_weight, mask } => vec![
            kv("normalized_rank", normalized_rank.to_string()),
            kv("weight", has_weight.to_string()),
            kv("mask", format!("{mask:?}")),
        ],
        Op::AsStrided { size, stride, offset } => {
            vec![kv("size", ints(size)), kv("stride", ints(stride)), kv("offset", offset.to_string())]
        }
        Op::Cdist { p } | Op::Pdist { p } => vec![kv("p", Scalar::Float(*p).to_string())],
        Op::Scatter { dim, reduce, include_self, value } => vec![
            kv("dim", dim.to_string()),
            kv("reduce", format!("{reduce:?}").to_lowercase()),
            kv("include_self", include_self.to_string()),
            kv("value", opt(value)),
        ],
        Op::IndexPut { present, accumulate } => {
            let v: Vec<&str> = present.iter().map(|&p| if p { "idx" } else { ":" }).collect();
            vec![kv("indices", format!("[{}]", v.join(", "))), kv("accumulate", accumulate.to_string())]
        }
        Op::SliceScatter { dim, start, end, step } => vec![
            kv("dim", dim.to_string()),
            kv("start", start.to_string()),
            kv("end", if *end == Dim::Static(i64::MAX) { "end".to_string() } else { end.to_string() }),
            kv("step", step.to_string()),
        ],
        Op::SelectScatter { dim, index } => vec![kv("dim", dim.to_string()), kv("index", index.to_string())],
        Op::EmbeddingBackward { num_weights, padding_idx, scale_grad_by_freq } => vec![
            kv("num_weights", num_weights.to_string()),
            kv("padding_idx", padding_idx.to_string()),
            kv("scale_grad_by_freq", scale_grad_by_freq.to_string()),
        ],
        Op::EmbeddingBag { mode, per_sample_weights, include_last_offset, padding_idx } => vec![
            kv("mode", format!("{mode:?}").to_lowercase()),
            kv("per_sample_weights", per_sample_weights.to_string()),
            kv("include_last_offset", include_last_offset.to_string()),
            kv("padding_idx", opt(padding_idx)),
        ],
        Op::Col2Im { output_size, kernel, dilation, padding, stride } => vec![
            kv("output_size", ints(output_size)),
            kv("kernel", ints(kernel)),
            kv("dilation", ints(dilation)),
            kv("padding", ints(padding)),
            kv("stride", ints(stride)),
        ],
        Op::GridSampler { mode, padding, align_corners } => vec![
            kv("mode", format!("{mode:?}").to_lowercase()),
            kv("padding", format!("{padding:?}").to_lowercase()),
            kv("align_corners", align_corners.to_string()),
        ],
        Op::Fft { dims, normalization, inverse, onesided } => vec![
            kv("dims", ints(dims)),
            kv("normalization", normalization.to_string()),
            kv("inverse", inverse.to_string()),
            kv("onesided", onesided.to_string()),
        ],
        Op::Rand { normal } => vec![kv("normal", normal.to_string())],
        Op::RandPerm => vec![],
        Op::Dropout { p, train } => vec![kv("p", Scalar::Float(*p).to_string()), kv("train", train.to_string())],
        Op::Cumulative { dim, dtype, .. } => vec![kv("dim", dim.to_string()), kv("dtype", opt(dtype))],
        Op::View { size } | Op::Expand { size } => vec![kv("size", dims(size))],
        Op::Permute { dims } => vec![kv("dims", ints(dims))],
        Op::Unsqueeze { dim }
        | Op::IndexSelect { dim }
        | Op::Gather { dim }
        | Op::Cat { dim }
        | Op::SymSize { dim } => {
            vec![kv("dim", dim.to_string())]
        }
        Op::Squeeze { dims } => vec![kv("dims", ints(dims))],
        Op::Slice { dim, start, end, step } => vec![
            kv("dim", dim.to_string()),
            kv("start", start.to_string()),
            kv("end", if *end == Dim::Static(i64::MAX) { "end".to_string() } else { end.to_string() }),
            kv("step", step.to_string()),
        ],
        Op::SplitWithSizes { sizes, dim } => {
            vec![kv("sizes", dims(sizes)), kv("dim", dim.to_string())]
        }
        Op::Index { present } => {
            let v: Vec<&str> = present.iter().map(|&p| if p { "idx" } else { ":" }).collect();
            vec![kv("indices", format!("[{}]", v.join(", ")))]
        }
        Op::Arange { start, end, step } => {
            vec![kv("start", start.to_string()), kv("end", end.to_string()), kv("step", step.to_string())]
        }
        Op::ArangeSym { start, end, step } => {
            vec![kv("start", start.to_string()), kv("end", end.to_string()), kv("step", step.to_string())]
        }
        Op::Full { size, value } => vec![kv("size", dims(size)), kv("value", value.to_string())],
        Op::Literal { values } => {
            let v: Vec<String> = values.iter().map(ToString::to_string).collect();
            vec![kv("values", format!("[{}]", v.join(", ")))]
        }
        Op::FullLike { value } | Op::ScalarTensor { value } => vec![kv("value", value.to_string())],
        Op::AssertMetadata { dtype } => vec![kv("dtype", opt(dtype))],
        Op::SymInt { value } => vec![kv("value", value.to_string())],
        Op::Unsupported { reason, .. } => reason.iter().map(|r| kv("reason", quote(r))).collect(),
    }
}
