//! PT2E quantization as IR ops: `quantize_per_tensor`/`_channel`, `dequantize_*` (also with
//! tensor scales) and `fake_quantize_per_tensor_affine_cachemask`, each step as PyTorch's
//! reference computes it (round half to even, clamp, cast).

use torchtpu_passes::ir::ops::{Clamp, View};
use torchtpu_passes::ir::{BinaryOp, DType, Dim, Op, Scalar, UnaryOp, ValueRef};

use super::super::Args;
use super::{reciprocal, scalar_op, tensor_op, R};
use crate::import::wire::{Recipe, Wire};

/// `v` as a 0-d tensor (it must have one element): `.item()` of a scale or zero point.
pub(super) fn as_scalar(w: &mut Wire<'_>, v: ValueRef, what: &str) -> R<ValueRef> {
    let ty = w.ty(v);
    match ty.static_dims() {
        Some(d) if d.is_empty() => Ok(v),
        Some(d) if d.iter().product::<i64>() == 1 => w.op(Op::View(View { size: vec![] }), &[v]),
        _ => Err(format!("the {what} must have one element, found {ty}").into()),
    }
}

/// A per-channel parameter `[C]` viewed as `[1, .., C, .., 1]` with `C` at `axis` of `rank`.
pub(super) fn along_axis(w: &mut Wire<'_>, v: ValueRef, axis: usize, rank: usize) -> R<ValueRef> {
    let ty = w.ty(v);
    if ty.rank() != 1 {
        return Err(format!("per-channel parameters must be 1-d, found {ty}").into());
    }
    let mut size = vec![Dim::Static(1); rank];
    size[axis] = ty.dims[0].clone();
    w.op(Op::View(View { size }), &[v])
}

/// The `axis` argument of the per-channel quantizers (checked against the rank later).
pub(super) fn axis_of(a: &Args<'_>) -> R<usize> {
    let axis = a.int("axis", None)?;
    usize::try_from(axis).map_err(|_| format!("axis {axis} is out of range").into())
}

/// `quantize_per_tensor`: `clamp(round(x * (1/scale)) + zero_point, qmin, qmax).to(dtype)`,
/// in f32 (half inputs are widened first). `.tensor`: scale and zero point are one-element
/// tensors, read as PyTorch's `.item()` does (the reciprocal in the scale's dtype, rounded to
/// f32 as a Python float is when it multiplies an f32 tensor).
pub(super) fn quantize_per_tensor(a: &mut Args<'_>, tensors: bool) -> R<Recipe> {
    a.tensor("input")?;
    let (scale, zero_point) = if tensors {
        a.tensor("scale")?;
        a.tensor("zero_point")?;
        (None, None)
    } else {
        (Some(a.float("scale", None)?), Some(a.int("zero_point", None)?))
    };
    let (qmin, qmax) = (a.int("quant_min", None)?, a.int("quant_max", None)?);
    let dtype = a.dtype("dtype")?.ok_or("missing required argument `dtype`")?;
    Ok(Box::new(move |w| {
        let x = float_input(w, w.inputs[0])?;
        let scaled = match scale {
            Some(s) => w.op(scalar_op(BinaryOp::Mul, Scalar::Float(1.0 / s)), &[x])?,
            None => {
                let s = as_scalar(w, w.inputs[1], "scale")?;
                let inv = w.op(reciprocal(), &[s])?;
                let inv = w.convert(inv, DType::F32)?;
                w.op(tensor_op(BinaryOp::Mul), &[x, inv])?
            }
        };
        let rounded = w.op(Op::Unary(UnaryOp::Round), &[scaled])?;
        let shifted = match zero_point {
            Some(z) => w.op(scalar_op(BinaryOp::Add, Scalar::Int(z)), &[rounded])?,
            None => {
                let z = as_scalar(w, w.inputs[2], "zero point")?;
                w.op(tensor_op(BinaryOp::Add), &[rounded, z])?
            }
        };
        let clamped =
            w.op(Op::Clamp(Clamp { min: Some(Scalar::Int(qmin)), max: Some(Scalar::Int(qmax)) }), &[shifted])?;
        Ok(vec![w.convert(clamped, dtype)?])
    }))
}

/// Quantizers take f32; f16 and bf16 are widened, as PyTorch's reference does.
pub(super) fn float_input(w: &mut Wire<'_>, x: ValueRef) -> R<ValueRef> {
    match w.ty(x).dtype {
        DType::F32 => Ok(x),
        DType::F16 | DType::BF16 => w.convert(x, DType::F32),
        other => Err(format!("quantization takes f32, f16 or bf16 values, found {other}").into()),
    }
}

/// `dequantize_per_tensor`: `(x.to(out_dtype) - zero_point) * scale`.
pub(super) fn dequantize_per_tensor(a: &mut Args<'_>, tensors: bool) -> R<Recipe> {
    a.tensor("input")?;
    let params = if tensors {
        a.tensor("scale")?;
        a.tensor("zero_point")?;
        None
    } else {
        Some((a.float("scale", None)?, a.int("zero_point", None)?))
    };
    let out_dtype = a.dtype("out_dtype")?.unwrap_or(DType::F32);
    Ok(Box::new(move |w| {
        let x = w.convert(w.inputs[0], out_dtype)?;
        let y = match params {
            Some((scale, zero_point)) => {
                let shifted = w.op(scalar_op(BinaryOp::Sub, Scalar::Int(zero_point)), &[x])?;
                w.op(scalar_op(BinaryOp::Mul, Scalar::Float(scale)), &[shifted])?
            }
            None => {
                let z = as_scalar(w, w.inputs[2], "zero point")?;
                let s = as_scalar(w, w.inputs[1], "scale")?;
                let shifted = w.op(tensor_op(BinaryOp::Sub), &[x, z])?;
                w.op(tensor_op(BinaryOp::Mul), &[shifted, s])?
            }
        };
        Ok(vec![w.convert(y, out_dtype)?])
    }))
}

/// `quantize_per_channel`: per channel along `axis`,
/// `clamp(round(x * (1.0 / scales)) + zero_points, qmin, qmax).to(dtype)`.
pub(super) fn quantize_per_channel(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("input")?;
    a.tensor("scales")?;
    a.tensor("zero_points")?;
    let axis = axis_of(a)?;
    let (qmin, qmax) = (a.int("quant_min", None)?, a.int("quant_max", None)?);
    let dtype = a.dtype("dtype")?.ok_or("missing required argument `dtype`")?;
    Ok(Box::new(move |w| {
        let x = float_input(w, w.inputs[0])?;
        let rank = checked_axis(w, x, axis)?;
        let scales = along_axis(w, w.inputs[1], axis, rank)?;
        let zero_points = along_axis(w, w.inputs[2], axis, rank)?;
        let inv = w.op(reciprocal(), &[scales])?;
        let scaled = w.op(tensor_op(BinaryOp::Mul), &[x, inv])?;
        let rounded = w.op(Op::Unary(UnaryOp::Round), &[scaled])?;
        let shifted = w.op(tensor_op(BinaryOp::Add), &[rounded, zero_points])?;
        let clamped =
            w.op(Op::Clamp(Clamp { min: Some(Scalar::Int(qmin)), max: Some(Scalar::Int(qmax)) }), &[shifted])?;
        Ok(vec![w.convert(clamped, dtype)?])
    }))
}

pub(super) fn checked_axis(w: &Wire<'_>, x: ValueRef, axis: usize) -> R<usize> {
    let rank = w.ty(x).rank();
    if axis >= rank {
        return Err(format!("axis {axis} is out of range for a tensor of rank {rank}").into());
    }
    Ok(rank)
}

/// `dequantize_per_channel`: `((x - zero_points) * scales).to(out_dtype)` per channel along
/// `axis` (no zero points: `x * scales`).
pub(super) fn dequantize_per_channel(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("input")?;
    a.tensor("scales")?;
    let has_zero_points = a.opt_tensor("zero_points")?;
    let axis = axis_of(a)?;
    let out_dtype = a.dtype("out_dtype")?.unwrap_or(DType::F32);
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let rank = checked_axis(w, x, axis)?;
        let scales = along_axis(w, w.inputs[1], axis, rank)?;
        let shifted = if has_zero_points {
            let z = along_axis(w, w.inputs[2], axis, rank)?;
            w.op(tensor_op(BinaryOp::Sub), &[x, z])?
        } else {
            x
        };
        let y = w.op(tensor_op(BinaryOp::Mul), &[shifted, scales])?;
        Ok(vec![w.convert(y, out_dtype)?])
    }))
}

/// `fake_quantize_per_tensor_affine_cachemask` as PyTorch's CPU kernel computes it: with
/// `inv = 1.0f / float(scale)`, `q = int64(zero_point + round(x * inv))`, outputs
/// `(clamp(q, qmin, qmax) - zero_point) * float(scale)` and the mask `qmin <= q <= qmax`.
pub(super) fn fake_quantize_cachemask(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let scale = a.float("scale", None)? as f32;
    let zero_point = a.int("zero_point", None)?;
    let (qmin, qmax) = (a.int("quant_min", None)?, a.int("quant_max", None)?);
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        if !ty.dtype.is_float() {
            return Err(format!("fake quantization takes floating-point values, found {}", ty.dtype).into());
        }
        let scaled = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(f64::from(1.0f32 / scale))), &[x])?;
        let rounded = w.op(Op::Unary(UnaryOp::Round), &[scaled])?;
        let shifted = w.op(scalar_op(BinaryOp::Add, Scalar::Int(zero_point)), &[rounded])?;
        let q = w.convert(shifted, DType::I64)?;
        let above = w.op(scalar_op(BinaryOp::Ge, Scalar::Int(qmin)), &[q])?;
        let below = w.op(scalar_op(BinaryOp::Le, Scalar::Int(qmax)), &[q])?;
        let mask = w.op(tensor_op(BinaryOp::LogicalAnd), &[above, below])?;
        let bounds = Op::Clamp(Clamp { min: Some(Scalar::Int(qmin)), max: Some(Scalar::Int(qmax)) });
        let clamped = w.typed(bounds, &[q], vec![w.ty(q)])?[0];
        let centered = w.op(scalar_op(BinaryOp::Sub, Scalar::Int(zero_point)), &[clamped])?;
        let centered = w.convert(centered, ty.dtype)?;
        let y = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(f64::from(scale))), &[centered])?;
        Ok(vec![y, mask])
    }))
}
