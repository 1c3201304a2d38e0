//! Pooling and resampling over the trailing spatial dims (NC…): max pooling with indices,
//! average pooling with torch's divisor rules, adaptive average pooling and nearest/bilinear
//! upsampling.
//!
//! Adaptive pooling and upsampling are linear maps with constant weights along each spatial
//! dim, so they lower to one `dot_general` per dim with a weight matrix computed here (exactly
//! torch's windows and source indices), which XLA handles well on TPU.

use melior::ir::Value;
use torchtpu_passes::ir::ops::{AdaptiveAvgPool, AvgPool, MaxPool, Upsample, UpsampleNearestBackward};
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{
    accumulation_dtype, i64_array, scalar_literal, static_dims, tensor_type_text, Builder, LowerResult,
};
use super::Arg;

/// Per-spatial-dim parameter lists may hold one value for all dims.
fn per_dim(v: &[i64], n: usize, what: &str, default: i64) -> LowerResult<Vec<i64>> {
    match v.len() {
        0 => Ok(vec![default; n]),
        1 => Ok(vec![v[0]; n]),
        k if k == n => Ok(v.to_vec()),
        k => Err(format!("{what} has {k} entries for {n} spatial dims").into()),
    }
}

/// Window geometry over the full rank: leading dims get a window of 1.
struct Window {
    dims: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    /// (low, high) padding per dim; high padding covers every window of the recorded output.
    pads: Vec<[i64; 2]>,
}

impl Window {
    #[allow(clippy::too_many_arguments)] // one argument per pooling parameter
    fn new(
        in_dims: &[i64],
        out_dims: &[i64],
        kernel: &[i64],
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
    ) -> LowerResult<Window> {
        let n = kernel.len();
        let rank = in_dims.len();
        let lead = rank.checked_sub(n).ok_or("pooling window has more dims than the input")?;
        let (stride, padding, dilation) = (
            per_dim(stride, n, "stride", 0)?,
            per_dim(padding, n, "padding", 0)?,
            per_dim(dilation, n, "dilation", 1)?,
        );
        let mut w =
            Window { dims: vec![1; rank], strides: vec![1; rank], dilations: vec![1; rank], pads: vec![[0, 0]; rank] };
        for i in 0..n {
            let d = lead + i;
            let s = if stride[i] == 0 { kernel[i] } else { stride[i] };
            let needed = (out_dims[d] - 1) * s + dilation[i] * (kernel[i] - 1) + 1;
            w.dims[d] = kernel[i];
            w.strides[d] = s;
            w.dilations[d] = dilation[i];
            w.pads[d] = [padding[i], (needed - in_dims[d] - padding[i]).max(0)];
        }
        Ok(w)
    }

    fn attrs(&self) -> Vec<(&'static str, String)> {
        let pads: Vec<String> = self.pads.iter().map(|[lo, hi]| format!("[{lo}, {hi}]")).collect();
        vec![
            ("window_dimensions", i64_array(&self.dims)),
            ("window_strides", i64_array(&self.strides)),
            ("window_dilations", i64_array(&self.dilations)),
            ("padding", format!("dense<[{}]> : tensor<{}x2xi64>", pads.join(", "), self.dims.len())),
        ]
    }
}

/// `max_pool{2,3}d_with_indices`: a `reduce_window` over (value, flat spatial index) that keeps
/// the first maximum of each window, NaN winning as in torch; padding never wins. When nothing
/// reads the indices (inference), [`max_pool_values`].
pub(super) fn max_pool<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &MaxPool,
    x: Arg<'c, 'b, '_>,
    outs: &[TensorType],
    indices_used: bool,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let MaxPool { kernel, stride, padding, dilation, .. } = op;
    let in_dims = static_dims(x.ty)?;
    let out_dims = static_dims(&outs[0])?;
    let w = Window::new(&in_dims, &out_dims, kernel, stride, padding, dilation)?;
    let dt = x.ty.dtype;
    if !indices_used {
        return max_pool_values(b, &w, x, &out_dims);
    }
    let index = flat_spatial_index(b, &in_dims, kernel.len())?;
    let init_v = b.splat(dt.lowest(), &[], dt)?;
    let init_i = b.splat(Scalar::Int(-1), &[], DType::I64)?;
    let region = b.scalar_region(&[dt, DType::I64, dt, DType::I64], |r, a| {
        let (av, ai, bv, bi) = (a[0], a[1], a[2], a[3]);
        // `a` is the running best; `b` replaces it when strictly greater, or NaN over a number,
        // or when `a` is still the padding/initial value. Ties keep the smaller index.
        let equal = r.compare(av, bv, &[], dt, "EQ")?;
        let mut take_b = r.prefers(bv, av, &[], dt, "GT")?;
        let a_unset = r.compare(ai, r.splat(Scalar::Int(-1), &[], DType::I64)?, &[], DType::I64, "EQ")?;
        let b_set = r.compare(bi, r.splat(Scalar::Int(-1), &[], DType::I64)?, &[], DType::I64, "NE")?;
        let fill = r.op("stablehlo.and", &[a_unset, b_set], &[], DType::Bool, &[])?;
        take_b = r.op("stablehlo.or", &[take_b, fill], &[], DType::Bool, &[])?;
        let both_set = r.op(
            "stablehlo.and",
            &[b_set, r.op("stablehlo.not", &[a_unset], &[], DType::Bool, &[])?],
            &[],
            DType::Bool,
            &[],
        )?;
        let tie = r.op("stablehlo.and", &[equal, both_set], &[], DType::Bool, &[])?;
        let min_i = r.op("stablehlo.minimum", &[ai, bi], &[], DType::I64, &[])?;
        let kept_i = r.op("stablehlo.select", &[tie, min_i, ai], &[], DType::I64, &[])?;
        let value = r.op("stablehlo.select", &[take_b, bv, av], &[], dt, &[])?;
        let idx = r.op("stablehlo.select", &[take_b, bi, kept_i], &[], DType::I64, &[])?;
        Ok(vec![value, idx])
    })?;
    let attrs = w.attrs();
    let res = b.op_n(
        "stablehlo.reduce_window",
        &[x.v, index, init_v, init_i],
        &[(&out_dims, dt), (&out_dims, DType::I64)],
        &attrs,
        vec![region],
    )?;
    let idx_dims = static_dims(&outs[1])?;
    Ok(vec![res[0], b.convert(res[1], &idx_dims, DType::I64, outs[1].dtype)?])
}

/// Max pooling without indices: one `reduce_window` of `maximum` (NaN wins, as in torch: see
/// `Builder::extremum`), the form XLA lowers well and libtpu's cost model knows (it aborts the
/// process on other reduction bodies).
fn max_pool_values<'c, 'b>(
    b: &Builder<'c, 'b>,
    w: &Window,
    x: Arg<'c, 'b, '_>,
    out_dims: &[i64],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let dt = x.ty.dtype;
    let init = b.splat(dt.lowest(), &[], dt)?;
    let region = b.scalar_region(&[dt, dt], |r, a| Ok(vec![r.extremum(a[0], a[1], &[], dt, true)?]))?;
    b.op_n("stablehlo.reduce_window", &[x.v, init], &[(out_dims, dt)], &w.attrs(), vec![region])
}

/// `h*W + w` (or `d*H*W + h*W + w`) for every element: the index torch's pooling returns.
fn flat_spatial_index<'c, 'b>(b: &Builder<'c, 'b>, dims: &[i64], spatial: usize) -> LowerResult<Value<'c, 'b>> {
    let rank = dims.len();
    let mut acc: Option<Value> = None;
    let mut stride = 1i64;
    for d in (rank - spatial..rank).rev() {
        let iota = b.op("stablehlo.iota", &[], dims, DType::I64, &[("iota_dimension", format!("{d} : i64"))])?;
        let term = b.op(
            "stablehlo.multiply",
            &[iota, b.splat(Scalar::Int(stride), dims, DType::I64)?],
            dims,
            DType::I64,
            &[],
        )?;
        acc = Some(match acc {
            None => term,
            Some(a) => b.op("stablehlo.add", &[a, term], dims, DType::I64, &[])?,
        });
        stride *= dims[d];
    }
    acc.ok_or_else(|| "pooling needs spatial dims".into())
}

/// A window sum of `v` (zero padding).
fn window_sum<'c, 'b>(
    b: &Builder<'c, 'b>,
    v: Value<'c, 'b>,
    w: &Window,
    out_dims: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    let init = b.splat(Scalar::Int(0), &[], dt)?;
    let region = b.scalar_region(&[dt, dt], |r, a| Ok(vec![r.op("stablehlo.add", &[a[0], a[1]], &[], dt, &[])?]))?;
    Ok(b.op_n("stablehlo.reduce_window", &[v, init], &[(out_dims, dt)], &w.attrs(), vec![region])?.remove(0))
}

/// `avg_pool{2,3}d`: window sums divided by torch's divisor — the override, else the window's
/// size clipped to the padded input (`count_include_pad`), else its count of real elements.
pub(super) fn avg_pool<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &AvgPool,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let in_dims = static_dims(x.ty)?;
    let out_dims = static_dims(out)?;
    let dt = accumulation_dtype(out.dtype);
    let (w, divisor) = avg_window(b, op, &in_dims, &out_dims, dt)?;
    let v = b.convert(x.v, &in_dims, x.ty.dtype, dt)?;
    let sum = window_sum(b, v, &w, &out_dims, dt)?;
    let mean = b.op("stablehlo.divide", &[sum, divisor], &out_dims, dt, &[])?;
    b.convert(mean, &out_dims, dt, out.dtype)
}

/// The window of an average pool and its divisor per output position.
fn avg_window<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &AvgPool,
    in_dims: &[i64],
    out_dims: &[i64],
    dt: DType,
) -> LowerResult<(Window, Value<'c, 'b>)> {
    let AvgPool { kernel, stride, padding, count_include_pad, divisor_override, .. } = op;
    let w = Window::new(in_dims, out_dims, kernel, stride, padding, &[])?;
    let divisor = match divisor_override {
        Some(d) => b.splat(Scalar::Int(*d), out_dims, dt)?,
        None => window_counts(b, &w, in_dims, out_dims, *count_include_pad, dt)?,
    };
    Ok((w, divisor))
}

/// How many elements each window of `w` counts, per output position: the in-bounds ones, or
/// with `count_include_pad` those of the explicitly padded input too (never the ceil-mode
/// overhang past it). Windows are boxes, so the count is a product of one small vector per
/// pooled dim, each a literal computed here: nothing of the input's size is materialized
/// (a full-size constant took XLA over a minute to fold on large inputs).
fn window_counts<'c, 'b>(
    b: &Builder<'c, 'b>,
    w: &Window,
    in_dims: &[i64],
    out_dims: &[i64],
    count_include_pad: bool,
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    let mut divisor = b.splat(Scalar::Int(1), out_dims, dt)?;
    for (axis, &n) in out_dims.iter().enumerate() {
        let [pad, _] = w.pads[axis];
        let (lo, hi) = if count_include_pad { (-pad, in_dims[axis] + pad) } else { (0, in_dims[axis]) };
        let counts: Vec<i64> = (0..n)
            .map(|i| {
                let first = i * w.strides[axis] - pad;
                (0..w.dims[axis]).filter(|j| (lo..hi).contains(&(first + j * w.dilations[axis]))).count() as i64
            })
            .collect();
        if counts.iter().all(|&c| c == 1) {
            continue;
        }
        let lits = counts.iter().map(|&c| scalar_literal(Scalar::Int(c), dt)).collect::<LowerResult<Vec<_>>>()?;
        let value = format!("dense<[{}]> : {}", lits.join(", "), tensor_type_text(&[n], dt));
        let along = b.op("stablehlo.constant", &[], &[n], dt, &[("value", value)])?;
        let along = b.op(
            "stablehlo.broadcast_in_dim",
            &[along],
            out_dims,
            dt,
            &[("broadcast_dimensions", i64_array(&[axis as i64]))],
        )?;
        divisor = b.op("stablehlo.multiply", &[divisor, along], out_dims, dt, &[])?;
    }
    Ok(divisor)
}

/// `avg_pool{2,3}d_backward`: the transpose of the forward window sum. The gradient divided by
/// the divisor is dilated by the stride and edge-padded (one `stablehlo.pad`), then summed over
/// the window at stride 1, which adds each input's share from every window covering it.
pub(super) fn avg_pool_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &AvgPool,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let (grad, input) = (args[0], args[1]);
    let gd = static_dims(grad.ty)?;
    let in_dims = static_dims(input.ty)?;
    let dt = out.dtype;
    let (w, divisor) = avg_window(b, op, &in_dims, &gd, dt)?;
    let g = b.op("stablehlo.divide", &[b.convert(grad.v, &gd, grad.ty.dtype, dt)?, divisor], &gd, dt, &[])?;
    let rank = gd.len();
    let (mut low, mut high, mut interior, mut padded) = (vec![0; rank], vec![0; rank], vec![0; rank], vec![0; rank]);
    for d in 0..rank {
        let (k, s, p) = (w.dims[d], w.strides[d], w.pads[d][0]);
        let dilated = (gd[d] - 1) * s + 1;
        low[d] = k - 1 - p;
        high[d] = in_dims[d] + k - 1 - low[d] - dilated;
        interior[d] = s - 1;
        padded[d] = in_dims[d] + k - 1;
    }
    let zero = b.splat(Scalar::Int(0), &[], dt)?;
    let spread = b.op(
        "stablehlo.pad",
        &[g, zero],
        &padded,
        dt,
        &[
            ("edge_padding_low", i64_array(&low)),
            ("edge_padding_high", i64_array(&high)),
            ("interior_padding", i64_array(&interior)),
        ],
    )?;
    let unit =
        Window { dims: w.dims.clone(), strides: vec![1; rank], dilations: vec![1; rank], pads: vec![[0, 0]; rank] };
    let r = window_sum(b, spread, &unit, &in_dims, dt)?;
    b.reshape(r, &static_dims(out)?, dt)
}

/// Applies `matrix` (`[out][in]` weights) along dim `axis` of `v`: one `dot_general`, then a
/// transpose that puts the new dim back in place.
fn along<'c, 'b>(
    b: &Builder<'c, 'b>,
    v: Value<'c, 'b>,
    dims: &[i64],
    axis: usize,
    matrix: &[Vec<f64>],
    dt: DType,
) -> LowerResult<(Value<'c, 'b>, Vec<i64>)> {
    let (out_n, in_n) = (matrix.len() as i64, dims[axis]);
    let lits = matrix
        .iter()
        .map(|row| row.iter().map(|&w| scalar_literal(Scalar::Float(w), dt)).collect::<LowerResult<Vec<_>>>())
        .collect::<LowerResult<Vec<_>>>()?;
    let rows: Vec<String> = lits.iter().map(|r| format!("[{}]", r.join(", "))).collect();
    let ty = tensor_type_text(&[out_n, in_n], dt);
    let m = b.op(
        "stablehlo.constant",
        &[],
        &[out_n, in_n],
        dt,
        &[("value", format!("dense<[{}]> : {ty}", rows.join(", ")))],
    )?;
    let mut moved: Vec<i64> = dims.iter().enumerate().filter(|(i, _)| *i != axis).map(|(_, &d)| d).collect();
    moved.push(out_n);
    let numbers = format!("#stablehlo.dot<lhs_contracting_dimensions = [{axis}], rhs_contracting_dimensions = [1]>");
    let precision = "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]".to_string();
    let prod = b.op(
        "stablehlo.dot_general",
        &[v, m],
        &moved,
        dt,
        &[("dot_dimension_numbers", numbers), ("precision_config", precision)],
    )?;
    let last = moved.len() as i64 - 1;
    let mut perm: Vec<i64> = (0..last).collect();
    perm.insert(axis, last);
    let mut result = dims.to_vec();
    result[axis] = out_n;
    Ok((b.op("stablehlo.transpose", &[prod], &result, dt, &[("permutation", i64_array(&perm))])?, result))
}

/// Adaptive average pooling weights: output `i` averages inputs `floor(i*n/m) .. ceil((i+1)*n/m)`.
fn adaptive_matrix(n: i64, m: i64) -> Vec<Vec<f64>> {
    (0..m)
        .map(|i| {
            let (start, end) = ((i * n) / m, ((i + 1) * n + m - 1) / m);
            (0..n).map(|j| if (start..end).contains(&j) { 1.0 / (end - start) as f64 } else { 0.0 }).collect()
        })
        .collect()
}

/// Source coordinate of output `i` as torch computes it (`area_pixel_compute_source_index`).
fn source_index(i: i64, n: i64, m: i64, align_corners: bool, scale: Option<f64>, cubic_like: bool) -> f64 {
    if align_corners {
        return if m > 1 { i as f64 * (n - 1) as f64 / (m - 1) as f64 } else { 0.0 };
    }
    // PyTorch uses the sizes' ratio unless a positive scale is given.
    let s = scale.filter(|f| *f > 0.0).map_or(n as f64 / m as f64, |f| 1.0 / f);
    if cubic_like {
        (s * (i as f64 + 0.5) - 0.5).max(0.0)
    } else {
        (s * i as f64).floor()
    }
}

/// Nearest (`floor(i * in/out)`) or bilinear interpolation weights along one dim.
fn resample_matrix(n: i64, m: i64, bilinear: bool, align_corners: bool, scale: Option<f64>) -> Vec<Vec<f64>> {
    (0..m)
        .map(|i| {
            let mut row = vec![0.0; n as usize];
            let src = source_index(i, n, m, align_corners, scale, bilinear);
            if bilinear {
                let lo = (src.floor() as i64).min(n - 1);
                let hi = (lo + 1).min(n - 1);
                let frac = src - lo as f64;
                row[lo as usize] += 1.0 - frac;
                row[hi as usize] += frac;
            } else {
                row[(src as i64).min(n - 1) as usize] = 1.0;
            }
            row
        })
        .collect()
}

/// `_adaptive_avg_pool{2,3}d`: an averaging matrix per spatial dim whose size changes.
pub(super) fn adaptive_avg_pool<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &AdaptiveAvgPool,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    resample(b, op.spatial, x, out, |_, n, m| (n != m).then(|| adaptive_matrix(n, m)))
}

/// `upsample_{nearest,bilinear}2d`: an interpolation matrix per spatial dim.
pub(super) fn upsample<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Upsample,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let Upsample { bilinear, align_corners, scales } = op;
    let scale = |k: usize| scales.as_ref().and_then(|s| s.get(k).copied());
    resample(b, 2, x, out, |k, n, m| Some(resample_matrix(n, m, *bilinear, *align_corners, scale(k))))
}

/// `x` multiplied along each of its trailing `spatial` dims by the matrix `matrix(k, n, m)`
/// gives for the `k`-th (from size `n` to `m`; `None`: left as it is).
fn resample<'c, 'b>(
    b: &Builder<'c, 'b>,
    spatial: usize,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
    matrix: impl Fn(usize, i64, i64) -> Option<Vec<Vec<f64>>>,
) -> LowerResult<Value<'c, 'b>> {
    let in_dims = static_dims(x.ty)?;
    let out_dims = static_dims(out)?;
    let dt = out.dtype;
    let mut v = b.convert(x.v, &in_dims, x.ty.dtype, dt)?;
    let mut dims = in_dims.clone();
    for k in 0..spatial {
        let axis = in_dims.len() - spatial + k;
        let Some(matrix) = matrix(k, in_dims[axis], out_dims[axis]) else { continue };
        (v, dims) = along(b, v, &dims, axis, &matrix, dt)?;
    }
    b.reshape(v, &out_dims, dt)
}

/// `upsample_nearest2d_backward`: the transpose of the forward's nearest matrices, which adds
/// each gradient element to the input position it was read from.
pub(super) fn upsample_nearest_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &UpsampleNearestBackward,
    grad: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let scale = |k: usize| op.scales.as_ref().and_then(|s| s.get(k).copied());
    // Along dim `k`, from the gradient's size `m` back to the input's `n`.
    resample(b, 2, grad, out, |k, m, n| Some(transposed(&resample_matrix(n, m, false, false, scale(k)), n)))
}

/// The `n`-column matrix `rows` transposed.
fn transposed(rows: &[Vec<f64>], n: i64) -> Vec<Vec<f64>> {
    (0..n as usize).map(|j| rows.iter().map(|row| row[j]).collect()).collect()
}

/// `max_pool_with_indices_backward`: each output gradient is added at its window's recorded
/// flat spatial index (a scatter-add per channel).
pub(super) fn max_pool_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    spatial: usize,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let (grad, input, indices) = (args[0], args[1], args[2]);
    let in_dims = static_dims(input.ty)?;
    let gd = static_dims(grad.ty)?;
    let dt = out.dtype;
    if in_dims.len() <= spatial || gd.len() != in_dims.len() {
        return Err(format!("a {spatial}-d max-pool gradient of {gd:?} for an input of {in_dims:?}").into());
    }
    let lead: Vec<i64> = in_dims[..in_dims.len() - spatial].to_vec();
    let plane: i64 = in_dims[in_dims.len() - spatial..].iter().product();
    let windows: i64 = gd[gd.len() - spatial..].iter().product();
    let flat_in: Vec<i64> = lead.iter().copied().chain([plane]).collect();
    let flat_g: Vec<i64> = lead.iter().copied().chain([windows]).collect();
    let g = b.reshape(b.convert(grad.v, &gd, grad.ty.dtype, dt)?, &flat_g, dt)?;
    let idx = b.reshape(b.convert(indices.v, &gd, indices.ty.dtype, DType::I64)?, &flat_g, DType::I64)?;
    let idx_ty = TensorType::new(DType::I64, &flat_g);
    let zero = b.splat(Scalar::Int(0), &flat_in, dt)?;
    let zero_ty = TensorType::new(dt, &flat_in);
    let g_ty = TensorType::new(dt, &flat_g);
    let args = [Arg { v: zero, ty: &zero_ty }, Arg { v: idx, ty: &idx_ty }, Arg { v: g, ty: &g_ty }];
    let last = flat_in.len() as i64 - 1;
    let r = super::scatter::scatter(b, (last, torchtpu_passes::ir::ScatterReduce::Sum, true), None, &args, &zero_ty)?;
    b.reshape(r, &static_dims(out)?, dt)
}

/// `_adaptive_avg_pool2d_backward`: the transposed averaging maps, one per spatial dim.
pub(super) fn adaptive_avg_pool_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let (grad, input) = (args[0], args[1]);
    let gd = static_dims(grad.ty)?;
    let in_dims = static_dims(input.ty)?;
    let dt = out.dtype;
    let mut v = b.convert(grad.v, &gd, grad.ty.dtype, dt)?;
    let mut dims = gd.clone();
    for k in 0..2 {
        let axis = gd.len() - 2 + k;
        let (n, m) = (in_dims[axis], gd[axis]);
        (v, dims) = along(b, v, &dims, axis, &transposed(&adaptive_matrix(n, m), n), dt)?;
    }
    b.reshape(v, &static_dims(out)?, dt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_windows_match_torch() {
        // 5 -> 3: windows [0,2), [1,4), [3,5)
        let m = adaptive_matrix(5, 3);
        assert_eq!(m[0], [0.5, 0.5, 0.0, 0.0, 0.0]);
        assert_eq!(m[1][1..4], [1.0 / 3.0; 3]);
        assert_eq!(m[2], [0.0, 0.0, 0.0, 0.5, 0.5]);
    }

    #[test]
    fn bilinear_weights_follow_align_corners() {
        let m = resample_matrix(2, 4, true, false, None);
        // half-pixel centers: sources -0.25->0, 0.25, 0.75, 1.25 (clamped to the last pixel)
        assert_eq!(m[0], [1.0, 0.0]);
        assert_eq!(m[1], [0.75, 0.25]);
        let m = resample_matrix(2, 3, true, true, None);
        assert_eq!(m[1], [0.5, 0.5]);
    }
}
