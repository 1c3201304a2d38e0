//! Neural-network lowerings: pooling, normalizations and softmax.

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Op, Scalar, TensorType};

use super::builder::{i64_array, lowest, norm_dim, static_dims, Builder, LowerResult};
use super::Arg;

/// `max_pool2d_with_indices` as `reduce_window(max)` with `-inf` padding; only the values
/// output (slot 0) is produced, the indices are refused if anything reads them.
pub fn max_pool2d<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Op,
    x: Arg<'c, 'b, '_>,
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let Op::MaxPool2d { kernel, stride, padding, dilation, .. } = op else {
        return Err("internal: not a max pool".into());
    };
    let in_dims = static_dims(x.ty)?;
    let dims = static_dims(&outs[0])?;
    let two = |v: &[i64], what: &str| -> LowerResult<[i64; 2]> {
        match v {
            [a] => Ok([*a, *a]),
            [a, c] => Ok([*a, *c]),
            _ => Err(format!("{what} must have 1 or 2 entries, found {v:?}")),
        }
    };
    let (k, s, p, d) =
        (two(kernel, "kernel")?, two(stride, "stride")?, two(padding, "padding")?, two(dilation, "dilation")?);
    let rank = in_dims.len();
    let mut pads = vec![[0i64, 0]; rank];
    for i in 0..2 {
        let (size, out) = (in_dims[rank - 2 + i], dims[rank - 2 + i]);
        // High padding covers every window of the output torch computed (ceil_mode included).
        let needed = (out - 1) * s[i] + d[i] * (k[i] - 1) + 1;
        pads[rank - 2 + i] = [p[i], (needed - size - p[i]).max(p[i])];
    }
    let mut window = vec![1; rank];
    let mut strides = vec![1; rank];
    let mut dilations = vec![1; rank];
    for i in 0..2 {
        window[rank - 2 + i] = k[i];
        strides[rank - 2 + i] = s[i];
        dilations[rank - 2 + i] = d[i];
    }
    let dt = x.ty.dtype;
    let init = b.splat(lowest(dt), &[], dt)?;
    let region =
        b.scalar_region(&[dt, dt], |r, a| Ok(vec![r.op("stablehlo.maximum", &[a[0], a[1]], &[], dt, &[])?]))?;
    let pad_text: Vec<String> = pads.iter().map(|[lo, hi]| format!("[{lo}, {hi}]")).collect();
    let attrs = [
        ("window_dimensions", i64_array(&window)),
        ("window_strides", i64_array(&strides)),
        ("window_dilations", i64_array(&dilations)),
        ("padding", format!("dense<[{}]> : tensor<{rank}x2xi64>", pad_text.join(", "))),
    ];
    let v = b.op_n("stablehlo.reduce_window", &[x.v, init], &[(&dims, dt)], &attrs, vec![region])?;
    Ok(v)
}

/// Broadcasts a per-channel vector along dim 1 of `dims`.
fn per_channel<'c, 'b>(b: &Builder<'c, 'b>, v: Arg<'c, 'b, '_>, dims: &[i64], dt: DType) -> LowerResult<Value<'c, 'b>> {
    let conv = b.convert(v.v, &static_dims(v.ty)?, v.ty.dtype, dt)?;
    b.op("stablehlo.broadcast_in_dim", &[conv], dims, dt, &[("broadcast_dimensions", i64_array(&[1]))])
}

/// Eval-mode batch norm: `(x - mean) * rsqrt(var + eps) * weight + bias`, per channel (dim 1).
/// The two statistics outputs are empty in eval mode and are produced as empty constants.
pub fn batch_norm<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Op,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let Op::BatchNormInference { eps, has_weight, has_bias } = op else {
        return Err("internal: not a batch norm".into());
    };
    let dims = static_dims(&outs[0])?;
    let dt = outs[0].dtype;
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
    let mut out = vec![y];
    for o in &outs[1..] {
        out.push(b.splat(Scalar::Float(0.0), &static_dims(o)?, o.dtype)?);
    }
    Ok(out)
}

/// `native_layer_norm` over the last `normalized_rank` dims; outputs `[y, mean, rstd]`, the
/// statistics with the normalized dims kept as size 1.
pub fn layer_norm<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Op,
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let Op::LayerNorm { normalized_rank, eps, has_weight, has_bias } = op else {
        return Err("internal: not a layer norm".into());
    };
    let dims = static_dims(&outs[0])?;
    let dt = outs[0].dtype;
    let rank = dims.len();
    let axes: Vec<i64> = (rank - normalized_rank..rank).map(|d| d as i64).collect();
    let count: i64 = axes.iter().map(|&a| dims[a as usize]).product();
    let kept: Vec<i64> =
        dims.iter().enumerate().map(|(i, &d)| if i >= rank - normalized_rank { 1 } else { d }).collect();
    let x = b.convert(args[0].v, &dims, args[0].ty.dtype, dt)?;
    let mean_of = |v: Value<'c, 'b>| -> LowerResult<Value<'c, 'b>> {
        let sum = b.reduce(v, &dims, &axes, dt, "stablehlo.add", Scalar::Float(0.0))?;
        let sum = b.reshape(sum, &kept, dt)?;
        b.op("stablehlo.divide", &[sum, b.splat(Scalar::Int(count), &kept, dt)?], &kept, dt, &[])
    };
    let mean = mean_of(x)?;
    let centered = b.op("stablehlo.subtract", &[x, b.broadcast_to(mean, &kept, &dims, dt)?], &dims, dt, &[])?;
    let var = mean_of(b.op("stablehlo.multiply", &[centered, centered], &dims, dt, &[])?)?;
    let var_eps = b.op("stablehlo.add", &[var, b.splat(Scalar::Float(*eps), &kept, dt)?], &kept, dt, &[])?;
    let rstd = b.op("stablehlo.rsqrt", &[var_eps], &kept, dt, &[])?;
    let mut y = b.op("stablehlo.multiply", &[centered, b.broadcast_to(rstd, &kept, &dims, dt)?], &dims, dt, &[])?;
    let mut rest = args[1..].iter().copied();
    let trailing = &dims[rank - normalized_rank..];
    for (present, name) in [(*has_weight, "stablehlo.multiply"), (*has_bias, "stablehlo.add")] {
        if present {
            let p = rest.next().ok_or("missing affine parameter")?;
            let pv = b.convert(p.v, trailing, p.ty.dtype, dt)?;
            y = b.op(name, &[y, b.broadcast_to(pv, trailing, &dims, dt)?], &dims, dt, &[])?;
        }
    }
    let reshape_stat = |v: Value<'c, 'b>, o: &TensorType| -> LowerResult<Value<'c, 'b>> {
        let od = static_dims(o)?;
        let v = b.reshape(v, &od, dt)?;
        b.convert(v, &od, dt, o.dtype)
    };
    Ok(vec![y, reshape_stat(mean, &outs[1])?, reshape_stat(rstd, &outs[2])?])
}

/// `softmax(x, dim) = exp(x - max) / sum(exp(x - max))`; `log_softmax = x - max - log(sum)`.
/// A row of `-inf` gives NaN, as in torch (the SDPA decomposition masks it afterwards).
pub fn softmax<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    log: bool,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let d = norm_dim(dim, dims.len())?;
    let kept: Vec<i64> = dims.iter().enumerate().map(|(i, &s)| if i as i64 == d { 1 } else { s }).collect();
    let v = b.convert(x.v, &dims, x.ty.dtype, dt)?;
    let max = b.reduce(v, &dims, &[d], dt, "stablehlo.maximum", lowest(dt))?;
    let max = b.broadcast_to(b.reshape(max, &kept, dt)?, &kept, &dims, dt)?;
    let shifted = b.op("stablehlo.subtract", &[v, max], &dims, dt, &[])?;
    let e = b.op("stablehlo.exponential", &[shifted], &dims, dt, &[])?;
    let sum = b.reduce(e, &dims, &[d], dt, "stablehlo.add", Scalar::Float(0.0))?;
    let sum = b.broadcast_to(b.reshape(sum, &kept, dt)?, &kept, &dims, dt)?;
    if log {
        let log_sum = b.op("stablehlo.log", &[sum], &dims, dt, &[])?;
        return b.op("stablehlo.subtract", &[shifted, log_sum], &dims, dt, &[]);
    }
    b.op("stablehlo.divide", &[e, sum], &dims, dt, &[])
}
