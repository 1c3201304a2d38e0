//! Non-maximum suppression's decision (`nms_keep`), torchvision's kernel in StableHLO: the
//! boxes sorted by score (highest first), the IoU of every pair, and a `stablehlo.while` over
//! the sorted boxes in which a box still kept suppresses every later box it overlaps by more
//! than the threshold.

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{bug, i64_array, static_dims, Builder, Ew, LowerResult};
use super::Arg;

/// `(keep, order)` of `boxes [n, 4]` and `scores [n]`.
pub(super) fn nms_keep<'c, 'b>(
    b: &Builder<'c, 'b>,
    iou_threshold: f64,
    boxes: Arg<'c, 'b, '_>,
    scores: Arg<'c, 'b, '_>,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let n = static_dims(scores.ty)?[0];
    let dt = boxes.ty.dtype;
    let (_, order, ..) = super::sort::sorted(b, scores, 0, true)?;
    let order_ty = TensorType::new(DType::I64, &[n]);
    let sorted_ty = TensorType::new(dt, &[n, 4]);
    let sorted = super::shape::index_select(b, 0, boxes, Arg { v: order, ty: &order_ty }, &sorted_ty)?;
    let over = overlaps(b, sorted, n, dt, iou_threshold)?;
    let keep = suppress(b, over, n)?;
    Ok(vec![keep, order])
}

/// `over[i, j]`: box `j` comes after box `i` and overlaps it by an IoU above the threshold.
fn overlaps<'c, 'b>(
    b: &Builder<'c, 'b>,
    boxes: Value<'c, 'b>,
    n: i64,
    dt: DType,
    threshold: f64,
) -> LowerResult<Value<'c, 'b>> {
    let column = |c: i64| -> LowerResult<Value<'c, 'b>> {
        let attrs = [
            ("start_indices", i64_array(&[0, c])),
            ("limit_indices", i64_array(&[n, c + 1])),
            ("strides", i64_array(&[1, 1])),
        ];
        b.op("stablehlo.slice", &[boxes], &[n, 1], dt, &attrs)
    };
    let pair = Ew { b, dims: vec![n, n], dt };
    // Along rows (box i) and along columns (box j), broadcast to [n, n].
    let spread = |v: Value<'c, 'b>, as_row: bool| -> LowerResult<Value<'c, 'b>> {
        let flat = b.reshape(v, &[n], dt)?;
        let dims = if as_row { "0" } else { "1" };
        b.op(
            "stablehlo.broadcast_in_dim",
            &[flat],
            &[n, n],
            dt,
            &[("broadcast_dimensions", format!("array<i64: {dims}>"))],
        )
    };
    let mut sides = Vec::with_capacity(4);
    for c in 0..4 {
        let v = column(c)?;
        sides.push((spread(v, true)?, spread(v, false)?));
    }
    let [(x1i, x1j), (y1i, y1j), (x2i, x2j), (y2i, y2j)] = sides[..] else { return Err(bug("four sides")) };
    let zero = pair.c(0.0)?;
    let extent = |lo_i, lo_j, hi_i, hi_j| -> LowerResult<Value<'c, 'b>> {
        let lo = b.extremum(lo_i, lo_j, &[n, n], dt, true)?;
        let hi = b.extremum(hi_i, hi_j, &[n, n], dt, false)?;
        b.extremum(pair.sub(hi, lo)?, zero, &[n, n], dt, true)
    };
    let inter = pair.mul(extent(x1i, x1j, x2i, x2j)?, extent(y1i, y1j, y2i, y2j)?)?;
    let area_i = pair.mul(pair.sub(x2i, x1i)?, pair.sub(y2i, y1i)?)?;
    let area_j = pair.mul(pair.sub(x2j, x1j)?, pair.sub(y2j, y1j)?)?;
    let union = pair.sub(pair.add(area_i, area_j)?, inter)?;
    let iou = pair.bin("divide", inter, union)?;
    let above = b.compare(iou, pair.c(threshold)?, &[n, n], dt, "GT")?;
    let iota = |d: i64| b.op("stablehlo.iota", &[], &[n, n], DType::I64, &[("iota_dimension", format!("{d} : i64"))]);
    let later = b.compare(iota(1)?, iota(0)?, &[n, n], DType::I64, "GT")?;
    b.op("stablehlo.and", &[above, later], &[n, n], DType::Bool, &[])
}

/// `keep` after visiting the boxes in order: box `i`, if still kept, drops every box it
/// overlaps (`over[i, :]`).
fn suppress<'c, 'b>(b: &Builder<'c, 'b>, over: Value<'c, 'b>, n: i64) -> LowerResult<Value<'c, 'b>> {
    let steps = i32::try_from(n).map_err(|_| format!("nms of {n} boxes (at most 2^31 - 1)"))?;
    let types: [(&[i64], DType); 3] = [(&[], DType::I32), (&[n], DType::Bool), (&[n, n], DType::Bool)];
    let cond = b.block_region(&types, |r, p| {
        let end = r.splat(Scalar::Int(steps.into()), &[], DType::I32)?;
        Ok(vec![r.compare(p[0], end, &[], DType::I32, "LT")?])
    })?;
    let body = b.block_region(&types, |r, p| {
        let (i, keep, over) = (p[0], p[1], p[2]);
        let zero = r.splat(Scalar::Int(0), &[], DType::I32)?;
        let row = r.op(
            "stablehlo.dynamic_slice",
            &[over, i, zero],
            &[1, n],
            DType::Bool,
            &[("slice_sizes", format!("array<i64: 1, {n}>"))],
        )?;
        let row = r.reshape(row, &[n], DType::Bool)?;
        let kept =
            r.op("stablehlo.dynamic_slice", &[keep, i], &[1], DType::Bool, &[("slice_sizes", "array<i64: 1>".into())])?;
        let kept = r.op(
            "stablehlo.broadcast_in_dim",
            &[kept],
            &[n],
            DType::Bool,
            &[("broadcast_dimensions", "array<i64: 0>".into())],
        )?;
        let dropped = r.op("stablehlo.and", &[row, kept], &[n], DType::Bool, &[])?;
        let stays = r.op("stablehlo.not", &[dropped], &[n], DType::Bool, &[])?;
        let keep = r.op("stablehlo.and", &[keep, stays], &[n], DType::Bool, &[])?;
        let one = r.splat(Scalar::Int(1), &[], DType::I32)?;
        let next = r.op("stablehlo.add", &[i, one], &[], DType::I32, &[])?;
        Ok(vec![next, keep, over])
    })?;
    let start = b.splat(Scalar::Int(0), &[], DType::I32)?;
    let all = b.splat(Scalar::Bool(true), &[n], DType::Bool)?;
    let results = b.op_n("stablehlo.while", &[start, all, over], &types, &[], vec![cond, body])?;
    Ok(results[1])
}
