//! Neural-network lowerings: pooling, normalizations and softmax. Normalizations and softmax
//! of f16/bf16 values compute in f32 (`accumulation_dtype`), as PyTorch's kernels do, and
//! round their results to the declared dtypes.

use melior::ir::Value;
use torchtpu_passes::ir::ops::GroupNormBackward;
use torchtpu_passes::ir::ops::LayerNormBackward;
use torchtpu_passes::ir::ops::Softmax;
use torchtpu_passes::ir::ops::{BatchNormInference, BatchNormTraining, GroupNorm, LayerNorm};
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{accumulation_dtype, i64_array, norm_dim, static_dims, Builder, LowerResult};
use super::Arg;

/// Broadcasts a per-channel vector along dim 1 of `dims`.
fn per_channel<'c, 'b>(b: &Builder<'c, 'b>, v: Arg<'c, 'b, '_>, dims: &[i64], dt: DType) -> LowerResult<Value<'c, 'b>> {
    let conv = b.convert(v.v, &static_dims(v.ty)?, v.ty.dtype, dt)?;
    b.op("stablehlo.broadcast_in_dim", &[conv], dims, dt, &[("broadcast_dimensions", i64_array(&[1]))])
}

/// Eval-mode batch norm: `(x - mean) * rsqrt(var + eps) * weight + bias`, per channel (dim 1).
/// The two statistics outputs are empty in eval mode and are produced as empty constants.
pub(super) fn batch_norm<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &BatchNormInference,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let BatchNormInference { eps, has_weight, has_bias } = op;
    let dims = static_dims(&outs[0])?;
    let dt = accumulation_dtype(outs[0].dtype);
    let mut rest = args[1..].iter().copied();
    let weight = if *has_weight { rest.next() } else { None };
    let bias = if *has_bias { rest.next() } else { None };
    let (mean, var) = (rest.next().ok_or("missing running_mean")?, rest.next().ok_or("missing running_var")?);
    let x = b.convert(args[0].v, &dims, args[0].ty.dtype, dt)?;
    let centered = b.op("stablehlo.subtract", &[x, per_channel(b, mean, &dims, dt)?], &dims, dt, &[])?;
    let var_eps = b.op(
        "stablehlo.add",
        &[per_channel(b, var, &dims, dt)?, b.splat(Scalar::Float(*eps), &dims, dt)?],
        &dims,
        dt,
        &[],
    )?;
    let inv = b.op("stablehlo.rsqrt", &[var_eps], &dims, dt, &[])?;
    let mut y = b.op("stablehlo.multiply", &[centered, inv], &dims, dt, &[])?;
    if let Some(w) = weight {
        y = b.op("stablehlo.multiply", &[y, per_channel(b, w, &dims, dt)?], &dims, dt, &[])?;
    }
    if let Some(bb) = bias {
        y = b.op("stablehlo.add", &[y, per_channel(b, bb, &dims, dt)?], &dims, dt, &[])?;
    }
    let mut out = vec![b.convert(y, &dims, dt, outs[0].dtype)?];
    for o in &outs[1..] {
        out.push(b.splat(Scalar::Float(0.0), &static_dims(o)?, o.dtype)?);
    }
    Ok(out)
}

/// `native_layer_norm` over the last `normalized_rank` dims; outputs `[y, mean, rstd]`, the
/// statistics with the normalized dims kept as size 1.
pub(super) fn layer_norm<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &LayerNorm,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let LayerNorm { normalized_rank, eps, has_weight, has_bias } = op;
    let dims = static_dims(&outs[0])?;
    let dt = accumulation_dtype(outs[0].dtype);
    let rank = dims.len();
    let axes: Vec<i64> = (rank - normalized_rank..rank).map(|d| d as i64).collect();
    let x = b.convert(args[0].v, &dims, args[0].ty.dtype, dt)?;
    let (mean, rstd, _, mut y) = moments(b, x, &dims, &axes, *eps, dt)?;
    let mut rest = args[1..].iter().copied();
    let trailing = &dims[rank - normalized_rank..];
    for (present, name) in [(*has_weight, "stablehlo.multiply"), (*has_bias, "stablehlo.add")] {
        if present {
            let p = rest.next().ok_or("missing affine parameter")?;
            let pv = b.convert(p.v, trailing, p.ty.dtype, dt)?;
            y = b.op(name, &[y, b.broadcast_to(pv, trailing, &dims, dt)?], &dims, dt, &[])?;
        }
    }
    let stat = |v, o| statistic(b, v, dt, o);
    Ok(vec![b.convert(y, &dims, dt, outs[0].dtype)?, stat(mean, &outs[1])?, stat(rstd, &outs[2])?])
}

/// `softmax(x, dim) = exp(x - max) / sum(exp(x - max))`; `log_softmax = x - max - log(sum)`.
/// A row of `-inf` gives NaN, as in torch (the SDPA decomposition masks it afterwards).
/// `softmax`/`log_softmax` along `dim`; `safe`: rows whose inputs are all -inf (their maximum
/// is -inf) give 0 instead of NaN.
pub(super) fn softmax<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Softmax,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let &Softmax { dim, log, safe } = op;
    let dims = static_dims(out)?;
    let dt = accumulation_dtype(out.dtype);
    let y = softmax_in(b, (dim, log, safe), x, &dims, dt)?;
    b.convert(y, &dims, dt, out.dtype)
}

/// [`softmax`] computed in `dt`.
fn softmax_in<'c, 'b>(
    b: &Builder<'c, 'b>,
    (dim, log, safe): (i64, bool, bool),
    x: Arg<'c, 'b, '_>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = dims.to_vec();
    if dims.is_empty() {
        // Over a single element: exp(x - x) / exp(x - x) = 1 (log: 0), NaN for non-finite x.
        let v = b.convert(x.v, &dims, x.ty.dtype, dt)?;
        let zero = b.op("stablehlo.subtract", &[v, v], &dims, dt, &[])?;
        return if log { Ok(zero) } else { b.op("stablehlo.exponential", &[zero], &dims, dt, &[]) };
    }
    let d = norm_dim(dim, dims.len())?;
    let kept: Vec<i64> = dims.iter().enumerate().map(|(i, &s)| if i as i64 == d { 1 } else { s }).collect();
    let v = b.convert(x.v, &dims, x.ty.dtype, dt)?;
    let max = b.reduce(v, &dims, &[d], dt, "stablehlo.maximum", dt.lowest())?;
    let max = b.broadcast_to(b.reshape(max, &kept, dt)?, &kept, &dims, dt)?;
    let shifted = b.op("stablehlo.subtract", &[v, max], &dims, dt, &[])?;
    let e = b.op("stablehlo.exponential", &[shifted], &dims, dt, &[])?;
    let sum = b.reduce(e, &dims, &[d], dt, "stablehlo.add", Scalar::Float(0.0))?;
    let sum = b.broadcast_to(b.reshape(sum, &kept, dt)?, &kept, &dims, dt)?;
    let result = if log {
        let log_sum = b.op("stablehlo.log", &[sum], &dims, dt, &[])?;
        b.op("stablehlo.subtract", &[shifted, log_sum], &dims, dt, &[])?
    } else {
        b.op("stablehlo.divide", &[e, sum], &dims, dt, &[])?
    };
    if !safe {
        return Ok(result);
    }
    let all_masked = b.compare(max, b.splat(Scalar::Float(f64::NEG_INFINITY), &dims, dt)?, &dims, dt, "EQ")?;
    let zero = b.splat(Scalar::Float(0.0), &dims, dt)?;
    b.op("stablehlo.select", &[all_masked, zero, result], &dims, dt, &[])
}

/// Statistics of `v` (shape `dims`) over `axes`: the mean and reciprocal standard deviation
/// with the reduced dims kept as 1 (`kept`), and `(v - mean) * rstd` at full shape.
fn moments<'c, 'b>(
    b: &Builder<'c, 'b>,
    v: Value<'c, 'b>,
    dims: &[i64],
    axes: &[i64],
    eps: f64,
    dt: DType,
) -> LowerResult<(Value<'c, 'b>, Value<'c, 'b>, Vec<i64>, Value<'c, 'b>)> {
    let kept: Vec<i64> =
        dims.iter().enumerate().map(|(i, &d)| if axes.contains(&(i as i64)) { 1 } else { d }).collect();
    let count: i64 = axes.iter().map(|&a| dims[a as usize]).product();
    let mean_of = |x: Value<'c, 'b>| -> LowerResult<Value<'c, 'b>> {
        let sum = b.reshape(b.reduce(x, dims, axes, dt, "stablehlo.add", Scalar::Float(0.0))?, &kept, dt)?;
        b.op("stablehlo.divide", &[sum, b.splat(Scalar::Int(count), &kept, dt)?], &kept, dt, &[])
    };
    let mean = mean_of(v)?;
    let centered = b.op("stablehlo.subtract", &[v, b.broadcast_to(mean, &kept, dims, dt)?], dims, dt, &[])?;
    let var = mean_of(b.op("stablehlo.multiply", &[centered, centered], dims, dt, &[])?)?;
    let var_eps = b.op("stablehlo.add", &[var, b.splat(Scalar::Float(eps), &kept, dt)?], &kept, dt, &[])?;
    let rstd = b.op("stablehlo.rsqrt", &[var_eps], &kept, dt, &[])?;
    let normalized = b.op("stablehlo.multiply", &[centered, b.broadcast_to(rstd, &kept, dims, dt)?], dims, dt, &[])?;
    Ok((mean, rstd, kept, normalized))
}

/// A statistic computed in `dt`, reshaped and converted to its declared type `o`.
fn statistic<'c, 'b>(b: &Builder<'c, 'b>, v: Value<'c, 'b>, dt: DType, o: &TensorType) -> LowerResult<Value<'c, 'b>> {
    let od = static_dims(o)?;
    b.convert(b.reshape(v, &od, dt)?, &od, dt, o.dtype)
}

fn affine<'c, 'b, 't>(
    b: &Builder<'c, 'b>,
    mut y: Value<'c, 'b>,
    params: &mut impl Iterator<Item = Arg<'c, 'b, 't>>,
    (has_weight, has_bias): (bool, bool),
    dims: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    for (present, name) in [(has_weight, "stablehlo.multiply"), (has_bias, "stablehlo.add")] {
        if present {
            let p = params.next().ok_or("missing affine parameter")?;
            y = b.op(name, &[y, per_channel(b, p, dims, dt)?], dims, dt, &[])?;
        }
    }
    Ok(y)
}

/// `native_group_norm`: statistics per (sample, group) over the group's channels and all
/// spatial positions; outputs `[y, mean [N,G], rstd [N,G]]`.
pub(super) fn group_norm<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &GroupNorm,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let GroupNorm { groups, eps, has_weight, has_bias } = op;
    let dims = static_dims(&outs[0])?;
    let dt = accumulation_dtype(outs[0].dtype);
    let (n, c) = (dims[0], dims[1]);
    let rest: i64 = dims[2..].iter().product::<i64>() * (c / groups);
    let grouped = [n, *groups, rest];
    let v = b.reshape(b.convert(args[0].v, &dims, args[0].ty.dtype, dt)?, &grouped, dt)?;
    let (mean, rstd, _, normalized) = moments(b, v, &grouped, &[2], *eps, dt)?;
    let y = b.reshape(normalized, &dims, dt)?;
    let y = affine(b, y, &mut args[1..].iter().copied(), (*has_weight, *has_bias), &dims, dt)?;
    let stat = |v, o| statistic(b, v, dt, o);
    Ok(vec![b.convert(y, &dims, dt, outs[0].dtype)?, stat(mean, &outs[1])?, stat(rstd, &outs[2])?])
}

/// `_native_batch_norm_legit` in training mode: batch statistics over every dim but the
/// channel (dim 1); outputs `[y, mean [C], rstd [C]]`. Running-stat updates are separate
/// graph outputs, so the running stats are only read here (not at all).
pub(super) fn batch_norm_training<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &BatchNormTraining,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let BatchNormTraining { eps, has_weight, has_bias, momentum, .. } = op;
    let dims = static_dims(&outs[0])?;
    let dt = accumulation_dtype(outs[0].dtype);
    let axes: Vec<i64> = (0..dims.len() as i64).filter(|&d| d != 1).collect();
    let v = b.convert(args[0].v, &dims, args[0].ty.dtype, dt)?;
    let (mean, rstd, _, y) = moments(b, v, &dims, &axes, *eps, dt)?;
    let mut params = args[1..].iter().copied();
    let y = affine(b, y, &mut params, (*has_weight, *has_bias), &dims, dt)?;
    let stat = |v, o| statistic(b, v, dt, o);
    let mut out = vec![b.convert(y, &dims, dt, outs[0].dtype)?, stat(mean, &outs[1])?, stat(rstd, &outs[2])?];
    if let Some(m) = momentum {
        // running = (1 - m) * running + m * batch, with the unbiased batch variance.
        let count: i64 = axes.iter().map(|&a| dims[a as usize]).product();
        let c = static_dims(&outs[3])?;
        let rd = b.convert(params.next().ok_or("missing running_mean")?.v, &c, outs[3].dtype, dt)?;
        let rv = b.convert(params.next().ok_or("missing running_var")?.v, &c, outs[4].dtype, dt)?;
        let batch_mean = b.reshape(mean, &c, dt)?;
        let inv = b.reshape(rstd, &c, dt)?;
        let var_eps = b.op(
            "stablehlo.divide",
            &[b.splat(Scalar::Int(1), &c, dt)?, b.op("stablehlo.multiply", &[inv, inv], &c, dt, &[])?],
            &c,
            dt,
            &[],
        )?;
        let var = b.op("stablehlo.subtract", &[var_eps, b.splat(Scalar::Float(*eps), &c, dt)?], &c, dt, &[])?;
        let unbiased = (count as f64) / ((count - 1).max(1) as f64);
        let var = b.op("stablehlo.multiply", &[var, b.splat(Scalar::Float(unbiased), &c, dt)?], &c, dt, &[])?;
        let blend = |running: Value<'c, 'b>, batch: Value<'c, 'b>| -> LowerResult<Value<'c, 'b>> {
            let keep = b.op("stablehlo.multiply", &[running, b.splat(Scalar::Float(1.0 - m), &c, dt)?], &c, dt, &[])?;
            let new = b.op("stablehlo.multiply", &[batch, b.splat(Scalar::Float(*m), &c, dt)?], &c, dt, &[])?;
            b.op("stablehlo.add", &[keep, new], &c, dt, &[])
        };
        out.push(b.convert(blend(rd, batch_mean)?, &c, dt, outs[3].dtype)?);
        out.push(b.convert(blend(rv, var)?, &c, dt, outs[4].dtype)?);
    }
    Ok(out)
}

/// `native_layer_norm_backward`: with `x̂ = (x - mean) * rstd` and `g' = g * weight`,
/// `grad_input = rstd / N * (N*g' - sum(g') - x̂ * sum(g' * x̂))` over the normalized dims;
/// `grad_weight = sum(g * x̂)` and `grad_bias = sum(g)` over the other dims.
pub(super) fn layer_norm_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &LayerNormBackward,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let &LayerNormBackward { normalized_rank, has_weight, mask } = op;
    let (g, x, mean, rstd) = (args[0], args[1], args[2], args[3]);
    let dims = static_dims(x.ty)?;
    let dt = x.ty.dtype;
    let rank = dims.len();
    let inner: Vec<i64> = (rank - normalized_rank..rank).map(|d| d as i64).collect();
    let outer: Vec<i64> = (0..rank - normalized_rank).map(|d| d as i64).collect();
    let kept: Vec<i64> =
        dims.iter().enumerate().map(|(i, &d)| if i >= rank - normalized_rank { 1 } else { d }).collect();
    let full = |a: Arg<'c, 'b, '_>| -> LowerResult<Value<'c, 'b>> {
        let ad = static_dims(a.ty)?;
        let v = b.reshape(b.convert(a.v, &ad, a.ty.dtype, dt)?, &kept, dt)?;
        b.broadcast_to(v, &kept, &dims, dt)
    };
    let mul = |p: Value<'c, 'b>, q: Value<'c, 'b>| b.op("stablehlo.multiply", &[p, q], &dims, dt, &[]);
    let gv = b.convert(g.v, &dims, g.ty.dtype, dt)?;
    let rstd_full = full(rstd)?;
    let xhat = mul(
        b.op("stablehlo.subtract", &[b.convert(x.v, &dims, x.ty.dtype, dt)?, full(mean)?], &dims, dt, &[])?,
        rstd_full,
    )?;
    let trailing = &dims[rank - normalized_rank..];
    let weighted = if has_weight {
        let w = args[4];
        let wv = b.convert(w.v, trailing, w.ty.dtype, dt)?;
        mul(gv, b.broadcast_to(wv, trailing, &dims, dt)?)?
    } else {
        gv
    };
    let mut out = Vec::with_capacity(3);
    let grad_input = normalized_input_grad(b, [weighted, xhat, rstd_full], &dims, &inner, &kept, dt)?;
    out.push(b.convert(grad_input, &dims, dt, outs[0].dtype)?);
    if mask[1] || mask[2] {
        let sum_outer = |v: Value<'c, 'b>, o: &TensorType| -> LowerResult<Value<'c, 'b>> {
            let s = b.reduce(v, &dims, &outer, dt, "stablehlo.add", Scalar::Int(0))?;
            b.convert(b.reshape(s, &static_dims(o)?, dt)?, &static_dims(o)?, dt, o.dtype)
        };
        out.push(if mask[1] {
            sum_outer(mul(gv, xhat)?, &outs[1])?
        } else {
            b.splat(Scalar::Int(0), &[], outs[1].dtype)?
        });
        if mask[2] {
            out.push(sum_outer(gv, &outs[2])?);
        }
    }
    Ok(out)
}

/// The input gradient of a normalization over the `inner` axes of `dims` (`kept` has them as
/// 1): `rstd / N * (N*g' - sum(g') - x̂ * sum(g' * x̂))`, with `g'` the weighted gradient.
fn normalized_input_grad<'c, 'b>(
    b: &Builder<'c, 'b>,
    [weighted, xhat, rstd]: [Value<'c, 'b>; 3],
    dims: &[i64],
    inner: &[i64],
    kept: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    let n: i64 = inner.iter().map(|&d| dims[d as usize]).product();
    let mul = |p: Value<'c, 'b>, q: Value<'c, 'b>| b.op("stablehlo.multiply", &[p, q], dims, dt, &[]);
    let sum_inner = |v: Value<'c, 'b>| -> LowerResult<Value<'c, 'b>> {
        let s = b.reshape(b.reduce(v, dims, inner, dt, "stablehlo.add", Scalar::Int(0))?, kept, dt)?;
        b.broadcast_to(s, kept, dims, dt)
    };
    let scaled = mul(weighted, b.splat(Scalar::Int(n), dims, dt)?)?;
    let centered = b.op("stablehlo.subtract", &[scaled, sum_inner(weighted)?], dims, dt, &[])?;
    let proj = mul(xhat, sum_inner(mul(weighted, xhat)?)?)?;
    let inner_term = b.op("stablehlo.subtract", &[centered, proj], dims, dt, &[])?;
    let factor = b.op("stablehlo.divide", &[rstd, b.splat(Scalar::Int(n), dims, dt)?], dims, dt, &[])?;
    mul(factor, inner_term)
}

/// `native_group_norm_backward`: the layer-norm gradient within each (sample, group) of
/// `C/G * HxW` elements; `grad_weight`/`grad_bias` sum over samples and positions per channel.
pub(super) fn group_norm_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &GroupNormBackward,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let &GroupNormBackward { groups, has_weight, mask } = op;
    let (g, x, mean, rstd) = (args[0], args[1], args[2], args[3]);
    let dims = static_dims(x.ty)?;
    let dt = x.ty.dtype;
    let (n, c) = (dims[0], dims[1]);
    let positions: i64 = dims[2..].iter().product();
    let grouped = [n, groups, c / groups * positions];
    let kept = [n, groups, 1];
    let channels = [n, c, positions];
    let gv = b.convert(g.v, &dims, g.ty.dtype, dt)?;
    let weighted = if has_weight {
        b.op("stablehlo.multiply", &[gv, per_channel(b, args[4], &dims, dt)?], &dims, dt, &[])?
    } else {
        gv
    };
    let stat = |a: Arg<'c, 'b, '_>| -> LowerResult<Value<'c, 'b>> {
        let v = b.reshape(b.convert(a.v, &static_dims(a.ty)?, a.ty.dtype, dt)?, &kept, dt)?;
        b.broadcast_to(v, &kept, &grouped, dt)
    };
    let rstd_full = stat(rstd)?;
    let xg = b.reshape(b.convert(x.v, &dims, x.ty.dtype, dt)?, &grouped, dt)?;
    let centered = b.op("stablehlo.subtract", &[xg, stat(mean)?], &grouped, dt, &[])?;
    let xhat = b.op("stablehlo.multiply", &[centered, rstd_full], &grouped, dt, &[])?;
    let wg = b.reshape(weighted, &grouped, dt)?;
    let grad_in = normalized_input_grad(b, [wg, xhat, rstd_full], &grouped, &[2], &kept, dt)?;
    let mut out = vec![b.convert(b.reshape(grad_in, &dims, dt)?, &dims, dt, outs[0].dtype)?];
    let per_channel_sum = |v: Value<'c, 'b>, o: &TensorType| -> LowerResult<Value<'c, 'b>> {
        let v = b.reshape(v, &channels, dt)?;
        let s = b.reduce(v, &channels, &[0, 2], dt, "stablehlo.add", Scalar::Int(0))?;
        b.convert(b.reshape(s, &static_dims(o)?, dt)?, &static_dims(o)?, dt, o.dtype)
    };
    if mask[1] || mask[2] {
        let gx = b.op("stablehlo.multiply", &[b.reshape(gv, &grouped, dt)?, xhat], &grouped, dt, &[])?;
        out.push(if mask[1] { per_channel_sum(gx, &outs[1])? } else { b.splat(Scalar::Int(0), &[], outs[1].dtype)? });
        if mask[2] {
            out.push(per_channel_sum(gv, &outs[2])?);
        }
    }
    Ok(out)
}
