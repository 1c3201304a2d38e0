//! Fused projections (one weight for Q, K and V whose features a split cuts apart, GPT-2's
//! `c_attn`) made one matmul per part on narrowed copies of the weight and bias, so that under
//! `tp` each part splits as separate projections do.

use crate::ir::ops::{SplitWithSizes, View};
use crate::ir::{Dim, Graph, InputKind, Node, NodeId, Op, TensorType, ValueRef, WeightRecipe};

use super::{linear, Linear};

/// A matmul on a weight whose output features a `split_with_sizes` cuts into equal parts,
/// through views that keep them the last dim and transposes that move them (GPT-2's `c_attn`:
/// Q, K and V in one `Conv1D`; Mamba's `in_proj`: the SSM's input and its gate, split after a
/// transpose to channels first).
struct Fused {
    linear: Linear,
    /// The views and transposes between the matmul and the split, in order, each with where
    /// the features are in its result.
    steps: Vec<(NodeId, usize)>,
    split: NodeId,
    /// How many parts, and the features of each.
    parts: usize,
    part: i64,
}

/// `id` as a fused projection, if it is one.
fn fused(graph: &Graph, id: NodeId) -> Option<Fused> {
    let linear = linear(graph, id)?;
    let out = graph.node(id).outputs[0].static_dims()?;
    let features = *out.last()?;
    let mut steps = Vec::new();
    let mut at = id;
    let mut feature_dim = out.len() - 1;
    loop {
        let users = graph.users(at);
        let [(next, _, 0)] = users[..] else { return None };
        if graph.is_output(at) {
            return None;
        }
        let node = graph.node(next);
        let rank = node.outputs[0].rank();
        match &node.op {
            Op::View(_)
                if feature_dim + 1 == graph.node(at).outputs[0].rank()
                    && node.outputs[0].static_dims()?.last() == Some(&features) =>
            {
                feature_dim = rank - 1;
                steps.push((next, feature_dim));
            }
            // A transpose that moves the features (channels first). One that keeps them in
            // place is a head's layout, and a split after it cuts within heads (RoPE's halves).
            Op::Permute(p) => {
                let norm = |d: i64| if d < 0 { d + rank as i64 } else { d };
                let moved = p.dims.iter().position(|&d| norm(d) == feature_dim as i64)?;
                if moved == feature_dim {
                    return None;
                }
                feature_dim = moved;
                steps.push((next, feature_dim));
            }
            Op::SplitWithSizes(SplitWithSizes { sizes, dim }) => {
                let sizes: Vec<i64> = sizes.iter().map(|d| d.as_static()).collect::<Option<_>>()?;
                let equal =
                    sizes.len() >= 2 && sizes.iter().all(|&s| s == sizes[0]) && sizes.iter().sum::<i64>() == features;
                let at_features = *dim == feature_dim as i64 || *dim + rank as i64 == feature_dim as i64;
                return (equal && at_features).then(|| Fused {
                    linear,
                    steps,
                    split: next,
                    parts: sizes.len(),
                    part: sizes[0],
                });
            }
            _ => return None,
        }
        at = next;
    }
}

/// Makes each fused projection one matmul per part, on a narrowed copy of the weight (and
/// bias), so that under `tp` each part's features split as separate projections' do (a split
/// of the fused features would give a device Q but not its K and V); the number rewritten.
pub(super) fn unfuse(graph: &mut Graph) -> usize {
    let order = graph.topo_order().unwrap_or_default();
    let found: Vec<Fused> = order.iter().filter_map(|&id| fused(graph, id)).collect();
    let n = found.len();
    for f in found {
        unfuse_one(graph, &f);
    }
    n
}

/// A weight input narrowed to `len` indices of dim `dim` from `start`.
fn narrowed(graph: &mut Graph, w: NodeId, dim: usize, start: i64, len: i64) -> Option<ValueRef> {
    let node = graph.node(w).clone();
    let Op::Input(kind) = &node.op else { return None };
    let (fqn, source) = kind.as_recipe()?;
    let mut ty = node.outputs[0].clone();
    let dims = ty.static_dims()?;
    ty.dims[dim] = Dim::Static(len);
    let name = format!("{fqn}@narrow{dim}:{start}+{len}");
    let recipe = WeightRecipe::Narrow { source: Box::new(source), dims, dim: dim as i64, start, len };
    let id = graph.add_weight_input(Node::new(name.clone(), Op::Input(InputKind::Derived { fqn: name, recipe }), [ty]));
    Some(ValueRef { node: id, slot: 0 })
}

fn unfuse_one(graph: &mut Graph, f: &Fused) -> Option<()> {
    let l = &f.linear;
    let mm = graph.node(l.node).clone();
    let ins = graph.inputs(l.node);
    // The weight operand: `W` itself, or its transpose.
    let w_operand = if matches!(mm.op, Op::Addmm(_)) { ins[2] } else { ins[1] };
    let transposed = graph.node(w_operand.node).clone();
    let through_permute = matches!(transposed.op, Op::Permute(_));
    let with = |ty: &TensorType, dim: usize, n: i64| {
        let mut t = ty.clone();
        if let Some(d) = t.dims.get_mut(dim) {
            *d = Dim::Static(n);
        }
        t
    };
    let last = |ty: &TensorType, n: i64| with(ty, ty.rank().saturating_sub(1), n);
    for i in 0..f.parts {
        let start = i as i64 * f.part;
        let w = narrowed(graph, l.weight, l.out_dim, start, f.part)?;
        let w = if through_permute {
            let node = Node::derived(
                &transposed,
                format_args!("unfuse{i}"),
                transposed.op.clone(),
                [last(&transposed.outputs[0], f.part)],
            );
            ValueRef { node: graph.add_op(node, &[w]), slot: 0 }
        } else {
            w
        };
        let operands = match (&mm.op, l.bias) {
            (Op::Addmm(_), Some(b)) => vec![narrowed(graph, b, 0, start, f.part)?, l.input, w],
            (Op::Addmm(_), None) => vec![ins[0], l.input, w],
            _ => vec![l.input, w],
        };
        let node = Node::derived(&mm, format_args!("unfuse{i}"), mm.op.clone(), [last(&mm.outputs[0], f.part)]);
        let mut v = ValueRef { node: graph.add_op(node, &operands), slot: 0 };
        for &(step, at) in &f.steps {
            let old = graph.node(step).clone();
            let ty = with(&old.outputs[0], at, f.part);
            let op = match &old.op {
                Op::View(_) => Op::View(View { size: ty.dims.clone() }),
                other => other.clone(),
            };
            let node = Node::derived(&old, format_args!("unfuse{i}"), op, [ty]);
            v = ValueRef { node: graph.add_op(node, &[v]), slot: 0 };
        }
        graph.replace_uses(ValueRef { node: f.split, slot: i as u16 }, v);
    }
    for id in std::iter::once(f.split).chain(f.steps.iter().rev().map(|&(id, _)| id)).chain([l.node]) {
        graph.remove_node(id);
    }
    Some(())
}
