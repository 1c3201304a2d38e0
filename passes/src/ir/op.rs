//! The closed set of operations of the IR.
//!
//! Each variant carries the non-tensor attributes of an ATen op with every schema default
//! filled in; tensor operands are the node's inputs, in slot order. Adding a variant makes the
//! compiler point at every `match` that must handle it (printer, verifier, emitter).

use serde::{Deserialize, Serialize};

use super::types::{DType, Dim, Scalar};

/// What a graph input is bound to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// An `nn.Parameter`, by fully qualified name.
    Parameter {
        /// State-dict name, e.g. `fc1.weight`.
        fqn: String,
    },
    /// A registered buffer; non-persistent buffers live in the archive's constants.
    Buffer {
        /// State-dict name, e.g. `bn1.running_mean`.
        fqn: String,
        /// Whether the buffer is part of the `state_dict`.
        persistent: bool,
    },
    /// A tensor constant lifted out of `forward`.
    Constant {
        /// Name in the archive's constants, e.g. `lifted_tensor_0`.
        fqn: String,
    },
    /// The `index`-th tensor the caller passes.
    User {
        /// Position among the user inputs.
        index: usize,
    },
    /// The key of the program's random numbers (`u64[2]`, Threefry), present when the graph has
    /// random ops; `run --seed` supplies it. It comes after the user inputs.
    RngSeed,
    /// The real value of a symbol in a program compiled for a size bucket (`i64[]`, after all
    /// other inputs, one per symbol in name order); `run` supplies it.
    Size {
        /// The symbol, as named in the archive.
        symbol: String,
    },
    /// A weight a pass computes at compile time from stored weights (e.g. a convolution with a
    /// BatchNorm folded in); stored in the artifact as `fqn`.
    Derived {
        /// Name in the artifact's weights.
        fqn: String,
        /// How to compute it.
        recipe: WeightRecipe,
    },
}

/// How a derived weight is computed from stored weights (state-dict names), in f64, stored as
/// f32. `s = gamma / sqrt(var + eps)` per output channel (gamma 1 when absent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightRecipe {
    /// A convolution weight `[C_out, …]` with each output channel scaled by `s`.
    BnFoldedWeight {
        /// The convolution weight.
        weight: String,
        /// BatchNorm weight.
        gamma: Option<String>,
        /// Running variance.
        var: String,
        /// BatchNorm epsilon.
        eps: f64,
    },
    /// The same values, stored in the derived input's dtype (e.g. bf16 for mixed precision).
    Cast {
        /// The stored weight.
        weight: String,
    },
    /// Matrices `[n_i, k]` stacked into `[sum n_i, k]` (e.g. Q, K and V projections).
    ConcatRows {
        /// The stored weights, in order.
        weights: Vec<String>,
    },
    /// Another recipe's `dims`-shaped value with zeros appended up to `padded` in each dim, or
    /// in each block of a dim (the `pad` pass). `Cast` stands for a stored weight as it is.
    Pad {
        /// What is padded.
        source: Box<WeightRecipe>,
        /// Its shape.
        dims: Vec<i64>,
        /// The shape after padding.
        padded: Vec<i64>,
        /// Per dim, how many equal blocks it holds, each padded at its end (1: the dim's end;
        /// absent: 1 for every dim).
        #[serde(default)]
        blocks: Vec<i64>,
    },
    /// Another recipe's `dims`-shaped value narrowed to `len` indices of dim `dim` from `start`
    /// (one of the Q, K and V projections of a fused weight, for tensor parallelism).
    Narrow {
        /// What is narrowed.
        source: Box<WeightRecipe>,
        /// Its shape.
        dims: Vec<i64>,
        /// The dim narrowed.
        dim: i64,
        /// The first index kept.
        start: i64,
        /// How many indices are kept.
        len: i64,
    },
    /// Another recipe's `dims`-shaped value with its dims reordered: dim `i` of the result is
    /// dim `perm[i]` of the source (`weight_layout`'s convolution kernels, spatial dims first).
    Permute {
        /// What is permuted.
        source: Box<WeightRecipe>,
        /// Its shape.
        dims: Vec<i64>,
        /// The source dim each result dim takes.
        perm: Vec<i64>,
    },
    /// `(bias - mean) * s + beta` (bias and beta 0 when absent).
    BnFoldedBias {
        /// The convolution bias.
        bias: Option<String>,
        /// BatchNorm weight.
        gamma: Option<String>,
        /// BatchNorm bias.
        beta: Option<String>,
        /// Running mean.
        mean: String,
        /// Running variance.
        var: String,
        /// BatchNorm epsilon.
        eps: f64,
    },
}

impl WeightRecipe {
    /// True for the dtypes recipes read stored weights in and write derived ones in: f32, bf16
    /// and f16 (read exactly as f32; values only moved are written back exactly, computed ones
    /// rounded).
    pub fn handles(dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
    }
}

impl InputKind {
    /// The state-dict or constant name of a stored input; `None` for user inputs.
    pub fn weight_fqn(&self) -> Option<&str> {
        match self {
            InputKind::Parameter { fqn } | InputKind::Buffer { fqn, .. } | InputKind::Constant { fqn } => Some(fqn),
            InputKind::User { .. } | InputKind::RngSeed | InputKind::Size { .. } | InputKind::Derived { .. } => None,
        }
    }

    /// A weight as a recipe and its name: a derived weight's own, or a stored weight as the
    /// `Cast` to its own dtype; `None` for what the caller binds.
    pub fn as_recipe(&self) -> Option<(String, WeightRecipe)> {
        match self {
            InputKind::Derived { fqn, recipe } => Some((fqn.clone(), recipe.clone())),
            k => k.weight_fqn().map(|f| (f.to_string(), WeightRecipe::Cast { weight: f.to_string() })),
        }
    }

    /// Weights (stored or derived) are bound by the compiler; user inputs and the seed by the
    /// caller.
    pub fn is_weight(&self) -> bool {
        !matches!(self, InputKind::User { .. } | InputKind::RngSeed | InputKind::Size { .. })
    }
}

/// Element-wise functions of one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // variants and fields are named after the ATen ops and arguments
pub enum UnaryOp {
    Abs,
    Acos,
    Acosh,
    Asin,
    Asinh,
    Atan,
    Atanh,
    /// `bitwise_not`: logical not on bool, ones' complement on integers.
    BitwiseNot,
    Ceil,
    Cos,
    Cosh,
    Erf,
    Exp,
    /// `exp2`: `2^x`.
    Exp2,
    Expm1,
    Floor,
    /// `isinf`, bool result.
    IsInf,
    /// `isnan`, bool result.
    IsNan,
    Log10,
    Log1p,
    Log2,
    Reciprocal,
    /// `round`: half to even.
    Round,
    Sign,
    Sinh,
    Tan,
    Trunc,
    /// `gelu` with `approximate='none'`.
    Gelu,
    /// `gelu` with `approximate='tanh'`.
    GeluTanh,
    Log,
    LogicalNot,
    Neg,
    Relu,
    Rsqrt,
    Sigmoid,
    Sin,
    Sqrt,
    Tanh,
}

/// Element-wise functions of two operands with broadcasting and PyTorch type promotion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // variants and fields are named after the ATen ops and arguments
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// True division (`div.Tensor` without rounding mode).
    Div,
    Pow,
    Maximum,
    Minimum,
    BitwiseAnd,
    BitwiseOr,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    BitwiseXor,
    /// `bitwise_left_shift`: shifts of the bit width or more give 0.
    ShiftLeft,
    /// `bitwise_right_shift`: arithmetic on signed types (shifts of the bit width or more
    /// give 0 or -1), logical on unsigned ones.
    ShiftRight,
    Atan2,
    /// `fmod`: the remainder has the sign of the dividend.
    Fmod,
    /// `remainder`: Python's modulo, the remainder has the sign of the divisor.
    Remainder,
    /// `div(rounding_mode='floor')`.
    FloorDiv,
    /// `div(rounding_mode='trunc')`.
    TruncDiv,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    /// True for comparisons, whose result is `bool`.
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }
}

/// Reductions over a set of dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // variants and fields are named after the ATen ops and arguments
pub enum ReduceOp {
    Sum,
    Mean,
    Prod,
    /// `amax`.
    Max,
    /// `amin`.
    Min,
    Any,
    All,
}

impl ReduceOp {
    /// The value that leaves the reduction unchanged, in `dtype`: what padding and masks past
    /// the real size are set to, and what a reduction starts from. `mean` is reduced as a sum.
    pub fn identity(self, dtype: DType) -> Scalar {
        match self {
            ReduceOp::Sum | ReduceOp::Mean => dtype.scalar(0),
            ReduceOp::Prod => dtype.scalar(1),
            ReduceOp::Max => dtype.lowest(),
            ReduceOp::Min => dtype.highest(),
            ReduceOp::Any => Scalar::Bool(false),
            ReduceOp::All => Scalar::Bool(true),
        }
    }
}

/// The running reductions: `cumsum`, `cumprod`, `logcumsumexp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // the ops' names
pub enum CumulativeOp {
    Cumsum,
    Cumprod,
    Logcumsumexp,
}

/// How `scatter`-like ops combine an update with what is already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // the names of `scatter_reduce`'s `reduce` argument
pub enum ScatterReduce {
    /// Plain `scatter`: the update replaces the value.
    Replace,
    Sum,
    Prod,
    Mean,
    Amax,
    Amin,
}

impl ScatterReduce {
    /// What a position that receives updates starts from when `include_self` is false: the
    /// identity of the reduction (0 for a plain scatter, whose update replaces it).
    pub fn identity(self, dtype: DType) -> Scalar {
        let reduce = match self {
            ScatterReduce::Replace | ScatterReduce::Sum | ScatterReduce::Mean => ReduceOp::Sum,
            ScatterReduce::Prod => ReduceOp::Prod,
            ScatterReduce::Amax => ReduceOp::Max,
            ScatterReduce::Amin => ReduceOp::Min,
        };
        reduce.identity(dtype)
    }
}

impl CumulativeOp {
    /// The value before the first element: 0, 1, or `-inf` for `logcumsumexp`.
    pub fn identity(self, dtype: DType) -> Scalar {
        match self {
            CumulativeOp::Cumsum => dtype.scalar(0),
            CumulativeOp::Cumprod => dtype.scalar(1),
            CumulativeOp::Logcumsumexp => Scalar::Float(f64::NEG_INFINITY),
        }
    }
}

/// How `_embedding_bag` combines the rows of a bag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // the values of `_embedding_bag`'s `mode` argument (0, 1, 2)
pub enum BagMode {
    Sum,
    Mean,
    Max,
}

/// How `grid_sampler_2d` reads between pixels (`interpolation_mode` 0, 1, 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Interpolation {
    Bilinear,
    Nearest,
    Bicubic,
}

/// What `grid_sampler_2d` reads outside the input (`padding_mode` 0, 1, 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum GridPadding {
    Zeros,
    Border,
    Reflection,
}

/// Index-of-extremum reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // variants and fields are named after the ATen ops and arguments
pub enum ArgReduceOp {
    Argmax,
    Argmin,
}

/// An operand of an element-wise op that may be a tensor (a node input) or a Python scalar.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operand {
    /// The next tensor input of the node.
    Tensor,
    /// A Python scalar; it follows PyTorch's wrapped-number promotion rules.
    Scalar(Scalar),
}

/// One operation. Tensor operands are node inputs in slot order; the docs of each variant
/// name them. Attributes are normalized: defaults filled in, negative dims kept as written
/// (the verifier and emitter normalize them against the operand rank).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // variants and fields are named after the ATen ops and arguments
pub enum Op {
    /// A graph input (no inputs, one output).
    Input(InputKind),
    /// `f(x)`: inputs `[x]`.
    Unary(UnaryOp),
    /// `lhs op (alpha * rhs)`: one input per `Operand::Tensor`, lhs first.
    Binary {
        op: BinaryOp,
        lhs: Operand,
        rhs: Operand,
        /// Multiplier of `rhs` for `add`/`sub` (`alpha`), when not 1.
        alpha: Option<Scalar>,
    },
    /// `where(cond, a, b)`: one input per `Operand::Tensor`, cond first.
    Where { on_true: Operand, on_false: Operand },
    /// `clamp(x, min, max)` (also `hardtanh`): inputs `[x]`.
    Clamp { min: Option<Scalar>, max: Option<Scalar> },
    /// `clamp.Tensor(x, min, max)`: inputs `[x, (min), (max)]`.
    ClampTensor { has_min: bool, has_max: bool },
    /// `elu`: `x > 0 ? scale*x : scale*alpha*(exp(input_scale*x) - 1)`; inputs `[x]`.
    Elu { alpha: f64, scale: f64, input_scale: f64 },
    /// `leaky_relu`: `x > 0 ? x : slope*x`; inputs `[x]`.
    LeakyRelu { slope: f64 },
    /// `mm(a, b)`: inputs `[a, b]`.
    Mm,
    /// `bmm(a, b)`: inputs `[a, b]`.
    Bmm,
    /// `beta*c + alpha*(a @ b)`: inputs `[c, a, b]`.
    Addmm { beta: Scalar, alpha: Scalar },
    /// `_grouped_mm(a, b, offs)` as mixture-of-experts layers use it: inputs `[a [S, K],
    /// b [G, K, N], offs i32 [G]]`; rows `offs[g-1]..offs[g]` of `a` (from 0 for `g = 0`) are
    /// multiplied by `b[g]`, rows past `offs[G-1]` give zeros (PyTorch leaves them undefined).
    GroupedMm,
    /// `histc(x, bins, min, max)`: counts of `x`'s elements in `bins` equal bins over
    /// `[min, max]` (the last bin includes `max`, others ignored), in `x`'s dtype: inputs `[x]`.
    Histc { bins: i64, min: f64, max: f64 },
    /// N-d convolution: inputs `[x, w]` or `[x, w, bias]`.
    Convolution {
        stride: Vec<i64>,
        padding: Vec<i64>,
        dilation: Vec<i64>,
        transposed: bool,
        output_padding: Vec<i64>,
        groups: i64,
        has_bias: bool,
    },
    /// `max_pool2d/3d_with_indices` over the trailing `kernel.len()` dims: inputs `[x]`,
    /// outputs `[values, indices]` (flat index within each channel's spatial grid).
    MaxPool { kernel: Vec<i64>, stride: Vec<i64>, padding: Vec<i64>, dilation: Vec<i64>, ceil_mode: bool },
    /// `avg_pool2d`/`avg_pool3d` over the trailing `kernel.len()` dims: inputs `[x]`.
    AvgPool {
        kernel: Vec<i64>,
        stride: Vec<i64>,
        padding: Vec<i64>,
        ceil_mode: bool,
        count_include_pad: bool,
        divisor_override: Option<i64>,
    },
    /// `_adaptive_avg_pool2d`/`3d` over the trailing `spatial` dims, to the recorded output
    /// size: inputs `[x]`.
    AdaptiveAvgPool { spatial: usize },
    /// `upsample_nearest2d`/`upsample_bilinear2d` to the recorded output size; `scales` are the
    /// explicit `scale_factors` when given (they change the source index): inputs `[x]`.
    Upsample { bilinear: bool, align_corners: bool, scales: Option<Vec<f64>> },
    /// `native_group_norm`: inputs `[x, (weight), (bias)]`, outputs `[y, mean, rstd]`.
    GroupNorm { groups: i64, eps: f64, has_weight: bool, has_bias: bool },
    /// `_native_batch_norm_legit` in training mode (batch statistics): inputs
    /// `[x, (weight), (bias)]` plus the running stats when present, outputs `[y, mean, rstd]`.
    /// `_native_batch_norm_legit_functional` also returns the updated running stats (outputs
    /// `[y, mean, rstd, running_mean, running_var]`), blending in `momentum`.
    BatchNormTraining { eps: f64, has_weight: bool, has_bias: bool, running_stats: bool, momentum: Option<f64> },
    /// `_native_batch_norm_legit_no_training`: inputs `[x, (weight), (bias), mean, var]`,
    /// outputs `[y, save_mean, save_invstd]`.
    BatchNormInference { eps: f64, has_weight: bool, has_bias: bool },
    /// `native_layer_norm` over the last `normalized_rank` dims: inputs `[x, (weight), (bias)]`,
    /// outputs `[y, mean, rstd]`.
    LayerNorm { normalized_rank: usize, eps: f64, has_weight: bool, has_bias: bool },
    /// `_softmax` / `_log_softmax` along `dim`: inputs `[x]`. `safe`: a row whose inputs are
    /// all -inf gives zeros instead of NaN (`_safe_softmax`, the guard of attention with
    /// fully masked rows).
    Softmax { dim: i64, log: bool, safe: bool },
    /// Reduction over `dims` (all dims when empty): inputs `[x]`.
    Reduce { op: ReduceOp, dims: Vec<i64>, keepdim: bool, dtype: Option<DType> },
    /// `argmax`/`argmin` over `dim` (flattened when `None`): inputs `[x]`.
    ArgReduce { op: ArgReduceOp, dim: Option<i64>, keepdim: bool },
    /// `var` over `dims` (all when empty) with Bessel's `correction`: inputs `[x]`.
    Var { dims: Vec<i64>, correction: f64, keepdim: bool },
    /// `max.dim`/`min.dim`: inputs `[x]`, outputs `[values, indices]` (first index on ties).
    ExtremumDim { max: bool, dim: i64, keepdim: bool },
    /// `sort`: inputs `[x]`, outputs `[values, indices]`; NaN sorts as the largest value.
    Sort { dim: i64, descending: bool, stable: bool },
    /// `topk`: inputs `[x]`, outputs `[values, indices]`.
    TopK { k: i64, dim: i64, largest: bool },
    /// `cumsum`/`cumprod`/`logcumsumexp` along `dim`, in `dtype` when given: inputs `[x]`.
    Cumulative { op: CumulativeOp, dim: i64, dtype: Option<DType> },
    /// `view`/`reshape` to `size` (one entry may be -1): inputs `[x]`.
    View { size: Vec<Dim> },
    /// `permute`: inputs `[x]`.
    Permute { dims: Vec<i64> },
    /// `expand` to `size` (-1 keeps a dim): inputs `[x]`.
    Expand { size: Vec<Dim> },
    /// `unsqueeze`: inputs `[x]`.
    Unsqueeze { dim: i64 },
    /// `squeeze` of `dims` (all size-1 dims when empty): inputs `[x]`.
    Squeeze { dims: Vec<i64> },
    /// `clone`, `alias` and other identities on values: inputs `[x]`.
    Copy,
    /// `slice.Tensor`: inputs `[x]`. `end` may be `i64::MAX`, meaning "to the end".
    Slice { dim: i64, start: Dim, end: Dim, step: i64 },
    /// `select.int`: index `index` of dim `dim`, which is removed: inputs `[x]`.
    Select { dim: i64, index: i64 },
    /// `diagonal(x, offset, dim1, dim2)`: the diagonal becomes the last dim; inputs `[x]`.
    Diagonal { offset: i64, dim1: i64, dim2: i64 },
    /// `flip` of `dims`: inputs `[x]`.
    Flip { dims: Vec<i64> },
    /// `repeat`: tiles `x` `repeats[i]` times along each dim: inputs `[x]`.
    Repeat { repeats: Vec<i64> },
    /// `constant_pad_nd`: `pad` is (low, high) pairs from the last dim backwards, negative
    /// entries crop: inputs `[x]`.
    Pad { pad: Vec<i64>, value: Scalar },
    /// `reflection_pad{1,2,3}d` / `replication_pad{2,3}d`: `pad` is (low, high) pairs from the
    /// last dim backwards: inputs `[x]`.
    PadMode { pad: Vec<i64>, reflect: bool },
    /// `as_strided(x, size, stride, offset)` over `x`'s contiguous storage: inputs `[x]`.
    AsStrided { size: Vec<i64>, stride: Vec<i64>, offset: i64 },
    /// `_cdist_forward(x1, x2, p)`: p-norm distances between the rows: inputs `[x1, x2]`.
    Cdist { p: f64 },
    /// `_pdist_forward(x, p)`: p-norm distances of row pairs `i < j`, row-major: inputs `[x]`.
    Pdist { p: f64 },
    /// `max_pool{2,3}d_with_indices_backward`: the gradient routed to each window's recorded
    /// maximum: inputs `[grad_output, self, indices]`.
    MaxPoolBackward { spatial: usize },
    /// `avg_pool{2,3}d_backward` with the forward's parameters: inputs `[grad_output, self]`.
    AvgPoolBackward(Box<Op>),
    /// `native_layer_norm_backward` over the last `normalized_rank` dims: inputs
    /// `[grad_out, input, mean, rstd, (weight)]`, outputs `[grad_input, grad_weight, grad_bias]`
    /// (`mask` says which are wanted; the others are undefined).
    LayerNormBackward { normalized_rank: usize, has_weight: bool, mask: [bool; 3] },
    /// `convolution_backward` with the forward's parameters: inputs `[grad, input, weight]`,
    /// outputs `[grad_input, grad_weight, grad_bias]` as `mask` asks.
    ConvolutionBackward { forward: Box<Op>, mask: [bool; 3] },
    /// `native_group_norm_backward`: inputs `[grad_out, input, mean, rstd, (weight)]`, outputs
    /// `[grad_input, grad_weight, grad_bias]` as `mask` asks.
    GroupNormBackward { groups: i64, has_weight: bool, mask: [bool; 3] },
    /// `_adaptive_avg_pool2d_backward`: inputs `[grad_output, self]`.
    AdaptiveAvgPoolBackward,
    /// `copy(self, src)`: `src` broadcast and converted to `self`'s shape and dtype: inputs
    /// `[self, src]`.
    CopyFrom,
    /// `cat` along `dim`: inputs are the tensors.
    Cat { dim: i64 },
    /// `split_with_sizes`: inputs `[x]`, one output per size.
    SplitWithSizes { sizes: Vec<Dim>, dim: i64 },
    /// Advanced indexing `x[i0, :, i2]`: inputs `[x, present indices...]`; `present[k]` says
    /// whether position `k` has an index tensor (`None` is a full slice).
    Index { present: Vec<bool> },
    /// `index_select(x, dim, idx)`: inputs `[x, idx]`.
    IndexSelect { dim: i64 },
    /// `gather(x, dim, index)`: inputs `[x, index]`.
    Gather { dim: i64 },
    /// `scatter`/`scatter_add`/`scatter_reduce` along `dim`: inputs `[self, index, (src)]`; a
    /// scalar `value` replaces `src` for `scatter.value`.
    Scatter { dim: i64, reduce: ScatterReduce, include_self: bool, value: Option<Scalar> },
    /// `index_put(self, indices, values, accumulate)`: inputs `[self, present indices..., values]`.
    IndexPut { present: Vec<bool>, accumulate: bool },
    /// `slice_scatter`: `src` written over `self[start:end:step]` along `dim`: inputs `[self, src]`.
    SliceScatter { dim: i64, start: Dim, end: Dim, step: i64 },
    /// `select_scatter`: `src` written over `self.select(dim, index)`: inputs `[self, src]`.
    SelectScatter { dim: i64, index: i64 },
    /// `masked_scatter`: positions where `mask` is true take `source`'s elements in order:
    /// inputs `[self, mask, source]`.
    MaskedScatter,
    /// `embedding_dense_backward`: rows of the gradient summed per index: inputs
    /// `[grad_output, indices]`.
    EmbeddingBackward { num_weights: i64, padding_idx: i64, scale_grad_by_freq: bool },
    /// `embedding(weight, indices)`: inputs `[weight, indices]`.
    Embedding,
    /// `_embedding_bag` with 1-D indices and offsets: inputs `[weight, indices, offsets,
    /// (per_sample_weights)]`, outputs `[output, offset2bag, bag_size, max_indices]` shaped as
    /// PyTorch's CPU kernel makes them. Entries equal to `padding_idx` are skipped.
    EmbeddingBag { mode: BagMode, per_sample_weights: bool, include_last_offset: bool, padding_idx: Option<i64> },
    /// `col2im`: sums the columns `[N, C*kh*kw, L]` back into images `[N, C, H, W]` (the
    /// adjoint of `im2col`): inputs `[x]`.
    Col2Im { output_size: [i64; 2], kernel: [i64; 2], dilation: [i64; 2], padding: [i64; 2], stride: [i64; 2] },
    /// `grid_sampler_2d`: samples `input [N, C, H, W]` at the normalized `grid [N, Ho, Wo, 2]`
    /// (x, y in [-1, 1]): inputs `[input, grid]`.
    GridSampler { mode: Interpolation, padding: GridPadding, align_corners: bool },
    /// `rand`/`randn` of the output's shape and dtype (uniform in [0, 1) or standard normal):
    /// inputs `[rng_seed]`.
    Rand { normal: bool },
    /// `randperm(n)`, n the output's length: inputs `[rng_seed]`.
    RandPerm,
    /// `native_dropout(x, p, train)`: outputs `[x * keep / (1 - p), keep]`, each element kept
    /// with probability `1 - p` when training: inputs `[x, rng_seed]`.
    Dropout { p: f64, train: bool },
    /// `_fft_r2c` (`inverse` false: real → complex, only the non-negative frequencies of the
    /// last transformed dim when `onesided`) or `_fft_c2r` (`inverse` true: Hermitian complex →
    /// real, the last transformed dim of the output's length) over `dims`, scaled by 1, 1/√n or
    /// 1/n for `normalization` 0, 1, 2: inputs `[x]`.
    Fft { dims: Vec<i64>, normalization: i64, inverse: bool, onesided: bool },
    /// `arange(start, end, step)`: no inputs.
    Arange { start: Scalar, end: Scalar, step: Scalar },
    /// `arange` whose end is a symbolic size: no inputs.
    ArangeSym { start: i64, end: Dim, step: i64 },
    /// `full(size, value)`: no inputs.
    Full { size: Vec<Dim>, value: Scalar },
    /// A constant tensor computed at compile time by `fold_constants`: its values row-major,
    /// as the output type says (bool, i32, i64 or f32); no inputs.
    Literal { values: Vec<Scalar> },
    /// `full_like(x, value)`: inputs `[x]` (only its shape is used).
    FullLike { value: Scalar },
    /// `scalar_tensor(value)`: no inputs, a 0-d result.
    ScalarTensor { value: Scalar },
    /// `_to_copy` and friends: inputs `[x]`, converted to the output dtype.
    Convert,
    /// `_assert_tensor_metadata`: inputs `[x]`, no outputs; a no-op at run time.
    AssertMetadata { dtype: Option<DType> },
    /// `sym_size.int(x, dim)`: inputs `[x]`, one 0-d `i64` output whose value is the size.
    SymSize { dim: i64 },
    /// A symbolic integer computed on sizes (`_operator.add` and friends): no inputs, one 0-d
    /// `i64` output. The export records its value as an expression, kept here.
    SymInt { value: Dim },
    /// A target with no lowering; kept so that `check` can list them all, with the reason when
    /// there is more to say than "no lowering" (e.g. a data-dependent output shape).
    Unsupported { target: String, reason: Option<String> },
}

impl Op {
    /// Ops that draw random numbers: they read the graph's `rng_seed` input as their last
    /// input and advance the random state in graph order.
    pub fn is_random(&self) -> bool {
        matches!(self, Op::Rand { .. } | Op::RandPerm | Op::Dropout { .. })
    }

    /// Element-wise ops on broadcast operands (each output position reads the same position of
    /// every operand): arithmetic, selects, clamps, conversions, copies.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_)
                | Op::Binary { .. }
                | Op::Where { .. }
                | Op::Clamp { .. }
                | Op::ClampTensor { .. }
                | Op::Elu { .. }
                | Op::LeakyRelu { .. }
                | Op::Convert
                | Op::Copy
        )
    }

    /// Short, stable op name used by the printer, the parser and messages (`addmm`,
    /// `reduce_mean`): one arm per variant, so a new op cannot be added without its name.
    pub fn name(&self) -> String {
        match self {
            Op::Input(k) => match k {
                InputKind::Parameter { .. } => "input.param".into(),
                InputKind::Buffer { .. } => "input.buffer".into(),
                InputKind::Constant { .. } => "input.const".into(),
                InputKind::User { .. } => "input.user".into(),
                InputKind::RngSeed => "input.rng_seed".into(),
                InputKind::Size { .. } => "input.size".into(),
                InputKind::Derived { .. } => "input.derived".into(),
            },
            Op::Unary(u) => snake_case(&format!("{u:?}")),
            Op::Binary { op, .. } => snake_case(&format!("{op:?}")),
            Op::Reduce { op, .. } => format!("reduce_{}", snake_case(&format!("{op:?}"))),
            Op::ArgReduce { op, .. } => snake_case(&format!("{op:?}")),
            Op::Cumulative { op, .. } => snake_case(&format!("{op:?}")),
            Op::Unsupported { target, .. } => format!("unsupported<{target}>"),
            Op::Where { .. } => "where".into(),
            Op::Clamp { .. } => "clamp".into(),
            Op::ClampTensor { .. } => "clamp_tensor".into(),
            Op::Elu { .. } => "elu".into(),
            Op::LeakyRelu { .. } => "leaky_relu".into(),
            Op::Mm => "mm".into(),
            Op::Bmm => "bmm".into(),
            Op::Addmm { .. } => "addmm".into(),
            Op::GroupedMm => "grouped_mm".into(),
            Op::Histc { .. } => "histc".into(),
            Op::Convolution { .. } => "convolution".into(),
            Op::MaxPool { .. } => "max_pool".into(),
            Op::AvgPool { .. } => "avg_pool".into(),
            Op::AdaptiveAvgPool { .. } => "adaptive_avg_pool".into(),
            Op::Upsample { .. } => "upsample".into(),
            Op::GroupNorm { .. } => "group_norm".into(),
            Op::BatchNormTraining { .. } => "batch_norm_training".into(),
            Op::BatchNormInference { .. } => "batch_norm_inference".into(),
            Op::LayerNorm { .. } => "layer_norm".into(),
            Op::Softmax { .. } => "softmax".into(),
            Op::Var { .. } => "var".into(),
            Op::ExtremumDim { .. } => "extremum_dim".into(),
            Op::Sort { .. } => "sort".into(),
            Op::TopK { .. } => "top_k".into(),
            Op::View { .. } => "view".into(),
            Op::Permute { .. } => "permute".into(),
            Op::Expand { .. } => "expand".into(),
            Op::Unsqueeze { .. } => "unsqueeze".into(),
            Op::Squeeze { .. } => "squeeze".into(),
            Op::Copy => "copy".into(),
            Op::Slice { .. } => "slice".into(),
            Op::Select { .. } => "select".into(),
            Op::Diagonal { .. } => "diagonal".into(),
            Op::Flip { .. } => "flip".into(),
            Op::Repeat { .. } => "repeat".into(),
            Op::Pad { .. } => "pad".into(),
            Op::PadMode { .. } => "pad_mode".into(),
            Op::AsStrided { .. } => "as_strided".into(),
            Op::Cdist { .. } => "cdist".into(),
            Op::Pdist { .. } => "pdist".into(),
            Op::MaxPoolBackward { .. } => "max_pool_backward".into(),
            Op::AvgPoolBackward(_) => "avg_pool_backward".into(),
            Op::LayerNormBackward { .. } => "layer_norm_backward".into(),
            Op::ConvolutionBackward { .. } => "convolution_backward".into(),
            Op::GroupNormBackward { .. } => "group_norm_backward".into(),
            Op::AdaptiveAvgPoolBackward => "adaptive_avg_pool_backward".into(),
            Op::CopyFrom => "copy_from".into(),
            Op::Cat { .. } => "cat".into(),
            Op::SplitWithSizes { .. } => "split_with_sizes".into(),
            Op::Index { .. } => "index".into(),
            Op::IndexSelect { .. } => "index_select".into(),
            Op::Gather { .. } => "gather".into(),
            Op::Scatter { .. } => "scatter".into(),
            Op::IndexPut { .. } => "index_put".into(),
            Op::SliceScatter { .. } => "slice_scatter".into(),
            Op::SelectScatter { .. } => "select_scatter".into(),
            Op::MaskedScatter => "masked_scatter".into(),
            Op::EmbeddingBackward { .. } => "embedding_backward".into(),
            Op::Embedding => "embedding".into(),
            Op::EmbeddingBag { .. } => "embedding_bag".into(),
            Op::Col2Im { .. } => "col2im".into(),
            Op::GridSampler { .. } => "grid_sampler".into(),
            Op::Rand { .. } => "rand".into(),
            Op::RandPerm => "rand_perm".into(),
            Op::Dropout { .. } => "dropout".into(),
            Op::Fft { .. } => "fft".into(),
            Op::Arange { .. } => "arange".into(),
            Op::ArangeSym { .. } => "arange_sym".into(),
            Op::Full { .. } => "full".into(),
            Op::Literal { .. } => "literal".into(),
            Op::FullLike { .. } => "full_like".into(),
            Op::ScalarTensor { .. } => "scalar_tensor".into(),
            Op::Convert => "convert".into(),
            Op::AssertMetadata { .. } => "assert_metadata".into(),
            Op::SymSize { .. } => "sym_size".into(),
            Op::SymInt { .. } => "sym_int".into(),
        }
    }
}

/// `MaxPool` -> `max_pool`, `LogicalNot` -> `logical_not`.
fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
