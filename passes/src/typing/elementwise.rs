//! Element-wise ops: broadcasting and PyTorch's type promotion (`torch.result_type`).

use super::{broadcast, one, Expected, RuleResult};
use crate::ir::ops::{Binary, Convert, CopyFrom, Identity, Where};
use crate::ir::{BinaryOp, DType, Op, Operand, Scalar, TensorType, UnaryOp};

pub(super) fn infer(op: &Op, inputs: &[&TensorType]) -> RuleResult {
    let x = inputs[0];
    match op {
        Op::Unary(u) => {
            let dtype = match u {
                UnaryOp::LogicalNot | UnaryOp::IsInf | UnaryOp::IsNan => Some(DType::Bool),
                // Integer inputs of the float functions give the default float: left open.
                _ if x.dtype.is_float() => Some(x.dtype),
                _ => None,
            };
            one(Expected { dtype, ..Expected::shape(&x.dims) })
        }
        Op::Binary(Binary { op: b, lhs, rhs, .. }) => {
            let dims = broadcast(&inputs.iter().map(|t| t.dims.as_slice()).collect::<Vec<_>>())?;
            let operands = operands(&[*lhs, *rhs], inputs);
            let promoted = result_type(&operands);
            let logical = matches!(b, BinaryOp::LogicalAnd | BinaryOp::LogicalOr | BinaryOp::LogicalXor);
            let dtype = match b {
                _ if b.is_comparison() || logical => DType::Bool,
                BinaryOp::Div | BinaryOp::Atan2 if !promoted.is_float() && !promoted.is_complex() => DType::F32,
                _ => promoted,
            };
            one(Expected::exact(dtype, &dims))
        }
        Op::Where(Where { on_true, on_false }) => {
            if x.dtype != DType::Bool {
                return Err(format!("the condition is {}, not bool", x.dtype));
            }
            let dims = broadcast(&inputs.iter().map(|t| t.dims.as_slice()).collect::<Vec<_>>())?;
            let dtype = result_type(&operands(&[*on_true, *on_false], &inputs[1..]));
            one(Expected::exact(dtype, &dims))
        }
        Op::ClampTensor(_) => {
            let dims = broadcast(&inputs.iter().map(|t| t.dims.as_slice()).collect::<Vec<_>>())?;
            let all: Vec<_> = inputs.iter().map(|t| (Some(*t), None)).collect();
            one(Expected::exact(result_type(&all), &dims))
        }
        Op::Clamp(_) => {
            let dtype = x.dtype.is_float().then_some(x.dtype);
            one(Expected { dtype, ..Expected::shape(&x.dims) })
        }
        Op::Elu(_) | Op::LeakyRelu(_) | Op::Identity(Identity) => one(Expected::exact(x.dtype, &x.dims)),
        Op::Convert(Convert) | Op::FullLike(_) => one(Expected::shape(&x.dims)),
        Op::CopyFrom(CopyFrom) => {
            broadcast(&[&x.dims, &inputs[1].dims])?;
            one(Expected::exact(x.dtype, &x.dims))
        }
        Op::Dropout(_) => Ok(vec![Expected::exact(x.dtype, &x.dims), Expected::shape(&x.dims)]),
        _ => Err(format!("internal: `{}` is not in this rule family", op.name())),
    }
}

/// Pairs each operand with its tensor type or scalar value, tensors taken from `tensors` in order.
fn operands<'t>(ops: &[Operand], tensors: &[&'t TensorType]) -> Vec<(Option<&'t TensorType>, Option<Scalar>)> {
    let mut next = tensors.iter();
    ops.iter()
        .map(|o| match o {
            Operand::Scalar(s) => (None, Some(*s)),
            Operand::Tensor => (next.next().copied(), None),
        })
        .collect()
}

/// Category used by torch's promotion: bool < integer < floating < complex.
fn category(d: DType) -> u8 {
    if d == DType::Bool {
        0
    } else if d.is_integer() {
        1
    } else if d.is_float() {
        2
    } else {
        3
    }
}

/// Promotion of two dtypes of tensors of the same priority (`torch.promote_types`).
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    let (ca, cb) = (category(a), category(b));
    if ca != cb {
        return if ca > cb { a } else { b };
    }
    let unsigned = |d: DType| matches!(d, U8 | U16 | U32 | U64);
    match (a, b) {
        (F16, BF16) | (BF16, F16) => F32,
        _ if ca == 1 && unsigned(a) != unsigned(b) => {
            // Mixed signedness: the signed type must hold the unsigned one's range.
            let (s, u) = if unsigned(a) { (b, a) } else { (a, b) };
            match (s.size_bytes(), u.size_bytes()) {
                (ss, us) if ss > us => s,
                (_, 1) => I16,
                (_, 2) => I32,
                _ => I64,
            }
        }
        _ if a.size_bytes() >= b.size_bytes() => a,
        _ => b,
    }
}

/// torch's `result_type` for tensor and scalar operands: dimensioned tensors first, then
/// 0-d tensors and scalars only when they are of a higher category.
pub fn result_type(operands: &[(Option<&TensorType>, Option<Scalar>)]) -> DType {
    let fold = |it: &mut dyn Iterator<Item = DType>| it.reduce(promote_types);
    let dimmed = fold(&mut operands.iter().filter_map(|(t, _)| t.filter(|t| t.rank() > 0)).map(|t| t.dtype));
    let zero = fold(&mut operands.iter().filter_map(|(t, _)| t.filter(|t| t.rank() == 0)).map(|t| t.dtype));
    let wrapped = fold(&mut operands.iter().filter_map(|(_, s)| *s).map(|s| match s {
        Scalar::Bool(_) => DType::Bool,
        Scalar::Int(_) => DType::I64,
        Scalar::Float(_) => DType::F32,
    }));
    let mut result = dimmed;
    for next in [zero, wrapped].into_iter().flatten() {
        result = Some(match result {
            None => next,
            Some(r) if category(next) > category(r) => next,
            Some(r) => r,
        });
    }
    result.unwrap_or(DType::F32)
}
