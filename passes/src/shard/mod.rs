//! `shard`: splits the program over the devices of `--mesh` (the `auto` plan): the graph gets
//! the mesh, and the inputs and the results of some ops get shardings that the XLA partitioner
//! (Shardy) follows, inserting the collectives they imply.
//!
//! - Axis `dp`: every user input is split along its first dim (the batch); a first dim that
//!   does not divide is refused, naming the input. The batch is the first dim of the inputs of
//!   rank 2 or more: a vector of another length (a decode step's `cache_position`) and a
//!   scalar are not batched and stay whole. Buffers the program updates whose first dim is a
//!   batch (a decode step's KV caches, one row per sequence) are stored split along it, so each
//!   device holds only its rows' caches.
//! - Axis `tp`: tensor parallelism in Megatron's form, found from the graph's structure, not
//!   from names. A fused projection (one weight for Q, K and V whose features a split cuts
//!   apart, GPT-2's `c_attn`) is first made one matmul per part, on narrowed weights. A matmul
//!   on a weight whose input is whole is *column-parallel*: its weight's output features (and
//!   its bias) are split, so each device computes a slice of the features. The split is
//!   followed through the ops after it that keep it local — element-wise ops, views that split
//!   features into heads (whole heads per device), permutes, per-head `bmm`s and softmax,
//!   reductions over other dims, writes into a buffer along a dim that no index reads (a KV
//!   cache's heads: the buffer is stored split with them) — to a matmul on a weight that
//!   contracts the split features: that one is *row-parallel* (its weight's input features
//!   split), and its result, a partial sum on each device, becomes whole again (one
//!   all-reduce). A column-parallel matmul whose split reaches an op that would need the whole
//!   features (a norm, a residual add, a slice of the features) is not split at all, and
//!   neither is anything it fed. An embedding table is split along its rows
//!   (vocabulary-parallel); a column-parallel matmul whose split reaches a graph output (an LM
//!   head) gives it whole (an all-gather). What would have to be split but does not divide
//!   along `tp` is refused, naming it: heads (a view of split features into heads), and a
//!   vocabulary (a table of 1024 rows or more); smaller tables and matmuls whose output
//!   features do not divide are left whole, and the report counts them.
//!   Constraints pin the split at each column-parallel result and the whole value at each
//!   row-parallel one.
//! - Axis `fsdp`: every weight is stored split along it as well and gathered where used
//!   (`fsdp`).
//! - Axis `ep`: the experts of mixture-of-experts layers are stored split, `E / ep` per device,
//!   each device computing its experts' contribution ([`experts`]).
//! - Any other axis (sequence parallelism) is refused: not supported yet.
//!
//! A plan file (`--shard-plan FILE`, [`plan`]) overrides this per module and per input: it
//! can keep modules whole, split small embedding tables, split inputs along other dims, and
//! state which matmuls must come out column- or row-parallel (refused, by name, when they do
//! not); it never makes a split the analysis cannot follow.
//!
//! Shardings set here are on graph inputs (the arguments' shardings) and on op results
//! (constraints); results of the graph are whole on every device, but the new values of
//! updated weights, which the emitter splits as their weights are. Weights that nothing splits
//! are whole on every device.
//!
//! A filetest (the input graph, then the graph the pass leaves after `; expect:`):
//!
//! ```text
#![doc = include_str!("../../tests/shard/megatron_mlp.ir")]
//! ```

pub mod experts;
mod follow;
mod fsdp;
pub mod plan;
mod sequence;
mod unfuse;

use std::collections::{BTreeMap, BTreeSet};

use crate::ir::ops::{Embedding, Mm, Permute};
use crate::ir::{Dim, Graph, InputKind, Mesh, NodeId, Op, Sharding, ValueRef};
use crate::pass::{bug, Changed, Fail, Pass, PassCx, PassError};
use follow::{follow, Why};
use plan::{Assigned, ShardPlan, Style};

/// See the module docs.
pub struct Shard {
    /// The mesh (`None`: the pass does nothing).
    pub mesh: Option<Mesh>,
    /// What a plan file overrides (empty: the `auto` plan throughout).
    pub plan: ShardPlan,
}

/// An embedding table of at least this many rows is a vocabulary: split along its rows, or
/// left whole (and said so) when they do not divide along `tp`.
const VOCABULARY: i64 = 1024;

/// The axes the `auto` plan knows.
const DATA: &str = "dp";
const TENSOR: &str = "tp";

/// A matmul on a weight: `mm(x, permute(W))` (`nn.Linear`, `W: [out, in]`), `mm(x, W)` (GPT-2's
/// `Conv1D`, `W: [in, out]`), `addmm(b, x, …)` of those with a bias `b: [out]`, or
/// `bmm(x, expand(…))` of those (a linear layer on a 3-d input, as some exports write it).
#[derive(Clone, Debug)]
pub(super) struct Linear {
    node: NodeId,
    /// The activation it multiplies.
    input: ValueRef,
    /// The weight input and which of its dims holds the output features.
    weight: NodeId,
    out_dim: usize,
    bias: Option<NodeId>,
}

/// A value whose dim `dim` is split along `tp`, by the column-parallel matmuls `origins`:
/// index `i` of the dim is on device `(i / inner) % tp`. A dim split whole has `inner` = its
/// size / `tp`; a smaller `inner` is a split dim merged under a larger one by a view (`[B*H]`
/// with the heads `H` split: `inner = H / tp`).
#[derive(Clone, Debug)]
struct Split {
    dim: usize,
    inner: i64,
    origins: BTreeSet<NodeId>,
}

/// What one round of the analysis decided.
#[derive(Default)]
struct Plan {
    column: BTreeSet<NodeId>,
    /// Embeddings of small tables split along their columns: the rows are per-head values (T5's
    /// relative-position bias), each device gathers its heads' columns.
    head_tables: BTreeSet<NodeId>,
    /// Those whose split met a column-parallel matmul's split (the heads of `Q·Kᵀ`).
    met: BTreeSet<NodeId>,
    row: BTreeSet<NodeId>,
    /// Weight inputs and the dim `tp` splits.
    weights: BTreeMap<NodeId, usize>,
    /// Column-parallel matmuls (and embeddings split along their columns) whose split could not
    /// be followed: not split next round.
    broken: BTreeSet<NodeId>,
    /// Why the plan cannot be made: dims that would have to be split but do not divide.
    refusals: Vec<String>,
    /// Matmuls on weights left whole because their output features do not divide along `tp`.
    indivisible: usize,
    /// Vocabularies (embedding tables of at least [`VOCABULARY`] rows) left whole because
    /// their rows do not divide along `tp`.
    whole_vocabularies: usize,
    /// Matmuls on weights left whole because their split could not be followed (it reached
    /// an op that needs the whole features).
    unfollowed: usize,
}

impl Pass for Shard {
    fn name(&self) -> &'static str {
        "shard"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let Some(mesh) = self.mesh.clone() else { return Ok(Changed::No) };
        let fail = |reason: String| PassError::Failed { pass: "shard", reason };
        let known = [DATA, TENSOR, fsdp::FSDP, experts::EXPERTS];
        if let Some(a) = mesh.axes.iter().find(|a| !known.contains(&a.name.as_str())) {
            return Err(fail(format!(
                "the `auto` plan splits along `dp` (data), `tp` (tensor), `fsdp` (parameters) and `ep` (experts) \
                 axes, not `{}`; other axes (sequence parallelism) are not supported yet",
                a.name
            )));
        }
        graph.set_mesh(Some(mesh.clone()));
        let inputs = split_inputs(graph, &mesh, &self.plan.inputs).map_err(fail)?;
        cx.note(inputs, "user inputs split (dp)");
        if mesh.size(TENSOR) > 1 {
            let unfused = unfuse::unfuse(graph);
            cx.note(unfused, "fused projections (one weight for several parts: Q, K and V; an SSM input and its gate) made one matmul per part");
            let assigned = self.plan.assign(graph).map_err(fail)?;
            cx.note(assigned.len(), "weights the plan file decides");
            let plan = tensor_parallel(graph, mesh.size(TENSOR), &assigned).map_err(|f| PassError::of("shard", f))?;
            apply(graph, &plan);
            let constrained = sequence::constrain(graph, &self.plan, mesh.size(TENSOR)).map_err(fail)?;
            cx.note(constrained, "module outputs split along the sequence (tp)");
            cx.note(plan.column.len(), "column-parallel matmuls (tp)");
            cx.note(plan.row.len(), "row-parallel matmuls, each followed by an all-reduce (tp)");
            let tables = plan.weights.iter().filter(|&(&w, &d)| d == 0 && is_embedding_table(graph, w)).count();
            cx.note(tables, "embedding tables split along the vocabulary (tp)");
            cx.note(plan.head_tables.len(), "embeddings of per-head values split along their columns (tp)");
            cx.note(plan.indivisible, "matmuls or small embedding tables left whole: they do not divide along tp");
            cx.note(
                plan.whole_vocabularies,
                "vocabularies left whole, a copy per device: their rows do not divide along tp \
                 (`--pad-multiple 128` pads them so that they split)",
            );
            cx.note(plan.unfollowed, "matmuls left whole: their split reaches an op that needs the whole features");
        } else if let Some(p) = self.plan.modules.keys().next() {
            return Err(fail(format!("plan: `{p}` is split along `tp`, which the mesh {mesh} lacks")));
        }
        if mesh.size(experts::EXPERTS) > 1 {
            let (weights, grouped) = experts::split_experts(graph, mesh.size(experts::EXPERTS)).map_err(fail)?;
            cx.note(weights, "expert weights split along the experts (ep)");
            cx.note(grouped, "grouped matmuls combined across ep (one all-reduce each)");
        }
        cx.note(split_state_rows(graph, &mesh), "updated buffers (KV caches) split along their rows (dp)");
        let fsdp = fsdp::split_weights(graph, &mesh);
        cx.note(fsdp.split, "weights split along fsdp, gathered where used");
        cx.note(fsdp.timed, "uses of them gathered once their activation is ready");
        cx.note(fsdp.whole, "weights left whole along fsdp: no dim divides");
        cx.note(fsdp.state, "updated buffers (state) left whole along fsdp");
        Ok(Changed::Yes)
    }
}

/// Splits each user input as the plan file lists it, or else along its first dim over `dp`
/// where it is batched ([`batches`]); the number split.
fn split_inputs(
    graph: &mut Graph,
    mesh: &Mesh,
    listed: &BTreeMap<String, Vec<Option<String>>>,
) -> Result<usize, String> {
    let users = user_inputs(graph);
    if let Some(name) = listed.keys().find(|n| !users.iter().any(|&u| &graph.node(u).name == *n)) {
        let names: Vec<String> = users.iter().map(|&u| format!("`{}`", graph.node(u).name)).collect();
        return Err(format!("plan: there is no user input `{name}`; the inputs are {}", names.join(", ")));
    }
    let batches = batches(graph, &users);
    let mut split = 0;
    for id in users {
        let node = graph.node(id);
        let sharding = match listed.get(&node.name) {
            Some(axes) => listed_sharding(node, axes, mesh)?,
            None => batch_sharding(node, mesh, &batches)?,
        };
        if let Some(s) = sharding.filter(|s| !s.is_replicated()) {
            graph.node_mut(id).sharding = Some(s);
            split += 1;
        }
    }
    Ok(split)
}

/// A user input split as a plan file lists it: per dim, an axis (only `dp`) or whole.
fn listed_sharding(node: &crate::ir::Node, axes: &[Option<String>], mesh: &Mesh) -> Result<Option<Sharding>, String> {
    let ty = &node.outputs[0];
    let dims = ty.static_dims().ok_or_else(|| format!("user input `{}` has dynamic dims", node.name))?;
    if axes.len() != dims.len() {
        return Err(format!("plan: input `{}` lists {} dims, but it has {}", node.name, axes.len(), dims.len()));
    }
    if let Some(a) = axes.iter().flatten().find(|a| a.as_str() != DATA) {
        return Err(format!("plan: input `{}` is split along `{a}`; inputs split along `dp` only", node.name));
    }
    let sharding = Sharding { dims: axes.iter().map(|a| a.iter().cloned().collect()).collect(), open: Vec::new() };
    sharding.check(&dims, mesh).map_err(|e| format!("plan: input `{}`: {e}", node.name))?;
    Ok(Some(sharding))
}

/// The graph's user inputs.
fn user_inputs(graph: &Graph) -> Vec<NodeId> {
    let inputs = graph.graph_inputs().iter().copied();
    inputs.filter(|&id| matches!(graph.node(id).op, Op::Input(InputKind::User { .. }))).collect()
}

/// The batch sizes of the user inputs: the first dims of those of rank 2 or more (a vector's
/// length may be a sequence's: `cache_position`), or of the vectors when there is no other.
fn batches(graph: &Graph, users: &[NodeId]) -> BTreeSet<i64> {
    let first_dims = |min_rank: usize| -> BTreeSet<i64> {
        let types = users.iter().map(|&u| &graph.node(u).outputs[0]).filter(|t| t.rank() >= min_rank);
        types.filter_map(|t| t.dims.first().and_then(Dim::as_static)).collect()
    };
    Some(first_dims(2)).filter(|b| !b.is_empty()).unwrap_or_else(|| first_dims(1))
}

/// A user input split along its first dim over `dp` (the `auto` plan); `None` without `dp`,
/// and for an input that is not batched (a scalar, a vector of no batch's length).
fn batch_sharding(node: &crate::ir::Node, mesh: &Mesh, batches: &BTreeSet<i64>) -> Result<Option<Sharding>, String> {
    let dp = mesh.size(DATA);
    if dp == 1 {
        return Ok(None);
    }
    let ty = &node.outputs[0];
    match ty.dims.first() {
        None => Ok(None),
        Some(d) if ty.rank() == 1 && !d.as_static().is_some_and(|n| batches.contains(&n)) => Ok(None),
        Some(Dim::Static(n)) if n % dp == 0 => Ok(Some(Sharding::split(ty.rank(), 0, DATA))),
        Some(Dim::Static(n)) => Err(format!(
            "user input `{}`: its batch dim (dim 0, size {n}) does not divide along mesh axis `dp` ({dp} devices); \
             a plan file (`--shard-plan`) can split another dim or keep it whole",
            node.name
        )),
        _ => Err(format!(
            "user input `{}`: its batch dim (dim 0) is dynamic; mesh axis `dp` splits static batches",
            node.name
        )),
    }
}

/// Splits the buffers the program updates whose first dim is a batch along `dp` (on top of any
/// split `tp` gave them): each device keeps its rows' KV caches. The number split.
fn split_state_rows(graph: &mut Graph, mesh: &Mesh) -> usize {
    let dp = mesh.size(DATA);
    if dp == 1 {
        return 0;
    }
    let users = user_inputs(graph);
    let batches = batches(graph, &users);
    let mutated = fsdp::mutated_state(graph);
    let rows: Vec<NodeId> = graph
        .graph_inputs()
        .iter()
        .copied()
        .filter(|&id| match &graph.node(id).op {
            Op::Input(InputKind::Buffer { fqn, .. } | InputKind::Parameter { fqn }) => mutated.contains(fqn),
            _ => false,
        })
        .filter(|&id| {
            let ty = &graph.node(id).outputs[0];
            let first = ty.dims.first().and_then(Dim::as_static);
            ty.rank() >= 2 && first.is_some_and(|n| batches.contains(&n) && n % dp == 0)
        })
        .collect();
    let mut split = 0;
    for id in rows {
        let node = graph.node_mut(id);
        let mut sharding = node.sharding.clone().unwrap_or_else(|| Sharding::replicated(node.outputs[0].rank()));
        if sharding.dims[0].is_empty() && !sharding.dims.iter().flatten().any(|a| a == DATA) {
            sharding.dims[0].push(DATA.to_string());
            node.sharding = Some(sharding);
            split += 1;
        }
    }
    split
}

fn is_embedding_table(graph: &Graph, weight: NodeId) -> bool {
    graph.users(weight).iter().any(|&(u, slot, _)| slot == 0 && graph.node(u).op == Op::Embedding(Embedding))
}

/// The weight input feeding `v`, directly (`W`) or through a transpose (`permute(W, [1, 0])`):
/// the input and the dim of `W` that is the matmul's output features.
fn weight_of(graph: &Graph, v: ValueRef) -> Option<(NodeId, usize)> {
    let node = graph.node(v.node);
    match &node.op {
        Op::Input(k) if k.is_weight() && node.outputs[0].rank() == 2 => Some((v.node, 1)),
        Op::Permute(Permute { dims }) if dims == &[1, 0] => {
            let src = graph.inputs(v.node)[0];
            let w = graph.node(src.node);
            matches!(&w.op, Op::Input(k) if k.is_weight()).then_some((src.node, 0))
        }
        _ => None,
    }
}

fn is_weight(graph: &Graph, v: ValueRef) -> bool {
    matches!(&graph.node(v.node).op, Op::Input(k) if k.is_weight())
}

/// `id` as a matmul on a weight, if it is one.
pub(super) fn linear(graph: &Graph, id: NodeId) -> Option<Linear> {
    let ins = graph.inputs(id);
    let (input, w, bias) = match &graph.node(id).op {
        Op::Mm(Mm) => (ins[0], ins[1], None),
        Op::Addmm(_) => {
            let b = ins[0];
            (ins[1], ins[2], (is_weight(graph, b) && graph.value_type(b).rank() == 1).then_some(b.node))
        }
        Op::Bmm(_) if matches!(graph.node(ins[1].node).op, Op::Expand(_)) => {
            (ins[0], graph.inputs(ins[1].node)[0], None)
        }
        _ => return None,
    };
    let (weight, out_dim) = weight_of(graph, w)?;
    Some(Linear { node: id, input, weight, out_dim, bias })
}

/// The Megatron plan: rounds of the analysis, each dropping the column-parallel matmuls whose
/// split could not be followed, until one round keeps them all.
fn tensor_parallel(graph: &Graph, tp: i64, assigned: &BTreeMap<NodeId, Assigned>) -> Result<Plan, Fail> {
    let order = graph.topo_order().map_err(|_| "the graph has a cycle".to_string())?;
    let linears: BTreeMap<NodeId, Linear> =
        order.iter().filter_map(|&id| linear(graph, id)).map(|l| (l.node, l)).collect();
    let embeddings = order.iter().filter(|&&id| graph.node(id).op == Op::Embedding(Embedding)).count();
    let mut excluded = BTreeSet::new();
    for _ in 0..=linears.len() + embeddings {
        let plan = analyze(graph, &order, &linears, &excluded, tp, assigned);
        if let Some(refusal) = plan.refusals.first() {
            return Err(refusal.clone().into());
        }
        if plan.broken.is_empty() {
            check_stated(graph, &linears, &plan, assigned)?;
            let mut plan = plan;
            plan.unfollowed = excluded.iter().filter(|id| linears.contains_key(id) && !plan.row.contains(id)).count();
            return Ok(plan);
        }
        excluded.extend(plan.broken);
    }
    Err(bug("the tensor-parallel analysis did not settle"))
}

/// One round: follows the splits of the column-parallel candidates (every matmul on a weight
/// whose input is whole, but `excluded`) through the graph in topological order.
fn analyze(
    graph: &Graph,
    order: &[NodeId],
    linears: &BTreeMap<NodeId, Linear>,
    excluded: &BTreeSet<NodeId>,
    tp: i64,
    assigned: &BTreeMap<NodeId, Assigned>,
) -> Plan {
    let mut plan = Plan::default();
    let style = |w: NodeId| assigned.get(&w).map(|a| a.style);
    let mut splits: BTreeMap<ValueRef, Split> = BTreeMap::new();
    let dims_of = |v: ValueRef| graph.value_type(v).static_dims().unwrap_or_default();
    for &id in order {
        let node = graph.node(id);
        if node.op == Op::Embedding(Embedding) {
            let table = graph.inputs(id)[0];
            let stated = style(table.node);
            if let Some(split) = head_table_split(graph, id, excluded, stated.is_some(), tp) {
                splits.insert(ValueRef { node: id, slot: 0 }, split);
                plan.head_tables.insert(id);
                continue;
            }
            match dims_of(table).first() {
                _ if stated == Some(Style::Replicate) => {}
                _ if stated == Some(Style::Colwise) => plan.refusals.push(format!(
                    "plan: embedding table `{}` is `colwise` (split along the embedding dim), which is not supported; \
                     `vocab` or `rowwise` splits its rows",
                    graph.node(table.node).name
                )),
                Some(v) if is_weight(graph, table) && v % tp == 0 => {
                    claim(&mut plan, table.node, 0);
                }
                // A table that does not divide is left whole (GPT-2's 50257 rows: one copy per
                // device, exact); refused only where a plan file asked for its split.
                Some(&v) if is_weight(graph, table) && stated.is_some() => plan.refusals.push(format!(
                    "embedding table `{}`: its {v} rows (dim 0) do not divide along mesh axis `tp` ({tp} devices); \
                     pad the vocabulary (`--pad-multiple`) or use a `tp` that divides {v}",
                    graph.node(table.node).name
                )),
                Some(&v) if is_weight(graph, table) && v >= VOCABULARY => plan.whole_vocabularies += 1,
                Some(_) if is_weight(graph, table) => plan.indivisible += 1,
                _ => {}
            }
            continue;
        }
        let ins = graph.inputs(id);
        let split_ins: Vec<(usize, &Split)> =
            ins.iter().enumerate().filter_map(|(i, v)| splits.get(v).map(|s| (i, s))).collect();
        if let Some(l) = linears.get(&id) {
            let stated = style(l.weight);
            let name = &graph.node(l.weight).name;
            match stated {
                Some(Style::Vocab) => {
                    plan.refusals.push(format!("plan: `{name}` is `vocab`, which applies to embedding tables"));
                }
                Some(Style::Sequence) => plan.refusals.push(format!(
                    "plan: `{name}` is `sequence`, which applies to modules between matmuls (norms), not to matmuls"
                )),
                _ => {}
            }
            let replicate = stated == Some(Style::Replicate);
            let w = dims_of(ValueRef { node: l.weight, slot: 0 });
            let in_rank = graph.value_type(l.input).rank();
            // A table's columns contracted on their own are features, not heads: the table is
            // not split, and the matmul sees a whole input.
            let mut input_split = splits.get(&l.input);
            if let Some(s) = input_split.filter(|s| s.origins.iter().all(|o| plan.head_tables.contains(o))) {
                plan.broken.extend(s.origins.iter().copied());
                input_split = None;
            }
            match input_split {
                Some(s)
                    if !replicate
                        && s.dim + 1 == in_rank
                        && s.inner * tp
                            == graph.value_type(l.input).static_dims().and_then(|d| d.last().copied()).unwrap_or(0) =>
                {
                    // Row-parallel: the split features are contracted here.
                    plan.row.insert(id);
                    if !claim(&mut plan, l.weight, 1 - l.out_dim) {
                        plan.broken.extend(s.origins.iter().copied());
                    }
                }
                Some(s) => {
                    plan.broken.extend(s.origins.iter().copied());
                }
                None if excluded.contains(&id) || replicate => {}
                None if w.get(l.out_dim).is_some_and(|n| n % tp == 0) => {
                    let out = ValueRef { node: id, slot: 0 };
                    let dim = node.outputs[0].rank() - 1;
                    splits.insert(out, Split { dim, inner: w[l.out_dim] / tp, origins: BTreeSet::from([id]) });
                    plan.column.insert(id);
                }
                None => plan.indivisible += 1,
            }
            continue;
        }
        if split_ins.is_empty() {
            continue;
        }
        match follow(graph, id, &ins, &splits, tp) {
            Ok((dim, inner, origins, weights)) => {
                if origins.iter().any(|o| !plan.head_tables.contains(o)) {
                    plan.met.extend(origins.iter().filter(|o| plan.head_tables.contains(o)));
                }
                let mut ok = true;
                for (w, d) in weights {
                    ok &= claim(&mut plan, w, d);
                }
                if ok {
                    // Every result alike (the pieces of a `split_with_sizes`).
                    for slot in 0..node.outputs.len() as u16 {
                        splits.insert(ValueRef { node: id, slot }, Split { dim, inner, origins: origins.clone() });
                    }
                } else {
                    plan.broken.extend(origins);
                }
            }
            Err(Why::Whole(slot)) => plan.broken.extend(splits[&ins[slot]].origins.iter().copied()),
            Err(why) => {
                if let Why::Indivisible(n) = why {
                    let by: Vec<&str> = split_ins
                        .iter()
                        .flat_map(|(_, s)| s.origins.iter().map(|&o| graph.node(o).name.as_str()))
                        .collect();
                    plan.refusals.push(format!(
                        "node `{}` ({}) splits the features of `{}` into {n} heads, which do not divide along mesh \
                         axis `tp` ({tp} devices); use a `tp` that divides {n} (heads are not padded to divide)",
                        node.name,
                        node.op.name(),
                        by.join("`, `")
                    ));
                }
                split_ins.iter().for_each(|(_, s)| plan.broken.extend(s.origins.iter().copied()));
            }
        }
    }
    // Tables split along their columns, then column-parallel weights and biases (a matmul whose
    // split was broken is not split).
    let unmet: Vec<NodeId> = plan.head_tables.difference(&plan.met).copied().collect();
    plan.broken.extend(unmet);
    plan.head_tables.retain(|t| !plan.broken.contains(t));
    for t in plan.head_tables.clone() {
        if !claim(&mut plan, graph.inputs(t)[0].node, 1) {
            plan.broken.insert(t);
        }
    }
    let kept: Vec<NodeId> = plan.column.iter().copied().filter(|c| !plan.broken.contains(c)).collect();
    for c in kept {
        let l = &linears[&c];
        if !claim(&mut plan, l.weight, l.out_dim) {
            plan.broken.insert(c);
        }
        if let Some(b) = l.bias {
            claim(&mut plan, b, 0);
        }
    }
    plan
}

/// The split of embedding `id`'s result when its table is tried along its columns: a small
/// weight table (fewer rows than a vocabulary) whose columns divide along `tp`, not named by a
/// plan file nor excluded. Its columns are per-head values where the split meets attention's
/// split heads (T5's relative-position bias added to `Q·Kᵀ`); where it does not (a position or
/// token-type embedding reaching a norm), the split breaks and the table is tried as before.
fn head_table_split(graph: &Graph, id: NodeId, excluded: &BTreeSet<NodeId>, stated: bool, tp: i64) -> Option<Split> {
    let table = graph.inputs(id)[0];
    let dims = graph.value_type(table).static_dims()?;
    let small = matches!(dims.as_slice(), [rows, cols] if *rows < VOCABULARY && cols % tp == 0);
    if excluded.contains(&id) || stated || !small || !is_weight(graph, table) {
        return None;
    }
    let dim = graph.node(id).outputs[0].rank() - 1;
    Some(Split { dim, inner: dims[1] / tp, origins: BTreeSet::from([id]) })
}

/// Checks that the matmuls a plan file calls `colwise` or `rowwise` came out so.
fn check_stated(
    graph: &Graph,
    linears: &BTreeMap<NodeId, Linear>,
    plan: &Plan,
    assigned: &BTreeMap<NodeId, Assigned>,
) -> Result<(), String> {
    let parts: BTreeSet<NodeId> = linears.values().flat_map(|l| [Some(l.weight), l.bias]).flatten().collect();
    let stray = assigned.iter().find(|(&w, a)| {
        let splits = matches!(a.style, Style::Colwise | Style::Rowwise | Style::Vocab);
        splits && !parts.contains(&w) && !is_embedding_table(graph, w)
    });
    if let Some((&w, a)) = stray {
        return Err(format!(
            "plan: module `{}` is `{}`, but its weight `{}` is neither a matmul's nor an embedding table",
            a.module,
            a.style.word(),
            graph.node(w).name
        ));
    }
    for l in linears.values() {
        let Some(a) = assigned.get(&l.weight) else { continue };
        let why = match a.style {
            Style::Colwise if !plan.column.contains(&l.node) => {
                "its output features cannot stay split: they reach an op that needs them whole (a norm, a residual \
                 add), a matmul kept whole, or do not divide along `tp`"
            }
            Style::Rowwise if !plan.row.contains(&l.node) => {
                "it does not contract features that a column-parallel matmul split"
            }
            _ => continue,
        };
        return Err(format!(
            "plan: module `{}` is `{}`, but `{}` cannot be split that way: {why}",
            a.module,
            a.style.word(),
            graph.node(l.node).name
        ));
    }
    Ok(())
}

/// Records that `tp` splits dim `dim` of weight `w`; false (and the weight left whole) when
/// another use already split another dim of it.
fn claim(plan: &mut Plan, w: NodeId, dim: usize) -> bool {
    match plan.weights.get(&w) {
        Some(&d) if d != dim => false,
        _ => {
            plan.weights.insert(w, dim);
            true
        }
    }
}

/// Sets the plan's shardings: weights split as claimed, a constraint splitting each
/// column-parallel result and one making each row-parallel result whole.
fn apply(graph: &mut Graph, plan: &Plan) {
    for (&w, &dim) in &plan.weights {
        let rank = graph.node(w).outputs[0].rank();
        graph.node_mut(w).sharding = Some(Sharding::split(rank, dim, TENSOR));
    }
    // The constraints fix the features (split, or whole after the all-reduce) and leave the
    // other dims open, so that a batch split along `dp` stays split.
    for &c in plan.column.iter().chain(&plan.head_tables) {
        let rank = graph.node(c).outputs[0].rank();
        graph.node_mut(c).sharding = Some(Sharding::split(rank, rank - 1, TENSOR).open_but(&[]));
    }
    for &r in &plan.row {
        let rank = graph.node(r).outputs[0].rank();
        graph.node_mut(r).sharding = Some(Sharding::replicated(rank).open_but(&[rank - 1]));
    }
}
