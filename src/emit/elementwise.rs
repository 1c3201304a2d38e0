//! Element-wise lowerings with PyTorch's broadcasting and type promotion.
//!
//! The export records every result dtype, so arithmetic computes directly in the output dtype.
//! Comparisons compute in the promoted operand dtype (torch's `result_type`), where Python
//! scalars ("wrapped numbers") never raise a tensor's dtype within its category.

use melior::ir::Value;
pub(super) use torchtpu_passes::ir::ops::result_type;
use torchtpu_passes::ir::ops::Elu;
use torchtpu_passes::ir::{BinaryOp, DType, Operand, Scalar, TensorType, UnaryOp};

use super::builder::{bug, static_dims, Builder, LowerResult};
use super::{complex, math, Arg};

/// A tensor or scalar operand, converted to `dtype` and broadcast to `dims`.
fn operand<'c, 'b, 't>(
    b: &Builder<'c, 'b>,
    o: Operand,
    tensors: &mut impl Iterator<Item = Arg<'c, 'b, 't>>,
    dims: &[i64],
    dtype: DType,
) -> LowerResult<Value<'c, 'b>> {
    match o {
        Operand::Scalar(s) => b.splat(s, dims, dtype),
        Operand::Tensor => {
            let a = tensors.next().ok_or_else(|| bug("missing tensor operand"))?;
            let from = static_dims(a.ty)?;
            let v = b.convert(a.v, &from, a.ty.dtype, dtype)?;
            b.broadcast_to(v, &from, dims, dtype)
        }
    }
}

fn kinds(o: Operand, tensors: &mut impl Iterator<Item = TensorType>) -> (Option<TensorType>, Option<Scalar>) {
    match o {
        Operand::Scalar(s) => (None, Some(s)),
        Operand::Tensor => (tensors.next(), None),
    }
}

pub(super) fn unary<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: UnaryOp,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    match op {
        UnaryOp::LogicalNot => {
            let v = b.convert(x.v, &dims, x.ty.dtype, DType::Bool)?;
            return b.op("stablehlo.not", &[v], &dims, DType::Bool, &[]);
        }
        UnaryOp::IsNan | UnaryOp::IsInf => return math::classify(b, op, x.v, &dims, x.ty.dtype),
        UnaryOp::Signbit => return math::signbit(b, x.v, &dims, x.ty.dtype),
        UnaryOp::Conj => return complex::conj(b, x, &dims, dt),
        UnaryOp::Angle => return complex::angle(b, x, &dims, dt),
        // |a + bi|, real: `stablehlo.abs` of the complex value itself.
        UnaryOp::Abs if x.ty.dtype.is_complex() && !dt.is_complex() => {
            let part = x.ty.dtype.complex_part().ok_or_else(|| bug("a complex dtype without parts"))?;
            let magnitude = b.op("stablehlo.abs", &[x.v], &dims, part, &[])?;
            return b.convert(magnitude, &dims, part, dt);
        }
        _ => {}
    }
    let v = b.convert(x.v, &dims, x.ty.dtype, dt)?;
    let simple = |name: &str| b.op(name, &[v], &dims, dt, &[]);
    // Rounding is the identity on integers (torch keeps their dtype).
    let rounding = |name: &str| if dt.is_float() { simple(name) } else { Ok(v) };
    match op {
        UnaryOp::Abs => simple("stablehlo.abs"),
        UnaryOp::Acos => simple("chlo.acos"),
        UnaryOp::Acosh => simple("chlo.acosh"),
        UnaryOp::Asin => simple("chlo.asin"),
        UnaryOp::Asinh => simple("chlo.asinh"),
        UnaryOp::Atan => simple("chlo.atan"),
        UnaryOp::Atanh => simple("chlo.atanh"),
        UnaryOp::BitwiseNot => simple("stablehlo.not"),
        UnaryOp::Ceil => rounding("stablehlo.ceil"),
        UnaryOp::Cos => simple("stablehlo.cosine"),
        UnaryOp::Cosh => simple("chlo.cosh"),
        UnaryOp::Sin => simple("stablehlo.sine"),
        UnaryOp::Sinh => simple("chlo.sinh"),
        UnaryOp::Tan => simple("chlo.tan"),
        UnaryOp::Exp => simple("stablehlo.exponential"),
        UnaryOp::Exp2 => b.op("stablehlo.power", &[b.splat(Scalar::Int(2), &dims, dt)?, v], &dims, dt, &[]),
        UnaryOp::Expm1 => simple("stablehlo.exponential_minus_one"),
        UnaryOp::Floor => rounding("stablehlo.floor"),
        UnaryOp::Log => simple("stablehlo.log"),
        UnaryOp::Log1p => simple("stablehlo.log_plus_one"),
        UnaryOp::Log2 => math::log_base(b, v, &dims, dt, std::f64::consts::LN_2),
        UnaryOp::Log10 => math::log_base(b, v, &dims, dt, std::f64::consts::LN_10),
        UnaryOp::Neg => simple("stablehlo.negate"),
        UnaryOp::Reciprocal => b.op("stablehlo.divide", &[b.splat(Scalar::Int(1), &dims, dt)?, v], &dims, dt, &[]),
        UnaryOp::Round => rounding("stablehlo.round_nearest_even"),
        UnaryOp::Rsqrt => simple("stablehlo.rsqrt"),
        UnaryOp::Sign if dt == DType::Bool => Ok(v),
        // torch's sign is `(0 < x) - (x < 0)`: 0 for NaN, where stablehlo.sign gives NaN.
        UnaryOp::Sign if dt.is_float() => math::sign(b, v, &dims, dt),
        UnaryOp::Sign => simple("stablehlo.sign"),
        UnaryOp::Sqrt => simple("stablehlo.sqrt"),
        UnaryOp::Sigmoid => simple("stablehlo.logistic"),
        UnaryOp::Tanh => simple("stablehlo.tanh"),
        UnaryOp::Trunc if dt.is_float() => math::trunc(b, v, &dims, dt),
        UnaryOp::Trunc => Ok(v),
        UnaryOp::Erf => simple("chlo.erf"),
        UnaryOp::Relu => b.bound(v, Scalar::Int(0), &dims, dt, true),
        UnaryOp::Gelu => gelu_erf(b, v, &dims, dt),
        UnaryOp::GeluTanh => gelu_tanh(b, v, &dims, dt),
        UnaryOp::LogicalNot | UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::Signbit | UnaryOp::Conj | UnaryOp::Angle => {
            unreachable!("handled above")
        }
    }
}

/// `0.5 * x * (1 + erf(x / sqrt(2)))`.
fn gelu_erf<'c, 'b>(b: &Builder<'c, 'b>, x: Value<'c, 'b>, dims: &[i64], dt: DType) -> LowerResult<Value<'c, 'b>> {
    let c = |v: f64| b.splat(Scalar::Float(v), dims, dt);
    let scaled = b.op("stablehlo.multiply", &[x, c(std::f64::consts::FRAC_1_SQRT_2)?], dims, dt, &[])?;
    let erf = b.op("chlo.erf", &[scaled], dims, dt, &[])?;
    let one_plus = b.op("stablehlo.add", &[erf, c(1.0)?], dims, dt, &[])?;
    let half_x = b.op("stablehlo.multiply", &[x, c(0.5)?], dims, dt, &[])?;
    let y = b.op("stablehlo.multiply", &[half_x, one_plus], dims, dt, &[])?;
    // torch's CPU kernel gives NaN at +-inf (its vectorized erf does); match it.
    let abs = b.op("stablehlo.abs", &[x], dims, dt, &[])?;
    let inf = b.compare(abs, c(f64::INFINITY)?, dims, dt, "EQ")?;
    b.op("stablehlo.select", &[inf, c(f64::NAN)?, y], dims, dt, &[])
}

/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`.
fn gelu_tanh<'c, 'b>(b: &Builder<'c, 'b>, x: Value<'c, 'b>, dims: &[i64], dt: DType) -> LowerResult<Value<'c, 'b>> {
    let c = |v: f64| b.splat(Scalar::Float(v), dims, dt);
    let mul = |p: Value<'c, 'b>, q: Value<'c, 'b>| b.op("stablehlo.multiply", &[p, q], dims, dt, &[]);
    let x3 = mul(mul(x, x)?, x)?;
    let inner = b.op("stablehlo.add", &[x, mul(x3, c(0.044715)?)?], dims, dt, &[])?;
    let t = b.op("stablehlo.tanh", &[mul(inner, c((2.0 / std::f64::consts::PI).sqrt())?)?], dims, dt, &[])?;
    let one_plus = b.op("stablehlo.add", &[t, c(1.0)?], dims, dt, &[])?;
    mul(mul(x, c(0.5)?)?, one_plus)
}

pub(super) fn binary<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: BinaryOp,
    lhs: Operand,
    rhs: Operand,
    alpha: Option<Scalar>,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let compute = if op.is_comparison() {
        let mut tys = args.iter().map(|a| a.ty.clone());
        let l = kinds(lhs, &mut tys);
        let r = kinds(rhs, &mut tys);
        result_type(&[(l.0.as_ref(), l.1), (r.0.as_ref(), r.1)])
    } else if matches!(op, BinaryOp::LogicalAnd | BinaryOp::LogicalOr | BinaryOp::LogicalXor) {
        DType::Bool
    } else {
        out.dtype
    };
    let mut tensors = args.iter().copied();
    let l = operand(b, lhs, &mut tensors, &dims, compute)?;
    let mut r = operand(b, rhs, &mut tensors, &dims, compute)?;
    if let Some(alpha) = alpha {
        let a = b.splat(alpha, &dims, compute)?;
        r = b.op("stablehlo.multiply", &[r, a], &dims, compute, &[])?;
    }
    let direction = match op {
        BinaryOp::Eq => Some("EQ"),
        BinaryOp::Ne => Some("NE"),
        BinaryOp::Lt => Some("LT"),
        BinaryOp::Le => Some("LE"),
        BinaryOp::Gt => Some("GT"),
        BinaryOp::Ge => Some("GE"),
        _ => None,
    };
    if let Some(dir) = direction {
        return b.compare(l, r, &dims, compute, dir);
    }
    let name = match op {
        BinaryOp::Fmod => "stablehlo.remainder",
        BinaryOp::Remainder => return b.convert(math::remainder(b, l, r, &dims, compute)?, &dims, compute, out.dtype),
        BinaryOp::FloorDiv => return b.convert(math::floor_div(b, l, r, &dims, compute)?, &dims, compute, out.dtype),
        BinaryOp::TruncDiv => return b.convert(math::trunc_div(b, l, r, &dims, compute)?, &dims, compute, out.dtype),
        BinaryOp::Atan2 => "stablehlo.atan2",
        BinaryOp::BitwiseXor | BinaryOp::LogicalXor => "stablehlo.xor",
        // StableHLO's shifts give 0 (or the sign) for shifts of the bit width or more, as torch.
        BinaryOp::ShiftLeft => "stablehlo.shift_left",
        BinaryOp::ShiftRight if matches!(compute, DType::U8 | DType::U16 | DType::U32 | DType::U64) => {
            "stablehlo.shift_right_logical"
        }
        BinaryOp::ShiftRight => "stablehlo.shift_right_arithmetic",
        BinaryOp::Add => "stablehlo.add",
        BinaryOp::Sub => "stablehlo.subtract",
        BinaryOp::Mul => "stablehlo.multiply",
        BinaryOp::Div => "stablehlo.divide",
        BinaryOp::Pow => match rhs {
            Operand::Scalar(e) if compute.is_float() => {
                return b.convert(math::pow_scalar(b, l, r, e, &dims, compute)?, &dims, compute, out.dtype)
            }
            _ => "stablehlo.power",
        },
        BinaryOp::Maximum => return b.convert(b.extremum(l, r, &dims, compute, true)?, &dims, compute, out.dtype),
        BinaryOp::Minimum => return b.convert(b.extremum(l, r, &dims, compute, false)?, &dims, compute, out.dtype),

        BinaryOp::BitwiseAnd | BinaryOp::LogicalAnd => "stablehlo.and",
        BinaryOp::BitwiseOr | BinaryOp::LogicalOr => "stablehlo.or",
        _ => unreachable!("comparisons handled above"),
    };
    let v = b.op(name, &[l, r], &dims, compute, &[])?;
    b.convert(v, &dims, compute, out.dtype)
}

pub(super) fn select<'c, 'b>(
    b: &Builder<'c, 'b>,
    on_true: Operand,
    on_false: Operand,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let mut tensors = args.iter().copied();
    let cond = operand(b, Operand::Tensor, &mut tensors, &dims, DType::Bool)?;
    let t = operand(b, on_true, &mut tensors, &dims, out.dtype)?;
    let f = operand(b, on_false, &mut tensors, &dims, out.dtype)?;
    b.op("stablehlo.select", &[cond, t, f], &dims, out.dtype, &[])
}

/// `clamp(x, min, max)`: NaN stays NaN, as in torch (maximum/minimum propagate NaN).
pub(super) fn clamp<'c, 'b>(
    b: &Builder<'c, 'b>,
    min: Option<Scalar>,
    max: Option<Scalar>,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let mut v = b.convert(x.v, &dims, x.ty.dtype, out.dtype)?;
    if let Some(lo) = min {
        v = b.bound(v, lo, &dims, out.dtype, true)?;
    }
    if let Some(hi) = max {
        v = b.bound(v, hi, &dims, out.dtype, false)?;
    }
    Ok(v)
}

/// `clamp.Tensor(x, min, max)` with broadcast bounds.
pub(super) fn clamp_tensor<'c, 'b>(
    b: &Builder<'c, 'b>,
    has_min: bool,
    has_max: bool,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let mut tensors = args.iter().copied();
    let mut v = operand(b, Operand::Tensor, &mut tensors, &dims, out.dtype)?;
    for (present, max) in [(has_min, true), (has_max, false)] {
        if present {
            let bound = operand(b, Operand::Tensor, &mut tensors, &dims, out.dtype)?;
            v = b.extremum(v, bound, &dims, out.dtype, max)?;
        }
    }
    Ok(v)
}

/// `elu(x) = x > 0 ? scale*x : scale*alpha*expm1(input_scale*x)`.
pub(super) fn elu<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Elu,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let &Elu { alpha, scale, input_scale } = op;
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let c = |v: f64| b.splat(Scalar::Float(v), &dims, dt);
    let v = b.convert(x.v, &dims, x.ty.dtype, dt)?;
    let mul = |p: Value<'c, 'b>, q: Value<'c, 'b>| b.op("stablehlo.multiply", &[p, q], &dims, dt, &[]);
    let negative = b.op("stablehlo.exponential_minus_one", &[mul(v, c(input_scale)?)?], &dims, dt, &[])?;
    let negative = mul(negative, c(scale * alpha)?)?;
    let positive = mul(v, c(scale)?)?;
    let is_pos = b.compare(v, c(0.0)?, &dims, dt, "GT")?;
    b.op("stablehlo.select", &[is_pos, positive, negative], &dims, dt, &[])
}

/// `leaky_relu(x) = x > 0 ? x : slope*x`.
pub(super) fn leaky_relu<'c, 'b>(
    b: &Builder<'c, 'b>,
    slope: f64,
    x: Arg<'c, 'b, '_>,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let v = b.convert(x.v, &dims, x.ty.dtype, dt)?;
    let zero = b.splat(Scalar::Float(0.0), &dims, dt)?;
    let scaled = b.op("stablehlo.multiply", &[v, b.splat(Scalar::Float(slope), &dims, dt)?], &dims, dt, &[])?;
    let is_pos = b.compare(v, zero, &dims, dt, "GT")?;
    b.op("stablehlo.select", &[is_pos, v, scaled], &dims, dt, &[])
}
