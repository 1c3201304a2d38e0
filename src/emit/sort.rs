//! `sort` and `topk` through `stablehlo.sort` on (values, indices), with torch's order: NaN is
//! larger than every number, and equal values keep their original order (stable); `nonzero`
//! through a sort of positions.

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Dim, Scalar, TensorType};

use super::builder::{i64_array, norm_dim, static_dims, Builder, Ew, LowerResult};
use super::Arg;

/// Sorts `x` along `dim`; returns (values, int64 indices) of the full sorted tensor.
pub(super) fn sorted<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: Arg<'c, 'b, '_>,
    dim: i64,
    descending: bool,
) -> LowerResult<(Value<'c, 'b>, Value<'c, 'b>, Vec<i64>, i64)> {
    let dims = static_dims(x.ty)?;
    let dt = x.ty.dtype;
    if dims.is_empty() {
        let zero = b.splat(torchtpu_passes::ir::Scalar::Int(0), &[], DType::I64)?;
        return Ok((x.v, zero, dims, 0));
    }
    let axis = norm_dim(dim, dims.len())?;
    let idx = b.op("stablehlo.iota", &[], &dims, DType::I64, &[("iota_dimension", format!("{axis} : i64"))])?;
    let region = b.scalar_region(&[dt, dt, DType::I64, DType::I64], |r, a| {
        let (lhs, rhs) = if descending { (a[1], a[0]) } else { (a[0], a[1]) };
        let less = r.compare(lhs, rhs, &[], dt, "LT")?;
        if !dt.is_float() {
            return Ok(vec![less]);
        }
        // `lhs` before `rhs` also when only `rhs` is NaN (NaN sorts last ascending).
        let lhs_nan = r.compare(lhs, lhs, &[], dt, "NE")?;
        let rhs_nan = r.compare(rhs, rhs, &[], dt, "NE")?;
        let lhs_num = r.op("stablehlo.not", &[lhs_nan], &[], DType::Bool, &[])?;
        let nan_last = r.op("stablehlo.and", &[lhs_num, rhs_nan], &[], DType::Bool, &[])?;
        Ok(vec![r.op("stablehlo.or", &[less, nan_last], &[], DType::Bool, &[])?])
    })?;
    let outs = b.op_n(
        "stablehlo.sort",
        &[x.v, idx],
        &[(&dims, dt), (&dims, DType::I64)],
        &[("dimension", format!("{axis} : i64")), ("is_stable", "true".to_string())],
        vec![region],
    )?;
    Ok((outs[0], outs[1], dims, axis))
}

/// `sort`: stable whether or not `stable` was asked, which is one of the orders torch allows.
pub(super) fn sort<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    descending: bool,
    x: Arg<'c, 'b, '_>,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let (values, indices, ..) = sorted(b, x, dim, descending)?;
    Ok(vec![values, indices])
}

/// `topk`: the first `k` of a stable sort, largest first when `largest`.
pub(super) fn topk<'c, 'b>(
    b: &Builder<'c, 'b>,
    k: i64,
    dim: i64,
    largest: bool,
    x: Arg<'c, 'b, '_>,
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let (values, indices, dims, axis) = sorted(b, x, dim, largest)?;
    if dims.is_empty() {
        return Ok(vec![values, indices]);
    }
    let vt = TensorType { dtype: x.ty.dtype, dims: dims.iter().map(|&d| Dim::Static(d)).collect() };
    let it = TensorType { dtype: DType::I64, dims: vt.dims.clone() };
    let (start, end) = (Dim::Static(0), Dim::Static(k));
    Ok(vec![
        super::shape::slice(b, axis, &start, &end, 1, Arg { v: values, ty: &vt }, &outs[0])?,
        super::shape::slice(b, axis, &start, &end, 1, Arg { v: indices, ty: &it }, &outs[1])?,
    ])
}

/// `nonzero`: the flat positions of the non-zero elements, first in order, by a sort of
/// `position if non-zero else numel`; the first `rows` of them made coordinates, and rows past
/// the real count zeros.
pub(super) fn nonzero<'c, 'b>(b: &Builder<'c, 'b>, x: Arg<'c, 'b, '_>, out: &TensorType) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(x.ty)?;
    let out_dims = static_dims(out)?;
    let (rows, rank) = (out_dims[0], dims.len());
    let numel: i64 = dims.iter().product();
    let dt = x.ty.dtype;
    if dt.is_complex() {
        return Err(format!("nonzero of {dt} values is not supported").into());
    }
    if rows == 0 || rank == 0 || numel == 0 {
        return b.splat(Scalar::Int(0), &out_dims, DType::I64);
    }
    let all = Ew { b, dims: vec![numel], dt: DType::I64 };
    let int = |e: &Ew<'_, 'c, 'b>, v: i64| b.splat(Scalar::Int(v), &e.dims, DType::I64);
    let flat = b.reshape(x.v, &[numel], dt)?;
    let set = match dt {
        DType::Bool => flat,
        _ => b.compare(flat, b.splat(Scalar::Int(0), &[numel], dt)?, &[numel], dt, "NE")?,
    };
    let iota = b.op("stablehlo.iota", &[], &[numel], DType::I64, &[("iota_dimension", "0 : i64".into())])?;
    let keys = all.select(set, iota, int(&all, numel)?)?;
    let region =
        b.scalar_region(&[DType::I64, DType::I64], |r, a| Ok(vec![r.compare(a[0], a[1], &[], DType::I64, "LT")?]))?;
    let sort_attrs = [("dimension", "0 : i64".to_string()), ("is_stable", "true".to_string())];
    let sorted = b.op_n("stablehlo.sort", &[keys], &[(&[numel], DType::I64)], &sort_attrs, vec![region])?;
    let slice =
        [("start_indices", i64_array(&[0])), ("limit_indices", i64_array(&[rows])), ("strides", i64_array(&[1]))];
    let first = b.op("stablehlo.slice", &[sorted[0]], &[rows], DType::I64, &slice)?;
    let e = Ew { b, dims: vec![rows], dt: DType::I64 };
    let real = b.compare(first, int(&e, numel)?, &[rows], DType::I64, "LT")?;
    let flat_index = e.select(real, first, int(&e, 0)?)?;
    let mut columns = Vec::with_capacity(rank);
    for d in 0..rank {
        let stride: i64 = dims[d + 1..].iter().product();
        let along = e.bin("divide", flat_index, int(&e, stride)?)?;
        let along = e.bin("remainder", along, int(&e, dims[d])?)?;
        columns.push(b.reshape(along, &[rows, 1], DType::I64)?);
    }
    b.op("stablehlo.concatenate", &columns, &out_dims, DType::I64, &[("dimension", "1 : i64".into())])
}
