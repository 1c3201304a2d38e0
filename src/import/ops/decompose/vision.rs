//! torchvision's detection ops, and its deformable convolution (`deform_conv2d`, at the end). `nms` is the IR's `nms_keep` and a `nonzero` of its decision.
//! `roi_align` (and `ps_roi_align`, which reads one channel group per bin) samples each region of interest on a grid of
//! `sampling_ratio²` points per output bin, each point read by bilinear interpolation from
//! its image's feature map, and averages them — as torchvision's kernel does: the points
//! (for every region at once) are computed with element-wise ops, their four neighbours
//! gathered with one `index` each, and the bins summed. A point more than a pixel outside the
//! map reads zero; one within a pixel of the edge reads the edge.

use torchtpu_passes::ir::ops::{
    Binary, Clamp, Convolution, Expand, Full, Index, NmsKeep, Nonzero, Permute, Reduce, Select, View, Where,
};
use torchtpu_passes::ir::{BinaryOp, DType, Dim, Op, Operand, ReduceOp, Scalar, TensorType, UnaryOp, ValueRef};

use super::super::super::wire::{Recipe, Wire};
use super::{scalar_op, static_dims, tensor_op, Args, R};
use torchtpu_passes::bug;

/// `roi_align(input [N, C, H, W], rois [K, 5], spatial_scale, pooled_height, pooled_width,
/// sampling_ratio, aligned)` → `[K, C, pooled_height, pooled_width]`; each row of `rois` is
/// `(image, x1, y1, x2, y2)`. An adaptive grid (`sampling_ratio <= 0`: as many points as the
/// region has pixels per bin) depends on the data and is refused.
pub(super) fn roi_align(a: &mut Args<'_>) -> R<Recipe> {
    let (scale, bins) = region_args(a, "roi_align")?;
    let grid = a.int("sampling_ratio", None)?;
    let aligned = a.bool("aligned", false)?;
    // Unaligned regions start at the pixel's corner and are at least a pixel wide.
    let sampling = if aligned { Sampling::centred(scale, bins, grid) } else { Sampling::cornered(scale, bins, grid) };
    let sampling = sampling.checked("roi_align")?;
    Ok(Box::new(move |w| {
        let bins = sampling.sample(w, w.inputs[0], w.inputs[1], None)?;
        Ok(vec![w.op(Op::Permute(Permute { dims: vec![0, 3, 1, 2] }), &[bins])?])
    }))
}

/// `ps_roi_align(input [N, C, H, W], rois [K, 5], spatial_scale, pooled_height, pooled_width,
/// sampling_ratio)` → `(output [K, C / (ph·pw), ph, pw], channel_mapping)`: position-sensitive
/// RoI align (R-FCN). Bin `(i, j)` of output channel `c` averages, as `roi_align` with
/// `aligned=True` does, the points of input channel `(c·ph + i)·pw + j`, which
/// `channel_mapping` records.
pub(super) fn ps_roi_align(a: &mut Args<'_>) -> R<Recipe> {
    let (scale, bins) = region_args(a, "ps_roi_align")?;
    let grid = a.int("sampling_ratio", None)?;
    let sampling = Sampling::centred(scale, bins, grid).checked("ps_roi_align")?;
    Ok(Box::new(move |w| {
        let (input, rois) = (w.inputs[0], w.inputs[1]);
        let groups = ChannelGroups::new(w, input, rois, sampling.bins, "ps_roi_align")?;
        let bins = sampling.sample(w, input, rois, Some(groups.map))?;
        let output = w.op(Op::Permute(Permute { dims: vec![0, 3, 1, 2] }), &[bins])?;
        Ok(vec![output, groups.mapping(w)?])
    }))
}

/// The arguments every region op of torchvision starts with — `input`, `rois`, `spatial_scale`,
/// `pooled_height`, `pooled_width` — as `(scale, (ph, pw))`, the bins checked.
pub(super) fn region_args(a: &mut Args<'_>, op: &str) -> R<(f64, (i64, i64))> {
    a.tensor("input")?;
    a.tensor("rois")?;
    let scale = a.float("spatial_scale", None)?;
    let (ph, pw) = (a.int("pooled_height", None)?, a.int("pooled_width", None)?);
    if !(1..=MAX_BINS).contains(&ph) || !(1..=MAX_BINS).contains(&pw) {
        return Err(format!("{op} to {ph}×{pw} bins is out of range").into());
    }
    Ok((scale, (ph, pw)))
}

/// The most bins (or points, in the RoI-align family) a region op may have along a side.
const MAX_BINS: i64 = 4096;

/// The channel groups of a position-sensitive op: `map [c_out, ph, pw]`, the input channel
/// `(c·ph + i)·pw + j` each (output channel, bin) reads.
pub(super) struct ChannelGroups {
    pub(super) map: ValueRef,
    pub(super) c_out: i64,
    k: i64,
    bins: (i64, i64),
}

impl ChannelGroups {
    pub(super) fn new(
        w: &mut Wire<'_>,
        input: ValueRef,
        rois: ValueRef,
        (ph, pw): (i64, i64),
        op: &str,
    ) -> R<ChannelGroups> {
        let c = static_dims(&w.ty(input), "the input")?.get(1).copied().unwrap_or(0);
        if c % (ph * pw) != 0 {
            return Err(format!("{op}'s input has {c} channels, not a multiple of its {ph}×{pw} bins").into());
        }
        let c_out = c / (ph * pw);
        let k = static_dims(&w.ty(rois), "the rois")?.first().copied().unwrap_or(0);
        let map: Vec<Scalar> = (0..c_out * ph * pw).map(Scalar::Int).collect();
        let map = w.literal(map, TensorType::new(DType::I64, &[c_out, ph, pw]))?;
        Ok(ChannelGroups { map, c_out, k, bins: (ph, pw) })
    }

    /// The op's second result, `channel_mapping [K, c_out, ph, pw]`, of the archive's dtype.
    pub(super) fn mapping(&self, w: &mut Wire<'_>) -> R<ValueRef> {
        let shape = [self.k, self.c_out, self.bins.0, self.bins.1].iter().map(|&d| Dim::Static(d)).collect();
        let mapping = w.op(Op::Expand(Expand { size: shape }), &[self.map])?;
        let dtype = w.outputs.get(1).map_or(DType::I32, |t| t.dtype);
        w.convert(mapping, dtype)
    }
}

/// How the RoI-align family places its points: region corners scaled by `scale` and shifted
/// by `offset`, extents at least `min_extent`, `bins` of `grid²` points each.
#[derive(Clone, Copy)]
struct Sampling {
    scale: f64,
    offset: f64,
    min_extent: Option<f64>,
    bins: (i64, i64),
    grid: i64,
}

impl Sampling {
    /// Pixel centres at half-integers: corners shifted by half a pixel, any extent.
    fn centred(scale: f64, bins: (i64, i64), grid: i64) -> Sampling {
        Sampling { scale, offset: 0.5, min_extent: None, bins, grid }
    }

    /// Corners as given, extents at least a pixel (torchvision's `aligned=False`).
    fn cornered(scale: f64, bins: (i64, i64), grid: i64) -> Sampling {
        Sampling { scale, offset: 0.0, min_extent: Some(1.0), bins, grid }
    }

    fn checked(self, op: &str) -> R<Sampling> {
        let (ph, pw, grid) = (self.bins.0, self.bins.1, self.grid);
        if grid <= 0 {
            return Err(format!(
                "{op} with sampling_ratio {grid} (an adaptive grid, sized by each region) is not supported; \
                 give a fixed sampling_ratio > 0 (torchvision's detection heads use 2)"
            )
            .into());
        }
        if ph.max(pw).checked_mul(grid).is_none_or(|points| points > MAX_BINS) {
            return Err(format!("{op} to {ph}×{pw} bins of {grid}² points is out of range").into());
        }
        Ok(self)
    }

    /// The mean of every bin's points, `[K, ph, pw, C]`: each point read by bilinear
    /// interpolation from its region's image, from every channel, or with `channels`
    /// (`[c_out, ph, pw]`) from the one each (output channel, bin) names (`[K, ph, pw, c_out]`).
    fn sample(&self, w: &mut Wire<'_>, input: ValueRef, rois: ValueRef, channels: Option<ValueRef>) -> R<ValueRef> {
        let dims = static_dims(&w.ty(input), "the input")?;
        let [_, c, h, wd] = dims[..] else {
            return Err(format!("a 4-d input was expected, found {}", w.ty(input)).into());
        };
        let k = match static_dims(&w.ty(rois), "the rois")?[..] {
            [k, 5] => k,
            _ => return Err(format!("rois of shape [K, 5] were expected, found {}", w.ty(rois)).into()),
        };
        let ((ph, pw), grid) = (self.bins, self.grid);
        let dt = w.ty(input).dtype;
        if h == 0 || wd == 0 {
            // No pixel to read: every point is outside the map.
            let c = match channels {
                Some(map) => static_dims(&w.ty(map), "the channel map")?[0],
                None => c,
            };
            return full(w, &[k, ph, pw, c], Scalar::Float(0.0), dt);
        }
        let rois = w.convert(rois, dt)?;
        let column = |w: &mut Wire<'_>, i| w.op(Op::Select(Select { dim: 1, index: i }), &[rois]);
        let image = column(w, 0)?;
        let image = w.convert(image, DType::I64)?;
        let corner = |w: &mut Wire<'_>, i| -> R<ValueRef> {
            let v = column(w, i)?;
            let v = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(self.scale)), &[v])?;
            w.op(scalar_op(BinaryOp::Sub, Scalar::Float(self.offset)), &[v])
        };
        let (x1, y1, x2, y2) = (corner(w, 1)?, corner(w, 2)?, corner(w, 3)?, corner(w, 4)?);
        let (ys, ly, ry) = axis(w, (y1, y2), (k, h), (ph, grid), self.min_extent)?;
        let (xs, lx, rx) = axis(w, (x1, x2), (k, wd), (pw, grid), self.min_extent)?;
        let (ny, nx) = (ph * grid, pw * grid);
        // The channel of every point: its bin's, `[1, ny, nx, c_out]`.
        let (channel, c) = match channels {
            None => (None, c),
            Some(map) => {
                let c_out = static_dims(&w.ty(map), "the channel map")?[0];
                let at_points = [1, ph, 1, pw, 1, c_out];
                let map = w.op(Op::Permute(Permute { dims: vec![1, 2, 0] }), &[map])?;
                let map = view(w, map, &at_points)?;
                let size = [1, ph, grid, pw, grid, c_out].iter().map(|&d| Dim::Static(d)).collect();
                let map = w.op(Op::Expand(Expand { size }), &[map])?;
                (Some(view(w, map, &[1, ny, nx, c_out])?), c_out)
            }
        };
        // Every point's value: the four neighbours' values weighted, [K, ny, nx, C].
        let image_shape: &[i64] = if channel.is_some() { &[k, 1, 1, 1] } else { &[k, 1, 1] };
        let image = view(w, image, image_shape)?;
        let mut sum = None;
        for (y, wy) in [(ys.0, ly.0), (ys.1, ly.1)] {
            for (x, wx) in [(xs.0, lx.0), (xs.1, lx.1)] {
                let v = match channel {
                    None => {
                        let (y, x) = (view(w, y, &[k, ny, 1])?, view(w, x, &[k, 1, nx])?);
                        let at = Op::Index(Index { present: vec![true, false, true, true] });
                        w.op(at, &[input, image, y, x])?
                    }
                    Some(channel) => {
                        let (y, x) = (view(w, y, &[k, ny, 1, 1])?, view(w, x, &[k, 1, nx, 1])?);
                        let at = Op::Index(Index { present: vec![true; 4] });
                        w.op(at, &[input, image, channel, y, x])?
                    }
                };
                let (wy, wx) = (view(w, wy, &[k, ny, 1, 1])?, view(w, wx, &[k, 1, nx, 1])?);
                let weight = w.op(tensor_op(BinaryOp::Mul), &[wy, wx])?;
                let v = w.op(tensor_op(BinaryOp::Mul), &[v, weight])?;
                sum = Some(match sum {
                    None => v,
                    Some(s) => w.op(tensor_op(BinaryOp::Add), &[s, v])?,
                });
            }
        }
        let sum = sum.ok_or_else(|| bug("no neighbour"))?;
        // Points more than a pixel outside the map read zero.
        let (ry, rx) = (view(w, ry, &[k, ny, 1, 1])?, view(w, rx, &[k, 1, nx, 1])?);
        let inside = w.op(tensor_op(BinaryOp::LogicalAnd), &[ry, rx])?;
        let keep = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Float(0.0)) });
        let points = w.op(keep, &[inside, sum])?;
        // The mean over each bin's grid.
        let bins = view(w, points, &[k, ph, grid, pw, grid, c])?;
        let mean = Op::Reduce(Reduce { op: ReduceOp::Mean, dims: vec![2, 4], keepdim: false, dtype: None });
        w.op(mean, &[bins])
    }
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
        let rows = w.outputs.first().and_then(|t| t.dims.first()).cloned().ok_or_else(|| bug("a 1-d result"))?;
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
    min_extent: Option<f64>,
) -> R<Neighbours> {
    let dt = w.ty(start).dtype;
    let n = bins * grid;
    let mut extent = w.op(tensor_op(BinaryOp::Sub), &[end, start])?;
    if let Some(min) = min_extent {
        extent = clamp(w, extent, Some(Scalar::Float(min)), None)?;
    }
    let bin = w.op(scalar_op(BinaryOp::Div, Scalar::Float(bins as f64)), &[extent])?;
    // Point `b · grid + i` sits at `start + (b + (i + 0.5) / grid) · bin`.
    let fractions: Vec<Scalar> =
        (0..n).map(|p| Scalar::Float((p / grid) as f64 + ((p % grid) as f64 + 0.5) / grid as f64)).collect();
    let fractions = w.literal(fractions, TensorType::new(dt, &[1, n]))?;
    let column = |w: &mut Wire<'_>, v| view(w, v, &[k, 1]);
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

/// `deform_conv2d(input [N, C, H, W], weight [O, C/groups, kh, kw], offset [N, 2·G·kh·kw, Ho, Wo],
/// mask [N, G·kh·kw, Ho, Wo], bias [O], stride, padding, dilation, groups, offset_groups G,
/// use_mask)`: a convolution whose every tap reads its input at a learnt offset (DCN). Each
/// tap's point (`oh·stride − pad + i·dilation + dy`, likewise in x) is read by bilinear
/// interpolation, a neighbour outside the map reading zero and a point a pixel or more outside
/// reading zero, scaled by the mask, into columns `[N, C·kh·kw, Ho, Wo]` (the size of an im2col)
/// that a 1×1 grouped convolution with the weight contracts.
pub(super) fn deform_conv2d(a: &mut Args<'_>) -> R<Recipe> {
    for name in ["input", "weight", "offset", "mask", "bias"] {
        a.tensor(name)?;
    }
    let stride = (a.int("stride_h", None)?, a.int("stride_w", None)?);
    let pad = (a.int("pad_h", None)?, a.int("pad_w", None)?);
    let dilation = (a.int("dilation_h", None)?, a.int("dilation_w", None)?);
    let groups = a.int("groups", None)?;
    let offset_groups = a.int("offset_groups", None)?;
    let use_mask = a.bool("use_mask", false)?;
    Ok(Box::new(move |w| {
        let [input, weight, offset, mask, bias] = w.inputs[..] else { return Err(bug("five operands")) };
        let [n, c, h, wd] = static_dims(&w.ty(input), "deform_conv2d's input")?[..] else {
            return Err(format!("deform_conv2d takes a 4-d input, found {}", w.ty(input)).into());
        };
        let [o, _, kh, kw] = static_dims(&w.ty(weight), "deform_conv2d's weight")?[..] else {
            return Err(format!("deform_conv2d takes a 4-d weight, found {}", w.ty(weight)).into());
        };
        let [_, _, ho, wo] = static_dims(&w.ty(offset), "deform_conv2d's offset")?[..] else {
            return Err(format!("deform_conv2d takes a 4-d offset, found {}", w.ty(offset)).into());
        };
        let g = offset_groups;
        if g <= 0 || c % g != 0 || groups <= 0 || c % groups != 0 || o % groups != 0 {
            return Err(format!(
                "deform_conv2d's {c} channels do not split into {groups} groups and {g} offset groups"
            )
            .into());
        }
        let taps = [n, g, kh, kw, ho, wo];
        let offset = view(w, offset, &[n, g, kh, kw, 2, ho, wo])?;
        let dy = w.op(Op::Select(Select { dim: 4, index: 0 }), &[offset])?;
        let dx = w.op(Op::Select(Select { dim: 4, index: 1 }), &[offset])?;
        // Where each tap reads: its place in the padded grid plus its offset, [N, G, kh, kw, Ho, Wo].
        let dt = w.ty(input).dtype;
        let grid = |w: &mut Wire<'_>, (k, out): (i64, i64), (s, p, d): (i64, i64, i64), shape: &[i64]| {
            let at = (0..k).flat_map(|i| (0..out).map(move |x| Scalar::Float((x * s - p + i * d) as f64))).collect();
            let at = w.literal(at, TensorType::new(dt, &[k, out]))?;
            view(w, at, shape)
        };
        let ybase = grid(w, (kh, ho), (stride.0, pad.0, dilation.0), &[1, 1, kh, 1, ho, 1])?;
        let xbase = grid(w, (kw, wo), (stride.1, pad.1, dilation.1), &[1, 1, 1, kw, 1, wo])?;
        let y = w.op(tensor_op(BinaryOp::Add), &[ybase, dy])?;
        let x = w.op(tensor_op(BinaryOp::Add), &[xbase, dx])?;
        let (ys, wy) = zero_padded_axis(w, y, h)?;
        let (xs, wx) = zero_padded_axis(w, x, wd)?;
        let scale = match use_mask {
            true => Some(view(w, mask, &taps)?),
            false => None,
        };
        // The image and offset group of every tap, for the gathers.
        let arange = |w: &mut Wire<'_>, k: i64, shape: &[i64]| {
            let v = w.literal((0..k).map(Scalar::Int).collect(), TensorType::new(DType::I64, &[k]))?;
            view(w, v, shape)
        };
        let image = arange(w, n, &[n, 1, 1, 1, 1, 1])?;
        let group = arange(w, g, &[1, g, 1, 1, 1, 1])?;
        let grouped = view(w, input, &[n, g, c / g, h, wd])?;
        let mut sum = None;
        for (yi, yw) in [(ys.0, wy.0), (ys.1, wy.1)] {
            for (xi, xw) in [(xs.0, wx.0), (xs.1, wx.1)] {
                let at = Op::Index(Index { present: vec![true, true, false, true, true] });
                let v = w.op(at, &[grouped, image, group, yi, xi])?;
                let mut weight = w.op(tensor_op(BinaryOp::Mul), &[yw, xw])?;
                if let Some(m) = scale {
                    weight = w.op(tensor_op(BinaryOp::Mul), &[weight, m])?;
                }
                let weight = view(w, weight, &[n, g, kh, kw, ho, wo, 1])?;
                let v = w.op(tensor_op(BinaryOp::Mul), &[v, weight])?;
                sum = Some(match sum {
                    None => v,
                    Some(s) => w.op(tensor_op(BinaryOp::Add), &[s, v])?,
                });
            }
        }
        // [N, G, kh, kw, Ho, Wo, C/G] → columns [N, C·kh·kw, Ho, Wo], channel-major.
        let columns =
            w.op(Op::Permute(Permute { dims: vec![0, 1, 6, 2, 3, 4, 5] }), &[sum.ok_or_else(|| bug("no sum"))?])?;
        let columns = view(w, columns, &[n, c * kh * kw, ho, wo])?;
        let weight = view(w, weight, &[o, c / groups * kh * kw, 1, 1])?;
        let conv = Convolution {
            stride: vec![1, 1],
            padding: vec![0, 0],
            dilation: vec![1, 1],
            transposed: false,
            output_padding: vec![0, 0],
            groups,
            has_bias: true,
        };
        Ok(vec![w.op(Op::Convolution(conv), &[columns, weight, bias])?])
    }))
}

/// Along one axis of a zero-padded map of size `size`: the two neighbours of every point `at`
/// (clamped into the map for the gather) and their weights, zero for a neighbour outside the
/// map and for a point a pixel or more outside it (torchvision's deformable im2col).
fn zero_padded_axis(w: &mut Wire<'_>, at: ValueRef, size: i64) -> R<((ValueRef, ValueRef), (ValueRef, ValueRef))> {
    let dt = w.ty(at).dtype;
    let above = w.op(scalar_op(BinaryOp::Gt, Scalar::Float(-1.0)), &[at])?;
    let below = w.op(scalar_op(BinaryOp::Lt, Scalar::Float(size as f64)), &[at])?;
    let inside = w.op(tensor_op(BinaryOp::LogicalAnd), &[above, below])?;
    let low = w.op(Op::Unary(UnaryOp::Floor), &[at])?;
    let high_weight = w.op(tensor_op(BinaryOp::Sub), &[at, low])?;
    let one_minus =
        Binary { op: BinaryOp::Sub, lhs: Operand::Scalar(Scalar::Float(1.0)), rhs: Operand::Tensor, alpha: None };
    let low_weight = w.op(Op::Binary(one_minus), &[high_weight])?;
    let high = w.op(scalar_op(BinaryOp::Add, Scalar::Float(1.0)), &[low])?;
    let mut out = Vec::new();
    for (index, weight) in [(low, low_weight), (high, high_weight)] {
        let ge = w.op(scalar_op(BinaryOp::Ge, Scalar::Float(0.0)), &[index])?;
        let le = w.op(scalar_op(BinaryOp::Le, Scalar::Float((size - 1) as f64)), &[index])?;
        let valid = w.op(tensor_op(BinaryOp::LogicalAnd), &[ge, le])?;
        let valid = w.op(tensor_op(BinaryOp::LogicalAnd), &[valid, inside])?;
        let keep = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Float(0.0)) });
        let weight = w.op(keep, &[valid, weight])?;
        let index = clamp(w, index, Some(Scalar::Float(0.0)), Some(Scalar::Float((size - 1) as f64)))?;
        out.push((w.convert(index, DType::I64)?, w.convert(weight, dt)?));
    }
    Ok(((out[0].0, out[1].0), (out[0].1, out[1].1)))
}

/// A tensor of `shape` filled with `value`.
pub(super) fn full(w: &mut Wire<'_>, shape: &[i64], value: Scalar, dtype: DType) -> R<ValueRef> {
    let size = shape.iter().map(|&d| Dim::Static(d)).collect();
    Ok(w.typed(Op::Full(Full { size, value }), &[], vec![TensorType::new(dtype, shape)])?[0])
}

/// `v` viewed as `shape`.
pub(super) fn view(w: &mut Wire<'_>, v: ValueRef, shape: &[i64]) -> R<ValueRef> {
    w.op(Op::View(View { size: shape.iter().map(|&d| Dim::Static(d)).collect() }), &[v])
}
