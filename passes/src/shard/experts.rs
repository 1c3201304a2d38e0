//! Axis `ep` (expert parallelism): the experts of a mixture-of-experts layer are stored split
//! along `ep`, `E / ep` whole experts per device.
//!
//! An expert weight is a weight `[E, …]` whose first dim indexes the experts, found from the
//! two forms transformers writes MoE layers in:
//!
//! - `grouped_mm`: the weight (through transposes that keep the experts first, conversions
//!   and copies) is `_grouped_mm`'s grouped operand;
//! - `batched_mm`: a rank-3 weight indexed along its first dim only (`W[expert_ids]`, one
//!   weight per routed token).
//!
//! Only the storage is stated; the XLA partitioner derives the computation from it. A grouped
//! matmul's dense form multiplies every token by every expert (`[S, E, N]`) and keeps each
//! token's own: split along `E`, each device multiplies all tokens by its experts, and the
//! sum over `E` becomes an all-reduce, so each device computes its experts' contribution and
//! the collectives combine them. The result is constrained whole. An indexed weight is gathered
//! per device where the index falls in its experts and summed across devices the same way.
//! Either way exact: every token's row is its one expert's product plus zeros.
//!
//! Refused, by name: a mesh with `ep` on a program that has no expert weights, and experts that
//! do not divide along `ep`.

use crate::ir::ops::{GroupedMm, Index};
use std::collections::BTreeSet;

use crate::ir::{Graph, NodeId, Op, Sharding, ValueRef};

/// The axis's name.
pub(super) const EXPERTS: &str = "ep";

/// The expert weights of `graph` (see the module docs), in id order.
pub fn expert_weights(graph: &Graph) -> Vec<NodeId> {
    let mut found = BTreeSet::new();
    for id in graph.node_ids() {
        let ins = graph.inputs(id);
        let weight = match &graph.node(id).op {
            Op::GroupedMm(GroupedMm) => source_weight(graph, ins[1]),
            Op::Index(Index { present }) if present.first() == Some(&true) && present[1..].iter().all(|p| !p) => {
                Some(ins[0].node).filter(|&w| is_weight(graph, w) && graph.value_type(ins[0]).rank() == 3)
            }
            _ => None,
        };
        found.extend(weight);
    }
    found.into_iter().collect()
}

/// The weight input `v` is read from, its first dim being `v`'s first (through layout
/// transposes, conversions and copies: see [`super::follow::weight_dim`]).
fn source_weight(graph: &Graph, v: ValueRef) -> Option<NodeId> {
    super::follow::weight_dim(graph, v, 0).filter(|&(_, dim)| dim == 0).map(|(w, _)| w)
}

fn is_weight(graph: &Graph, id: NodeId) -> bool {
    matches!(&graph.node(id).op, Op::Input(k) if k.is_weight())
}

/// Splits every expert weight along `ep` (dim 0) and constrains each grouped matmul's result
/// whole; the numbers of weights and grouped matmuls. Refused when `ep` splits nothing or the
/// experts do not divide.
pub(super) fn split_experts(graph: &mut Graph, ep: i64) -> Result<(usize, usize), String> {
    let weights = expert_weights(graph);
    if weights.is_empty() {
        return Err(format!(
            "mesh axis `ep` ({ep} devices) splits the experts of mixture-of-experts layers, and this program has \
             none: no `_grouped_mm`, and no `[experts, …]` weight indexed per token"
        ));
    }
    for &w in &weights {
        let node = graph.node(w);
        let rank = node.outputs[0].rank();
        let experts = node.outputs[0].static_dims().and_then(|d| d.first().copied()).unwrap_or(0);
        if experts % ep != 0 {
            return Err(format!(
                "expert weight `{}`: its {experts} experts (dim 0) do not divide along mesh axis `ep` ({ep} devices); \
                 use an `ep` that divides {experts}",
                node.name
            ));
        }
        let mut sharding = node.sharding.clone().unwrap_or_else(|| Sharding::replicated(rank));
        sharding.dims[0].insert(0, EXPERTS.to_string());
        graph.node_mut(w).sharding = Some(sharding);
    }
    let grouped: Vec<NodeId> = graph.node_ids().filter(|&id| graph.node(id).op == Op::GroupedMm(GroupedMm)).collect();
    for &g in &grouped {
        let rank = graph.node(g).outputs[0].rank();
        graph.node_mut(g).sharding = Some(Sharding::replicated(rank).open_but(&[rank - 1]));
    }
    Ok((weights.len(), grouped.len()))
}
