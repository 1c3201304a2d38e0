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
//! takes instead of the mask: it never exists whole either.
//!
//! `--attention naive|blocked|auto` chooses (`auto`: blocked when the scores would take
//! [`AUTO_SCORE_BYTES`] or more), `--attention-block` the keys per block.

use std::collections::{BTreeMap, BTreeSet};

use melior::ir::Value;
use torchtpu_passes::ir::ops::{Binary, Softmax, View, Where};
use torchtpu_passes::ir::{BinaryOp, DType, Dim, Graph, Node, NodeId, Op, Operand, Scalar, TensorType, ValueRef};

use super::builder::{accumulation_dtype, static_dims, Builder, LowerResult};
use super::composite::Group;
use super::EmitOptions;

/// How attention is lowered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attention {
    /// Blocked when the scores would take [`AUTO_SCORE_BYTES`] or more, naive below.
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
}

/// The blocked form of `group` when the options ask for it and it applies; `None`: naive.
pub(super) fn plan(graph: &Graph, group: &Group, opts: &EmitOptions) -> Option<Plan> {
    if !group.is_sdpa() || opts.attention == Attention::Naive {
        return None;
    }
    let nodes = &group.nodes;
    let at = nodes.iter().position(|&id| matches!(graph.node(id).op, Op::Softmax(Softmax { log: false, .. })))?;
    let softmax = graph.node(nodes[at]);
    let Op::Softmax(Softmax { dim, safe, .. }) = softmax.op else { return None };
    let scores_ty = graph.value_type(graph.inputs(nodes[at])[0]).clone();
    let dims = static_dims(&scores_ty).ok()?;
    let keys = *dims.last()?;
    if dim != -1 && dim != dims.len() as i64 - 1 {
        return None;
    }
    let numel: i64 = dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d))?;
    if opts.attention == Attention::Auto && numel.saturating_mul(4) < AUTO_SCORE_BYTES {
        return None;
    }
    let block = block_size(keys, opts.attention_block.unwrap_or(DEFAULT_BLOCK));
    if block >= keys {
        return None;
    }
    let out = graph.node(*nodes.last()?).outputs[0].clone();
    let out_dims = static_dims(&out).ok()?;
    // The output's rows are the scores' rows, regrouped by views of leading dims.
    let product = |d: &[i64]| d.iter().try_fold(1i64, |n, &x| n.checked_mul(x));
    if product(&dims[..dims.len() - 1]) != product(&out_dims[..out_dims.len().checked_sub(1)?]) {
        return None;
    }
    let (operands, cuts, expanded) = masks_in_the_loop(graph, &group.operands, &cuts(graph, group, keys)?, keys)?;
    let (before, after) = (&nodes[..at], &nodes[at + 1..]);
    if !after[..after.len() - 1].iter().all(|&id| commutes_with_division(&graph.node(id).op)) {
        return None;
    }
    let part = Part { graph, operands: &operands, cuts: &cuts, expanded: &expanded, keys, block };
    let (scores, scores_reads) = part.build("scores", before, None)?;
    let probs = (ValueRef { node: nodes[at], slot: 0 }, softmax.outputs[0].dtype);
    let (values, values_reads) = part.build("values", after, Some(probs))?;
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
fn cuts(graph: &Graph, group: &Group, keys: i64) -> Option<Vec<Option<usize>>> {
    let (first, last) = (group.nodes[0], *group.nodes.last()?);
    let mut cuts: BTreeMap<usize, Option<usize>> = BTreeMap::new();
    for &id in &group.nodes {
        for (slot, v) in graph.inputs(id).iter().enumerate() {
            let Some(k) = group.operands.iter().position(|o| o == v) else { continue };
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
    (0..group.operands.len()).map(|k| cuts.get(&k).copied()).collect()
}

/// The loop's operands and their cuts, and the values it rebuilds on each block: each
/// operand cut along its last dim (a mask) that is made element-wise from smaller values —
/// `where(k_pos <= q_pos, 0, -inf)` of positions `[1, keys]` and `[queries, 1]` — is replaced by
/// those values, so that the mask never exists whole (it would take `queries × keys`).
#[allow(clippy::type_complexity)]
fn masks_in_the_loop(
    graph: &Graph,
    group: &[ValueRef],
    cuts: &[Option<usize>],
    keys: i64,
) -> Option<(Vec<ValueRef>, Vec<Option<usize>>, BTreeSet<ValueRef>)> {
    let (mut operands, mut op_cuts, mut expanded) = (Vec::new(), Vec::new(), BTreeSet::new());
    let mut add = |v: ValueRef, cut: Option<usize>| match operands.iter().position(|o| *o == v) {
        Some(i) => (op_cuts[i] == cut).then_some(()),
        None => {
            operands.push(v);
            op_cuts.push(cut);
            Some(())
        }
    };
    for (&v, &cut) in group.iter().zip(cuts) {
        let rank = graph.value_type(v).rank();
        let mut made = Made::default();
        let made_from_smaller = cut == Some(rank.wrapping_sub(1)) && made.grow_from_smaller(graph, v, keys);
        let leaves = made_from_smaller.then(|| made.leaf_cuts(graph, keys)).flatten();
        match leaves {
            Some(leaves) => {
                for (leaf, cut) in leaves {
                    add(leaf, cut)?;
                }
                expanded.extend(made.grown);
            }
            None => add(v, cut)?,
        }
    }
    Some((operands, op_cuts, expanded))
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

/// A mask's element-wise ops and the smaller values they start from.
#[derive(Default)]
struct Made {
    grown: BTreeSet<ValueRef>,
    leaves: Vec<ValueRef>,
    visited: usize,
}

impl Made {
    /// The most ops rebuilt in the loop for one mask.
    const MAX_OPS: usize = 32;

    /// Each leaf with its cut; `None` if one does not broadcast against the keys.
    fn leaf_cuts(&self, graph: &Graph, keys: i64) -> Option<Vec<(ValueRef, Option<usize>)>> {
        self.leaves.iter().map(|&l| Some((l, leaf_cut(graph.value_type(l), keys)?))).collect()
    }

    /// True when `v` (keys last) is made by element-wise ops from values each smaller than the
    /// result it feeds (broadcast up), which are recorded as leaves.
    fn grow_from_smaller(&mut self, graph: &Graph, v: ValueRef, keys: i64) -> bool {
        let node = graph.node(v.node);
        let ty = graph.value_type(v);
        let elementwise = node.op.is_elementwise() && !node.op.is_random() && node.outputs.len() == 1;
        // The ops visited bound the recursion too: a value joins `grown` only after its inputs.
        self.visited += 1;
        if !elementwise || ty.dims.last() != Some(&Dim::Static(keys)) || self.visited > Self::MAX_OPS {
            return false;
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
}

/// The element count of a static type (`i64::MAX` for a symbolic or overflowing one).
fn numel(ty: &TensorType) -> i64 {
    ty.dims.iter().try_fold(1i64, |n, d| d.as_static().and_then(|d| n.checked_mul(d))).unwrap_or(i64::MAX)
}

/// `ty` with its last dim (the keys) set to `block`.
fn with_last(ty: &TensorType, block: i64) -> Option<TensorType> {
    let mut ty = ty.clone();
    *ty.dims.last_mut()? = Dim::Static(block);
    Some(ty)
}

/// What building a per-block graph needs.
struct Part<'a> {
    graph: &'a Graph,
    operands: &'a [ValueRef],
    cuts: &'a [Option<usize>],
    /// Values rebuilt on each block from the operands (the masks' ops).
    expanded: &'a BTreeSet<ValueRef>,
    keys: i64,
    block: i64,
}

/// A per-block graph under construction: its builder, the values it holds for the program's,
/// and the operands it reads, in its input order.
struct Building {
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
            if copy.outputs.len() != 1 || copy.outputs[0].dims.last() != Some(&Dim::Static(self.keys)) {
                return None;
            }
            copy.outputs[0] = with_last(&copy.outputs[0], self.block)?;
            if let Op::View(View { size }) = &mut copy.op {
                *size.last_mut().filter(|d| **d == Dim::Static(self.keys))? = Dim::Static(self.block);
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

/// Lowers `plan` on `args` (the group's operands): the loop over the blocks of keys, then the
/// division by the row sums.
pub(super) fn lower<'c, 'b>(
    b: &Builder<'c, 'b>,
    plan: &Plan,
    args: &[(Value<'c, 'b>, &TensorType)],
    opts: &EmitOptions,
) -> LowerResult<Value<'c, 'b>> {
    let acc_dt = accumulation_dtype(plan.scores_ty.dtype);
    let scores = static_dims(&plan.scores_ty)?;
    let rows = &scores[..scores.len() - 1];
    let out = static_dims(&plan.out)?;
    // The loop carries the block counter, the running maximum and sum per row, the output and
    // every operand (a loop's regions read nothing from outside).
    let mut types: Vec<(Vec<i64>, DType)> =
        vec![(vec![], DType::I32), (rows.to_vec(), acc_dt), (rows.to_vec(), acc_dt), (out.clone(), acc_dt)];
    for (_, ty) in args {
        types.push((static_dims(ty)?, ty.dtype));
    }
    let shapes: Vec<(&[i64], DType)> = types.iter().map(|(d, t)| (d.as_slice(), *t)).collect();
    let blocks = i32::try_from(plan.blocks).map_err(|_| format!("{} blocks of keys", plan.blocks))?;
    let cond = b.block_region(&shapes, |inner, params| {
        let end = inner.splat(Scalar::Int(blocks.into()), &[], DType::I32)?;
        Ok(vec![inner.compare(params[0], end, &[], DType::I32, "LT")?])
    })?;
    let body = b.block_region(&shapes, |inner, params| {
        let (i, m, l, acc) = (params[0], params[1], params[2], params[3]);
        let operands = &params[4..];
        let step = Step { b: inner, plan, rows, out: &out, acc_dt };
        let blocked = step.cut_operands(i, operands, args)?;
        let (m, l, acc) = step.run((m, l, acc), &blocked, opts)?;
        let one = inner.splat(Scalar::Int(1), &[], DType::I32)?;
        let mut next = vec![inner.op("stablehlo.add", &[i, one], &[], DType::I32, &[])?, m, l, acc];
        next.extend_from_slice(operands);
        Ok(next)
    })?;
    let mut init = vec![
        b.splat(Scalar::Int(0), &[], DType::I32)?,
        b.splat(Scalar::Float(f64::NEG_INFINITY), rows, acc_dt)?,
        b.splat(Scalar::Float(0.0), rows, acc_dt)?,
        b.splat(Scalar::Float(0.0), &out, acc_dt)?,
    ];
    init.extend(args.iter().map(|(v, _)| *v));
    let results = b.op_n("stablehlo.while", &init, &shapes, &[], vec![cond, body])?;
    let (m, l, acc) = (results[1], results[2], results[3]);
    let mut result = b.op("stablehlo.divide", &[acc, per_row(b, l, rows, &out, acc_dt)?], &out, acc_dt, &[])?;
    if plan.safe {
        let none = b.splat(Scalar::Float(f64::NEG_INFINITY), rows, acc_dt)?;
        let masked = b.compare(m, none, rows, acc_dt, "EQ")?;
        let masked = per_row(b, masked, rows, &out, DType::Bool)?;
        let zero = b.splat(Scalar::Float(0.0), &out, acc_dt)?;
        result = b.op("stablehlo.select", &[masked, zero, result], &out, acc_dt, &[])?;
    }
    b.convert(result, &out, acc_dt, plan.out.dtype)
}

/// `v`, one value per row of `rows`, over the last dim of `to`, whose rows are the same ones
/// (regrouped by views of leading dims).
fn per_row<'c, 'x>(
    b: &Builder<'c, 'x>,
    v: Value<'c, 'x>,
    rows: &[i64],
    to: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'x>> {
    let to_rows = &to[..to.len() - 1];
    let v = if rows == to_rows { v } else { b.reshape(v, to_rows, dt)? };
    let map = (0..to_rows.len()).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    b.op("stablehlo.broadcast_in_dim", &[v], to, dt, &[("broadcast_dimensions", format!("array<i64: {map}>"))])
}

/// One block of the loop.
struct Step<'a, 'c, 'x> {
    b: &'a Builder<'c, 'x>,
    plan: &'a Plan,
    rows: &'a [i64],
    out: &'a [i64],
    acc_dt: DType,
}

impl<'c, 'x> Step<'_, 'c, 'x> {
    /// Block `i` of each operand cut along the keys; the others whole.
    fn cut_operands(
        &self,
        i: Value<'c, 'x>,
        operands: &[Value<'c, 'x>],
        args: &[(Value<'c, '_>, &TensorType)],
    ) -> LowerResult<Vec<Value<'c, 'x>>> {
        let b = self.b;
        let size = b.splat(Scalar::Int(self.plan.block), &[], DType::I32)?;
        let start = b.op("stablehlo.multiply", &[i, size], &[], DType::I32, &[])?;
        let zero = b.splat(Scalar::Int(0), &[], DType::I32)?;
        let mut out = Vec::with_capacity(operands.len());
        for ((&v, (_, ty)), cut) in operands.iter().zip(args).zip(&self.plan.cuts) {
            let Some(d) = *cut else {
                out.push(v);
                continue;
            };
            let mut sizes = static_dims(ty)?;
            sizes[d] = self.plan.block;
            let starts: Vec<Value> = (0..sizes.len()).map(|k| if k == d { start } else { zero }).collect();
            let list = sizes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            let attr = ("slice_sizes", format!("array<i64: {list}>"));
            out.push(b.op("stablehlo.dynamic_slice", &[vec![v], starts].concat(), &sizes, ty.dtype, &[attr])?);
        }
        Ok(out)
    }

    /// The online softmax's update by one block: `(m, l, acc)` after it.
    fn run(
        &self,
        (m, l, acc): (Value<'c, 'x>, Value<'c, 'x>, Value<'c, 'x>),
        operands: &[Value<'c, 'x>],
        opts: &EmitOptions,
    ) -> LowerResult<(Value<'c, 'x>, Value<'c, 'x>, Value<'c, 'x>)> {
        let (b, plan, dt) = (self.b, self.plan, self.acc_dt);
        let dims = static_dims(&plan.scores_ty)?;
        let last = dims.len() as i64 - 1;
        let read = |reads: &[usize]| reads.iter().map(|&k| operands[k]).collect::<Vec<_>>();
        let s = super::control::inline(b, &plan.scores, read(&plan.scores_reads), opts)?[0];
        let s = b.convert(s, &dims, plan.scores_ty.dtype, dt)?;
        let block_max = b.reduce(s, &dims, &[last], dt, "stablehlo.maximum", Scalar::Float(f64::NEG_INFINITY))?;
        let m_new = b.op("stablehlo.maximum", &[m, block_max], self.rows, dt, &[])?;
        // Where every key so far is masked, subtract 0: exp(−inf) = 0, not exp(−inf + inf).
        let none = b.splat(Scalar::Float(f64::NEG_INFINITY), self.rows, dt)?;
        let masked = b.compare(m_new, none, self.rows, dt, "EQ")?;
        let zero = b.splat(Scalar::Float(0.0), self.rows, dt)?;
        let shift = b.op("stablehlo.select", &[masked, zero, m_new], self.rows, dt, &[])?;
        let wide_shift = per_row(b, shift, self.rows, &dims, dt)?;
        let shifted = b.op("stablehlo.subtract", &[s, wide_shift], &dims, dt, &[])?;
        let p = b.op("stablehlo.exponential", &[shifted], &dims, dt, &[])?;
        let gap = b.op("stablehlo.subtract", &[m, shift], self.rows, dt, &[])?;
        let alpha = b.op("stablehlo.exponential", &[gap], self.rows, dt, &[])?;
        let sum = b.reduce(p, &dims, &[last], dt, "stablehlo.add", Scalar::Float(0.0))?;
        let scaled = b.op("stablehlo.multiply", &[alpha, l], self.rows, dt, &[])?;
        let l_new = b.op("stablehlo.add", &[scaled, sum], self.rows, dt, &[])?;
        let probs = b.convert(p, &dims, dt, plan.probs_dtype)?;
        let mut inputs = vec![probs];
        inputs.extend(read(&plan.values_reads));
        let pv = super::control::inline(b, &plan.values, inputs, opts)?[0];
        let alpha = per_row(b, alpha, self.rows, self.out, dt)?;
        let kept_acc = b.op("stablehlo.multiply", &[alpha, acc], self.out, dt, &[])?;
        let acc_new = b.op("stablehlo.add", &[kept_acc, pv], self.out, dt, &[])?;
        Ok((m_new, l_new, acc_new))
    }
}
