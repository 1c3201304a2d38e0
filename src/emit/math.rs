//! Element-wise arithmetic that StableHLO has no single op for, with PyTorch's exact rules:
//! truncation, floor and truncating division, Python's remainder, logarithms in other bases,
//! NaN/inf tests.

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Scalar, UnaryOp};

use super::builder::{Builder, LowerResult};

type V<'c, 'b> = Value<'c, 'b>;

fn select<'c, 'b>(
    b: &Builder<'c, 'b>,
    c: V<'c, 'b>,
    t: V<'c, 'b>,
    f: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    b.op("stablehlo.select", &[c, t, f], dims, dt, &[])
}

fn bin<'c, 'b>(
    b: &Builder<'c, 'b>,
    name: &str,
    x: V<'c, 'b>,
    y: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    b.op(&format!("stablehlo.{name}"), &[x, y], dims, dt, &[])
}

fn bools<'c, 'b>(b: &Builder<'c, 'b>, name: &str, x: V<'c, 'b>, y: V<'c, 'b>, dims: &[i64]) -> LowerResult<V<'c, 'b>> {
    bin(b, name, x, y, dims, DType::Bool)
}

/// `isnan` (`x != x`) and `isinf` (`|x| == inf`); always false for integers and bools.
pub(super) fn classify<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: UnaryOp,
    x: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    if !dt.is_float() {
        return b.splat(Scalar::Bool(false), dims, DType::Bool);
    }
    if op == UnaryOp::IsNan {
        return b.compare(x, x, dims, dt, "NE");
    }
    let abs = b.op("stablehlo.abs", &[x], dims, dt, &[])?;
    b.compare(abs, b.splat(Scalar::Float(f64::INFINITY), dims, dt)?, dims, dt, "EQ")
}

/// `signbit`: whether the sign bit is set — of the float's bits (so `-0.0` and negative NaNs
/// count), `x < 0` for integers, never for bools.
pub(super) fn signbit<'c, 'b>(b: &Builder<'c, 'b>, x: V<'c, 'b>, dims: &[i64], dt: DType) -> LowerResult<V<'c, 'b>> {
    if dt == DType::Bool {
        return b.splat(Scalar::Bool(false), dims, DType::Bool);
    }
    let (bits, int) = match (dt.is_float(), dt.size_bytes()) {
        (false, _) if !dt.is_complex() => (x, dt),
        (true, 2) => (b.op("stablehlo.bitcast_convert", &[x], dims, DType::I16, &[])?, DType::I16),
        (true, 4) => (b.op("stablehlo.bitcast_convert", &[x], dims, DType::I32, &[])?, DType::I32),
        (true, 8) => (b.op("stablehlo.bitcast_convert", &[x], dims, DType::I64, &[])?, DType::I64),
        _ => return Err(format!("signbit of {dt} is not supported").into()),
    };
    b.compare(bits, b.splat(Scalar::Int(0), dims, int)?, dims, int, "LT")
}

/// `log(x) / ln(base)`.
pub(super) fn log_base<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
    ln_base: f64,
) -> LowerResult<V<'c, 'b>> {
    let ln = b.op("stablehlo.log", &[x], dims, dt, &[])?;
    bin(b, "divide", ln, b.splat(Scalar::Float(ln_base), dims, dt)?, dims, dt)
}

/// Rounds toward zero: `x < 0 ? ceil(x) : floor(x)`.
pub(super) fn trunc<'c, 'b>(b: &Builder<'c, 'b>, x: V<'c, 'b>, dims: &[i64], dt: DType) -> LowerResult<V<'c, 'b>> {
    let negative = b.compare(x, b.splat(Scalar::Float(0.0), dims, dt)?, dims, dt, "LT")?;
    let up = b.op("stablehlo.ceil", &[x], dims, dt, &[])?;
    let down = b.op("stablehlo.floor", &[x], dims, dt, &[])?;
    select(b, negative, up, down, dims, dt)
}

/// True where `a` and `b` have different signs (`(a < 0) != (b < 0)`).
fn signs_differ<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: V<'c, 'b>,
    y: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let zero = b.splat(Scalar::Int(0), dims, dt)?;
    let xn = b.compare(x, zero, dims, dt, "LT")?;
    let yn = b.compare(y, zero, dims, dt, "LT")?;
    bools(b, "xor", xn, yn, dims)
}

/// Python's `a % b`: the C remainder, moved by `b` when it is non-zero and its sign differs
/// from the divisor's.
pub(super) fn remainder<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: V<'c, 'b>,
    y: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let r = bin(b, "remainder", x, y, dims, dt)?;
    let nonzero = b.compare(r, b.splat(Scalar::Int(0), dims, dt)?, dims, dt, "NE")?;
    let fix = bools(b, "and", nonzero, signs_differ(b, r, y, dims, dt)?, dims)?;
    select(b, fix, bin(b, "add", r, y, dims, dt)?, r, dims, dt)
}

/// `div(a, b, rounding_mode='trunc')`: integer division truncates already; floats truncate the
/// true quotient.
pub(super) fn trunc_div<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: V<'c, 'b>,
    y: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let q = bin(b, "divide", x, y, dims, dt)?;
    if dt.is_float() {
        trunc(b, q, dims, dt)
    } else {
        Ok(q)
    }
}

/// `div(a, b, rounding_mode='floor')`. Integers: the truncated quotient minus one where the
/// remainder is non-zero and the signs differ. Floats: torch's `div_floor_floating`, which
/// derives the quotient from `fmod` so that it is exact where `floor(a / b)` would round.
pub(super) fn floor_div<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: V<'c, 'b>,
    y: V<'c, 'b>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let c = |v: f64| b.splat(Scalar::Float(v), dims, dt);
    let one = b.splat(Scalar::Int(1), dims, dt)?;
    let rem = bin(b, "remainder", x, y, dims, dt)?;
    let rem_nonzero = b.compare(rem, b.splat(Scalar::Int(0), dims, dt)?, dims, dt, "NE")?;
    if !dt.is_float() {
        let q = bin(b, "divide", x, y, dims, dt)?;
        let fix = bools(b, "and", rem_nonzero, signs_differ(b, x, y, dims, dt)?, dims)?;
        return select(b, fix, bin(b, "subtract", q, one, dims, dt)?, q, dims, dt);
    }
    let mut div = bin(b, "divide", bin(b, "subtract", x, rem, dims, dt)?, y, dims, dt)?;
    let fix = bools(b, "and", rem_nonzero, signs_differ(b, y, rem, dims, dt)?, dims)?;
    div = select(b, fix, bin(b, "subtract", div, one, dims, dt)?, div, dims, dt)?;
    let floor = b.op("stablehlo.floor", &[div], dims, dt, &[])?;
    let frac = bin(b, "subtract", div, floor, dims, dt)?;
    let round_up = b.compare(frac, c(0.5)?, dims, dt, "GT")?;
    let floor = select(b, round_up, bin(b, "add", floor, one, dims, dt)?, floor, dims, dt)?;
    // A zero quotient takes the sign of the true quotient; a zero divisor gives a / b (inf/NaN).
    let true_q = bin(b, "divide", x, y, dims, dt)?;
    let q_negative = b.compare(true_q, c(0.0)?, dims, dt, "LT")?;
    let signed_zero = select(b, q_negative, c(-0.0)?, c(0.0)?, dims, dt)?;
    let div_zero = b.compare(div, c(0.0)?, dims, dt, "EQ")?;
    let result = select(b, div_zero, signed_zero, floor, dims, dt)?;
    let y_zero = b.compare(y, c(0.0)?, dims, dt, "EQ")?;
    select(b, y_zero, true_q, result, dims, dt)
}

/// `(0 < x) - (x < 0)` in the float dtype: torch's `sign`, which is 0 for NaN. The sign is
/// read from the bits, because XLA's CPU backend flushes subnormals to zero in comparisons
/// (`sign(1e-40)` must be 1).
pub(super) fn sign<'c, 'b>(b: &Builder<'c, 'b>, x: V<'c, 'b>, dims: &[i64], dt: DType) -> LowerResult<V<'c, 'b>> {
    let (int, min) = match dt.size_bytes() {
        2 => (DType::I16, i64::from(i16::MIN)),
        4 => (DType::I32, i64::from(i32::MIN)),
        8 => (DType::I64, i64::MIN),
        _ => return Err(format!("sign of {dt} is not supported").into()),
    };
    let bits = b.op("stablehlo.bitcast_convert", &[x], dims, int, &[])?;
    let not_nan = b.compare(x, x, dims, dt, "EQ")?;
    let zero = b.splat(Scalar::Int(0), dims, int)?;
    let pos = bools(b, "and", b.compare(bits, zero, dims, int, "GT")?, not_nan, dims)?;
    let below = b.compare(bits, zero, dims, int, "LT")?;
    let not_neg_zero = b.compare(bits, b.splat(Scalar::Int(min), dims, int)?, dims, int, "NE")?;
    let neg = bools(b, "and", bools(b, "and", below, not_neg_zero, dims)?, not_nan, dims)?;
    let pos = b.convert(pos, dims, DType::Bool, dt)?;
    let neg = b.convert(neg, dims, DType::Bool, dt)?;
    bin(b, "subtract", pos, neg, dims, dt)
}

/// `x ** e` for a scalar exponent, with torch's special cases (sqrt for 0.5, rsqrt for -0.5,
/// products for 2 and 3, reciprocals for -1 and -2), which differ from `pow` at the edges
/// (`(-inf) ** 0.5` is NaN).
pub(super) fn pow_scalar<'c, 'b>(
    b: &Builder<'c, 'b>,
    x: V<'c, 'b>,
    e_splat: V<'c, 'b>,
    e: Scalar,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let e = match e {
        Scalar::Bool(v) => f64::from(u8::from(v)),
        Scalar::Int(v) => v as f64,
        Scalar::Float(v) => v,
    };
    let one = || b.splat(Scalar::Int(1), dims, dt);
    let square = || bin(b, "multiply", x, x, dims, dt);
    match e {
        0.5 => b.op("stablehlo.sqrt", &[x], dims, dt, &[]),
        -0.5 => b.op("stablehlo.rsqrt", &[x], dims, dt, &[]),
        1.0 => Ok(x),
        2.0 => square(),
        3.0 => bin(b, "multiply", square()?, x, dims, dt),
        -1.0 => bin(b, "divide", one()?, x, dims, dt),
        -2.0 => bin(b, "divide", one()?, square()?, dims, dt),
        _ => bin(b, "power", x, e_splat, dims, dt),
    }
}
