//! One padded dim laid out two ways. A reshape that merges `[batch, heads, t]` into
//! `[batch·heads·t]` with the batch outermost keeps the real rows a prefix; a `repeat` or a
//! permute before the merge puts the batch inside (`[heads, batch, t]`), where the real rows are
//! not a prefix. An op that pairs the rows of two such operands position by position (a
//! `gather` of relative-position embeddings by their buckets, ProphetNet's) would pair
//! different real rows in a bucket. The operand of factors is gathered into the prefix layout
//! first: the real row `r` at bucket position `p = r`, unravelled by the real sizes into
//! `(c_1, …, c_k)`, is at `Σ c_i · Π_{j>i} F_j` in the factors' layout (`F`: the padded sizes);
//! positions past the real rows, padding, read a row clamped into the dim.

use super::{Factors, Masker};
use crate::ir::ops::{Arange, IndexSelect};
use crate::ir::{BinaryOp, DType, Graph, NodeId, Op, Operand, Scalar, SymExpr, TensorType, ValueRef};

impl Masker<'_> {
    /// True when `prefix`, one factor, is the real size `factors` (several) make, at the same
    /// size in the bucket: the same rows in two layouts.
    pub(super) fn relayout_of(&self, prefix: &[SymExpr], factors: &[SymExpr]) -> bool {
        let [whole] = prefix else { return false };
        let plain = self.pieces_of(prefix).is_none() && self.pieces_of(factors).is_none();
        let same_size = self.product(factors).ok().is_some_and(|n| self.padded(whole) == Some(n));
        let product = SymExpr::Mul(factors.to_vec()).simplify();
        plain && factors.len() > 1 && same_size && self.same_factors(prefix, &[product])
    }

    /// Replaces input `slot` of `id`, whose dim `d` is padded as `factors`, by its rows gathered
    /// into the layout of `prefix` (see the module docs).
    pub(super) fn relayout_input(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (slot, d): (usize, usize),
        factors: &[SymExpr],
        prefix: &[SymExpr],
    ) -> Result<(), String> {
        let v = graph.inputs(id)[slot];
        let ty = Self::ty(graph, v);
        let n = ty.dims[d].as_static().ok_or("not specialized")?;
        let rows = TensorType::new(DType::I64, &[n]);
        let arange = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(n), step: Scalar::Int(1) });
        let r = self.add(graph, id, arange, rows.clone(), &[]);
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
            let size = self.padded(f).ok_or("internal: a factor with no size in the bucket")?;
            padded_stride = padded_stride.checked_mul(size).ok_or("a padded dim's size overflows")?;
            real_stride.push(f.clone());
        }
        let at = at.ok_or("internal: a layout of no factors")?;
        let at = self.binary(graph, id, BinaryOp::Minimum, Operand::Scalar(Scalar::Int(n - 1)), &[at], rows);
        let moved = self.add(graph, id, Op::IndexSelect(IndexSelect { dim: d as i64 }), ty, &[v, at]);
        graph.set_input(id, slot as u16, moved);
        self.merged.insert((moved, d), Factors::from(prefix));
        Ok(())
    }

    /// `op(x, e)` for the real value of size `e` (a constant stays a constant; 1 divides nothing).
    fn by_size(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (op, x): (BinaryOp, ValueRef),
        e: &SymExpr,
    ) -> Result<ValueRef, String> {
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
