//! Axis `fsdp` (fully sharded data parallelism's parameter split): every weight is stored split
//! along `fsdp` as well, so each device holds 1/`fsdp` of it, and is gathered whole along
//! `fsdp` where it is used. The gather is a constraint on a copy of the weight: the
//! partitioner all-gathers the pieces there. The batch is split along `dp` only, as the `auto`
//! plan does without `fsdp`.
//!
//! When the gather happens decides the peak: XLA may start every gather at the program's
//! start, holding all weights whole at once (a 70B-shaped model on 16 chips needed more
//! temporaries than its share of the weights). So a use that reaches a contraction or a gather
//! with an activation operand gets its own copy, gathered [`After`] that activation exists:
//! each weight is whole only from its layer's input to its use.

use crate::ir::ops::{After, Identity};
use std::cmp::Reverse;
use std::collections::HashSet;

use crate::ir::{Graph, InputKind, Mesh, Node, NodeId, Op, OutputKind, Sharding, ValueRef};

/// How many single-operand ops (layout changes, conversions) a walk from a weight to the op
/// that uses it goes through at most.
const MAX_WALK: usize = 8;

/// What [`split_weights`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct FsdpCounts {
    /// Weights stored split along `fsdp`.
    pub split: usize,
    /// Weights left whole: no dim divides.
    pub whole: usize,
    /// Uses of split weights gathered once their activation is ready.
    pub timed: usize,
    /// Buffers or parameters the program updates (KV caches), left as they are: state the
    /// program reads and writes at every call, which a split would gather at every call and
    /// which the runtime would have to split again from a whole result.
    pub state: usize,
}

/// The axis's name.
pub(super) const FSDP: &str = "fsdp";

/// Splits every used weight along `fsdp` where a dim divides, gathering it where used.
pub(super) fn split_weights(graph: &mut Graph, mesh: &Mesh) -> FsdpCounts {
    let mut counts = FsdpCounts::default();
    if mesh.size(FSDP) == 1 {
        return counts;
    }
    let live = live_nodes(graph);
    let mutated = mutated_state(graph);
    let weights: Vec<NodeId> = graph
        .graph_inputs()
        .iter()
        .copied()
        .filter(|&id| matches!(&graph.node(id).op, Op::Input(k) if k.is_weight()) && !graph.users(id).is_empty())
        .collect();
    for w in weights {
        let state_name = match &graph.node(w).op {
            Op::Input(InputKind::Buffer { fqn, .. } | InputKind::Parameter { fqn }) => Some(fqn.as_str()),
            _ => None,
        };
        if state_name.is_some_and(|f| mutated.contains(f)) {
            counts.state += 1;
            continue;
        }
        let node = graph.node(w);
        let dims = node.outputs[0].static_dims().unwrap_or_default();
        let before = node.sharding.clone().unwrap_or_else(|| Sharding::replicated(dims.len()));
        match with_fsdp(&before, &dims, mesh) {
            Some(after) => {
                graph.node_mut(w).sharding = Some(after);
                counts.timed += gather_where_used(graph, w, &before, &live);
                counts.split += 1;
            }
            None => counts.whole += 1,
        }
    }
    counts
}

/// `s` with `fsdp` added: on the largest dim that no other axis splits and that divides (the
/// first of equal ones), else under the axes of a split dim whose pieces divide further.
fn with_fsdp(s: &Sharding, dims: &[i64], mesh: &Mesh) -> Option<Sharding> {
    let n = mesh.size(FSDP);
    let free = (0..dims.len()).filter(|&d| s.dims[d].is_empty() && dims[d] % n == 0);
    let dim = free
        .max_by_key(|&d| (dims[d], Reverse(d)))
        .or_else(|| (0..dims.len()).find(|&d| !s.dims[d].is_empty() && dims[d] % (s.pieces(d, mesh) * n) == 0))?;
    let mut out = s.clone();
    out.dims[dim].push(FSDP.to_string());
    Some(out)
}

/// Makes every use of weight `w` read a copy of it constrained to `whole` (its sharding
/// without `fsdp`): a copy per use that has an activation to wait for, one shared by the
/// others (and the graph outputs); the number of the first.
fn gather_where_used(graph: &mut Graph, w: NodeId, whole: &Sharding, live: &HashSet<NodeId>) -> usize {
    let from = ValueRef { node: w, slot: 0 };
    let uses: Vec<(NodeId, u16)> = graph.users(w).into_iter().map(|(user, slot, _)| (user, slot)).collect();
    let numbered = |suffix: &str, i: usize| if uses.len() == 1 { suffix.to_string() } else { format!("{suffix}.{i}") };
    let mut shared = vec![];
    let mut timed = 0;
    for (i, &(user, slot)) in uses.iter().enumerate() {
        let Some(activation) = activation_of_use(graph, user, live) else {
            shared.push((user, slot));
            continue;
        };
        let node = graph.node(w);
        let ready = Node::derived(node, numbered("ready", i), Op::After(After), [node.outputs[0].clone()]);
        let ready = graph.add_op(ready, &[from, activation]);
        let copy = gathered_copy(graph, w, ValueRef { node: ready, slot: 0 }, numbered("gathered", i), whole);
        graph.set_input(user, slot, copy);
        timed += 1;
    }
    if !shared.is_empty() || graph.outputs().iter().any(|o| o.value == from) {
        let copy = gathered_copy(graph, w, from, "gathered".to_string(), whole);
        for (user, slot) in shared {
            graph.set_input(user, slot, copy);
        }
        graph.redirect_outputs(from, copy);
    }
    timed
}

/// A copy of `value` (weight `w` or what stands for it), constrained to `whole`.
fn gathered_copy(graph: &mut Graph, w: NodeId, value: ValueRef, suffix: String, whole: &Sharding) -> ValueRef {
    let node = graph.node(w);
    let mut copy = Node::derived(node, suffix, Op::Identity(Identity), [node.outputs[0].clone()]);
    copy.sharding = Some(whole.clone());
    ValueRef { node: graph.add_op(copy, &[value]), slot: 0 }
}

/// The activation a use of a weight waits for: walking from `user` through ops of one operand
/// and one user, the operand computed from the caller's inputs of the first contraction or
/// gather reached; `None` when the walk stops elsewhere.
fn activation_of_use(graph: &Graph, mut node: NodeId, live: &HashSet<NodeId>) -> Option<ValueRef> {
    for _ in 0..MAX_WALK {
        let inputs = graph.inputs(node);
        if waits_for_an_activation(&graph.node(node).op) {
            return inputs.into_iter().find(|v| live.contains(&v.node));
        }
        if inputs.len() != 1 || graph.is_output(node) {
            return None;
        }
        let [(next, _, _)] = graph.users(node)[..] else { return None };
        node = next;
    }
    None
}

/// Contractions and gathers: the ops a weight is used by in a layer, with an activation.
fn waits_for_an_activation(op: &Op) -> bool {
    matches!(
        op,
        Op::Mm(_)
            | Op::Bmm(_)
            | Op::Addmm(_)
            | Op::GroupedMm(_)
            | Op::Convolution(_)
            | Op::Embedding(_)
            | Op::EmbeddingBag(_)
            | Op::Index(_)
            | Op::IndexSelect(_)
            | Op::Gather(_)
    )
}

/// The names of the buffers and parameters the program updates.
pub(super) fn mutated_state(graph: &Graph) -> HashSet<String> {
    graph
        .outputs()
        .iter()
        .filter_map(|o| match &o.kind {
            OutputKind::BufferMutation { fqn } | OutputKind::ParameterMutation { fqn } => Some(fqn.clone()),
            _ => None,
        })
        .collect()
}

/// The nodes computed from the caller's inputs (not from weights alone).
fn live_nodes(graph: &Graph) -> HashSet<NodeId> {
    let mut live = HashSet::new();
    for id in graph.topo_order().unwrap_or_default() {
        let from_caller = matches!(&graph.node(id).op, Op::Input(k) if !k.is_weight());
        if from_caller || graph.inputs(id).iter().any(|v| live.contains(&v.node)) {
            live.insert(id);
        }
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsdp_takes_the_largest_free_dim_else_goes_under_tp() {
        let mesh = Mesh::parse("tp=2,fsdp=2").expect("a mesh");
        let whole = Sharding::replicated(2);
        assert_eq!(with_fsdp(&whole, &[64, 256], &mesh).expect("split").to_string(), r#"[{}, {"fsdp"}]"#);
        let column = Sharding::split(2, 0, "tp");
        assert_eq!(with_fsdp(&column, &[256, 64], &mesh).expect("split").to_string(), r#"[{"tp"}, {"fsdp"}]"#);
        assert_eq!(with_fsdp(&column, &[256, 3], &mesh).expect("split").to_string(), r#"[{"tp", "fsdp"}, {}]"#);
        assert_eq!(with_fsdp(&Sharding::split(1, 0, "tp"), &[2], &mesh), None, "2 rows: one per tp device");
        assert_eq!(with_fsdp(&Sharding::replicated(1), &[5], &mesh), None);
    }
}
