//! Shape and indexing lowerings: reshapes, transposes, broadcasts, slices, concatenation,
//! splits and the gathers behind advanced indexing, `index_select`, `gather` and `embedding`.

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Dim, Scalar, TensorType};

use super::builder::{dim_size, i64_array, norm_dim, static_dims, Builder, LowerResult};
use super::Arg;

/// `view`, `unsqueeze`, `squeeze`: a reshape to the recorded output shape.
pub(super) fn reshape<'c, 'b>(b: &Builder<'c, 'b>, x: Arg<'c, 'b, '_>, out: &TensorType) -> LowerResult<Value<'c, 'b>> {
    b.reshape(x.v, &static_dims(out)?, out.dtype)
}

pub(super) fn permute<'c, 'b>(
    b: &Builder<'c, 'b>,
    dims: &[i64],
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let rank = dims.len();
    let perm = dims.iter().map(|&d| norm_dim(d, rank)).collect::<LowerResult<Vec<_>>>()?;
    b.op("stablehlo.transpose", &[x.v], &static_dims(out)?, out.dtype, &[("permutation", i64_array(&perm))])
}

pub(super) fn expand<'c, 'b>(b: &Builder<'c, 'b>, x: Arg<'c, 'b, '_>, out: &TensorType) -> LowerResult<Value<'c, 'b>> {
    b.broadcast_to(x.v, &static_dims(x.ty)?, &static_dims(out)?, out.dtype)
}

/// Python slice bounds: negative counts from the end, `i64::MAX` means the end, clamped.
fn clamp_bound(v: i64, size: i64) -> i64 {
    let v = if v < 0 { v + size } else { v };
    v.clamp(0, size)
}

pub(super) fn slice<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    start: &Dim,
    end: &Dim,
    step: i64,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let in_dims = static_dims(x.ty)?;
    let (axis, size) = dim_size(&in_dims, dim)?;
    let static_of = |d: &Dim| d.as_static().ok_or_else(|| format!("slice bound `{d}` is still symbolic"));
    let lo = clamp_bound(static_of(start)?, size);
    let hi = clamp_bound(static_of(end)?, size).max(lo);
    if step < 1 {
        return Err(format!("slice step must be positive, found {step}").into());
    }
    let mut starts = vec![0; in_dims.len()];
    let mut limits = in_dims.clone();
    let mut strides = vec![1; in_dims.len()];
    starts[axis] = lo;
    limits[axis] = hi;
    strides[axis] = step;
    let attrs = [
        ("start_indices", i64_array(&starts)),
        ("limit_indices", i64_array(&limits)),
        ("strides", i64_array(&strides)),
    ];
    b.op("stablehlo.slice", &[x.v], &static_dims(out)?, out.dtype, &attrs)
}

pub(super) fn cat<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let axis = norm_dim(dim, dims.len())?;
    let mut parts = Vec::new();
    for a in args {
        let d = static_dims(a.ty)?;
        // torch accepts legacy 1-D empty tensors in `cat` whatever the rank; they add nothing.
        if d == [0] && dims.len() != 1 {
            continue;
        }
        parts.push(b.convert(a.v, &d, a.ty.dtype, out.dtype)?);
    }
    if parts.len() == 1 {
        return Ok(parts[0]);
    }
    b.op("stablehlo.concatenate", &parts, &dims, out.dtype, &[("dimension", format!("{axis} : i64"))])
}

pub(super) fn split<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    x: Arg<'c, 'b, '_>,
    outs: &[TensorType],
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let in_dims = static_dims(x.ty)?;
    let axis = norm_dim(dim, in_dims.len())? as usize;
    let mut offset = 0;
    let mut values = Vec::with_capacity(outs.len());
    for o in outs {
        let od = static_dims(o)?;
        let len = od[axis];
        let end = Dim::Static(offset + len);
        values.push(slice(b, axis as i64, &Dim::Static(offset), &end, 1, x, o)?);
        offset += len;
    }
    Ok(values)
}

/// An index tensor as int64 with negative entries wrapped (`i + size`), broadcast to `to`
/// and given a trailing unit dim, ready to be concatenated into gather coordinates.
pub(super) fn coordinate<'c, 'b>(
    b: &Builder<'c, 'b>,
    idx: Arg<'c, 'b, '_>,
    size: i64,
    to: &[i64],
) -> LowerResult<Value<'c, 'b>> {
    if idx.ty.dtype == DType::Bool {
        return Err("boolean-mask indexing has a data-dependent shape and is not supported".into());
    }
    let d = static_dims(idx.ty)?;
    let v = b.convert(idx.v, &d, idx.ty.dtype, DType::I64)?;
    let zero = b.splat(Scalar::Int(0), &d, DType::I64)?;
    let negative = b.compare(v, zero, &d, DType::I64, "LT")?;
    let wrapped = b.op("stablehlo.add", &[v, b.splat(Scalar::Int(size), &d, DType::I64)?], &d, DType::I64, &[])?;
    let v = b.op("stablehlo.select", &[negative, wrapped, v], &d, DType::I64, &[])?;
    let v = b.broadcast_to(v, &d, to, DType::I64)?;
    let mut with_unit = to.to_vec();
    with_unit.push(1);
    b.reshape(v, &with_unit, DType::I64)
}

/// NumPy broadcast of static shapes.
fn broadcast_shapes(shapes: &[Vec<i64>]) -> LowerResult<Vec<i64>> {
    let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    (0..rank)
        .map(|i| {
            let mut out = 1;
            for s in shapes {
                let Some(k) = (s.len() + i).checked_sub(rank) else {
                    continue;
                };
                match (out, s[k]) {
                    (_, 1) => {}
                    (1, d) => out = d,
                    (o, d) if o == d => {}
                    (o, d) => return Err(format!("index shapes do not broadcast ({o} vs {d})").into()),
                }
            }
            Ok(out)
        })
        .collect()
}

/// Where advanced indexing reads or writes: coordinates `start` of shape `batch + [k]` for the
/// `k` indexed dims, and where the kept dims go in the result (NumPy's rule: in place when the
/// indexed dims are adjacent, after the broadcast index dims otherwise).
pub(super) struct IndexPlan<'c, 'b> {
    pub start: Value<'c, 'b>,
    pub batch: Vec<i64>,
    pub indexed: Vec<i64>,
    pub offset_dims: Vec<i64>,
    pub slice_sizes: Vec<i64>,
}

/// The plan of `x[indices]` for `x` of shape `x_dims`; `None` when no dim is indexed.
pub(super) fn index_plan<'c, 'b>(
    b: &Builder<'c, 'b>,
    x_dims: &[i64],
    indices: &[Option<Arg<'c, 'b, '_>>],
) -> LowerResult<Option<IndexPlan<'c, 'b>>> {
    let indexed: Vec<(usize, Arg)> = indices.iter().enumerate().filter_map(|(d, a)| a.map(|a| (d, a))).collect();
    if indexed.is_empty() {
        return Ok(None);
    }
    let shapes = indexed.iter().map(|(_, a)| static_dims(a.ty)).collect::<LowerResult<Vec<_>>>()?;
    let batch = broadcast_shapes(&shapes)?;
    let coords = indexed.iter().map(|(d, a)| coordinate(b, *a, x_dims[*d], &batch)).collect::<LowerResult<Vec<_>>>()?;
    let start = concat_coordinates(b, coords, &batch)?;
    let dims_indexed: Vec<i64> = indexed.iter().map(|(d, _)| *d as i64).collect();
    let adjacent = dims_indexed.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<usize> = (0..x_dims.len()).filter(|d| !dims_indexed.contains(&(*d as i64))).collect();
    let first = dims_indexed[0] as usize;
    let offset_dims: Vec<i64> = rest
        .iter()
        .enumerate()
        .map(|(k, &d)| if adjacent && d < first { k as i64 } else { (k + batch.len()) as i64 })
        .collect();
    let slice_sizes: Vec<i64> =
        (0..x_dims.len()).map(|d| if dims_indexed.contains(&(d as i64)) { 1 } else { x_dims[d] }).collect();
    Ok(Some(IndexPlan { start, batch, indexed: dims_indexed, offset_dims, slice_sizes }))
}

/// Concatenates per-dim coordinates (each `batch + [1]`) into `batch + [k]`.
fn concat_coordinates<'c, 'b>(
    b: &Builder<'c, 'b>,
    coords: Vec<Value<'c, 'b>>,
    batch: &[i64],
) -> LowerResult<Value<'c, 'b>> {
    if coords.len() == 1 {
        return Ok(coords[0]);
    }
    let mut dims = batch.to_vec();
    dims.push(coords.len() as i64);
    b.op("stablehlo.concatenate", &coords, &dims, DType::I64, &[("dimension", format!("{} : i64", batch.len()))])
}

/// Advanced indexing `x[i0, :, i2, …]` (`None` entries are full slices), lowered to one
/// `stablehlo.gather`.
pub(super) fn index<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: Arg<'c, 'b, '_>,
    indices: &[Option<Arg<'c, 'b, '_>>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let x_dims = static_dims(x.ty)?;
    let Some(p) = index_plan(b, &x_dims, indices)? else { return Ok(x.v) };
    gather_op(b, x.v, p.start, &p.offset_dims, &p.indexed, &p.indexed, p.batch.len(), &p.slice_sizes, out)
}

/// Full coordinates for `gather`/`scatter` along `axis`: iotas over the index's shape for every
/// dim except `axis`, which takes the index values. Shape `idx_dims + [rank]`.
pub(super) fn along_dim_coordinates<'c, 'b>(
    b: &Builder<'c, 'b>,
    x_dims: &[i64],
    axis: usize,
    idx: Arg<'c, 'b, '_>,
) -> LowerResult<Value<'c, 'b>> {
    let idx_dims = static_dims(idx.ty)?;
    let mut with_unit = idx_dims.clone();
    with_unit.push(1);
    let mut coords = Vec::with_capacity(x_dims.len());
    for d in 0..x_dims.len() {
        if d == axis {
            coords.push(coordinate(b, idx, x_dims[axis], &idx_dims)?);
        } else {
            coords.push(b.op(
                "stablehlo.iota",
                &[],
                &with_unit,
                DType::I64,
                &[("iota_dimension", format!("{d} : i64"))],
            )?);
        }
    }
    let mut dims = idx_dims;
    dims.push(x_dims.len() as i64);
    if coords.len() == 1 {
        return Ok(coords[0]);
    }
    let last = dims.len() - 1;
    b.op("stablehlo.concatenate", &coords, &dims, DType::I64, &[("dimension", format!("{last} : i64"))])
}

#[allow(clippy::too_many_arguments)] // mirrors the fields of `#stablehlo.gather`
pub(super) fn gather_op<'c, 'b>(
    b: &Builder<'c, 'b>,
    operand: Value<'c, 'b>,
    start: Value<'c, 'b>,
    offset_dims: &[i64],
    collapsed: &[i64],
    start_index_map: &[i64],
    index_vector_dim: usize,
    slice_sizes: &[i64],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let list = |v: &[i64]| format!("[{}]", v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "));
    let numbers = format!(
        "#stablehlo.gather<offset_dims = {}, collapsed_slice_dims = {}, start_index_map = {}, index_vector_dim = {index_vector_dim}>",
        list(offset_dims),
        list(collapsed),
        list(start_index_map)
    );
    let attrs = [
        ("dimension_numbers", numbers),
        ("slice_sizes", i64_array(slice_sizes)),
        ("indices_are_sorted", "false".to_string()),
    ];
    b.op("stablehlo.gather", &[operand, start], &static_dims(out)?, out.dtype, &attrs)
}

/// `index_select(x, dim, idx)` is `x[:, …, idx, …]` with a 1-D index.
pub(super) fn index_select<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    x: Arg<'c, 'b, '_>,
    idx: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let axis = norm_dim(dim, x.ty.rank())? as usize;
    if x.ty.rank() == 0 {
        // A 0-d tensor has one entry, which any valid index (0 or -1) selects.
        return b.reshape(x.v, &static_dims(out)?, out.dtype);
    }
    // A 0-d index selects one entry but keeps the dim (size 1), unlike advanced indexing.
    let one = TensorType::new(idx.ty.dtype, &[1]);
    let idx = if idx.ty.rank() == 0 { Arg { v: b.reshape(idx.v, &[1], idx.ty.dtype)?, ty: &one } } else { idx };
    let mut indices = vec![None; x.ty.rank()];
    indices[axis] = Some(idx);
    index(b, x, &indices, out)
}

/// `gather(x, dim, idx)`: `out[i][j][k] = x[i][idx[i][j][k]][k]` (for dim 1).
pub(super) fn gather<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    x: Arg<'c, 'b, '_>,
    idx: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let x_dims = static_dims(x.ty)?;
    let rank = x_dims.len();
    let axis = norm_dim(dim, rank)? as usize;
    let start = along_dim_coordinates(b, &x_dims, axis, idx)?;
    let all: Vec<i64> = (0..rank as i64).collect();
    gather_op(b, x.v, start, &[], &all, &all, idx.ty.rank(), &vec![1; rank], out)
}
