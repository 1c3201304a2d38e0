//! `bucket_masks`: makes a program compiled for a size bucket exact at every real size up to
//! the bucket's. The caller pads each dynamic input dim with zeros up to the bucket size and
//! passes the real value of every symbol as an extra `i64` input (`InputKind::Size`, after
//! all other inputs, in symbol order); outputs are sliced back to their real sizes.
//!
//! Along a dynamic dim, a value's valid positions are a prefix whose length is the dim's
//! symbolic size evaluated at the real symbol values (the export records the expressions, and
//! `specialize` keeps them on each node). Every node is checked against that:
//!
//! - position-wise ops (element-wise, permutes, views that keep a dynamic dim whole, slices
//!   from a fixed start, `cat` whose dynamic pieces come last, embeddings, cumulative sums,
//!   norms over static dims, contractions over static dims, `arange`, `full`) compute valid
//!   positions from valid positions only: nothing to do;
//! - gathers (`index`) along a dynamic dim are safe when the indices are positions
//!   (`arange` along that dim, reshaped), as in causal-mask construction;
//! - reductions over a dynamic dim get their input masked with the reduction's identity
//!   (`sum`: 0, `amax`: -inf, `any`: false, …), `mean` divides by the real count, softmax
//!   masks with -inf, and matmuls contracting a dynamic dim get both operands zeroed there;
//! - an `index_put` into a tensor with no dynamic dim whose indices (and values) have one (a
//!   KV cache written at a prompt's positions) gets the padded indices moved past the end of
//!   the written dim, where the scatter drops their updates; a split along a static dim is
//!   position-wise;
//! - sizes used as values (`sym_size`, size arithmetic) become the real sizes;
//! - anything else touching a dynamic dim fails the compile with the node and op named —
//!   never wrong numbers.
//!
//! A graph with `sym s0 in [1, 64]` compiled for the bucket `s0 = 16` (the filetest runner
//! specializes it first):
//!
//! ```text
#![doc = include_str!("../tests/bucket_masks/reductions_over_dynamic_dim_masked.ir")]
//! ```

use crate::ir::ops::{
    Arange, ArangeSym, ArgReduce, Binary, Bmm, Cat, Convert, ExtremumDim, Full, Gather, Identity, Index, IndexPut,
    IndexSelect, LayerNorm, Mm, Reduce, Select, Slice, Softmax, SplitWithSizes, SymInt, SymSize, Unsqueeze, View,
    Where,
};
use std::collections::BTreeMap;

use crate::ir::ops::Padding;
use crate::ir::{
    norm_dim, ArgReduceOp, BinaryOp, Bounds, DType, Dim, Graph, InputKind, Node, NodeId, Op, Operand, ReduceOp, Scalar,
    SymExpr, TensorType, ValueRef,
};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// Why an op is refused along a dynamic dim.
const REFUSED: &str = "has no padding-safe form along a dynamic dim";

/// The bucket a program is compiled for.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketSpec {
    /// The bucket's value of each symbol (the padded sizes).
    pub values: BTreeMap<String, i64>,
    /// Each symbol's range.
    pub bounds: BTreeMap<String, Bounds>,
}

/// See the module docs.
pub struct BucketMasks {
    /// The bucket; `None` for a program compiled at one exact size (nothing to do).
    pub bucket: Option<BucketSpec>,
}

/// The dynamic dims of a value: dim → symbolic length.
type DynDims = BTreeMap<usize, SymExpr>;

fn list(dims: &[SymExpr]) -> String {
    format!("[{}]", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
}

struct Masker<'a> {
    spec: &'a BucketSpec,
    /// Every symbol at its minimum (1 when unbounded below).
    smallest: BTreeMap<String, i64>,
    /// The `Size` input of each symbol.
    sizes: BTreeMap<String, ValueRef>,
    /// Real lengths built so far, by expression.
    lengths: BTreeMap<SymExpr, ValueRef>,
    /// Values that hold their own position along a dynamic dim (`arange`, reshaped).
    positions: BTreeMap<ValueRef, (usize, SymExpr)>,
    /// Dims that merge a dynamic dim under static ones (`[2, s] → [2·s]`), with the merged
    /// dims: their valid positions are not a prefix.
    scattered: BTreeMap<(ValueRef, usize), Vec<SymExpr>>,
    counter: usize,
    masks: usize,
}

impl Masker<'_> {
    fn dyn_dims(graph: &Graph, v: ValueRef) -> DynDims {
        let node = graph.node(v.node);
        let Some(sym) = node.symbolic.as_ref() else { return DynDims::new() };
        sym.outputs[usize::from(v.slot)]
            .dims
            .iter()
            .enumerate()
            .filter_map(|(i, d)| match d {
                Dim::Sym(e) => Some((i, e.clone())),
                Dim::Static(_) => None,
            })
            .collect()
    }

    fn ty(graph: &Graph, v: ValueRef) -> TensorType {
        graph.value_type(v).clone()
    }

    fn add(&mut self, graph: &mut Graph, from: NodeId, op: Op, ty: TensorType, inputs: &[ValueRef]) -> ValueRef {
        self.counter += 1;
        let n = Node::derived(graph.node(from), format_args!("bucket.{}", self.counter), op, [ty]);
        ValueRef { node: graph.add_op(n, inputs), slot: 0 }
    }

    /// The real value of `e` as an `i64[]` value (affine expressions in the symbols).
    fn length(&mut self, graph: &mut Graph, at: NodeId, e: &SymExpr) -> Result<ValueRef, String> {
        if let Some(&v) = self.lengths.get(e) {
            return Ok(v);
        }
        let scalar = TensorType::new(DType::I64, &[]);
        let bin = |op, rhs| Op::Binary(Binary { op, lhs: Operand::Tensor, rhs, alpha: None });
        let v = match e {
            SymExpr::Sym(s) => *self.sizes.get(s).ok_or_else(|| format!("unknown symbol `{s}`"))?,
            SymExpr::Int(i) => {
                self.add(graph, at, Op::Full(Full { size: vec![], value: Scalar::Int(*i) }), scalar, &[])
            }
            SymExpr::Add(terms) | SymExpr::Mul(terms) => {
                let op = if matches!(e, SymExpr::Add(_)) { BinaryOp::Add } else { BinaryOp::Mul };
                let (consts, rest): (Vec<&SymExpr>, Vec<&SymExpr>) = terms.iter().partition(|t| t.as_const().is_some());
                let mut acc = match rest.first() {
                    Some(first) => self.length(graph, at, first)?,
                    None => return Err(format!("`{e}` has no symbol")),
                };
                for t in &rest[1..] {
                    let v = self.length(graph, at, t)?;
                    acc = self.add(graph, at, bin(op, Operand::Tensor), scalar.clone(), &[acc, v]);
                }
                for c in consts {
                    let c = c.as_const().unwrap_or_default();
                    acc = self.add(graph, at, bin(op, Operand::Scalar(Scalar::Int(c))), scalar.clone(), &[acc]);
                }
                acc
            }
            _ => return Err(format!("the size `{e}` is not a sum of multiples of symbols")),
        };
        self.lengths.insert(e.clone(), v);
        Ok(v)
    }

    /// `v` with its positions past the real length of dim `d` replaced by `fill`.
    fn mask(
        &mut self,
        graph: &mut Graph,
        at: NodeId,
        v: ValueRef,
        d: usize,
        len: &SymExpr,
        fill: Scalar,
    ) -> Result<ValueRef, String> {
        let ty = Self::ty(graph, v);
        let size = ty.dims[d].as_static().ok_or("not specialized")?;
        let real = self.length(graph, at, len)?;
        let iota = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(size), step: Scalar::Int(1) });
        let iota = self.add(graph, at, iota, TensorType::new(DType::I64, &[size]), &[]);
        let mut shape = vec![1i64; ty.rank()];
        shape[d] = size;
        let view = Op::View(View { size: shape.iter().map(|&s| Dim::Static(s)).collect() });
        let iota = self.add(graph, at, view, TensorType::new(DType::I64, &shape), &[iota]);
        let lt = Op::Binary(Binary { op: BinaryOp::Lt, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let valid = self.add(graph, at, lt, TensorType::new(DType::Bool, &shape), &[iota, real]);
        let select = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(fill) });
        self.masks += 1;
        Ok(self.add(graph, at, select, ty, &[valid, v]))
    }

    /// Masks input `slot` of `id` along its dynamic dims among `dims` (input dims).
    fn mask_input(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        slot: usize,
        dims: &[usize],
        fill: Scalar,
    ) -> Result<(), String> {
        let v = graph.inputs(id)[slot];
        let dd = Self::dyn_dims(graph, v);
        let mut cur = v;
        for d in dims {
            if let Some(len) = dd.get(d) {
                cur = self.mask(graph, id, cur, *d, len, fill)?;
            }
        }
        if cur != v {
            graph.set_input(id, slot as u16, cur);
        }
        Ok(())
    }

    /// Handles one node; `Err` names why it cannot be made safe.
    fn visit(&mut self, graph: &mut Graph, id: NodeId) -> Result<(), String> {
        let node = graph.node(id).clone();
        let ins = graph.inputs(id);
        let in_dyn: Vec<DynDims> = ins.iter().map(|&v| Self::dyn_dims(graph, v)).collect();
        let out_dyn: Vec<DynDims> =
            (0..node.outputs.len()).map(|s| Self::dyn_dims(graph, ValueRef { node: id, slot: s as u16 })).collect();
        self.track_positions(graph, id, &node, &in_dyn, &out_dyn);
        if matches!(node.op, Op::SymSize(_) | Op::SymInt(_)) {
            return self.real_size(graph, id, &in_dyn);
        }
        if in_dyn.iter().chain(&out_dyn).all(BTreeMap::is_empty) {
            return Ok(());
        }
        self.carry_scattered(graph, id, &node)?;
        match node.op.def().under_padding() {
            Padding::Exact => Ok(()),
            Padding::BatchRows => Self::batch_rows_only(&in_dyn),
            Padding::Rule => self.rule(graph, id, &node, &in_dyn, &out_dyn),
            Padding::Refused => Err(REFUSED.into()),
        }
    }

    /// The rules of the ops whose padding needs one ([`Padding::Rule`]).
    fn rule(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        node: &Node,
        in_dyn: &[DynDims],
        out_dyn: &[DynDims],
    ) -> Result<(), String> {
        let ins = graph.inputs(id);
        let rank = |slot: usize| Self::ty(graph, ins[slot]).rank();
        match &node.op {
            Op::View(_) => self.check_view(graph, id),
            Op::Slice(Slice { dim, step, .. }) => {
                let d = norm_dim(*dim, rank(0));
                let original = node.symbolic.as_ref().map_or(&node.op, |s| &s.op);
                let fixed_start = matches!(original, Op::Slice(Slice { start: Dim::Static(s), .. }) if *s >= 0);
                if !in_dyn[0].contains_key(&d) || (fixed_start && *step == 1) {
                    Ok(())
                } else {
                    Err("slices a dynamic dim from a size-dependent start or with a step".into())
                }
            }
            Op::Select(Select { dim, index }) => {
                let d = norm_dim(*dim, rank(0));
                match in_dyn[0].get(&d).cloned() {
                    None => Ok(()),
                    Some(len) if *index >= 0 && self.min_of(&len).is_some_and(|m| *index < m) => Ok(()),
                    Some(len) if *index < 0 && self.min_of(&len).is_some_and(|m| -*index <= m) => {
                        self.select_from_end(graph, id, d, &len, *index)
                    }
                    Some(_) => Err("selects an index of a dynamic dim that is not valid at every size".into()),
                }
            }
            Op::Cat(Cat { dim }) => {
                let d = norm_dim(*dim, rank(0));
                let pieces: Vec<bool> = in_dyn.iter().map(|dd| dd.contains_key(&d)).collect();
                let first_dynamic = pieces.iter().position(|&p| p).unwrap_or(pieces.len());
                if pieces[first_dynamic..].iter().filter(|&&p| p).count() <= 1 && pieces.last() == Some(&true)
                    || !out_dyn[0].contains_key(&d)
                {
                    Ok(())
                } else {
                    Err("concatenates along a dynamic dim with a dynamic piece before the last".into())
                }
            }
            Op::LayerNorm(LayerNorm { normalized_rank, .. }) => {
                let r = rank(0);
                if in_dyn[0].keys().any(|&d| d + normalized_rank >= r) {
                    Err("normalizes over a dynamic dim".into())
                } else if node.outputs.len() > 1 && graph.users(id).iter().any(|u| u.2 > 0) {
                    Err("its mean/rstd outputs are used".into())
                } else {
                    Ok(())
                }
            }
            Op::Index(Index { present }) => self.check_index(graph, id, present, &in_dyn[0]),
            Op::IndexPut(IndexPut { present, .. }) => self.index_put(graph, id, present, in_dyn),
            Op::SplitWithSizes(SplitWithSizes { dim, .. }) if !in_dyn[0].contains_key(&norm_dim(*dim, rank(0))) => {
                Ok(())
            }
            Op::Gather(Gather { dim }) | Op::IndexSelect(IndexSelect { dim }) => {
                let d = norm_dim(*dim, rank(0));
                match (in_dyn[0].get(&d), self.positions.get(&ins[1])) {
                    (None, _) => Ok(()),
                    (Some(len), Some((_, e))) if e == len => Ok(()),
                    _ => Err(format!("gathers along the dynamic dim {d} with indices that are not positions")),
                }
            }
            Op::Mm(Mm) => self.contract(graph, id, (0, 1), (1, 0)),
            Op::Addmm(_) => self.contract(graph, id, (1, 1), (2, 0)),
            Op::Bmm(Bmm) => self.contract(graph, id, (0, 2), (1, 1)),
            Op::Softmax(Softmax { dim, .. }) => {
                self.mask_input(graph, id, 0, &[norm_dim(*dim, rank(0))], Scalar::Float(f64::NEG_INFINITY))
            }
            Op::Reduce(Reduce { op, dims, .. }) => self.reduce(graph, id, (*op, dims), &in_dyn[0]),
            // Past the real size, the identity of the extremum in the operand's dtype: ties go
            // to the first index, so a padded position is never chosen.
            Op::ArgReduce(ArgReduce { op, dim: Some(dim), .. }) => {
                let extremum = if *op == ArgReduceOp::Argmax { ReduceOp::Max } else { ReduceOp::Min };
                let fill = extremum.identity(graph.value_type(graph.inputs(id)[0]).dtype);
                self.mask_input(graph, id, 0, &[norm_dim(*dim, rank(0))], fill)
            }
            Op::ExtremumDim(ExtremumDim { max, dim, .. }) => {
                let extremum = if *max { ReduceOp::Max } else { ReduceOp::Min };
                let fill = extremum.identity(graph.value_type(graph.inputs(id)[0]).dtype);
                self.mask_input(graph, id, 0, &[norm_dim(*dim, rank(0))], fill)
            }
            _ => Err(REFUSED.into()),
        }
    }

    /// `self[indices] = values` with index tensors (and values) padded along a dynamic dim, into
    /// a `self` with none (a KV cache written at a prompt's positions): the padded indices are
    /// set past the end of their dim, so that the scatter drops their updates instead of writing
    /// padding at position 0.
    fn index_put(&mut self, graph: &mut Graph, id: NodeId, present: &[bool], in_dyn: &[DynDims]) -> Result<(), String> {
        if !in_dyn[0].is_empty() {
            return Err("writes into a tensor with a dynamic dim".into());
        }
        let dims = Self::ty(graph, graph.inputs(id)[0]).dims;
        let indexed = present.iter().enumerate().filter(|(_, &p)| p).map(|(d, _)| d);
        for (slot, d) in (1..).zip(indexed) {
            let past_end = dims[d].as_static().ok_or("not specialized")?;
            let dynamic: Vec<usize> = in_dyn[slot].keys().copied().collect();
            self.mask_input(graph, id, slot, &dynamic, Scalar::Int(past_end))?;
        }
        Ok(())
    }

    /// Ops that compute each batch row on its own are exact under padding when only the batch
    /// (dim 0 of the first operand) is dynamic and the other operands (weights) are static.
    fn batch_rows_only(in_dyn: &[DynDims]) -> Result<(), String> {
        if in_dyn[0].keys().all(|&d| d == 0) && in_dyn[1..].iter().all(BTreeMap::is_empty) {
            Ok(())
        } else {
            Err("is dynamic along a dim other than the batch (dim 0), which it mixes".into())
        }
    }

    /// Scattered dims (see [`Masker::check_view`]) pass through element-wise ops and the rows
    /// of matmuls; any other reader of one is refused.
    fn carry_scattered(&mut self, graph: &Graph, id: NodeId, node: &Node) -> Result<(), String> {
        let ins = graph.inputs(id);
        let rank = node.outputs.first().map_or(0, TensorType::rank);
        let mut carried = Vec::new();
        for (slot, v) in ins.iter().enumerate() {
            let dims: Vec<(usize, Vec<SymExpr>)> =
                self.scattered.range((*v, 0)..=(*v, usize::MAX)).map(|((_, d), f)| (*d, f.clone())).collect();
            for (d, f) in dims {
                let out_dim = match &node.op {
                    op if op.is_elementwise() || matches!(op, Op::Dropout(_)) => {
                        Some(d + rank - Self::ty(graph, *v).rank())
                    }
                    Op::Mm(_) if slot == 0 && d == 0 => Some(0),
                    Op::Addmm(_) if slot == 1 && d == 0 => Some(0),
                    Op::View(_) => None,
                    _ => return Err("reads a dim that merges a dynamic size under static ones".into()),
                };
                if let Some(o) = out_dim {
                    carried.push((o, f));
                }
            }
        }
        for (d, f) in carried {
            self.scattered.insert((ValueRef { node: id, slot: 0 }, d), f);
        }
        Ok(())
    }

    /// `x.select(d, -k)` on a dynamic dim: the index counts from the real end (`len - k`), read
    /// with `index_select` and the selected dim dropped.
    fn select_from_end(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        d: usize,
        len: &SymExpr,
        index: i64,
    ) -> Result<(), String> {
        let x = graph.inputs(id)[0];
        let real = self.length(graph, id, len)?;
        let scalar = TensorType::new(DType::I64, &[]);
        let add = Op::Binary(Binary {
            op: BinaryOp::Add,
            lhs: Operand::Tensor,
            rhs: Operand::Scalar(Scalar::Int(index)),
            alpha: None,
        });
        let at = self.add(graph, id, add, scalar, &[real]);
        let one = Op::View(View { size: vec![Dim::Static(1)] });
        let at = self.add(graph, id, one, TensorType::new(DType::I64, &[1]), &[at]);
        let mut picked = Self::ty(graph, x);
        picked.dims[d] = Dim::Static(1);
        let row = self.add(graph, id, Op::IndexSelect(IndexSelect { dim: d as i64 }), picked, &[x, at]);
        let out = graph.node(id).outputs[0].clone();
        let view = Op::View(View { size: out.dims.clone() });
        let result = self.add(graph, id, view, out, &[row]);
        graph.replace_uses(ValueRef { node: id, slot: 0 }, result);
        Ok(())
    }

    /// The smallest value `len` takes in the symbols' ranges (its value at every symbol's
    /// minimum; sizes grow with their symbols).
    fn min_of(&self, len: &SymExpr) -> Option<i64> {
        len.eval(&self.smallest)
    }

    /// Values equal to their own position along a dynamic dim: `arange(0, s)`, then
    /// reshaped, converted or with 0 added.
    fn track_positions(&mut self, graph: &Graph, id: NodeId, node: &Node, in_dyn: &[DynDims], out_dyn: &[DynDims]) {
        let out = ValueRef { node: id, slot: 0 };
        let ins = graph.inputs(id);
        let source = ins.first().and_then(|v| self.positions.get(v).cloned());
        let tracked = match (&node.op, source) {
            (Op::ArangeSym(ArangeSym { start: 0, step: 1, .. }), _) => out_dyn[0].get(&0).map(|e| (0, e.clone())),
            (Op::Arange(Arange { start: Scalar::Int(0), step: Scalar::Int(1), .. }), _) => {
                out_dyn[0].get(&0).map(|e| (0, e.clone()))
            }
            (Op::Unsqueeze(Unsqueeze { dim }), Some((d, e))) => {
                let at = norm_dim(*dim, node.outputs[0].rank());
                Some((if d >= at { d + 1 } else { d }, e))
            }
            (Op::Convert(Convert) | Op::Identity(Identity), Some(p)) => Some(p),
            (
                Op::Binary(Binary {
                    op: BinaryOp::Add | BinaryOp::Sub,
                    lhs: Operand::Tensor,
                    rhs: Operand::Scalar(Scalar::Int(0)),
                    ..
                }),
                Some(p),
            ) => Some(p),
            (Op::View(_) | Op::Expand(_), Some((_, e))) => {
                // Kept when exactly one output dim has the length (the others being static).
                let dims: Vec<usize> = out_dyn[0].iter().filter(|(_, x)| **x == e).map(|(d, _)| *d).collect();
                match dims[..] {
                    [d] if out_dyn[0].len() == 1 && in_dyn[0].len() == 1 => Some((d, e)),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(p) = tracked {
            self.positions.insert(out, p);
        }
    }

    /// `sym_size` and size arithmetic (`SymInt`): their values become the real sizes.
    fn real_size(&mut self, graph: &mut Graph, id: NodeId, in_dyn: &[DynDims]) -> Result<(), String> {
        let node = graph.node(id);
        let len = match (&node.op, node.symbolic.as_ref().map(|s| &s.op)) {
            (Op::SymSize(SymSize { dim }), _) => {
                let rank = Self::ty(graph, graph.inputs(id)[0]).rank();
                in_dyn[0].get(&norm_dim(*dim, rank)).cloned()
            }
            (Op::SymInt(_), Some(Op::SymInt(SymInt { value: Dim::Sym(e) }))) => Some(e.clone()),
            _ => None,
        };
        let Some(len) = len else { return Ok(()) };
        if graph.users(id).is_empty() && !graph.is_output(id) {
            return Ok(());
        }
        let real = self.length(graph, id, &len)?;
        graph.replace_uses(ValueRef { node: id, slot: 0 }, real);
        Ok(())
    }

    /// The symbolic dims of `v` (its specialized dims when it has no record).
    fn symbolic_dims(graph: &Graph, v: ValueRef) -> Vec<SymExpr> {
        let node = graph.node(v.node);
        let ty = node.symbolic.as_ref().map_or(&node.outputs[usize::from(v.slot)], |s| &s.outputs[usize::from(v.slot)]);
        ty.dims.iter().map(Dim::to_expr).collect()
    }

    /// The values of `dims` at the bucket's sizes and at every symbol's minimum.
    fn at_two_sizes(&self, dims: &[SymExpr]) -> Option<[Vec<i64>; 2]> {
        let eval = |env: &BTreeMap<String, i64>| dims.iter().map(|e| e.eval(env)).collect::<Option<Vec<i64>>>();
        Some([eval(&self.spec.values)?, eval(&self.smallest)?])
    }

    /// Views regroup dims. Each group of input dims that becomes a group of output dims (equal
    /// products at two sizes) must keep the valid positions findable: a dim kept whole; dims
    /// merged with the dynamic one outermost (`[s, 64] → [64·s]`, still a prefix); a dynamic
    /// dim merged under static ones (`[2, s] → [2·s]`, valid rows scattered: only
    /// position-wise ops may follow, until a view splits it back into the same dims); a prefix
    /// split with the dynamic part outermost.
    fn check_view(&mut self, graph: &Graph, id: NodeId) -> Result<(), String> {
        let x = graph.inputs(id)[0];
        let out = ValueRef { node: id, slot: 0 };
        let (a, b) = (Self::symbolic_dims(graph, x), Self::symbolic_dims(graph, out));
        let (Some(av), Some(bv)) = (self.at_two_sizes(&a), self.at_two_sizes(&b)) else {
            return Err("cannot evaluate its sizes".into());
        };
        let dynamic = |e: &SymExpr| !e.symbols().is_empty();
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            // One group: the shortest runs of dims with equal products at both sizes.
            let (i0, j0) = (i, j);
            let (mut pa, mut pb) = ([1i64, 1], [1i64, 1]);
            loop {
                let take_a = i < a.len() && (j == b.len() || pa[0] < pb[0] || (pa[0] == pb[0] && i == i0));
                if take_a {
                    pa = [pa[0] * av[0][i], pa[1] * av[1][i]];
                    i += 1;
                } else if j < b.len() {
                    pb = [pb[0] * bv[0][j], pb[1] * bv[1][j]];
                    j += 1;
                } else {
                    break;
                }
                if (pa == pb && i > i0 && j > j0) || (i == a.len() && j == b.len()) {
                    break;
                }
            }
            if pa != pb {
                return Err("regroups dims whose sizes differ at another size".into());
            }
            let (ga, gb) = (i0..i, j0..j);
            let scattered_in: Option<Vec<SymExpr>> = ga.clone().find_map(|d| self.scattered.get(&(x, d)).cloned());
            let dyn_a: Vec<usize> = ga.clone().filter(|&d| dynamic(&a[d])).collect();
            let dyn_b: Vec<usize> = gb.clone().filter(|&d| dynamic(&b[d])).collect();
            // The outermost dim of a group that is dynamic or not 1.
            let outer = |r: std::ops::Range<usize>, e: &[SymExpr], v: &[Vec<i64>; 2]| {
                r.clone().find(|&d| dynamic(&e[d]) || v[0][d] != 1 || v[1][d] != 1)
            };
            if dyn_a.is_empty() && dyn_b.is_empty() {
                continue;
            }
            let same = |p: usize, q: usize| av[0][p] == bv[0][q] && av[1][p] == bv[1][q];
            match (ga.len(), gb.len(), scattered_in) {
                (1, 1, Some(f)) => {
                    self.scattered.insert((out, gb.start), f);
                }
                (1, 1, None) if same(ga.start, gb.start) => {}
                // Merge, dynamic dim outermost: a prefix.
                (_, 1, None) if dyn_a.len() == 1 && outer(ga.clone(), &a, &av) == Some(dyn_a[0]) => {}
                // Merge under static dims: scattered.
                (_, 1, None) => {
                    self.scattered.insert((out, gb.start), a[ga.clone()].to_vec());
                }
                // Split back into the dims that were merged.
                (1, _, Some(f))
                    if f.len() == gb.len()
                        && f.iter().zip(gb.clone()).all(|(e, q)| {
                            let [x0, x1] = self.at_two_sizes(std::slice::from_ref(e)).unwrap_or_default();
                            x0 == [bv[0][q]] && x1 == [bv[1][q]]
                        }) => {}
                // Split of a prefix, dynamic part outermost.
                (1, _, None) if dyn_b.len() == 1 && outer(gb.clone(), &b, &bv) == Some(dyn_b[0]) => {}
                _ => return Err(format!("regroups dynamic dims ({} into {})", list(&a[ga]), list(&b[gb]))),
            }
        }
        Ok(())
    }

    /// `index(x, indices…)`: every indexed dynamic dim of `x` is indexed by positions.
    fn check_index(&self, graph: &Graph, id: NodeId, present: &[bool], x_dyn: &DynDims) -> Result<(), String> {
        let ins = graph.inputs(id);
        let mut next = 1;
        for (d, &p) in present.iter().enumerate() {
            if !p {
                continue;
            }
            let idx = ins[next];
            next += 1;
            if let Some(len) = x_dyn.get(&d) {
                match self.positions.get(&idx) {
                    Some((_, e)) if e == len => {}
                    _ => return Err(format!("gathers along the dynamic dim {d} with indices that are not positions")),
                }
            }
        }
        Ok(())
    }

    /// A matmul contracting `lhs.1` with `rhs.1` (`(slot, dim)` each): a dynamic contracting dim
    /// gets both operands zeroed past its real length.
    fn contract(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        lhs: (usize, usize),
        rhs: (usize, usize),
    ) -> Result<(), String> {
        let zero = Scalar::Float(0.0);
        self.mask_input(graph, id, lhs.0, &[lhs.1], zero)?;
        self.mask_input(graph, id, rhs.0, &[rhs.1], zero)
    }

    /// Reductions: dynamic reduced dims masked with the identity; `mean` divides the masked
    /// sum by the real count.
    fn reduce(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (op, dims): (ReduceOp, &[i64]),
        x_dyn: &DynDims,
    ) -> Result<(), String> {
        let x = graph.inputs(id)[0];
        let ty = Self::ty(graph, x);
        let rank = ty.rank();
        let reduced: Vec<usize> =
            if dims.is_empty() { (0..rank).collect() } else { dims.iter().map(|&d| norm_dim(d, rank)).collect() };
        if !reduced.iter().any(|d| x_dyn.contains_key(d)) {
            return Ok(());
        }
        self.mask_input(graph, id, 0, &reduced, op.identity(ty.dtype))?;
        if op != ReduceOp::Mean {
            return Ok(());
        }
        // mean = sum / real count, the count being the product of the reduced dims' real sizes.
        let mut count = SymExpr::Int(1);
        for &d in &reduced {
            let len = x_dyn.get(&d).cloned().unwrap_or_else(|| ty.dims[d].to_expr());
            count = SymExpr::Mul(vec![count, len]).simplify();
        }
        let real = self.length(graph, id, &count)?;
        if let Op::Reduce(Reduce { op, .. }) = &mut graph.node_mut(id).op {
            *op = ReduceOp::Sum;
        }
        let out_ty = graph.node(id).outputs[0].clone();
        let users = graph.users(id);
        let sum = ValueRef { node: id, slot: 0 };
        let realf = self.add(graph, id, Op::Convert(Convert), TensorType::new(out_ty.dtype, &[]), &[real]);
        let div = Op::Binary(Binary { op: BinaryOp::Div, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let mean = self.add(graph, id, div, out_ty, &[sum, realf]);
        for (user, slot, _) in users {
            graph.set_input(user, slot, mean);
        }
        graph.redirect_outputs(sum, mean);
        Ok(())
    }
}

/// The ATen target, or the IR op's name for nodes a pass made.
fn op_name(node: &Node) -> String {
    if node.origin.target.is_empty() {
        node.op.name()
    } else {
        node.origin.target.clone()
    }
}

impl Pass for BucketMasks {
    fn name(&self) -> &'static str {
        "bucket_masks"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let Some(spec) = &self.bucket else { return Ok(Changed::No) };
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let mut m = Masker {
            spec,
            smallest: spec.bounds.iter().map(|(s, b)| (s.clone(), b.min.unwrap_or(1))).collect(),
            sizes: BTreeMap::new(),
            lengths: BTreeMap::new(),
            positions: BTreeMap::new(),
            scattered: BTreeMap::new(),
            counter: 0,
            masks: 0,
        };
        for symbol in spec.values.keys() {
            let op = Op::Input(InputKind::Size { symbol: symbol.clone() });
            let node = graph.add_input(Node::new(format!("size_{symbol}"), op, [TensorType::new(DType::I64, &[])]));
            m.sizes.insert(symbol.clone(), ValueRef { node, slot: 0 });
        }
        for id in order {
            m.visit(graph, id).map_err(|why| {
                let node = graph.node(id);
                let line = node.origin.source_line().map(|l| format!(" ({l})")).unwrap_or_default();
                PassError::Failed {
                    pass: "bucket_masks",
                    reason: format!("node `{}` ({}){line} {why}", node.name, op_name(node)),
                }
            })?;
        }
        cx.note(m.masks, "masks past the real sizes");
        Ok(Changed::Yes)
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::ops::{Flip, Reduce};
    use std::collections::BTreeMap;

    use super::{BucketMasks, BucketSpec};
    use crate::ir::builder::Builder;
    use crate::ir::{print, Bounds, DType, Dim, Graph, Op, ReduceOp, SymExpr, TensorType};
    use crate::pass::{Pass, PassCx};
    use crate::specialize::specialize;

    fn s() -> Dim {
        Dim::Sym(SymExpr::sym("s"))
    }

    fn f32(dims: Vec<Dim>) -> TensorType {
        TensorType { dtype: DType::F32, dims }
    }

    /// `x: f32[4, s]` through `op` (one f32 output of `out` dims), specialized at s = 8 and
    /// masked for the bucket.
    fn bucket(op: Op, out: Vec<Dim>) -> Result<Graph, String> {
        let mut b = Builder::new("t");
        let bounds = Bounds { min: Some(2), max: Some(8) };
        b.graph_mut().add_symbol("s", bounds);
        let x = b.input("x", f32(vec![Dim::Static(4), s()]));
        let y = b.op("y", op, &[x], f32(out));
        b.output(y);
        let values = BTreeMap::from([("s".to_string(), 8)]);
        let mut g = specialize(&b.finish(), &values).expect("specializes");
        let spec = BucketSpec { values, bounds: BTreeMap::from([("s".to_string(), bounds)]) };
        let mut cx = PassCx::default();
        BucketMasks { bucket: Some(spec) }.run(&mut g, &mut cx).map_err(|e| e.to_string())?;
        crate::verify(&g).expect("verifies");
        Ok(g)
    }

    /// A mean over the dynamic dim sums the real positions only and divides by the real size,
    /// which the program takes as an input.
    #[test]
    fn means_over_a_dynamic_dim_use_the_real_size() {
        let mean = Op::Reduce(Reduce { op: ReduceOp::Mean, dims: vec![1], keepdim: false, dtype: None });
        let g = bucket(mean, vec![Dim::Static(4)]).expect("safe");
        insta::assert_snapshot!(print(&g), @r#"
        graph t {
          %0 = input.user #0 : f32[4,8]  # x
          %1 = input.size s : i64[]  # size_s
          %2 = arange() {start=0, end=8, step=1} : i64[8]  # y.bucket.1
          %3 = view(%2) {size=[1, 8]} : i64[1,8]  # y.bucket.2
          %4 = lt(%3, %1) : bool[1,8]  # y.bucket.3
          %5 = where(%4, %0, 0.0) : f32[4,8]  # y.bucket.4
          %6 = reduce_sum(%5) {dims=[1], keepdim=false, dtype=none} : f32[4]  # y
          %7 = convert(%1) : f32[]  # y.bucket.5
          %8 = div(%6, %7) : f32[4]  # y.bucket.6
          return user[0] = %8
        }
        "#);
    }

    /// Flipping a padded dim would move the padding in front of the real values: refused,
    /// naming the node and the op.
    #[test]
    fn ops_with_no_padding_safe_form_are_refused() {
        let flip = Op::Flip(Flip { dims: vec![1] });
        let err = bucket(flip, vec![Dim::Static(4), s()]).expect_err("refused");
        assert!(err.contains("node `y` (flip)") && err.contains("no padding-safe form"), "{err}");
    }
}
