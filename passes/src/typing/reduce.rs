//! Reductions and ops along one dim: sums and extrema, arg-reductions, variance, sort, top-k,
//! cumulative sums and softmax.

use crate::ir::ops::{ArgReduce, Cumulative, ExtremumDim, Histc, Reduce, Softmax, Sort, TopK, Var};
use std::collections::BTreeSet;

use super::{dim_index, one, show, Expected, RuleResult};
use crate::ir::{CumulativeOp, DType, Dim, Op, ReduceOp, TensorType};

pub(super) fn infer(op: &Op, inputs: &[&TensorType]) -> RuleResult {
    let x = inputs[0];
    match op {
        Op::Reduce(Reduce { op: r, dims, keepdim, dtype }) => {
            let out = reduced(x, dims, *keepdim)?;
            let dtype = dtype.unwrap_or(match r {
                ReduceOp::Sum | ReduceOp::Prod if !x.dtype.is_float() && !x.dtype.is_complex() => DType::I64,
                ReduceOp::Any | ReduceOp::All if x.dtype != DType::U8 => DType::Bool,
                _ => x.dtype,
            });
            one(Expected::exact(dtype, &out))
        }
        Op::ArgReduce(ArgReduce { dim, keepdim, .. }) => {
            let out = match dim {
                Some(d) => reduced(x, &[*d], *keepdim)?,
                None if *keepdim => vec![Dim::Static(1); x.rank()],
                None => vec![],
            };
            one(Expected::exact(DType::I64, &out))
        }
        Op::Var(Var { dims, keepdim, .. }) => {
            let out = reduced(x, dims, *keepdim)?;
            one(Expected { dtype: x.dtype.is_float().then_some(x.dtype), ..Expected::shape(&out) })
        }
        Op::ExtremumDim(ExtremumDim { dim, keepdim, .. }) => {
            let out = reduced(x, &[*dim], *keepdim)?;
            Ok(vec![Expected::exact(x.dtype, &out), Expected::exact(DType::I64, &out)])
        }
        Op::Sort(Sort { dim, .. }) => {
            dim_index(*dim, x.rank())?;
            Ok(vec![Expected::exact(x.dtype, &x.dims), Expected::exact(DType::I64, &x.dims)])
        }
        Op::TopK(TopK { k, dim, .. }) => {
            let d = dim_index(*dim, x.rank())?;
            let size = x.dims.get(d).and_then(Dim::as_static).unwrap_or(1);
            if *k < 0 || (x.dims.get(d).is_some_and(|d| d.as_static().is_some()) && *k > size) {
                return Err(format!("k = {k} is out of range for dim {d} of {}", show(&x.dims)));
            }
            let mut out = x.dims.clone();
            if let Some(slot) = out.get_mut(d) {
                *slot = Dim::Static(*k);
            }
            Ok(vec![Expected::exact(x.dtype, &out), Expected::exact(DType::I64, &out)])
        }
        Op::Cumulative(Cumulative { op, dim, dtype }) => {
            dim_index(*dim, x.rank())?;
            if *op == CumulativeOp::Logcumsumexp && !(x.dtype.is_float() || x.dtype.is_complex()) {
                return Err(format!("logcumsumexp takes floating-point values, found {}", x.dtype));
            }
            let dtype = dtype.unwrap_or(if x.dtype.is_float() || x.dtype.is_complex() { x.dtype } else { DType::I64 });
            one(Expected::exact(dtype, &x.dims))
        }
        Op::Histc(Histc { bins, min, max }) => {
            if *bins < 1 || min.partial_cmp(max) != Some(std::cmp::Ordering::Less) {
                return Err(format!("histc needs bins ≥ 1 and min < max, found {bins} bins over [{min}, {max}]"));
            }
            if !x.dtype.is_float() {
                return Err(format!("histc counts floating-point values, found {}", x.dtype));
            }
            one(Expected::exact(x.dtype, &[Dim::Static(*bins)]))
        }
        Op::Softmax(Softmax { dim, .. }) => {
            dim_index(*dim, x.rank())?;
            one(Expected::exact(x.dtype, &x.dims))
        }
        _ => Err(format!("internal: `{}` is not in this rule family", op.name())),
    }
}

/// The dims left after reducing `dims` (all when empty): removed, or 1 with `keepdim`.
/// Each dim may be named once; a 0-d operand accepts 0 and -1 and stays 0-d.
fn reduced(x: &TensorType, dims: &[i64], keepdim: bool) -> Result<Vec<Dim>, String> {
    let listed: Vec<usize> = dims.iter().map(|&d| dim_index(d, x.rank())).collect::<Result<_, _>>()?;
    if listed.iter().collect::<BTreeSet<_>>().len() != listed.len() {
        return Err(format!("dims {dims:?} name a dim more than once"));
    }
    let all = dims.is_empty();
    Ok(x.dims
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match all || listed.contains(&i) {
            true if keepdim => Some(Dim::Static(1)),
            true => None,
            false => Some(d.clone()),
        })
        .collect())
}
