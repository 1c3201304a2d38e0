//! Pooling and normalization.

use super::{show, Expected, RuleResult};
use crate::ir::ops::{AdaptiveAvgPool, AvgPool, LayerNorm, MaxPool};
use crate::ir::{Dim, Op, TensorType};

pub(super) fn infer(op: &Op, inputs: &[&TensorType]) -> RuleResult {
    let x = inputs[0];
    let like_x = || Expected::exact(x.dtype, &x.dims);
    match op {
        Op::MaxPool(MaxPool { kernel, stride, padding, dilation, ceil_mode }) => {
            let out = pooled(x, kernel, stride, padding, dilation, *ceil_mode)?;
            let indices = Expected::partial(Some(crate::ir::DType::I64), out.clone());
            Ok(vec![Expected::partial(Some(x.dtype), out), indices])
        }
        Op::AvgPool(AvgPool { kernel, stride, padding, ceil_mode, .. }) => {
            let out = pooled(x, kernel, stride, padding, &[1], *ceil_mode)?;
            Ok(vec![Expected::partial(Some(x.dtype), out)])
        }
        Op::AdaptiveAvgPool(AdaptiveAvgPool { spatial }) => {
            let lead = x
                .rank()
                .checked_sub(*spatial)
                .ok_or_else(|| format!("{} has fewer than {spatial} dims", show(&x.dims)))?;
            let mut dims: Vec<Option<Dim>> = x.dims[..lead].iter().cloned().map(Some).collect();
            dims.extend(std::iter::repeat_n(None, *spatial));
            Ok(vec![Expected::partial(Some(x.dtype), dims)])
        }
        Op::LayerNorm(LayerNorm { normalized_rank, .. }) => {
            let lead = x
                .rank()
                .checked_sub(*normalized_rank)
                .ok_or_else(|| format!("{} has fewer than the {normalized_rank} normalized dims", show(&x.dims)))?;
            let mut stats: Vec<Dim> = x.dims[..lead].to_vec();
            stats.extend(std::iter::repeat_n(Dim::Static(1), *normalized_rank));
            let stat = Expected::shape(&stats);
            Ok(vec![like_x(), stat.clone(), stat])
        }
        // The saved statistics' shapes differ between exports ([C], [N, G] or [0]): only the
        // normalized value is stated.
        Op::GroupNorm(_) => Ok(vec![like_x()]),
        Op::BatchNormInference(_) | Op::BatchNormTraining(_) => {
            if x.rank() < 2 {
                return Err(format!("batch norm takes a batch of channels, found {}", show(&x.dims)));
            }
            Ok(vec![like_x()])
        }
        _ => Err(format!("internal: `{}` is not in this rule family", op.name())),
    }
}

/// `[…, *spatial]` pooled over its trailing `kernel.len()` dims. One-entry stride, padding
/// and dilation lists apply to every pooled dim, as in PyTorch.
fn pooled(
    x: &TensorType,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    ceil_mode: bool,
) -> Result<Vec<Option<Dim>>, String> {
    let n = kernel.len();
    let lead = x.rank().checked_sub(n).ok_or_else(|| format!("{} has fewer than {n} pooled dims", show(&x.dims)))?;
    let at = |v: &[i64], i: usize| if v.len() == 1 { Some(v[0]) } else { v.get(i).copied() };
    let mut dims: Vec<Option<Dim>> = x.dims[..lead].iter().cloned().map(Some).collect();
    for i in 0..n {
        let (Some(s), Some(p), Some(d)) = (at(stride, i), at(padding, i), at(dilation, i)) else {
            return Err(format!(
                "stride {stride:?}, padding {padding:?} or dilation {dilation:?} has no entry for pooled dim {i}"
            ));
        };
        let k = kernel[i];
        let effective = k.checked_sub(1).and_then(|k1| k1.checked_mul(d)).and_then(|r| r.checked_add(1));
        if s < 1 || d < 1 || p < 0 || k < 1 || effective.is_none_or(|e| p > e / 2) {
            return Err(format!(
                "kernel {kernel:?}, stride {stride:?}, padding {padding:?} or dilation {dilation:?} is out of range \
                 (padding is at most half the kernel)"
            ));
        }
        let Some(input) = x.dims[lead + i].as_static() else {
            dims.push(None);
            continue;
        };
        // PyTorch's `pooling_output_shape`; ceil mode drops a last window that would start in the
        // right padding.
        let too_big = || format!("the kernel {kernel:?} does not fit the padded input {}", show(&x.dims));
        // `room` may be negative: in ceil mode a window larger than the input still starts on it.
        let room = effective.and_then(|e| input.checked_add(2 * p)?.checked_sub(e)).ok_or_else(too_big)?;
        let mut out = (if ceil_mode { room + s - 1 } else { room }).div_euclid(s) + 1;
        if ceil_mode && (out - 1) * s >= input + p {
            out -= 1;
        }
        if out < 1 {
            return Err(too_big());
        }
        dims.push(Some(Dim::Static(out)));
    }
    Ok(dims)
}
