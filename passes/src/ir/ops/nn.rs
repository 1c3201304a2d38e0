//! Pooling and normalization.

use super::rule::*;
use super::*;
use crate::ir::types::*;

op! {
    /// `max_pool2d/3d_with_indices` over the trailing `kernel.len()` dims: inputs `[x]`,
    /// outputs `[values, indices]` (flat index within each channel's spatial grid).
    pub struct MaxPool = "max_pool" {
        pub kernel: Vec<i64> ["kernel"],
        pub stride: Vec<i64> ["stride"],
        pub padding: Vec<i64> ["padding"],
        pub dilation: Vec<i64> ["dilation"],
        pub ceil_mode: bool ["ceil_mode"],
    }
}

impl OpDef for MaxPool {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 2)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let MaxPool { kernel, stride, padding, dilation, ceil_mode } = self;
        let out = pooled(x, kernel, stride, padding, dilation, *ceil_mode)?;
        let indices = Expected::partial(Some(crate::ir::DType::I64), out.clone());
        Ok(vec![Expected::partial(Some(x.dtype), out), indices])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..inputs[0].rank().saturating_sub(self.kernel.len()))
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::MaxPool)
    }
}

op! {
    /// `avg_pool2d`/`avg_pool3d` over the trailing `kernel.len()` dims: inputs `[x]`.
    pub struct AvgPool = "avg_pool" {
        pub kernel: Vec<i64> ["kernel"],
        pub stride: Vec<i64> ["stride"],
        pub padding: Vec<i64> ["padding"],
        pub ceil_mode: bool ["ceil_mode"],
        pub count_include_pad: bool ["count_include_pad"],
        pub divisor_override: Option<i64> ["divisor"],
    }
}

impl OpDef for AvgPool {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let AvgPool { kernel, stride, padding, ceil_mode, .. } = self;
        let out = pooled(x, kernel, stride, padding, &[1], *ceil_mode)?;
        Ok(vec![Expected::partial(Some(x.dtype), out)])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..inputs[0].rank().saturating_sub(self.kernel.len()))
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::AvgPool(self.clone()))
    }
}

op! {
    /// `_adaptive_avg_pool2d`/`3d` over the trailing `spatial` dims, to the recorded output
    /// size: inputs `[x]`.
    pub struct AdaptiveAvgPool = "adaptive_avg_pool" {
        pub spatial: usize ["spatial"],
    }
}

impl OpDef for AdaptiveAvgPool {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let AdaptiveAvgPool { spatial } = self;
        let lead =
            x.rank().checked_sub(*spatial).ok_or_else(|| format!("{} has fewer than {spatial} dims", show(&x.dims)))?;
        let mut dims: Vec<Option<Dim>> = x.dims[..lead].iter().cloned().map(Some).collect();
        dims.extend(std::iter::repeat_n(None, *spatial));
        Ok(vec![Expected::partial(Some(x.dtype), dims)])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..inputs[0].rank().saturating_sub(self.spatial))
    }
}

op! {
    /// `native_group_norm`: inputs `[x, (weight), (bias)]`, outputs `[y, mean, rstd]`.
    pub struct GroupNorm = "group_norm" {
        pub groups: i64 ["groups"],
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
    }
}

impl OpDef for GroupNorm {
    fn arity(&self) -> Arity {
        let GroupNorm { has_weight, has_bias, .. } = self;
        Arity::fixed(1 + usize::from(*has_weight) + usize::from(*has_bias), 3)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        // The saved statistics' shapes differ between exports ([C], [N, G] or [0]): only the
        // normalized value is stated.
        Ok(vec![like(x)])
    }

    fn position_wise(&self, _: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        (0..outputs.len()).map(|out| Along { slot: 0, dim: 0, out, out_dim: 0 }).collect()
    }

    /// Statistics over the real positions of a dynamic spatial dim.
    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::GroupNorm(self.clone()))
    }
}

op! {
    /// `_native_batch_norm_legit` in training mode (batch statistics): inputs
    /// `[x, (weight), (bias)]` plus the running stats when present, outputs `[y, mean, rstd]`.
    /// `_native_batch_norm_legit_functional` also returns the updated running stats (outputs
    /// `[y, mean, rstd, running_mean, running_var]`), blending in `momentum`.
    pub struct BatchNormTraining = "batch_norm_training" {
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
        pub running_stats: bool ["running_stats"],
        pub momentum: Option<f64> ["momentum"],
    }
}

impl OpDef for BatchNormTraining {
    fn arity(&self) -> Arity {
        let BatchNormTraining { has_weight, has_bias, running_stats, momentum, .. } = self;
        Arity::fixed(
            1 + usize::from(*has_weight) + usize::from(*has_bias) + 2 * usize::from(*running_stats),
            3 + 2 * usize::from(momentum.is_some()),
        )
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        batch_norm(inputs[0])
    }
}

op! {
    /// `_native_batch_norm_legit_no_training`: inputs `[x, (weight), (bias), mean, var]`,
    /// outputs `[y, save_mean, save_invstd]`.
    pub struct BatchNormInference = "batch_norm_inference" {
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
    }
}

impl OpDef for BatchNormInference {
    fn arity(&self) -> Arity {
        let BatchNormInference { has_weight, has_bias, .. } = self;
        Arity::fixed(3 + usize::from(*has_weight) + usize::from(*has_bias), 3)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        batch_norm(inputs[0])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, &outputs[..1], 0..inputs[0].rank())
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `native_layer_norm` over the last `normalized_rank` dims: inputs `[x, (weight), (bias)]`,
    /// outputs `[y, mean, rstd]`.
    pub struct LayerNorm = "layer_norm" {
        pub normalized_rank: usize ["normalized_rank"],
        pub eps: f64 ["eps"],
        pub has_weight: bool ["weight"],
        pub has_bias: bool ["bias"],
    }
}

impl OpDef for LayerNorm {
    fn arity(&self) -> Arity {
        let LayerNorm { has_weight, has_bias, .. } = self;
        Arity::fixed(1 + usize::from(*has_weight) + usize::from(*has_bias), 3)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let LayerNorm { normalized_rank, .. } = self;
        let lead = x
            .rank()
            .checked_sub(*normalized_rank)
            .ok_or_else(|| format!("{} has fewer than the {normalized_rank} normalized dims", show(&x.dims)))?;
        let mut stats: Vec<Dim> = x.dims[..lead].to_vec();
        stats.extend(std::iter::repeat_n(Dim::Static(1), *normalized_rank));
        let stat = Expected::shape(&stats);
        Ok(vec![like(x), stat.clone(), stat])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..inputs[0].rank().saturating_sub(self.normalized_rank))
    }

    fn under_padding(&self) -> Padding {
        Padding::RefusedBecause("normalizes over a dynamic dim")
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
        let too_big = || format!("the kernel {} does not fit the padded input {}", brief(kernel), show(&x.dims));
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

/// A batch norm's result: the input's type; its statistics are left open.
fn batch_norm(x: &TensorType) -> RuleResult {
    if x.rank() < 2 {
        return Err(format!("batch norm takes a batch of channels, found {}", show(&x.dims)));
    }
    Ok(vec![like(x)])
}
