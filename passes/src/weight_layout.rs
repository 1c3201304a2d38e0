//! `weight_layout`: convolution kernels are stored in the layout XLA's convolution kernels read,
//! spatial dims first (`[kH, kW, C_in/groups, C_out]`, XLA's `HWIO`, for PyTorch's
//! `[C_out, C_in/groups, kH, kW]`), and the program reads them through a `permute` back to
//! PyTorch's order, which XLA folds into the convolution's dimension numbers.
//!
//! Why: weights are arguments of the program, laid out row-major as the artifact stores them. A
//! kernel in PyTorch's order makes XLA:CPU transpose every convolution's weights on every call
//! (resnet18: 11 M values, 44 MB read and written per image); a program whose weights are
//! constants gets that transpose folded at compile time. Storing the kernels transposed (a
//! derived weight, computed once by the compiler) gives arguments the same advantage. A TPU
//! compiler picks its parameters' device layouts itself, so the order there is only what the
//! host sends.
//!
//! Preconditions for a kernel: every reader is a convolution (not transposed) that reads it as
//! its weight, it is not a graph output, it is a weight (stored or derived) of static shape with
//! at least one spatial dim, in f32, bf16 or f16. Otherwise it is left alone.
//!
//! A filetest (the input graph, then the graph the pass leaves after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/weight_layout/conv_kernel_stored_spatial_first.ir")]
//! ```

use crate::ir::ops::{Convolution, Permute};
use crate::ir::{Graph, InputKind, Node, NodeId, Op, TensorType, ValueRef, WeightRecipe};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct WeightLayout;

/// The recipe of weight input `node` as it is (a stored weight is a `Cast` to its own dtype).
fn recipe_of(node: &Node) -> Option<(String, WeightRecipe)> {
    match &node.op {
        Op::Input(k) => k.as_recipe(),
        _ => None,
    }
}

/// True when `id` is a kernel only forward convolutions read, as their weight.
fn only_convolutions_read(graph: &Graph, id: NodeId) -> bool {
    let users = graph.users(id);
    !users.is_empty()
        && !graph.is_output(id)
        && users.iter().all(|&(u, slot, _)| {
            slot == 1 && matches!(graph.node(u).op, Op::Convolution(Convolution { transposed: false, .. }))
        })
}

/// `[O, I, S...]` → `[S..., I, O]`: result dim `i` is source dim `perm[i]`.
fn spatial_first(rank: usize) -> Vec<i64> {
    (2..rank as i64).chain([1, 0]).collect()
}

/// The inverse: `[S..., I, O]` → `[O, I, S...]`.
fn pytorch_order(rank: usize) -> Vec<i64> {
    let r = rank as i64;
    [r - 1, r - 2].into_iter().chain(0..r - 2).collect()
}

/// Stores kernel `id` spatial dims first and makes its readers read it through a permute.
fn relayout(graph: &mut Graph, id: NodeId) -> Option<()> {
    let node = graph.node(id).clone();
    let ty = node.outputs.first()?.clone();
    let dims = ty.static_dims()?;
    if dims.len() < 3 || !WeightRecipe::handles(ty.dtype) {
        return None;
    }
    let (fqn, source) = recipe_of(&node)?;
    let perm = spatial_first(dims.len());
    let stored = TensorType::new(ty.dtype, &perm.iter().map(|&p| dims[p as usize]).collect::<Vec<_>>());
    let name = format!("{fqn}@hwio");
    let recipe = WeightRecipe::Permute { source: Box::new(source), dims, perm };
    let kernel =
        graph.add_weight_input(Node::new(name.clone(), Op::Input(InputKind::Derived { fqn: name, recipe }), [stored]));
    let back = Node::derived(&node, "weight_layout", Op::Permute(Permute { dims: pytorch_order(ty.rank()) }), [ty]);
    let read = graph.add_op(back, &[ValueRef { node: kernel, slot: 0 }]);
    graph.replace_uses(ValueRef { node: id, slot: 0 }, ValueRef { node: read, slot: 0 });
    graph.remove_node(id);
    Some(())
}

impl Pass for WeightLayout {
    fn name(&self) -> &'static str {
        "weight_layout"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let kernels: Vec<NodeId> = graph
            .graph_inputs()
            .iter()
            .copied()
            .filter(|&id| recipe_of(graph.node(id)).is_some() && only_convolutions_read(graph, id))
            .collect();
        let n = kernels.into_iter().filter_map(|id| relayout(graph, id)).count();
        cx.note(n, "convolution kernels stored spatial dims first (HWIO)");
        Ok(if n > 0 { Changed::Yes } else { Changed::No })
    }
}

#[cfg(test)]
mod tests {
    use super::{pytorch_order, spatial_first};

    #[test]
    fn the_two_orders_are_inverse() {
        for rank in 3..=5 {
            let (there, back) = (spatial_first(rank), pytorch_order(rank));
            let round: Vec<i64> = back.iter().map(|&b| there[b as usize]).collect();
            assert_eq!(round, (0..rank as i64).collect::<Vec<_>>(), "rank {rank}");
        }
        assert_eq!(spatial_first(4), [2, 3, 1, 0]);
        assert_eq!(pytorch_order(4), [3, 2, 0, 1]);
    }
}
