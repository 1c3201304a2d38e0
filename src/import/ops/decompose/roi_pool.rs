//! torchvision's `roi_pool` (Fast R-CNN): the maximum over each bin of each region, a
//! rectangle of whole pixels, with the position of the first maximum (row-major). The maxima
//! of every rectangle come from a sparse table: for every `a, b`, the maximum of each
//! `2^a × 2^b` window, built by `log H + log W` shifted maxima; any rectangle is covered by
//! four such windows (overlapping where its sides are not powers of two), so each bin is four
//! gathers, whatever its size — `O(C·H·W·log H·log W)` to build, `O(K·C·bins)` to read, where
//! a mask per bin would cost `O(K·C·bins·H·W)`. Positions ride along: of equal maxima the
//! smaller flat index wins, which is the first in row-major order.

use torchtpu_passes::ir::ops::{Cat, Cumulative, Expand, Index, Pad, Permute, Select, Slice, Where};
use torchtpu_passes::ir::{BinaryOp, CumulativeOp, DType, Dim, Op, Operand, Scalar, TensorType, UnaryOp, ValueRef};

use super::super::super::wire::{Recipe, Wire};
use super::vision::{full, region_args, view, ChannelGroups};
use super::{scalar_op, static_dims, tensor_op, Args, R};
use torchtpu_passes::bug;

/// Maps of more pixels than this are refused (positions are `i32`, as torchvision's).
const MAX_PIXELS: i64 = i32::MAX as i64;

/// `roi_pool(input [N, C, H, W], rois [K, 5], spatial_scale, pooled_height, pooled_width)` →
/// `(output [K, C, ph, pw], argmax)`: region `(image, x1, y1, x2, y2)`'s corners scaled and
/// rounded (half away from zero) to pixels, at least one pixel each way, split into
/// `ph × pw` bins of `floor(i·size/ph) .. ceil((i+1)·size/ph)` pixels clipped to the map; an
/// empty bin gives 0 and position -1.
pub(super) fn roi_pool(a: &mut Args<'_>) -> R<Recipe> {
    let (scale, (ph, pw)) = region_args(a, "roi_pool")?;
    Ok(Box::new(move |w| {
        let (input, rois) = (w.inputs[0], w.inputs[1]);
        let [n, c, h, wd] = static_dims(&w.ty(input), "roi_pool's input")?[..] else {
            return Err(format!("roi_pool takes a 4-d input, found {}", w.ty(input)).into());
        };
        let k = match static_dims(&w.ty(rois), "roi_pool's rois")?[..] {
            [k, 5] => k,
            _ => return Err(format!("roi_pool takes rois of shape [K, 5], found {}", w.ty(rois)).into()),
        };
        let dtype = w.outputs.get(1).map_or(DType::I32, |t| t.dtype);
        if h == 0 || wd == 0 {
            // No pixel: every bin is empty.
            let dt = w.ty(input).dtype;
            return Ok(vec![
                full(w, &[k, c, ph, pw], Scalar::Float(0.0), dt)?,
                full(w, &[k, c, ph, pw], Scalar::Int(-1), dtype)?,
            ]);
        }
        if h.checked_mul(wd).is_none_or(|p| p > MAX_PIXELS) {
            return Err(format!("roi_pool over a {h}×{wd} map is out of range").into());
        }
        let table = Table::build(w, input, [n, c, h, wd])?;
        let (image, rows, cols) = region_bins(w, rois, w.ty(input).dtype, scale, [k, ph, pw, h, wd], false)?;
        let (value, position) = table.read(w, image, &rows, &cols, [k, ph, pw])?;
        let to_nchw = |w: &mut Wire<'_>, v| w.op(Op::Permute(Permute { dims: vec![0, 3, 1, 2] }), &[v]);
        let (value, position) = (to_nchw(w, value)?, to_nchw(w, position)?);
        Ok(vec![value, w.convert(position, dtype)?])
    }))
}

/// `ps_roi_pool(input [N, C, H, W], rois [K, 5], spatial_scale, pooled_height, pooled_width)`
/// → `(output [K, C / (ph·pw), ph, pw], channel_mapping)`: position-sensitive RoI pooling
/// (R-FCN): bin `(i, j)` of output channel `c` is the mean of input channel `(c·ph + i)·pw + j`
/// over its pixels (bins nearly as `roi_pool`'s: see [`bins`]), an empty bin 0.
/// The sums come from the map's summed-area table, four gathers per bin; in f32, whose
/// rounding on a table of large sums is why its op cases compare within a tolerance.
pub(super) fn ps_roi_pool(a: &mut Args<'_>) -> R<Recipe> {
    let (scale, (ph, pw)) = region_args(a, "ps_roi_pool")?;
    Ok(Box::new(move |w| {
        let (input, rois) = (w.inputs[0], w.inputs[1]);
        let groups = ChannelGroups::new(w, input, rois, (ph, pw), "ps_roi_pool")?;
        let [_, _, h, wd] = static_dims(&w.ty(input), "ps_roi_pool's input")?[..] else {
            return Err(format!("ps_roi_pool takes a 4-d input, found {}", w.ty(input)).into());
        };
        let (k, c_out) = (static_dims(&w.ty(rois), "ps_roi_pool's rois")?[0], groups.c_out);
        let dt = w.ty(input).dtype;
        let mapping = groups.mapping(w)?;
        if h == 0 || wd == 0 {
            return Ok(vec![full(w, &[k, c_out, ph, pw], Scalar::Float(0.0), dt)?, mapping]);
        }
        let (image, rows, cols) = region_bins(w, rois, dt, scale, [k, ph, pw, h, wd], true)?;
        // Sums of x above and left of each corner, [N, C, H + 1, W + 1], in at least f32.
        let acc = if matches!(dt, DType::F16 | DType::BF16) { DType::F32 } else { dt };
        let x = w.convert(input, acc)?;
        let x = w.op(Op::Pad(Pad { pad: vec![1, 0, 1, 0], value: Scalar::Float(0.0) }), &[x])?;
        let cumsum = |d| Op::Cumulative(Cumulative { op: CumulativeOp::Cumsum, dim: d, dtype: None });
        let x = w.op(cumsum(2), &[x])?;
        let table = w.op(cumsum(3), &[x])?;
        // Each bin's corners read from its channel: [K, ph, pw, c_out].
        let map = w.op(Op::Permute(Permute { dims: vec![1, 2, 0] }), &[groups.map])?;
        let map = view(w, map, &[1, ph, pw, c_out])?;
        let image = view(w, image, &[k, 1, 1, 1])?;
        let mut sum = None;
        for (r, rs) in [(rows.end, 1.0), (rows.start, -1.0)] {
            for (cl, cs) in [(cols.end, 1.0), (cols.start, -1.0)] {
                let (r, cl) = (view(w, r, &[k, ph, 1, 1])?, view(w, cl, &[k, 1, pw, 1])?);
                let v = w.op(Op::Index(Index { present: vec![true; 4] }), &[table, image, map, r, cl])?;
                let v = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(rs * cs)), &[v])?;
                sum = Some(match sum {
                    None => v,
                    Some(s) => w.op(tensor_op(BinaryOp::Add), &[s, v])?,
                });
            }
        }
        let sum = sum.ok_or_else(|| bug("no corner"))?;
        let height = w.op(tensor_op(BinaryOp::Sub), &[rows.end, rows.start])?;
        let width = w.op(tensor_op(BinaryOp::Sub), &[cols.end, cols.start])?;
        let (height, width) = (view(w, height, &[k, ph, 1, 1])?, view(w, width, &[k, 1, pw, 1])?);
        let area = w.op(tensor_op(BinaryOp::Mul), &[height, width])?;
        let area = w.convert(area, acc)?;
        let area = w.op(scalar_op(BinaryOp::Maximum, Scalar::Float(1.0)), &[area])?;
        let mean = w.op(tensor_op(BinaryOp::Div), &[sum, area])?;
        let (re, ce) = (view(w, rows.empty, &[k, ph, 1, 1])?, view(w, cols.empty, &[k, 1, pw, 1])?);
        let empty = w.op(tensor_op(BinaryOp::LogicalOr), &[re, ce])?;
        let zero = Op::Where(Where { on_true: Operand::Scalar(Scalar::Float(0.0)), on_false: Operand::Tensor });
        let mean = w.op(zero, &[empty, mean])?;
        let mean = w.convert(mean, dt)?;
        Ok(vec![w.op(Op::Permute(Permute { dims: vec![0, 3, 1, 2] }), &[mean])?, mapping])
    }))
}

/// Every region's image and its bins along both axes: corners scaled and rounded half away
/// from zero to whole pixels (see [`bins`] for `ps`).
fn region_bins(
    w: &mut Wire<'_>,
    rois: ValueRef,
    dt: DType,
    scale: f64,
    [k, ph, pw, h, wd]: [i64; 5],
    ps: bool,
) -> R<(ValueRef, Bins, Bins)> {
    let rois = w.convert(rois, dt)?;
    let corner = |w: &mut Wire<'_>, i| -> R<ValueRef> {
        let v = w.op(Op::Select(Select { dim: 1, index: i }), &[rois])?;
        let v = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(scale)), &[v])?;
        let v = round_half_away(w, v)?;
        w.convert(v, DType::I64)
    };
    let image = w.op(Op::Select(Select { dim: 1, index: 0 }), &[rois])?;
    let image = w.convert(image, DType::I64)?;
    let (y1, y2, x1, x2) = (corner(w, 2)?, corner(w, 4)?, corner(w, 1)?, corner(w, 3)?);
    let rows = bins(w, (y1, y2), (k, ph), h, ps)?;
    let cols = bins(w, (x1, x2), (k, pw), wd, ps)?;
    Ok((image, rows, cols))
}

/// The pixels of every bin along one axis, `[K, bins]` each: the first, the length of the two
/// windows that cover it (the largest power of two not above its size), the first pixel of the
/// second window, and whether the bin is empty.
struct Bins {
    start: ValueRef,
    /// One past the last pixel (`start` where empty, or clipped to the map's last pixel).
    end: ValueRef,
    level: ValueRef,
    second: ValueRef,
    empty: ValueRef,
}

/// `(start, end)` of every region along one axis, in whole pixels (`[K]`, `i64`), split into
/// `bins` bins clipped to `[0, size]` — for `ps` (`ps_roi_pool`, as torchvision's kernel has
/// it), the region without its end pixel and bins clipped to `[0, size − 1]`, which leaves the
/// map's last row and column out. In integers: torchvision's `floor(i · (extent / bins))`
/// in floats is the same number, but a compiler may turn the division into a multiplication
/// by `1 / bins`, one ulp off, and a ceiling of `3.0000002` is 4.
fn bins(w: &mut Wire<'_>, (start, end): (ValueRef, ValueRef), (k, bins): (i64, i64), size: i64, ps: bool) -> R<Bins> {
    let (end_pixel, clip) = if ps { (0, size - 1) } else { (1, size) };
    // The region is `end − start + end_pixel` pixels, at least one; bin `i` runs from
    // `floor(i · extent / bins)` to `ceil((i + 1) · extent / bins)` past its start.
    let extent = w.op(tensor_op(BinaryOp::Sub), &[end, start])?;
    let extent = w.op(scalar_op(BinaryOp::Add, Scalar::Int(end_pixel)), &[extent])?;
    let extent = w.op(scalar_op(BinaryOp::Maximum, Scalar::Int(1)), &[extent])?;
    let extent = view(w, extent, &[k, 1])?;
    let start = view(w, start, &[k, 1])?;
    // `ceil(n / bins)` of a positive `n` is `floor((n + bins − 1) / bins)`.
    let at = |w: &mut Wire<'_>, first: i64, round_up: i64| -> R<ValueRef> {
        let steps = (first..first + bins).map(Scalar::Int).collect();
        let steps = w.literal(steps, TensorType::new(DType::I64, &[1, bins]))?;
        let v = w.op(tensor_op(BinaryOp::Mul), &[steps, extent])?;
        let v = w.op(scalar_op(BinaryOp::Add, Scalar::Int(round_up)), &[v])?;
        let v = w.op(scalar_op(BinaryOp::FloorDiv, Scalar::Int(bins)), &[v])?;
        let v = w.op(tensor_op(BinaryOp::Add), &[v, start])?;
        let v = w.op(scalar_op(BinaryOp::Maximum, Scalar::Int(0)), &[v])?;
        w.op(scalar_op(BinaryOp::Minimum, Scalar::Int(clip)), &[v])
    };
    let (first, last) = (at(w, 0, 0)?, at(w, 1, bins - 1)?);
    let length = w.op(tensor_op(BinaryOp::Sub), &[last, first])?;
    let empty = w.op(scalar_op(BinaryOp::Le, Scalar::Int(0)), &[length])?;
    // The level: how many powers of two above 1 the length reaches; its window, 2^level.
    let (mut level, mut window) = (None, None);
    for l in 1..levels(size) {
        let reaches = w.op(scalar_op(BinaryOp::Ge, Scalar::Int(1 << l)), &[length])?;
        let reaches = w.convert(reaches, DType::I64)?;
        let step = w.op(scalar_op(BinaryOp::Mul, Scalar::Int(1 << (l - 1))), &[reaches])?;
        level = Some(add(w, level, reaches)?);
        window = Some(add(w, window, step)?);
    }
    let zeros = |w: &mut Wire<'_>| w.op(scalar_op(BinaryOp::Mul, Scalar::Int(0)), &[first]);
    let level = match level {
        Some(l) => l,
        None => zeros(w)?,
    };
    let window = match window {
        Some(v) => w.op(scalar_op(BinaryOp::Add, Scalar::Int(1)), &[v])?,
        None => {
            let zero = zeros(w)?;
            w.op(scalar_op(BinaryOp::Add, Scalar::Int(1)), &[zero])?
        }
    };
    // An empty bin reads the first window at its clipped start, then is masked.
    let second = w.op(tensor_op(BinaryOp::Sub), &[last, window])?;
    let second = w.op(scalar_op(BinaryOp::Maximum, Scalar::Int(0)), &[second])?;
    let first = w.op(scalar_op(BinaryOp::Minimum, Scalar::Int(size - 1)), &[first])?;
    Ok(Bins { start: first, end: last, level, second, empty })
}

fn add(w: &mut Wire<'_>, sum: Option<ValueRef>, v: ValueRef) -> R<ValueRef> {
    match sum {
        None => Ok(v),
        Some(s) => w.op(tensor_op(BinaryOp::Add), &[s, v]),
    }
}

/// The number of window sizes a side of `size` pixels needs: `floor(log2 size) + 1`.
fn levels(size: i64) -> i64 {
    64 - i64::from(size.leading_zeros())
}

/// The sparse table: maxima `[LH·LW, N, C, H, W]` of the `2^a × 2^b` windows starting at each
/// pixel (table `a·LW + b`), and the flat position `h·W + w` of each window's first maximum.
struct Table {
    values: ValueRef,
    positions: ValueRef,
    level_width: i64,
}

impl Table {
    fn build(w: &mut Wire<'_>, input: ValueRef, [n, c, h, wd]: [i64; 4]) -> R<Table> {
        let positions = (0..h * wd).map(Scalar::Int).collect();
        let positions = w.literal(positions, TensorType::new(DType::I32, &[1, 1, h, wd]))?;
        let shape = [n, c, h, wd].iter().map(|&d| Dim::Static(d)).collect();
        let positions = w.op(Op::Expand(Expand { size: shape }), &[positions])?;
        let (lh, lw) = (levels(h), levels(wd));
        let mut values = Vec::new();
        let mut row = (input, positions);
        for a in 0..lh {
            if a > 0 {
                row = widen(w, row, 2, 1 << (a - 1), h)?;
            }
            let mut cell = row;
            for b in 0..lw {
                if b > 0 {
                    cell = widen(w, cell, 3, 1 << (b - 1), wd)?;
                }
                values.push(cell);
            }
        }
        let stack = |w: &mut Wire<'_>, vs: Vec<ValueRef>| -> R<ValueRef> {
            let mut leading = Vec::with_capacity(vs.len());
            for v in vs {
                leading.push(view(w, v, &[1, n, c, h, wd])?);
            }
            w.op(Op::Cat(Cat { dim: 0 }), &leading)
        };
        let (v, p): (Vec<ValueRef>, Vec<ValueRef>) = values.into_iter().unzip();
        Ok(Table { values: stack(w, v)?, positions: stack(w, p)?, level_width: lw })
    }

    /// The maximum and its position over every bin, `[K, ph, pw, C]` each: four windows, the
    /// larger value winning and, of equal ones, the smaller position; an empty bin 0 and -1.
    fn read(
        &self,
        w: &mut Wire<'_>,
        image: ValueRef,
        rows: &Bins,
        cols: &Bins,
        [k, ph, pw]: [i64; 3],
    ) -> R<(ValueRef, ValueRef)> {
        let row = |w: &mut Wire<'_>, v| view(w, v, &[k, ph, 1]);
        let col = |w: &mut Wire<'_>, v| view(w, v, &[k, 1, pw]);
        let level = w.op(scalar_op(BinaryOp::Mul, Scalar::Int(self.level_width)), &[rows.level])?;
        let (level, col_level) = (row(w, level)?, col(w, cols.level)?);
        let table = w.op(tensor_op(BinaryOp::Add), &[level, col_level])?;
        let image = view(w, image, &[k, 1, 1])?;
        let mut best: Option<(ValueRef, ValueRef)> = None;
        for r in [rows.start, rows.second] {
            for cl in [cols.start, cols.second] {
                let (r, cl) = (row(w, r)?, col(w, cl)?);
                let at = Op::Index(Index { present: vec![true, true, false, true, true] });
                let v = w.op(at.clone(), &[self.values, table, image, r, cl])?;
                let p = w.op(at, &[self.positions, table, image, r, cl])?;
                best = Some(match best {
                    None => (v, p),
                    Some(b) => larger(w, b, (v, p))?,
                });
            }
        }
        let (value, position) = best.ok_or_else(|| bug("no window"))?;
        let (re, ce) = (view(w, rows.empty, &[k, ph, 1, 1])?, view(w, cols.empty, &[k, 1, pw, 1])?);
        let empty = w.op(tensor_op(BinaryOp::LogicalOr), &[re, ce])?;
        let zero = |s| Op::Where(Where { on_true: Operand::Scalar(s), on_false: Operand::Tensor });
        let value = w.op(zero(Scalar::Float(0.0)), &[empty, value])?;
        let position = w.op(zero(Scalar::Int(-1)), &[empty, position])?;
        Ok((value, position))
    }
}

/// Windows twice as long along `dim`: each the larger of itself and the one `by` further on
/// (past the end: minus infinity, never read).
fn widen(w: &mut Wire<'_>, (v, p): (ValueRef, ValueRef), dim: i64, by: i64, size: i64) -> R<(ValueRef, ValueRef)> {
    let shifted = |w: &mut Wire<'_>, x, fill| -> R<ValueRef> {
        let end = Dim::Static(size);
        let x = w.op(Op::Slice(Slice { dim, start: Dim::Static(by.min(size)), end, step: 1 }), &[x])?;
        // `pad` lists the last dim first.
        let mut pad = vec![0; 2 * (4 - dim as usize)];
        pad[2 * (3 - dim as usize) + 1] = by.min(size);
        w.op(Op::Pad(Pad { pad, value: fill }), &[x])
    };
    let next = (shifted(w, v, Scalar::Float(f64::NEG_INFINITY))?, shifted(w, p, Scalar::Int(i32::MAX.into()))?);
    larger(w, (v, p), next)
}

/// The larger of two (value, position) pairs; of equal values, the smaller position.
fn larger(w: &mut Wire<'_>, (v1, p1): (ValueRef, ValueRef), (v2, p2): (ValueRef, ValueRef)) -> R<(ValueRef, ValueRef)> {
    let gt = w.op(tensor_op(BinaryOp::Gt), &[v2, v1])?;
    let eq = w.op(tensor_op(BinaryOp::Eq), &[v2, v1])?;
    let first = w.op(tensor_op(BinaryOp::Minimum), &[p1, p2])?;
    let pick = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor });
    let tie = w.op(pick.clone(), &[eq, first, p1])?;
    let position = w.op(pick.clone(), &[gt, p2, tie])?;
    let value = w.op(pick, &[gt, v2, v1])?;
    Ok((value, position))
}

/// `round` as C's: half away from zero (`sign(x) · floor(|x| + 0.5)`).
fn round_half_away(w: &mut Wire<'_>, x: ValueRef) -> R<ValueRef> {
    let sign = w.op(Op::Unary(UnaryOp::Sign), &[x])?;
    let v = w.op(Op::Unary(UnaryOp::Abs), &[x])?;
    let v = w.op(scalar_op(BinaryOp::Add, Scalar::Float(0.5)), &[v])?;
    let v = w.op(Op::Unary(UnaryOp::Floor), &[v])?;
    w.op(tensor_op(BinaryOp::Mul), &[sign, v])
}
