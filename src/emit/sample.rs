//! Spatial sampling: `grid_sampler_2d` (bilinear, nearest and bicubic reads at arbitrary
//! points, with zeros/border/reflection padding) and `col2im` (sliding-window columns summed
//! back into images).
//!
//! The sampler follows PyTorch's CPU kernel step by step: unnormalize the grid, map the
//! coordinates through the padding mode, then read whole pixels with a gather and blend them
//! with the interpolation weights. Reads outside the image give zero.

use melior::ir::Value;
use torchtpu_passes::ir::ops::Col2Im;
use torchtpu_passes::ir::ops::GridSampler;
use torchtpu_passes::ir::{DType, GridPadding, Interpolation, Scalar, TensorType};

use super::builder::{bug, i64_array, static_dims, Builder, Ew, LowerResult};
use super::shape::gather;
use super::Arg;

type V<'c, 'b> = Value<'c, 'b>;

/// Grid coordinate in [-1, 1] → pixel coordinate along a dim of `size` pixels.
fn unnormalize<'c, 'b>(e: &Ew<'_, 'c, 'b>, g: V<'c, 'b>, size: i64, align_corners: bool) -> LowerResult<V<'c, 'b>> {
    let s = size as f64;
    if align_corners {
        e.affine(g, (s - 1.0) / 2.0, (s - 1.0) / 2.0)
    } else {
        e.affine(g, s / 2.0, (s - 1.0) / 2.0)
    }
}

/// Reflects `x` into `[twice_low / 2, twice_high / 2]` as many times as needed.
fn reflect<'c, 'b>(e: &Ew<'_, 'c, 'b>, x: V<'c, 'b>, twice_low: i64, twice_high: i64) -> LowerResult<V<'c, 'b>> {
    if twice_low == twice_high {
        return e.c(0.0);
    }
    let min = twice_low as f64 / 2.0;
    let span = (twice_high - twice_low) as f64 / 2.0;
    let x = e.unary("abs", e.affine(x, 1.0, -min)?)?;
    let extra = e.bin("remainder", x, e.c(span)?)?;
    let flips = e.unary("floor", e.mul(x, e.c(1.0 / span)?)?)?;
    let even = e.cmp(e.bin("remainder", flips, e.c(2.0)?)?, e.c(0.0)?, "EQ")?;
    let forward = e.affine(extra, 1.0, min)?;
    let backward = e.affine(extra, -1.0, span + min)?;
    e.select(even, forward, backward)
}

/// Maps a pixel coordinate through the padding mode (`compute_coordinates` in PyTorch).
fn pad_coordinate<'c, 'b>(
    e: &Ew<'_, 'c, 'b>,
    x: V<'c, 'b>,
    size: i64,
    padding: GridPadding,
    align_corners: bool,
) -> LowerResult<V<'c, 'b>> {
    let clip = |x| e.clamp(x, 0.0, (size - 1) as f64);
    match padding {
        GridPadding::Zeros => Ok(x),
        GridPadding::Border => clip(x),
        GridPadding::Reflection if align_corners => clip(reflect(e, x, 0, 2 * (size - 1))?),
        GridPadding::Reflection => clip(reflect(e, x, -1, 2 * size - 1)?),
    }
}

/// The image as `[N, C, H*W]` and the helpers to read whole pixels of it.
struct Image<'a, 'c, 'b> {
    e: Ew<'a, 'c, 'b>,
    flat: V<'c, 'b>,
    /// `[N, C, H, W]`.
    dims: Vec<i64>,
    /// `[N, C, Ho, Wo]`.
    out: Vec<i64>,
}

impl<'c, 'b> Image<'_, 'c, 'b> {
    /// Pixels at integral coordinates `(x, y)` (shape `[N, Ho, Wo]`), zero outside the image.
    fn read(&self, x: V<'c, 'b>, y: V<'c, 'b>) -> LowerResult<V<'c, 'b>> {
        let (e, b) = (&self.e, self.e.b);
        let [n, c, h, w] = <[i64; 4]>::try_from(self.dims.as_slice()).map_err(|_| bug("image rank"))?;
        let inside = |v, size: i64| -> LowerResult<V<'c, 'b>> {
            let lo = e.cmp(v, e.c(0.0)?, "GE")?;
            let hi = e.cmp(v, e.c((size - 1) as f64)?, "LE")?;
            b.op("stablehlo.and", &[lo, hi], &e.dims, DType::Bool, &[])
        };
        let valid = b.op("stablehlo.and", &[inside(x, w)?, inside(y, h)?], &e.dims, DType::Bool, &[])?;
        let index = |v, size: i64| b.convert(e.clamp(v, 0.0, (size - 1) as f64)?, &e.dims, e.dt, DType::I64);
        let (xi, yi) = (index(x, w)?, index(y, h)?);
        let row =
            b.op("stablehlo.multiply", &[yi, b.splat(Scalar::Int(w), &e.dims, DType::I64)?], &e.dims, DType::I64, &[])?;
        let linear = b.op("stablehlo.add", &[row, xi], &e.dims, DType::I64, &[])?;
        let points = e.dims[1] * e.dims[2];
        let linear = b.reshape(linear, &[n, points], DType::I64)?;
        let idx_ty = TensorType::new(DType::I64, &[n, c, points]);
        let idx = b.op(
            "stablehlo.broadcast_in_dim",
            &[linear],
            &[n, c, points],
            DType::I64,
            &[("broadcast_dimensions", i64_array(&[0, 2]))],
        )?;
        let src_ty = TensorType::new(e.dt, &[n, c, h * w]);
        let got_ty = TensorType::new(e.dt, &[n, c, points]);
        let got = gather(b, 2, Arg { v: self.flat, ty: &src_ty }, Arg { v: idx, ty: &idx_ty }, &got_ty)?;
        let got = b.reshape(got, &self.out, e.dt)?;
        let valid = self.per_channel(valid, DType::Bool)?;
        b.op("stablehlo.select", &[valid, got, b.splat(Scalar::Int(0), &self.out, e.dt)?], &self.out, e.dt, &[])
    }

    /// A per-point value `[N, Ho, Wo]` broadcast over the channels.
    fn per_channel(&self, v: V<'c, 'b>, dt: DType) -> LowerResult<V<'c, 'b>> {
        self.e.b.op(
            "stablehlo.broadcast_in_dim",
            &[v],
            &self.out,
            dt,
            &[("broadcast_dimensions", i64_array(&[0, 2, 3]))],
        )
    }

    /// `acc + weight * pixels`, the weight broadcast over the channels.
    fn blend(&self, acc: Option<V<'c, 'b>>, weight: V<'c, 'b>, pixels: V<'c, 'b>) -> LowerResult<V<'c, 'b>> {
        let b = self.e.b;
        let term =
            b.op("stablehlo.multiply", &[self.per_channel(weight, self.e.dt)?, pixels], &self.out, self.e.dt, &[])?;
        match acc {
            None => Ok(term),
            Some(a) => b.op("stablehlo.add", &[a, term], &self.out, self.e.dt, &[]),
        }
    }
}

/// The four cubic-convolution weights (A = -0.75) of the pixels at offsets -1, 0, 1, 2 from
/// `floor(x)`, for the fraction `t`.
fn cubic_weights<'c, 'b>(e: &Ew<'_, 'c, 'b>, t: V<'c, 'b>) -> LowerResult<[V<'c, 'b>; 4]> {
    const A: f64 = -0.75;
    // |d| <= 1: ((A + 2) d - (A + 3)) d² + 1;  1 < |d| < 2: ((A d - 5A) d + 8A) d - 4A.
    let near = |d: V<'c, 'b>| -> LowerResult<V<'c, 'b>> {
        let inner = e.affine(d, A + 2.0, -(A + 3.0))?;
        e.add(e.mul(e.mul(inner, d)?, d)?, e.c(1.0)?)
    };
    let far = |d: V<'c, 'b>| -> LowerResult<V<'c, 'b>> {
        let inner = e.affine(d, A, -5.0 * A)?;
        let inner = e.add(e.mul(inner, d)?, e.c(8.0 * A)?)?;
        e.add(e.mul(inner, d)?, e.c(-4.0 * A)?)
    };
    Ok([far(e.affine(t, 1.0, 1.0)?)?, near(t)?, near(e.affine(t, -1.0, 1.0)?)?, far(e.affine(t, -1.0, 2.0)?)?])
}

/// `grid_sampler_2d(input, grid, mode, padding, align_corners)`.
pub(super) fn grid_sampler<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &GridSampler,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let &GridSampler { mode, padding, align_corners } = op;
    let (input, grid) = (args[0], args[1]);
    let xd = static_dims(input.ty)?;
    let gd = static_dims(grid.ty)?;
    if xd.len() != 4 || gd.len() != 4 || gd[3] != 2 {
        return Err(format!("expects input [N, C, H, W] and grid [N, Ho, Wo, 2], found {xd:?} and {gd:?}").into());
    }
    let dt = if matches!(out.dtype, DType::F16 | DType::BF16) { DType::F32 } else { out.dtype };
    let (h, w) = (xd[2], xd[3]);
    let e = Ew { b, dims: gd[..3].to_vec(), dt };
    let g = b.convert(grid.v, &gd, grid.ty.dtype, dt)?;
    let coord = |k: i64| -> LowerResult<V<'c, 'b>> {
        let part = b.op(
            "stablehlo.slice",
            &[g],
            &[gd[0], gd[1], gd[2], 1],
            dt,
            &[
                ("start_indices", i64_array(&[0, 0, 0, k])),
                ("limit_indices", i64_array(&[gd[0], gd[1], gd[2], k + 1])),
                ("strides", i64_array(&[1, 1, 1, 1])),
            ],
        )?;
        b.reshape(part, &e.dims, dt)
    };
    let ix = unnormalize(&e, coord(0)?, w, align_corners)?;
    let iy = unnormalize(&e, coord(1)?, h, align_corners)?;
    let flat = b.reshape(b.convert(input.v, &xd, input.ty.dtype, dt)?, &[xd[0], xd[1], h * w], dt)?;
    let image = Image { flat, dims: xd.clone(), out: vec![xd[0], xd[1], gd[1], gd[2]], e };
    let e = &image.e;
    let result = match mode {
        Interpolation::Nearest => {
            let ix = e.unary("round_nearest_even", pad_coordinate(e, ix, w, padding, align_corners)?)?;
            let iy = e.unary("round_nearest_even", pad_coordinate(e, iy, h, padding, align_corners)?)?;
            image.read(ix, iy)?
        }
        Interpolation::Bilinear => {
            let ix = pad_coordinate(e, ix, w, padding, align_corners)?;
            let iy = pad_coordinate(e, iy, h, padding, align_corners)?;
            let (x0, y0) = (e.unary("floor", ix)?, e.unary("floor", iy)?);
            let (x1, y1) = (e.affine(x0, 1.0, 1.0)?, e.affine(y0, 1.0, 1.0)?);
            let (east, west) = (e.sub(ix, x0)?, e.sub(x1, ix)?);
            let (south, north) = (e.sub(iy, y0)?, e.sub(y1, iy)?);
            let mut acc = None;
            for (x, y, wx, wy) in
                [(x0, y0, west, north), (x1, y0, east, north), (x0, y1, west, south), (x1, y1, east, south)]
            {
                acc = Some(image.blend(acc, e.mul(wx, wy)?, image.read(x, y)?)?);
            }
            acc.ok_or_else(|| bug("no corners"))?
        }
        Interpolation::Bicubic => {
            let (x0, y0) = (e.unary("floor", ix)?, e.unary("floor", iy)?);
            let wx = cubic_weights(e, e.sub(ix, x0)?)?;
            let wy = cubic_weights(e, e.sub(iy, y0)?)?;
            let mut acc = None;
            for (i, wy) in (-1..3).zip(wy) {
                let y = pad_coordinate(e, e.affine(y0, 1.0, f64::from(i))?, h, padding, align_corners)?;
                let mut row = None;
                for (j, wx) in (-1..3).zip(wx) {
                    let x = pad_coordinate(e, e.affine(x0, 1.0, f64::from(j))?, w, padding, align_corners)?;
                    row = Some(image.blend(row, wx, image.read(x, y)?)?);
                }
                acc = Some(image.blend(acc, wy, row.ok_or_else(|| bug("empty row"))?)?);
            }
            acc.ok_or_else(|| bug("no rows"))?
        }
    };
    b.convert(result, &image.out, dt, out.dtype)
}

/// `col2im`: column `c*kh*kw + i*kw + j` holds, for each window position, the value that
/// kernel offset `(i, j)` of channel `c` contributes; each offset's block is spread onto the
/// padded image with interior padding (the stride) and the blocks are summed in PyTorch's
/// order, then the padding is cropped.
pub(super) fn col2im<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Col2Im,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let &Col2Im { kernel, dilation, padding, stride, .. } = op;
    let od = static_dims(out)?;
    let dt = out.dtype;
    let batched = od.len() == 4;
    let (n, c, oh, ow) = if batched { (od[0], od[1], od[2], od[3]) } else { (1, od[0], od[1], od[2]) };
    let padded = [oh + 2 * padding[0], ow + 2 * padding[1]];
    let blocks: Vec<i64> = (0..2).map(|d| (padded[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1).collect();
    let cols = b.reshape(x.v, &[n, c, kernel[0], kernel[1], blocks[0], blocks[1]], dt)?;
    let block_dims = [n, c, blocks[0], blocks[1]];
    let image = [n, c, padded[0], padded[1]];
    let zero = b.splat(Scalar::Int(0), &[], dt)?;
    let mut acc: Option<V<'c, 'b>> = None;
    for i in 0..kernel[0] {
        for j in 0..kernel[1] {
            let block = b.op(
                "stablehlo.slice",
                &[cols],
                &[n, c, 1, 1, blocks[0], blocks[1]],
                dt,
                &[
                    ("start_indices", i64_array(&[0, 0, i, j, 0, 0])),
                    ("limit_indices", i64_array(&[n, c, i + 1, j + 1, blocks[0], blocks[1]])),
                    ("strides", i64_array(&[1; 6])),
                ],
            )?;
            let block = b.reshape(block, &block_dims, dt)?;
            let low = [i * dilation[0], j * dilation[1]];
            let high: Vec<i64> = (0..2).map(|d| padded[d] - (low[d] + (blocks[d] - 1) * stride[d] + 1)).collect();
            let spread = b.op(
                "stablehlo.pad",
                &[block, zero],
                &image,
                dt,
                &[
                    ("edge_padding_low", i64_array(&[0, 0, low[0], low[1]])),
                    ("edge_padding_high", i64_array(&[0, 0, high[0], high[1]])),
                    ("interior_padding", i64_array(&[0, 0, stride[0] - 1, stride[1] - 1])),
                ],
            )?;
            acc = Some(match acc {
                None => spread,
                Some(a) => b.op("stablehlo.add", &[a, spread], &image, dt, &[])?,
            });
        }
    }
    let acc = acc.ok_or("col2im with an empty kernel")?;
    let cropped = b.op(
        "stablehlo.slice",
        &[acc],
        &[n, c, oh, ow],
        dt,
        &[
            ("start_indices", i64_array(&[0, 0, padding[0], padding[1]])),
            ("limit_indices", i64_array(&[n, c, padding[0] + oh, padding[1] + ow])),
            ("strides", i64_array(&[1; 4])),
        ],
    )?;
    b.reshape(cropped, &od, dt)
}
