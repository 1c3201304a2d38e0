//! Control flow: `cond` as `stablehlo.if`, `while_loop` as `stablehlo.while`, and `scan` (and
//! `map`) as a `stablehlo.while` over the scanned dim that slices each step's operands and
//! writes each step's results into the stacked outputs.
//!
//! A region's nodes are lowered into the block of its StableHLO region by the same code as the
//! program's (`emit_nodes`). The branches of an `if` read the operands from the enclosing
//! block; a loop's regions take every value they read as block arguments (the loop carries
//! the values that never change too, so its regions read nothing from outside). The loop
//! counter of a scan is an `i32`.

use melior::ir::block::BlockLike;
use melior::ir::operation::OperationBuilder;
use melior::ir::{Block, Region, RegionLike, Value};
use torchtpu_passes::ir::ops::{Cond, Scan, WhileLoop};
use torchtpu_passes::ir::{DType, Graph, Scalar, TensorType};

use super::builder::{bug, static_dims, Builder, Fail, LowerResult};
use super::{Arg, EmitError, EmitOptions};

/// `cond`: `stablehlo.if` on the predicate, each branch lowered into its region.
pub(super) fn cond<'c, 'b>(
    b: &Builder<'c, 'b>,
    c: &Cond,
    args: &[Arg<'c, 'b, '_>],
    out: &[TensorType],
    opts: &EmitOptions,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let pred = scalar_predicate(b, args[0])?;
    let mut regions = Vec::with_capacity(2);
    for branch in [&c.then, &c.otherwise] {
        let block = Block::new(&[]);
        {
            let inner = Builder { ctx: b.ctx, block: &block, loc: b.loc };
            let operands: Vec<Value> = args[1..].iter().map(|a| a.v).collect();
            let results = inline(&inner, &branch.0, operands, opts)?;
            ret(&inner, &results)?;
        }
        regions.push(region_of(block));
    }
    let shapes = shapes(out)?;
    b.op_n("stablehlo.if", &[pred], &as_results(&shapes), &[], regions)
}

/// `while_loop`: `stablehlo.while` over every operand; the body returns the extra operands
/// unchanged after the carried ones.
pub(super) fn while_loop<'c, 'b>(
    b: &Builder<'c, 'b>,
    w: &WhileLoop,
    args: &[Arg<'c, 'b, '_>],
    opts: &EmitOptions,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let types: Vec<&TensorType> = args.iter().map(|a| a.ty).collect();
    let cond = loop_region(b, &types, |inner, params| {
        let results = inline(inner, &w.cond.0, params.to_vec(), opts)?;
        let ty = w.cond.output_types()[0].clone();
        Ok(vec![scalar_predicate(inner, Arg { v: results[0], ty: &ty })?])
    })?;
    let body = loop_region(b, &types, |inner, params| {
        let mut results = inline(inner, &w.body.0, params.to_vec(), opts)?;
        results.extend_from_slice(&params[w.carried..]);
        Ok(results)
    })?;
    let shapes = shapes(types.iter().copied())?;
    let operands: Vec<Value> = args.iter().map(|a| a.v).collect();
    let mut results = b.op_n("stablehlo.while", &operands, &as_results(&shapes), &[], vec![cond, body])?;
    results.truncate(w.carried);
    Ok(results)
}

/// `scan`: a `stablehlo.while` carrying `[i, carry…, ys…, xs…, extra…]`; step `i` reads each
/// `xs`'s slice `i`, runs the body, and writes each `y` into row `i` of its `ys`.
pub(super) fn scan<'c, 'b>(
    b: &Builder<'c, 'b>,
    s: &Scan,
    args: &[Arg<'c, 'b, '_>],
    out: &[TensorType],
    opts: &EmitOptions,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let (carried, scanned) = (s.carried, s.scanned);
    let length = static_dims(args[carried].ty)?[0];
    let n = i32::try_from(length).map_err(|_| format!("a scan of {length} steps (at most 2^31 - 1)"))?;
    let ys = &out[carried..];
    let counter = TensorType::new(DType::I32, &[]);
    let mut types: Vec<&TensorType> = vec![&counter];
    types.extend(args[..carried].iter().map(|a| a.ty));
    types.extend(ys);
    types.extend(args[carried..].iter().map(|a| a.ty));
    let cond = loop_region(b, &types, |inner, params| {
        let end = inner.splat(Scalar::Int(n.into()), &[], DType::I32)?;
        Ok(vec![inner.compare(params[0], end, &[], DType::I32, "LT")?])
    })?;
    let body = loop_region(b, &types, |inner, params| {
        let i = params[0];
        let zero = inner.splat(Scalar::Int(0), &[], DType::I32)?;
        let (carry, rest) = params[1..].split_at(carried);
        let (stacked, rest) = rest.split_at(ys.len());
        let (xs, extra) = rest.split_at(scanned);
        let mut operands = carry.to_vec();
        for (x, ty) in xs.iter().zip(&args[carried..carried + scanned]) {
            let dims = static_dims(ty.ty)?;
            let mut sizes = dims.clone();
            sizes[0] = 1;
            let mut starts = vec![i];
            starts.resize(dims.len(), zero);
            let attr = ("slice_sizes", format!("array<i64: {}>", join(&sizes)));
            let row =
                inner.op("stablehlo.dynamic_slice", &[vec![*x], starts].concat(), &sizes, ty.ty.dtype, &[attr])?;
            operands.push(inner.reshape(row, &dims[1..], ty.ty.dtype)?);
        }
        operands.extend_from_slice(extra);
        let results = inline(inner, &s.body.0, operands, opts)?;
        let one = inner.splat(Scalar::Int(1), &[], DType::I32)?;
        let mut next = vec![inner.op("stablehlo.add", &[i, one], &[], DType::I32, &[])?];
        next.extend_from_slice(&results[..carried]);
        for ((y, all), ty) in results[carried..].iter().zip(stacked).zip(ys) {
            let dims = static_dims(ty)?;
            let mut row = dims.clone();
            row[0] = 1;
            let update = inner.reshape(*y, &row, ty.dtype)?;
            let mut starts = vec![i];
            starts.resize(dims.len(), zero);
            let written = [vec![*all, update], starts].concat();
            next.push(inner.op("stablehlo.dynamic_update_slice", &written, &dims, ty.dtype, &[])?);
        }
        next.extend_from_slice(&params[1 + carried + ys.len()..]);
        Ok(next)
    })?;
    let mut operands = vec![b.splat(Scalar::Int(0), &[], DType::I32)?];
    operands.extend(args[..carried].iter().map(|a| a.v));
    for ty in ys {
        operands.push(b.splat(Scalar::Int(0), &static_dims(ty)?, ty.dtype)?);
    }
    operands.extend(args[carried..].iter().map(|a| a.v));
    let shapes = shapes(types.iter().copied())?;
    let results = b.op_n("stablehlo.while", &operands, &as_results(&shapes), &[], vec![cond, body])?;
    Ok(results[1..1 + carried + ys.len()].to_vec())
}

/// The region graph's nodes lowered into `inner`'s block on `inputs`; its results.
pub(super) fn inline<'c, 'x>(
    inner: &Builder<'c, 'x>,
    graph: &Graph,
    inputs: Vec<Value<'c, 'x>>,
    opts: &EmitOptions,
) -> LowerResult<Vec<Value<'c, 'x>>> {
    let mut decompositions = Vec::new();
    let results = super::emit_nodes(inner.ctx, inner.block, graph, inputs, opts, &mut decompositions)
        .map_err(|e| in_region(&graph.name, e))?;
    if !decompositions.is_empty() {
        return Err(bug(format!("a composite inside region `{}`", graph.name)));
    }
    Ok(results)
}

/// A region failure, as the failure of the op that holds it.
fn in_region(name: &str, e: EmitError) -> Fail {
    match e {
        EmitError::Lowering(failures) => {
            let inner: Vec<String> =
                failures.iter().map(|f| format!("node `{}` ({}): {}", f.node, f.target, f.reason)).collect();
            Fail::Refused(format!("in region `{name}`: {}", inner.join("; ")))
        }
        EmitError::Internal(reason) => bug(format!("in region `{name}`: {reason}")),
    }
}

/// A region of one block whose arguments have `types`; `body` gives what it returns.
fn loop_region<'c>(
    b: &Builder<'c, '_>,
    types: &[&TensorType],
    body: impl for<'x> FnOnce(&Builder<'c, 'x>, &[Value<'c, 'x>]) -> LowerResult<Vec<Value<'c, 'x>>>,
) -> LowerResult<Region<'c>> {
    let shapes = shapes(types.iter().copied())?;
    b.block_region(&as_results(&shapes), body)
}

pub(super) fn ret<'c>(inner: &Builder<'c, '_>, results: &[Value<'c, '_>]) -> LowerResult<()> {
    let op = OperationBuilder::new("stablehlo.return", inner.loc).add_operands(results).build().map_err(bug)?;
    inner.block.append_operation(op);
    Ok(())
}

pub(super) fn region_of(block: Block<'_>) -> Region<'_> {
    let region = Region::new();
    region.append_block(block);
    region
}

/// A one-element bool as the 0-d `i1` that `if` and `while` take.
fn scalar_predicate<'c, 'b>(b: &Builder<'c, 'b>, pred: Arg<'c, 'b, '_>) -> LowerResult<Value<'c, 'b>> {
    if pred.ty.rank() == 0 {
        Ok(pred.v)
    } else {
        b.reshape(pred.v, &[], DType::Bool)
    }
}

fn shapes<'t>(types: impl IntoIterator<Item = &'t TensorType>) -> LowerResult<Vec<(Vec<i64>, DType)>> {
    types.into_iter().map(|t| Ok((static_dims(t)?, t.dtype))).collect()
}

fn as_results(shapes: &[(Vec<i64>, DType)]) -> Vec<(&[i64], DType)> {
    shapes.iter().map(|(d, t)| (d.as_slice(), *t)).collect()
}

fn join(v: &[i64]) -> String {
    v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}
