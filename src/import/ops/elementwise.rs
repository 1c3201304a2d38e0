//! Element-wise ops: unary math, binary arithmetic and comparisons, `where`, `clamp`.

use torchtpu_passes::ir::ops::{
    Binary, Clamp, ClampTensor, Complex, Elu, LeakyRelu, Polar, ViewAsComplex, ViewAsReal, Where,
};
use torchtpu_passes::ir::{BinaryOp, Op, Operand, Scalar, UnaryOp};

use super::{Args, Translation};

pub(super) fn translation(key: &str) -> Option<Translation> {
    Some(match key {
        "aten.abs.default" => |a| unary(a, UnaryOp::Abs),
        "aten.angle.default" => |a| unary(a, UnaryOp::Angle),
        "aten._conj.default" | "aten.conj_physical.default" => |a| unary(a, UnaryOp::Conj),
        "aten.complex.default" => |a| {
            a.tensor("real")?;
            a.tensor("imag")?;
            Ok(Op::Complex(Complex))
        },
        "aten.polar.default" => |a| {
            a.tensor("abs")?;
            a.tensor("angle")?;
            Ok(Op::Polar(Polar))
        },
        "aten.view_as_complex.default" => |a| {
            a.tensor("self")?;
            Ok(Op::ViewAsComplex(ViewAsComplex))
        },
        "aten.view_as_real.default" => |a| {
            a.tensor("self")?;
            Ok(Op::ViewAsReal(ViewAsReal))
        },
        "aten.acos.default" => |a| unary(a, UnaryOp::Acos),
        "aten.acosh.default" => |a| unary(a, UnaryOp::Acosh),
        "aten.asin.default" => |a| unary(a, UnaryOp::Asin),
        "aten.asinh.default" => |a| unary(a, UnaryOp::Asinh),
        "aten.atan.default" => |a| unary(a, UnaryOp::Atan),
        "aten.atanh.default" => |a| unary(a, UnaryOp::Atanh),
        "aten.bitwise_not.default" => |a| unary(a, UnaryOp::BitwiseNot),
        "aten.ceil.default" => |a| unary(a, UnaryOp::Ceil),
        "aten.cosh.default" => |a| unary(a, UnaryOp::Cosh),
        "aten.expm1.default" => |a| unary(a, UnaryOp::Expm1),
        "aten.floor.default" => |a| unary(a, UnaryOp::Floor),
        "aten.isinf.default" => |a| unary(a, UnaryOp::IsInf),
        "aten.signbit.default" => |a| unary(a, UnaryOp::Signbit),
        "aten.isnan.default" => |a| unary(a, UnaryOp::IsNan),
        "aten.log10.default" => |a| unary(a, UnaryOp::Log10),
        "aten.log1p.default" => |a| unary(a, UnaryOp::Log1p),
        "aten.log2.default" => |a| unary(a, UnaryOp::Log2),
        "aten.reciprocal.default" => |a| unary(a, UnaryOp::Reciprocal),
        "aten.round.default" => |a| unary(a, UnaryOp::Round),
        "aten.sign.default" => |a| unary(a, UnaryOp::Sign),
        "aten.sinh.default" => |a| unary(a, UnaryOp::Sinh),
        "aten.tan.default" => |a| unary(a, UnaryOp::Tan),
        "aten.trunc.default" => |a| unary(a, UnaryOp::Trunc),
        "aten.elu.default" => |a| {
            a.tensor("self")?;
            let f = |a: &Args<'_>, n: &str| a.scalar(n, Some(Scalar::Int(1))).map(Scalar::as_f64);
            Ok(Op::Elu(Elu { alpha: f(a, "alpha")?, scale: f(a, "scale")?, input_scale: f(a, "input_scale")? }))
        },
        "aten.hardtanh.default" => |a| {
            a.tensor("self")?;
            let min = a.scalar("min_val", Some(Scalar::Int(-1)))?;
            Ok(Op::Clamp(Clamp { min: Some(min), max: Some(a.scalar("max_val", Some(Scalar::Int(1)))?) }))
        },
        "aten.leaky_relu.default" => |a| {
            a.tensor("self")?;
            Ok(Op::LeakyRelu(LeakyRelu { slope: a.scalar("negative_slope", Some(Scalar::Float(0.01)))?.as_f64() }))
        },
        "aten.atan2.default" | "aten.atan2.out" => |a| binary(a, BinaryOp::Atan2, "other"),
        "aten.bitwise_xor.Tensor" | "aten.bitwise_xor.Scalar" => |a| binary(a, BinaryOp::BitwiseXor, "other"),
        "aten.bitwise_left_shift.Tensor"
        | "aten.bitwise_left_shift.Tensor_Scalar"
        | "aten.bitwise_left_shift.Scalar_Tensor"
        | "aten.__lshift__.Tensor"
        | "aten.__lshift__.Scalar" => |a| binary(a, BinaryOp::ShiftLeft, "other"),
        "aten.bitwise_right_shift.Tensor"
        | "aten.bitwise_right_shift.Tensor_Scalar"
        | "aten.bitwise_right_shift.Scalar_Tensor"
        | "aten.__rshift__.Tensor"
        | "aten.__rshift__.Scalar" => |a| binary(a, BinaryOp::ShiftRight, "other"),
        "aten.logical_xor.default" => |a| binary(a, BinaryOp::LogicalXor, "other"),
        "aten.fmod.Tensor" | "aten.fmod.Scalar" => |a| binary(a, BinaryOp::Fmod, "other"),
        "aten.remainder.Tensor" | "aten.remainder.Scalar" => |a| binary(a, BinaryOp::Remainder, "other"),
        "aten.div.Tensor_mode" | "aten.div.Scalar_mode" => div_mode,
        "aten.pow.Scalar" => |a| binary(a, BinaryOp::Pow, "exponent"),
        "aten.clamp.Tensor" => |a| {
            a.tensor("self")?;
            let has_min = a.opt_tensor("min")?;
            Ok(Op::ClampTensor(ClampTensor { has_min, has_max: a.opt_tensor("max")? }))
        },
        "aten.cos.default" => |a| unary(a, UnaryOp::Cos),
        "aten.erf.default" => |a| unary(a, UnaryOp::Erf),
        "aten.exp.default" => |a| unary(a, UnaryOp::Exp),
        "aten.exp2.default" => |a| unary(a, UnaryOp::Exp2),
        "aten.log.default" => |a| unary(a, UnaryOp::Log),
        "aten.logical_not.default" => |a| unary(a, UnaryOp::LogicalNot),
        "aten.neg.default" => |a| unary(a, UnaryOp::Neg),
        "aten.relu.default" => |a| unary(a, UnaryOp::Relu),
        "aten.rsqrt.default" => |a| unary(a, UnaryOp::Rsqrt),
        "aten.sigmoid.default" => |a| unary(a, UnaryOp::Sigmoid),
        "aten.sin.default" => |a| unary(a, UnaryOp::Sin),
        "aten.sqrt.default" => |a| unary(a, UnaryOp::Sqrt),
        "aten.tanh.default" => |a| unary(a, UnaryOp::Tanh),
        "aten.gelu.default" => gelu,
        "aten.add.Tensor" | "aten.add.Scalar" => |a| binary_alpha(a, BinaryOp::Add),
        "aten.sub.Tensor" | "aten.sub.Scalar" => |a| binary_alpha(a, BinaryOp::Sub),
        "aten.rsub.Scalar" | "aten.rsub.Tensor" => rsub,
        "aten.mul.Tensor" | "aten.mul.Scalar" => |a| binary(a, BinaryOp::Mul, "other"),
        "aten.div.Tensor" | "aten.div.Scalar" => |a| binary(a, BinaryOp::Div, "other"),
        "aten.pow.Tensor_Scalar" | "aten.pow.Tensor_Tensor" => |a| binary(a, BinaryOp::Pow, "exponent"),
        "aten.maximum.default" => |a| binary(a, BinaryOp::Maximum, "other"),
        "aten.minimum.default" => |a| binary(a, BinaryOp::Minimum, "other"),
        "aten.bitwise_and.Tensor" | "aten.bitwise_and.Scalar" => |a| binary(a, BinaryOp::BitwiseAnd, "other"),
        "aten.bitwise_or.Tensor" | "aten.bitwise_or.Scalar" => |a| binary(a, BinaryOp::BitwiseOr, "other"),
        "aten.logical_and.default" => |a| binary(a, BinaryOp::LogicalAnd, "other"),
        "aten.logical_or.default" => |a| binary(a, BinaryOp::LogicalOr, "other"),
        "aten.eq.Tensor" | "aten.eq.Scalar" => |a| binary(a, BinaryOp::Eq, "other"),
        "aten.ne.Tensor" | "aten.ne.Scalar" => |a| binary(a, BinaryOp::Ne, "other"),
        "aten.lt.Tensor" | "aten.lt.Scalar" => |a| binary(a, BinaryOp::Lt, "other"),
        "aten.le.Tensor" | "aten.le.Scalar" => |a| binary(a, BinaryOp::Le, "other"),
        "aten.gt.Tensor" | "aten.gt.Scalar" => |a| binary(a, BinaryOp::Gt, "other"),
        "aten.ge.Tensor" | "aten.ge.Scalar" => |a| binary(a, BinaryOp::Ge, "other"),
        "aten.where.self" => where_self,
        "aten.clamp.default" => clamp,
        _ => return None,
    })
}

fn unary(a: &mut Args<'_>, op: UnaryOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Unary(op))
}

fn gelu(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    match a.string("approximate", "none")?.as_str() {
        "none" => Ok(Op::Unary(UnaryOp::Gelu)),
        "tanh" => Ok(Op::Unary(UnaryOp::GeluTanh)),
        other => Err(format!("argument `approximate`: unknown value `{other}`")),
    }
}

fn binary(a: &mut Args<'_>, op: BinaryOp, rhs_name: &str) -> Result<Op, String> {
    let lhs = a.operand("self")?;
    let rhs = a.operand(rhs_name)?;
    Ok(Op::Binary(Binary { op, lhs, rhs, alpha: None }))
}

/// `add`/`sub` carry `alpha` (default 1), which scales the right operand.
fn binary_alpha(a: &mut Args<'_>, op: BinaryOp) -> Result<Op, String> {
    let alpha = a.opt_scalar("alpha")?.filter(|s| !is_one(s));
    match binary(a, op, "other")? {
        Op::Binary(Binary { op, lhs, rhs, .. }) => Ok(Op::Binary(Binary { op, lhs, rhs, alpha })),
        other => Ok(other),
    }
}

/// `rsub(self, other, alpha) = other - alpha * self`.
fn rsub(a: &mut Args<'_>) -> Result<Op, String> {
    let alpha = a.opt_scalar("alpha")?.filter(|s| !is_one(s));
    let rhs = a.operand("self")?;
    let lhs = a.operand("other")?;
    if lhs == Operand::Tensor && rhs == Operand::Tensor {
        // Both tensors: the slot order must be lhs first; swap the collected names.
        a.tensors.swap(0, 1);
    }
    Ok(Op::Binary(Binary { op: BinaryOp::Sub, lhs, rhs, alpha }))
}

fn is_one(s: &Scalar) -> bool {
    matches!(s, Scalar::Int(1)) || matches!(s, Scalar::Float(x) if *x == 1.0)
}

fn where_self(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("condition")?;
    let on_true = a.operand("self")?;
    let on_false = a.operand("other")?;
    Ok(Op::Where(Where { on_true, on_false }))
}

fn clamp(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Clamp(Clamp { min: a.opt_scalar("min")?, max: a.opt_scalar("max")? }))
}

/// `div(self, other, rounding_mode)`: `None` is true division.
fn div_mode(a: &mut Args<'_>) -> Result<Op, String> {
    let op = match a.string("rounding_mode", "")?.as_str() {
        "" => BinaryOp::Div,
        "trunc" => BinaryOp::TruncDiv,
        "floor" => BinaryOp::FloorDiv,
        other => return Err(format!("argument `rounding_mode`: unknown value `{other}`")),
    };
    binary(a, op, "other")
}
