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
//! An op with regions (`cond`, `while_loop`, `scan`) is followed by each region, printed as a
//! graph indented by four spaces.
//!
//! A graph split over devices has a `mesh ["dp"=2, "tp"=2]` line, and a node whose result has
//! a set sharding ends its types with `sharded [{"tp"}, {}]` (per dim, the mesh axes that split
//! it).

use crate::ir::ops::{Binary, Unsupported, Where};
use std::collections::BTreeMap;
use std::fmt::Write;

use super::cursor::quote;
use super::graph::{Graph, OutputKind};
use super::node::{NodeId, ValueRef};
use super::op::{InputKind, Operand, WeightRecipe};
use super::ops::Op;
use super::types::Scalar;

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
        Op::Unsupported(Unsupported { target, .. }) if needs_quotes(target) || target.contains('>') => {
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
            let mut attrs = Vec::new();
            op.def().attrs(&mut attrs);
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
    for region in node.op.regions() {
        for line in print(&region.0).lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
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
        OutputKind::Size { symbol } => format!("size {symbol}"),
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
        Op::Binary(Binary { lhs, rhs, .. }) => vec![take(lhs), take(rhs)],
        Op::Where(Where { on_true, on_false }) => {
            let cond = take(&Operand::Tensor);
            vec![cond, take(on_true), take(on_false)]
        }
        _ => inputs.to_vec(),
    }
}

fn ints(v: &[i64]) -> String {
    format!("{v:?}")
}
