//! Ops given a symbolic number (a size, or arithmetic on sizes) where their schema takes a
//! plain number: `clamp(x, min=-s, max=s)`, `scatter(x, d, idx, s)`, `full_like(x, s)`,
//! `scalar_tensor(s)`, `fill(x, s)`, `select(x, d, s - 1)`. The number is the 0-d value of the node that computes it
//! (evaluated per bucket, as sizes are), converted to the result's dtype as PyTorch converts a
//! Python number, and broadcast where the op puts it.

use torchtpu_passes::ir::ops::{Clamp, ClampTensor, Expand, IndexSelect, Scatter, Squeeze, SymSize, View};
use torchtpu_passes::ir::{BinaryOp, DType, Dim, Op, Operand, ScatterReduce, ValueRef};

use super::super::super::wire::{Decomposition, Recipe, Wire};
use super::{tensor_op, Args, R};
use torchtpu_passes::bug;

/// The decomposition of a target given a symbolic number, if it has one.
pub(in crate::import::ops) fn decomposition(key: &str) -> Option<Decomposition> {
    Some(match key {
        "aten.clamp.default" => clamp,
        "aten.scatter.value" => scatter_value,
        "aten.full_like.default" => |a| fill_like(a, "fill_value"),
        "aten.fill.Scalar" => |a| fill_like(a, "value"),
        "aten.scalar_tensor.default" => scalar_tensor,
        "aten.select.int" => select_at,
        _ => return None,
    })
}

/// An optional number argument: absent, a number, or a symbolic one read as a tensor.
fn number(a: &mut Args<'_>, name: &str) -> R<Option<Operand>> {
    if a.has(name) {
        Ok(Some(a.operand(name)?))
    } else {
        Ok(None)
    }
}

/// The symbolic number `v` as a tensor of the result's dtype and shape.
fn broadcast_number(w: &mut Wire<'_>, v: ValueRef) -> R<ValueRef> {
    let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
    let v = w.convert(v, out.dtype)?;
    if out.rank() == 0 {
        return Ok(v);
    }
    Ok(w.typed(Op::Expand(Expand { size: out.dims.clone() }), &[v], vec![out])?[0])
}

/// `clamp(x, min, max)` = `min(max(x, min), max)`, each bound a number or a symbolic one.
fn clamp(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let bounds = [number(a, "min")?, number(a, "max")?];
    Ok(Box::new(move |w| {
        let out = w.outputs.first().cloned().ok_or_else(|| bug("one result"))?;
        let mut x = w.convert(w.inputs[0], out.dtype)?;
        let mut next = 1;
        for (is_min, bound) in [(true, bounds[0]), (false, bounds[1])] {
            let op = match bound {
                None => continue,
                Some(Operand::Scalar(s)) => {
                    let (min, max) = if is_min { (Some(s), None) } else { (None, Some(s)) };
                    w.op(Op::Clamp(Clamp { min, max }), &[x])?
                }
                Some(Operand::Tensor) => {
                    let b = w.convert(w.inputs[next], out.dtype)?;
                    next += 1;
                    w.op(Op::ClampTensor(ClampTensor { has_min: is_min, has_max: !is_min }), &[x, b])?
                }
            };
            x = op;
        }
        Ok(vec![x])
    }))
}

/// `scatter(x, dim, index, value)`: the value written at every index, as a source of the
/// index's shape.
fn scatter_value(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let dim = a.int("dim", None)?;
    a.tensor("index")?;
    let value = a.operand("value")?;
    Ok(Box::new(move |w| {
        let (x, index) = (w.inputs[0], w.inputs[1]);
        let src = match value {
            Operand::Tensor => {
                let index_ty = w.ty(index);
                let v = w.convert(w.inputs[2], w.ty(x).dtype)?;
                let ty = torchtpu_passes::ir::TensorType { dtype: w.ty(x).dtype, dims: index_ty.dims.clone() };
                w.typed(Op::Expand(Expand { size: index_ty.dims }), &[v], vec![ty])?[0]
            }
            Operand::Scalar(_) => return Err(bug("a scatter of a plain number has a translation")),
        };
        let scatter = Scatter { dim, reduce: ScatterReduce::Replace, include_self: true, value: None };
        Ok(vec![w.op(Op::Scatter(scatter), &[x, index, src])?])
    }))
}

/// `full_like(x, s)` / `fill(x, s)`: `s` in `x`'s shape and the result's dtype.
fn fill_like(a: &mut Args<'_>, name: &'static str) -> R<Recipe> {
    a.tensor("self")?;
    a.operand(name)?;
    Ok(Box::new(move |w| Ok(vec![broadcast_number(w, w.inputs[1])?])))
}

/// `scalar_tensor(s)`: the 0-d value in the result's dtype.
fn scalar_tensor(a: &mut Args<'_>) -> R<Recipe> {
    a.operand("s")?;
    Ok(Box::new(move |w| Ok(vec![broadcast_number(w, w.inputs[0])?])))
}

/// `select(x, dim, i)` at a symbolic index (`x[:, n - 1]`, a table's row `t[n - 1]` or
/// `t[-n]`): the row `i % size` (Python's modulo counts a negative index from the end; the
/// size is the dim's own, real in a bucket) read by `index_select`, and the dim dropped.
fn select_at(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let dim = a.int("dim", None)?;
    if a.operand("index")? != Operand::Tensor {
        return Err(bug("a select at a plain index has a translation"));
    }
    Ok(Box::new(move |w| {
        let (x, i) = (w.inputs[0], w.convert(w.inputs[1], DType::I64)?);
        let size = w.op(Op::SymSize(SymSize { dim }), &[x])?;
        let i = w.op(tensor_op(BinaryOp::Remainder), &[i, size])?;
        let i = w.op(Op::View(View { size: vec![Dim::Static(1)] }), &[i])?;
        let row = w.op(Op::IndexSelect(IndexSelect { dim }), &[x, i])?;
        Ok(vec![w.op(Op::Squeeze(Squeeze { dims: vec![dim] }), &[row])?])
    }))
}
