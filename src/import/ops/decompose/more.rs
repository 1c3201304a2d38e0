//! Ops met in real exports beyond Core ATen, each a few IR ops: random draws shaped like a
//! tensor (`rand_like`, `randn_like`, `uniform`, `bernoulli`, `randint`), `round(decimals=)`,
//! `addbmm`, the int8 and fp8 matmuls `_int_mm` and `_scaled_mm`, `conv_tbc` (time-batch-channel convolution),
//! `repeat_interleave` of a tensor of counts with its `output_size`, `masked_select` and
//! `x[mask]` (a `nonzero` and a gather), and `cummax` and `cummin` with their indices.

use torchtpu_passes::ir::ops::{
    Arange, ArangeSym, Binary, Bmm, Clamp, Convolution, Cumulative, Expand, Full, Index, IndexPut, Mm, Nonzero,
    Permute, Rand, Reduce, Select, Slice, Sort, Unsqueeze, View, Where,
};
use torchtpu_passes::ir::{
    BinaryOp, CumulativeOp, DType, Dim, Op, Operand, ReduceOp, Scalar, TensorType, UnaryOp, ValueRef,
};

use super::super::super::wire::{Recipe, Wire};
use super::{scalar_op, static_dims, tensor_op, Args, R};
use torchtpu_passes::bug;

/// The largest range `randint` draws from: its draws scale an f32 uniform, exact up to 2^24.
const RANDINT_RANGE: i64 = 1 << 24;

/// `rand_like(x)` / `randn_like(x)`: a draw of the result's type (the archive records it).
pub(super) fn rand_like(a: &mut Args<'_>, normal: bool) -> R<Recipe> {
    a.tensor("self")?;
    a.rng_seed();
    Ok(Box::new(move |w| {
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        Ok(vec![w.typed(Op::Rand(Rand { normal }), &[w.inputs[1]], vec![out])?[0]])
    }))
}

/// `uniform(x, from, to)`: `from + (to - from) · u`, `u` uniform in [0, 1) of `x`'s type.
pub(super) fn uniform(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let from = a.float("from", Some(0.0))?;
    let to = a.float("to", Some(1.0))?;
    a.rng_seed();
    Ok(Box::new(move |w| {
        let ty = w.ty(w.inputs[0]);
        let u = w.typed(Op::Rand(Rand { normal: false }), &[w.inputs[1]], vec![ty])?[0];
        let scaled = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(to - from)), &[u])?;
        Ok(vec![w.op(scalar_op(BinaryOp::Add, Scalar::Float(from)), &[scaled])?])
    }))
}

/// `bernoulli(x, p)` (`p` a number) or `bernoulli(p)` (`x` the probabilities): 1 where a
/// uniform draw is below the probability, in `x`'s dtype.
pub(super) fn bernoulli(a: &mut Args<'_>, given_p: bool) -> R<Recipe> {
    a.tensor("self")?;
    let p = if given_p { Some(a.float("p", Some(0.5))?) } else { None };
    a.rng_seed();
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let draw_ty = TensorType { dtype: DType::F32, ..ty.clone() };
        let u = w.typed(Op::Rand(Rand { normal: false }), &[w.inputs[1]], vec![draw_ty])?[0];
        let hit = match p {
            Some(p) => w.op(scalar_op(BinaryOp::Lt, Scalar::Float(p)), &[u])?,
            None => {
                let p = w.convert(x, DType::F32)?;
                w.op(tensor_op(BinaryOp::Lt), &[u, p])?
            }
        };
        Ok(vec![w.convert(hit, ty.dtype)?])
    }))
}

/// `randint(low, high, size)`: `low + min(⌊u · (high − low)⌋, high − low − 1)` for `u` uniform
/// in [0, 1) (the minimum guards f32 rounding up to the range's end).
pub(super) fn randint(a: &mut Args<'_>, has_low: bool) -> R<Recipe> {
    let low = if has_low { a.int("low", None)? } else { 0 };
    let high = a.int("high", None)?;
    let n = high.checked_sub(low).filter(|&n| (1..=RANDINT_RANGE).contains(&n)).ok_or_else(|| {
        format!("randint from {low} to {high}: the range must hold 1 to 2^24 values (draws scale an f32 uniform)")
    })?;
    a.rng_seed();
    Ok(Box::new(move |w| {
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        let draw_ty = TensorType { dtype: DType::F32, ..out.clone() };
        let u = w.typed(Op::Rand(Rand { normal: false }), &[w.inputs[0]], vec![draw_ty])?[0];
        let scaled = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(n as f64)), &[u])?;
        let floor = w.op(Op::Unary(UnaryOp::Floor), &[scaled])?;
        let top = Scalar::Float((n - 1) as f64);
        let index = w.op(Op::Clamp(Clamp { min: Some(Scalar::Float(0.0)), max: Some(top) }), &[floor])?;
        let index = w.convert(index, out.dtype)?;
        Ok(vec![w.op(scalar_op(BinaryOp::Add, Scalar::Int(low)), &[index])?])
    }))
}

/// `round(x, decimals)` as PyTorch's kernel computes it in the input's dtype: `round(x · 10^d)
/// / 10^d`, or `round(x / 10^-d) · 10^-d` for negative `d`, rounding half to even.
pub(super) fn round_decimals(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let decimals = a.int("decimals", None)?;
    let exponent = i32::try_from(decimals).map_err(|_| format!("round to {decimals} decimals"))?;
    let power = 10f64.powi(exponent.abs());
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        if !w.ty(x).dtype.is_float() {
            return Err(format!("round with decimals of {}: only floating-point tensors", w.ty(x)).into());
        }
        let (into, back) = if decimals >= 0 { (BinaryOp::Mul, BinaryOp::Div) } else { (BinaryOp::Div, BinaryOp::Mul) };
        let shifted = w.op(scalar_op(into, Scalar::Float(power)), &[x])?;
        let rounded = w.op(Op::Unary(UnaryOp::Round), &[shifted])?;
        Ok(vec![w.op(scalar_op(back, Scalar::Float(power)), &[rounded])?])
    }))
}

/// `addbmm(x, b1, b2, beta, alpha)`: `beta · x + alpha · Σ_b b1[b] @ b2[b]`; with `beta = 0`,
/// `x` is not read (its NaNs do not propagate), as in PyTorch.
pub(super) fn addbmm(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    a.tensor("batch1")?;
    a.tensor("batch2")?;
    let beta = a.scalar("beta", Some(Scalar::Int(1)))?;
    let alpha = a.scalar("alpha", Some(Scalar::Int(1)))?;
    Ok(Box::new(move |w| {
        let (x, b1, b2) = (w.inputs[0], w.inputs[1], w.inputs[2]);
        let products = w.op(Op::Bmm(Bmm), &[b1, b2])?;
        let sum =
            w.op(Op::Reduce(Reduce { op: ReduceOp::Sum, dims: vec![0], keepdim: false, dtype: None }), &[products])?;
        let scaled = if alpha.as_f64() == 1.0 { sum } else { w.op(scalar_op(BinaryOp::Mul, alpha), &[sum])? };
        if beta.as_f64() == 0.0 {
            return Ok(vec![scaled]);
        }
        let base = if beta.as_f64() == 1.0 { x } else { w.op(scalar_op(BinaryOp::Mul, beta), &[x])? };
        Ok(vec![w.op(tensor_op(BinaryOp::Add), &[base, scaled])?])
    }))
}

/// `_int_mm(a, b)`: int8 `[m, k] @ [k, n]` accumulated in int32 (exact).
pub(super) fn int_mm(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    a.tensor("mat2")?;
    Ok(Box::new(move |w| {
        let (x, y) = (w.inputs[0], w.inputs[1]);
        if w.ty(x).dtype != DType::I8 || w.ty(y).dtype != DType::I8 {
            return Err(format!("_int_mm takes int8 operands, found {} and {}", w.ty(x), w.ty(y)).into());
        }
        let (x, y) = (w.convert(x, DType::I32)?, w.convert(y, DType::I32)?);
        Ok(vec![w.op(Op::Mm(Mm), &[x, y])?])
    }))
}

/// `conv_tbc(x [T, B, Cin], w [K, Cin, Cout], bias [Cout], pad)`: a 1-d convolution over time,
/// laid out `[B, Cin, T]` for it and back.
pub(super) fn conv_tbc(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    a.tensor("weight")?;
    a.tensor("bias")?;
    let pad = a.int("pad", Some(0))?;
    Ok(Box::new(move |w| {
        let (x, k, bias) = (w.inputs[0], w.inputs[1], w.inputs[2]);
        if w.ty(x).rank() != 3 || w.ty(k).rank() != 3 {
            return Err(format!("conv_tbc takes a 3-d input and weight, found {} and {}", w.ty(x), w.ty(k)).into());
        }
        // An empty result (no time step, even padded, fits the kernel) is zeros, as in PyTorch.
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        if out.dims.contains(&Dim::Static(0)) {
            return Ok(vec![
                w.typed(Op::Full(Full { size: out.dims.clone(), value: Scalar::Int(0) }), &[], vec![out])?[0],
            ]);
        }
        let x = w.op(Op::Permute(Permute { dims: vec![1, 2, 0] }), &[x])?;
        let k = w.op(Op::Permute(Permute { dims: vec![2, 1, 0] }), &[k])?;
        let conv = Convolution {
            stride: vec![1],
            padding: vec![pad],
            dilation: vec![1],
            transposed: false,
            output_padding: vec![0],
            groups: 1,
            has_bias: true,
        };
        let y = w.op(Op::Convolution(conv), &[x, k, bias])?;
        Ok(vec![w.op(Op::Permute(Permute { dims: vec![2, 0, 1] }), &[y])?])
    }))
}

/// `repeat_interleave(repeats, output_size=N)`: `i` repeated `repeats[i]` times, `N` entries in
/// all; entry `k` is the number of blocks that end at or before `k` (the cumulative counts `<=
/// k`). Without `output_size` the length is data-dependent, which is refused with what to do.
pub(super) fn repeat_interleave(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("repeats")?;
    let n = a.opt_int("output_size")?.ok_or(
        "repeat_interleave of a tensor of counts has a data-dependent length; give it `output_size=N` (the \
         total count) to export a static one",
    )?;
    Ok(Box::new(move |w| {
        let repeats = w.inputs[0];
        let ty = w.ty(repeats);
        if ty.rank() != 1 {
            return Err(format!("repeat_interleave takes a 1-d tensor of counts, found {ty}").into());
        }
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        let cumsum = Op::Cumulative(Cumulative { op: CumulativeOp::Cumsum, dim: 0, dtype: Some(DType::I64) });
        let ends = w.op(cumsum, &[repeats])?;
        let ends = w.op(Op::Unsqueeze(Unsqueeze { dim: 0 }), &[ends])?;
        let positions = w.typed(
            Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(n), step: Scalar::Int(1) }),
            &[],
            vec![TensorType::new(DType::I64, &[n])],
        )?[0];
        let positions = w.op(Op::Unsqueeze(Unsqueeze { dim: 1 }), &[positions])?;
        let passed = w.op(
            Op::Binary(Binary { op: BinaryOp::Le, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None }),
            &[ends, positions],
        )?;
        let count = Reduce { op: ReduceOp::Sum, dims: vec![1], keepdim: false, dtype: Some(DType::I64) };
        let index = w.op(Op::Reduce(count), &[passed])?;
        Ok(vec![w.convert(index, out.dtype)?])
    }))
}

/// `_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype)`: fp8 (or other) operands
/// read exactly as f32, `(a · scale_a) @ (b · scale_b) + bias` with f32 accumulation — the
/// scales tensor-wise (one element) or row-wise (`[m, 1]` and `[1, n]`), so they scale the
/// product's rows and columns — then converted to the result's dtype.
pub(super) fn scaled_mm(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    a.tensor("mat2")?;
    a.tensor("scale_a")?;
    a.tensor("scale_b")?;
    let bias = a.opt_tensor("bias")?;
    if a.opt_tensor("scale_result")? {
        return Err("_scaled_mm with a `scale_result` (an fp8 result) is not supported".into());
    }
    Ok(Box::new(move |w| {
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        let f32 = |w: &mut Wire<'_>, v| w.convert(v, DType::F32);
        let (x, y) = (f32(w, w.inputs[0])?, f32(w, w.inputs[1])?);
        let (sa, sb) = (f32(w, w.inputs[2])?, f32(w, w.inputs[3])?);
        let product = w.op(Op::Mm(Mm), &[x, y])?;
        let rows = w.op(tensor_op(BinaryOp::Mul), &[product, sa])?;
        let mut result = w.op(tensor_op(BinaryOp::Mul), &[rows, sb])?;
        if bias {
            let b = f32(w, w.inputs[4])?;
            result = w.op(tensor_op(BinaryOp::Add), &[result, b])?;
        }
        Ok(vec![w.convert(result, out.dtype)?])
    }))
}

/// `masked_select(x, mask)`: both broadcast to one shape, the coordinates of the mask's set
/// elements (`nonzero`, whose row count is the archive's symbol for the result's length), and
/// `x` gathered at them.
pub(super) fn masked_select(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    a.tensor("mask")?;
    Ok(Box::new(move |w| {
        let (x, mask) = (w.inputs[0], w.inputs[1]);
        let rows = w.outputs.first().and_then(|t| t.dims.first()).cloned().ok_or_else(|| bug("one 1-d result"))?;
        let shape = broadcast_shape(&w.ty(x).dims, &w.ty(mask).dims)?;
        let widen = |w: &mut Wire<'_>, v| {
            if w.ty(v).dims == shape {
                Ok(v)
            } else {
                w.op(Op::Expand(Expand { size: shape.clone() }), &[v])
            }
        };
        let (x, mask) = (widen(w, x)?, widen(w, mask)?);
        let set = w.op(Op::Nonzero(Nonzero { size: rows }), &[mask])?;
        let mut coordinates = vec![x];
        for d in 0..shape.len() {
            coordinates.push(w.op(Op::Select(Select { dim: 1, index: d as i64 }), &[set])?);
        }
        let gather = Index { present: vec![true; shape.len()] };
        Ok(vec![w.op(Op::Index(gather), &coordinates)?])
    }))
}

/// `x[mask]` (after full slices, `x[:, mask]`): a boolean mask over the dims it stands at is
/// the coordinates of its set elements (`nonzero`, whose row count is the archive's symbol for
/// that dim of the result), which then index those dims. A mask beside other indices is
/// refused.
pub(crate) fn index_by_mask(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let present = a.optional_tensor_list("indices")?;
    let at = match present.iter().position(|&p| p) {
        Some(k) if present[k + 1..].iter().all(|&p| !p) => k,
        _ => return Err("a boolean mask beside other indices is not supported; index by the mask alone".into()),
    };
    Ok(Box::new(move |w| {
        let (x, mask) = (w.inputs[0], w.inputs[1]);
        let rank = w.ty(mask).rank();
        let x_dims = w.ty(x).dims;
        if x_dims.get(at..at + rank) != Some(&w.ty(mask).dims[..]) {
            return Err(format!("the mask {} does not match the dims it indexes of {}", w.ty(mask), w.ty(x)).into());
        }
        let rows = w.outputs.first().and_then(|t| t.dims.get(at)).cloned().ok_or_else(|| bug("the result's rank"))?;
        let set = w.op(Op::Nonzero(Nonzero { size: rows }), &[mask])?;
        let mut operands = vec![x];
        for d in 0..rank {
            operands.push(w.op(Op::Select(Select { dim: 1, index: d as i64 }), &[set])?);
        }
        let mut present = vec![false; at];
        present.extend(std::iter::repeat_n(true, rank));
        Ok(vec![w.op(Op::Index(Index { present }), &operands)?])
    }))
}

/// A floating-point `item()`: the one element as the 0-d f32 a symbolic float is (see
/// `size_number_op`).
pub(crate) fn float_item(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        if ty.dims.iter().any(|d| d.as_static() != Some(1)) {
            return Err(format!("item() takes one element, found {ty}").into());
        }
        let x = if ty.rank() == 0 { x } else { w.op(Op::View(View { size: vec![] }), &[x])? };
        Ok(vec![w.convert(x, DType::F32)?])
    }))
}

/// `_unique2(x, sorted, return_inverse, return_counts)` (`torch.unique`): `x` flattened and
/// sorted (stably); an element starts a run where it differs from the one before; the
/// values are the runs' first elements (a `nonzero` of the starts: the export's symbol for
/// their count, at most the element count), the inverse of each element its run's number put
/// back in `x`'s order, and the counts each run's length. `sorted=False` is refused: eager's
/// order is then its hash set's.
pub(crate) fn unique(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    if !a.bool("sorted", true)? {
        return Err("unique with sorted=False gives eager's hash order, which a compiled program cannot \
                    reproduce; pass sorted=True"
            .into());
    }
    let (inverse, counts) = (a.bool("return_inverse", false)?, a.bool("return_counts", false)?);
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        // A 1-d input may have a symbolic length (a size bucket pads it: see `bucket_masks`).
        let n = match &ty.dims[..] {
            [n] => n.clone(),
            _ => Dim::Static(static_dims(&ty, "unique's input")?.iter().product::<i64>()),
        };
        let outs = w.outputs.clone();
        let [values_ty, inverse_ty, counts_ty] = &outs[..] else { return Err(bug("three results")) };
        let rows = values_ty.dims.first().cloned().ok_or_else(|| bug("1-d values"))?;
        if n == Dim::Static(0) {
            return outs.iter().map(|t| filled(w, t, Scalar::Int(0))).collect();
        }
        let i64s = TensorType { dtype: DType::I64, dims: vec![n.clone()] };
        let flat = w.op(Op::View(View { size: vec![n.clone()] }), &[x])?;
        let sort = Op::Sort(Sort { dim: 0, descending: false, stable: true });
        let sorted_ty = TensorType { dtype: ty.dtype, dims: vec![n.clone()] };
        let sorted = w.typed(sort, &[flat], vec![sorted_ty, i64s.clone()])?;
        let (sorted, perm) = (sorted[0], sorted[1]);
        // A run of equal values starts where an element differs from the one before it (each
        // read at `max(i - 1, 0)`, so that a padded length needs no slice of it).
        let positions = ArangeSym { start: Dim::Static(0), end: n, step: 1 };
        let positions = w.typed(Op::ArangeSym(positions), &[], vec![i64s.clone()])?[0];
        let before = w.op(scalar_op(BinaryOp::Sub, Scalar::Int(1)), &[positions])?;
        let before = w.op(scalar_op(BinaryOp::Maximum, Scalar::Int(0)), &[before])?;
        let before = w.op(Op::Index(Index { present: vec![true] }), &[sorted, before])?;
        let differs = w.op(tensor_op(BinaryOp::Ne), &[sorted, before])?;
        let first = w.op(scalar_op(BinaryOp::Eq, Scalar::Int(0)), &[positions])?;
        let starts = w.op(tensor_op(BinaryOp::LogicalOr), &[differs, first])?;
        let at = w.op(Op::Nonzero(Nonzero { size: rows.clone() }), &[starts])?;
        let at = w.op(Op::Select(Select { dim: 1, index: 0 }), &[at])?;
        let values = w.op(Op::Index(Index { present: vec![true] }), &[sorted, at])?;
        // Each sorted element's run: the starts up to it, less one.
        let run = w.convert(starts, DType::I64)?;
        let run = w.op(Op::Cumulative(Cumulative { op: CumulativeOp::Cumsum, dim: 0, dtype: None }), &[run])?;
        let run = w.op(scalar_op(BinaryOp::Sub, Scalar::Int(1)), &[run])?;
        let put = |w: &mut Wire<'_>, at, v, accumulate| {
            let base = filled(w, &i64s, Scalar::Int(0))?;
            w.op(Op::IndexPut(IndexPut { present: vec![true], accumulate }), &[base, at, v])
        };
        let inverse = if inverse {
            let back = put(w, perm, run, false)?;
            w.op(Op::View(View { size: inverse_ty.dims.clone() }), &[back])?
        } else {
            filled(w, inverse_ty, Scalar::Int(0))?
        };
        let counts = if counts {
            let ones = filled(w, &i64s, Scalar::Int(1))?;
            let lengths = put(w, run, ones, true)?;
            let slice = Op::Slice(Slice { dim: 0, start: Dim::Static(0), end: rows.clone(), step: 1 });
            w.typed(slice, &[lengths], vec![TensorType { dtype: DType::I64, dims: vec![rows] }])?[0]
        } else {
            filled(w, counts_ty, Scalar::Int(0))?
        };
        Ok(vec![values, inverse, counts])
    }))
}

/// A tensor of type `ty` filled with `value`.
fn filled(w: &mut Wire<'_>, ty: &TensorType, value: Scalar) -> R<ValueRef> {
    Ok(w.typed(Op::Full(Full { size: ty.dims.clone(), value }), &[], vec![ty.clone()])?[0])
}

/// The shape two operands broadcast to (NumPy's rule).
fn broadcast_shape(a: &[Dim], b: &[Dim]) -> R<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let at = |s: &[Dim], i: usize| if i + s.len() >= rank { s[i + s.len() - rank].clone() } else { Dim::Static(1) };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Ok(x),
            (Dim::Static(1), y) => Ok(y),
            (x, Dim::Static(1)) => Ok(x),
            (x, y) => Err(format!("shapes do not broadcast: {x} against {y} at dim {i}").into()),
        })
        .collect()
}

/// `cummax(x, dim)` / `cummin(x, dim)`: the running extremum, and the index of the last element
/// equal to it so far (torch's ties go to the later one; from a NaN on, the last NaN's). An
/// element equal to the running extremum at its own position (or a NaN) marks its index; the
/// running maximum of the marks (−1 elsewhere) is then the index at every position.
pub(super) fn cumulative_extremum(a: &mut Args<'_>, op: CumulativeOp) -> R<Recipe> {
    a.tensor("self")?;
    let dim = a.int("dim", None)?;
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let values = w.op(Op::Cumulative(Cumulative { op, dim, dtype: None }), &[x])?;
        if ty.rank() == 0 {
            let index = w.literal(vec![Scalar::Int(0)], TensorType::new(DType::I64, &[]))?;
            return Ok(vec![values, index]);
        }
        let d = super::checked_dim(dim, &ty)?;
        let mut marked = w.op(tensor_op(BinaryOp::Eq), &[x, values])?;
        if ty.dtype.is_float() {
            let nan = w.op(tensor_op(BinaryOp::Ne), &[x, x])?;
            marked = w.op(tensor_op(BinaryOp::LogicalOr), &[marked, nan])?;
        }
        let n = ty.dims[d].clone();
        let iota_ty = TensorType { dtype: DType::I64, dims: vec![n.clone()] };
        let iota =
            w.typed(Op::ArangeSym(ArangeSym { start: Dim::Static(0), end: n.clone(), step: 1 }), &[], vec![iota_ty])?
                [0];
        let mut along = vec![Dim::Static(1); ty.rank()];
        along[d] = n;
        let iota = w.op(Op::View(View { size: along }), &[iota])?;
        let where_marked = Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Int(-1)) };
        let marks = w.op(Op::Where(where_marked), &[marked, iota])?;
        let running = Cumulative { op: CumulativeOp::Cummax, dim, dtype: None };
        Ok(vec![values, w.op(Op::Cumulative(running), &[marks])?])
    }))
}
