//! Data-movement lowerings: `select`, `diagonal`, `flip`, `repeat`, `constant_pad_nd`, `copy`.

use melior::ir::Value;
use torchtpu_passes::ir::ops::Diagonal;
use torchtpu_passes::ir::{DType, Dim, Scalar, TensorType};

use super::builder::{dim_size, i64_array, norm_dim, static_dims, Builder, LowerResult};
use super::Arg;

/// `select.int`: a one-wide slice at `index` (negative counts from the end), then the dim is
/// dropped.
pub(super) fn select<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    index: i64,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(x.ty)?;
    let (axis, size) = dim_size(&dims, dim)?;
    let i = if index < 0 { index + size } else { index };
    if !(0..size).contains(&i) {
        return Err(format!("index {index} is out of range for dim {dim} of size {size}").into());
    }
    let mut one = dims.clone();
    one[axis] = 1;
    let sliced_ty = TensorType { dtype: x.ty.dtype, dims: one.iter().map(|&d| Dim::Static(d)).collect() };
    let sliced = super::shape::slice(b, axis as i64, &Dim::Static(i), &Dim::Static(i + 1), 1, x, &sliced_ty)?;
    b.reshape(sliced, &static_dims(out)?, out.dtype)
}

/// `diagonal(x, offset, dim1, dim2)`: a gather of the pairs `(i + max(-offset, 0),
/// i + max(offset, 0))`, whose result dim goes last as in torch.
pub(super) fn diagonal<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Diagonal,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let &Diagonal { offset, dim1, dim2 } = op;
    let dims = static_dims(x.ty)?;
    let out_dims = static_dims(out)?;
    let (d1, d2) = (norm_dim(dim1, dims.len())? as usize, norm_dim(dim2, dims.len())? as usize);
    let len = *out_dims.last().ok_or("diagonal of a 0-d tensor")?;
    let coord = |start: i64| -> LowerResult<Value<'c, 'b>> {
        let iota = b.op("stablehlo.iota", &[], &[len], DType::I64, &[("iota_dimension", "0 : i64".into())])?;
        b.op("stablehlo.add", &[iota, b.splat(Scalar::Int(start), &[len], DType::I64)?], &[len], DType::I64, &[])
    };
    let ty = TensorType::new(DType::I64, &[len]);
    let (r, c) = (coord((-offset).max(0))?, coord(offset.max(0))?);
    let mut indices: Vec<Option<Arg>> = vec![None; dims.len()];
    indices[d1] = Some(Arg { v: r, ty: &ty });
    indices[d2] = Some(Arg { v: c, ty: &ty });
    // The gather puts the diagonal where the indexed dims were (or first); move it last.
    let rest: Vec<usize> = (0..dims.len()).filter(|&d| d != d1 && d != d2).collect();
    let (lo, hi) = (d1.min(d2), d1.max(d2));
    let position = if hi == lo + 1 { rest.iter().filter(|&&d| d < lo).count() } else { 0 };
    let mut gathered: Vec<i64> = rest.iter().map(|&d| dims[d]).collect();
    gathered.insert(position, len);
    let gathered_ty = TensorType::new(out.dtype, &gathered);
    let g = super::shape::index(b, x, &indices, &gathered_ty)?;
    let mut perm: Vec<i64> = (0..gathered.len() as i64).filter(|&p| p != position as i64).collect();
    perm.push(position as i64);
    b.op("stablehlo.transpose", &[g], &out_dims, out.dtype, &[("permutation", i64_array(&perm))])
}

pub(super) fn flip<'c, 'b>(
    b: &Builder<'c, 'b>,
    dims: &[i64],
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let rank = x.ty.rank();
    if rank == 0 {
        return Ok(x.v); // one element: nothing to reverse
    }
    let axes = dims.iter().map(|&d| norm_dim(d, rank)).collect::<LowerResult<Vec<_>>>()?;
    b.op("stablehlo.reverse", &[x.v], &static_dims(out)?, out.dtype, &[("dimensions", i64_array(&axes))])
}

/// `repeat`: `x` (with leading unit dims added) broadcast to `[r0, d0, r1, d1, …]`, then merged.
pub(super) fn repeat<'c, 'b>(
    b: &Builder<'c, 'b>,
    repeats: &[i64],
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(x.ty)?;
    let lead = repeats.len().checked_sub(dims.len()).ok_or("repeat needs at least as many repeats as dims")?;
    let padded: Vec<i64> = std::iter::repeat_n(1, lead).chain(dims.iter().copied()).collect();
    let v = b.reshape(x.v, &padded, x.ty.dtype)?;
    let wide: Vec<i64> = repeats.iter().zip(&padded).flat_map(|(&r, &d)| [r, d]).collect();
    let map: Vec<i64> = (0..padded.len() as i64).map(|i| 2 * i + 1).collect();
    let v =
        b.op("stablehlo.broadcast_in_dim", &[v], &wide, x.ty.dtype, &[("broadcast_dimensions", i64_array(&map))])?;
    b.reshape(v, &static_dims(out)?, out.dtype)
}

/// `constant_pad_nd`: `stablehlo.pad`, whose negative edge padding crops like torch's.
pub(super) fn pad<'c, 'b>(
    b: &Builder<'c, 'b>,
    pad: &[i64],
    value: Scalar,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let rank = x.ty.rank();
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > rank {
        return Err(format!("padding {pad:?} does not fit a rank-{rank} tensor").into());
    }
    let (mut low, mut high) = (vec![0; rank], vec![0; rank]);
    for (k, pair) in pad.chunks(2).enumerate() {
        low[rank - 1 - k] = pair[0];
        high[rank - 1 - k] = pair[1];
    }
    let fill = b.splat(value, &[], x.ty.dtype)?;
    let attrs = [
        ("edge_padding_low", i64_array(&low)),
        ("edge_padding_high", i64_array(&high)),
        ("interior_padding", i64_array(&vec![0; rank])),
    ];
    b.op("stablehlo.pad", &[x.v, fill], &static_dims(out)?, out.dtype, &attrs)
}

/// `reflection_pad`/`replication_pad`: one gather per padded dim with constant source indices
/// (reflect: `-i` and `2(n-1)-i` past the edges; replicate: clamp to the edge).
pub(super) fn pad_mode<'c, 'b>(
    b: &Builder<'c, 'b>,
    pad: &[i64],
    reflect: bool,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let mut dims = static_dims(x.ty)?;
    let rank = dims.len();
    let dt = x.ty.dtype;
    let mut v = x.v;
    for (k, pair) in pad.chunks(2).enumerate() {
        let axis = rank.checked_sub(1 + k).ok_or("more padding pairs than dims")?;
        let (n, lo, hi) = (dims[axis], pair[0], pair.get(1).copied().unwrap_or(0));
        let source: Vec<i64> = (-lo..n + hi)
            .map(|i| match (reflect, i) {
                (true, i) if i < 0 => -i,
                (true, i) if i >= n => 2 * (n - 1) - i,
                (_, i) => i.clamp(0, n - 1),
            })
            .collect();
        if reflect && (lo >= n || hi >= n) {
            return Err(format!("reflection padding {lo}/{hi} must be smaller than the dim size {n}").into());
        }
        let m = source.len() as i64;
        let items: Vec<String> = source.iter().map(ToString::to_string).collect();
        let idx = b.op(
            "stablehlo.constant",
            &[],
            &[m, 1],
            DType::I64,
            &[(
                "value",
                format!(
                    "dense<[{}]> : tensor<{m}x1xi64>",
                    items.iter().map(|i| format!("[{i}]")).collect::<Vec<_>>().join(", ")
                ),
            )],
        )?;
        let mut next = dims.clone();
        next[axis] = m;
        // Gather along `axis`: the result is `[m, other dims…]`.
        let mut sizes = dims.clone();
        sizes[axis] = 1;
        let mut gathered: Vec<i64> = dims.iter().enumerate().filter(|(d, _)| *d != axis).map(|(_, &s)| s).collect();
        gathered.insert(0, m);
        let gathered = TensorType::new(dt, &gathered);
        let offset: Vec<i64> = (1..rank as i64).collect();
        let a = [axis as i64];
        let g = super::shape::gather_op(b, v, idx, &offset, &a, &a, 1, &sizes, &gathered)?;
        // The gather put the new dim first; move it back to `axis`.
        let mut perm: Vec<i64> = (1..rank as i64).collect();
        perm.insert(axis, 0);
        v = b.op("stablehlo.transpose", &[g], &next, dt, &[("permutation", i64_array(&perm))])?;
        dims = next;
    }
    b.reshape(v, &static_dims(out)?, out.dtype)
}

/// `as_strided`: a gather from `x`'s row-major storage at `offset + sum(i_k * stride_k)`.
pub(super) fn as_strided<'c, 'b>(
    b: &Builder<'c, 'b>,
    size: &[i64],
    stride: &[i64],
    offset: i64,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(x.ty)?;
    let n: i64 = dims.iter().product();
    let flat = b.reshape(x.v, &[n], x.ty.dtype)?;
    let mut pos = b.splat(Scalar::Int(offset), size, DType::I64)?;
    for (d, &st) in stride.iter().enumerate() {
        let iota = b.op("stablehlo.iota", &[], size, DType::I64, &[("iota_dimension", format!("{d} : i64"))])?;
        let term =
            b.op("stablehlo.multiply", &[iota, b.splat(Scalar::Int(st), size, DType::I64)?], size, DType::I64, &[])?;
        pos = b.op("stablehlo.add", &[pos, term], size, DType::I64, &[])?;
    }
    let mut with_unit = size.to_vec();
    with_unit.push(1);
    let pos = b.reshape(pos, &with_unit, DType::I64)?;
    super::shape::gather_op(b, flat, pos, &[], &[0], &[0], size.len(), &[1], out)
}

/// `copy(self, src)`: `src` converted to `self`'s dtype and broadcast to its shape.
pub(super) fn copy_from<'c, 'b>(
    b: &Builder<'c, 'b>,
    src: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let from = static_dims(src.ty)?;
    let v = b.convert(src.v, &from, src.ty.dtype, out.dtype)?;
    b.broadcast_to(v, &from, &static_dims(out)?, out.dtype)
}
