//! Views regroup dims: each result dim is a run of the operand's factors (see [`Factors`]).
//!
//! The operand's dims are read as one list of factors, outer first (a dim of factors gives
//! its own; any other dim is one factor; sizes 1 are dropped), and each result dim takes the
//! run of them whose product is its size. Sizes are compared as products of their symbols
//! ([`Product`]), never by their values: a dim of a bucket's size 16 is not a static 16, and a
//! sum `s + 1` is one factor that no static dim equals. Runs of static factors are one factor,
//! so static dims regroup freely among themselves. A factor is split when its inner part is
//! static (`[64·s] → [s, 64]`). A result dim made of one dynamic factor followed by static ones
//! is a prefix; one with a dynamic factor inside is a dim of factors, recorded. A dim of pieces
//! (a `cat` of a past and new positions) goes whole into a result dim of its size, or the view
//! is refused. [`same_along`] sees through the views that change no dim.

use std::collections::VecDeque;

use super::{Factors, Masker, Res};
use crate::ir::{Dim, Graph, NodeId, Op, Product, SymExpr, ValueRef};
use crate::pass::Fail;

/// One factor of a view's operand: a size, or a whole dim of pieces (its size and its record),
/// which a result dim takes only whole and alone.
struct Factor {
    size: SymExpr,
    pieces: Option<Factors>,
}

impl Masker<'_> {
    pub(super) fn view(&mut self, graph: &Graph, id: NodeId) -> Res<()> {
        let x = graph.inputs(id)[0];
        let out = ValueRef { node: id, slot: 0 };
        let (a, b) = (Self::symbolic_dims(graph, x), Self::symbolic_dims(graph, out));
        let regroups = || Fail::from(format!("regroups dynamic dims ({} into {})", list(&a), list(&b)));
        if self.only_ones_differ(x, out, &a, &b) {
            return Ok(());
        }
        let mut queue: Vec<Factor> = vec![];
        for (d, e) in a.iter().enumerate() {
            let own = self.merged.get(&(x, d)).cloned().unwrap_or_else(|| vec![e.clone()]);
            let own = self.equal_pieces_as_factors(own);
            // A dim of pieces that has one size in this bucket has no padding: a plain factor.
            if self.pieces_of(&own).is_some() {
                if !self.is_one(e) {
                    let pieces = (!self.is_static(e)).then_some(own);
                    queue.push(Factor { size: e.clone(), pieces });
                }
                continue;
            }
            queue.extend(own.into_iter().filter(|f| !self.is_one(f)).map(|size| Factor { size, pieces: None }));
        }
        let mut queue = self.static_runs_merged(queue);
        for (j, want) in b.iter().enumerate() {
            let want_size = self.compared(want)?;
            let mut taken: Factors = vec![];
            let mut have = Product::constant(1);
            while have != want_size {
                let next = queue.pop_front().ok_or_else(regroups)?;
                let product = have.times(&self.compared(&next.size)?).ok_or_else(regroups)?;
                if let Some(pieces) = next.pieces {
                    // A dim of pieces goes whole into a result dim of its own, as it is.
                    if !taken.is_empty() || product != want_size {
                        return Err(regroups());
                    }
                    self.merged.insert((out, j), pieces);
                    have = product;
                    continue;
                }
                if want_size.over(&product).is_some() {
                    taken.push(next.size);
                    have = product;
                    continue;
                }
                // Split `next` into an outer part (what this dim still needs) and a static inner part.
                let need = want_size.over(&have).ok_or_else(regroups)?;
                let inner = self.compared(&next.size)?.over(&need).and_then(|p| p.as_const()).ok_or_else(regroups)?;
                queue.push_front(Factor { size: SymExpr::Int(inner), pieces: None });
                taken.push(need.to_expr());
                have = want_size.clone();
            }
            let f = self.normalize(taken);
            if f.len() > 1 {
                self.merged.insert((out, j), f);
            }
        }
        if queue.iter().all(|f| f.pieces.is_none() && self.is_one(&f.size)) {
            Ok(())
        } else {
            Err(regroups())
        }
    }

    /// `e` as a product, or why it cannot be compared.
    fn compared(&self, e: &SymExpr) -> Res<Product> {
        self.as_product(e).ok_or_else(|| format!("cannot compare the size `{e}`").into())
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
    fn static_runs_merged(&self, factors: Vec<Factor>) -> VecDeque<Factor> {
        let mut merged: VecDeque<Factor> = VecDeque::new();
        for f in factors {
            let size = |f: &Factor| f.pieces.is_none().then(|| self.static_size(&f.size)).flatten();
            match (merged.back().and_then(size), size(&f)) {
                (Some(a), Some(b)) => {
                    merged.pop_back();
                    merged.push_back(Factor { size: SymExpr::Int(a * b), pieces: None });
                }
                _ => merged.push_back(f),
            }
        }
        merged
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

/// True when `v` is the same at every position of its dim `d`: a constant `full`, or an
/// `expand` from size 1 there (a weight broadcast over a batch of windows), seen through views
/// that change no dim (the `view` torch puts between an `expand` and a `bmm`).
pub(super) fn same_along(graph: &Graph, mut v: ValueRef, d: usize) -> bool {
    // Sizes as exported: in a bucket of 16, `[s, 16] → [16, s]` is no identity.
    let dims = |v: ValueRef| {
        let node = graph.node(v.node);
        let slot = usize::from(v.slot);
        let ty = node.symbolic.as_ref().map_or(node.outputs.get(slot), |s| s.outputs.get(slot));
        ty.map(|t| t.dims.clone()).unwrap_or_default()
    };
    for _ in 0..8 {
        match &graph.node(v.node).op {
            Op::Full(_) => return true,
            Op::Expand(_) => {
                let (source, out) = (dims(graph.inputs(v.node)[0]), dims(v));
                let shift = out.len().saturating_sub(source.len());
                return d < shift || source.get(d - shift) == Some(&Dim::Static(1));
            }
            Op::View(_) if dims(graph.inputs(v.node)[0]) == dims(v) => v = graph.inputs(v.node)[0],
            _ => return false,
        }
    }
    false
}
