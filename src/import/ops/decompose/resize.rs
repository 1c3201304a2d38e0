//! Antialiased resizing (`_upsample_bilinear2d_aa`, `_upsample_bicubic2d_aa`: image processors
//! with `antialias=True`) as two contractions with interpolation matrices computed at compile
//! time: `out = W_h · x · W_wᵀ` per image and channel. Each row of a matrix holds PyTorch's
//! weights for one output pixel — its filter (triangle or Keys cubic with a = -0.5) stretched
//! by the scale when shrinking, over the input pixels within its support, normalized to sum
//! to one — so the result is PyTorch's up to the order of the sums.

use torchtpu_passes::ir::ops::{Mm, Permute, View};
use torchtpu_passes::ir::{DType, Dim, Op, Scalar, TensorType, ValueRef};

use super::super::super::wire::{Recipe, Wire};
use super::{static_dims, Args, MAX_CONSTANT, R};

/// The filter of a mode at distance `x`, and its width in input pixels at scale 1.
fn filter(bicubic: bool, x: f64) -> f64 {
    let x = x.abs();
    if !bicubic {
        return if x < 1.0 { 1.0 - x } else { 0.0 };
    }
    let a = -0.5;
    if x < 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * a
    } else {
        0.0
    }
}

/// The `[n_out, n_in]` interpolation matrix along one dim, row-major.
fn weights(bicubic: bool, n_in: i64, n_out: i64, align_corners: bool, scale_arg: Option<f64>) -> Vec<f64> {
    let scale = if align_corners {
        if n_out > 1 {
            (n_in - 1) as f64 / (n_out - 1) as f64
        } else {
            0.0
        }
    } else {
        scale_arg.filter(|s| *s > 0.0).map_or(n_in as f64 / n_out as f64, |s| 1.0 / s)
    };
    let half_width = if bicubic { 2.0 } else { 1.0 };
    let (support, invscale) = if scale >= 1.0 { (half_width * scale, 1.0 / scale) } else { (half_width, 1.0) };
    let mut w = vec![0.0; (n_out * n_in) as usize];
    for i in 0..n_out {
        let center = scale * (i as f64 + 0.5);
        // Truncation toward zero, as the kernel's `int` casts.
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xmax = ((center + support + 0.5) as i64).min(n_in);
        let row: Vec<f64> = (xmin..xmax).map(|j| filter(bicubic, (j as f64 - center + 0.5) * invscale)).collect();
        let total: f64 = row.iter().sum();
        for (k, v) in row.into_iter().enumerate() {
            w[(i * n_in + xmin) as usize + k] = if total != 0.0 { v / total } else { v };
        }
    }
    w
}

/// `_upsample_{bilinear,bicubic}2d_aa(x, output_size, align_corners, scales_h, scales_w)`.
pub(super) fn upsample_aa(a: &mut Args<'_>, bicubic: bool) -> R<Recipe> {
    a.tensor("self")?;
    let size = a.ints("output_size", None)?;
    let align_corners = a.bool("align_corners", false)?;
    let scales = [a.opt_float("scales_h")?, a.opt_float("scales_w")?];
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let dims = static_dims(&ty, "the image")?;
        let [n, c, h, wd] = dims[..] else {
            return Err(format!("an antialiased resize of {ty}: expected [N, C, H, W]").into());
        };
        let [oh, ow] = size[..] else { return Err(format!("output_size {size:?}: expected two sizes").into()) };
        if [oh, ow].iter().any(|&s| s < 1) || oh.saturating_mul(h).max(ow.saturating_mul(wd)) > MAX_CONSTANT {
            return Err(format!("an antialiased resize from {h}x{wd} to {oh}x{ow} is out of range").into());
        }
        if !ty.dtype.is_float() {
            return Err(format!("an antialiased resize of {ty}: only floating-point images are supported").into());
        }
        let dt = if ty.dtype == DType::F64 { DType::F64 } else { DType::F32 };
        let x = w.convert(x, dt)?;
        // Along W: [n·c·h, w] · W_wᵀ [w, ow].
        let flat = view(w, x, &[n * c * h, wd])?;
        let ww = matrix(w, weights(bicubic, wd, ow, align_corners, scales[1]), [ow, wd], dt)?;
        let along_w = w.op(Op::Mm(Mm), &[flat, ww])?;
        // Along H: [n·c, ow, h] rows · W_hᵀ [h, oh].
        let images = view(w, along_w, &[n * c, h, ow])?;
        let images = w.op(Op::Permute(Permute { dims: vec![0, 2, 1] }), &[images])?;
        let flat = view(w, images, &[n * c * ow, h])?;
        let wh = matrix(w, weights(bicubic, h, oh, align_corners, scales[0]), [oh, h], dt)?;
        let along_h = w.op(Op::Mm(Mm), &[flat, wh])?;
        let out = view(w, along_h, &[n, c, ow, oh])?;
        let out = w.op(Op::Permute(Permute { dims: vec![0, 1, 3, 2] }), &[out])?;
        Ok(vec![w.convert(out, ty.dtype)?])
    }))
}

fn view(w: &mut Wire<'_>, v: ValueRef, shape: &[i64]) -> R<ValueRef> {
    w.op(Op::View(View { size: shape.iter().map(|&d| Dim::Static(d)).collect() }), &[v])
}

/// The transpose of the `[rows, cols]` matrix `m` as a constant of `dtype`: `[cols, rows]`.
fn matrix(w: &mut Wire<'_>, m: Vec<f64>, [rows, cols]: [i64; 2], dtype: DType) -> R<ValueRef> {
    let mut values = Vec::with_capacity(m.len());
    for j in 0..cols {
        for i in 0..rows {
            values.push(Scalar::Float(m[(i * cols + j) as usize]));
        }
    }
    w.literal(values, TensorType::new(dtype, &[cols, rows]))
}
