//! Sizes that come from data, as the export writes them: `nonzero` and `item()` with the
//! symbol the export names their size with, `repeat_interleave` of counts without
//! `output_size` (a `nonzero` of a mask, when the export bounds its length), indexing by a
//! boolean mask, the runtime assertions on sizes (`_assert_scalar`) that the symbols' ranges
//! prove, which are left out, a split by counts read from data with the `cat` that puts its
//! pieces back together (an MoE's tokens grouped by expert, JetMoE): the pieces are gathers at
//! the running sum of the counts, and the `cat`, whose size the export asserts
//! (`Eq(u0 + u1 + u2 + u3, 32)`), a scatter of each piece at its offset — and a `pad` back to a
//! fixed length by an amount computed from a count (Mochi), the same scatter.

use std::collections::BTreeMap;

use torchtpu_passes::ir::ops::{ArangeSym, Binary, Full, Index, IndexPut, Item, Nonzero, Select, SymInt, Unsqueeze};
use torchtpu_passes::ir::{norm_dim, BinaryOp, DType, Dim, Op, Operand, Scalar, SymExpr, TensorType, ValueRef};

use super::sizes::sym_name;
use super::{Builder, Lowered, SymbolBinding};
use crate::import::args::Args;
use crate::import::ops::{self, Special};
use crate::import::schema::{self, scalar_type, Argument, SymIntArgument};
use crate::import::srepr;
use crate::import::wire::{Recipe, Wire};
use torchtpu_passes::{bug, Fail};

/// The longest `repeat_interleave` of counts computed at its bound (its mask is `[n, bound]`).
const MAX_REPEATED: i64 = 1 << 24;

impl Builder<'_> {
    /// The lowering of a node whose result's size the data makes, and the name of its one
    /// operand: a `nonzero`, whose row count is the export's symbol for it; an `item()` whose
    /// result is a size (a plain symbol the export bounds with `torch._check`); a
    /// `repeat_interleave` of counts without `output_size` (see [`repeat_by_counts`]). `None`
    /// for every other node (other `item()`s stay unsupported).
    pub(super) fn size_from_data(
        &mut self,
        node: &schema::Node,
        special: Option<Special>,
    ) -> Result<Option<(Lowered, &'static str)>, String> {
        match special {
            Some(Special::Nonzero) => {
                let (_, types) = self.outputs_of(node)?;
                let size = types.first().and_then(|t| t.dims.first()).cloned().ok_or("its result is not a matrix")?;
                Ok(Some((Lowered::Op(Op::Nonzero(Nonzero { size })), "self")))
            }
            Some(Special::RepeatByCounts) => {
                let (_, types) = self.outputs_of(node)?;
                match types.first().and_then(|t| t.dims.first()) {
                    Some(d @ Dim::Sym(SymExpr::Sym(s))) if self.made_by_data(d) => {
                        Ok(Some((Lowered::Recipe(repeat_by_counts(d.clone(), self.repeat_bound(s)?)), "repeats")))
                    }
                    _ => Ok(None),
                }
            }
            Some(Special::Item) => {
                let [Argument::AsSymInt(SymIntArgument::AsName(n))] = node.outputs.as_slice() else { return Ok(None) };
                match self.sym_values.get(n) {
                    Some(d @ Dim::Sym(SymExpr::Sym(s))) => {
                        let at_most = self.equal_sum_with(s).map(|(_, rhs)| Dim::from_expr(rhs.clone()));
                        Ok(Some((Lowered::Op(Op::Item(Item { size: d.clone(), at_most })), "self")))
                    }
                    _ => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }

    /// The declared maximum of a `repeat_interleave`'s length, or how to declare one.
    fn repeat_bound(&self, symbol: &str) -> Result<i64, String> {
        let bound = self.ranges().get(symbol).map(|&(_, hi)| hi);
        bound.filter(|&hi| hi <= MAX_REPEATED).ok_or_else(|| {
            format!(
                "repeat_interleave of a tensor of counts has a data-dependent length `{symbol}` with no maximum \
                 up to {MAX_REPEATED}; give it `output_size=N`, or bound it at export with \
                 `torch._check(y.shape[0] <= N)` on its result `y`"
            )
        })
    }

    /// True when an `index` reads a boolean (or uint8) mask: its result's size comes from data.
    pub(super) fn indexes_by_mask(&self, node: &schema::Node) -> bool {
        let names: Vec<&str> = match node.inputs.get(1).map(|a| &a.arg) {
            Some(Argument::AsOptionalTensors(ts)) => ts
                .iter()
                .filter_map(|t| match t {
                    schema::OptionalTensorArgument::AsTensor(t) => Some(t.name.as_str()),
                    schema::OptionalTensorArgument::AsNone(_) => None,
                })
                .collect(),
            Some(Argument::AsTensors(ts)) => ts.iter().map(|t| t.name.as_str()).collect(),
            _ => return false,
        };
        names.iter().any(|n| {
            let dtype = self.graph_json().tensor_values.get(*n).and_then(|m| scalar_type(m.dtype));
            matches!(dtype, Some(DType::Bool | DType::U8))
        })
    }

    /// True for a runtime assertion on sizes (`_assert_scalar`, which the export writes for
    /// `torch._check` and for the bounds of a data-dependent size) that holds for every value
    /// of the symbols in their ranges: it can never fail, and is left out. Others stay, and
    /// `check` lists them.
    pub(super) fn asserts_what_holds(&self, node: &schema::Node) -> bool {
        let expr = assertion(node, &[self.graph_json(), &self.ep.graph_module.graph]);
        if let Some(Ok((lhs, rhs))) = expr.map(srepr::parse_equality) {
            let (lhs, rhs) = (lhs.simplify(), rhs.simplify());
            if self.equalities.iter().any(|(a, b)| (*a == lhs && *b == rhs) || (*a == rhs && *b == lhs)) {
                return true;
            }
        }
        let Some(Ok((difference, sign))) = expr.map(srepr::parse_relation) else { return false };
        // An open side of a range is far beyond any size, so it proves nothing that depends on it.
        const FAR: i64 = 1 << 48;
        let ranges = self
            .ep
            .range_constraints
            .iter()
            .map(|(s, rc)| (s.clone(), (rc.min_val.unwrap_or(-FAR).max(-FAR), rc.max_val.unwrap_or(FAR).min(FAR))))
            .collect();
        difference.simplify().range(&ranges).is_some_and(|r| sign.holds_on(r))
    }
}

/// The condition a runtime assertion on sizes (`_assert_scalar`) checks, as the export writes it
/// (`GreaterThan(Symbol('u0', integer=True), Integer(0))`), from the first of `graphs` that
/// records it.
fn assertion<'g>(node: &schema::Node, graphs: &[&'g schema::Graph]) -> Option<&'g str> {
    if ops::special(&node.target) != Some(Special::AssertOnSizes) {
        return None;
    }
    let Some(Argument::AsSymBool(v)) = node.inputs.first().map(|a| &a.arg) else { return None };
    let name = sym_name(v).ok()?;
    graphs.iter().find_map(|g| g.sym_bool_values.get(&name)?.get("as_expr")?.get("expr_str")?.as_str())
}

/// The equalities the program asserts between sizes made by data and a constant or sizes of
/// the inputs (`_assert_scalar` of `Eq(u0 + u1 + u2 + u3, 32)`, which torch writes for a split
/// by counts read from data): the first side stands for the second. A symbol is made by data
/// when no input's dim gives it (`bindings`). They are taken as facts, as torch takes them, not
/// checked at run time.
pub(super) fn asserted_equalities(
    graph: &schema::Graph,
    bindings: &BTreeMap<String, SymbolBinding>,
) -> Vec<(SymExpr, SymExpr)> {
    let mut out = Vec::new();
    for node in &graph.nodes {
        if let Some(Ok((lhs, rhs))) = assertion(node, &[graph]).map(srepr::parse_equality) {
            let of_data = |e: &SymExpr| e.symbols().iter().any(|s| !bindings.contains_key(s));
            match (lhs.simplify(), rhs.simplify()) {
                (l, r) if of_data(&l) && !of_data(&r) => out.push((l, r)),
                (l, r) if of_data(&r) && !of_data(&l) => out.push((r, l)),
                // Two sizes made by data (`Eq(u3, u2)`: the same mask applied twice): the one
                // made later stands for the one made first.
                (SymExpr::Sym(l), SymExpr::Sym(r)) if l != r => {
                    let (later, first) = if made_order(&l) > made_order(&r) { (l, r) } else { (r, l) };
                    out.push((SymExpr::Sym(later), SymExpr::Sym(first)));
                }
                _ => {}
            }
        }
    }
    out
}

/// The order in which torch made a size from data: `u3` after `u2` (then by name).
fn made_order(symbol: &str) -> (u64, &str) {
    let number = symbol.trim_start_matches(|c: char| c.is_ascii_alphabetic()).parse().unwrap_or(u64::MAX);
    (number, symbol)
}

impl Builder<'_> {
    /// What an asserted equality makes `e` (see [`asserted_equalities`]).
    pub(super) fn asserted_equal(&self, e: &SymExpr) -> Option<SymExpr> {
        self.equalities.iter().find(|(lhs, _)| lhs == e).map(|(_, rhs)| rhs.clone())
    }

    /// True when a symbol is made by data (not a dim of an input).
    fn made_by_data(&self, d: &Dim) -> bool {
        matches!(d, Dim::Sym(e) if e.symbols().iter().any(|s| !self.bindings.contains_key(s)))
    }

    /// A node given sizes that come from data in a list argument (`split_with_sizes` by counts,
    /// a `constant_pad_nd` to a length).
    pub(super) fn takes_counts(&self, node: &schema::Node) -> bool {
        node.inputs.iter().any(|a| match &a.arg {
            Argument::AsSymInts(sizes) => sizes.iter().any(|s| match s {
                SymIntArgument::AsName(n) => self.sym_values.get(n).is_some_and(|d| self.made_by_data(d)),
                SymIntArgument::AsInt(_) => false,
            }),
            _ => false,
        })
    }

    /// A `cat` of pieces sized by data into a result whose size the data does not make (an
    /// asserted sum).
    pub(super) fn concatenates_counts(&mut self, node: &schema::Node) -> bool {
        let Some(Argument::AsTensors(pieces)) = node.inputs.first().map(|a| &a.arg) else { return false };
        let Some(Argument::AsTensor(out)) = node.outputs.first() else { return false };
        let dim = match node.inputs.get(1).map(|a| &a.arg) {
            Some(Argument::AsInt(d)) => *d,
            _ => 0,
        };
        let Ok(out) = self.tensor_type(&out.name) else { return false };
        let d = norm_dim(dim, out.rank());
        let sized_by_data = pieces
            .iter()
            .any(|p| self.tensor_type(&p.name).is_ok_and(|t| t.dims.get(d).is_some_and(|x| self.made_by_data(x))));
        sized_by_data && out.dims.get(d).is_some_and(|x| !self.made_by_data(x))
    }
}

/// `repeat_interleave(repeats)` of a length `size` made by data, at most `bound`: element `j`
/// repeated `repeats[j]` times is the row of each true element of the mask
/// `arange(bound) < repeats[:, None]`, `[n, bound]`, in row-major order — a `nonzero` of it,
/// whose count `sum(repeats)` is the length.
fn repeat_by_counts(size: Dim, bound: i64) -> Recipe {
    Box::new(move |w| {
        let repeats = w.inputs[0];
        if w.ty(repeats).rank() != 1 {
            return Err(format!("repeat_interleave takes a 1-d tensor of counts, found {}", w.ty(repeats)).into());
        }
        let positions = w.literal((0..bound).map(Scalar::Int).collect(), TensorType::new(DType::I64, &[1, bound]))?;
        let repeats = w.convert(repeats, DType::I64)?;
        let repeats = w.op(Op::Unsqueeze(Unsqueeze { dim: 1 }), &[repeats])?;
        let below = Binary { op: BinaryOp::Lt, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None };
        let mask = w.op(Op::Binary(below), &[positions, repeats])?;
        let coordinates = w.op(Op::Nonzero(Nonzero { size: size.clone() }), &[mask])?;
        let rows = w.op(Op::Select(Select { dim: 1, index: 0 }), &[coordinates])?;
        let dtype = w.outputs.first().map_or(DType::I64, |t| t.dtype);
        Ok(vec![w.convert(rows, dtype)?])
    })
}

/// The 0-d `i64` value of a size (a constant, or the program's value of the expression).
fn size_value(w: &mut Wire<'_>, e: &SymExpr) -> Result<ValueRef, Fail> {
    let value = match e.as_const() {
        Some(c) => Dim::Static(c),
        None => Dim::Sym(e.clone()),
    };
    w.op(Op::SymInt(SymInt { value }), &[])
}

/// Positions `start .. start + len` as an `i64[len]` index.
fn positions(w: &mut Wire<'_>, start: &SymExpr, len: &Dim) -> Result<ValueRef, Fail> {
    let ty = TensorType { dtype: DType::I64, dims: vec![len.clone()] };
    let iota =
        w.typed(Op::ArangeSym(ArangeSym { start: Dim::Static(0), end: len.clone(), step: 1 }), &[], vec![ty])?[0];
    if start.as_const() == Some(0) {
        return Ok(iota);
    }
    let start = size_value(w, start)?;
    let add = Binary { op: BinaryOp::Add, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None };
    w.op(Op::Binary(add), &[iota, start])
}

/// `split_with_sizes(x, counts, dim)` with counts from data: piece `k` gathers the positions
/// from the sum of the counts before it, as many as its count (past the end of `x`, a gather
/// reads a clamped row: padding, which the masks keep out of every real result).
pub(super) fn split_by_counts(a: &mut Args<'_>) -> Result<Recipe, Fail> {
    a.tensor("self")?;
    let sizes = a.dims("split_sizes")?;
    let dim = a.int("dim", Some(0))?;
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let d = norm_dim(dim, w.ty(x).rank());
        let mut present = vec![false; d];
        present.push(true);
        let mut start = SymExpr::Int(0);
        let mut pieces = Vec::with_capacity(sizes.len());
        for size in &sizes {
            let at = positions(w, &start, size)?;
            pieces.push(w.op(Op::Index(Index { present: present.clone() }), &[x, at])?);
            start = SymExpr::Add(vec![start, size.to_expr()]).simplify();
        }
        Ok(pieces)
    }))
}

/// `constant_pad_nd(x, pad, value)` whose pad is computed from sizes: from a size made by data
/// (Mochi's attention pads its text tokens back to their maximum), or from an input's (Swin pads
/// its height and width to whole windows, `(-h) % 7`). Along each padded dim, `x` is put at its
/// leading pad in a tensor of `value`; its padded rows land past the real end and are dropped,
/// as in [`cat_by_counts`].
pub(super) fn pad_by_counts(a: &mut Args<'_>, ranges: &BTreeMap<String, (i64, i64)>) -> Result<Recipe, Fail> {
    a.tensor("self")?;
    let pad = a.dims("pad")?;
    // A negative pad crops; cropping by a size is not a write at a position.
    let least = |p: &Dim| p.to_expr().range(ranges).filter(|r| r.0 >= 0).or_else(|| p.to_expr().exact_range(ranges));
    if let Some(p) = pad.iter().find(|p| least(p).is_none_or(|(lo, _)| lo < 0)) {
        return Err(format!("a pad computed from sizes must be at least 0 at every size, and `{p}` may not be").into());
    }
    let value = a.scalar("value", Some(Scalar::Int(0)))?;
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        let rank = out.rank();
        // `pad` lists (before, after) pairs from the last dim; each padded dim is one write.
        let mut acc = x;
        for (i, pair) in pad.chunks(2).enumerate() {
            if pair.iter().all(|p| p.as_static() == Some(0)) {
                continue;
            }
            let d = rank.checked_sub(i + 1).ok_or("more pads than dims")?;
            let mut ty = w.ty(acc).clone();
            ty.dims[d] = out.dims[d].clone();
            let fill = w.typed(Op::Full(Full { size: ty.dims.clone(), value }), &[], vec![ty])?[0];
            acc = put_at(w, fill, acc, d, &pair[0].to_expr())?;
        }
        Ok(vec![acc])
    }))
}

/// `cat(pieces, dim)` of pieces sized by data whose sizes sum to the result's static size: each
/// piece scattered at the sum of the sizes before it (its padded rows land past the end and
/// are dropped; see `bucket_masks`).
pub(super) fn cat_by_counts(a: &mut Args<'_>) -> Result<Recipe, Fail> {
    let count = a.tensor_list("tensors")?;
    let dim = a.int("dim", Some(0))?;
    Ok(Box::new(move |w| {
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        let d = norm_dim(dim, out.rank());
        let zeros = Op::Full(Full { size: out.dims.clone(), value: Scalar::Int(0) });
        let mut acc = w.typed(zeros, &[], vec![out])?[0];
        let mut start = SymExpr::Int(0);
        for k in 0..count {
            let piece = w.inputs[k];
            acc = put_at(w, acc, piece, d, &start)?;
            start = SymExpr::Add(vec![start, w.ty(piece).dims[d].to_expr()]).simplify();
        }
        Ok(vec![acc])
    }))
}

/// `x` written into `into` along dim `d`, from position `start` on.
fn put_at(w: &mut Wire<'_>, into: ValueRef, x: ValueRef, d: usize, start: &SymExpr) -> Result<ValueRef, Fail> {
    let len = w.ty(x).dims.get(d).cloned().ok_or("a piece of lower rank")?;
    let at = positions(w, start, &len)?;
    let mut present = vec![false; d];
    present.push(true);
    w.op(Op::IndexPut(IndexPut { present, accumulate: false }), &[into, at, x])
}

impl Builder<'_> {
    /// A maximum for a size made by data that an asserted equality bounds: a term of a sum of
    /// sizes (each at least 0) equal to an expression of the inputs' sizes is at most that
    /// expression's maximum (JetMoE's per-expert counts sum to twice its tokens).
    pub(super) fn bound_by_equality(&self, symbol: &str) -> Option<i64> {
        let (_, rhs) = self.equal_sum_with(symbol)?;
        rhs.range(&self.ranges()).map(|(_, hi)| hi)
    }

    /// The asserted equality whose first side is a sum of sizes, each at least 0, with `symbol`
    /// among its terms: `symbol` is at most the second side.
    fn equal_sum_with(&self, symbol: &str) -> Option<&(SymExpr, SymExpr)> {
        let ranges = self.ranges();
        let at_least_zero =
            |s: &str| self.ep.range_constraints.get(s).and_then(|rc| rc.min_val).is_some_and(|m| m >= 0);
        let non_negative = |e: &SymExpr| match e {
            SymExpr::Sym(s) => at_least_zero(s),
            _ => e.range(&ranges).is_some_and(|(lo, _)| lo >= 0),
        };
        self.equalities.iter().find(|(lhs, _)| {
            let terms = match lhs {
                SymExpr::Add(terms) => terms.as_slice(),
                one => std::slice::from_ref(one),
            };
            terms.contains(&SymExpr::Sym(symbol.to_string())) && terms.iter().all(non_negative)
        })
    }
}
