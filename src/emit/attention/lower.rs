//! The blocked form in StableHLO: a `stablehlo.while` over the blocks of keys carrying the
//! online softmax's state, each block's update under a `stablehlo.if` when masks let it be
//! skipped, then the division by the row sums.

use melior::ir::{Block, Value};
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::super::builder::{accumulation_dtype, bug, static_dims, Builder, LowerResult};
use super::super::EmitOptions;
use super::skip::{Masks, Skip};
use super::Plan;

/// Lowers `plan` on `args` (the group's operands): the loop over the blocks of keys, then the
/// division by the row sums.
pub(in super::super) fn lower<'c, 'b>(
    b: &Builder<'c, 'b>,
    plan: &Plan,
    args: &[(Value<'c, 'b>, &TensorType)],
    opts: &EmitOptions,
) -> LowerResult<Value<'c, 'b>> {
    let acc_dt = accumulation_dtype(plan.scores_ty.dtype);
    let scores = static_dims(&plan.scores_ty)?;
    let rows = &scores[..scores.len() - 1];
    let out = static_dims(&plan.out)?;
    // The loop carries the block counter, the running maximum and sum per row, the output and
    // every operand (a loop's regions read nothing from outside).
    let mut types: Vec<(Vec<i64>, DType)> =
        vec![(vec![], DType::I32), (rows.to_vec(), acc_dt), (rows.to_vec(), acc_dt), (out.clone(), acc_dt)];
    for (_, ty) in args {
        types.push((static_dims(ty)?, ty.dtype));
    }
    let shapes: Vec<(&[i64], DType)> = types.iter().map(|(d, t)| (d.as_slice(), *t)).collect();
    let blocks = i32::try_from(plan.blocks).map_err(|_| format!("{} blocks of keys", plan.blocks))?;
    let cond = b.block_region(&shapes, |inner, params| {
        let end = inner.splat(Scalar::Int(blocks.into()), &[], DType::I32)?;
        Ok(vec![inner.compare(params[0], end, &[], DType::I32, "LT")?])
    })?;
    let body = b.block_region(&shapes, |inner, params| {
        let (i, state) = (params[0], [params[1], params[2], params[3]]);
        let operands = &params[4..];
        let step = Step { b: inner, plan, rows, out: &out, acc_dt };
        let state = match &plan.skip {
            None => step.update(i, state, operands, args, opts)?,
            Some(skip) => {
                // `if` some key of the block is left: the update; else the state as it is.
                let live = step.any_key_left(skip, i, operands, args, opts)?;
                let (update, kept) = (Block::new(&[]), Block::new(&[]));
                {
                    let branch = Builder { ctx: inner.ctx, block: &update, loc: inner.loc };
                    let step = Step { b: &branch, plan, rows, out: &out, acc_dt };
                    super::super::control::ret(&branch, &step.update(i, state, operands, args, opts)?)?;
                    let branch = Builder { ctx: inner.ctx, block: &kept, loc: inner.loc };
                    super::super::control::ret(&branch, &state)?;
                }
                let regions = vec![super::super::control::region_of(update), super::super::control::region_of(kept)];
                let types = [(rows, acc_dt), (rows, acc_dt), (out.as_slice(), acc_dt)];
                let results = inner.op_n("stablehlo.if", &[live], &types, &[], regions)?;
                [results[0], results[1], results[2]]
            }
        };
        let one = inner.splat(Scalar::Int(1), &[], DType::I32)?;
        let mut next = vec![inner.op("stablehlo.add", &[i, one], &[], DType::I32, &[])?];
        next.extend_from_slice(&state);
        next.extend_from_slice(operands);
        Ok(next)
    })?;
    let (m, l) = start(b, plan, args, rows, acc_dt)?;
    let mut init = vec![b.splat(Scalar::Int(0), &[], DType::I32)?, m, l, b.splat(Scalar::Float(0.0), &out, acc_dt)?];
    init.extend(args.iter().map(|(v, _)| *v));
    let results = b.op_n("stablehlo.while", &init, &shapes, &[], vec![cond, body])?;
    let (m, l, acc) = (results[1], results[2], results[3]);
    let mut result = b.op("stablehlo.divide", &[acc, per_row(b, l, rows, &out, acc_dt)?], &out, acc_dt, &[])?;
    if plan.safe {
        let none = b.splat(Scalar::Float(f64::NEG_INFINITY), rows, acc_dt)?;
        let masked = b.compare(m, none, rows, acc_dt, "EQ")?;
        let masked = per_row(b, masked, rows, &out, DType::Bool)?;
        let zero = b.splat(Scalar::Float(0.0), &out, acc_dt)?;
        result = b.op("stablehlo.select", &[masked, zero, result], &out, acc_dt, &[])?;
    }
    b.convert(result, &out, acc_dt, plan.out.dtype)
}

/// The running maximum and sum before the first block: `−inf` and 0, or with a sink its logit
/// `s` and `exp(s − s) = 1` (0 where `s` is `−inf`).
fn start<'c, 'b>(
    b: &Builder<'c, 'b>,
    plan: &Plan,
    args: &[(Value<'c, 'b>, &TensorType)],
    rows: &[i64],
    dt: DType,
) -> LowerResult<(Value<'c, 'b>, Value<'c, 'b>)> {
    let none = b.splat(Scalar::Float(f64::NEG_INFINITY), rows, dt)?;
    let Some(k) = plan.sink else { return Ok((none, b.splat(Scalar::Float(0.0), rows, dt)?)) };
    let (sink, ty) = args[k];
    let sink = b.convert(b.reshape(sink, rows, ty.dtype)?, rows, ty.dtype, dt)?;
    let masked = b.compare(sink, none, rows, dt, "EQ")?;
    let (zero, one) = (b.splat(Scalar::Float(0.0), rows, dt)?, b.splat(Scalar::Float(1.0), rows, dt)?);
    Ok((sink, b.op("stablehlo.select", &[masked, zero, one], rows, dt, &[])?))
}

/// `v`, one value per row of `rows`, over the last dim of `to`, whose rows are the same ones
/// (regrouped by views of leading dims).
fn per_row<'c, 'x>(
    b: &Builder<'c, 'x>,
    v: Value<'c, 'x>,
    rows: &[i64],
    to: &[i64],
    dt: DType,
) -> LowerResult<Value<'c, 'x>> {
    let to_rows = &to[..to.len() - 1];
    let v = if rows == to_rows { v } else { b.reshape(v, to_rows, dt)? };
    let map = (0..to_rows.len()).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    b.op("stablehlo.broadcast_in_dim", &[v], to, dt, &[("broadcast_dimensions", format!("array<i64: {map}>"))])
}

/// One block of the loop.
struct Step<'a, 'c, 'x> {
    b: &'a Builder<'c, 'x>,
    plan: &'a Plan,
    rows: &'a [i64],
    out: &'a [i64],
    acc_dt: DType,
}

impl<'c, 'x> Step<'_, 'c, 'x> {
    /// The state `(m, l, acc)` after block `i`.
    fn update(
        &self,
        i: Value<'c, 'x>,
        state: [Value<'c, 'x>; 3],
        operands: &[Value<'c, 'x>],
        args: &[(Value<'c, '_>, &TensorType)],
        opts: &EmitOptions,
    ) -> LowerResult<[Value<'c, 'x>; 3]> {
        let all: Vec<usize> = (0..operands.len()).collect();
        let blocked = self.cut_operands(i, &all, operands, args)?;
        let blocked = blocked.into_iter().map(|v| v.ok_or_else(|| bug("an operand was not cut")));
        let blocked = blocked.collect::<Result<Vec<_>, _>>()?;
        let (m, l, acc) = self.run((state[0], state[1], state[2]), &blocked, opts)?;
        Ok([m, l, acc])
    }

    /// Whether some score of block `i` is left unmasked by every mask of `skip`: a 0-d `i1`.
    fn any_key_left(
        &self,
        skip: &Skip,
        i: Value<'c, 'x>,
        operands: &[Value<'c, 'x>],
        args: &[(Value<'c, '_>, &TensorType)],
        opts: &EmitOptions,
    ) -> LowerResult<Value<'c, 'x>> {
        let b = self.b;
        let blocked = self.cut_operands(i, &skip.masks_reads, operands, args)?;
        let reads = skip.masks_reads.iter().map(|&k| blocked[k].ok_or_else(|| bug("a mask's operand was not cut")));
        let masks = super::super::control::inline(b, &skip.masks, reads.collect::<Result<_, _>>()?, opts)?;
        let mut live: Option<Value> = None;
        for (&mask, (ty, kind)) in masks.iter().zip(&skip.kinds) {
            let dims = static_dims(ty)?;
            let left = match kind {
                Masks::NegInf => {
                    let none = b.splat(Scalar::Float(f64::NEG_INFINITY), &dims, ty.dtype)?;
                    b.compare(mask, none, &dims, ty.dtype, "NE")?
                }
                Masks::False => b.convert(mask, &dims, ty.dtype, DType::Bool)?,
                Masks::True => {
                    let mask = b.convert(mask, &dims, ty.dtype, DType::Bool)?;
                    b.op("stablehlo.not", &[mask], &dims, DType::Bool, &[])?
                }
            };
            let all: Vec<i64> = (0..dims.len() as i64).collect();
            let any = b.reduce(left, &dims, &all, DType::Bool, "stablehlo.or", Scalar::Int(0))?;
            live = Some(match live {
                None => any,
                Some(prev) => b.op("stablehlo.and", &[prev, any], &[], DType::Bool, &[])?,
            });
        }
        live.ok_or_else(|| bug("a skip without masks"))
    }

    /// Block `i` of the operands `which` (those cut along the keys; the others whole), at
    /// their index; `None` for the others.
    fn cut_operands(
        &self,
        i: Value<'c, 'x>,
        which: &[usize],
        operands: &[Value<'c, 'x>],
        args: &[(Value<'c, '_>, &TensorType)],
    ) -> LowerResult<Vec<Option<Value<'c, 'x>>>> {
        let b = self.b;
        let size = b.splat(Scalar::Int(self.plan.block), &[], DType::I32)?;
        let start = b.op("stablehlo.multiply", &[i, size], &[], DType::I32, &[])?;
        let zero = b.splat(Scalar::Int(0), &[], DType::I32)?;
        let mut out = vec![None; operands.len()];
        for &k in which {
            let (v, ty) = (operands[k], args[k].1);
            let Some(d) = self.plan.cuts[k] else {
                out[k] = Some(v);
                continue;
            };
            let mut sizes = static_dims(ty)?;
            sizes[d] = self.plan.block;
            let starts: Vec<Value> = (0..sizes.len()).map(|j| if j == d { start } else { zero }).collect();
            let list = sizes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            let attr = ("slice_sizes", format!("array<i64: {list}>"));
            out[k] = Some(b.op("stablehlo.dynamic_slice", &[vec![v], starts].concat(), &sizes, ty.dtype, &[attr])?);
        }
        Ok(out)
    }

    /// The online softmax's update by one block: `(m, l, acc)` after it.
    fn run(
        &self,
        (m, l, acc): (Value<'c, 'x>, Value<'c, 'x>, Value<'c, 'x>),
        operands: &[Value<'c, 'x>],
        opts: &EmitOptions,
    ) -> LowerResult<(Value<'c, 'x>, Value<'c, 'x>, Value<'c, 'x>)> {
        let (b, plan, dt) = (self.b, self.plan, self.acc_dt);
        let dims = static_dims(&plan.scores_ty)?;
        let last = dims.len() as i64 - 1;
        let read = |reads: &[usize]| reads.iter().map(|&k| operands[k]).collect::<Vec<_>>();
        let s = super::super::control::inline(b, &plan.scores, read(&plan.scores_reads), opts)?[0];
        let s = b.convert(s, &dims, plan.scores_ty.dtype, dt)?;
        let block_max = b.reduce(s, &dims, &[last], dt, "stablehlo.maximum", Scalar::Float(f64::NEG_INFINITY))?;
        let m_new = b.op("stablehlo.maximum", &[m, block_max], self.rows, dt, &[])?;
        // Where every key so far is masked, subtract 0: exp(−inf) = 0, not exp(−inf + inf).
        let none = b.splat(Scalar::Float(f64::NEG_INFINITY), self.rows, dt)?;
        let masked = b.compare(m_new, none, self.rows, dt, "EQ")?;
        let zero = b.splat(Scalar::Float(0.0), self.rows, dt)?;
        let shift = b.op("stablehlo.select", &[masked, zero, m_new], self.rows, dt, &[])?;
        let wide_shift = per_row(b, shift, self.rows, &dims, dt)?;
        let shifted = b.op("stablehlo.subtract", &[s, wide_shift], &dims, dt, &[])?;
        let p = b.op("stablehlo.exponential", &[shifted], &dims, dt, &[])?;
        let gap = b.op("stablehlo.subtract", &[m, shift], self.rows, dt, &[])?;
        let alpha = b.op("stablehlo.exponential", &[gap], self.rows, dt, &[])?;
        let sum = b.reduce(p, &dims, &[last], dt, "stablehlo.add", Scalar::Float(0.0))?;
        let scaled = b.op("stablehlo.multiply", &[alpha, l], self.rows, dt, &[])?;
        let l_new = b.op("stablehlo.add", &[scaled, sum], self.rows, dt, &[])?;
        let probs = b.convert(p, &dims, dt, plan.probs_dtype)?;
        let mut inputs = vec![probs];
        inputs.extend(read(&plan.values_reads));
        let pv = super::super::control::inline(b, &plan.values, inputs, opts)?[0];
        let alpha = per_row(b, alpha, self.rows, self.out, dt)?;
        let kept_acc = b.op("stablehlo.multiply", &[alpha, acc], self.out, dt, &[])?;
        let acc_new = b.op("stablehlo.add", &[kept_acc, pv], self.out, dt, &[])?;
        Ok((m_new, l_new, acc_new))
    }
}
