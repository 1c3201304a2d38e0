//! Everything else: padding modes, strided views, distances, gradients of the training graphs,
//! resampling, random numbers, FFTs, ranges, and the size ops.

use super::linalg::Convolution;
use super::nn::AvgPool;
use super::rule::*;
use super::*;
use super::{AttrReader, OpSyntax, ParseOp};
use crate::ir::op::*;
use crate::ir::types::*;
use crate::ir::SymExpr;

op! {
    /// `upsample_nearest2d`/`upsample_bilinear2d` to the recorded output size; `scales` are the
    /// explicit `scale_factors` when given (they change the source index): inputs `[x]`.
    pub struct Upsample = "upsample" {
        pub bilinear: bool ["mode", via upsample_mode],
        pub align_corners: bool ["align_corners"],
        pub scales: Option<Vec<f64>> ["scales"],
    }
}

impl OpDef for Upsample {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        if x.rank() < 3 {
            return Err(format!("upsampling takes [N, C, *spatial], found {}", show(&x.dims)));
        }
        let mut dims: Vec<Option<Dim>> = x.dims[..2].iter().cloned().map(Some).collect();
        dims.extend(std::iter::repeat_n(None, x.rank() - 2));
        one(Expected::partial(Some(x.dtype), dims))
    }

    /// The batch and the channels.
    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..2)
    }

    /// Nearest by whole scales (a UNet's 2x): result position `i` reads `i / scale`, at or
    /// before it, so the real part of the result reads only real positions. Otherwise (bilinear
    /// reads the next position too, and a size given instead of a scale reads at the ratio of
    /// the real sizes) the interpolation is rebuilt from the real lengths.
    fn under_padding(&self) -> Padding {
        let whole = |s: &f64| *s >= 1.0 && s.fract() == 0.0;
        match &self.scales {
            Some(scales) if !self.bilinear && scales.iter().all(whole) => Padding::Exact,
            _ => Padding::Rule(PaddingRule::Upsample(self.clone())),
        }
    }
}

op! {
    /// `upsample_nearest2d_backward`: the gradient of a nearest upsampling, each gradient
    /// element added to the input position the forward read it from, back to `input_size`
    /// (`[N, C, H, W]`); `scales` are the forward's `scales_h` and `scales_w` (0 for one not
    /// given) when any is: inputs `[grad_output]`.
    pub struct UpsampleNearestBackward = "upsample_nearest_backward" {
        pub input_size: Vec<Dim> ["input_size"],
        pub scales: Option<Vec<f64>> ["scales"],
    }
}

impl OpDef for UpsampleNearestBackward {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let grad = inputs[0];
        let size = &self.input_size;
        let batch_and_channels_agree =
            size.len() == 4 && grad.rank() == 4 && (0..2).all(|d| same_dim(&size[d], &grad.dims[d]));
        if !batch_and_channels_agree {
            return Err(format!("the gradient {} is not one of an input {} upsampled", show(&grad.dims), show(size)));
        }
        one(Expected::exact(grad.dtype, size))
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

impl OpDef for Diagonal {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let Diagonal { offset, dim1, dim2 } = self;
        let x = inputs[0];
        let (a, b) = (dim_index(*dim1, x.rank())?, dim_index(*dim2, x.rank())?);
        if a == b || x.rank() < 2 {
            return Err(format!("diagonal of dims {dim1} and {dim2} of {}", show(&x.dims)));
        }
        let len = match (x.dims[a].as_static(), x.dims[b].as_static()) {
            (Some(n1), Some(n2)) if *offset >= 0 => Some(Dim::Static(n1.min(n2.saturating_sub(*offset)).max(0))),
            (Some(n1), Some(n2)) => Some(Dim::Static(n1.saturating_add(*offset).min(n2).max(0))),
            _ => None,
        };
        let mut dims: Vec<Option<Dim>> =
            (0..x.rank()).filter(|&d| d != a && d != b).map(|d| Some(x.dims[d].clone())).collect();
        dims.push(len);
        one(Expected::partial(Some(x.dtype), dims))
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

impl OpDef for PadMode {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let PadMode { pad, .. } = self;
        let x = inputs[0];
        Pad { pad: pad.clone(), value: Scalar::Float(0.0) }.infer(&[x])
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

impl OpDef for AsStrided {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let AsStrided { size, stride, offset } = self;
        let x = inputs[0];
        strided_in_bounds(x, size, stride, *offset)?;
        one(Expected::exact(x.dtype, &size.iter().map(|&s| Dim::Static(s)).collect::<Vec<_>>()))
    }
}

op! {
    /// `_cdist_forward(x1, x2, p)`: p-norm distances between the rows: inputs `[x1, x2]`.
    pub struct Cdist = "cdist" {
        pub p: f64 ["p"],
    }
}

impl OpDef for Cdist {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let (a, b) = (inputs[0], inputs[1]);
        if a.rank() < 2 || a.rank() != b.rank() {
            return Err(format!("cdist of {} and {}", show(&a.dims), show(&b.dims)));
        }
        let r = a.rank();
        let mut dims = a.dims[..r - 1].to_vec();
        dims.push(b.dims[r - 2].clone());
        one(Expected::exact(a.dtype, &dims))
    }
}

op! {
    /// `_pdist_forward(x, p)`: p-norm distances of row pairs `i < j`, row-major: inputs `[x]`.
    pub struct Pdist = "pdist" {
        pub p: f64 ["p"],
    }
}

impl OpDef for Pdist {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        if x.rank() != 2 {
            return Err(format!("pdist takes a 2-d input, found {}", show(&x.dims)));
        }
        let pairs = x.dims[0].as_static().and_then(|n| n.checked_mul(n - 1)).map(|p| Dim::Static(p / 2));
        one(Expected::partial(Some(x.dtype), vec![pairs]))
    }
}

op! {
    /// `max_pool{2,3}d_with_indices_backward`: the gradient routed to each window's recorded
    /// maximum: inputs `[grad_output, self, indices]`.
    pub struct MaxPoolBackward = "max_pool_backward" {
        pub spatial: usize ["spatial"],
    }
}

impl OpDef for MaxPoolBackward {
    fn arity(&self) -> Arity {
        Arity::fixed(3, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        // The gradient of an input has the input's type.
        one(like(inputs[1]))
    }
}

op! {
    /// `avg_pool{2,3}d_backward` with the forward's parameters: inputs `[grad_output, self]`.
    pub struct AvgPoolBackward = "avg_pool_backward" {
        pub forward: AvgPool [flatten],
    }
}

impl OpDef for AvgPoolBackward {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        // The gradient of an input has the input's type.
        one(like(inputs[1]))
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

impl OpDef for LayerNormBackward {
    fn arity(&self) -> Arity {
        let LayerNormBackward { has_weight, .. } = self;
        Arity::fixed(4 + usize::from(*has_weight), 3)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let LayerNormBackward { mask, .. } = self;
        norm_backward(mask, inputs)
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

impl OpDef for ConvolutionBackward {
    fn arity(&self) -> Arity {
        Arity::fixed(3, 3)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let ConvolutionBackward { forward, mask } = self;
        let (input, weight) = (inputs[1], inputs[2]);
        // One bias per output channel: weight dim 0, or dim 1 times the groups when transposed.
        let channels = if forward.transposed {
            weight.dims.get(1).and_then(Dim::as_static).and_then(|c| c.checked_mul(forward.groups)).map(Dim::Static)
        } else {
            weight.dims.first().cloned()
        };
        let bias = Expected::partial(Some(weight.dtype), vec![channels]);
        Ok(masked(mask, [like(input), like(weight), bias]))
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

impl OpDef for GroupNormBackward {
    fn arity(&self) -> Arity {
        let GroupNormBackward { has_weight, .. } = self;
        Arity::fixed(4 + usize::from(*has_weight), 3)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let GroupNormBackward { mask, .. } = self;
        norm_backward(mask, inputs)
    }
}

op! {
    /// `_adaptive_avg_pool2d_backward`: inputs `[grad_output, self]`.
    pub struct AdaptiveAvgPoolBackward = "adaptive_avg_pool_backward";
}

impl OpDef for AdaptiveAvgPoolBackward {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        // The gradient of an input has the input's type.
        one(like(inputs[1]))
    }
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

impl OpDef for Col2Im {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let Col2Im { output_size, kernel, .. } = self;
        let x = inputs[0];
        let columns = x.rank().checked_sub(2).map(|r| &x.dims[r]);
        let per = kernel[0].checked_mul(kernel[1]).filter(|&k| k > 0);
        let channels = match (columns.and_then(Dim::as_static), per) {
            (Some(c), Some(k)) if c % k == 0 => Some(Dim::Static(c / k)),
            (Some(c), Some(_)) => {
                return Err(format!("{c} columns are not a multiple of the kernel {}", brief(kernel)))
            }
            _ => None,
        };
        let mut dims: Vec<Option<Dim>> = if x.rank() == 3 { vec![Some(x.dims[0].clone())] } else { vec![] };
        dims.extend([channels, Some(Dim::Static(output_size[0])), Some(Dim::Static(output_size[1]))]);
        one(Expected::partial(Some(x.dtype), dims))
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

impl OpDef for GridSampler {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let (x, grid) = (inputs[0], inputs[1]);
        if x.rank() != 4 || grid.rank() != 4 {
            return Err(format!("grid_sampler_2d of {} at grid {}", show(&x.dims), show(&grid.dims)));
        }
        let dims = [x.dims[0].clone(), x.dims[1].clone(), grid.dims[1].clone(), grid.dims[2].clone()];
        one(Expected::exact(x.dtype, &dims))
    }

    /// The batch (of the input and the grid), the channels, and the grid's output positions:
    /// each output position samples its own batch element and channel at its own grid point.
    /// Only the input's height and width are read at other positions (by the grid's values).
    fn position_wise(&self, _: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let link = |slot, dim, out_dim| Along { slot, dim, out: 0, out_dim };
        vec![link(0, 0, 0), link(1, 0, 0), link(0, 1, 1), link(1, 1, 2), link(1, 2, 3)]
    }
}

op! {
    /// `rand`/`randn` of the output's shape and dtype (uniform in [0, 1) or standard normal):
    /// inputs `[rng_seed]`.
    pub struct Rand = "rand" {
        pub normal: bool ["normal"],
    }
}

impl OpDef for Rand {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        // The shape of a random tensor is its declared type; only the seed is an operand.
        one(Expected::unstated())
    }

    fn is_random(&self) -> bool {
        true
    }
}

op! {
    /// `randperm(n)`, n the output's length: inputs `[rng_seed]`.
    pub struct RandPerm = "rand_perm";
}

impl OpDef for RandPerm {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        one(Expected::partial(None, vec![None]))
    }

    fn is_random(&self) -> bool {
        true
    }
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

impl OpDef for Fft {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let Fft { dims, inverse, onesided, .. } = self;
        let x = inputs[0];
        let norm = dims.iter().map(|&d| dim_index(d, x.rank())).collect::<Result<Vec<_>, _>>()?;
        let last = norm.last().copied();
        let out = (0..x.rank())
            .map(|d| match (Some(d) == last, *inverse, *onesided) {
                (true, true, _) => None,
                (true, false, true) => x.dims[d].as_static().map(|n| Dim::Static(n / 2 + 1)),
                _ => Some(x.dims[d].clone()),
            })
            .collect();
        one(Expected::partial(None, out))
    }

    /// Every dim it does not transform.
    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let rank = inputs[0].rank();
        let transformed: Vec<usize> = self.dims.iter().filter_map(|&d| dim_index(d, rank).ok()).collect();
        Along::same(inputs, outputs, (0..rank).filter(|d| !transformed.contains(d)).collect::<Vec<_>>())
    }

    /// Along a transformed dim: a product with the DFT matrix of the real length.
    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Fourier(self.clone()))
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

impl OpDef for Arange {
    fn arity(&self) -> Arity {
        Arity::fixed(0, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        let Arange { start, end, step } = self;
        one(Expected::partial(None, vec![Some(Dim::Static(arange_len(*start, *end, *step)?))]))
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `arange` whose start or end is a symbolic size (`arange(past, past + t)`: the positions
    /// after a cache of a dynamic length): no inputs.
    pub struct ArangeSym = "arange_sym" {
        pub start: Dim ["start"],
        pub end: Dim ["end"],
        pub step: i64 ["step"],
    }
}

impl OpDef for ArangeSym {
    fn arity(&self) -> Arity {
        Arity::fixed(0, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        match self {
            ArangeSym { step, .. } if *step == 0 => Err("arange step 0".into()),
            ArangeSym { start, end, step: 1 } => {
                let count = SymExpr::Add(vec![end.to_expr(), SymExpr::Mul(vec![SymExpr::Int(-1), start.to_expr()])]);
                one(Expected::shape(&[Dim::from_expr(count.simplify())]))
            }
            _ => one(Expected::partial(None, vec![None])),
        }
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `scalar_tensor(value)`: no inputs, a 0-d result.
    pub struct ScalarTensor = "scalar_tensor" {
        pub value: Scalar ["value"],
    }
}

impl OpDef for ScalarTensor {
    fn arity(&self) -> Arity {
        Arity::fixed(0, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        one(Expected::shape(&[]))
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `_assert_tensor_metadata`: inputs `[x]`, no outputs; a no-op at run time.
    pub struct AssertMetadata = "assert_metadata" {
        pub dtype: Option<DType> ["dtype"],
    }
}

impl OpDef for AssertMetadata {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 0)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        Ok(vec![])
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `sym_size.int(x, dim)`: inputs `[x]`, one 0-d `i64` output whose value is the size.
    pub struct SymSize = "sym_size" {
        pub dim: i64 ["dim"],
    }
}

impl OpDef for SymSize {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let SymSize { dim } = self;
        let x = inputs[0];
        if x.rank() == 0 {
            return Err("sym_size of a 0-d tensor".into());
        }
        dim_index(*dim, x.rank())?;
        one(Expected::exact(DType::I64, &[]))
    }
}

op! {
    /// A symbolic integer computed on sizes (`_operator.add` and friends): no inputs, one 0-d
    /// `i64` output. The export records its value as an expression, kept here.
    pub struct SymInt = "sym_int" {
        pub value: Dim ["value"],
    }
}

impl OpDef for SymInt {
    fn arity(&self) -> Arity {
        Arity::fixed(0, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        one(Expected::exact(DType::I64, &[]))
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

impl OpSyntax for Unsupported {
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

impl OpDef for Unsupported {
    fn arity(&self) -> Arity {
        Arity { inputs: None, outputs: None }
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        // An input's declared type is the contract; an unsupported op has no semantics here.
        Ok(vec![])
    }
}

/// Gradients that `mask` does not ask for are undefined: nothing is said of them.
fn masked(mask: &[bool; 3], results: [Expected; 3]) -> Vec<Expected> {
    results.into_iter().zip(mask).map(|(e, &wanted)| if wanted { e } else { Expected::unstated() }).collect()
}

/// `arange`'s length, `ceil((end - start) / step)` as PyTorch computes it (in double for float
/// arguments), refusing a zero or non-finite step and lengths that do not fit.
fn arange_len(start: Scalar, end: Scalar, step: Scalar) -> Result<i64, String> {
    if let (Scalar::Int(a), Scalar::Int(b), Scalar::Int(s)) = (start, end, step) {
        if s == 0 {
            return Err("arange step 0".into());
        }
        let span = b.checked_sub(a).ok_or("arange's length overflows")?;
        let n = span.checked_add(s - s.signum()).ok_or("arange's length overflows")? / s;
        return Ok(n.max(0));
    }
    let (a, b, s) = (start.as_f64(), end.as_f64(), step.as_f64());
    let n = ((b - a) / s).ceil();
    if !n.is_finite() || s == 0.0 || n > i64::MAX as f64 {
        return Err(format!("arange({start}, {end}, {step}) has no finite length"));
    }
    Ok((n as i64).max(0))
}

/// `as_strided` over `x`'s contiguous storage must stay inside it.
fn strided_in_bounds(x: &TensorType, size: &[i64], stride: &[i64], offset: i64) -> Result<(), String> {
    if size.len() != stride.len() || size.iter().chain(stride).any(|&v| v < 0) || offset < 0 {
        return Err(format!("as_strided sizes {}, strides {}, offset {offset}", brief(size), brief(stride)));
    }
    if size.contains(&0) {
        return Ok(());
    }
    let last = size.iter().zip(stride).try_fold(offset, |acc, (&n, &s)| (n - 1).checked_mul(s)?.checked_add(acc));
    let numel = x.static_dims().map(|d| d.iter().try_fold(1i64, |a, &n| a.checked_mul(n)));
    match (last, numel) {
        (None, _) => Err("as_strided reaches past any storage (the offset arithmetic overflows)".into()),
        (Some(l), Some(Some(n))) if l >= n => Err(format!(
            "as_strided (sizes {size:?}, strides {stride:?}, offset {offset}) reads element {l} of a {n}-element input"
        )),
        _ => Ok(()),
    }
}

/// A norm's gradients `[grad_input, grad_weight, grad_bias]` as `mask` asks: the input's type
/// for the first (the statistics' gradients are left open).
fn norm_backward(mask: &[bool; 3], inputs: &[&TensorType]) -> RuleResult {
    // PyTorch's kernels do not check this, and read past a smaller gradient.
    if inputs[0].dims != inputs[1].dims {
        return Err(format!(
            "the gradient {} does not have the input's shape {}",
            show(&inputs[0].dims),
            show(&inputs[1].dims)
        ));
    }
    Ok(masked(mask, [like(inputs[1]), Expected::unstated(), Expected::unstated()]))
}
