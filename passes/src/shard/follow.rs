//! Where a `tp` split goes through each op (see the module docs of [`super`]): the op keeps it
//! local, moving it to a dim of its result (and splitting the weights that go with it: a bias,
//! a depthwise filter, a KV cache written along its heads), or it does not, and why.

use std::collections::{BTreeMap, BTreeSet};

use super::Split;
use crate::ir::ops::{
    Bmm, Cat, Convolution, CopyFrom, ExtremumDim, IndexPut, Pad, Permute, Reduce, Select, Slice, SliceScatter, Softmax,
    SplitWithSizes, Squeeze, Unsqueeze,
};
use crate::ir::{Graph, NodeId, Op, ValueRef};

/// Why a split cannot be followed through an op.
pub(super) enum Why {
    /// The op needs the whole dim, or moves it where a device's piece is not contiguous.
    Misaligned,
    /// A view splits the dim into `n` parts (heads) that do not divide along `tp`.
    Indivisible(i64),
    /// The op keeps the other operands' split if operand `slot` is whole: only its split ends.
    Whole(usize),
}

/// A weight input and the dim of it that `tp` splits.
pub(super) type Claim = (NodeId, usize);

/// What following a split through an op gives: the result's split dim and its `inner`, the
/// column-parallel matmuls behind it, and weights to split along with it (a bias added to split
/// features).
pub(super) type Followed = (usize, i64, BTreeSet<NodeId>, Vec<Claim>);

/// Where the split of `id`'s inputs goes in its result, if the op keeps it local.
pub(super) fn follow(
    graph: &Graph,
    id: NodeId,
    ins: &[ValueRef],
    splits: &BTreeMap<ValueRef, Split>,
    tp: i64,
) -> Result<Followed, Why> {
    let node = graph.node(id);
    // Ops of several results, each split alike.
    let pieces = matches!(node.op, Op::SplitWithSizes(_) | Op::ExtremumDim(_));
    let out = match (node.outputs.len(), node.outputs.first().and_then(|t| t.static_dims())) {
        (1, Some(out)) => out,
        (_, Some(out)) if pieces => out,
        _ => return Err(Why::Misaligned),
    };
    let rank = out.len();
    let origins: BTreeSet<NodeId> = ins.iter().filter_map(|v| splits.get(v)).flat_map(|s| s.origins.clone()).collect();
    let (first_at, first) =
        ins.iter().enumerate().find_map(|(i, v)| splits.get(v).map(|s| (i, s))).ok_or(Why::Misaligned)?;
    let in_dims = graph.value_type(ins[first_at]).static_dims().ok_or(Why::Misaligned)?;
    let norm = |d: i64, r: usize| if d < 0 { (d + r as i64) as usize } else { d as usize };
    let keep = |dim: Option<usize>| dim.map(|d| (d, first.inner, origins.clone(), Vec::new())).ok_or(Why::Misaligned);
    let same_split = |v: &ValueRef, dim: usize| splits.get(v).is_some_and(|s| s.dim == dim && s.inner == first.inner);
    // Every split input split alike; the others whole (each device takes its piece locally).
    let split_alike = |dim: usize| ins.iter().filter(|v| splits.contains_key(v)).all(|v| same_split(v, dim));
    match &node.op {
        // `copy(buffer, src)`, the split operands of the result's shape (a whole one is sliced
        // where it is read).
        Op::CopyFrom(CopyFrom) => keep((in_dims == out && split_alike(first.dim)).then_some(first.dim)),
        op if op.is_elementwise() => broadcast(graph, ins, splits, rank, first_at, tp)
            .map(|(dim, weights)| (dim, first.inner, origins.clone(), weights)),
        Op::View(_) => view_split(&in_dims, &out, first.dim, first.inner, tp)
            .map(|(d, inner)| (d, inner, origins.clone(), Vec::new())),
        Op::Permute(Permute { dims }) => keep(dims.iter().position(|&d| norm(d, rank) == first.dim)),
        Op::Unsqueeze(Unsqueeze { dim }) => {
            let at = norm(*dim, rank);
            keep(Some(if first.dim >= at { first.dim + 1 } else { first.dim }))
        }
        Op::Squeeze(Squeeze { dims }) => {
            let r = in_dims.len();
            let listed: Vec<usize> =
                if dims.is_empty() { (0..r).collect() } else { dims.iter().map(|&d| norm(d, r)).collect() };
            let gone: Vec<usize> = listed.into_iter().filter(|&d| in_dims[d] == 1).collect();
            keep((!gone.contains(&first.dim)).then(|| first.dim - gone.iter().filter(|&&g| g < first.dim).count()))
        }
        Op::Expand(_) => keep((out.get(first.dim) == in_dims.get(first.dim)).then_some(first.dim)),
        Op::Slice(Slice { dim, .. }) => keep((norm(*dim, rank) != first.dim).then_some(first.dim)),
        // Zero padding (the `pad` pass's) of other dims: pairs from the last dim backwards.
        Op::Pad(Pad { pad, .. }) => {
            let touched =
                pad.chunks(2).enumerate().any(|(i, p)| rank.checked_sub(1 + i) == Some(first.dim) && p != [0, 0]);
            keep((!touched).then_some(first.dim))
        }
        Op::Select(Select { dim, .. }) => {
            let at = norm(*dim, in_dims.len());
            keep((at != first.dim).then(|| if first.dim > at { first.dim - 1 } else { first.dim }))
        }
        // Pieces of other dims; a slice written into a buffer (MLA's key, assembled from its
        // no-rope and rope parts).
        Op::Cat(Cat { dim })
        | Op::SplitWithSizes(SplitWithSizes { dim, .. })
        | Op::SliceScatter(SliceScatter { dim, .. }) => {
            keep((split_alike(first.dim) && norm(*dim, rank) != first.dim).then_some(first.dim))
        }
        Op::Softmax(Softmax { dim, .. }) => keep((norm(*dim, rank) != first.dim).then_some(first.dim)),
        // The maximum (and where it is) over another dim.
        Op::ExtremumDim(ExtremumDim { dim, keepdim, .. }) => {
            let at = norm(*dim, in_dims.len());
            let shift = usize::from(!*keepdim && at < first.dim);
            keep((at != first.dim).then(|| first.dim - shift))
        }
        Op::Reduce(Reduce { dims, keepdim, .. }) => {
            let r = in_dims.len();
            let reduced: Vec<usize> =
                if dims.is_empty() { (0..r).collect() } else { dims.iter().map(|&d| norm(d, r)).collect() };
            let shift = if *keepdim { 0 } else { reduced.iter().filter(|&&d| d < first.dim).count() };
            keep((!reduced.contains(&first.dim)).then(|| first.dim - shift))
        }
        Op::Convolution(c) => depthwise(graph, c, ins, first_at, first, &in_dims, tp)
            .map(|weights| (1, first.inner, origins.clone(), weights)),
        Op::IndexPut(IndexPut { present, .. }) => index_put(graph, present, ins, splits, tp)
            .map(|(dim, inner, buffer)| (dim, inner, origins.clone(), buffer.into_iter().collect())),
        // Per-head products: the batch dim split in every operand that is split; or rows of the
        // left operand times a whole right one (query heads merged into the rows over key/value
        // heads that stay whole). A right operand split otherwise is made whole, so that the
        // left one's split (the heads of the queries or probabilities) goes on.
        Op::Bmm(Bmm) => match (splits.get(&ins[0]), splits.get(&ins[1])) {
            (Some(l), None) if l.dim <= 1 => keep(Some(l.dim)),
            (Some(l), Some(_)) if l.dim == 0 && same_split(&ins[1], 0) => keep(Some(0)),
            (Some(_), Some(_)) => Err(Why::Whole(1)),
            (None, Some(r)) if r.dim == 0 => keep(Some(0)),
            _ => Err(Why::Misaligned),
        },
        _ => Err(Why::Misaligned),
    }
}

/// A depthwise convolution (one filter per channel, Mamba's causal conv) of input channels
/// split whole along `tp` keeps them split: its weight (`[C, 1, k…]`, through the layout's
/// transposes) and bias are split along the channels with them.
fn depthwise(
    graph: &Graph,
    c: &Convolution,
    ins: &[ValueRef],
    first_at: usize,
    first: &Split,
    in_dims: &[i64],
    tp: i64,
) -> Result<Vec<(NodeId, usize)>, Why> {
    let channels = in_dims.get(1).copied().unwrap_or(0);
    let whole_split = first_at == 0 && first.dim == 1 && first.inner * tp == channels;
    if c.transposed || c.groups != channels || !whole_split {
        return Err(Why::Misaligned);
    }
    let mut weights = vec![weight_dim(graph, ins[1], 0).ok_or(Why::Misaligned)?];
    if let Some(&bias) = ins.get(2) {
        weights.push(weight_dim(graph, bias, 0).ok_or(Why::Misaligned)?);
    }
    Ok(weights)
}

/// Values written into a buffer (`index_put`: a KV cache at the step's positions) whose split
/// lands on a dim of the buffer that no index reads (the heads): the buffer is stored split
/// along that dim with them (claimed, when it is an input not yet split), and so is the
/// result, each device writing its own heads. The indices must be whole; a boolean mask is
/// not followed.
fn index_put(
    graph: &Graph,
    present: &[bool],
    ins: &[ValueRef],
    splits: &BTreeMap<ValueRef, Split>,
    tp: i64,
) -> Result<(usize, i64, Option<Claim>), Why> {
    let (buffer, indices, values) = match ins {
        [buffer, indices @ .., values] if !indices.is_empty() => (*buffer, indices, *values),
        _ => return Err(Why::Misaligned),
    };
    let whole_indices = indices.iter().all(|v| !splits.contains_key(v) && graph.value_type(*v).dtype.is_integer());
    let split = splits.get(&values).ok_or(Why::Misaligned)?;
    let dims = graph.value_type(buffer).static_dims().ok_or(Why::Misaligned)?;
    let values_rank = graph.value_type(values).rank();
    let index_rank = indices.iter().map(|v| graph.value_type(*v).rank()).max().unwrap_or(0);
    let indexed: Vec<usize> = present.iter().enumerate().filter(|(_, &p)| p).map(|(d, _)| d).collect();
    // The dims of `buffer[indices]`, which the values broadcast to: the indices' broadcast dims
    // where the indexed dims were (in front when those are not adjacent), then the others.
    let adjacent = indexed.windows(2).all(|w| w[1] == w[0] + 1);
    let at = if adjacent { indexed.first().copied().unwrap_or(0) } else { 0 };
    let others: Vec<Option<usize>> = (0..dims.len()).filter(|d| !indexed.contains(d)).map(Some).collect();
    let (before, after) = others.split_at(others.iter().take_while(|d| d.is_some_and(|d| d < at)).count());
    let selected: Vec<Option<usize>> = [before, &vec![None; index_rank][..], after].concat();
    let dim = selected
        .len()
        .checked_sub(values_rank)
        .and_then(|shift| selected.get(split.dim + shift).copied().flatten())
        .filter(|&d| whole_indices && split.inner * tp == dims[d])
        .ok_or(Why::Misaligned)?;
    match splits.get(&buffer) {
        Some(b) if b.dim == dim && b.inner == split.inner => Ok((dim, split.inner, None)),
        Some(_) => Err(Why::Misaligned),
        None => Ok((dim, split.inner, Some(weight_dim(graph, buffer, dim).ok_or(Why::Misaligned)?))),
    }
}

/// The weight input behind `v` (through transposes, squeezes, unsqueezes and element-wise
/// functions of it alone) and the dim of it that is `v`'s `dim`.
pub(super) fn weight_dim(graph: &Graph, mut v: ValueRef, mut dim: usize) -> Option<(NodeId, usize)> {
    for _ in 0..8 {
        let src = graph.inputs(v.node).first().copied();
        let in_dims = src.and_then(|s| graph.value_type(s).static_dims()).unwrap_or_default();
        let norm = |d: i64, r: usize| usize::try_from(if d < 0 { d + r as i64 } else { d }).ok();
        match &graph.node(v.node).op {
            Op::Input(k) if k.is_weight() => return Some((v.node, dim)),
            op if op.is_elementwise() && graph.inputs(v.node).len() == 1 => {}
            Op::Permute(Permute { dims }) => dim = norm(*dims.get(dim)?, dims.len())?,
            Op::Unsqueeze(Unsqueeze { dim: at }) => {
                let at = norm(*at, in_dims.len() + 1)?;
                dim = match dim.cmp(&at) {
                    std::cmp::Ordering::Less => dim,
                    std::cmp::Ordering::Equal => return None,
                    std::cmp::Ordering::Greater => dim - 1,
                };
            }
            Op::Squeeze(Squeeze { dims }) => {
                let r = in_dims.len();
                let listed: Vec<usize> =
                    if dims.is_empty() { (0..r).collect() } else { dims.iter().filter_map(|&d| norm(d, r)).collect() };
                let kept: Vec<usize> = (0..r).filter(|d| !(listed.contains(d) && in_dims[*d] == 1)).collect();
                dim = *kept.get(dim)?;
            }
            _ => return None,
        }
        v = src?;
    }
    None
}

/// An element-wise op's split: broadcasting aligns trailing dims, so every split operand's
/// split lands on one result dim, and the other operands are size 1 there, or weights of that
/// size (a bias), split along with it.
fn broadcast(
    graph: &Graph,
    ins: &[ValueRef],
    splits: &BTreeMap<ValueRef, Split>,
    rank: usize,
    first_at: usize,
    tp: i64,
) -> Result<(usize, Vec<(NodeId, usize)>), Why> {
    let shift = |v: &ValueRef| rank - graph.value_type(*v).rank();
    let first = &splits[&ins[first_at]];
    let dim = first.dim + shift(&ins[first_at]);
    let mut weights = Vec::new();
    for v in ins {
        let at = shift(v);
        match splits.get(v) {
            Some(s) if s.dim + at == dim && s.inner == first.inner => {}
            Some(_) => return Err(Why::Misaligned),
            None => {
                let d = graph.value_type(*v).static_dims().ok_or(Why::Misaligned)?;
                let size = if dim >= at { d[dim - at] } else { 1 };
                if size == 1 {
                    continue;
                }
                if first.inner * tp != size {
                    return Err(Why::Misaligned);
                }
                // A weight (through views and element-wise functions: Mamba's `-exp(A_log)`),
                // split along with it; a constant filled with one value (a scan's zero state),
                // sliced where read.
                match weight_dim(graph, *v, dim - at) {
                    Some(w) => weights.push(w),
                    None if matches!(graph.node(v.node).op, Op::Full(_)) => {}
                    None => return Err(Why::Misaligned),
                }
            }
        }
    }
    Ok((dim, weights))
}

/// Where a split (dim `d` of a `from`-shaped value, pieces of `inner` indices) lands in its
/// `to`-shaped view. In the row-major order, the device index is a digit of stride
/// `F = inner * stride(d)` and size `tp`; the view keeps the split when one dim holds that whole
/// digit (`[.., H*D]` → `[.., H, D]` with `H % tp == 0`, `[B, H, ..]` → `[B*H, ..]`, and back),
/// and the split's new `inner` is `F / stride(e)`. A dim boundary inside the digit would cut
/// through what a device holds: heads that do not divide along `tp`.
fn view_split(from: &[i64], to: &[i64], d: usize, inner: i64, tp: i64) -> Result<(usize, i64), Why> {
    let stride = |dims: &[i64], e: usize| dims[e + 1..].iter().product::<i64>();
    let f = inner * stride(from, d);
    for e in 0..to.len() {
        let (se, n) = (stride(to, e), to[e]);
        if se <= f && f % se == 0 && (se * n) % (f * tp) == 0 {
            return Ok((e, f / se));
        }
    }
    // A dim overlapping the digit without holding it whole: a device would hold part of one of
    // its indices (12 heads of 128 on 8 devices: 1.5 heads each) or part of the dim's range.
    let overlaps = |e: usize| to[e] > 1 && stride(to, e) < f * tp && stride(to, e) * to[e] > f;
    match (0..to.len()).find(|&e| overlaps(e)) {
        Some(e) => Err(Why::Indivisible(to[e])),
        None => Err(Why::Misaligned),
    }
}

#[cfg(test)]
mod tests {
    use super::{view_split, Why};

    #[test]
    fn views_keep_whole_heads_or_say_how_many_do_not_divide() {
        // 12 heads of 128 (GPT-2 124M padded), split 2 and 4 ways: whole heads per device.
        assert!(matches!(view_split(&[32, 1536], &[32, 12, 128], 1, 768, 2), Ok((1, 6))));
        assert!(matches!(view_split(&[32, 1536], &[32, 12, 128], 1, 384, 4), Ok((1, 3))));
        // 8 ways: 1.5 heads per device.
        assert!(matches!(view_split(&[32, 1536], &[32, 12, 128], 1, 192, 8), Err(Why::Indivisible(12))));
        // 4 heads of 64 on 8 devices: half a head each.
        assert!(matches!(view_split(&[16, 256], &[16, 4, 64], 1, 32, 8), Err(Why::Indivisible(4))));
        // Heads merged into the batch of a per-head product, and back.
        assert!(matches!(view_split(&[1, 12, 32, 128], &[12, 32, 128], 1, 6, 2), Ok((0, 6))));
    }
}
