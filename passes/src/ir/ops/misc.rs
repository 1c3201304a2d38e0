//! Everything else: padding modes, strided views, distances, gradients of the training graphs, resampling, random numbers, FFTs, ranges, and the size ops.

use super::linalg::Convolution;
use super::nn::AvgPool;
use super::{AttrReader, OpDef, ParseOp};
use crate::ir::op::*;
use crate::ir::types::*;

op! {
    /// `upsample_nearest2d`/`upsample_bilinear2d` to the recorded output size; `scales` are the
    /// explicit `scale_factors` when given (they change the source index): inputs `[x]`.
    pub struct Upsample = "upsample" {
        pub bilinear: bool ["mode", via upsample_mode],
        pub align_corners: bool ["align_corners"],
        pub scales: Option<Vec<f64>> ["scales"],
    }
}

op! {
    /// `diagonal(x, offset, dim1, dim2)`: the diagonal becomes the last dim; inputs `[x]`.
    pub struct Diagonal = "diagonal" {
        pub offset: i64 ["offset"],
        pub dim1: i64 ["dim1"],
        pub dim2: i64 ["dim2"],
    }
}

op! {
    /// `reflection_pad{1,2,3}d` / `replication_pad{2,3}d`: `pad` is (low, high) pairs from the
    /// last dim backwards: inputs `[x]`.
    pub struct PadMode = "pad_mode" {
        pub pad: Vec<i64> ["pad"],
        pub reflect: bool ["mode", via pad_mode],
    }
}

op! {
    /// `as_strided(x, size, stride, offset)` over `x`'s contiguous storage: inputs `[x]`.
    pub struct AsStrided = "as_strided" {
        pub size: Vec<i64> ["size"],
        pub stride: Vec<i64> ["stride"],
        pub offset: i64 ["offset"],
    }
}

op! {
    /// `_cdist_forward(x1, x2, p)`: p-norm distances between the rows: inputs `[x1, x2]`.
    pub struct Cdist = "cdist" {
        pub p: f64 ["p"],
    }
}

op! {
    /// `_pdist_forward(x, p)`: p-norm distances of row pairs `i < j`, row-major: inputs `[x]`.
    pub struct Pdist = "pdist" {
        pub p: f64 ["p"],
    }
}

op! {
    /// `max_pool{2,3}d_with_indices_backward`: the gradient routed to each window's recorded
    /// maximum: inputs `[grad_output, self, indices]`.
    pub struct MaxPoolBackward = "max_pool_backward" {
        pub spatial: usize ["spatial"],
    }
}

op! {
    /// `avg_pool{2,3}d_backward` with the forward's parameters: inputs `[grad_output, self]`.
    pub struct AvgPoolBackward = "avg_pool_backward" {
        pub forward: AvgPool [flatten],
    }
}

op! {
    /// `native_layer_norm_backward` over the last `normalized_rank` dims: inputs
    /// `[grad_out, input, mean, rstd, (weight)]`, outputs `[grad_input, grad_weight, grad_bias]`
    /// (`mask` says which are wanted; the others are undefined).
    pub struct LayerNormBackward = "layer_norm_backward" {
        pub normalized_rank: usize ["normalized_rank"],
        pub has_weight: bool ["weight"],
        pub mask: [bool; 3] ["mask"],
    }
}

op! {
    /// `convolution_backward` with the forward's parameters: inputs `[grad, input, weight]`,
    /// outputs `[grad_input, grad_weight, grad_bias]` as `mask` asks.
    pub struct ConvolutionBackward = "convolution_backward" {
        pub forward: Convolution [flatten],
        pub mask: [bool; 3] ["mask"],
    }
}

op! {
    /// `native_group_norm_backward`: inputs `[grad_out, input, mean, rstd, (weight)]`, outputs
    /// `[grad_input, grad_weight, grad_bias]` as `mask` asks.
    pub struct GroupNormBackward = "group_norm_backward" {
        pub groups: i64 ["groups"],
        pub has_weight: bool ["weight"],
        pub mask: [bool; 3] ["mask"],
    }
}

op! {
    /// `_adaptive_avg_pool2d_backward`: inputs `[grad_output, self]`.
    pub struct AdaptiveAvgPoolBackward = "adaptive_avg_pool_backward";
}

op! {
    /// `col2im`: sums the columns `[N, C*kh*kw, L]` back into images `[N, C, H, W]` (the
    /// adjoint of `im2col`): inputs `[x]`.
    pub struct Col2Im = "col2im" {
        pub output_size: [i64; 2] ["output_size"],
        pub kernel: [i64; 2] ["kernel"],
        pub dilation: [i64; 2] ["dilation"],
        pub padding: [i64; 2] ["padding"],
        pub stride: [i64; 2] ["stride"],
    }
}

op! {
    /// `grid_sampler_2d`: samples `input [N, C, H, W]` at the normalized `grid [N, Ho, Wo, 2]`
    /// (x, y in [-1, 1]): inputs `[input, grid]`.
    pub struct GridSampler = "grid_sampler" {
        pub mode: Interpolation ["mode"],
        pub padding: GridPadding ["padding"],
        pub align_corners: bool ["align_corners"],
    }
}

op! {
    /// `rand`/`randn` of the output's shape and dtype (uniform in [0, 1) or standard normal):
    /// inputs `[rng_seed]`.
    pub struct Rand = "rand" {
        pub normal: bool ["normal"],
    }
}

op! {
    /// `randperm(n)`, n the output's length: inputs `[rng_seed]`.
    pub struct RandPerm = "rand_perm";
}

op! {
    /// `_fft_r2c` (`inverse` false: real → complex, only the non-negative frequencies of the
    /// last transformed dim when `onesided`) or `_fft_c2r` (`inverse` true: Hermitian complex →
    /// real, the last transformed dim of the output's length) over `dims`, scaled by 1, 1/√n or
    /// 1/n for `normalization` 0, 1, 2: inputs `[x]`.
    pub struct Fft = "fft" {
        pub dims: Vec<i64> ["dims"],
        pub normalization: i64 ["normalization"],
        pub inverse: bool ["inverse"],
        pub onesided: bool ["onesided"],
    }
}

op! {
    /// `arange(start, end, step)`: no inputs.
    pub struct Arange = "arange" {
        pub start: Scalar ["start"],
        pub end: Scalar ["end"],
        pub step: Scalar ["step"],
    }
}

op! {
    /// `arange` whose end is a symbolic size: no inputs.
    pub struct ArangeSym = "arange_sym" {
        pub start: i64 ["start"],
        pub end: Dim ["end"],
        pub step: i64 ["step"],
    }
}

op! {
    /// `scalar_tensor(value)`: no inputs, a 0-d result.
    pub struct ScalarTensor = "scalar_tensor" {
        pub value: Scalar ["value"],
    }
}

op! {
    /// `_assert_tensor_metadata`: inputs `[x]`, no outputs; a no-op at run time.
    pub struct AssertMetadata = "assert_metadata" {
        pub dtype: Option<DType> ["dtype"],
    }
}

op! {
    /// `sym_size.int(x, dim)`: inputs `[x]`, one 0-d `i64` output whose value is the size.
    pub struct SymSize = "sym_size" {
        pub dim: i64 ["dim"],
    }
}

op! {
    /// A symbolic integer computed on sizes (`_operator.add` and friends): no inputs, one 0-d
    /// `i64` output. The export records its value as an expression, kept here.
    pub struct SymInt = "sym_int" {
        pub value: Dim ["value"],
    }
}

/// A target with no lowering; kept so that `check` can list them all, with the reason when
/// there is more to say than "no lowering" (e.g. a data-dependent output shape). Printed
/// `unsupported<target>`, a syntax the parser reads itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Unsupported {
    /// The ATen target, e.g. `aten.nonzero.default`.
    pub target: String,
    /// Why it has no lowering, when there is more to say.
    pub reason: Option<String>,
}

impl OpDef for Unsupported {
    fn name(&self) -> String {
        format!("unsupported<{}>", self.target)
    }

    fn attrs(&self, out: &mut Vec<String>) {
        attr_write!(out, self.reason, "reason", optional);
    }
}

impl ParseOp for Unsupported {
    fn parse(_: &str, _: &mut AttrReader<'_, '_>, _: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        None
    }
}
