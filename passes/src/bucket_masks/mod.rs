//! `bucket_masks`: makes a program compiled for a size bucket exact at every real size up to
//! the bucket's. The caller pads each dynamic input dim with zeros up to the bucket size and
//! passes the real value of every symbol as an extra `i64` input (`InputKind::Size`, after
//! all other inputs, in symbol order); outputs are sliced back to their real sizes.
//!
//! **Which positions are real.** Along a dynamic dim, a value's real positions are a prefix
//! whose length is the dim's symbolic size at the real symbol values (the export records the
//! expressions, and `specialize` keeps them on each node) — unless a view merged it with
//! other dims: `[batch, seq, hidden] → [batch·seq, hidden]` (every MoE router) makes a dim of
//! *factors* `[batch, seq]`, whose real positions are those whose index along every factor
//! is below that factor's real size. The pass records such dims ([`Factors`]) and follows
//! them through the program; a view that splits them back gives prefixes again.
//!
//! **How sizes compare.** As products of their symbols ([`Product`]), never by their values at
//! the bucket: a dim of the bucket's size 16 is not a static 16. A symbol whose bucket is its
//! least value has no padding in this bucket and is that value.
//!
//! **What each op does with them.** Every op says in its definition along which dims it works
//! position by position (`OpDef::position_wise`: every dim of an element-wise op, the rows of
//! a matmul, the batch of a convolution, every dim but the one a softmax, norm or sort works
//! along). Padding along such a dim, in any pattern, never reaches a real position: nothing
//! to do, and the dim's factors carry over to the result. Along the other dims, the op's
//! `OpDef::under_padding` decides:
//!
//! - `Exact`: real results read real positions only when they are a prefix (moves of dims,
//!   running sums, embeddings, `arange`, `full`): nothing to do;
//! - `Rule`: a rule of this pass (`rules`): reductions, softmax and contractions get their
//!   input masked with the identity (`sum`: 0, `amax`: -inf, …; `mean` divides by the real
//!   count), for a prefix or any factors; views regroup factors (`views`); gathers along a
//!   dynamic dim need indices that are real positions of it (`arange`, or a sort's
//!   indices); a sort of keys bounded by a static size (expert ids) puts padding last; an
//!   `index_put` into a tensor with no dynamic dim (a KV cache written at a prompt's
//!   positions) gets the padded indices moved past the end, and one that inverts a sort's
//!   permutation is exact; convolutions and max pools along a dynamic dim read zeros
//!   (−inf) past the real length; a `constant_pad_nd` on the right of one fills its pad
//!   value from the real length on; a group norm over a dynamic dim takes its statistics
//!   over the real positions (`norms`); the regions of control flow are masked as programs
//!   of their own, given the real sizes (`regions`); a Fourier transform along a dynamic dim
//!   is a product with the DFT matrix of the real length (`fourier`), a resize along one a
//!   product with the interpolation matrix of the real lengths (`resample`);
//! - `Refused`: the compile fails, naming the node, the op and why — never wrong numbers.
//!
//! Values that hold positions along a dim of factors (a sort's indices) are positions of the
//! bucket's layout, not the real one: they may only index that dim (or be divided by its
//! static inner factors), never be used as numbers.
//!
//! A graph with `sym s0 in [1, 64]` compiled for the bucket `s0 = 16` (the filetest runner
//! specializes it first):
//!
//! ```text
#![doc = include_str!("../../tests/bucket_masks/reductions_over_dynamic_dim_masked.ir")]
//! ```

mod counts;
mod fourier;
mod norms;
mod regions;
mod relayout;
mod resample;
mod rules;
#[cfg(test)]
mod tests;
mod views;

use std::collections::BTreeMap;

use crate::ir::ops::{
    Arange, ArangeSym, ArgReduce, Binary, ExtremumDim, Gather, Index, IndexPut, IndexSelect, Padding, PaddingRule,
    Slice, Sort, TopK, View, Where,
};
use crate::ir::{
    norm_dim, BinaryOp, Bounds, DType, Dim, Graph, InputKind, Node, NodeId, Op, Operand, Product, Scalar, SymExpr,
    Symbolic, TensorType, ValueRef,
};
use crate::pass::{bug, Changed, Fail, Pass, PassCx, PassError};

/// A `view` to the static `dims`.
fn static_view(dims: &[i64]) -> Op {
    Op::View(View { size: dims.iter().map(|&d| Dim::Static(d)).collect() })
}

/// Why an op is refused along a dynamic dim.
const REFUSED: &str = "has no padding-safe form along a dynamic dim";

/// Why an op is refused along a dim of factors.
const MERGED: &str =
    "reads across a dim that merges a dynamic size under other dims (its real positions are not a prefix)";

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

/// The sizes a dim is the product of, outer first; its real positions are those whose index
/// along every factor is below that factor's real size. One factor: a prefix.
type Factors = Vec<SymExpr>;

/// The dims of a value that have padding: dim → its factors.
type DynDims = BTreeMap<usize, Factors>;

/// A rule's result: `Fail::Refused` names why a node cannot be made exact, `Fail::Bug` a
/// broken invariant of the pass.
type Res<T> = Result<T, Fail>;

struct Masker<'a> {
    spec: &'a BucketSpec,
    /// The symbols whose bucket is their least value: no padding along them, each its value.
    fixed: BTreeMap<String, i64>,
    /// Each symbol's real values in this bucket, `[least, bucket]`.
    ranges: BTreeMap<String, (i64, i64)>,
    /// The `Size` input of each symbol.
    sizes: BTreeMap<String, ValueRef>,
    /// Real lengths built so far, by expression.
    lengths: BTreeMap<SymExpr, ValueRef>,
    /// Values whose real entries are positions along a dim of these factors (`arange`, a
    /// sort's indices).
    positions: BTreeMap<ValueRef, Factors>,
    /// A sort's indices: a permutation of the whole dim whose real (leading) entries are the
    /// real positions of a dim of these factors.
    perms: BTreeMap<ValueRef, Factors>,
    /// Windows of positions: at position `i` of a padded prefix dim of these factors, a value
    /// in `[i, i + reach]` (`arange(s)[None, :] + arange(k)[:, None]`: unfold's indices).
    windows: BTreeMap<ValueRef, (Factors, i64)>,
    /// Integer values known to lie in `[0, bound)` (indices along a static dim, as a router's
    /// `topk` gives).
    bounded: BTreeMap<ValueRef, i64>,
    /// The value of each `item()` used as a size, by its symbol.
    items: BTreeMap<String, ValueRef>,
    /// `nonzero` results whose coordinates along a padded dim (by column) are positions of
    /// these factors.
    columns: BTreeMap<ValueRef, BTreeMap<usize, Factors>>,
    /// Dims whose real positions are not a prefix.
    merged: BTreeMap<(ValueRef, usize), Factors>,
    /// The pieces of each dim made by a `cat` of padded pieces (see [`Masker::new_pieces`]).
    pieces: Vec<Vec<Factors>>,
    counter: usize,
    masks: usize,
}

impl Masker<'_> {
    fn new(spec: &BucketSpec) -> Masker<'_> {
        let least = |s: &str| spec.bounds.get(s).and_then(|b| b.min).unwrap_or(1).max(0);
        let ranges: BTreeMap<String, (i64, i64)> =
            spec.values.iter().map(|(s, &v)| (s.clone(), (least(s).min(v), v))).collect();
        let fixed = ranges.iter().filter(|(_, (lo, hi))| lo == hi).map(|(s, &(v, _))| (s.clone(), v)).collect();
        Masker {
            spec,
            fixed,
            ranges,
            sizes: BTreeMap::new(),
            lengths: BTreeMap::new(),
            positions: BTreeMap::new(),
            perms: BTreeMap::new(),
            windows: BTreeMap::new(),
            bounded: BTreeMap::new(),
            columns: BTreeMap::new(),
            items: BTreeMap::new(),
            merged: BTreeMap::new(),
            pieces: Vec::new(),
            counter: 0,
            masks: 0,
        }
    }

    /// `e` as a product (see [`Product`]), each symbol without padding in this bucket at its
    /// value; `None` where a symbol is not the bucket's (a pieces marker) or a coefficient
    /// overflows.
    fn as_product(&self, e: &SymExpr) -> Option<Product> {
        if e.symbols().iter().any(|s| !self.spec.values.contains_key(s)) {
            return None;
        }
        Product::of(&e.substitute(&self.fixed))
    }

    /// The bucket's value of `e`: the padded size of a dim of that size.
    fn padded(&self, e: &SymExpr) -> Option<i64> {
        e.eval(&self.spec.values)
    }

    /// The size of `e` when it is the same at every real size of the bucket.
    fn static_size(&self, e: &SymExpr) -> Option<i64> {
        self.as_product(e)?.as_const()
    }

    fn is_static(&self, e: &SymExpr) -> bool {
        self.static_size(e).is_some()
    }

    fn is_one(&self, e: &SymExpr) -> bool {
        self.static_size(e) == Some(1)
    }

    /// The same size at every real size of the bucket, as products: never by a coincidence of
    /// values (a bucket of 16 is not a static 16).
    fn same_size(&self, a: &SymExpr, b: &SymExpr) -> bool {
        matches!((self.as_product(a), self.as_product(b)), (Some(x), Some(y)) if x == y)
    }

    /// The same factors, size by size.
    fn same_factors(&self, a: &[SymExpr], b: &[SymExpr]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| self.same_size(x, y))
    }

    /// The same real positions: the same factors, or pieces of the same factors in order (two
    /// `cat`s of a past and new positions).
    fn same_layout(&self, a: &[SymExpr], b: &[SymExpr]) -> bool {
        match (self.pieces_of(a), self.pieces_of(b)) {
            (Some(p), Some(q)) => p.len() == q.len() && p.iter().zip(&q).all(|(x, y)| self.same_factors(x, y)),
            (None, None) => self.same_factors(a, b),
            _ => false,
        }
    }

    /// Factors without those of size 1; a prefix when only the outermost one is dynamic.
    fn normalize(&self, f: Factors) -> Factors {
        let f: Factors = f.into_iter().filter(|e| !self.is_one(e)).collect();
        let dynamic: Vec<usize> = (0..f.len()).filter(|&i| !self.is_static(&f[i])).collect();
        if dynamic == [0] || dynamic.is_empty() {
            vec![SymExpr::Mul(f).simplify()]
        } else {
            f
        }
    }

    /// The dims of `v` with padding: recorded factors, or a prefix where its symbolic size
    /// has symbols.
    fn dyn_dims(&self, graph: &Graph, v: ValueRef) -> DynDims {
        let node = graph.node(v.node);
        let mut dims = DynDims::new();
        if let Some(sym) = node.symbolic.as_ref() {
            for (i, d) in sym.outputs[usize::from(v.slot)].dims.iter().enumerate() {
                if let Dim::Sym(e) = d {
                    dims.insert(i, vec![e.clone()]);
                }
            }
        }
        for ((_, d), f) in self.merged.range((v, 0)..=(v, usize::MAX)) {
            dims.insert(*d, f.clone());
        }
        dims
    }

    fn ty(graph: &Graph, v: ValueRef) -> TensorType {
        graph.value_type(v).clone()
    }

    fn add(&mut self, graph: &mut Graph, from: NodeId, op: Op, ty: TensorType, inputs: &[ValueRef]) -> ValueRef {
        self.counter += 1;
        let n = Node::derived(graph.node(from), format_args!("bucket.{}", self.counter), op, [ty]);
        ValueRef { node: graph.add_op(n, inputs), slot: 0 }
    }

    fn binary(
        &mut self,
        graph: &mut Graph,
        at: NodeId,
        op: BinaryOp,
        rhs: Operand,
        ins: &[ValueRef],
        ty: TensorType,
    ) -> ValueRef {
        self.add(graph, at, Op::Binary(Binary { op, lhs: Operand::Tensor, rhs, alpha: None }), ty, ins)
    }

    /// `bool[1, …, n, …, 1]` (rank `rank`, `n` at `d`): which positions of a dim of `factors`
    /// are real. A prefix may be shorter than the dim (a pad's real part); a dim of pieces
    /// (see [`Masker::pieces`]) is real where the piece it falls in is.
    fn real_positions(
        &mut self,
        graph: &mut Graph,
        at: NodeId,
        (rank, d, n): (usize, usize, i64),
        factors: &[SymExpr],
    ) -> Res<ValueRef> {
        let mut shape = vec![1i64; rank];
        shape[d] = n;
        let index_ty = TensorType::new(DType::I64, &shape);
        let iota = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(n), step: Scalar::Int(1) });
        let iota = self.add(graph, at, iota, TensorType::new(DType::I64, &[n]), &[]);
        let iota = if rank == 1 {
            iota
        } else {
            let view = Op::View(View { size: shape.iter().map(|&s| Dim::Static(s)).collect() });
            self.add(graph, at, view, index_ty.clone(), &[iota])
        };
        let Some(pieces) = self.pieces_of(factors) else {
            if factors.len() > 1 && self.product(factors)? != n {
                return Err(bug("the factors of a dim do not make its size"));
            }
            let valid = self.within_factors(graph, at, iota, &shape, factors)?;
            return valid.ok_or_else(|| bug("a padded dim with no dynamic factor"));
        };
        // Each piece: inside its span, and real by its own factors there.
        let bool_ty = TensorType::new(DType::Bool, &shape);
        let (mut start, mut valid) = (0i64, None);
        for piece in pieces {
            let end = start + self.product(&piece)?;
            let int = |v| Operand::Scalar(Scalar::Int(v));
            let local = if start == 0 {
                iota
            } else {
                self.binary(graph, at, BinaryOp::Sub, int(start), &[iota], index_ty.clone())
            };
            // The conditions that can fail: past the start, before the end, real in the piece.
            let mut conditions = vec![];
            if start > 0 {
                conditions.push(self.binary(graph, at, BinaryOp::Ge, int(0), &[local], bool_ty.clone()));
            }
            if end < n {
                conditions.push(self.binary(graph, at, BinaryOp::Lt, int(end - start), &[local], bool_ty.clone()));
            }
            conditions.extend(self.within_factors(graph, at, local, &shape, &piece)?);
            let and = |m: &mut Self, graph: &mut Graph, a, b| {
                m.binary(graph, at, BinaryOp::LogicalAnd, Operand::Tensor, &[a, b], bool_ty.clone())
            };
            let mut inside = conditions.first().copied().ok_or_else(|| bug("a piece that is the whole dim"))?;
            for &c in &conditions[1..] {
                inside = and(self, graph, inside, c);
            }
            valid = Some(match valid {
                None => inside,
                Some(v) => self.binary(graph, at, BinaryOp::LogicalOr, Operand::Tensor, &[v, inside], bool_ty.clone()),
            });
            start = end;
        }
        valid.ok_or_else(|| bug("a dim of no pieces"))
    }

    /// The bucket's size of a dim of `factors`.
    fn product(&self, factors: &[SymExpr]) -> Res<i64> {
        factors
            .iter()
            .try_fold(1i64, |n, e| self.padded(e).and_then(|p| n.checked_mul(p)))
            .ok_or_else(|| "not specialized".into())
    }

    /// Whether each position `index` (`i64` of `shape`) of a dim of `factors` is real; `None`
    /// when every factor is static (all real).
    fn within_factors(
        &mut self,
        graph: &mut Graph,
        at: NodeId,
        index: ValueRef,
        shape: &[i64],
        factors: &[SymExpr],
    ) -> Res<Option<ValueRef>> {
        let sizes: Vec<i64> = factors.iter().map(|e| self.padded(e)).collect::<Option<_>>().ok_or("not specialized")?;
        let index_ty = TensorType::new(DType::I64, shape);
        let bool_ty = TensorType::new(DType::Bool, shape);
        let mut valid = None;
        for (k, e) in factors.iter().enumerate() {
            let inner: i64 = sizes[k + 1..].iter().product();
            if e.symbols().is_empty() {
                continue;
            }
            let mut at_factor = index;
            if inner > 1 {
                let inner = Operand::Scalar(Scalar::Int(inner));
                at_factor = self.binary(graph, at, BinaryOp::FloorDiv, inner, &[at_factor], index_ty.clone());
            }
            if k > 0 {
                let size = Operand::Scalar(Scalar::Int(sizes[k]));
                at_factor = self.binary(graph, at, BinaryOp::Remainder, size, &[at_factor], index_ty.clone());
            }
            let real = self.length(graph, at, e)?;
            let below = self.binary(graph, at, BinaryOp::Lt, Operand::Tensor, &[at_factor, real], bool_ty.clone());
            valid = Some(match valid {
                None => below,
                Some(v) => self.binary(graph, at, BinaryOp::LogicalAnd, Operand::Tensor, &[v, below], bool_ty.clone()),
            });
        }
        Ok(valid)
    }

    /// A dim made of pieces one after the other (a `cat` of padded pieces): its factors are a
    /// marker, `[#k, #k]` for the `k`th such dim, that no size comparison takes for a prefix or
    /// another dim's factors, so that only what masks by [`Masker::real_positions`] or splits
    /// at piece boundaries (a slice) reads across it.
    fn new_pieces(&mut self, pieces: Vec<Factors>) -> Factors {
        let marker = SymExpr::Sym(format!("#pieces{}", self.pieces.len()));
        self.pieces.push(pieces);
        vec![marker.clone(), marker]
    }

    /// The pieces of a dim whose factors are a pieces marker.
    fn pieces_of(&self, factors: &[SymExpr]) -> Option<Vec<Factors>> {
        let [SymExpr::Sym(a), SymExpr::Sym(b)] = factors else { return None };
        let k: usize = a.strip_prefix("#pieces")?.parse().ok()?;
        (a == b).then(|| self.pieces.get(k).cloned()).flatten()
    }

    /// `v` with the padding of its dim `d` (of `factors`) replaced by `fill`.
    fn mask(
        &mut self,
        graph: &mut Graph,
        at: NodeId,
        (v, d): (ValueRef, usize),
        factors: &[SymExpr],
        fill: Scalar,
    ) -> Res<ValueRef> {
        let ty = Self::ty(graph, v);
        let n = ty.dims[d].as_static().ok_or("not specialized")?;
        let valid = self.real_positions(graph, at, (ty.rank(), d, n), factors)?;
        let select = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(fill) });
        self.masks += 1;
        Ok(self.add(graph, at, select, ty, &[valid, v]))
    }

    /// Masks input `slot` of `id` along its dims among `dims` that have padding.
    fn mask_input(&mut self, graph: &mut Graph, id: NodeId, slot: usize, dims: &[usize], fill: Scalar) -> Res<()> {
        let v = graph.inputs(id)[slot];
        let dd = self.dyn_dims(graph, v);
        let mut cur = v;
        for d in dims {
            if let Some(f) = dd.get(d) {
                cur = self.mask(graph, id, (cur, *d), f, fill)?;
            }
        }
        if cur != v {
            graph.set_input(id, slot as u16, cur);
        }
        Ok(())
    }

    /// `new` takes the place of `old` (a rule's rewrite of an op's result) for the users `old`
    /// had before the rule ran, and keeps what is known of `old`'s dims: its symbolic sizes
    /// and factors.
    fn take_over(&mut self, graph: &mut Graph, old: ValueRef, new: ValueRef, users: Vec<(NodeId, u16, u16)>) {
        for (user, slot, _) in users.into_iter().filter(|u| u.2 == old.slot) {
            graph.set_input(user, slot, new);
        }
        graph.redirect_outputs(old, new);
        if let Some(sym) = graph.node(old.node).symbolic.as_deref() {
            let own = Symbolic { op: sym.op.clone(), outputs: vec![sym.outputs[usize::from(old.slot)].clone()] };
            graph.node_mut(new.node).symbolic = Some(Box::new(own));
        }
        let merged: Vec<(usize, Factors)> =
            self.merged.range((old, 0)..=(old, usize::MAX)).map(|((_, d), f)| (*d, f.clone())).collect();
        for (d, f) in merged {
            self.merged.insert((new, d), f);
        }
    }

    /// Handles one node; `Err` names why it cannot be made safe.
    fn visit(&mut self, graph: &mut Graph, id: NodeId) -> Res<()> {
        let node = graph.node(id).clone();
        let ins = graph.inputs(id);
        self.every_real_size_fits(graph, id)?;
        self.follow_positions(graph, id, &node)?;
        self.follow_columns(graph, id)?;
        if matches!(node.op, Op::SymSize(_) | Op::SymInt(_)) {
            return self.real_size(graph, id);
        }
        if let Some(Op::ArangeSym(ArangeSym { start: Dim::Sym(start), .. })) = node.symbolic.as_ref().map(|s| &s.op) {
            return self.arange_from_real(graph, id, &start.clone());
        }
        let mut in_dyn: Vec<DynDims> = ins.iter().map(|&v| self.dyn_dims(graph, v)).collect();
        if let Some(Op::Slice(Slice { start: Dim::Sym(start), dim, .. })) = node.symbolic.as_ref().map(|s| &s.op) {
            let d = norm_dim(*dim, Self::ty(graph, ins[0]).rank());
            if !in_dyn[0].contains_key(&d) {
                return self.slice_from_real(graph, id, &start.clone());
            }
        }
        if Self::needs_region_masks(&node.op, &in_dyn) {
            return self.control_flow(graph, id, &in_dyn);
        }
        // What the op's definition says of padding, asked of the op as exported (its sizes still
        // symbolic: a `repeat`'s count, a slice's start).
        let padding = node.symbolic.as_ref().map_or(&node.op, |s| &s.op).def().under_padding();
        // Counts from data are made whatever their operands' padding.
        if let Padding::Rule(rule @ (PaddingRule::Nonzero | PaddingRule::Item)) = &padding {
            return self.rule(graph, id, rule, &in_dyn, &[]);
        }
        if node.outputs.is_empty() || in_dyn.iter().all(BTreeMap::is_empty) {
            // A resize of an operand without padding to padded sides (a fixed table interpolated
            // to an image's grid) still reads its rows at the ratio of the real sizes.
            if let Padding::Rule(rule @ PaddingRule::Upsample(_)) = &padding {
                if self.dyn_dims(graph, ValueRef { node: id, slot: 0 }).keys().any(|&d| d >= 2) {
                    return self.rule(graph, id, rule, &in_dyn, &[]);
                }
            }
            return Ok(());
        }
        let types: Vec<&TensorType> = ins.iter().map(|&v| graph.value_type(v)).collect();
        let links = node.op.def().position_wise(&types, &node.outputs);
        // Padded dims the op works along position by position carry their factors over.
        let mut across: Vec<(usize, usize, Factors)> = vec![];
        // Per linked output dim: its factors and the operand dim they came from.
        let mut carried: BTreeMap<(usize, usize), (Factors, (usize, usize))> = BTreeMap::new();
        let mut relaid: BTreeMap<(usize, usize), (Factors, Factors)> = BTreeMap::new();
        // An operand the same at every position of a dim, real or padding (a constant `full`, a
        // weight expanded along the batch of windows): that dim takes the other operands'
        // factors, so it goes last and yields where they differ.
        let fill = |slot: usize, d: usize| views::same_along(graph, ins[slot], d);
        let mut slots: Vec<usize> = (0..in_dyn.len()).collect();
        slots.sort_by_key(|&slot| in_dyn[slot].keys().all(|&d| fill(slot, d)));
        for slot in slots {
            for (&d, f) in &in_dyn[slot] {
                let mut linked = links.iter().filter(|l| l.slot == slot && l.dim == d).peekable();
                if linked.peek().is_none() {
                    across.push((slot, d, f.clone()));
                }
                for l in linked {
                    match carried.get(&(l.out, l.out_dim)).cloned() {
                        Some((g, _)) if !self.same_layout(&g, f) && fill(slot, d) => {}
                        // The same real size laid out as factors here and as a prefix there
                        // (`[h, b, t]` from a repeat, `[b·h·t]` from a reshape): the operand of
                        // factors is gathered into the prefix (see `relayout`).
                        Some((g, _)) if self.relayout_of(&g, f) => {
                            relaid.insert((slot, d), (f.clone(), g));
                        }
                        Some((g, (s0, d0))) if self.relayout_of(f, &g) && !fill(s0, d0) => {
                            relaid.insert((s0, d0), (g, f.clone()));
                            for (factors, from) in carried.values_mut() {
                                if *from == (s0, d0) {
                                    *factors = f.clone();
                                }
                            }
                        }
                        Some((g, _)) if !self.same_layout(&g, f) => {
                            let shown = |f: &Factors| f.iter().map(ToString::to_string).collect::<Vec<_>>().join("·");
                            return Err(format!(
                                "combines operands whose real positions differ along a dim: input {slot}'s dim {d} \
                                 is padded as [{}], another input's as [{}]",
                                shown(f),
                                shown(&g)
                            )
                            .into());
                        }
                        _ => {
                            carried.insert((l.out, l.out_dim), (f.clone(), (slot, d)));
                        }
                    };
                }
            }
        }
        for ((slot, d), (factors, prefix)) in relaid {
            self.relayout_input(graph, id, (slot, d), &factors, &prefix)?;
            in_dyn[slot].insert(d, prefix);
        }
        for ((out, d), (f, _)) in carried {
            if f.len() > 1 {
                self.merged.insert((ValueRef { node: id, slot: out as u16 }, d), f);
            }
        }
        if across.is_empty() {
            return Ok(());
        }
        let merged_across = across.iter().any(|(_, _, f)| f.len() > 1);
        match padding {
            Padding::Exact if merged_across => Err(MERGED.into()),
            Padding::Exact => Ok(()),
            Padding::Rule(rule) => self.rule(graph, id, &rule, &in_dyn, &across),
            Padding::Refused | Padding::RefusedBecause(_) if merged_across => Err(MERGED.into()),
            Padding::Refused => Err(REFUSED.into()),
            Padding::RefusedBecause(why) => Err(why.into()),
        }
    }

    /// Positions along a dim of factors are the bucket's, not the real ones: they flow only
    /// into what indexes that dim (and the moves of values that keep them); positions along
    /// a prefix are real positions, usable as numbers. Records what each op makes of them.
    fn follow_positions(&mut self, graph: &Graph, id: NodeId, node: &Node) -> Res<()> {
        let ins = graph.inputs(id);
        let out = ValueRef { node: id, slot: 0 };
        let first = ins.first().and_then(|v| self.positions.get(v).cloned());
        let moves = matches!(
            node.op,
            Op::View(_)
                | Op::Expand(_)
                | Op::Unsqueeze(_)
                | Op::Squeeze(_)
                | Op::Permute(_)
                | Op::Convert(_)
                | Op::Identity(_)
        );
        if moves {
            if let Some(&bound) = ins.first().and_then(|v| self.bounded.get(v)) {
                self.bounded.insert(out, bound);
            }
            if let Some(window) = ins.first().and_then(|v| self.windows.get(v)).cloned() {
                self.windows.insert(out, window);
            }
        }
        // `arange(k)` of a static `k` holds indices below `k`.
        if let Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(k), step: Scalar::Int(1) }) = node.op {
            self.bounded.insert(out, k);
        }
        if let Some(window) = self.window(node, &ins) {
            self.windows.insert(out, window);
        }
        // A `cat` of bounded indices (a router's first and second choices, PhiMoE) is bounded.
        if matches!(node.op, Op::Cat(_)) {
            let bounds: Option<Vec<i64>> = ins.iter().map(|v| self.bounded.get(v).copied()).collect();
            if let Some(bound) = bounds.and_then(|b| b.into_iter().max()) {
                self.bounded.insert(out, bound);
            }
        }
        // Indices along a dim are below its size.
        let indices = match &node.op {
            Op::TopK(TopK { dim, .. }) | Op::Sort(Sort { dim, .. }) | Op::ExtremumDim(ExtremumDim { dim, .. }) => {
                Some((1, *dim))
            }
            Op::ArgReduce(ArgReduce { dim: Some(dim), .. }) => Some((0, *dim)),
            _ => None,
        };
        if let (Some((slot, dim)), Some(&x)) = (indices, ins.first()) {
            let ty = graph.value_type(x);
            let d = norm_dim(dim, ty.rank());
            if let Some(size) = ty.dims.get(d).and_then(Dim::as_static) {
                self.bounded.insert(ValueRef { node: id, slot }, size);
            }
            // Along a padded prefix, masked so that padding is never chosen (the rules of
            // argmax and max.dim): the indices are real positions of it (CLIP's pooling reads
            // `hidden[arange(b), ids.argmax(-1)]`).
            if let (Some(f), false) = (self.dyn_dims(graph, x).remove(&d), matches!(node.op, Op::TopK(_) | Op::Sort(_)))
            {
                if f.len() == 1 {
                    self.positions.insert(ValueRef { node: id, slot }, f);
                }
            }
        }
        let tracked = match (&node.op, first) {
            (Op::ArangeSym(ArangeSym { start: Dim::Static(0), step: 1, .. }), _)
            | (Op::Arange(Arange { start: Scalar::Int(0), step: Scalar::Int(1), .. }), _) => {
                self.dyn_dims(graph, out).remove(&0)
            }
            (_, Some(f)) if moves => Some(f),
            (
                Op::Binary(Binary { op: BinaryOp::Add | BinaryOp::Sub, rhs: Operand::Scalar(Scalar::Int(0)), .. }),
                Some(f),
            ) => Some(f),
            // Positions are not negative: truncating is flooring.
            (
                Op::Binary(Binary {
                    op: BinaryOp::FloorDiv | BinaryOp::TruncDiv,
                    rhs: Operand::Scalar(Scalar::Int(c)),
                    ..
                }),
                Some(f),
            ) => self.divided(&f, *c),
            _ => None,
        };
        if let Some(f) = tracked {
            self.positions.insert(out, f);
        }
        // Positions along factors may index that very dim, or move on as tracked above; nothing
        // else (used as numbers, they would be the bucket's).
        for (slot, v) in ins.iter().enumerate() {
            let Some(f) = [&self.positions, &self.perms].iter().find_map(|m| m.get(v).filter(|f| f.len() > 1)) else {
                continue;
            };
            let x_dims = || self.dyn_dims(graph, ins[0]);
            let rank = || graph.value_type(ins[0]).rank();
            let indexed = match &node.op {
                // The index tensor at `slot` indexes the dim of the `slot`th present index.
                Op::Index(Index { present }) if slot > 0 => {
                    present.iter().enumerate().filter(|(_, &p)| p).nth(slot - 1).map(|(d, _)| d)
                }
                Op::IndexSelect(IndexSelect { dim }) | Op::Gather(Gather { dim }) if slot == 1 => {
                    Some(norm_dim(*dim, rank()))
                }
                // Inverting a sort's permutation into a padded dim (the `index_put` rule checks it).
                Op::IndexPut(IndexPut { .. }) if slot > 0 && !x_dims().is_empty() => None,
                _ if self.positions.contains_key(&out) || node.outputs.is_empty() => None,
                _ => return Err("uses positions along a dim that merges a dynamic size as numbers".into()),
            };
            if let Some(d) = indexed {
                if !x_dims().get(&d).is_some_and(|g| self.same_factors(g, f)) {
                    return Err(
                        format!("indexes dim {d} with positions of another dim that merges a dynamic size").into()
                    );
                }
            }
        }
        Ok(())
    }

    /// Positions along a padded prefix plus a bounded non-negative offset: `p + b` with `b` below a
    /// static bound, or `p + c` for a constant `c >= 0`.
    fn window(&self, node: &Node, ins: &[ValueRef]) -> Option<(Factors, i64)> {
        let Op::Binary(Binary { op: BinaryOp::Add, lhs, rhs, alpha: None }) = &node.op else { return None };
        let prefix = |v: &ValueRef| self.positions.get(v).filter(|f| f.len() == 1).cloned();
        match (lhs, rhs, ins) {
            (Operand::Tensor, Operand::Tensor, [a, b]) => {
                let (p, bound) = match (prefix(a), prefix(b)) {
                    (Some(p), _) => (p, self.bounded.get(b)?),
                    (None, Some(p)) => (p, self.bounded.get(a)?),
                    (None, None) => return None,
                };
                Some((p, bound - 1))
            }
            (Operand::Tensor, Operand::Scalar(Scalar::Int(c)), [a]) if *c > 0 => Some((prefix(a)?, *c)),
            _ => None,
        }
    }

    /// No result returns positions along a dim of factors (they are the bucket's, not the real
    /// ones), or a dim whose real positions are not a prefix.
    fn check_outputs(&self, graph: &Graph) -> Res<()> {
        for o in graph.outputs() {
            // Results are cut back to a prefix of each dim: one whose real positions are not a
            // prefix would be cut wrong.
            let mut laid = self.merged.range((o.value, 0)..=(o.value, usize::MAX));
            if let Some(((_, d), _)) = laid.find(|(_, f)| f.len() > 1) {
                let node = graph.node(o.value.node);
                return Err(format!(
                    "node `{}` ({}) returns a dim ({d}) whose real positions are not a prefix (it merges a \
                     dynamic size under other dims, or is made of pieces): view or slice it back before returning it",
                    node.name,
                    op_name(node)
                )
                .into());
            }
            let positions = [&self.positions, &self.perms].iter().any(|m| m.get(&o.value).is_some_and(|f| f.len() > 1));
            let coordinates = self.columns.get(&o.value).is_some_and(|c| c.values().any(|f| f.len() > 1));
            if positions || coordinates {
                let node = graph.node(o.value.node);
                return Err(format!(
                    "node `{}` ({}) returns positions along a dim that merges a dynamic size, which are the \
                     bucket's, not the real ones",
                    node.name,
                    op_name(node)
                )
                .into());
            }
        }
        Ok(())
    }

    /// Positions along `f` divided by `c`: positions along `f` without its inner static
    /// factors of product `c`.
    fn divided(&self, f: &[SymExpr], c: i64) -> Option<Factors> {
        if let [e] = f {
            let whole = c > 0 && self.as_product(e)?.over(&Product::constant(c)).is_some();
            return whole.then(|| vec![SymExpr::FloorDiv(Box::new(e.clone()), Box::new(SymExpr::Int(c))).simplify()]);
        }
        let mut f = f.to_vec();
        let mut left = c;
        while left > 1 {
            let size = self.static_size(&f.pop()?)?;
            if size <= 0 || left % size != 0 {
                return None;
            }
            left /= size;
        }
        Some(self.normalize(f))
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
        let mut m = Masker::new(spec);
        let computed = counts::computed_symbols(graph);
        for symbol in spec.values.keys().filter(|s| !computed.contains(*s)) {
            let op = Op::Input(InputKind::Size { symbol: symbol.clone() });
            let node = graph.add_input(Node::new(format!("size_{symbol}"), op, [TensorType::new(DType::I64, &[])]));
            m.sizes.insert(symbol.clone(), ValueRef { node, slot: 0 });
        }
        for id in order {
            m.visit(graph, id).map_err(|why| {
                let node = graph.node(id);
                let line = node.origin.source_line().map(|l| format!(" ({l})")).unwrap_or_default();
                PassError::of(self.name(), why.map(|r| format!("node `{}` ({}){line} {r}", node.name, op_name(node))))
            })?;
        }
        let failed = |why| PassError::of(self.name(), why);
        m.relayout_outputs(graph).map_err(failed)?;
        m.check_outputs(graph).map_err(failed)?;
        m.size_outputs(graph).map_err(failed)?;
        cx.note(m.masks, "masks past the real sizes");
        Ok(Changed::Yes)
    }
}
