//! Complex values: `complex`, `polar`, `view_as_complex`, `view_as_real`, and the unary
//! functions that read both parts of one (`conj`, `angle`). StableHLO has `complex<f32>` and
//! `complex<f64>` only: torch's complex32 is refused.

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{bug, i64_array, static_dims, Builder, LowerResult};
use super::Arg;

/// The part dtype of a complex dtype StableHLO has.
fn part_of(dtype: DType) -> LowerResult<DType> {
    match dtype {
        DType::C64 | DType::C128 => dtype.complex_part().ok_or_else(|| bug("no parts")),
        _ => Err(format!("{dtype} values are not supported (StableHLO has complex64 and complex128)").into()),
    }
}

/// `real + i·imag` of two real operands broadcast to `out`'s shape (`polar`: of the magnitude and
/// the angle).
pub(super) fn complex<'c, 'b>(
    b: &Builder<'c, 'b>,
    polar: bool,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let part = part_of(out.dtype)?;
    let mut parts = vec![];
    for a in &args[..2] {
        parts.push(b.broadcast_to(
            b.convert(a.v, &static_dims(a.ty)?, a.ty.dtype, part)?,
            &static_dims(a.ty)?,
            &dims,
            part,
        )?);
    }
    let (mut re, mut im) = (parts[0], parts[1]);
    if polar {
        let (magnitude, angle) = (re, im);
        let cos = b.op("stablehlo.cosine", &[angle], &dims, part, &[])?;
        let sin = b.op("stablehlo.sine", &[angle], &dims, part, &[])?;
        re = b.op("stablehlo.multiply", &[magnitude, cos], &dims, part, &[])?;
        im = b.op("stablehlo.multiply", &[magnitude, sin], &dims, part, &[])?;
    }
    b.op("stablehlo.complex", &[re, im], &dims, out.dtype, &[])
}

/// `view_as_complex`: the last dim's two entries as the real and imaginary parts.
pub(super) fn view_as_complex<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let part = part_of(out.dtype)?;
    let x_dims = static_dims(x.ty)?;
    let rank = x_dims.len();
    let mut limit = x_dims.clone();
    let mut parts = vec![];
    for k in 0..2 {
        let mut start = vec![0; rank];
        start[rank - 1] = k;
        limit[rank - 1] = k + 1;
        let mut one = x_dims.clone();
        one[rank - 1] = 1;
        let attrs = [
            ("start_indices", i64_array(&start)),
            ("limit_indices", i64_array(&limit)),
            ("strides", i64_array(&vec![1; rank])),
        ];
        let slice = b.op("stablehlo.slice", &[x.v], &one, x.ty.dtype, &attrs)?;
        let slice = b.convert(slice, &one, x.ty.dtype, part)?;
        parts.push(b.reshape(slice, &dims, part)?);
    }
    b.op("stablehlo.complex", &[parts[0], parts[1]], &dims, out.dtype, &[])
}

/// `view_as_real`: the real and imaginary parts side by side in a new last dim.
pub(super) fn view_as_real<'c, 'b>(
    b: &Builder<'c, 'b>,
    z: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let part = part_of(z.ty.dtype)?;
    let z_dims = static_dims(z.ty)?;
    let mut one = z_dims.clone();
    one.push(1);
    let mut parts = vec![];
    for name in ["stablehlo.real", "stablehlo.imag"] {
        let p = b.op(name, &[z.v], &z_dims, part, &[])?;
        let p = b.reshape(p, &one, part)?;
        parts.push(b.convert(p, &one, part, out.dtype)?);
    }
    let last = dims.len() - 1;
    b.op("stablehlo.concatenate", &parts, &dims, out.dtype, &[("dimension", format!("{last} : i64"))])
}

/// `conj`: the imaginary part negated; the identity on real values (converted to `dt`).
pub(super) fn conj<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: Arg<'c, 'b, '_>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    if !x.ty.dtype.is_complex() {
        return b.convert(x.v, dims, x.ty.dtype, dt);
    }
    let part = part_of(x.ty.dtype)?;
    let re = b.op("stablehlo.real", &[x.v], dims, part, &[])?;
    let im = b.op("stablehlo.imag", &[x.v], dims, part, &[])?;
    let minus_im = b.op("stablehlo.negate", &[im], dims, part, &[])?;
    let z = b.op("stablehlo.complex", &[re, minus_im], dims, x.ty.dtype, &[])?;
    b.convert(z, dims, x.ty.dtype, dt)
}

/// `angle`: `atan2(imag, real)` of a complex value; of a real one π where it is negative, 0
/// elsewhere, NaN where it is NaN.
pub(super) fn angle<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: Arg<'c, 'b, '_>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    if x.ty.dtype.is_complex() {
        let part = part_of(x.ty.dtype)?;
        let re = b.op("stablehlo.real", &[x.v], dims, part, &[])?;
        let im = b.op("stablehlo.imag", &[x.v], dims, part, &[])?;
        let a = b.op("stablehlo.atan2", &[im, re], dims, part, &[])?;
        return b.convert(a, dims, part, dt);
    }
    let v = b.convert(x.v, dims, x.ty.dtype, dt)?;
    let zero = b.splat(Scalar::Float(0.0), dims, dt)?;
    let negative = b.compare(v, zero, dims, dt, "LT")?;
    let pi = b.splat(Scalar::Float(std::f64::consts::PI), dims, dt)?;
    let a = b.op("stablehlo.select", &[negative, pi, zero], dims, dt, &[])?;
    let nan = b.compare(v, v, dims, dt, "NE")?;
    b.op("stablehlo.select", &[nan, v, a], dims, dt, &[])
}
