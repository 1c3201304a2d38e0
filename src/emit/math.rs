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
pub fn classify<'c, 'b>(
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

/// `log(x) / ln(base)`.
pub fn log_base<'c, 'b>(
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
pub fn trunc<'c, 'b>(b: &Builder<'c, 'b>, x: V<'c, 'b>, dims: &[i64], dt: DType) -> LowerResult<V<'c, 'b>> {
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
pub fn remainder<'c, 'b>(
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
pub fn trunc_div<'c, 'b>(
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
pub fn floor_div<'c, 'b>(
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
