//! Pairwise distances: `_cdist_forward` (between two sets of rows) and `_pdist_forward`
//! (between the rows of one set), for any `p` (0 counts differing coordinates, inf takes the
//! largest difference).

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{static_dims, tensor_type_text, Builder, LowerResult};
use super::Arg;

/// `(sum |d|^p)^(1/p)` over the last dim of `diff` (shape `dims`), reduced to `out_dims`.
fn p_norm<'c, 'b>(
    b: &Builder<'c, 'b>,
    diff: Value<'c, 'b>,
    dims: &[i64],
    p: f64,
    out_dims: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'b>> {
    let last = dims.len() as i64 - 1;
    let abs = b.op("stablehlo.abs", &[diff], dims, dt, &[])?;
    let reduced = if p == 0.0 {
        let nz = b.compare(abs, b.splat(Scalar::Float(0.0), dims, dt)?, dims, dt, "NE")?;
        let ones = b.convert(nz, dims, DType::Bool, dt)?;
        b.reduce(ones, dims, &[last], dt, "stablehlo.add", Scalar::Int(0))?
    } else if p.is_infinite() {
        b.reduce(abs, dims, &[last], dt, "stablehlo.maximum", Scalar::Float(0.0))?
    } else {
        let powered = if p == 1.0 {
            abs
        } else {
            b.op("stablehlo.power", &[abs, b.splat(Scalar::Float(p), dims, dt)?], dims, dt, &[])?
        };
        let sum = b.reduce(powered, dims, &[last], dt, "stablehlo.add", Scalar::Int(0))?;
        let sd: Vec<i64> = dims[..dims.len() - 1].to_vec();
        match p {
            1.0 => sum,
            2.0 => b.op("stablehlo.sqrt", &[sum], &sd, dt, &[])?,
            _ => b.op("stablehlo.power", &[sum, b.splat(Scalar::Float(1.0 / p), &sd, dt)?], &sd, dt, &[])?,
        }
    };
    b.reshape(reduced, out_dims, dt)
}

/// `_cdist_forward(x1 [.., P, M], x2 [.., R, M], p)` → `[.., P, R]`.
pub(super) fn cdist<'c, 'b>(
    b: &Builder<'c, 'b>,
    p: f64,
    x1: Arg<'c, 'b, '_>,
    x2: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let (d1, d2) = (static_dims(x1.ty)?, static_dims(x2.ty)?);
    let out_dims = static_dims(out)?;
    let dt = out.dtype;
    let r = d1.len();
    let (pp, rr, m) = (d1[r - 2], d2[r - 2], d1[r - 1]);
    let mut wide: Vec<i64> = out_dims[..out_dims.len() - 2].to_vec();
    wide.extend([pp, rr, m]);
    let expand = |x: Arg<'c, 'b, '_>, d: &[i64], axis: usize| -> LowerResult<Value<'c, 'b>> {
        let mut with_unit = d.to_vec();
        with_unit.insert(axis, 1);
        let v = b.reshape(b.convert(x.v, d, x.ty.dtype, dt)?, &with_unit, dt)?;
        b.broadcast_to(v, &with_unit, &wide, dt)
    };
    let diff = b.op("stablehlo.subtract", &[expand(x1, &d1, r - 1)?, expand(x2, &d2, r - 2)?], &wide, dt, &[])?;
    p_norm(b, diff, &wide, p, &out_dims, dt)
}

/// `_pdist_forward(x [N, M], p)` → `[N(N-1)/2]`: the pairs `i < j` in row-major order.
pub(super) fn pdist<'c, 'b>(
    b: &Builder<'c, 'b>,
    p: f64,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let d = static_dims(x.ty)?;
    let dt = out.dtype;
    let (n, m) = (d[0], d[1]);
    let pairs: Vec<(i64, i64)> = (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))).collect();
    let k = pairs.len() as i64;
    if k == 0 {
        return b.splat(Scalar::Float(0.0), &static_dims(out)?, dt);
    }
    let v = b.convert(x.v, &d, x.ty.dtype, dt)?;
    let rows = |pick: fn(&(i64, i64)) -> i64| -> LowerResult<Value<'c, 'b>> {
        let items: Vec<String> = pairs.iter().map(|pr| format!("[{}]", pick(pr))).collect();
        let ty = tensor_type_text(&[k, 1], DType::I64);
        let idx = b.op(
            "stablehlo.constant",
            &[],
            &[k, 1],
            DType::I64,
            &[("value", format!("dense<[{}]> : {ty}", items.join(", ")))],
        )?;
        super::shape::gather_op(b, v, idx, &[1], &[0], &[0], 1, &[1, m], &TensorType::new(dt, &[k, m]))
    };
    let diff = b.op("stablehlo.subtract", &[rows(|pr| pr.0)?, rows(|pr| pr.1)?], &[k, m], dt, &[])?;
    p_norm(b, diff, &[k, m], p, &static_dims(out)?, dt)
}
