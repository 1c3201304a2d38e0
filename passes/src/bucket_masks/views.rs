//! Views regroup dims: each result dim is a run of the operand's factors (see [`Factors`]).
//!
//! The operand's dims are read as one list of factors, outer first (a dim of factors gives
//! its own; any other dim is one factor; sizes 1 are dropped), and each result dim takes the
//! run of them whose product is its size, at the bucket's sizes and at two smaller ones (so
//! that the regrouping is the same at every real size). Runs of static factors are one factor,
//! so static dims regroup freely among themselves. A factor is split when its inner part
//! is static (`[64·s] → [s, 64]`). A result dim made of one dynamic factor followed by static
//! ones is a prefix; one with a dynamic factor inside is a dim of factors, recorded.

use std::collections::VecDeque;

use super::{Factors, Masker};
use crate::ir::{Dim, Graph, NodeId, SymExpr, ValueRef};

impl Masker<'_> {
    pub(super) fn view(&mut self, graph: &Graph, id: NodeId) -> Result<(), String> {
        let x = graph.inputs(id)[0];
        let out = ValueRef { node: id, slot: 0 };
        let (a, b) = (Self::symbolic_dims(graph, x), Self::symbolic_dims(graph, out));
        let regroups = || format!("regroups dynamic dims ({} into {})", list(&a), list(&b));
        if self.only_ones_differ(x, out, &a, &b) {
            return Ok(());
        }
        let mut queue: Vec<SymExpr> = vec![];
        for (d, e) in a.iter().enumerate() {
            let own = self.merged.get(&(x, d)).cloned().unwrap_or_else(|| vec![e.clone()]);
            let own = self.equal_pieces_as_factors(own);
            queue.extend(own.into_iter().filter(|f| !self.is_one(f)));
        }
        let mut queue = self.static_runs_merged(queue);
        // Sizes are compared where the operand is not empty: at a size 0 (a count from data at
        // its least) every product is 0 and says nothing of how dims regroup.
        let live: Vec<usize> = (0..3).filter(|&i| a.iter().all(|e| self.at(e).is_some_and(|v| v[i] != 0))).collect();
        if live.is_empty() {
            return Err(regroups());
        }
        let same = |x: [i64; 3], y: [i64; 3]| live.iter().all(|&i| x[i] == y[i]);
        for (j, want) in b.iter().enumerate() {
            let want_at = self.at(want).ok_or_else(|| format!("cannot evaluate the size `{want}`"))?;
            let mut taken: Factors = vec![];
            let mut have = [1i64; 3];
            while !same(have, want_at) {
                let next = queue.pop_front().ok_or_else(regroups)?;
                let at = self.at(&next).ok_or_else(regroups)?;
                let product = [have[0] * at[0], have[1] * at[1], have[2] * at[2]];
                if live.iter().all(|&i| product[i] != 0 && want_at[i] % product[i] == 0) {
                    taken.push(next);
                    have = product;
                    continue;
                }
                // Split `next` into an outer part (what this dim still needs) and a static inner part.
                let need: Option<Vec<i64>> = live
                    .iter()
                    .map(|&i| (have[i] != 0 && want_at[i] % have[i] == 0).then(|| want_at[i] / have[i]))
                    .collect();
                let inner: Option<Vec<i64>> = need.and_then(|need| {
                    live.iter()
                        .zip(need)
                        .map(|(&i, need)| (need != 0 && at[i] % need == 0).then(|| at[i] / need))
                        .collect()
                });
                let Some(inner) = inner.filter(|v| v.iter().all(|&c| c == v[0])) else { return Err(regroups()) };
                let outer = if taken.is_empty() {
                    want.clone()
                } else {
                    SymExpr::FloorDiv(Box::new(next.clone()), Box::new(SymExpr::Int(inner[0]))).simplify()
                };
                queue.push_front(SymExpr::Int(inner[0]));
                taken.push(outer);
                have = want_at;
            }
            let f = self.normalize(taken);
            if f.len() > 1 {
                self.merged.insert((out, j), f);
            }
        }
        if queue.iter().all(|f| self.is_one(f)) {
            Ok(())
        } else {
            Err(regroups())
        }
    }

    /// A view that only drops or adds dims of size 1 (`[u0, 1] → [u0]`, a `nonzero`'s column
    /// taken out): the other dims stay as they are, whatever their sizes (one the data makes,
    /// which has no value at smaller sizes, included), and keep their records.
    fn only_ones_differ(&mut self, x: ValueRef, out: ValueRef, a: &[SymExpr], b: &[SymExpr]) -> bool {
        let kept =
            |dims: &[SymExpr]| -> Vec<usize> { (0..dims.len()).filter(|&d| dims[d] != SymExpr::Int(1)).collect() };
        let (ka, kb) = (kept(a), kept(b));
        if ka.len() != kb.len() || ka.iter().zip(&kb).any(|(&i, &j)| a[i] != b[j]) {
            return false;
        }
        for (&i, &j) in ka.iter().zip(&kb) {
            if let Some(f) = self.merged.get(&(x, i)).cloned() {
                self.merged.insert((out, j), f);
            }
        }
        true
    }

    /// A dim of `k` equal pieces (a `cat` of tensors of the same padded size, CrossViT's
    /// `cat([a, b])` of two batches) is the layout `[k, piece]`: piece `i` holds its real rows at
    /// the start of its own block. Its factors are then `k` and the piece's; any other dim's
    /// stay as they are.
    fn equal_pieces_as_factors(&self, factors: Factors) -> Factors {
        match self.pieces_of(&factors) {
            Some(pieces) if pieces.windows(2).all(|w| w[0] == w[1]) && !pieces.is_empty() => {
                let k = i64::try_from(pieces.len()).unwrap_or(i64::MAX);
                std::iter::once(SymExpr::Int(k)).chain(pieces[0].iter().cloned()).collect()
            }
            _ => factors,
        }
    }

    /// `factors` with each run of static ones multiplied into one, so that static dims may
    /// regroup in any way among themselves (`[b, 7, 4] → [b, 4, 7]`, a relative-position shift).
    fn static_runs_merged(&self, factors: Vec<SymExpr>) -> VecDeque<SymExpr> {
        let mut merged: VecDeque<SymExpr> = VecDeque::new();
        for f in factors {
            let size = |e: &SymExpr| self.at(e).filter(|v| v[0] == v[1] && v[1] == v[2]).map(|v| v[0]);
            match (merged.back().and_then(size), size(&f)) {
                (Some(a), Some(b)) => {
                    merged.pop_back();
                    merged.push_back(SymExpr::Int(a * b));
                }
                _ => merged.push_back(f),
            }
        }
        merged
    }

    fn is_one(&self, e: &SymExpr) -> bool {
        self.at(e) == Some([1, 1, 1])
    }

    /// The symbolic dims of `v` (its specialized dims when it has no record).
    fn symbolic_dims(graph: &Graph, v: ValueRef) -> Vec<SymExpr> {
        let node = graph.node(v.node);
        let ty = node.symbolic.as_ref().map_or(&node.outputs[usize::from(v.slot)], |s| &s.outputs[usize::from(v.slot)]);
        ty.dims.iter().map(Dim::to_expr).collect()
    }
}

fn list(dims: &[SymExpr]) -> String {
    format!("[{}]", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
}
