//! Axis `fsdp` (fully sharded data parallelism's parameter split): every weight is stored split
//! along `fsdp` as well, so each device holds 1/`fsdp` of it, and is gathered whole along
//! `fsdp` where it is used. The gather is a constraint on a copy of the weight that all its
//! users read: the partitioner all-gathers the pieces there. The batch is split along `dp`
//! only, as the `auto` plan does without `fsdp`.

use crate::ir::ops::Identity;
use std::cmp::Reverse;

use crate::ir::{Graph, Mesh, Node, NodeId, Op, Sharding, ValueRef};

/// The axis's name.
pub(super) const FSDP: &str = "fsdp";

/// Splits every used weight along `fsdp` where a dim divides, gathering it where used; the
/// numbers of weights split and left whole.
pub(super) fn split_weights(graph: &mut Graph, mesh: &Mesh) -> (usize, usize) {
    if mesh.size(FSDP) == 1 {
        return (0, 0);
    }
    let weights: Vec<NodeId> = graph
        .graph_inputs()
        .iter()
        .copied()
        .filter(|&id| matches!(&graph.node(id).op, Op::Input(k) if k.is_weight()) && !graph.users(id).is_empty())
        .collect();
    let (mut split, mut whole) = (0, 0);
    for w in weights {
        let node = graph.node(w);
        let dims = node.outputs[0].static_dims().unwrap_or_default();
        let before = node.sharding.clone().unwrap_or_else(|| Sharding::replicated(dims.len()));
        match with_fsdp(&before, &dims, mesh) {
            Some(after) => {
                graph.node_mut(w).sharding = Some(after);
                gather_where_used(graph, w, before);
                split += 1;
            }
            None => whole += 1,
        }
    }
    (split, whole)
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

/// Makes every user of weight `w` read a copy of it constrained to `whole` (its sharding
/// without `fsdp`).
fn gather_where_used(graph: &mut Graph, w: NodeId, whole: Sharding) {
    let node = graph.node(w);
    let mut copy = Node::derived(node, "gathered", Op::Identity(Identity), [node.outputs[0].clone()]);
    copy.sharding = Some(whole);
    let copy = graph.add_op(copy, &[]);
    let (from, to) = (ValueRef { node: w, slot: 0 }, ValueRef { node: copy, slot: 0 });
    graph.replace_uses(from, to);
    graph.set_input(copy, 0, from);
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
