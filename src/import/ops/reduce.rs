//! Reductions: `sum`, `mean`, `amax`, `amin`, `any`, `argmax`, `argmin`, and the running ones
//! (`cumsum`, `cumprod`, `logcumsumexp`).

use torchtpu_passes::ir::ops::{ArgReduce, Convert, Cumulative, ExtremumDim, Histc, Reduce, Sort, TopK, Var};
use torchtpu_passes::ir::{ArgReduceOp, CumulativeOp, Op, ReduceOp, Scalar};

use super::{Args, Translation};

pub(super) fn translation(key: &str) -> Option<Translation> {
    Some(match key {
        "aten.sum.dim_IntList" => |a| reduce(a, ReduceOp::Sum),
        "aten.sum.default" => |a| reduce_all(a, ReduceOp::Sum),
        "aten.mean.dim" => |a| reduce(a, ReduceOp::Mean),
        "aten.mean.default" => |a| reduce_all(a, ReduceOp::Mean),
        "aten.prod.dim_int" => |a| reduce_one(a, ReduceOp::Prod),
        "aten.amax.default" => |a| reduce(a, ReduceOp::Max),
        "aten.amin.default" => |a| reduce(a, ReduceOp::Min),
        "aten.any.dim" => |a| reduce_one(a, ReduceOp::Any),
        "aten.any.dims" => |a| match a.ints("dim", None) {
            // An explicit empty list reduces nothing: the result is `self != 0`.
            Ok(d) if d.is_empty() => {
                a.tensor("self")?;
                Ok(Op::Convert(Convert))
            }
            _ => reduce(a, ReduceOp::Any),
        },
        "aten.any.default" => |a| reduce_all(a, ReduceOp::Any),
        "aten.all.dim" => |a| reduce_one(a, ReduceOp::All),
        "aten.prod.default" => |a| reduce_all(a, ReduceOp::Prod),
        "aten.max.default" => |a| reduce_all(a, ReduceOp::Max),
        "aten.min.default" => |a| reduce_all(a, ReduceOp::Min),
        "aten.var.correction" => |a| {
            a.tensor("self")?;
            let correction = a.opt_scalar("correction")?.map_or(1.0, Scalar::as_f64);
            Ok(Op::Var(Var { dims: a.ints("dim", Some(&[]))?, correction, keepdim: a.bool("keepdim", false)? }))
        },
        "aten.var.dim" => |a| {
            a.tensor("self")?;
            let correction = if a.bool("unbiased", true)? { 1.0 } else { 0.0 };
            Ok(Op::Var(Var { dims: a.ints("dim", Some(&[]))?, correction, keepdim: a.bool("keepdim", false)? }))
        },
        "aten.max.dim" => |a| extremum(a, true),
        "aten.min.dim" => |a| extremum(a, false),
        "aten.sort.default" | "aten.sort.stable" => |a| {
            a.tensor("self")?;
            let stable = a.bool("stable", false)?;
            Ok(Op::Sort(Sort { dim: a.int("dim", Some(-1))?, descending: a.bool("descending", false)?, stable }))
        },
        "aten.topk.default" => |a| {
            a.tensor("self")?;
            let k = a.dim("k", None)?;
            Ok(Op::TopK(TopK { k, dim: a.int("dim", Some(-1))?, largest: a.bool("largest", true)? }))
        },
        "aten.argmax.default" => |a| arg_reduce(a, ArgReduceOp::Argmax),
        "aten.argmin.default" => |a| arg_reduce(a, ArgReduceOp::Argmin),
        "aten.cumsum.default" => |a| cumulative(a, CumulativeOp::Cumsum),
        "aten.cumprod.default" => |a| cumulative(a, CumulativeOp::Cumprod),
        "aten.logcumsumexp.default" => |a| cumulative(a, CumulativeOp::Logcumsumexp),
        "aten.histc.default" => histc,
        _ => return None,
    })
}

/// `int[1]? dim` (empty or omitted: every dim), `keepdim=False`, `dtype=None`.
fn reduce(a: &mut Args<'_>, op: ReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Reduce(Reduce {
        op,
        dims: a.ints("dim", Some(&[]))?,
        keepdim: a.bool("keepdim", false)?,
        dtype: a.dtype("dtype")?,
    }))
}

/// Overloads with a single required `int dim`.
fn reduce_one(a: &mut Args<'_>, op: ReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Reduce(Reduce {
        op,
        dims: vec![a.int("dim", None)?],
        keepdim: a.bool("keepdim", false)?,
        dtype: a.dtype("dtype")?,
    }))
}

/// Overloads that reduce every dim.
fn reduce_all(a: &mut Args<'_>, op: ReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Reduce(Reduce { op, dims: vec![], keepdim: false, dtype: a.dtype("dtype")? }))
}

fn cumulative(a: &mut Args<'_>, op: CumulativeOp) -> Result<Op, String> {
    a.tensor("self")?;
    let dtype = if op == CumulativeOp::Logcumsumexp { None } else { a.dtype("dtype")? };
    Ok(Op::Cumulative(Cumulative { op, dim: a.int("dim", None)?, dtype }))
}

fn arg_reduce(a: &mut Args<'_>, op: ArgReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::ArgReduce(ArgReduce { op, dim: a.opt_int("dim")?, keepdim: a.bool("keepdim", false)? }))
}

fn extremum(a: &mut Args<'_>, max: bool) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::ExtremumDim(ExtremumDim { max, dim: a.int("dim", None)?, keepdim: a.bool("keepdim", false)? }))
}

/// `histc(self, bins=100, min=0, max=0)`; `min == max` takes the range from the data, which
/// a compiled program would have to reduce first: refused for now.
fn histc(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    let bins = a.int("bins", Some(100))?;
    let min = a.scalar("min", Some(Scalar::Int(0)))?.as_f64();
    let max = a.scalar("max", Some(Scalar::Int(0)))?.as_f64();
    if min == max {
        return Err(
            "`histc` with min == max takes its range from the data, which is not supported; give the range".into()
        );
    }
    Ok(Op::Histc(Histc { bins, min, max }))
}
