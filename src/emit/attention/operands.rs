//! The loop's operands: the group's, with each mask made element-wise from smaller values
//! replaced by those values, and each operand laid out from another (`Kᵀ` from a KV cache, a
//! causal mask gathered from a model's `[max_seq, max_seq]` buffer by positions) replaced by
//! it, the ops between rebuilt on each block.

use std::collections::{BTreeMap, BTreeSet};

use torchtpu_passes::ir::ops::Binary;
use torchtpu_passes::ir::{Dim, Graph, Op, Operand, TensorType, ValueRef};

use super::numel;

/// The loop's operands and their cuts, and the values it rebuilds on each block: each
/// operand cut along its last dim (a mask) that is made element-wise from smaller values —
/// `where(k_pos <= q_pos, 0, -inf)` of positions `[1, keys]` and `[queries, 1]` — is replaced by
/// those values, so that the mask never exists whole (it would take `queries × keys`).
pub(super) fn masks_in_the_loop(graph: &Graph, group: &[ValueRef], cuts: &[Option<usize>], keys: i64) -> Option<Cut> {
    let (mut operands, mut op_cuts, mut expanded) = (Vec::new(), Vec::new(), BTreeSet::new());
    let mut add = |v: ValueRef, cut: Option<usize>| match operands.iter().position(|o| *o == v) {
        Some(i) => (op_cuts[i] == cut).then_some(()),
        None => {
            operands.push(v);
            op_cuts.push(cut);
            Some(())
        }
    };
    let mut key_dims = BTreeMap::new();
    for (&v, &cut) in group.iter().zip(cuts) {
        let rank = graph.value_type(v).rank();
        let mut made = Made::default();
        let made_from_smaller = cut == Some(rank.wrapping_sub(1)) && made.grow_from_smaller(graph, v, keys);
        let leaves = made_from_smaller.then(|| made.leaf_cuts(graph, keys)).flatten();
        if let Some(leaves) = leaves {
            for (leaf, cut) in leaves {
                add(leaf, cut)?;
            }
            expanded.extend(made.grown);
            key_dims.extend(made.key_dims);
        } else if let Some(layout) = cut.and_then(|d| layout_chain(graph, v, d, keys)) {
            for (leaf, cut) in layout.leaves() {
                add(leaf, cut)?;
            }
            for (value, d) in layout.chain {
                expanded.insert(value);
                key_dims.insert(value, d);
            }
        } else {
            add(v, cut)?;
        }
    }
    Some(Cut { operands, cuts: op_cuts, expanded, key_dims })
}

/// The loop's operands and how it cuts them (see [`masks_in_the_loop`]).
pub(super) struct Cut {
    pub(super) operands: Vec<ValueRef>,
    pub(super) cuts: Vec<Option<usize>>,
    /// Values rebuilt on each block from the operands.
    pub(super) expanded: BTreeSet<ValueRef>,
    /// The dim of the keys in each rebuilt value whose keys are not its last dim.
    pub(super) key_dims: BTreeMap<ValueRef, usize>,
}

/// How a value (keys at a dim of its own) is laid out from another.
struct Layout {
    /// The value it is laid out from, with its keys dim.
    source: (ValueRef, usize),
    /// Each value on the way, with its keys dim.
    chain: Vec<(ValueRef, usize)>,
    /// What the ops on the way read whole: the indices of a gather of rows.
    whole: Vec<ValueRef>,
}

impl Layout {
    /// The loop's operands it reads, with their cuts.
    fn leaves(&self) -> impl Iterator<Item = (ValueRef, Option<usize>)> + '_ {
        std::iter::once((self.source.0, Some(self.source.1))).chain(self.whole.iter().map(|&w| (w, None)))
    }
}

/// The value that `v` (keys at dim `d`) is a layout of — through transposes, views that keep
/// the keys a dim of their own, conversions, products with a number, pads of other dims and
/// gathers of other dims, as `Kᵀ = view(permute(K_cache) · scale)` is made from a KV cache and
/// a causal mask `causal[positions]` from a `[max_seq, max_seq]` buffer —, with each value on
/// the way. Sliced per block instead of `v`, it is never copied whole into its new layout (a
/// decode step's cache would be copied at every step, a prompt's mask gathered whole). `None`
/// when `v` is made otherwise.
fn layout_chain(graph: &Graph, v: ValueRef, d: usize, keys: i64) -> Option<Layout> {
    let (mut at, mut dim, mut chain, mut whole) = (v, d, Vec::new(), Vec::new());
    while chain.len() < Made::MAX_OPS {
        let node = graph.node(at.node);
        let inputs = graph.inputs(at.node);
        let Some((&input, rest)) = inputs.split_first() else { break };
        let in_ty = graph.value_type(input);
        let in_dim = match &node.op {
            Op::Index(_) | Op::IndexSelect(_) => match gathered_dim(graph, at, dim) {
                Some(e) => e,
                None => break,
            },
            _ if !rest.is_empty() => break,
            Op::Permute(p) => usize::try_from(*p.dims.get(dim)?).ok()?,
            Op::View(_) => dim_of_view(in_ty, graph.value_type(at), dim)?,
            Op::Convert(_) | Op::Identity(_) => dim,
            Op::Binary(Binary { lhs, rhs, .. })
                if matches!((lhs, rhs), (Operand::Scalar(_), _) | (_, Operand::Scalar(_))) =>
            {
                dim
            }
            Op::Pad(p) if pad_of(&p.pad, in_ty.rank(), dim) == (0, 0) => dim,
            _ => break,
        };
        if in_ty.dims.get(in_dim) != Some(&Dim::Static(keys)) {
            break;
        }
        chain.push((at, dim));
        whole.extend_from_slice(rest);
        (at, dim) = (input, in_dim);
    }
    (!chain.is_empty()).then_some(Layout { source: (at, dim), chain, whole })
}

/// The dim of a gather's source that its result's dim `d` is, when the gather takes that dim
/// whole (it indexes others) and makes at least `1 / GATHER_SHARE` as many elements as its source
/// holds: a block sliced from the source then reads at most `GATHER_SHARE` times what gathering
/// it whole would write, and a gather kept whole (before the loop) takes at most that share of
/// its source. A decode step's one row of a causal mask is thus gathered whole (slicing the
/// whole buffer per block would read all of it at every step), a prompt's rows per block.
fn gathered_dim(graph: &Graph, at: ValueRef, d: usize) -> Option<usize> {
    const GATHER_SHARE: i64 = 8;
    let node = graph.node(at.node);
    let inputs = graph.inputs(at.node);
    let types: Vec<&TensorType> = inputs.iter().map(|&u| graph.value_type(u)).collect();
    let made = numel(&node.outputs[0]);
    if made == i64::MAX || made.saturating_mul(GATHER_SHARE) < numel(types[0]) {
        return None;
    }
    let links = node.op.def().position_wise(&types, &node.outputs);
    links.iter().find(|a| a.slot == 0 && a.out == usize::from(at.slot) && a.out_dim == d).map(|a| a.dim)
}

/// The dim of `from` that dim `d` of a view `to` of it is, when the view keeps it a dim of its
/// own: the dims before it hold as many elements on both sides.
fn dim_of_view(from: &TensorType, to: &TensorType, d: usize) -> Option<usize> {
    let before = |ty: &TensorType, n: usize| numel(&TensorType { dims: ty.dims[..n].to_vec(), ..ty.clone() });
    let wanted = before(to, d);
    (0..from.rank()).find(|&e| from.dims[e] == to.dims[d] && before(from, e) == wanted && wanted != i64::MAX)
}

/// The amounts a `pad` (torch's order: the last dim's pair first) adds before and after `dim`.
fn pad_of(pad: &[i64], rank: usize, dim: usize) -> (i64, i64) {
    let j = 2 * (rank - 1 - dim);
    (pad.get(j).copied().unwrap_or(0), pad.get(j + 1).copied().unwrap_or(0))
}

/// How a value that broadcasts against the scores is cut: along its last dim when that is the
/// keys, whole when it is 1 (or 0-d); `None` (not a leaf of a mask) otherwise.
fn leaf_cut(ty: &TensorType, keys: i64) -> Option<Option<usize>> {
    match ty.dims.last() {
        None | Some(Dim::Static(1)) => Some(None),
        Some(Dim::Static(n)) if *n == keys => Some(Some(ty.rank() - 1)),
        _ => None,
    }
}

/// A mask's element-wise ops and the smaller values they start from (or the values they are
/// laid out from: see [`layout_chain`]).
#[derive(Default)]
struct Made {
    grown: BTreeSet<ValueRef>,
    leaves: Vec<ValueRef>,
    /// Leaves that a layout cuts along a dim of its own, or reads whole.
    cut_leaves: Vec<(ValueRef, Option<usize>)>,
    key_dims: BTreeMap<ValueRef, usize>,
    visited: usize,
}

impl Made {
    /// The most ops rebuilt in the loop for one mask.
    const MAX_OPS: usize = 32;

    /// Each leaf with its cut; `None` if one does not broadcast against the keys.
    fn leaf_cuts(&self, graph: &Graph, keys: i64) -> Option<Vec<(ValueRef, Option<usize>)>> {
        let by_type = self.leaves.iter().map(|&l| Some((l, leaf_cut(graph.value_type(l), keys)?)));
        by_type.chain(self.cut_leaves.iter().map(|&l| Some(l))).collect()
    }

    /// True when `v` (keys last) is made by element-wise ops from values each smaller than the
    /// result it feeds (broadcast up), which are recorded as leaves, or from values laid out
    /// from others ([`layout_chain`]: a mask gathered from a buffer).
    fn grow_from_smaller(&mut self, graph: &Graph, v: ValueRef, keys: i64) -> bool {
        let node = graph.node(v.node);
        let ty = graph.value_type(v);
        let elementwise = node.op.is_elementwise() && !node.op.is_random() && node.outputs.len() == 1;
        // The ops visited bound the recursion too: a value joins `grown` only after its inputs.
        self.visited += 1;
        if ty.dims.last() != Some(&Dim::Static(keys)) || self.visited > Self::MAX_OPS {
            return false;
        }
        if !elementwise {
            return self.laid_out(graph, v, keys);
        }
        let size = numel(ty);
        for u in graph.inputs(v.node) {
            if numel(graph.value_type(u)) < size {
                if !self.leaves.contains(&u) {
                    self.leaves.push(u);
                }
            } else if !self.grown.contains(&u) && !self.grow_from_smaller(graph, u, keys) {
                return false;
            }
        }
        self.grown.insert(v);
        true
    }

    /// True when `v` (keys last) is laid out from another value, which is recorded as a leaf
    /// with the values its layout reads whole.
    fn laid_out(&mut self, graph: &Graph, v: ValueRef, keys: i64) -> bool {
        let Some(layout) = layout_chain(graph, v, graph.value_type(v).rank() - 1, keys) else { return false };
        self.cut_leaves.extend(layout.leaves());
        for (value, d) in layout.chain {
            self.grown.insert(value);
            self.key_dims.insert(value, d);
        }
        true
    }
}
