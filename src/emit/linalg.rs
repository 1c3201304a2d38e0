//! Contractions: `mm`, `bmm`, `addmm` as `dot_general`, and `convolution`.
//!
//! Both carry `precision_config` from `--precision`. Operands are converted to the output
//! dtype first (the export has already promoted it), except bf16 operands of an f32 result
//! (`--compute-dtype bf16`): they stay bf16 and XLA accumulates in f32.

use melior::ir::Value;
use torchtpu_passes::ir::ops::{Addmm, Convolution};
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{bug, i64_array, static_dims, Builder, LowerResult};
use super::{Arg, GroupedMm, Precision};

fn precision_attr(p: Precision) -> String {
    precision_attr_of("stablehlo", p)
}

/// `precision_config` for both operands, in `dialect`'s spelling (`#stablehlo<…>`, `#chlo<…>`).
fn precision_attr_of(dialect: &str, p: Precision) -> String {
    let one = format!("#{dialect}<precision {}>", p.name().to_uppercase());
    format!("[{one}, {one}]")
}

fn converted<'c, 'b>(b: &Builder<'c, 'b>, a: Arg<'c, 'b, '_>, to: DType) -> LowerResult<Value<'c, 'b>> {
    b.convert(a.v, &static_dims(a.ty)?, a.ty.dtype, to)
}

/// The dtype the operands are fed in: bf16 when both are bf16 and the result f32 (mixed
/// precision), else the result's.
fn operand_dtype(lhs: &TensorType, rhs: &TensorType, out: &TensorType) -> DType {
    if lhs.dtype == DType::BF16 && rhs.dtype == DType::BF16 && out.dtype == DType::F32 {
        DType::BF16
    } else {
        out.dtype
    }
}

fn is_one(s: Scalar) -> bool {
    matches!(s, Scalar::Int(1)) || matches!(s, Scalar::Float(f) if f == 1.0)
}

fn is_zero(s: Scalar) -> bool {
    matches!(s, Scalar::Int(0)) || matches!(s, Scalar::Float(f) if f == 0.0)
}

/// `mm` (`[m,k]x[k,n]`), or `bmm` (`[b,m,k]x[b,k,n]`) when `batched`.
pub(super) fn matmul<'c, 'b>(
    b: &Builder<'c, 'b>,
    batched: bool,
    (lhs, rhs): (Arg<'c, 'b, '_>, Arg<'c, 'b, '_>),
    out: &TensorType,
    precision: Precision,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let numbers = if batched {
        "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], \
         lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>"
    } else {
        "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>"
    };
    let od = operand_dtype(lhs.ty, rhs.ty, out);
    let l = converted(b, lhs, od)?;
    let r = converted(b, rhs, od)?;
    let attrs = [("dot_dimension_numbers", numbers.to_string()), ("precision_config", precision_attr(precision))];
    b.op("stablehlo.dot_general", &[l, r], &dims, out.dtype, &attrs)
}

/// `addmm`: `beta*c + alpha*(a@b)` with operands `[c, a, b]`.
pub(super) fn addmm<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Addmm,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
    precision: Precision,
) -> LowerResult<Value<'c, 'b>> {
    let Addmm { beta, alpha } = op;
    let dims = static_dims(out)?;
    let mut product = matmul(b, false, (args[1], args[2]), out, precision)?;
    if !is_one(*alpha) {
        let a = b.splat(*alpha, &dims, out.dtype)?;
        product = b.op("stablehlo.multiply", &[product, a], &dims, out.dtype, &[])?;
    }
    if is_zero(*beta) {
        return Ok(product); // torch ignores `self` entirely when beta is 0 (NaN included)
    }
    let c_dims = static_dims(args[0].ty)?;
    let mut c = b.broadcast_to(converted(b, args[0], out.dtype)?, &c_dims, &dims, out.dtype)?;
    if !is_one(*beta) {
        let s = b.splat(*beta, &dims, out.dtype)?;
        c = b.op("stablehlo.multiply", &[c, s], &dims, out.dtype, &[])?;
    }
    b.op("stablehlo.add", &[c, product], &dims, out.dtype, &[])
}

/// N-d convolution in PyTorch's NC(D)HW / OI(D)HW layouts, with groups and an optional bias.
pub(super) fn convolution<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &Convolution,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
    precision: Precision,
) -> LowerResult<Value<'c, 'b>> {
    let Convolution { stride, padding, dilation, transposed, output_padding, groups, has_bias } = op;

    let dims = static_dims(out)?;
    let spatial = dims.len().checked_sub(2).ok_or("convolution needs a batch and a channel dim")?;
    let per_dim = |v: &[i64], what: &str| -> LowerResult<Vec<i64>> {
        match v.len() {
            n if n == spatial => Ok(v.to_vec()),
            1 => Ok(vec![v[0]; spatial]),
            n => Err(format!("{what} has {n} entries for {spatial} spatial dims").into()),
        }
    };
    let (stride, padding, dilation) =
        (per_dim(stride, "stride")?, per_dim(padding, "padding")?, per_dim(dilation, "dilation")?);
    let s: Vec<String> = (0..spatial).map(|i| i.to_string()).collect();
    let s = s.join(", ");
    let od = operand_dtype(args[0].ty, args[1].ty, out);
    let x = converted(b, args[0], od)?;
    let mut w = converted(b, args[1], od)?;
    let (kernel_layout, pads, lhs_dilation) = if *transposed {
        // A transposed convolution is a convolution of the stride-dilated input with the
        // spatially flipped kernel, whose [in, out/groups, k…] layout is regrouped to
        // [in/groups, out, k…].
        let wd = static_dims(args[1].ty)?;
        let out_pad = per_dim(output_padding, "output_padding")?;
        let k = &wd[2..];
        let flips: Vec<i64> = (2..wd.len() as i64).collect();
        w = b.op("stablehlo.reverse", &[w], &wd, od, &[("dimensions", i64_array(&flips))])?;
        if *groups > 1 {
            let (cin, cout_g) = (wd[0], wd[1]);
            let split: Vec<i64> = [*groups, cin / groups, cout_g].iter().chain(k).copied().collect();
            w = b.reshape(w, &split, od)?;
            let mut perm: Vec<i64> = vec![1, 0];
            perm.extend(2..split.len() as i64);
            let swapped: Vec<i64> = perm.iter().map(|&p| split[p as usize]).collect();
            w = b.op("stablehlo.transpose", &[w], &swapped, od, &[("permutation", i64_array(&perm))])?;
            let merged: Vec<i64> = [cin / groups, groups * cout_g].iter().chain(k).copied().collect();
            w = b.reshape(w, &merged, od)?;
        }
        let pads: Vec<String> = (0..spatial)
            .map(|i| {
                let edge = dilation[i] * (k[i] - 1) - padding[i];
                format!("[{edge}, {}]", edge + out_pad[i])
            })
            .collect();
        (format!("[i, o, {s}]"), pads, stride.clone())
    } else {
        (format!("[o, i, {s}]"), padding.iter().map(|p| format!("[{p}, {p}]")).collect(), vec![1; spatial])
    };
    let window_strides = if *transposed { vec![1; spatial] } else { stride.clone() };
    let layout = format!("[b, f, {s}]x{kernel_layout}->[b, f, {s}]");
    let attrs = [
        ("window_strides", i64_array(&window_strides)),
        ("padding", format!("dense<[{}]> : tensor<{spatial}x2xi64>", pads.join(", "))),
        ("lhs_dilation", i64_array(&lhs_dilation)),
        ("rhs_dilation", i64_array(&dilation)),
        ("dimension_numbers", format!("#stablehlo.conv<{layout}>")),
        ("feature_group_count", format!("{groups} : i64")),
        ("batch_group_count", "1 : i64".to_string()),
        ("precision_config", precision_attr(precision)),
    ];
    let y = b.op("stablehlo.convolution", &[x, w], &dims, out.dtype, &attrs)?;
    if !has_bias {
        return Ok(y);
    }
    let bias = converted(b, args[2], out.dtype)?;
    let bias =
        b.op("stablehlo.broadcast_in_dim", &[bias], &dims, out.dtype, &[("broadcast_dimensions", i64_array(&[1]))])?;
    b.op("stablehlo.add", &[y, bias], &dims, out.dtype, &[])
}

/// `convolution_backward(grad, input, weight, …, output_mask)` → `[grad_input, grad_weight,
/// grad_bias]` (undefined where the mask is false).
/// - `grad_input`: the transposed convolution of `grad` (or, for a transposed forward, the
///   plain convolution), with the output padding that restores the input's size;
/// - `grad_weight`: a convolution of the input with the gradient, batch and feature roles
///   swapped (`batch_group_count = groups`), stride and dilation exchanged;
/// - `grad_bias`: `grad` summed over every dim but the channel.
pub(super) fn convolution_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    forward: &Convolution,
    mask: [bool; 3],
    args: &[Arg<'c, 'b, '_>],
    outs: &[TensorType],
    precision: Precision,
) -> LowerResult<Vec<Value<'c, 'b>>> {
    let Convolution { stride, padding, dilation, transposed, groups, .. } = forward;
    let (grad, input, weight) = (args[0], args[1], args[2]);
    let (gd, xd, wd) = (static_dims(grad.ty)?, static_dims(input.ty)?, static_dims(weight.ty)?);
    let spatial = xd.len() - 2;
    let per = |v: &[i64], default: i64| -> Vec<i64> {
        match v.len() {
            0 => vec![default; spatial],
            1 => vec![v[0]; spatial],
            _ => v.to_vec(),
        }
    };
    let (s, p, d) = (per(stride, 1), per(padding, 0), per(dilation, 1));
    let k = &wd[2..];
    let mut out = Vec::with_capacity(3);
    // grad_input: the adjoint of the forward convolution.
    let gi = if !mask[0] {
        b.splat(Scalar::Int(0), &[], outs[0].dtype)?
    } else if *transposed {
        let conv = Convolution {
            stride: s.clone(),
            padding: p.clone(),
            dilation: d.clone(),
            transposed: false,
            output_padding: vec![0; spatial],
            groups: *groups,
            has_bias: false,
        };
        convolution(b, &conv, &[grad, weight], &outs[0], precision)?
    } else {
        let restore: Vec<i64> =
            (0..spatial).map(|i| xd[2 + i] - ((gd[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + 1)).collect();
        let conv = Convolution {
            stride: s.clone(),
            padding: p.clone(),
            dilation: d.clone(),
            transposed: true,
            output_padding: restore,
            groups: *groups,
            has_bias: false,
        };
        convolution(b, &conv, &[grad, weight], &outs[0], precision)?
    };
    out.push(gi);
    if !(mask[1] || mask[2]) {
        return Ok(out);
    }
    let dt = outs[0].dtype;
    out.push(if mask[1] {
        // For a transposed forward the roles of input and gradient swap.
        let (lhs, rhs, ld, rd) = if *transposed { (grad, input, &gd, &xd) } else { (input, grad, &xd, &gd) };
        let lv = b.convert(lhs.v, ld, lhs.ty.dtype, dt)?;
        let rv = b.convert(rhs.v, rd, rhs.ty.dtype, dt)?;
        let pads: Vec<String> = (0..spatial)
            .map(|i| {
                let hi = (k[i] - 1) * d[i] + (rd[2 + i] - 1) * s[i] + 1 - ld[2 + i] - p[i];
                format!("[{}, {hi}]", p[i])
            })
            .collect();
        let sp: Vec<String> = (0..spatial).map(|i| i.to_string()).collect();
        let sp = sp.join(", ");
        let wdims = static_dims(&outs[1])?;
        let attrs = [
            ("window_strides", i64_array(&d)),
            ("padding", format!("dense<[{}]> : tensor<{spatial}x2xi64>", pads.join(", "))),
            ("lhs_dilation", i64_array(&vec![1; spatial])),
            ("rhs_dilation", i64_array(&s)),
            ("dimension_numbers", format!("#stablehlo.conv<[f, b, {sp}]x[i, o, {sp}]->[f, b, {sp}]>")),
            ("feature_group_count", "1 : i64".to_string()),
            ("batch_group_count", format!("{groups} : i64")),
            ("precision_config", precision_attr(precision)),
        ];
        b.op("stablehlo.convolution", &[lv, rv], &wdims, dt, &attrs)?
    } else {
        b.splat(Scalar::Int(0), &[], outs[1].dtype)?
    });
    if mask[2] {
        let axes: Vec<i64> = (0..gd.len() as i64).filter(|&a| a != 1).collect();
        let gv = b.convert(grad.v, &gd, grad.ty.dtype, dt)?;
        let sum = b.reduce(gv, &gd, &axes, dt, "stablehlo.add", Scalar::Int(0))?;
        out.push(b.reshape(sum, &static_dims(&outs[2])?, dt)?);
    }
    Ok(out)
}

/// `_grouped_mm(a [S, K], b [G, K, N], offs [G])`: group g is rows `offs[g-1]..offs[g]` of
/// `a` (from 0 for the first), times `b[g]`; rows past `offs[G-1]` give 0.
pub(super) fn grouped_mm<'c, 'b>(
    b: &Builder<'c, 'b>,
    form: GroupedMm,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
    precision: Precision,
) -> LowerResult<Value<'c, 'b>> {
    let sgn = match (static_dims(args[0].ty)?.as_slice(), static_dims(args[1].ty)?.as_slice()) {
        ([s, _], [g, _, n]) => (*s, *g, *n),
        _ => return Err(bug("grouped matmul operands of the wrong rank")),
    };
    match form {
        GroupedMm::Dense => grouped_mm_dense(b, args, sgn, out, precision),
        GroupedMm::Ragged => grouped_mm_ragged(b, args, sgn, out, precision),
    }
}

/// The masked dense form: every row times every group's weight (`[S, G, N]`, one
/// `dot_general`), then each row keeps the product of its own group. G times the FLOPs of the
/// ragged form (XLA's TPU compiler fuses the select and sum, so the `[S, G, N]` product is not
/// kept in memory), but every XLA backend compiles it.
fn grouped_mm_dense<'c, 'b>(
    b: &Builder<'c, 'b>,
    args: &[Arg<'c, 'b, '_>],
    (s, g, n): (i64, i64, i64),
    out: &TensorType,
    precision: Precision,
) -> LowerResult<Value<'c, 'b>> {
    let (a, w, offs) = (args[0], args[1], args[2]);
    let od = operand_dtype(a.ty, w.ty, out);
    let numbers = "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>";
    let attrs = [("dot_dimension_numbers", numbers.to_string()), ("precision_config", precision_attr(precision))];
    let all =
        b.op("stablehlo.dot_general", &[converted(b, a, od)?, converted(b, w, od)?], &[s, g, n], out.dtype, &attrs)?;
    let ends = b.convert(offs.v, &[g], offs.ty.dtype, DType::I64)?;
    let starts = group_starts(b, ends, g, DType::I64)?;
    let rows = b.op("stablehlo.iota", &[], &[s, g], DType::I64, &[("iota_dimension", "0 : i64".into())])?;
    let per_group = |v| b.broadcast_to(v, &[g], &[s, g], DType::I64);
    let after_start = b.compare(rows, per_group(starts)?, &[s, g], DType::I64, "GE")?;
    let before_end = b.compare(rows, per_group(ends)?, &[s, g], DType::I64, "LT")?;
    let member = b.op("stablehlo.and", &[after_start, before_end], &[s, g], DType::Bool, &[])?;
    let member = b.broadcast_to(b.reshape(member, &[s, g, 1], DType::Bool)?, &[s, g, 1], &[s, g, n], DType::Bool)?;
    let zero = b.splat(Scalar::Float(0.0), &[s, g, n], out.dtype)?;
    let kept = b.op("stablehlo.select", &[member, all, zero], &[s, g, n], out.dtype, &[])?;
    b.reduce(kept, &[s, g, n], &[1], out.dtype, "stablehlo.add", Scalar::Float(0.0))
}

/// Group g holds rows `[starts[g], ends[g])`: the ends are the offsets, the starts the
/// offsets shifted right by one, with 0 first.
fn group_starts<'c, 'b>(b: &Builder<'c, 'b>, ends: Value<'c, 'b>, g: i64, dt: DType) -> LowerResult<Value<'c, 'b>> {
    let shift = [
        ("edge_padding_low", i64_array(&[1])),
        ("edge_padding_high", i64_array(&[-1])),
        ("interior_padding", i64_array(&[0])),
    ];
    b.op("stablehlo.pad", &[ends, b.splat(Scalar::Int(0), &[], dt)?], &[g], dt, &shift)
}

/// The ragged form: one `chlo.ragged_dot` whose group sizes are the offsets' differences, so
/// each row meets only its own group's weight. XLA:CPU cannot compile it; the TPU compiler
/// takes i32 group sizes only, which `_grouped_mm`'s offsets are.
fn grouped_mm_ragged<'c, 'b>(
    b: &Builder<'c, 'b>,
    args: &[Arg<'c, 'b, '_>],
    (s, g, n): (i64, i64, i64),
    out: &TensorType,
    precision: Precision,
) -> LowerResult<Value<'c, 'b>> {
    let (a, w, offs) = (args[0], args[1], args[2]);
    let od = operand_dtype(a.ty, w.ty, out);
    let ends = b.convert(offs.v, &[g], offs.ty.dtype, DType::I32)?;
    let starts = group_starts(b, ends, g, DType::I32)?;
    let sizes = b.op("stablehlo.subtract", &[ends, starts], &[g], DType::I32, &[])?;
    let numbers = "#chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], \
        lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], \
        lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>";
    let attrs = [
        ("ragged_dot_dimension_numbers", numbers.to_string()),
        ("precision_config", precision_attr_of("chlo", precision)),
    ];
    b.op("chlo.ragged_dot", &[converted(b, a, od)?, converted(b, w, od)?, sizes], &[s, n], out.dtype, &attrs)
}
