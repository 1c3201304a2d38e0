//! Random ops on StableHLO's counter-based generator: `rand`, `randn`, `randperm` and
//! `native_dropout`.
//!
//! The program takes a Threefry key (`u64[2]`, from `run --seed`) and each random op draws
//! its bits with `rng_bit_generator`, which also returns the key for the next op: the state is
//! threaded through the random ops in graph order, so a seed gives the same numbers on every
//! run and every backend, and different ops never share bits. Values follow PyTorch's
//! distributions, not its generator's exact numbers.

use melior::ir::Value;
use torchtpu_passes::ir::ops::Dropout;
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{i64_array, static_dims, Builder, Ew, LowerResult};
use super::sort::sorted;
use super::Arg;

type V<'c, 'b> = Value<'c, 'b>;

/// A random result and the generator state after it.
pub(super) struct Drawn<'c, 'b> {
    pub values: Vec<V<'c, 'b>>,
    pub state: V<'c, 'b>,
}

/// `dims`-shaped random bits (`u64` when `wide`, else `u32`) and the next state.
fn bits<'c, 'b>(
    b: &Builder<'c, 'b>,
    state: V<'c, 'b>,
    dims: &[i64],
    wide: bool,
) -> LowerResult<(V<'c, 'b>, V<'c, 'b>)> {
    let bt = if wide { DType::U64 } else { DType::U32 };
    let outs = b.op_n(
        "stablehlo.rng_bit_generator",
        &[state],
        &[(&[2], DType::U64), (dims, bt)],
        &[("rng_algorithm", "#stablehlo<rng_algorithm THREE_FRY>".to_string())],
        vec![],
    )?;
    Ok((outs[0], outs[1]))
}

/// Uniform in [0, 1) with every value a multiple of 2^-digits, `digits` the significand
/// width of `dt` (as PyTorch draws them): exact, and never rounds up to 1.
fn uniform<'c, 'b>(
    b: &Builder<'c, 'b>,
    state: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<(V<'c, 'b>, V<'c, 'b>)> {
    let (digits, wide) = match dt {
        DType::F64 => (53, true),
        DType::F32 => (24, false),
        DType::F16 => (11, false),
        DType::BF16 => (8, false),
        d => return Err(format!("random values of dtype {d} are not supported (floating point only)").into()),
    };
    let (state, raw) = bits(b, state, dims, wide)?;
    let (bt, width) = if wide { (DType::U64, 64) } else { (DType::U32, 32) };
    let top =
        b.op("stablehlo.shift_right_logical", &[raw, b.splat(Scalar::Int(width - digits), dims, bt)?], dims, bt, &[])?;
    let scaled = b.op(
        "stablehlo.multiply",
        &[b.convert(top, dims, bt, dt)?, b.splat(Scalar::Float((-digits as f64).exp2()), dims, dt)?],
        dims,
        dt,
        &[],
    )?;
    Ok((state, scaled))
}

/// Standard normal values by Box–Muller on two uniforms, computed in f32 (f64 for f64).
fn normal<'c, 'b>(
    b: &Builder<'c, 'b>,
    state: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<(V<'c, 'b>, V<'c, 'b>)> {
    let ct = if dt == DType::F64 { DType::F64 } else { DType::F32 };
    let n: i64 = dims.iter().product();
    let (state, u) = uniform(b, state, &[2, n], ct)?;
    let half = |k: i64| -> LowerResult<V<'c, 'b>> {
        let s = b.op(
            "stablehlo.slice",
            &[u],
            &[1, n],
            ct,
            &[
                ("start_indices", i64_array(&[k, 0])),
                ("limit_indices", i64_array(&[k + 1, n])),
                ("strides", i64_array(&[1, 1])),
            ],
        )?;
        b.reshape(s, &[n], ct)
    };
    let e = Ew { b, dims: vec![n], dt: ct };
    // r = sqrt(-2 ln(1 - u1)) with 1 - u1 in (0, 1]; z = r cos(2π u2).
    let log = e.unary("log", e.sub(e.c(1.0)?, half(0)?)?)?;
    let r = e.unary("sqrt", e.mul(log, e.c(-2.0)?)?)?;
    let angle = e.mul(half(1)?, e.c(std::f64::consts::TAU)?)?;
    let z = e.mul(r, e.unary("cosine", angle)?)?;
    Ok((state, b.reshape(b.convert(z, &[n], ct, dt)?, dims, dt)?))
}

/// `rand`/`randn` of the output's shape and dtype.
pub(super) fn rand<'c, 'b>(
    b: &Builder<'c, 'b>,
    normal_dist: bool,
    state: V<'c, 'b>,
    out: &TensorType,
) -> LowerResult<Drawn<'c, 'b>> {
    let dims = static_dims(out)?;
    if dims.contains(&0) {
        return Ok(Drawn { values: vec![b.splat(Scalar::Int(0), &dims, out.dtype)?], state });
    }
    let (state, v) =
        if normal_dist { normal(b, state, &dims, out.dtype)? } else { uniform(b, state, &dims, out.dtype)? };
    Ok(Drawn { values: vec![v], state })
}

/// `randperm(n)`: the positions sorted by random 64-bit keys (stable, so ties, at odds of
/// about n²/2⁶⁵, still give a permutation).
pub(super) fn randperm<'c, 'b>(b: &Builder<'c, 'b>, state: V<'c, 'b>, out: &TensorType) -> LowerResult<Drawn<'c, 'b>> {
    let dims = static_dims(out)?;
    if dims.iter().product::<i64>() <= 1 {
        return Ok(Drawn { values: vec![b.splat(Scalar::Int(0), &dims, out.dtype)?], state });
    }
    let (state, keys) = bits(b, state, &dims, true)?;
    let key_ty = TensorType::new(DType::U64, &dims);
    let (_, order, ..) = sorted(b, Arg { v: keys, ty: &key_ty }, 0, false)?;
    Ok(Drawn { values: vec![b.convert(order, &dims, DType::I64, out.dtype)?], state })
}

/// `native_dropout`: `x * keep * 1/(1-p)` (0 when p = 1) and the `keep` mask, each element
/// kept with probability `1 - p` when training; the identity and an all-true mask otherwise.
pub(super) fn dropout<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Dropout,
    x: Arg<'c, 'b, '_>,
    state: V<'c, 'b>,
    out: &[TensorType],
) -> LowerResult<Drawn<'c, 'b>> {
    let &Dropout { p, train } = op;
    let dims = static_dims(x.ty)?;
    let dt = out[0].dtype;
    if !train || dims.contains(&0) {
        return Ok(Drawn { values: vec![x.v, b.splat(Scalar::Bool(true), &dims, DType::Bool)?], state });
    }
    let keep_prob = 1.0 - p;
    let (state, u) = uniform(b, state, &dims, DType::F32)?;
    let keep = b.compare(u, b.splat(Scalar::Float(keep_prob), &dims, DType::F32)?, &dims, DType::F32, "LT")?;
    let scale = if keep_prob == 0.0 { 0.0 } else { 1.0 / keep_prob };
    let masked = b.op("stablehlo.multiply", &[x.v, b.convert(keep, &dims, DType::Bool, dt)?], &dims, dt, &[])?;
    let scaled = b.op("stablehlo.multiply", &[masked, b.splat(Scalar::Float(scale), &dims, dt)?], &dims, dt, &[])?;
    Ok(Drawn { values: vec![scaled, keep], state })
}
