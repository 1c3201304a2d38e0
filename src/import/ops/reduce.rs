//! Reductions: `sum`, `mean`, `amax`, `amin`, `any`, `argmax`, `argmin`, `cumsum`.

use torchtpu_passes::ir::{ArgReduceOp, Op, ReduceOp};

use super::{Args, Lowering};

pub fn lowering(key: &str) -> Option<Lowering> {
    Some(match key {
        "aten.sum.dim_IntList" => |a| reduce(a, ReduceOp::Sum),
        "aten.sum.default" => |a| reduce_all(a, ReduceOp::Sum),
        "aten.mean.dim" => |a| reduce(a, ReduceOp::Mean),
        "aten.mean.default" => |a| reduce_all(a, ReduceOp::Mean),
        "aten.prod.dim_int" => |a| reduce_one(a, ReduceOp::Prod),
        "aten.amax.default" => |a| reduce(a, ReduceOp::Max),
        "aten.amin.default" => |a| reduce(a, ReduceOp::Min),
        "aten.any.dim" => |a| reduce_one(a, ReduceOp::Any),
        "aten.any.dims" => |a| reduce(a, ReduceOp::Any),
        "aten.any.default" => |a| reduce_all(a, ReduceOp::Any),
        "aten.all.dim" => |a| reduce_one(a, ReduceOp::All),
        "aten.argmax.default" => |a| arg_reduce(a, ArgReduceOp::Argmax),
        "aten.argmin.default" => |a| arg_reduce(a, ArgReduceOp::Argmin),
        "aten.cumsum.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Cumsum { dim: a.int("dim", None)?, dtype: a.dtype("dtype")? })
        },
        _ => return None,
    })
}

/// `int[1]? dim` (empty or omitted: every dim), `keepdim=False`, `dtype=None`.
fn reduce(a: &mut Args<'_>, op: ReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Reduce { op, dims: a.ints("dim", Some(&[]))?, keepdim: a.bool("keepdim", false)?, dtype: a.dtype("dtype")? })
}

/// Overloads with a single required `int dim`.
fn reduce_one(a: &mut Args<'_>, op: ReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Reduce { op, dims: vec![a.int("dim", None)?], keepdim: a.bool("keepdim", false)?, dtype: a.dtype("dtype")? })
}

/// Overloads that reduce every dim.
fn reduce_all(a: &mut Args<'_>, op: ReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Reduce { op, dims: vec![], keepdim: false, dtype: a.dtype("dtype")? })
}

fn arg_reduce(a: &mut Args<'_>, op: ArgReduceOp) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::ArgReduce { op, dim: a.opt_int("dim")?, keepdim: a.bool("keepdim", false)? })
}
