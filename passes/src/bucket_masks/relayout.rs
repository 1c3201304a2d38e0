//! One padded dim laid out two ways. A reshape that merges `[batch, heads, t]` into
//! `[batch·heads·t]` with the batch outermost keeps the real rows a prefix; a `repeat` or a
//! permute before the merge puts the batch inside (`[heads, batch, t]`), where the real rows are
//! not a prefix. An op that pairs the rows of two such operands position by position (a
//! `gather` of relative-position embeddings by their buckets, ProphetNet's) would pair
//! different real rows in a bucket. The operand of factors is gathered into the prefix layout
//! first: the real row `r` at bucket position `p = r`, unravelled by the real sizes into
//! `(c_1, …, c_k)`, is at `Σ c_i · Π_{j>i} F_j` in the factors' layout (`F`: the padded sizes);
//! positions past the real rows, padding, read a row clamped into the dim.
//!
//! A dim of pieces (a `cat` of a past and new keys: `[p | t]`, each padded) meets a prefix of
//! the same real size (a causal mask cut at `p + t`) the same way: real row `r` is in the piece
//! whose real rows it passes, at that piece's start in the bucket plus its place in the piece.
//! A value returned with such a dim is gathered into a prefix before it is returned.

use super::{Factors, Masker, Res};
use crate::ir::ops::{Arange, IndexSelect, Where};
use crate::ir::{BinaryOp, DType, Graph, NodeId, Op, Operand, Scalar, SymExpr, TensorType, ValueRef};
use crate::pass::{bug, Fail};

impl Masker<'_> {
    /// True when `prefix`, one factor, is the real size that `layout` (several factors, or
    /// pieces each a prefix) makes, at the same size in the bucket: the same rows in two
    /// layouts.
    pub(super) fn relayout_of(&self, prefix: &[SymExpr], layout: &[SymExpr]) -> bool {
        let [whole] = prefix else { return false };
        let layered = match self.pieces_of(layout) {
            Some(pieces) => pieces.iter().all(|p| p.len() == 1),
            None => layout.len() > 1,
        };
        let same_size = self.layout_size(layout).ok().is_some_and(|n| self.padded(whole) == Some(n));
        let real = self.real_length(layout);
        self.pieces_of(prefix).is_none() && layered && same_size && self.same_factors(prefix, &[real])
    }

    /// The bucket's size of a dim laid out as `layout`: its factors' product, or its pieces'
    /// sizes added.
    fn layout_size(&self, layout: &[SymExpr]) -> Res<i64> {
        match self.pieces_of(layout) {
            Some(pieces) => pieces.iter().try_fold(0i64, |n, p| {
                n.checked_add(self.product(p)?).ok_or_else(|| Fail::from("a padded dim's size overflows"))
            }),
            None => self.product(layout),
        }
    }

    /// The real size of a dim laid out as `layout`.
    fn real_length(&self, layout: &[SymExpr]) -> SymExpr {
        match self.pieces_of(layout) {
            Some(pieces) => {
                SymExpr::Add(pieces.iter().map(|p| SymExpr::Mul(p.clone()).simplify()).collect()).simplify()
            }
            None => SymExpr::Mul(layout.to_vec()).simplify(),
        }
    }

    /// Replaces input `slot` of `id`, whose dim `d` is padded as `layout`, by its rows gathered
    /// into the layout of `prefix` (see the module docs).
    pub(super) fn relayout_input(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (slot, d): (usize, usize),
        layout: &[SymExpr],
        prefix: &[SymExpr],
    ) -> Res<()> {
        let v = graph.inputs(id)[slot];
        let moved = self.relayout(graph, id, (v, d), layout, prefix)?;
        graph.set_input(id, slot as u16, moved);
        Ok(())
    }

    /// Every result whose dim is laid out other than as a prefix of its size (pieces, or
    /// factors making it) gathered into that prefix before it is returned; the others are left
    /// to `check_outputs`.
    pub(super) fn relayout_outputs(&mut self, graph: &mut Graph) -> Res<()> {
        let returned: Vec<ValueRef> = graph.outputs().iter().map(|o| o.value).collect();
        for v in returned {
            let laid: Vec<(usize, Factors)> =
                self.merged.range((v, 0)..=(v, usize::MAX)).map(|(&(_, d), f)| (d, f.clone())).collect();
            let mut value = v;
            for (d, layout) in laid {
                let prefix = [self.real_length(&layout)];
                if self.relayout_of(&prefix, &layout) {
                    value = self.relayout(graph, v.node, (value, d), &layout, &prefix)?;
                }
            }
            if value != v {
                graph.redirect_outputs(v, value);
            }
        }
        Ok(())
    }

    /// `v` with its dim `d`, laid out as `layout`, gathered into the layout of `prefix`.
    fn relayout(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (v, d): (ValueRef, usize),
        layout: &[SymExpr],
        prefix: &[SymExpr],
    ) -> Res<ValueRef> {
        let ty = Self::ty(graph, v);
        let n = ty.dims[d].as_static().ok_or("not specialized")?;
        let rows = TensorType::new(DType::I64, &[n]);
        let arange = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(n), step: Scalar::Int(1) });
        let r = self.add(graph, id, arange, rows.clone(), &[]);
        let at = match self.pieces_of(layout) {
            Some(pieces) => self.rows_of_pieces(graph, id, r, &pieces)?,
            None => self.rows_of_factors(graph, id, r, layout)?,
        };
        let at = self.binary(graph, id, BinaryOp::Minimum, Operand::Scalar(Scalar::Int(n - 1)), &[at], rows);
        let moved = self.add(graph, id, Op::IndexSelect(IndexSelect { dim: d as i64 }), ty, &[v, at]);
        // The other dims keep their layouts.
        let others: Vec<(usize, Factors)> = self
            .merged
            .range((v, 0)..=(v, usize::MAX))
            .filter(|e| e.0 .1 != d)
            .map(|(&(_, e), f)| (e, f.clone()))
            .collect();
        self.merged.extend(others.into_iter().map(|(e, f)| ((moved, e), f)));
        self.merged.insert((moved, d), Factors::from(prefix));
        Ok(moved)
    }

    /// Where real row `r` is in a dim of pieces: in the piece whose real rows it passes, at
    /// that piece's start in the bucket plus its place among the piece's real rows.
    fn rows_of_pieces(&mut self, graph: &mut Graph, id: NodeId, r: ValueRef, pieces: &[Factors]) -> Res<ValueRef> {
        let rows = Self::ty(graph, r);
        let flags = TensorType { dtype: DType::Bool, ..rows.clone() };
        let (mut at, mut real_start, mut padded_start): (Option<ValueRef>, Vec<SymExpr>, i64) = (None, vec![], 0);
        for piece in pieces {
            let before = SymExpr::Add(real_start.clone()).simplify();
            // r - (real rows before the piece) + (the piece's start in the bucket).
            let local = match real_start.is_empty() {
                true => r,
                false => self.by_size(graph, id, (BinaryOp::Sub, r), &before)?,
            };
            let local = match padded_start {
                0 => local,
                k => self.binary(graph, id, BinaryOp::Add, Operand::Scalar(Scalar::Int(k)), &[local], rows.clone()),
            };
            at = Some(match at {
                None => local,
                Some(earlier) => {
                    let length = self.length(graph, id, &before)?;
                    let inside = self.binary(graph, id, BinaryOp::Lt, Operand::Tensor, &[r, length], flags.clone());
                    let select = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor });
                    self.add(graph, id, select, rows.clone(), &[inside, earlier, local])
                }
            });
            real_start.push(SymExpr::Mul(piece.clone()).simplify());
            padded_start = padded_start.checked_add(self.product(piece)?).ok_or("a padded dim's size overflows")?;
        }
        at.ok_or_else(|| bug("a dim of no pieces"))
    }

    /// Where real row `r` is in a dim of factors (see the module docs).
    fn rows_of_factors(&mut self, graph: &mut Graph, id: NodeId, r: ValueRef, factors: &[SymExpr]) -> Res<ValueRef> {
        let rows = Self::ty(graph, r);
        let (mut at, mut padded_stride, mut real_stride): (Option<ValueRef>, i64, Vec<SymExpr>) = (None, 1, vec![]);
        for f in factors.iter().rev() {
            // c = (r // real stride) % real size, at c · padded stride.
            let c = self.by_size(graph, id, (BinaryOp::FloorDiv, r), &SymExpr::Mul(real_stride.clone()).simplify())?;
            let c = self.by_size(graph, id, (BinaryOp::Remainder, c), f)?;
            let term = match padded_stride {
                1 => c,
                k => self.binary(graph, id, BinaryOp::Mul, Operand::Scalar(Scalar::Int(k)), &[c], rows.clone()),
            };
            at = Some(match at {
                None => term,
                Some(a) => self.binary(graph, id, BinaryOp::Add, Operand::Tensor, &[a, term], rows.clone()),
            });
            let size = self.padded(f).ok_or_else(|| bug("a factor with no size in the bucket"))?;
            padded_stride = padded_stride.checked_mul(size).ok_or("a padded dim's size overflows")?;
            real_stride.push(f.clone());
        }
        at.ok_or_else(|| bug("a layout of no factors"))
    }

    /// `op(x, e)` for the real value of size `e` (a constant stays a constant; 1 divides nothing).
    fn by_size(&mut self, graph: &mut Graph, id: NodeId, (op, x): (BinaryOp, ValueRef), e: &SymExpr) -> Res<ValueRef> {
        let ty = Self::ty(graph, x);
        Ok(match e.as_const() {
            Some(1) if op == BinaryOp::FloorDiv => x,
            Some(k) => self.binary(graph, id, op, Operand::Scalar(Scalar::Int(k)), &[x], ty),
            None => {
                let k = self.length(graph, id, e)?;
                self.binary(graph, id, op, Operand::Tensor, &[x, k], ty)
            }
        })
    }
}
