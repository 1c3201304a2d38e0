//! Fourier transforms `_fft_r2c`, `_fft_c2r` and `_fft_c2c` over any dims, through `stablehlo.fft`
//! (which transforms the trailing dims: the transformed dims are moved last and back).

use melior::ir::Value;
use torchtpu_passes::ir::ops::Fft;
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{i64_array, norm_dim, static_dims, Builder, LowerResult};
use super::Arg;

type V<'c, 'b> = Value<'c, 'b>;

fn transpose<'c, 'b>(
    b: &Builder<'c, 'b>,
    v: V<'c, 'b>,
    dims: &[i64],
    perm: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Ok(v);
    }
    let to: Vec<i64> = perm.iter().map(|&p| dims[p as usize]).collect();
    b.op("stablehlo.transpose", &[v], &to, dt, &[("permutation", i64_array(perm))])
}

fn scale<'c, 'b>(b: &Builder<'c, 'b>, v: V<'c, 'b>, dims: &[i64], factor: f64, dt: DType) -> LowerResult<V<'c, 'b>> {
    if factor == 1.0 {
        return Ok(v);
    }
    b.op("stablehlo.multiply", &[v, b.splat(Scalar::Float(factor), dims, dt)?], dims, dt, &[])
}

/// `_fft_r2c(x, dims, normalization, onesided)` (`inverse` false) or
/// `_fft_c2r(x, dims, normalization, last_dim_size)` (`inverse` true; the size is the
/// output's).
pub(super) fn fft<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Fft,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let Fft { ref dims, normalization, inverse, onesided } = *op;
    let (xd, od) = (static_dims(x.ty)?, static_dims(out)?);
    let rank = xd.len();
    let axes = dims.iter().map(|&d| norm_dim(d, rank)).collect::<LowerResult<Vec<i64>>>()?;
    if axes.is_empty() || axes.len() > 3 {
        return Err(format!("transforms over {} dims are not supported (1 to 3)", axes.len()).into());
    }
    let mut perm: Vec<i64> = (0..rank as i64).filter(|d| !axes.contains(d)).collect();
    perm.extend(&axes);
    if perm.len() != rank {
        return Err(format!("dims {dims:?} repeat a dim").into());
    }
    let mut inverse_perm = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse_perm[p as usize] = i as i64;
    }
    // The real signal's sizes: the input's for r2c, the output's for c2r.
    let signal: Vec<i64> = axes.iter().map(|&a| if inverse { od[a as usize] } else { xd[a as usize] }).collect();
    let n: i64 = signal.iter().product();
    let factor = match normalization {
        0 => 1.0,
        1 => 1.0 / (n as f64).sqrt(),
        2 => 1.0 / n as f64,
        k => return Err(format!("normalization {k} is not one of 0 (none), 1 (1/sqrt(n)), 2 (1/n)").into()),
    };
    let permuted = |d: &[i64]| -> Vec<i64> { perm.iter().map(|&p| d[p as usize]).collect() };
    let (xt, xt_dims, yt_dims) = (transpose(b, x.v, &xd, &perm, x.ty.dtype)?, permuted(&xd), permuted(&od));
    let fft_attrs =
        |kind: &str| [("fft_type", format!("#stablehlo<fft_type {kind}>")), ("fft_length", i64_array(&signal))];
    if x.ty.dtype.is_complex() && out.dtype.is_complex() {
        // c2c; XLA's inverse transform already divides by n.
        let (kind, factor) = if inverse { ("IFFT", factor * n as f64) } else { ("FFT", factor) };
        let y = b.op("stablehlo.fft", &[xt], &yt_dims, out.dtype, &fft_attrs(kind))?;
        let y = scale(b, y, &yt_dims, factor, out.dtype)?;
        return transpose(b, y, &yt_dims, &inverse_perm, out.dtype);
    }
    let yt = if inverse {
        let real = out.dtype;
        // Only the first n/2 + 1 frequencies of the last dim are read.
        let last = rank - 1;
        let needed = signal[signal.len() - 1] / 2 + 1;
        let xt = match xt_dims[last] {
            have if have == needed => xt,
            have if have > needed => {
                let mut limit = xt_dims.clone();
                limit[last] = needed;
                let v = b.op(
                    "stablehlo.slice",
                    &[xt],
                    &limit,
                    x.ty.dtype,
                    &[
                        ("start_indices", i64_array(&vec![0; rank])),
                        ("limit_indices", i64_array(&limit)),
                        ("strides", i64_array(&vec![1; rank])),
                    ],
                )?;
                v
            }
            have => {
                return Err(format!(
                    "{have} frequencies cannot make a real signal of length {}",
                    signal[signal.len() - 1]
                )
                .into())
            }
        };
        // XLA's inverse transforms already divide by n.
        let y = b.op("stablehlo.fft", &[xt], &yt_dims, real, &fft_attrs("IRFFT"))?;
        scale(b, y, &yt_dims, factor * n as f64, real)?
    } else {
        let real = x.ty.dtype;
        let xt = scale(b, xt, &xt_dims, factor, real)?;
        if onesided {
            b.op("stablehlo.fft", &[xt], &yt_dims, out.dtype, &fft_attrs("RFFT"))?
        } else {
            let zeros = b.splat(Scalar::Int(0), &xt_dims, real)?;
            let complex = b.op("stablehlo.complex", &[xt, zeros], &xt_dims, out.dtype, &[])?;
            b.op("stablehlo.fft", &[complex], &yt_dims, out.dtype, &fft_attrs("FFT"))?
        }
    };
    transpose(b, yt, &yt_dims, &inverse_perm, out.dtype)
}
