//! torchvision's detection ops. `nms` is the IR's `nms_keep` and a `nonzero` of its decision.
//! `roi_align` samples each region of interest on a grid of
//! `sampling_ratio²` points per output bin, each point read by bilinear interpolation from
//! its image's feature map, and averages them — as torchvision's kernel does: the points
//! (for every region at once) are computed with element-wise ops, their four neighbours
//! gathered with one `index` each, and the bins summed. A point more than a pixel outside the
//! map reads zero; one within a pixel of the edge reads the edge.

use torchtpu_passes::ir::ops::{Binary, Clamp, Index, NmsKeep, Nonzero, Permute, Reduce, Select, View, Where};
use torchtpu_passes::ir::{BinaryOp, DType, Dim, Op, Operand, ReduceOp, Scalar, TensorType, UnaryOp, ValueRef};

use super::super::super::wire::{Recipe, Wire};
use super::{scalar_op, static_dims, tensor_op, Args, R};

/// `roi_align(input [N, C, H, W], rois [K, 5], spatial_scale, pooled_height, pooled_width,
/// sampling_ratio, aligned)` → `[K, C, pooled_height, pooled_width]`; each row of `rois` is
/// `(image, x1, y1, x2, y2)`. An adaptive grid (`sampling_ratio <= 0`: as many points as the
/// region has pixels per bin) depends on the data and is refused.
pub(super) fn roi_align(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("input")?;
    a.tensor("rois")?;
    let scale = a.float("spatial_scale", None)?;
    let ph = a.int("pooled_height", None)?;
    let pw = a.int("pooled_width", None)?;
    let grid = a.int("sampling_ratio", None)?;
    let aligned = a.bool("aligned", false)?;
    if grid <= 0 {
        return Err(format!(
            "roi_align with sampling_ratio {grid} (an adaptive grid, sized by each region) is not supported; \
             give a fixed sampling_ratio > 0 (torchvision's detection heads use 2)"
        ));
    }
    if ph <= 0 || pw <= 0 || ph * grid > 4096 || pw * grid > 4096 {
        return Err(format!("roi_align to {ph}×{pw} bins of {grid}² points is out of range"));
    }
    Ok(Box::new(move |w| {
        let (input, rois) = (w.inputs[0], w.inputs[1]);
        let dims = static_dims(&w.ty(input), "roi_align's input")?;
        let [_, c, h, wd] = dims[..] else { return Err(format!("roi_align takes a 4-d input, found {}", w.ty(input))) };
        let k = match static_dims(&w.ty(rois), "roi_align's rois")?[..] {
            [k, 5] => k,
            _ => return Err(format!("roi_align takes rois of shape [K, 5], found {}", w.ty(rois))),
        };
        let dt = w.ty(input).dtype;
        let rois = w.convert(rois, dt)?;
        let column = |w: &mut Wire<'_>, i| w.op(Op::Select(Select { dim: 1, index: i }), &[rois]);
        let image = column(w, 0)?;
        let image = w.convert(image, DType::I64)?;
        let offset = if aligned { 0.5 } else { 0.0 };
        let corner = |w: &mut Wire<'_>, i| -> R<ValueRef> {
            let v = column(w, i)?;
            let v = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(scale)), &[v])?;
            w.op(scalar_op(BinaryOp::Sub, Scalar::Float(offset)), &[v])
        };
        let (x1, y1, x2, y2) = (corner(w, 1)?, corner(w, 2)?, corner(w, 3)?, corner(w, 4)?);
        let (ys, ly, ry) = axis(w, (y1, y2), (k, h), (ph, grid), aligned)?;
        let (xs, lx, rx) = axis(w, (x1, x2), (k, wd), (pw, grid), aligned)?;
        let (ny, nx) = (ph * grid, pw * grid);
        // Every point's value: the four neighbours' values weighted, [K, ny, nx, C].
        let view = |w: &mut Wire<'_>, v, shape: &[i64]| {
            w.op(Op::View(View { size: shape.iter().map(|&d| Dim::Static(d)).collect() }), &[v])
        };
        let image = view(w, image, &[k, 1, 1])?;
        let mut sum = None;
        for (y, wy) in [(ys.0, ly.0), (ys.1, ly.1)] {
            for (x, wx) in [(xs.0, lx.0), (xs.1, lx.1)] {
                let (y, x) = (view(w, y, &[k, ny, 1])?, view(w, x, &[k, 1, nx])?);
                let at = Op::Index(Index { present: vec![true, false, true, true] });
                let v = w.op(at, &[input, image, y, x])?;
                let (wy, wx) = (view(w, wy, &[k, ny, 1, 1])?, view(w, wx, &[k, 1, nx, 1])?);
                let weight = w.op(tensor_op(BinaryOp::Mul), &[wy, wx])?;
                let v = w.op(tensor_op(BinaryOp::Mul), &[v, weight])?;
                sum = Some(match sum {
                    None => v,
                    Some(s) => w.op(tensor_op(BinaryOp::Add), &[s, v])?,
                });
            }
        }
        let sum = sum.ok_or("internal: no neighbour")?;
        // Points more than a pixel outside the map read zero.
        let (ry, rx) = (view(w, ry, &[k, ny, 1, 1])?, view(w, rx, &[k, 1, nx, 1])?);
        let inside = w.op(tensor_op(BinaryOp::LogicalAnd), &[ry, rx])?;
        let keep = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Float(0.0)) });
        let points = w.op(keep, &[inside, sum])?;
        // The mean over each bin's grid, [K, C, ph, pw].
        let bins = view(w, points, &[k, ph, grid, pw, grid, c])?;
        let mean = Op::Reduce(Reduce { op: ReduceOp::Mean, dims: vec![2, 4], keepdim: false, dtype: None });
        let bins = w.op(mean, &[bins])?;
        Ok(vec![w.op(Op::Permute(Permute { dims: vec![0, 3, 1, 2] }), &[bins])?])
    }))
}

/// `nms(boxes [N, 4], scores [N], iou_threshold)`: the indices of the boxes kept, highest
/// score first — the IR's `nms_keep` decides, and a `nonzero` of its decision (whose count the
/// export names `u0`, at most N) picks them from the score order.
pub(super) fn nms(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("dets")?;
    a.tensor("scores")?;
    let iou_threshold = a.float("iou_threshold", None)?;
    Ok(Box::new(move |w| {
        let (boxes, scores) = (w.inputs[0], w.inputs[1]);
        let n = w.ty(scores).dims.clone();
        let types = vec![TensorType { dtype: DType::Bool, dims: n.clone() }, TensorType { dtype: DType::I64, dims: n }];
        let decided = w.typed(Op::NmsKeep(NmsKeep { iou_threshold }), &[boxes, scores], types)?;
        let (keep, order) = (decided[0], decided[1]);
        let rows = w.outputs.first().and_then(|t| t.dims.first()).cloned().ok_or("internal: a 1-d result")?;
        let kept = w.op(Op::Nonzero(Nonzero { size: rows }), &[keep])?;
        let kept = w.op(Op::Select(Select { dim: 1, index: 0 }), &[kept])?;
        Ok(vec![w.op(Op::Index(Index { present: vec![true] }), &[order, kept])?])
    }))
}

/// The two neighbours, their weights and whether each point is within a pixel of the map.
type Neighbours = ((ValueRef, ValueRef), (ValueRef, ValueRef), ValueRef);

/// Along one axis of every region (`(start, end)`, `[K]` each, in the map's pixels): the
/// coordinates of its `bins · grid` points, `[K, bins · grid]`, as the two neighbouring pixels
/// (`i64`), their weights, and whether the point is within a pixel of the map of size `size`.
fn axis(
    w: &mut Wire<'_>,
    (start, end): (ValueRef, ValueRef),
    (k, size): (i64, i64),
    (bins, grid): (i64, i64),
    aligned: bool,
) -> R<Neighbours> {
    let dt = w.ty(start).dtype;
    let n = bins * grid;
    let mut extent = w.op(tensor_op(BinaryOp::Sub), &[end, start])?;
    if !aligned {
        extent = clamp(w, extent, Some(Scalar::Float(1.0)), None)?;
    }
    let bin = w.op(scalar_op(BinaryOp::Div, Scalar::Float(bins as f64)), &[extent])?;
    // Point `b · grid + i` sits at `start + (b + (i + 0.5) / grid) · bin`.
    let fractions: Vec<Scalar> =
        (0..n).map(|p| Scalar::Float((p / grid) as f64 + ((p % grid) as f64 + 0.5) / grid as f64)).collect();
    let fractions = w.literal(fractions, TensorType::new(dt, &[1, n]))?;
    let column = |w: &mut Wire<'_>, v| w.op(Op::View(View { size: vec![Dim::Static(k), Dim::Static(1)] }), &[v]);
    let (start, bin) = (column(w, start)?, column(w, bin)?);
    let steps = w.op(tensor_op(BinaryOp::Mul), &[fractions, bin])?;
    let at = w.op(tensor_op(BinaryOp::Add), &[start, steps])?;
    let above = w.op(scalar_op(BinaryOp::Ge, Scalar::Float(-1.0)), &[at])?;
    let below = w.op(scalar_op(BinaryOp::Le, Scalar::Float(size as f64)), &[at])?;
    let inside = w.op(tensor_op(BinaryOp::LogicalAnd), &[above, below])?;
    let at = clamp(w, at, Some(Scalar::Float(0.0)), Some(Scalar::Float((size - 1) as f64)))?;
    let low = w.op(Op::Unary(UnaryOp::Floor), &[at])?;
    let high_weight = w.op(tensor_op(BinaryOp::Sub), &[at, low])?;
    let one_minus =
        Binary { op: BinaryOp::Sub, lhs: Operand::Scalar(Scalar::Float(1.0)), rhs: Operand::Tensor, alpha: None };
    let low_weight = w.op(Op::Binary(one_minus), &[high_weight])?;
    let low = w.convert(low, DType::I64)?;
    let high = w.op(scalar_op(BinaryOp::Add, Scalar::Int(1)), &[low])?;
    let high = clamp(w, high, None, Some(Scalar::Int(size - 1)))?;
    Ok(((low, high), (low_weight, high_weight), inside))
}

/// `v` clamped to `[min, max]`, of `v`'s type.
fn clamp(w: &mut Wire<'_>, v: ValueRef, min: Option<Scalar>, max: Option<Scalar>) -> R<ValueRef> {
    let ty = w.ty(v);
    Ok(w.typed(Op::Clamp(Clamp { min, max }), &[v], vec![ty])?[0])
}
