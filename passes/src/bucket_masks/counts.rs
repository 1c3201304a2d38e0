//! Sizes that come from data. A `nonzero` has as many rows as its operand has non-zero
//! elements; the export names that count with a symbol of its own (`u0`), bounded by the
//! operand's element count. A bucket computes at the bound (see
//! [`crate::specialize::computed_bounds`]): the rows past the real count are padding, like
//! the padding of a dim given by an input, and the real count, `sum(x != 0)`, takes the place
//! of a `Size` input wherever the masks need it. A result whose size is such a count is
//! returned at the bound, with the count after every other output (`OutputKind::Size`), so
//! the caller can cut it back. An `item()` used as a size is such a symbol too, its value
//! clamped to the range the export declares.
//!
//! The real value of any size expression is built from the `Size` inputs and those counts
//! ([`Masker::length`]); `sym_size` and size arithmetic take it ([`Masker::real_size`]).
//! Every padded size must be at its greatest at the bucket's values, or the bucket would cut
//! real rows off ([`Masker::every_real_size_fits`]).
//!
//! Along a dim of factors (`[batch·seq]` tokens, an MoE's routing mask), the coordinates a
//! `nonzero` gives are positions of the bucket's layout: they may index that dim (gather the
//! tokens, `index_add_` the results back), which is exact, and nothing else.

use std::collections::BTreeSet;

use super::{DynDims, Factors, Masker, Res};
use crate::ir::ops::{Arange, ArangeSym, Convert, Full, IndexSelect, Reduce, Select, Slice, SymInt, SymSize};
use crate::ir::{
    norm_dim, BinaryOp, DType, Dim, Graph, NodeId, Op, Operand, OutputKind, ReduceOp, Scalar, SymExpr, TensorType,
    ValueRef,
};
use crate::pass::bug;
use crate::specialize::count_symbol;

/// Why a `nonzero`'s coordinates along a merged dim cannot be used as they are.
const COORDINATES: &str =
    "uses the coordinates a `nonzero` gives along a dim that merges a dynamic size (positions of \
    the bucket's layout) other than by taking their column out to index that dim";

/// The symbols of a specialized graph whose values the program computes from data.
pub(super) fn computed_symbols(graph: &Graph) -> BTreeSet<String> {
    graph
        .node_ids()
        .filter_map(|id| graph.node(id).symbolic.as_ref().and_then(|s| count_symbol(&s.op)).map(str::to_string))
        .collect()
}

impl Masker<'_> {
    /// `nonzero(x)`: `x` read with zeros past its real sizes (a padded position is never
    /// counted; a real element keeps its coordinates in the padded layout, and row-major order
    /// over the real elements is the same), and the real count `min(sum(x != 0), bound)`
    /// recorded as the value of its symbol.
    pub(super) fn nonzero(&mut self, graph: &mut Graph, id: NodeId, in_dyn: &[DynDims]) -> Res<()> {
        if !in_dyn[0].is_empty() {
            self.columns.insert(ValueRef { node: id, slot: 0 }, in_dyn[0].clone());
        }
        let dims: Vec<usize> = in_dyn[0].keys().copied().collect();
        let x_ty = Self::ty(graph, graph.inputs(id)[0]);
        let zero = if x_ty.dtype == DType::Bool { Scalar::Bool(false) } else { Scalar::Int(0) };
        self.mask_input(graph, id, 0, &dims, zero)?;
        let symbol = graph.node(id).symbolic.as_ref().and_then(|s| count_symbol(&s.op)).map(str::to_string);
        let (Some(symbol), Some(bound)) = (symbol, graph.node(id).outputs[0].dims[0].as_static()) else {
            return Ok(());
        };
        let x = graph.inputs(id)[0];
        let shape: Vec<i64> = x_ty.dims.iter().filter_map(Dim::as_static).collect();
        let scalar = TensorType::new(DType::I64, &[]);
        let nonzero = match x_ty.dtype {
            DType::Bool => x,
            _ => {
                self.binary(graph, id, BinaryOp::Ne, Operand::Scalar(zero), &[x], TensorType::new(DType::Bool, &shape))
            }
        };
        let ones = self.add(graph, id, Op::Convert(Convert), TensorType::new(DType::I64, &shape), &[nonzero]);
        let sum = Op::Reduce(Reduce { op: ReduceOp::Sum, dims: vec![], keepdim: false, dtype: None });
        let count = self.add(graph, id, sum, scalar.clone(), &[ones]);
        let count = self.binary(graph, id, BinaryOp::Minimum, Operand::Scalar(Scalar::Int(bound)), &[count], scalar);
        self.sizes.insert(symbol, count);
        Ok(())
    }

    /// `item()` used as a size: its value, clamped to `[0, bound]`, is the symbol's real value
    /// (what is outside is refused by the caller, which gets the value unclamped).
    pub(super) fn item(&mut self, graph: &mut Graph, id: NodeId) -> Res<()> {
        let symbol = graph.node(id).symbolic.as_ref().and_then(|s| count_symbol(&s.op)).map(str::to_string);
        let Some(symbol) = symbol else { return Ok(()) };
        // Without a declared maximum, the value is only used as a number (see `computed_bounds`).
        if self.spec.bounds.get(&symbol).and_then(|b| b.max).is_none() {
            return Ok(());
        }
        let bound = *self.spec.values.get(&symbol).ok_or_else(|| bug("an item() with no bound"))?;
        let value = ValueRef { node: id, slot: 0 };
        let scalar = TensorType::new(DType::I64, &[]);
        let int = |v| Operand::Scalar(Scalar::Int(v));
        let low = self.binary(graph, id, BinaryOp::Maximum, int(0), &[value], scalar.clone());
        let real = self.binary(graph, id, BinaryOp::Minimum, int(bound), &[low], scalar);
        self.sizes.insert(symbol.clone(), real);
        self.items.insert(symbol, value);
        Ok(())
    }

    /// A `nonzero`'s coordinates along a padded dim are positions of it (see
    /// [`Masker::columns`]): the column a slice or select takes out is recorded as such. Along
    /// a merged dim they are the bucket's positions, so no other use may read them as numbers.
    pub(super) fn follow_columns(&mut self, graph: &Graph, id: NodeId) -> Res<()> {
        let ins = graph.inputs(id);
        let merged = |m: &Self, v: &ValueRef| m.columns.get(v).is_some_and(|c| c.values().any(|f| f.len() > 1));
        let refused = |m: &Self| if ins.iter().any(|v| merged(m, v)) { Err(COORDINATES.into()) } else { Ok(()) };
        let Some(columns) = ins.first().and_then(|v| self.columns.get(v)).cloned() else { return refused(self) };
        let taken = match &graph.node(id).op {
            Op::SymSize(_) => return Ok(()),
            Op::Select(Select { dim: 1 | -1, index }) if *index >= 0 => *index..*index + 1,
            Op::Slice(Slice { dim: 1 | -1, start: Dim::Static(a), end: Dim::Static(b), step: 1 }) => *a..*b,
            _ => return refused(self),
        };
        let hit: Vec<&Factors> =
            columns.iter().filter(|(c, _)| taken.contains(&(**c as i64))).map(|(_, f)| f).collect();
        match hit.as_slice() {
            [] => Ok(()),
            [f] if taken.end - taken.start == 1 => {
                self.positions.insert(ValueRef { node: id, slot: 0 }, (*f).clone());
                Ok(())
            }
            _ => refused(self),
        }
    }

    /// The real value of every computed size an output's dims use, and of every `item()`
    /// (unclamped, so that the caller can refuse a value outside its range), as outputs after
    /// all others, in symbol order; none for a program without outputs.
    pub(super) fn size_outputs(&mut self, graph: &mut Graph) -> Res<()> {
        let computed = computed_symbols(graph);
        let mut used = BTreeSet::new();
        for o in graph.outputs() {
            let Some(sym) = graph.node(o.value.node).symbolic.as_ref() else { continue };
            for d in &sym.outputs[usize::from(o.value.slot)].dims {
                if let Dim::Sym(e) = d {
                    used.extend(e.symbols().into_iter().filter(|s| computed.contains(s)));
                }
            }
        }
        used.extend(self.items.keys().cloned());
        let Some(at) = graph.outputs().first().map(|o| o.value.node) else { return Ok(()) };
        for symbol in used {
            let v = match self.items.get(&symbol) {
                Some(&raw) => raw,
                None => self.length(graph, at, &SymExpr::Sym(symbol.clone()))?,
            };
            graph.add_output(v, OutputKind::Size { symbol });
        }
        Ok(())
    }
}

impl Masker<'_> {
    /// The real value of `e` as an `i64[]` value (sums, products, `min` and `max` of symbols,
    /// and their floor division and modulo by a constant).
    pub(super) fn length(&mut self, graph: &mut Graph, at: NodeId, e: &SymExpr) -> Res<ValueRef> {
        if let Some(&v) = self.lengths.get(e) {
            return Ok(v);
        }
        let scalar = TensorType::new(DType::I64, &[]);
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
                    None => return Err(format!("`{e}` has no symbol").into()),
                };
                for t in &rest[1..] {
                    let v = self.length(graph, at, t)?;
                    acc = self.binary(graph, at, op, Operand::Tensor, &[acc, v], scalar.clone());
                }
                for c in consts {
                    let c = Operand::Scalar(Scalar::Int(c.as_const().unwrap_or_default()));
                    acc = self.binary(graph, at, op, c, &[acc], scalar.clone());
                }
                acc
            }
            SymExpr::Min(xs) | SymExpr::Max(xs) if !xs.is_empty() => {
                let op = if matches!(e, SymExpr::Min(_)) { BinaryOp::Minimum } else { BinaryOp::Maximum };
                let mut acc = self.length(graph, at, &xs[0])?;
                for x in &xs[1..] {
                    let v = self.length(graph, at, x)?;
                    acc = self.binary(graph, at, op, Operand::Tensor, &[acc, v], scalar.clone());
                }
                acc
            }
            SymExpr::FloorDiv(a, b) | SymExpr::Mod(a, b) if b.as_const().is_some_and(|c| c > 0) => {
                let op = if matches!(e, SymExpr::FloorDiv(..)) { BinaryOp::FloorDiv } else { BinaryOp::Remainder };
                let a = self.length(graph, at, a)?;
                let c = Operand::Scalar(Scalar::Int(b.as_const().unwrap_or(1)));
                self.binary(graph, at, op, c, &[a], scalar)
            }
            _ => return Err(format!("the size `{e}` is not a sum of multiples of symbols").into()),
        };
        self.lengths.insert(e.clone(), v);
        Ok(v)
    }

    /// An `arange` from a symbolic size (`arange(past, past + t)`): the bucket counts it from
    /// the padded size, so it counts from 0 instead and the real size is added: real positions
    /// hold eager's values, padded ones go on past them.
    pub(super) fn arange_from_real(&mut self, graph: &mut Graph, id: NodeId, start: &SymExpr) -> Res<()> {
        let node = graph.node(id).clone();
        let Op::ArangeSym(ArangeSym { start: Dim::Static(from), end: Dim::Static(to), step }) = node.op else {
            return Err("an arange of symbolic sizes was not specialized".into());
        };
        let ty = node.outputs[0].clone();
        let end = to.checked_sub(from).ok_or("its length overflows")?;
        let counted = ArangeSym { start: Dim::Static(0), end: Dim::Static(end), step };
        let counted = self.add(graph, id, Op::ArangeSym(counted), ty.clone(), &[]);
        let mut real = self.length(graph, id, start)?;
        if ty.dtype != DType::I64 {
            real = self.add(graph, id, Op::Convert(Convert), TensorType::new(ty.dtype, &[]), &[real]);
        }
        let sum = self.binary(graph, id, BinaryOp::Add, Operand::Tensor, &[counted, real], ty);
        graph.replace_uses(ValueRef { node: id, slot: 0 }, sum);
        Ok(())
    }

    /// A slice at a symbolic start of a dim that is not padded (`bias[:, :, past:past + t]`, a
    /// position table cut at the past's length): the bucket would cut it at the padded start,
    /// so it reads from the real start instead, rows `start + i·step` clamped into the dim (those
    /// past the real length are padding). The other dims keep their layouts.
    pub(super) fn slice_from_real(&mut self, graph: &mut Graph, id: NodeId, start: &SymExpr) -> Res<()> {
        let node = graph.node(id).clone();
        let Op::Slice(Slice { dim, start: Dim::Static(_), step, .. }) = node.op else {
            return Err("a slice at a symbolic start was not specialized".into());
        };
        let x = graph.inputs(id)[0];
        let d = norm_dim(dim, Self::ty(graph, x).rank());
        let size = Self::ty(graph, x).dims[d].as_static().ok_or("not specialized")?;
        let out = node.outputs[0].clone();
        let n = out.dims[d].as_static().ok_or("not specialized")?;
        let rows_ty = TensorType::new(DType::I64, &[n]);
        let to = n.checked_mul(step).ok_or("its length overflows")?;
        let counted = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(to), step: Scalar::Int(step) });
        let counted = self.add(graph, id, counted, rows_ty.clone(), &[]);
        let real = self.length(graph, id, start)?;
        let rows = self.binary(graph, id, BinaryOp::Add, Operand::Tensor, &[counted, real], rows_ty.clone());
        let rows = self.binary(graph, id, BinaryOp::Minimum, Operand::Scalar(Scalar::Int(size - 1)), &[rows], rows_ty);
        let moved = self.add(graph, id, Op::IndexSelect(IndexSelect { dim: d as i64 }), out, &[x, rows]);
        graph.node_mut(moved.node).symbolic = node.symbolic.clone();
        let others: Vec<(usize, Factors)> =
            self.merged.range((x, 0)..=(x, usize::MAX)).map(|(&(_, e), f)| (e, f.clone())).collect();
        self.merged.extend(others.into_iter().map(|(e, f)| ((moved, e), f)));
        graph.replace_uses(ValueRef { node: id, slot: 0 }, moved);
        Ok(())
    }

    /// Padding holds a real size only from below: each symbolic size of `id`'s results must be
    /// at its greatest where the bucket's symbols are at theirs. A size that shrinks as a symbol
    /// grows (`t[n:]` of a fixed `t` has `10 - n` rows) is smallest at the bucket's own value,
    /// and a bucket would cut real rows off: refused, as is one whose greatest value cannot
    /// be shown.
    pub(super) fn every_real_size_fits(&self, graph: &Graph, id: NodeId) -> Res<()> {
        let Some(sym) = graph.node(id).symbolic.as_ref() else { return Ok(()) };
        for (slot, ty) in sym.outputs.iter().enumerate() {
            for (d, dim) in ty.dims.iter().enumerate() {
                let Dim::Sym(e) = dim else { continue };
                // Symbols that are not the bucket's (a pieces marker) have no range here.
                let (Some(padded), true) = (self.padded(e), e.symbols().iter().all(|s| self.ranges.contains_key(s)))
                else {
                    continue;
                };
                let at = || format!("has a dim of size `{e}` (result {slot}, dim {d}) that");
                match e.greatest(&self.ranges) {
                    Some(greatest) if greatest <= padded => {}
                    Some(greatest) => {
                        return Err(format!(
                            "{} is {greatest} at a real size below this bucket's but {padded} at the bucket: a size \
                             that shrinks as {} grows cannot be padded",
                            at(),
                            e.symbols().join(", ")
                        )
                        .into())
                    }
                    None => {
                        return Err(format!(
                            "{} may be larger at a real size below this bucket's than at the bucket ({padded}), and \
                             that cannot be shown false",
                            at()
                        )
                        .into())
                    }
                }
            }
        }
        Ok(())
    }

    /// `sym_size` and size arithmetic (`SymInt`): their values become the real sizes.
    pub(super) fn real_size(&mut self, graph: &mut Graph, id: NodeId) -> Res<()> {
        let node = graph.node(id);
        let len = match (&node.op, node.symbolic.as_ref().map(|s| &s.op)) {
            (Op::SymSize(SymSize { dim }), _) => {
                let x = graph.inputs(id)[0];
                let rank = Self::ty(graph, x).rank();
                let sym = graph.node(x.node).symbolic.as_ref().map(|s| &s.outputs[usize::from(x.slot)]);
                sym.and_then(|t| t.dims.get(norm_dim(*dim, rank))).and_then(|d| match d {
                    Dim::Sym(e) => Some(e.clone()),
                    Dim::Static(_) => None,
                })
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
}
