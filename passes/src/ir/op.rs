//! What the ops are made of: graph input kinds and weight recipes, the members of the op
//! families (unary and binary functions, reductions, …) and scalar-or-tensor operands. The
//! ops themselves are in [`ops`](super::ops).

use serde::{Deserialize, Serialize};

use super::types::{DType, Scalar};

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
    /// `angle`: the argument of a complex value (real result); of a real one, 0 or π.
    Angle,
    Acosh,
    Asin,
    Asinh,
    Atan,
    Atanh,
    /// `bitwise_not`: logical not on bool, ones' complement on integers.
    BitwiseNot,
    Ceil,
    /// `_conj`, `conj_physical`: the complex conjugate; the identity on real values.
    Conj,
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
    /// `signbit`, bool result: the sign bit is set (`-0.0` and negative NaNs included).
    Signbit,
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
    /// The running maximum (`cummax`'s values; NaN from the first NaN on).
    Cummax,
    /// The running minimum (`cummin`'s values).
    Cummin,
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
    /// The value before the first element: 0, 1, `-inf` for `logcumsumexp`, the dtype's
    /// lowest for `cummax` and highest for `cummin`.
    pub fn identity(self, dtype: DType) -> Scalar {
        match self {
            CumulativeOp::Cumsum => dtype.scalar(0),
            CumulativeOp::Cumprod => dtype.scalar(1),
            CumulativeOp::Logcumsumexp => Scalar::Float(f64::NEG_INFINITY),
            CumulativeOp::Cummax => dtype.lowest(),
            CumulativeOp::Cummin => dtype.highest(),
        }
    }

    /// True for the running extrema, whose result keeps the operand's dtype.
    pub fn is_extremum(self) -> bool {
        matches!(self, CumulativeOp::Cummax | CumulativeOp::Cummin)
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
