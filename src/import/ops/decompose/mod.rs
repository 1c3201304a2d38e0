//! ATen and library ops that are compositions of IR ops, wired as several nodes (see
//! [`crate::import::wire`]). Each follows PyTorch's own definition step by step (the Python
//! reference of `quantized_decomposed`, the native kernels' formulas), so dtypes, promotion and
//! rounding come out as PyTorch's do.

use std::collections::BTreeMap;
use torchtpu_passes::ir::ops::{
    Arange, ArgReduce, Binary, Cat, Clamp, Cumulative, Diagonal, Expand, ExtremumDim, Gather, Identity, IndexSelect,
    LeakyRelu, MaxPool, Permute, Rand, Reduce, Select, Slice, Sort, Squeeze, TopK, Unsqueeze, Var, View, Where,
};
use torchtpu_passes::ir::{
    brief_list, BinaryOp, CumulativeOp, DType, Dim, Op, Operand, ReduceOp, Scalar, SymExpr, TensorType, UnaryOp,
    ValueRef,
};

use super::super::wire::{Decomposition, Recipe, Wire};
use super::Args;

mod more;
mod quantize;
mod resize;
mod roi_pool;
mod symbolic;
mod vision;
pub(super) use more::{float_item, index_by_mask};
use quantize::{
    dequantize_per_channel, dequantize_per_tensor, fake_quantize_cachemask, quantize_per_channel, quantize_per_tensor,
};
pub(in crate::import::ops) use symbolic::decomposition as symbolic_decomposition;
use torchtpu_passes::{bug, Fail};

/// The decomposition of an FX target (`torch.ops.` prefix removed), if any.
pub(super) fn decomposition(key: &str) -> Option<Decomposition> {
    Some(match key {
        "quantized_decomposed.quantize_per_tensor.default" => |a| quantize_per_tensor(a, false),
        "quantized_decomposed.quantize_per_tensor.tensor" => |a| quantize_per_tensor(a, true),
        "quantized_decomposed.dequantize_per_tensor.default" => |a| dequantize_per_tensor(a, false),
        "quantized_decomposed.dequantize_per_tensor.tensor" => |a| dequantize_per_tensor(a, true),
        "quantized_decomposed.quantize_per_channel.default" => quantize_per_channel,
        "quantized_decomposed.dequantize_per_channel.default" => dequantize_per_channel,
        "aten.fake_quantize_per_tensor_affine_cachemask.default" => fake_quantize_cachemask,
        "aten.var_mean.correction" => var_mean,
        "aten.kthvalue.default" => kthvalue,
        "aten.cummax.default" => |a| more::cumulative_extremum(a, CumulativeOp::Cummax),
        "aten.cummin.default" => |a| more::cumulative_extremum(a, CumulativeOp::Cummin),
        "aten.bucketize.Tensor" => |a| bucketize(a, false),
        "aten.bucketize.Scalar" => |a| bucketize(a, true),
        "aten._trilinear.default" => trilinear,
        "aten.unfold.default" => unfold,
        "aten.tril_indices.default" => |a| triangle_indices(a, true),
        "aten.triu_indices.default" => |a| triangle_indices(a, false),
        "prims.collapse.default" => collapse,
        "aten.rrelu_with_noise_functional.default" => rrelu_with_noise,
        "aten.rrelu_with_noise_backward.default" => rrelu_with_noise_backward,
        "aten.multinomial.default" => multinomial,
        "aten._linalg_det.default" => linalg_det,
        "aten._linalg_slogdet.default" => linalg_slogdet,
        "aten.adaptive_max_pool2d.default" => |a| adaptive_max_pool(a, 2),
        "aten.adaptive_max_pool3d.default" => |a| adaptive_max_pool(a, 3),
        "aten.masked_select.default" => more::masked_select,
        "aten._unique2.default" => more::unique,
        "aten.rand_like.default" => |a| more::rand_like(a, false),
        "aten.randn_like.default" => |a| more::rand_like(a, true),
        "aten.uniform.default" => more::uniform,
        "aten.bernoulli.p" => |a| more::bernoulli(a, true),
        "aten.bernoulli.default" => |a| more::bernoulli(a, false),
        "aten.randint.default" => |a| more::randint(a, false),
        "aten.randint.low" => |a| more::randint(a, true),
        "aten.round.decimals" => more::round_decimals,
        "aten.addbmm.default" => more::addbmm,
        "aten._int_mm.default" => more::int_mm,
        "aten._scaled_mm.default" => more::scaled_mm,
        "aten.conv_tbc.default" => more::conv_tbc,
        "aten.repeat_interleave.Tensor" => more::repeat_interleave,
        "torchvision.roi_align.default" => vision::roi_align,
        "torchvision.ps_roi_align.default" => vision::ps_roi_align,
        "torchvision.deform_conv2d.default" => vision::deform_conv2d,
        "torchvision.roi_pool.default" => roi_pool::roi_pool,
        "torchvision.ps_roi_pool.default" => roi_pool::ps_roi_pool,
        "torchvision.nms.default" => vision::nms,
        "aten._upsample_bilinear2d_aa.default" => |a| resize::upsample_aa(a, false),
        "aten._upsample_bicubic2d_aa.default" => |a| resize::upsample_aa(a, true),
        _ => return None,
    })
}

/// Constants larger than this are refused rather than built at compile time.
const MAX_CONSTANT: i64 = 1 << 24;

type R<T> = Result<T, Fail>;

fn scalar_op(op: BinaryOp, rhs: Scalar) -> Op {
    Op::Binary(Binary { op, lhs: Operand::Tensor, rhs: Operand::Scalar(rhs), alpha: None })
}

fn tensor_op(op: BinaryOp) -> Op {
    Op::Binary(Binary { op, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None })
}

fn static_dims(ty: &TensorType, what: &str) -> R<Vec<i64>> {
    ty.static_dims().ok_or_else(|| format!("{what} has symbolic sizes {ty}, which this op does not support").into())
}

/// A possibly negative dim of `ty`, checked.
pub(super) fn checked_dim(dim: i64, ty: &TensorType) -> R<usize> {
    let rank = ty.rank() as i64;
    let d = if dim < 0 { dim + rank } else { dim };
    if !(0..rank).contains(&d) {
        return Err(format!("dim {dim} is out of range for {ty}").into());
    }
    Ok(d as usize)
}

/// `1 / s`.
fn reciprocal() -> Op {
    Op::Binary(Binary {
        op: BinaryOp::Div,
        lhs: Operand::Scalar(Scalar::Float(1.0)),
        rhs: Operand::Tensor,
        alpha: None,
    })
}

/// `var_mean(x, dim, correction, keepdim)`: both statistics over the same dims.
fn var_mean(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let dims = a.ints("dim", Some(&[]))?;
    let correction = a.opt_scalar("correction")?.map_or(1.0, Scalar::as_f64);
    let keepdim = a.bool("keepdim", false)?;
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let var = w.op(Op::Var(Var { dims: dims.clone(), correction, keepdim }), &[x])?;
        let mean = w.op(Op::Reduce(Reduce { op: ReduceOp::Mean, dims, keepdim, dtype: None }), &[x])?;
        Ok(vec![var, mean])
    }))
}

/// `kthvalue(x, k, dim, keepdim)`: the k-th smallest along `dim` and its index, from a stable
/// ascending sort (NaN sorts last, as in PyTorch).
fn kthvalue(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let k = a.int("k", None)?;
    let dim = a.int("dim", Some(-1))?;
    let keepdim = a.bool("keepdim", false)?;
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        if ty.rank() == 0 {
            if k != 1 {
                return Err(format!("k = {k} is out of range for a 0-d tensor").into());
            }
            let index = w.literal(vec![Scalar::Int(0)], TensorType::new(DType::I64, &[]))?;
            return Ok(vec![w.op(Op::Identity(Identity), &[x])?, index]);
        }
        let d = checked_dim(dim, &ty)?;
        if !ty.dims[d].as_static().is_some_and(|n| (1..=n).contains(&k)) {
            return Err(format!("k = {k} is out of range for dim {dim} of {ty}").into());
        }
        let sort = Op::Sort(Sort { dim, descending: false, stable: true });
        let mut index_ty = ty.clone();
        index_ty.dtype = DType::I64;
        let sorted = w.typed(sort, &[x], vec![ty.clone(), index_ty])?;
        let pick = if keepdim {
            Op::Slice(Slice { dim, start: Dim::Static(k - 1), end: Dim::Static(k), step: 1 })
        } else {
            Op::Select(Select { dim, index: k - 1 })
        };
        Ok(vec![w.op(pick.clone(), &[sorted[0]])?, w.op(pick, &[sorted[1]])?])
    }))
}

/// `bucketize(x, boundaries, out_int32, right)`: for sorted 1-d boundaries, the number of
/// boundaries below `x` (`right`: not above it), counted by comparing `x` with each boundary
/// (NaN counts as above every boundary with `right`, below every one without, as the binary
/// search does).
fn bucketize(a: &mut Args<'_>, scalar_input: bool) -> R<Recipe> {
    let x = if scalar_input { Some(a.scalar("self", None)?) } else { None };
    if x.is_none() {
        a.tensor("self")?;
    }
    a.tensor("boundaries")?;
    let dtype = if a.bool("out_int32", false)? { DType::I32 } else { DType::I64 };
    let right = a.bool("right", false)?;
    Ok(Box::new(move |w| {
        let boundaries = *w.inputs.last().expect("boundaries read");
        if w.ty(boundaries).rank() != 1 {
            return Err(format!("boundaries must be 1-d, found {}", w.ty(boundaries)).into());
        }
        // `b < x` (without `right`) or `!(x < b)` (with it), with x broadcast over a new last dim.
        let (value, x_tensor) = match x {
            Some(v) => (Operand::Scalar(v), vec![]),
            None => (Operand::Tensor, vec![w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[w.inputs[0]])?]),
        };
        let hits = if right {
            let mut operands = x_tensor;
            operands.push(boundaries);
            let below = Op::Binary(Binary { op: BinaryOp::Lt, lhs: value, rhs: Operand::Tensor, alpha: None });
            let below = w.op(below, &operands)?;
            w.op(Op::Unary(UnaryOp::LogicalNot), &[below])?
        } else {
            let mut operands = vec![boundaries];
            operands.extend(x_tensor);
            w.op(Op::Binary(Binary { op: BinaryOp::Lt, lhs: Operand::Tensor, rhs: value, alpha: None }), &operands)?
        };
        let count = Op::Reduce(Reduce { op: ReduceOp::Sum, dims: vec![-1], keepdim: false, dtype: Some(dtype) });
        Ok(vec![w.op(count, &[hits])?])
    }))
}

/// `_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim)`: each input unsqueezed at its
/// `expand` dims, the three multiplied and summed over `sumdim` (which are removed).
fn trilinear(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("i1")?;
    a.tensor("i2")?;
    a.tensor("i3")?;
    let expands = [a.ints("expand1", None)?, a.ints("expand2", None)?, a.ints("expand3", None)?];
    let sumdim = a.ints("sumdim", None)?;
    Ok(Box::new(move |w| {
        let mut factors = Vec::with_capacity(3);
        for (k, expand) in expands.iter().enumerate() {
            let mut dims = expand.clone();
            dims.sort_unstable();
            let mut v = w.inputs[k];
            for d in dims {
                v = w.op(Op::Unsqueeze(Unsqueeze { dim: d }), &[v])?;
            }
            factors.push(v);
        }
        let product = w.op(tensor_op(BinaryOp::Mul), &[factors[0], factors[1]])?;
        let product = w.op(tensor_op(BinaryOp::Mul), &[product, factors[2]])?;
        if sumdim.is_empty() {
            return Ok(vec![product]);
        }
        Ok(vec![w.op(Op::Reduce(Reduce { op: ReduceOp::Sum, dims: sumdim, keepdim: false, dtype: None }), &[product])?])
    }))
}

/// `unfold(x, dimension, size, step)`: windows `x[i*step .. i*step+size]` along `dimension`,
/// the window in a new last dim; an `index_select` of the windows' elements, viewed as
/// `[.., n, size, ..]` and permuted.
fn unfold(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let dimension = a.int("dimension", None)?;
    let (size, step) = (a.int("size", None)?, a.int("step", None)?);
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let out = w.outputs.first().cloned().ok_or_else(|| bug("unfold has a result"))?;
        if ty.rank() == 0 {
            return w.typed(Op::View(View { size: out.dims.clone() }), &[x], vec![out]);
        }
        let d = checked_dim(dimension, &ty)?;
        let len = ty.dims[d].as_static().ok_or_else(|| format!("unfold of a symbolic dim ({ty})"))?;
        if size < 0 || step < 1 || size > len {
            return Err(format!("unfold of size {size}, step {step} does not fit dim {dimension} of {ty}").into());
        }
        let windows = (len - size) / step + 1;
        if windows.checked_mul(size).is_none_or(|n| n > MAX_CONSTANT) {
            return Err(format!("unfold makes {windows} windows of {size}: too many to index").into());
        }
        let index: Vec<Scalar> = (0..windows).flat_map(|i| (0..size).map(move |j| Scalar::Int(i * step + j))).collect();
        let index = w.literal(index, TensorType::new(DType::I64, &[windows * size]))?;
        let picked = w.op(Op::IndexSelect(IndexSelect { dim: d as i64 }), &[x, index])?;
        let mut split = ty.dims.clone();
        split.splice(d..=d, [Dim::Static(windows), Dim::Static(size)]);
        let viewed = w.op(Op::View(View { size: split }), &[picked])?;
        let rank = ty.rank() + 1;
        let perm: Vec<i64> = (0..rank).filter(|&i| i != d + 1).chain([d + 1]).map(|i| i as i64).collect();
        Ok(vec![w.op(Op::Permute(Permute { dims: perm }), &[viewed])?])
    }))
}

/// `as_strided(x, size, stride)` with symbolic sizes over a contiguous `x` (the builder checks
/// that), as Swin-style window partitions write it: when the strides, sorted from the largest,
/// are the row-major strides of the sizes in that order (the last 1, each the next one's times
/// its size, the sizes' product `x`'s element count), it reads `x`'s elements in order: a view
/// to the sizes in stride order, then a permute to the order asked. Anything else (gaps,
/// overlaps, an offset) is refused.
pub(super) fn strided_view(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let (size, stride) = (a.dims("size")?, a.dims("stride")?);
    if a.opt_int("storage_offset")?.unwrap_or(0) != 0 || size.len() != stride.len() {
        return Err("as_strided with symbolic sizes is supported from offset 0 with one stride per size".into());
    }
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let expr = |d: &Dim| d.to_expr().simplify();
        let mul = |a: SymExpr, b: SymExpr| SymExpr::Mul(vec![a, b]).simplify();
        // Sorted by stride, largest first; a stride's size in a large generic case orders them.
        let big: BTreeMap<String, i64> =
            stride.iter().chain(&size).flat_map(|d| d.to_expr().symbols()).map(|s| (s, 1 << 20)).collect();
        let at = |d: &Dim| d.to_expr().eval(&big).unwrap_or(i64::MAX);
        let mut order: Vec<usize> = (0..size.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(at(&stride[i])));
        let refuse = || {
            let (size, stride) = (brief_list(&size, ", "), brief_list(&stride, ", "));
            Fail::from(format!("as_strided to sizes [{size}] with strides [{stride}] is not a reordering of {ty}"))
        };
        let mut expected = SymExpr::Int(1);
        for &i in order.iter().rev() {
            if expr(&stride[i]) != expected {
                return Err(refuse());
            }
            expected = mul(expected, expr(&size[i]));
        }
        let numel = ty.dims.iter().fold(SymExpr::Int(1), |n, d| mul(n, expr(d)));
        if expected != numel {
            return Err(refuse());
        }
        let sorted: Vec<Dim> = order.iter().map(|&i| size[i].clone()).collect();
        let viewed = w.op(Op::View(View { size: sorted }), &[x])?;
        let perm = (0..size.len()).map(|i| order.iter().position(|&o| o == i).unwrap_or(i) as i64).collect();
        Ok(vec![w.op(Op::Permute(Permute { dims: perm }), &[viewed])?])
    }))
}

/// `tril_indices`/`triu_indices(row, col, offset)`: the coordinates of the lower (upper)
/// triangle in row-major order, a `[2, N]` constant.
fn triangle_indices(a: &mut Args<'_>, lower: bool) -> R<Recipe> {
    let (rows, cols, offset) = (a.int("row", None)?, a.int("col", None)?, a.int("offset", Some(0))?);
    let dtype = a.dtype("dtype")?.unwrap_or(DType::I64);
    if rows < 0 || cols < 0 || rows.checked_mul(cols).is_none_or(|n| n > MAX_CONSTANT) {
        return Err(format!("triangle indices of a {rows}x{cols} matrix: sizes out of range").into());
    }
    Ok(Box::new(move |w| {
        let coords: Vec<(i64, i64)> = (0..rows)
            .flat_map(|r| (0..cols).map(move |c| (r, c)))
            .filter(|&(r, c)| if lower { c - r <= offset } else { c - r >= offset })
            .collect();
        let n = coords.len() as i64;
        let values = coords.iter().map(|p| Scalar::Int(p.0)).chain(coords.iter().map(|p| Scalar::Int(p.1))).collect();
        let v = w.literal(values, TensorType::new(DType::I64, &[2, n]))?;
        Ok(vec![w.convert(v, dtype)?])
    }))
}

/// `prims.collapse(x, start, end)`: dims `start..=end` merged into one (a view).
fn collapse(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("a")?;
    let (start, end) = (a.int("start", None)?, a.int("end", None)?);
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let rank = ty.rank() as i64;
        if !(0 <= start && start <= end && end < rank.max(1)) {
            return Err(format!("collapse of dims {start}..={end} of a tensor of rank {rank}").into());
        }
        let out = w.outputs.first().cloned().ok_or_else(|| bug("collapse has a result"))?;
        w.typed(Op::View(View { size: out.dims.clone() }), &[x], vec![out])
    }))
}

/// `rrelu_with_noise_functional(x, noise, lower, upper, training)`. Not training: leaky ReLU
/// with slope `(lower + upper) / 2`, the noise returned unchanged. Training: a slope drawn
/// uniformly from `[lower, upper)` for each element `<= 0`, returned as the new noise (1 for
/// the others).
fn rrelu_with_noise(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    a.tensor("noise")?;
    let lower = a.scalar("lower", Some(Scalar::Float(0.125)))?.as_f64();
    let upper = a.scalar("upper", Some(Scalar::Float(1.0 / 3.0)))?.as_f64();
    let training = a.bool("training", false)?;
    if training {
        a.rng_seed();
    }
    Ok(Box::new(move |w| {
        let (x, noise) = (w.inputs[0], w.inputs[1]);
        if !training {
            let y = w.op(Op::LeakyRelu(LeakyRelu { slope: (lower + upper) / 2.0 }), &[x])?;
            return Ok(vec![y, w.op(Op::Identity(Identity), &[noise])?]);
        }
        let ty = w.ty(x);
        let uniform = w.typed(Op::Rand(Rand { normal: false }), &[w.inputs[2]], vec![ty])?[0];
        let span = w.op(scalar_op(BinaryOp::Mul, Scalar::Float(upper - lower)), &[uniform])?;
        let slope = w.op(scalar_op(BinaryOp::Add, Scalar::Float(lower)), &[span])?;
        let negative = w.op(scalar_op(BinaryOp::Le, Scalar::Int(0)), &[x])?;
        let scaled = w.op(tensor_op(BinaryOp::Mul), &[x, slope])?;
        let pick = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor });
        let y = w.op(pick.clone(), &[negative, scaled, x])?;
        let keep = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Int(1)) });
        let new_noise = w.op(keep, &[negative, slope])?;
        let new_noise = w.convert(new_noise, w.ty(noise).dtype)?;
        Ok(vec![y, new_noise])
    }))
}

/// `rrelu_with_noise_backward`: training, `grad * noise`; otherwise the leaky ReLU gradient,
/// `x > 0 ? grad : grad * (lower + upper) / 2`.
fn rrelu_with_noise_backward(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("grad_output")?;
    a.tensor("self")?;
    a.tensor("noise")?;
    let lower = a.scalar("lower", None)?.as_f64();
    let upper = a.scalar("upper", None)?.as_f64();
    let training = a.bool("training", false)?;
    Ok(Box::new(move |w| {
        let (grad, x, noise) = (w.inputs[0], w.inputs[1], w.inputs[2]);
        if training {
            return Ok(vec![w.op(tensor_op(BinaryOp::Mul), &[grad, noise])?]);
        }
        let positive = w.op(scalar_op(BinaryOp::Gt, Scalar::Int(0)), &[x])?;
        let scaled = w.op(scalar_op(BinaryOp::Mul, Scalar::Float((lower + upper) / 2.0)), &[grad])?;
        let pick = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor });
        Ok(vec![w.op(pick, &[positive, grad, scaled])?])
    }))
}

/// `multinomial(p, n, replacement)`: `n` category indices per row of the weights `p` (`[C]`
/// or `[N, C]`). With replacement, each draw inverts the distribution function: the number
/// of categories whose cumulative share is at most a uniform `u`. Without, the exponential
/// race (the same distribution as drawing one by one and renormalizing): the `n` largest of
/// `p / e` with `e ~ Exp(1)`, `e = -log(u)`.
fn multinomial(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("self")?;
    let n = a.int("num_samples", None)?;
    let replacement = a.bool("replacement", false)?;
    a.rng_seed();
    Ok(Box::new(move |w| {
        let (p, seed) = (w.inputs[0], w.inputs[1]);
        let ty = w.ty(p);
        let dims = static_dims(&ty, "the weights")?;
        let Some(&categories) = dims.last().filter(|_| dims.len() <= 2 && ty.dtype.is_float()) else {
            return Err(format!("multinomial takes float weights of rank 1 or 2, found {ty}").into());
        };
        if n < 1 || (!replacement && n > categories) {
            return Err(
                format!("cannot draw {n} samples from {categories} categories (replacement={replacement})").into()
            );
        }
        let out = w.outputs.first().cloned().ok_or_else(|| bug("multinomial has a result"))?;
        let drawn_dims: Vec<i64> =
            dims[..dims.len() - 1].iter().copied().chain([if replacement { n } else { categories }]).collect();
        let uniform =
            w.typed(Op::Rand(Rand { normal: false }), &[seed], vec![TensorType::new(ty.dtype, &drawn_dims)])?[0];
        if !replacement {
            let log = w.op(Op::Unary(UnaryOp::Log), &[uniform])?;
            let exponential = w.op(Op::Unary(UnaryOp::Neg), &[log])?;
            let keys = w.op(tensor_op(BinaryOp::Div), &[p, exponential])?;
            let mut values = out.clone();
            values.dtype = ty.dtype;
            let top =
                w.typed(Op::TopK(TopK { k: Dim::Static(n), dim: -1, largest: true }), &[keys], vec![values, out])?;
            return Ok(vec![top[1]]);
        }
        // Shares of the total, accumulated; each draw counts the categories it passes.
        let total = w.op(Op::Reduce(Reduce { op: ReduceOp::Sum, dims: vec![-1], keepdim: true, dtype: None }), &[p])?;
        let share = w.op(tensor_op(BinaryOp::Div), &[p, total])?;
        let cumulative =
            w.op(Op::Cumulative(Cumulative { op: CumulativeOp::Cumsum, dim: -1, dtype: None }), &[share])?;
        let cumulative = w.op(Op::Unsqueeze(Unsqueeze { dim: -2 }), &[cumulative])?;
        let draws = w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[uniform])?;
        let passed = w.op(tensor_op(BinaryOp::Le), &[cumulative, draws])?;
        let count = Op::Reduce(Reduce { op: ReduceOp::Sum, dims: vec![-1], keepdim: false, dtype: Some(DType::I64) });
        let index = w.op(count, &[passed])?;
        // Rounding can leave the last cumulative share below 1: stay within the categories.
        let bounded = Op::Clamp(Clamp { min: None, max: Some(Scalar::Int(categories - 1)) });
        Ok(vec![w.typed(bounded, &[index], vec![out])?[0]])
    }))
}

/// The largest matrix `_linalg_det` factors: its elimination is unrolled, about twenty
/// nodes per column.
const MAX_DET_SIZE: i64 = 64;

/// `_linalg_det(A)` → `(det, LU, pivots)` for `A [.., n, n]`, with `LU` and `pivots` those of
/// `Aᵀ` (PyTorch hands the row-major matrix to LAPACK, which reads it transposed), factored as
/// `getrf` does:
/// for each column `k`, the row at or below `k` with the largest magnitude (the first on ties)
/// is swapped into row `k` (its 1-based index is `pivots[k]`), the entries below the pivot
/// become the multipliers `a[i,k] * (1 / a[k,k])` (stored in `LU`'s lower part) and the
/// trailing block loses their products with row `k`. `det` is the product of `U`'s diagonal,
/// negated for each swap that moved a row.
fn linalg_det(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("A")?;
    Ok(Box::new(|w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let (lu, diagonal, sign) = lu_factor(w, x)?;
        let product =
            w.op(Op::Reduce(Reduce { op: ReduceOp::Prod, dims: vec![-1], keepdim: false, dtype: None }), &[diagonal])?;
        let det = w.op(tensor_op(BinaryOp::Mul), &[product, sign])?;
        let det = w.convert(det, ty.dtype)?;
        Ok([vec![det], lu_results(w, lu, 1)?].concat())
    }))
}

/// `_linalg_slogdet(A)` → `(sign, logabsdet, LU, pivots)`: the determinant's sign (0 for a
/// singular matrix) and the log of its magnitude (-inf then), from the same factorization as
/// `_linalg_det`: the sign of the pivots' product and the row swaps', the sum of the logs of
/// the pivots' magnitudes.
fn linalg_slogdet(a: &mut Args<'_>) -> R<Recipe> {
    a.tensor("A")?;
    Ok(Box::new(|w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let (lu, diagonal, swaps) = lu_factor(w, x)?;
        let signs = w.op(Op::Unary(UnaryOp::Sign), &[diagonal])?;
        let sign_prod =
            w.op(Op::Reduce(Reduce { op: ReduceOp::Prod, dims: vec![-1], keepdim: false, dtype: None }), &[signs])?;
        let sign = w.op(tensor_op(BinaryOp::Mul), &[sign_prod, swaps])?;
        let magnitude = w.op(Op::Unary(UnaryOp::Abs), &[diagonal])?;
        let logs = w.op(Op::Unary(UnaryOp::Log), &[magnitude])?;
        let logabsdet =
            w.op(Op::Reduce(Reduce { op: ReduceOp::Sum, dims: vec![-1], keepdim: false, dtype: None }), &[logs])?;
        let (sign, logabsdet) = (w.convert(sign, ty.dtype)?, w.convert(logabsdet, ty.dtype)?);
        Ok([vec![sign, logabsdet], lu_results(w, lu, 2)?].concat())
    }))
}

/// The `LU` and `pivots` results, at `first` and after it, in the dtypes the archive records.
fn lu_results(w: &mut Wire<'_>, (m, pivots): (ValueRef, Vec<ValueRef>), first: usize) -> R<Vec<ValueRef>> {
    let lu_ty = w.outputs.get(first).cloned().ok_or_else(|| bug("no LU result"))?;
    let pivots_ty = w.outputs.get(first + 1).cloned().ok_or_else(|| bug("no pivots result"))?;
    let stacked = w.op(Op::Cat(Cat { dim: -1 }), &pivots)?;
    Ok(vec![w.convert(m, lu_ty.dtype)?, w.convert(stacked, pivots_ty.dtype)?])
}

/// The LU factorization with partial pivoting PyTorch's `det` and `slogdet` make, unrolled:
/// `((LU, pivots), the diagonal of U, (-1)^swaps)`.
#[allow(clippy::type_complexity)]
fn lu_factor(w: &mut Wire<'_>, x: ValueRef) -> R<((ValueRef, Vec<ValueRef>), ValueRef, ValueRef)> {
    let ty = w.ty(x);
    let dims = static_dims(&ty, "the matrix")?;
    let rank = dims.len();
    if rank < 2 || dims[rank - 1] != dims[rank - 2] || !ty.dtype.is_float() {
        return Err(format!("det takes square float matrices [.., n, n], found {ty}").into());
    }
    let n = dims[rank - 1];
    if n > MAX_DET_SIZE {
        return Err(
            format!("det of {n}x{n} matrices: the unrolled factorization handles at most {MAX_DET_SIZE}").into()
        );
    }
    let batch: Vec<Dim> = ty.dims[..rank - 2].to_vec();
    let iota = w.typed(
        Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(n), step: Scalar::Int(1) }),
        &[],
        vec![TensorType::new(DType::I64, &[n])],
    )?[0];
    let rows = w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[iota])?; // [n, 1]
                                                                     // PyTorch factors the transpose (LAPACK's column-major view of a row-major matrix).
    let swap_last: Vec<i64> = (0..rank as i64 - 2).chain([rank as i64 - 1, rank as i64 - 2]).collect();
    let mut m = w.op(Op::Permute(Permute { dims: swap_last }), &[x])?;
    let mut pivots = Vec::with_capacity(n as usize);
    let mut swaps: Option<ValueRef> = None;
    for k in 0..n {
        let (pivot, swapped) = swap_pivot_row(w, &mut m, iota, k, &batch)?;
        pivots.push(pivot);
        swaps = Some(match swaps {
            None => swapped,
            Some(s) => w.op(tensor_op(BinaryOp::Add), &[s, swapped])?,
        });
        eliminate(w, &mut m, (iota, rows), k)?;
    }
    let diagonal = w.op(Op::Diagonal(Diagonal { offset: 0, dim1: -2, dim2: -1 }), &[m])?;
    // (-1)^swaps as 1 - 2 * (swaps mod 2).
    let swaps = swaps.ok_or_else(|| bug("no columns"))?;
    let odd = w.op(scalar_op(BinaryOp::Remainder, Scalar::Int(2)), &[swaps])?;
    let twice = w.op(scalar_op(BinaryOp::Mul, Scalar::Int(-2)), &[odd])?;
    let sign = w.op(scalar_op(BinaryOp::Add, Scalar::Int(1)), &[twice])?;
    Ok(((m, pivots), diagonal, sign))
}

/// Finds column `k`'s pivot (rows `k..`, the first largest magnitude), swaps it into row `k`
/// of `m`, and returns its 1-based row as `[.., 1]` and whether it moved as `[..]` (0 or 1).
fn swap_pivot_row(
    w: &mut Wire<'_>,
    m: &mut ValueRef,
    iota: ValueRef,
    k: i64,
    batch: &[Dim],
) -> R<(ValueRef, ValueRef)> {
    let column = w.op(Op::Select(Select { dim: -1, index: k }), &[*m])?; // [.., n]
    let magnitude = w.op(Op::Unary(UnaryOp::Abs), &[column])?;
    let eligible = w.op(scalar_op(BinaryOp::Ge, Scalar::Int(k)), &[iota])?;
    let candidates = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Float(-1.0)) });
    let candidates = w.op(candidates, &[eligible, magnitude])?;
    let p = w.op(
        Op::ArgReduce(ArgReduce { op: torchtpu_passes::ir::ArgReduceOp::Argmax, dim: Some(-1), keepdim: true }),
        &[candidates],
    )?; // [.., 1]
        // Row order after the swap: i → p for i = k, k for i = p, i otherwise.
    let at_k = w.op(scalar_op(BinaryOp::Eq, Scalar::Int(k)), &[iota])?; // [n]
    let at_p = w.op(tensor_op(BinaryOp::Eq), &[iota, p])?; // [.., n]
    let keep_or_k = Op::Where(Where { on_true: Operand::Scalar(Scalar::Int(k)), on_false: Operand::Tensor });
    let order = w.op(keep_or_k, &[at_p, iota])?;
    let order = w.op(Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor }), &[at_k, p, order])?; // [.., n]
    let order = w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[order])?; // [.., n, 1]
    let n = w.ty(iota).dims[0].clone();
    let full: Vec<Dim> = batch.iter().cloned().chain([n.clone(), n]).collect();
    let order = w.op(Op::Expand(Expand { size: full }), &[order])?;
    *m = w.op(Op::Gather(Gather { dim: -2 }), &[*m, order])?;
    let moved = w.op(scalar_op(BinaryOp::Ne, Scalar::Int(k)), &[p])?;
    let moved = w.convert(moved, DType::I64)?;
    let moved = w.op(Op::Squeeze(Squeeze { dims: vec![-1] }), &[moved])?;
    let one_based = w.op(scalar_op(BinaryOp::Add, Scalar::Int(1)), &[p])?;
    Ok((one_based, moved))
}

/// Column `k` of the pivoted `m`: the entries below the pivot become the multipliers, and the
/// trailing block loses their products with row `k`.
fn eliminate(w: &mut Wire<'_>, m: &mut ValueRef, (iota, rows): (ValueRef, ValueRef), k: i64) -> R<()> {
    let column = w.op(Op::Select(Select { dim: -1, index: k }), &[*m])?; // [.., n]
    let row_k = w.op(Op::Select(Select { dim: -2, index: k }), &[*m])?; // [.., n]
    let pivot = w.op(Op::Select(Select { dim: -1, index: k }), &[row_k])?; // [..]
    let pivot = w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[pivot])?; // [.., 1]
    let inverse = w.op(reciprocal(), &[pivot])?;
    let inverse = w.convert(inverse, w.ty(column).dtype)?;
    let multipliers = w.op(tensor_op(BinaryOp::Mul), &[column, inverse])?;
    let below = w.op(scalar_op(BinaryOp::Gt, Scalar::Int(k)), &[iota])?; // [n]: rows (or columns) past k
    let zero_else = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(Scalar::Int(0)) });
    let l = w.op(zero_else.clone(), &[below, multipliers])?; // [.., n]
    let u = w.op(zero_else, &[below, row_k])?; // [.., n]
    let l = w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[l])?;
    let u = w.op(Op::Unsqueeze(Unsqueeze { dim: -2 }), &[u])?;
    let update = w.op(tensor_op(BinaryOp::Mul), &[l, u])?;
    let reduced = w.op(tensor_op(BinaryOp::Sub), &[*m, update])?;
    // Column k below the pivot holds the multipliers.
    let below_rows = w.op(scalar_op(BinaryOp::Gt, Scalar::Int(k)), &[rows])?; // [n, 1]
    let at_column = w.op(scalar_op(BinaryOp::Eq, Scalar::Int(k)), &[iota])?; // [n]
    let in_column = w.op(tensor_op(BinaryOp::LogicalAnd), &[below_rows, at_column])?; // [n, n]
    let multipliers = w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[multipliers])?; // [.., n, 1]
    *m = w.op(
        Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor }),
        &[in_column, multipliers, reduced],
    )?;
    Ok(())
}

/// `adaptive_max_pool{2,3}d(x, output_size)` → `(values, indices)`, indices flat within each
/// channel's spatial grid. Output cell `o` of a dim of size `n` pooled to `m` covers
/// `floor(o*n/m) .. ceil((o+1)*n/m)`. When every size divides evenly that is a max pool with
/// kernel = stride = `n/m`; otherwise each cell's window (padded to the longest by repeating
/// its last element, which changes neither the maximum nor which element comes first) is
/// gathered, and the first maximum in row-major window order is taken, as PyTorch's kernel
/// does.
fn adaptive_max_pool(a: &mut Args<'_>, spatial: usize) -> R<Recipe> {
    a.tensor("self")?;
    let output_size = a.ints("output_size", None)?;
    if output_size.len() != spatial || output_size.iter().any(|&m| m < 1) {
        return Err(format!("output_size {} is not {spatial} positive sizes", brief_list(&output_size, ", ")).into());
    }
    Ok(Box::new(move |w| {
        let x = w.inputs[0];
        let ty = w.ty(x);
        let dims = static_dims(&ty, "the input")?;
        if dims.len() != spatial + 1 && dims.len() != spatial + 2 {
            return Err(format!(
                "adaptive_max_pool{spatial}d takes a {}-d or {}-d input, found {ty}",
                spatial + 1,
                spatial + 2
            )
            .into());
        }
        let lead = dims.len() - spatial;
        let sizes: Vec<(i64, i64)> = dims[lead..].iter().copied().zip(output_size.iter().copied()).collect();
        if sizes.iter().any(|&(n, _)| n < 1) {
            return Err(format!("adaptive max pooling of an empty input {ty}").into());
        }
        let out_types = w.outputs.clone();
        if sizes.iter().all(|&(n, m)| n % m == 0) {
            let kernel: Vec<i64> = sizes.iter().map(|&(n, m)| n / m).collect();
            let pool = Op::MaxPool(MaxPool {
                stride: kernel.clone(),
                padding: vec![0; spatial],
                dilation: vec![1; spatial],
                ceil_mode: false,
                kernel,
            });
            return w.typed(pool, &[x], out_types);
        }
        adaptive_windows(w, x, (&dims, lead), &sizes, out_types)
    }))
}

/// The window of output cell `o` along one dim: its first element and length.
fn adaptive_window(o: i64, n: i64, m: i64) -> (i64, i64) {
    let start = o * n / m;
    let end = ((o + 1) * n + m - 1) / m;
    (start, end - start)
}

/// The general adaptive max pool of [`adaptive_max_pool`].
fn adaptive_windows(
    w: &mut Wire<'_>,
    x: ValueRef,
    (dims, lead): (&[i64], usize),
    sizes: &[(i64, i64)],
    out_types: Vec<TensorType>,
) -> R<Vec<ValueRef>> {
    // Per dim: the longest window and, per (cell, step), the element read.
    let longest: Vec<i64> =
        sizes.iter().map(|&(n, m)| (0..m).map(|o| adaptive_window(o, n, m).1).max().unwrap_or(1)).collect();
    let read = |d: usize, o: i64, t: i64| {
        let (start, len) = adaptive_window(o, sizes[d].0, sizes[d].1);
        start + t.min(len - 1)
    };
    let window: i64 = longest.iter().product();
    let cells: i64 = sizes.iter().map(|s| s.1).product();
    let lead_count: i64 = dims[..lead].iter().product();
    // The gathered windows are `lead × cells × window` elements: bounded like a constant.
    if cells.checked_mul(window).and_then(|c| c.checked_mul(lead_count.max(1))).is_none_or(|n| n > MAX_CONSTANT) {
        return Err(format!("adaptive max pooling to {sizes:?} gathers too many windows").into());
    }
    let mut v = x;
    for (d, &(_, m)) in sizes.iter().enumerate() {
        let k = longest[d];
        let index: Vec<Scalar> =
            (0..m).flat_map(|o| (0..k).map(move |t| (o, t))).map(|(o, t)| Scalar::Int(read(d, o, t))).collect();
        let index = w.literal(index, TensorType::new(DType::I64, &[m * k]))?;
        v = w.op(Op::IndexSelect(IndexSelect { dim: (lead + d) as i64 }), &[v, index])?;
    }
    // [lead.., m0*k0, m1*k1, ..] → [lead.., m0, k0, m1, k1, ..] → [lead.., m0, m1, .., k0*k1*..]
    let lead_dims: Vec<Dim> = dims[..lead].iter().map(|&d| Dim::Static(d)).collect();
    let split: Vec<Dim> = lead_dims
        .iter()
        .cloned()
        .chain(sizes.iter().zip(&longest).flat_map(|(&(_, m), &k)| [Dim::Static(m), Dim::Static(k)]))
        .collect();
    v = w.op(Op::View(View { size: split }), &[v])?;
    let s = sizes.len();
    let perm: Vec<i64> = (0..lead)
        .chain((0..s).map(|d| lead + 2 * d))
        .chain((0..s).map(|d| lead + 2 * d + 1))
        .map(|i| i as i64)
        .collect();
    v = w.op(Op::Permute(Permute { dims: perm }), &[v])?;
    let cell_dims: Vec<Dim> = sizes.iter().map(|&(_, m)| Dim::Static(m)).collect();
    let flat: Vec<Dim> =
        lead_dims.iter().cloned().chain(cell_dims.iter().cloned()).chain([Dim::Static(window)]).collect();
    v = w.op(Op::View(View { size: flat.clone() }), &[v])?;
    let extremum = Op::ExtremumDim(ExtremumDim { max: true, dim: -1, keepdim: false });
    let mut step_ty = out_types[1].clone();
    step_ty.dtype = DType::I64;
    let found = w.typed(extremum, &[v], vec![out_types[0].clone(), step_ty])?;
    // The flat spatial index of each (cell, window step), looked up at the step found.
    let plane_strides: Vec<i64> = (0..s).map(|d| dims[lead + d + 1..].iter().product()).collect();
    let mut positions = Vec::new();
    let mut cell = vec![0i64; s];
    for _ in 0..cells {
        let mut step = vec![0i64; s];
        for _ in 0..window {
            positions.push(Scalar::Int((0..s).map(|d| read(d, cell[d], step[d]) * plane_strides[d]).sum()));
            increment(&mut step, &longest);
        }
        increment(&mut cell, &sizes.iter().map(|s| s.1).collect::<Vec<_>>());
    }
    let table_dims: Vec<i64> = sizes.iter().map(|s| s.1).chain([window]).collect();
    let table = w.literal(positions, TensorType::new(DType::I64, &table_dims))?;
    let table = w.op(Op::Expand(Expand { size: flat }), &[table])?;
    let step = w.op(Op::Unsqueeze(Unsqueeze { dim: -1 }), &[found[1]])?;
    let index = w.op(Op::Gather(Gather { dim: -1 }), &[table, step])?;
    let index = w.op(Op::Squeeze(Squeeze { dims: vec![-1] }), &[index])?;
    Ok(vec![found[0], w.convert(index, out_types[1].dtype)?])
}

/// The next index of a row-major walk over `bounds`.
fn increment(index: &mut [i64], bounds: &[i64]) {
    for d in (0..index.len()).rev() {
        index[d] += 1;
        if index[d] < bounds[d] {
            return;
        }
        index[d] = 0;
    }
}
