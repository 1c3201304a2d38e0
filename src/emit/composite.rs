//! Composites: the nodes a pass marked as one group (`Node::composite`, e.g. each attention
//! marked by `sdpa`) are emitted as one `stablehlo.composite` whose `decomposition` is a
//! private function holding their ops, lowered exactly as they would be inline:
//!
//! ```text
//! %o = "stablehlo.composite"(%q, %kt, %mask, %v) {name = "torchtpu.sdpa",
//!        composite_attributes = {}, decomposition = @torchtpu.sdpa.0, version = 0 : i32}
//! "func.func"() <{sym_name = "torchtpu.sdpa.0", sym_visibility = "private", …}> ({ … })
//! ```

use std::collections::{BTreeMap, BTreeSet};

use melior::ir::block::BlockLike;
use melior::ir::operation::{Operation, OperationBuilder};
use melior::ir::{Block, Identifier, Location, Region, RegionLike, Value};
use melior::Context;
use torchtpu_passes::ir::ops::Softmax;
use torchtpu_passes::ir::{Composite, Graph, NodeId, Op, ValueRef};

use super::attention::{self, Attention, DEFAULT_BLOCK};
use super::builder::{bug, static_dims, Builder, LowerResult};
use super::{emit_node, mlir_type, node_location, type_text, Arg, EmitOptions};

/// A marked group that can be outlined: its nodes in topological order (the last one, the
/// root, gives the composite's result) and the values it reads from outside, in order of
/// first use (the composite's operands).
pub(super) struct Group {
    composite: Composite,
    pub nodes: Vec<NodeId>,
    pub operands: Vec<ValueRef>,
    /// An attention lowered blocked (see `attention`), whose operands are the plan's.
    blocked: Option<attention::Plan>,
}

impl Group {
    fn root(&self) -> NodeId {
        self.nodes[self.nodes.len() - 1]
    }

    /// The nodes emitted inside the decomposition only.
    pub(super) fn inner(&self) -> &[NodeId] {
        &self.nodes[..self.nodes.len() - 1]
    }

    /// True for an attention lowered blocked.
    pub(super) fn is_blocked(&self) -> bool {
        self.blocked.is_some()
    }

    /// True for an attention marked by the `sdpa` pass.
    pub(super) fn is_sdpa(&self) -> bool {
        self.composite.name == torchtpu_passes::ir::SDPA
    }

    /// The decomposition function's name, e.g. `torchtpu.sdpa.0`.
    fn symbol(&self) -> String {
        format!("{}.{}", self.composite.name, self.composite.instance)
    }
}

/// The groups of `graph` by root. A group whose inner values are read outside it, or whose
/// root has several outputs, is left out: its nodes are emitted one by one.
pub(super) fn groups(graph: &Graph, order: &[NodeId], opts: &EmitOptions) -> BTreeMap<NodeId, Group> {
    let mut marked: BTreeMap<Composite, Vec<NodeId>> = BTreeMap::new();
    for &id in order {
        if let Some(c) = graph.node(id).composite {
            marked.entry(c).or_default().push(id);
        }
    }
    marked
        .into_iter()
        .filter_map(|(composite, nodes)| {
            let members: BTreeSet<NodeId> = nodes.iter().copied().collect();
            let (&root, inner) = nodes.split_last()?;
            let sealed = inner
                .iter()
                .all(|&n| !graph.is_output(n) && graph.users(n).iter().all(|(u, _, _)| members.contains(u)));
            if !sealed || graph.node(root).outputs.len() != 1 {
                return None;
            }
            let mut operands = Vec::new();
            for &n in &nodes {
                for v in graph.inputs(n) {
                    if !members.contains(&v.node) && !operands.contains(&v) {
                        operands.push(v);
                    }
                }
            }
            let mut group = Group { composite, nodes, operands, blocked: None };
            let plan = group.is_sdpa().then(|| attention::plan(graph, &group.nodes, &group.operands, opts)).flatten();
            if let Some(plan) = plan {
                group.operands = plan.operands.clone();
                group.blocked = Some(plan);
            }
            Some((root, group))
        })
        .collect()
}

/// Emits `group` as a `stablehlo.composite` on `args` (its operands' values); returns the
/// composite's result and the decomposition function to add to the module.
pub(super) fn emit<'c, 'b>(
    b: &Builder<'c, 'b>,
    graph: &Graph,
    group: &Group,
    args: &[Arg<'c, 'b, '_>],
    opts: &EmitOptions,
) -> LowerResult<(Vec<Value<'c, 'b>>, Operation<'c>)> {
    let ctx = b.ctx;
    let unknown = Location::unknown(ctx);
    let arg_types = args.iter().map(|a| mlir_type(ctx, a.ty).map(|t| (t, unknown))).collect::<Result<Vec<_>, _>>()?;
    let out_ty = &graph.node(group.root()).outputs[0];
    let block = Block::new(&arg_types);
    match &group.blocked {
        Some(plan) => lower_blocked(ctx, &block, graph, group, plan, opts)?,
        None => lower_into(ctx, &block, graph, group, opts)?,
    }
    let region = Region::new();
    region.append_block(block);
    let arg_text: Vec<String> = args.iter().map(|a| type_text(a.ty)).collect::<Result<_, _>>()?;
    let fn_type = format!("({}) -> {}", arg_text.join(", "), type_text(out_ty)?);
    let symbol = group.symbol();
    let func = OperationBuilder::new("func.func", unknown)
        .add_attributes(&[
            (Identifier::new(ctx, "sym_name"), b.attr(&format!("\"{symbol}\""))?),
            (Identifier::new(ctx, "sym_visibility"), b.attr("\"private\"")?),
            (Identifier::new(ctx, "function_type"), b.attr(&fn_type)?),
        ])
        .add_regions([region])
        .build()
        .map_err(|e| bug(format!("cannot build `{symbol}`: {e}")))?;
    let attrs = [
        ("name", format!("\"{}\"", group.composite.name)),
        ("composite_attributes", "{}".to_string()),
        ("decomposition", format!("@{symbol}")),
        ("version", "0 : i32".to_string()),
    ];
    let operands: Vec<Value<'c, 'b>> = args.iter().map(|a| a.v).collect();
    let result = b.op("stablehlo.composite", &operands, &static_dims(out_ty)?, out_ty.dtype, &attrs)?;
    Ok((vec![result], func))
}

/// Lowers the group's nodes into `block` (whose arguments are the operands), returning the
/// root's value.
fn lower_into<'c>(
    ctx: &'c Context,
    block: &Block<'c>,
    graph: &Graph,
    group: &Group,
    opts: &EmitOptions,
) -> LowerResult<()> {
    let mut values = BTreeMap::new();
    for (i, &v) in group.operands.iter().enumerate() {
        values.insert(v, Value::from(block.argument(i).map_err(bug)?));
    }
    for &id in &group.nodes {
        let node = graph.node(id);
        let args: Vec<Arg> = graph.inputs(id).iter().map(|v| Arg { v: values[v], ty: graph.value_type(*v) }).collect();
        let b = Builder { ctx, block, loc: node_location(ctx, node) };
        // The program's random state runs outside the decomposition, which cannot draw from it.
        if node.op.is_random() {
            return Err(format!("node `{}`: a random op inside a composite", node.name).into());
        }
        let outs = emit_node(&b, graph, id, &args, opts, &mut None)
            .map_err(|e| e.map(|r| format!("node `{}`: {r}", node.name)))?;
        for (slot, v) in outs.into_iter().enumerate() {
            values.insert(ValueRef { node: id, slot: slot as u16 }, v);
        }
    }
    let ret = OperationBuilder::new("func.return", Location::unknown(ctx))
        .add_operands(&[values[&ValueRef { node: group.root(), slot: 0 }]])
        .build()
        .map_err(bug)?;
    block.append_operation(ret);
    Ok(())
}

/// Lowers an attention group blocked (see `attention`) into `block`.
fn lower_blocked<'c>(
    ctx: &'c Context,
    block: &Block<'c>,
    graph: &Graph,
    group: &Group,
    plan: &attention::Plan,
    opts: &EmitOptions,
) -> LowerResult<()> {
    let root = graph.node(group.root());
    let b = Builder { ctx, block, loc: node_location(ctx, root) };
    let args = group
        .operands
        .iter()
        .enumerate()
        .map(|(i, v)| Ok((Value::from(block.argument(i).map_err(bug)?), graph.value_type(*v))))
        .collect::<LowerResult<Vec<_>>>()?;
    let out = attention::lower(&b, plan, &args, opts).map_err(|e| e.map(|r| format!("node `{}`: {r}", root.name)))?;
    let ret = OperationBuilder::new("func.return", Location::unknown(ctx)).add_operands(&[out]).build().map_err(bug)?;
    block.append_operation(ret);
    Ok(())
}

/// With `--attention blocked`: one line per attention of `graph` that stays naive, naming its
/// softmax and saying why. An attention is a softmax between two `bmm`s (through views,
/// conversions and element-wise ops); the router softmax of an MoE is none.
pub(crate) fn naive_attentions(graph: &Graph, opts: &EmitOptions) -> Vec<String> {
    if opts.attention != Attention::Blocked {
        return Vec::new();
    }
    let Ok(order) = graph.topo_order() else { return Vec::new() };
    let groups = groups(graph, &order, opts);
    let grouped: BTreeMap<NodeId, bool> =
        groups.values().flat_map(|g| g.nodes.iter().map(move |&n| (n, g.is_blocked()))).collect();
    let mut lines = Vec::new();
    for &id in &order {
        let node = graph.node(id);
        if !matches!(node.op, Op::Softmax(Softmax { log: false, .. })) {
            continue;
        }
        let keys = graph.inputs(id).first().and_then(|v| graph.value_type(*v).dims.last()?.as_static());
        let one_block = keys.is_some_and(|k| k <= opts.attention_block.unwrap_or(DEFAULT_BLOCK));
        let why = match grouped.get(&id) {
            Some(true) => continue,
            Some(false) if one_block => continue,
            Some(false) => {
                "its ops between the two products do not all work key by key, or its keys do not split \
                            into blocks"
            }
            None if !between_products(graph, id) => continue,
            None if graph.users(id).len() > 1 => {
                "its probabilities are also read outside it (a training graph's backward keeps them): the \
                 backward of attention is not blocked"
            }
            None => "its ops are not one chain (`bmm`, element-wise ops, softmax, `bmm`) the `sdpa` pass marks",
        };
        lines.push(format!("attention at node `{}` stays naive: {why}", node.name));
    }
    lines
}

/// Whether softmax `id` reads a `bmm` and feeds one, each within a few views, conversions or
/// element-wise ops.
fn between_products(graph: &Graph, id: NodeId) -> bool {
    let passes_on = |op: &Op| {
        matches!(
            op,
            Op::View(_) | Op::Convert(_) | Op::Identity(_) | Op::Binary(_) | Op::Where(_) | Op::Cat(_) | Op::Slice(_)
        )
    };
    let reads = |from: NodeId| {
        let mut frontier = vec![(from, 0)];
        while let Some((at, depth)) = frontier.pop() {
            for input in graph.inputs(at) {
                match &graph.node(input.node).op {
                    Op::Bmm(_) => return true,
                    op if passes_on(op) && depth < 8 => frontier.push((input.node, depth + 1)),
                    _ => {}
                }
            }
        }
        false
    };
    let feeds = |from: NodeId| {
        let mut frontier = vec![(from, 0)];
        while let Some((at, depth)) = frontier.pop() {
            for (user, _, _) in graph.users(at) {
                match &graph.node(user).op {
                    Op::Bmm(_) => return true,
                    op if passes_on(op) && depth < 8 => frontier.push((user, depth + 1)),
                    _ => {}
                }
            }
        }
        false
    };
    reads(id) && feeds(id)
}
