//! Reductions: `sum`/`mean`/`prod`/`amax`/`amin`/`any`/`all`, `argmax`/`argmin`, `cumsum`,
//! `histc`.

use melior::ir::Value;
use torchtpu_passes::ir::ops::Histc;
use torchtpu_passes::ir::ops::{ArgReduce, Reduce};
use torchtpu_passes::ir::{ArgReduceOp, CumulativeOp, DType, ReduceOp, Scalar, TensorType};

use super::builder::{accumulation_dtype, i64_array, norm_dim, static_dims, Builder, Ew, LowerResult};
use super::Arg;

/// Normalized, sorted, deduplicated reduction dims (`[]` means every dim). A 0-d operand
/// accepts dim 0 and -1, as PyTorch does, and has no axis to reduce.
fn reduce_dims(dims: &[i64], rank: usize) -> LowerResult<Vec<i64>> {
    if dims.is_empty() {
        return Ok((0..rank as i64).collect());
    }
    let mut v = dims.iter().map(|&d| norm_dim(d, rank)).collect::<LowerResult<Vec<_>>>()?;
    if rank == 0 {
        return Ok(vec![]);
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

pub(super) fn reduce<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Reduce,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let Reduce { op: kind, dims, .. } = op;
    let in_dims = static_dims(x.ty)?;
    let out_dims = static_dims(out)?;
    let axes = reduce_dims(dims, in_dims.len())?;
    // Reduce in the output dtype (bool/int sums accumulate in int64; f16/bf16 sums, means and
    // products in f32), except `any`/`all`, which reduce truth values and then take the output
    // dtype (uint8 stays uint8).
    let logical = matches!(kind, ReduceOp::Any | ReduceOp::All);
    let dt = match kind {
        _ if logical => DType::Bool,
        ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod => accumulation_dtype(out.dtype),
        _ => out.dtype,
    };
    let v = b.convert(x.v, &in_dims, x.ty.dtype, dt)?;
    let combiner = match kind {
        ReduceOp::Sum | ReduceOp::Mean => "stablehlo.add",
        ReduceOp::Prod => "stablehlo.multiply",
        ReduceOp::Max => "stablehlo.maximum",
        ReduceOp::Min => "stablehlo.minimum",
        ReduceOp::Any => "stablehlo.or",
        ReduceOp::All => "stablehlo.and",
    };
    // A max/min reduction propagates NaN as torch's amax/amin do (see `Builder::extremum`).
    let r = b.reduce(v, &in_dims, &axes, dt, combiner, kind.identity(dt))?;
    let mut r = b.reshape(r, &out_dims, dt)?;
    if *kind == ReduceOp::Mean {
        let count: i64 = axes.iter().map(|&a| in_dims[a as usize]).product();
        let n = b.splat(Scalar::Int(count), &out_dims, dt)?;
        r = b.op("stablehlo.divide", &[r, n], &out_dims, dt, &[])?;
    }
    b.convert(r, &out_dims, dt, out.dtype)
}

/// `argmax`/`argmin`: a variadic reduce over (value, index) that keeps the first index among
/// equal values and treats NaN as the extremum, as torch does.
pub(super) fn arg_reduce<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &ArgReduce,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let ArgReduce { op: kind, dim, .. } = op;
    let mut in_dims = static_dims(x.ty)?;
    let mut v = x.v;
    let axis = match dim {
        // A 0-d operand (dim 0 or -1) is its own extremum, at index 0.
        Some(d) if in_dims.is_empty() => {
            norm_dim(*d, 0)?;
            return b.splat(Scalar::Int(0), &[], out.dtype);
        }
        Some(d) => norm_dim(*d, in_dims.len())?,
        None => {
            let n: i64 = in_dims.iter().product();
            v = b.reshape(v, &[n], x.ty.dtype)?;
            in_dims = vec![n];
            0
        }
    };
    let (_, indices) = extremum(b, v, &in_dims, axis, x.ty.dtype, *kind == ArgReduceOp::Argmax)?;
    let out_dims = static_dims(out)?;
    let r = b.reshape(indices, &out_dims, DType::I64)?;
    b.convert(r, &out_dims, DType::I64, out.dtype)
}

/// `max.dim` / `min.dim`: values and indices, reshaped to the recorded (keepdim) shapes.
pub(super) fn extremum_dim<'c, 'b>(
    b: &Builder<'c, 'b>,
    max: bool,
    dim: i64,
    x: Arg<'c, 'b, '_>,
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let in_dims = static_dims(x.ty)?;
    if in_dims.is_empty() {
        return Ok(vec![x.v, b.splat(Scalar::Int(0), &[], DType::I64)?]);
    }
    let axis = norm_dim(dim, in_dims.len())?;
    let (values, indices) = extremum(b, x.v, &in_dims, axis, x.ty.dtype, max)?;
    let (vd, id) = (static_dims(&outs[0])?, static_dims(&outs[1])?);
    Ok(vec![b.reshape(values, &vd, x.ty.dtype)?, b.reshape(indices, &id, DType::I64)?])
}

/// A variadic reduce over (value, index) along `axis` that keeps the first index among equal
/// values and treats NaN as the extremum, as torch does.
fn extremum<'c, 'b>(
    b: &Builder<'c, 'b>,
    v: Value<'c, 'b>,
    in_dims: &[i64],
    axis: i64,
    dt: DType,
    max: bool,
) -> LowerResult<(Value<'c, 'b>, Value<'c, 'b>)> {
    let idx = b.op("stablehlo.iota", &[], in_dims, DType::I64, &[("iota_dimension", format!("{axis} : i64"))])?;
    let (init_v, direction) = if max { (dt.lowest(), "GT") } else { (dt.highest(), "LT") };
    let init_v = b.splat(init_v, &[], dt)?;
    let init_i = b.splat(Scalar::Int(0), &[], DType::I64)?;
    let region = b.scalar_region(&[dt, DType::I64, dt, DType::I64], |r, a| {
        let (av, ai, bv, bi) = (a[0], a[1], a[2], a[3]);
        let take_a = r.prefers(av, bv, &[], dt, direction)?;
        let mut tie = r.compare(av, bv, &[], dt, "EQ")?;
        if dt.is_float() {
            // Two NaNs tie too, so the first index wins among them.
            let a_nan = r.compare(av, av, &[], dt, "NE")?;
            let b_nan = r.compare(bv, bv, &[], dt, "NE")?;
            let both_nan = r.op("stablehlo.and", &[a_nan, b_nan], &[], DType::Bool, &[])?;
            tie = r.op("stablehlo.or", &[tie, both_nan], &[], DType::Bool, &[])?;
        }
        let min_i = r.op("stablehlo.minimum", &[ai, bi], &[], DType::I64, &[])?;
        let tie_i = r.op("stablehlo.select", &[tie, min_i, bi], &[], DType::I64, &[])?;
        let value = r.op("stablehlo.select", &[take_a, av, bv], &[], dt, &[])?;
        let index = r.op("stablehlo.select", &[take_a, ai, tie_i], &[], DType::I64, &[])?;
        Ok(vec![value, index])
    })?;
    let reduced: Vec<i64> = in_dims.iter().enumerate().filter(|(i, _)| *i as i64 != axis).map(|(_, &d)| d).collect();
    let outs = b.op_n(
        "stablehlo.reduce",
        &[v, idx, init_v, init_i],
        &[(&reduced, dt), (&reduced, DType::I64)],
        &[("dimensions", i64_array(&[axis]))],
        vec![region],
    )?;
    Ok((outs[0], outs[1]))
}

/// `var(x, dims, correction)`: `sum((x - mean)^2) / (N - correction)`, in the output dtype
/// (f32 for f16/bf16).
pub(super) fn var<'c, 'b>(
    b: &Builder<'c, 'b>,
    dims: &[i64],
    correction: f64,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let in_dims = static_dims(x.ty)?;
    let out_dims = static_dims(out)?;
    let dt = accumulation_dtype(out.dtype);
    let axes = reduce_dims(dims, in_dims.len())?;
    let kept: Vec<i64> =
        in_dims.iter().enumerate().map(|(i, &d)| if axes.contains(&(i as i64)) { 1 } else { d }).collect();
    let count: i64 = axes.iter().map(|&a| in_dims[a as usize]).product();
    let v = b.convert(x.v, &in_dims, x.ty.dtype, dt)?;
    let sum = b.reshape(b.reduce(v, &in_dims, &axes, dt, "stablehlo.add", Scalar::Int(0))?, &kept, dt)?;
    let mean = b.op("stablehlo.divide", &[sum, b.splat(Scalar::Int(count), &kept, dt)?], &kept, dt, &[])?;
    let centered = b.op("stablehlo.subtract", &[v, b.broadcast_to(mean, &kept, &in_dims, dt)?], &in_dims, dt, &[])?;
    let squares = b.op("stablehlo.multiply", &[centered, centered], &in_dims, dt, &[])?;
    let ss = b.reshape(b.reduce(squares, &in_dims, &axes, dt, "stablehlo.add", Scalar::Int(0))?, &out_dims, dt)?;
    // torch divides by max(N - correction, 0): a non-positive divisor gives inf or NaN.
    let divisor = (count as f64 - correction).max(0.0);
    let var = b.op("stablehlo.divide", &[ss, b.splat(Scalar::Float(divisor), &out_dims, dt)?], &out_dims, dt, &[])?;
    b.convert(var, &out_dims, dt, out.dtype)
}

/// `cumsum`, `cumprod`, `logcumsumexp`, `cummax` and `cummin` as a `reduce_window` whose
/// window covers everything before each element, accumulated in f32 for half types (as torch's
/// CPU kernels do).
pub(super) fn cumulative<'c, 'b>(
    b: &Builder<'c, 'b>,
    (op, dim): (CumulativeOp, i64),
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let acc = accumulation_dtype(out.dtype);
    let rank = dims.len();
    let axis = norm_dim(dim, rank)? as usize;
    let v = b.convert(x.v, &dims, x.ty.dtype, acc)?;
    if rank == 0 {
        return b.convert(v, &dims, acc, out.dtype);
    }
    let n = dims[axis];
    let mut window = vec![1; rank];
    window[axis] = n.max(1);
    let pads: Vec<String> =
        (0..rank).map(|i| if i == axis { format!("[{}, 0]", (n - 1).max(0)) } else { "[0, 0]".into() }).collect();
    let init = b.splat(op.identity(acc), &[], acc)?;
    let region = b.scalar_region(&[acc, acc], |r, a| {
        Ok(vec![match op {
            CumulativeOp::Cumsum => r.op("stablehlo.add", &[a[0], a[1]], &[], acc, &[])?,
            CumulativeOp::Cumprod => r.op("stablehlo.multiply", &[a[0], a[1]], &[], acc, &[])?,
            CumulativeOp::Logcumsumexp => log_add_exp(r, a[0], a[1], acc)?,
            // `maximum` and `minimum` propagate NaN, as torch's running extrema do.
            CumulativeOp::Cummax => r.op("stablehlo.maximum", &[a[0], a[1]], &[], acc, &[])?,
            CumulativeOp::Cummin => r.op("stablehlo.minimum", &[a[0], a[1]], &[], acc, &[])?,
        }])
    })?;
    let attrs = [
        ("window_dimensions", i64_array(&window)),
        ("padding", format!("dense<[{}]> : tensor<{rank}x2xi64>", pads.join(", "))),
    ];
    let r = b.op_n("stablehlo.reduce_window", &[v, init], &[(&dims, acc)], &attrs, vec![region])?.remove(0);
    b.convert(r, &dims, acc, out.dtype)
}

/// `log(exp(p) + exp(q))` without overflow: `max + log1p(exp(-|p - q|))`, and `p` itself when
/// the two are equal (so that two infinities of one sign stay that infinity, not NaN).
fn log_add_exp<'c, 'b>(
    r: &Builder<'c, 'b>,
    p: Value<'c, 'b>,
    q: Value<'c, 'b>,
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    let hi = r.op("stablehlo.maximum", &[p, q], &[], dt, &[])?;
    let diff = r.op("stablehlo.subtract", &[p, q], &[], dt, &[])?;
    let neg = r.op("stablehlo.negate", &[r.op("stablehlo.abs", &[diff], &[], dt, &[])?], &[], dt, &[])?;
    let tail = r.op("stablehlo.log_plus_one", &[r.op("stablehlo.exponential", &[neg], &[], dt, &[])?], &[], dt, &[])?;
    let sum = r.op("stablehlo.add", &[hi, tail], &[], dt, &[])?;
    let same = r.compare(p, q, &[], dt, "EQ")?;
    let ln2 = r.op("stablehlo.add", &[p, r.splat(Scalar::Float(std::f64::consts::LN_2), &[], dt)?], &[], dt, &[])?;
    r.op("stablehlo.select", &[same, ln2, sum], &[], dt, &[])
}

/// `histc(x, bins, min, max)` as PyTorch's kernels compute it: the bin of `x` is
/// `trunc((x - min) * bins / (max - min))` in `x`'s dtype, `max` itself goes to the last bin,
/// values outside `[min, max]` (and NaN) are not counted. Each element's bin is compared with
/// every bin index and the hits summed (in f32 for half types, so counts stay exact). Integers
/// (an MoE counting its tokens per expert, as transformers does on accelerators; torch's CPU
/// kernel has none) take `min` and `max` truncated to integers and integer arithmetic, as
/// torch's CUDA kernel does.
pub(super) fn histc<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Histc,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let &Histc { bins, min, max } = op;
    let dt = x.ty.dtype;
    let n: i64 = static_dims(x.ty)?.iter().product();
    let e = Ew { b, dims: vec![n], dt };
    let integer = dt.is_integer();
    let (lo, hi) = (min.trunc(), max.trunc());
    if integer && hi <= lo {
        return Err(format!("histc over {dt} needs integer bounds apart, found [{min}, {max}]").into());
    }
    let c = |v: f64| if integer { b.splat(Scalar::Int(v as i64), &[n], dt) } else { e.c(v) };
    let (min, max) = if integer { (lo, hi) } else { (min, max) };
    let flat = b.reshape(x.v, &[n], dt)?;
    let scaled = e.bin("divide", e.mul(e.sub(flat, c(min)?)?, c(bins as f64)?)?, c(max - min)?)?;
    let inside =
        b.op("stablehlo.and", &[e.cmp(flat, c(min)?, "GE")?, e.cmp(flat, c(max)?, "LE")?], &[n], DType::Bool, &[])?;
    let index = b.convert(scaled, &[n], dt, DType::I64)?;
    let index =
        b.op("stablehlo.minimum", &[index, b.splat(Scalar::Int(bins - 1), &[n], DType::I64)?], &[n], DType::I64, &[])?;
    let index =
        b.op("stablehlo.select", &[inside, index, b.splat(Scalar::Int(-1), &[n], DType::I64)?], &[n], DType::I64, &[])?;
    let index = b.broadcast_to(b.reshape(index, &[n, 1], DType::I64)?, &[n, 1], &[n, bins], DType::I64)?;
    let which = b.op("stablehlo.iota", &[], &[n, bins], DType::I64, &[("iota_dimension", "1 : i64".into())])?;
    let hit = b.compare(index, which, &[n, bins], DType::I64, "EQ")?;
    let acc = if dt.size_bytes() < 4 { DType::F32 } else { dt };
    let (one, zero) =
        if acc.is_integer() { (Scalar::Int(1), Scalar::Int(0)) } else { (Scalar::Float(1.0), Scalar::Float(0.0)) };
    let ones = b.op(
        "stablehlo.select",
        &[hit, b.splat(one, &[n, bins], acc)?, b.splat(zero, &[n, bins], acc)?],
        &[n, bins],
        acc,
        &[],
    )?;
    let counts = b.reduce(ones, &[n, bins], &[0], acc, "stablehlo.add", zero)?;
    b.convert(counts, &[bins], acc, out.dtype)
}
