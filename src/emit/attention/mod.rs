//! Blocked attention: a `torchtpu.sdpa` group lowered as a loop over blocks of keys with an
//! online softmax, so that no `[queries, keys]` tensor exists whole — memory grows with the
//! block, not with the square of the sequence.
//!
//! The group is `bmm(Q, Kᵀ)`, element-wise ops on the scores (scale, mask add, bucket masks),
//! the softmax over the keys, ops on the probabilities (views, conversions, zero masks) and
//! `bmm(P, V)` (see the `sdpa` pass). Every op before the softmax works key by key, so it runs
//! on a block of keys as on all of them: a `stablehlo.while` over the blocks slices `Kᵀ`, `V`
//! and every operand laid out along the keys (masks), runs the ops before the softmax on them,
//! and keeps per query row a running maximum `m`, sum `l` and output `acc`:
//!
//! ```text
//! m' = max(m, rowmax(s))        p = exp(s − m')       α = exp(m − m')
//! l' = α·l + rowsum(p)          acc' = α·acc + after(p)·V_block
//! out = acc / l                 (a row whose keys are all masked: 0/0, as the naive form)
//! ```
//!
//! with `m' = 0` where every key seen so far is masked, so that a masked block adds nothing.
//! The ops after the softmax must commute with the final division (views, conversions, a
//! `where` with 0, products): they run on the unnormalized block. Sums and the output
//! accumulate in f32 for f16 and bf16. The numbers equal the naive form's up to rounding.
//!
//! A mask made element-wise from smaller values (a causal mask from the positions of the
//! queries and the keys) is made per block in the loop from those values, which the composite
//! takes instead of the mask: it never exists whole either. So is a mask gathered by positions
//! from a model's `[max_seq, max_seq]` buffer (gpt-fast's `causal[input_pos]`): each block
//! gathers its queries' rows from the buffer's columns of its keys.
//!
//! A block whose every score a mask makes −inf adds nothing, and is skipped: the loop checks
//! the masks on the block first (an additive mask all −inf, a `where(c, s, −inf)` with `c`
//! false everywhere), and reads that block of `Kᵀ` and `V` only when some key is left. A
//! decode step over a long cache thus reads the cache up to the filled positions, and a
//! bucketed prompt the keys up to its real length.
//!
//! `--attention naive|blocked|auto` chooses (`auto`: blocked when the scores would take
//! [`AUTO_SCORE_BYTES`] or more, or when a mask lets blocks be skipped over
//! [`AUTO_SKIP_BLOCKS`] blocks or more), `--attention-block` the keys per block.

mod lower;
mod operands;
mod skip;

use std::collections::{BTreeMap, BTreeSet};

use torchtpu_passes::ir::ops::{Binary, Softmax, View, Where};
use torchtpu_passes::ir::{BinaryOp, DType, Dim, Graph, Node, NodeId, Op, Operand, Scalar, TensorType, ValueRef};

use super::builder::{accumulation_dtype, static_dims};
use super::EmitOptions;
pub(super) use lower::lower;
use operands::{masks_in_the_loop, Cut};
use skip::{skip, Skip};

/// How attention is lowered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attention {
    /// Blocked when the scores would take [`AUTO_SCORE_BYTES`] or more, or when a mask lets
    /// blocks be skipped over [`AUTO_SKIP_BLOCKS`] blocks or more; naive otherwise.
    #[default]
    Auto,
    /// The scores whole, then the softmax: what the program says.
    Naive,
    /// A loop over blocks of keys with an online softmax.
    Blocked,
}

impl Attention {
    /// The name `--attention` takes.
    pub fn name(self) -> &'static str {
        match self {
            Attention::Auto => "auto",
            Attention::Naive => "naive",
            Attention::Blocked => "blocked",
        }
    }
}

/// The size of the scores (as f32) from which `auto` blocks an attention: 64 MiB, e.g. 4
/// heads of 2,048 × 2,048 positions.
pub(super) const AUTO_SCORE_BYTES: i64 = 64 << 20;

/// The blocks of keys from which `auto` blocks an attention whose scores are smaller than
/// [`AUTO_SCORE_BYTES`] when a mask lets blocks be skipped: a decode step over a cache of 4,096
/// positions or more (blocks of 512), whose cost then follows the filled positions.
pub(super) const AUTO_SKIP_BLOCKS: i64 = 8;

/// The keys per block unless `--attention-block` says otherwise.
pub(super) const DEFAULT_BLOCK: i64 = 512;

/// A group lowered blocked: the ops before the softmax and those after it, each as a graph
/// on one block, and how each operand of the group enters the loop.
pub(super) struct Plan {
    /// Keys per block; the keys are `blocks · block`.
    block: i64,
    blocks: i64,
    /// The composite's operands: the group's, with each mask made element-wise from smaller
    /// values (a causal mask from positions) replaced by those values.
    pub(super) operands: Vec<ValueRef>,
    /// Per operand: the dim cut into blocks (`Kᵀ`'s last, `V`'s rows, a mask's last), or `None`
    /// (read whole: `Q`, a mask broadcast over the keys).
    cuts: Vec<Option<usize>>,
    /// `bmm(Q, Kᵀ)` and the ops up to the softmax, on block operands; returns the scores.
    scores: Graph,
    /// The operands `scores` reads, in its input order.
    scores_reads: Vec<usize>,
    /// The ops after the softmax and `bmm(P, V)`, on `[probabilities, block operands…]`;
    /// returns the block's output in the accumulation dtype.
    values: Graph,
    values_reads: Vec<usize>,
    /// The softmax's input type (one block of keys) and its result's dtype.
    scores_ty: TensorType,
    probs_dtype: DType,
    safe: bool,
    /// The output's type.
    out: TensorType,
    /// The masks that say a block adds nothing; `None`: every block is visited.
    skip: Option<Skip>,
    /// The operand holding each row's sink logit (`[rows…, 1]`), if the softmax has one: the
    /// running maximum starts from it, and the sum from 1.
    sink: Option<usize>,
}

/// The blocked form of the attention marked by the `sdpa` pass as `nodes` (in topological
/// order) reading `operands`, when the options ask for it and it applies; `None`: naive.
pub(super) fn plan(graph: &Graph, nodes: &[NodeId], operands: &[ValueRef], opts: &EmitOptions) -> Option<Plan> {
    if opts.attention == Attention::Naive {
        return None;
    }
    let at = nodes.iter().position(|&id| matches!(graph.node(id).op, Op::Softmax(Softmax { log: false, .. })))?;
    let softmax = graph.node(nodes[at]);
    let Op::Softmax(Softmax { dim, safe, .. }) = softmax.op else { return None };
    // An attention sink: `cat(scores, sink)`, its maximum and the shift before the softmax,
    // the slice that drops the sink's column after it (see the `sdpa` pass). The loop starts
    // from the sink's logit instead, and the shift (which changes no probability) is dropped.
    let sink_form = at >= 3 && matches!(graph.node(nodes[at - 3]).op, Op::Cat(_));
    let (scores_end, before, probs_at, sink) = if sink_form {
        let cat = graph.inputs(nodes[at - 3]);
        (cat[0], &nodes[..at - 3], at + 1, Some(*cat.get(1)?))
    } else {
        (graph.inputs(nodes[at])[0], &nodes[..at], at, None)
    };
    let scores_ty = graph.value_type(scores_end).clone();
    let dims = static_dims(&scores_ty).ok()?;
    let keys = *dims.last()?;
    if dim != -1 && dim != dims.len() as i64 - 1 {
        return None;
    }
    let count: i64 = dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d))?;
    let wanted = opts.attention_block.unwrap_or(DEFAULT_BLOCK);
    let block = block_size(keys, wanted);
    let auto = opts.attention == Attention::Auto;
    // `auto` below the size: blocked only where blocks can be skipped, over many of them.
    let small = auto && count.saturating_mul(4) < AUTO_SCORE_BYTES;
    // Nor where the keys have no divisor near the block (a prime count: blocks of 1 key).
    let ragged = auto && block.saturating_mul(4) < wanted.min(keys);
    if block >= keys || ragged || (small && keys < AUTO_SKIP_BLOCKS * block) {
        return None;
    }
    let out = graph.node(*nodes.last()?).outputs[0].clone();
    let out_dims = static_dims(&out).ok()?;
    // The output's rows are the scores' rows, regrouped by views of leading dims.
    let product = |d: &[i64]| d.iter().try_fold(1i64, |n, &x| n.checked_mul(x));
    if product(&dims[..dims.len() - 1]) != product(&out_dims[..out_dims.len().checked_sub(1)?]) {
        return None;
    }
    let Cut { operands, cuts, expanded, key_dims } =
        masks_in_the_loop(graph, operands, &cuts(graph, nodes, operands, keys)?, keys)?;
    let after = &nodes[probs_at + 1..];
    if !after[..after.len() - 1].iter().all(|&id| commutes_with_division(&graph.node(id).op)) {
        return None;
    }
    let sink = match sink {
        // One logit per row of the scores.
        Some(v) if numel(graph.value_type(v)) == product(&dims[..dims.len() - 1])? => {
            Some(operands.iter().position(|o| *o == v)?)
        }
        Some(_) => return None,
        None => None,
    };
    let part = Part { graph, operands: &operands, cuts: &cuts, expanded: &expanded, key_dims: &key_dims, keys, block };
    let (scores, scores_reads) = part.build("scores", before, None)?;
    let probs = (ValueRef { node: nodes[probs_at], slot: 0 }, softmax.outputs[0].dtype);
    let (values, values_reads) = part.build("values", after, Some(probs))?;
    let skip = skip(&part, before, scores_end);
    if small && skip.is_none() {
        return None;
    }
    Some(Plan {
        block,
        blocks: keys / block,
        operands,
        cuts,
        scores,
        scores_reads,
        values,
        values_reads,
        scores_ty: with_last(&scores_ty, block)?,
        probs_dtype: softmax.outputs[0].dtype,
        safe,
        out,
        skip,
        sink,
    })
}

/// The largest divisor of `keys` that is at most `wanted` (at least 1).
fn block_size(keys: i64, wanted: i64) -> i64 {
    (1..=wanted.clamp(1, keys.max(1))).rev().find(|b| keys % b == 0).unwrap_or(1)
}

/// Ops that may run on the unnormalized probabilities: `f(p) / l = f(p / l)`.
fn commutes_with_division(op: &Op) -> bool {
    match op {
        Op::View(_) | Op::Convert(_) | Op::Identity(_) => true,
        Op::Where(Where { on_true, on_false }) => [on_true, on_false].iter().any(|o| is_zero(o)),
        Op::Binary(Binary { op: BinaryOp::Mul, .. }) => true,
        // `p / t`, not `c / p`.
        Op::Binary(Binary { op: BinaryOp::Div, lhs: Operand::Tensor, .. }) => true,
        _ => false,
    }
}

fn is_zero(o: &Operand) -> bool {
    matches!(o, Operand::Scalar(Scalar::Int(0))) || matches!(o, Operand::Scalar(Scalar::Float(f)) if *f == 0.0)
}

/// The dim each operand is cut along, from where the group reads it: `Kᵀ` (the first `bmm`'s
/// right side) along its last dim, `V` (the last `bmm`'s right side) along its rows, an operand
/// of the ops between along its last dim when that is the keys (a mask) and whole when it is 1
/// (broadcast over them); `Q` whole. `None` when an operand plays two parts or has another shape.
fn cuts(graph: &Graph, nodes: &[NodeId], operands: &[ValueRef], keys: i64) -> Option<Vec<Option<usize>>> {
    let (first, last) = (*nodes.first()?, *nodes.last()?);
    let mut cuts: BTreeMap<usize, Option<usize>> = BTreeMap::new();
    for &id in nodes {
        for (slot, v) in graph.inputs(id).iter().enumerate() {
            let Some(k) = operands.iter().position(|o| o == v) else { continue };
            let dims = static_dims(graph.value_type(*v)).ok()?;
            let cut = match (id, slot) {
                (id, 0) if id == first => None,
                (id, 1) if id == first || id == last => {
                    let d = if id == first { dims.len() - 1 } else { dims.len().checked_sub(2)? };
                    (dims.get(d) == Some(&keys)).then_some(Some(d))?
                }
                _ => match dims.last() {
                    Some(&n) if n == keys => Some(dims.len() - 1),
                    Some(1) | None => None,
                    Some(_) => return None,
                },
            };
            if *cuts.entry(k).or_insert(cut) != cut {
                return None;
            }
        }
    }
    (0..operands.len()).map(|k| cuts.get(&k).copied()).collect()
}

/// The element count of a static type (`i64::MAX` for a symbolic or overflowing one).
pub(super) fn numel(ty: &TensorType) -> i64 {
    ty.dims.iter().try_fold(1i64, |n, d| d.as_static().and_then(|d| n.checked_mul(d))).unwrap_or(i64::MAX)
}

/// `ty` with its last dim (the keys) set to `block`.
fn with_last(ty: &TensorType, block: i64) -> Option<TensorType> {
    let mut ty = ty.clone();
    *ty.dims.last_mut()? = Dim::Static(block);
    Some(ty)
}

/// What building a per-block graph needs.
pub(super) struct Part<'a> {
    graph: &'a Graph,
    operands: &'a [ValueRef],
    cuts: &'a [Option<usize>],
    /// Values rebuilt on each block from the operands (the masks' ops, layouts of `Kᵀ` and
    /// `V`), and the dim of the keys in those where it is not the last.
    expanded: &'a BTreeSet<ValueRef>,
    key_dims: &'a BTreeMap<ValueRef, usize>,
    keys: i64,
    block: i64,
}

/// A per-block graph under construction: its builder, the values it holds for the program's,
/// and the operands it reads, in its input order.
pub(super) struct Building {
    g: torchtpu_passes::ir::builder::Builder,
    map: BTreeMap<ValueRef, ValueRef>,
    reads: Vec<usize>,
}

impl Part<'_> {
    /// The graph of `nodes` on one block of keys: inputs `first` (the probabilities, if
    /// given) and then the operands it reads (cut to a block), in the order it reads them;
    /// returns its last node's value (the last `bmm` in the accumulation dtype). `None` when an
    /// op does not keep the keys as its last dim.
    fn build(&self, name: &str, nodes: &[NodeId], first: Option<(ValueRef, DType)>) -> Option<(Graph, Vec<usize>)> {
        let mut b =
            Building { g: torchtpu_passes::ir::builder::Builder::new(name), map: BTreeMap::new(), reads: vec![] };
        if let Some((probs, dtype)) = first {
            let ty = with_last(&TensorType { dtype, ..self.graph.value_type(probs).clone() }, self.block)?;
            let input = b.g.input("probs", ty);
            b.map.insert(probs, input);
        }
        let last = *nodes.last()?;
        for &id in nodes {
            self.node(&mut b, id, first.is_some() && id == last)?;
        }
        let result = b.map[&ValueRef { node: last, slot: 0 }];
        b.g.output(result);
        Some((b.g.finish(), b.reads))
    }

    /// Node `id` on one block, after its inputs; the last `bmm` (`accumulating`) keeps its
    /// dims and gives the accumulation dtype.
    fn node(&self, b: &mut Building, id: NodeId, accumulating: bool) -> Option<ValueRef> {
        let inputs = self.graph.inputs(id).into_iter().map(|v| self.value(b, v)).collect::<Option<Vec<_>>>()?;
        let mut copy = Node { composite: None, sharding: None, ..self.graph.node(id).clone() };
        if accumulating {
            let out = &mut copy.outputs[0];
            out.dtype = accumulation_dtype(out.dtype);
        } else {
            let out = ValueRef { node: id, slot: 0 };
            let d = self.key_dims.get(&out).copied().or(copy.outputs[0].rank().checked_sub(1))?;
            if copy.outputs.len() != 1 || copy.outputs[0].dims.get(d) != Some(&Dim::Static(self.keys)) {
                return None;
            }
            copy.outputs[0].dims[d] = Dim::Static(self.block);
            if let Op::View(View { size }) = &mut copy.op {
                // The keys, or −1 (inferred: the block, as the other dims are kept).
                let n = size.get_mut(d).filter(|n| [self.keys, -1].map(Dim::Static).contains(n))?;
                if *n == Dim::Static(self.keys) {
                    *n = Dim::Static(self.block);
                }
            }
        }
        let new = ValueRef { node: b.g.graph_mut().add_op(copy, &inputs), slot: 0 };
        b.map.insert(ValueRef { node: id, slot: 0 }, new);
        Some(new)
    }

    /// The block graph's value for the program's `v`: built already, an operand (cut to a
    /// block), or a mask's op rebuilt.
    fn value(&self, b: &mut Building, v: ValueRef) -> Option<ValueRef> {
        if let Some(&mapped) = b.map.get(&v) {
            return Some(mapped);
        }
        if self.expanded.contains(&v) {
            return self.node(b, v.node, false);
        }
        let k = self.operands.iter().position(|o| *o == v)?;
        let mut ty = self.graph.value_type(v).clone();
        if let Some(d) = self.cuts[k] {
            ty.dims[d] = Dim::Static(self.block);
        }
        let input = b.g.input(&format!("operand{k}"), ty);
        b.map.insert(v, input);
        b.reads.push(k);
        Some(input)
    }
}
