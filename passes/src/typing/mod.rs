//! Type rules: the result types of an op from its operand types and attributes, with
//! PyTorch's semantics (promotion, broadcasting, negative dims, keepdim, view element counts,
//! slice bounds, convolution and pooling arithmetic).
//!
//! One file per op family; [`infer`] dispatches, and its `match` over `Op` has no fallback
//! arm: every op has a rule, and a new op cannot be added without one. [`arity`] (how many
//! tensor operands and results each op has) lives here too. The verifier compares every
//! node's declared output types with what its rule infers, after import (where the declared
//! types are the archive's `tensor_meta`), after `specialize` and after every pass, so neither
//! a damaged archive nor a broken pass reaches the emitter with a type its operands do not give.
//!
//! A rule may leave part of a result open ([`Expected`]: a dtype or a dim it cannot tell, such
//! as a size computed from a symbolic input or an adaptive pool's recorded output size; a whole
//! result, such as an undefined gradient), or state only the leading results (a norm's saved
//! statistics); what it states is checked. Graph inputs state nothing (their declared type is
//! the contract), nor do unsupported ops (they have no semantics here).

mod elementwise;
mod index;
mod linalg;
mod misc;
mod nn;
mod reduce;
mod shape;

use crate::ir::ops::{
    AdaptiveAvgPoolBackward, BatchNormInference, BatchNormTraining, Binary, Bmm, ClampTensor, Convert, Convolution,
    CopyFrom, Embedding, EmbeddingBag, GroupNorm, GroupNormBackward, GroupedMm, Identity, Index, IndexPut, LayerNorm,
    LayerNormBackward, MaskedScatter, Mm, RandPerm, Scatter, SplitWithSizes, Where,
};
use crate::ir::{DType, Dim, Op, Operand, TensorType};

pub use elementwise::{promote_types, result_type};

/// What a rule says of one result: its dtype and each of its dims, where the rule can tell.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// The element type, when the rule determines it.
    pub dtype: Option<DType>,
    /// The dims; `None` for a dim the rule cannot tell.
    pub dims: Vec<Option<Dim>>,
    /// True when not even the rank is stated (`dims` is then empty).
    pub any_rank: bool,
}

impl Expected {
    /// A result of fully known type.
    pub fn exact(dtype: DType, dims: &[Dim]) -> Expected {
        Expected::shape(dims).with_dtype(dtype)
    }

    /// A result with known dims whose dtype the rule leaves open.
    pub fn shape(dims: &[Dim]) -> Expected {
        Expected::partial(None, dims.iter().cloned().map(Some).collect())
    }

    /// A result of known rank with the given dtype and dims, each possibly open.
    pub fn partial(dtype: Option<DType>, dims: Vec<Option<Dim>>) -> Expected {
        Expected { dtype, dims, any_rank: false }
    }

    /// A result the rule says nothing about (an undefined gradient, a random tensor's shape).
    pub fn unstated() -> Expected {
        Expected { dtype: None, dims: vec![], any_rank: true }
    }

    /// The same dims with the dtype set.
    pub fn with_dtype(mut self, dtype: DType) -> Expected {
        self.dtype = Some(dtype);
        self
    }

    /// True when `ty` agrees with everything this says.
    pub fn admits(&self, ty: &TensorType) -> bool {
        self.dtype.is_none_or(|d| d == ty.dtype)
            && (self.any_rank
                || self.dims.len() == ty.dims.len()
                    && self.dims.iter().zip(&ty.dims).all(|(e, d)| e.as_ref().is_none_or(|e| same_dim(e, d))))
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.dtype {
            Some(d) => write!(f, "{d}")?,
            None => f.write_str("?")?,
        }
        if self.any_rank {
            return f.write_str("[…]");
        }
        f.write_str("[")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match d {
                Some(d) => write!(f, "{d}")?,
                None => f.write_str("?")?,
            }
        }
        f.write_str("]")
    }
}

/// What a rule says of an op's results (the leading ones at least), or why its operands cannot
/// be given to it (wrong rank, dims out of range, shapes that do not broadcast, …).
pub type RuleResult = Result<Vec<Expected>, String>;

/// The result types `op` gives for operands of types `inputs` (arity already checked).
pub fn infer(op: &Op, inputs: &[&TensorType]) -> RuleResult {
    match op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Where(_)
        | Op::Clamp(_)
        | Op::ClampTensor(_)
        | Op::Elu(_)
        | Op::LeakyRelu(_)
        | Op::Identity(Identity)
        | Op::Convert(Convert)
        | Op::FullLike(_)
        | Op::CopyFrom(CopyFrom)
        | Op::Dropout(_) => elementwise::infer(op, inputs),
        Op::Mm(Mm) | Op::Bmm(Bmm) | Op::Addmm(_) | Op::GroupedMm(GroupedMm) | Op::Convolution(_) => {
            linalg::infer(op, inputs)
        }
        Op::View(_)
        | Op::Permute(_)
        | Op::Expand(_)
        | Op::Unsqueeze(_)
        | Op::Squeeze(_)
        | Op::Slice(_)
        | Op::Select(_)
        | Op::Cat(_)
        | Op::Flip(_)
        | Op::Repeat(_)
        | Op::Pad(_)
        | Op::SplitWithSizes(_)
        | Op::Literal(_)
        | Op::Full(_) => shape::infer(op, inputs),
        Op::Reduce(_)
        | Op::ArgReduce(_)
        | Op::Var(_)
        | Op::ExtremumDim(_)
        | Op::Sort(_)
        | Op::TopK(_)
        | Op::Cumulative(_)
        | Op::Histc(_)
        | Op::Softmax(_) => reduce::infer(op, inputs),
        Op::MaxPool(_)
        | Op::AvgPool(_)
        | Op::AdaptiveAvgPool(_)
        | Op::LayerNorm(_)
        | Op::GroupNorm(_)
        | Op::BatchNormInference(_)
        | Op::BatchNormTraining(_) => nn::infer(op, inputs),
        Op::Index(_)
        | Op::IndexSelect(_)
        | Op::Gather(_)
        | Op::Scatter(_)
        | Op::IndexPut(_)
        | Op::SliceScatter(_)
        | Op::SelectScatter(_)
        | Op::MaskedScatter(MaskedScatter)
        | Op::EmbeddingBackward(_)
        | Op::Embedding(Embedding)
        | Op::EmbeddingBag(_) => index::infer(op, inputs),
        Op::PadMode(_)
        | Op::AsStrided(_)
        | Op::Diagonal(_)
        | Op::Cdist(_)
        | Op::Pdist(_)
        | Op::MaxPoolBackward(_)
        | Op::AvgPoolBackward(_)
        | Op::LayerNormBackward(_)
        | Op::ConvolutionBackward(_)
        | Op::GroupNormBackward(_)
        | Op::AdaptiveAvgPoolBackward(AdaptiveAvgPoolBackward)
        | Op::Upsample(_)
        | Op::Col2Im(_)
        | Op::GridSampler(_)
        | Op::Rand(_)
        | Op::RandPerm(RandPerm)
        | Op::Fft(_)
        | Op::Arange(_)
        | Op::ArangeSym(_)
        | Op::ScalarTensor(_)
        | Op::AssertMetadata(_)
        | Op::SymSize(_)
        | Op::SymInt(_) => misc::infer(op, inputs),
        // An input's declared type is the contract; an unsupported op has no semantics here.
        Op::Input(_) | Op::Unsupported(_) => Ok(vec![]),
    }
}

/// Number of tensor inputs an op takes (`None`: any number, at least one) and outputs it makes.
pub fn arity(op: &Op) -> (Option<usize>, Option<usize>) {
    let tensors = |os: &[&Operand]| os.iter().filter(|o| matches!(o, Operand::Tensor)).count();
    let flag = usize::from;
    let (inputs, outputs) = match op {
        Op::Input(_) | Op::Arange(_) | Op::ArangeSym(_) | Op::Full(_) => (0, 1),
        Op::ScalarTensor(_) | Op::SymInt(_) | Op::Literal(_) => (0, 1),
        Op::Unary(_) | Op::Clamp(_) | Op::Softmax(_) | Op::Reduce(_) => (1, 1),
        Op::Elu(_) | Op::LeakyRelu(_) | Op::Var(_) | Op::Select(_) | Op::Diagonal(_) => (1, 1),
        Op::Flip(_) | Op::Repeat(_) | Op::Pad(_) | Op::PadMode(_) => (1, 1),
        Op::ExtremumDim(_) | Op::Sort(_) | Op::TopK(_) => (1, 2),
        Op::CopyFrom(CopyFrom) | Op::SliceScatter(_) | Op::SelectScatter(_) | Op::EmbeddingBackward(_) => (2, 1),
        Op::MaskedScatter(MaskedScatter) | Op::MaxPoolBackward(_) => (3, 1),
        Op::EmbeddingBag(EmbeddingBag { per_sample_weights, .. }) => (3 + flag(*per_sample_weights), 4),
        Op::Col2Im(_) | Op::Rand(_) | Op::RandPerm(RandPerm) | Op::Fft(_) => (1, 1),
        Op::Dropout(_) => (2, 2),
        Op::GridSampler(_) => (2, 1),
        Op::ConvolutionBackward(_) => (3, 3),
        Op::LayerNormBackward(LayerNormBackward { has_weight, .. })
        | Op::GroupNormBackward(GroupNormBackward { has_weight, .. }) => (4 + flag(*has_weight), 3),
        Op::AsStrided(_) | Op::Pdist(_) => (1, 1),
        Op::Cdist(_) | Op::AdaptiveAvgPoolBackward(AdaptiveAvgPoolBackward) | Op::AvgPoolBackward(_) => (2, 1),
        Op::Scatter(Scatter { value, .. }) => (2 + usize::from(value.is_none()), 1),
        Op::IndexPut(IndexPut { present, .. }) => (2 + present.iter().filter(|&&p| p).count(), 1),
        Op::ClampTensor(ClampTensor { has_min, has_max }) => (1 + flag(*has_min) + flag(*has_max), 1),
        Op::ArgReduce(_) | Op::Cumulative(_) | Op::View(_) | Op::Permute(_) => (1, 1),
        Op::Expand(_) | Op::Unsqueeze(_) | Op::Squeeze(_) | Op::Identity(Identity) => (1, 1),
        Op::Slice(_) | Op::FullLike(_) | Op::Convert(Convert) | Op::SymSize(_) => (1, 1),
        Op::Binary(Binary { lhs, rhs, .. }) => (tensors(&[lhs, rhs]), 1),
        Op::Where(Where { on_true, on_false }) => (1 + tensors(&[on_true, on_false]), 1),
        Op::Mm(Mm) | Op::Bmm(Bmm) | Op::IndexSelect(_) | Op::Gather(_) | Op::Embedding(Embedding) => (2, 1),
        Op::Addmm(_) | Op::GroupedMm(GroupedMm) => (3, 1),
        Op::Histc(_) => (1, 1),
        Op::Convolution(Convolution { has_bias, .. }) => (2 + flag(*has_bias), 1),
        Op::MaxPool(_) => (1, 2),
        Op::AvgPool(_) | Op::AdaptiveAvgPool(_) | Op::Upsample(_) => (1, 1),
        Op::GroupNorm(GroupNorm { has_weight, has_bias, .. }) => (1 + flag(*has_weight) + flag(*has_bias), 3),
        Op::BatchNormTraining(BatchNormTraining { has_weight, has_bias, running_stats, momentum, .. }) => {
            (1 + flag(*has_weight) + flag(*has_bias) + 2 * flag(*running_stats), 3 + 2 * flag(momentum.is_some()))
        }
        Op::BatchNormInference(BatchNormInference { has_weight, has_bias, .. }) => {
            (3 + flag(*has_weight) + flag(*has_bias), 3)
        }
        Op::LayerNorm(LayerNorm { has_weight, has_bias, .. }) => (1 + flag(*has_weight) + flag(*has_bias), 3),
        Op::SplitWithSizes(SplitWithSizes { sizes, .. }) => (1, sizes.len()),
        Op::Index(Index { present }) => (1 + present.iter().filter(|&&p| p).count(), 1),
        Op::AssertMetadata(_) => (1, 0),
        Op::Cat(_) => return (None, Some(1)),
        Op::Unsupported(_) => return (None, None),
    };
    (Some(inputs), Some(outputs))
}

/// Two dims are equal when their canonical forms are.
pub fn same_dim(a: &Dim, b: &Dim) -> bool {
    a == b || a.to_expr().simplify() == b.to_expr().simplify()
}

/// A dim index of an operand of rank `rank` (negative counts from the end), checked the way
/// PyTorch checks it; a 0-d operand accepts `0` and `-1`, as PyTorch's reductions do.
pub(crate) fn dim_index(d: i64, rank: usize) -> Result<usize, String> {
    let r = rank.max(1) as i64;
    let n = if d < 0 { d + r } else { d };
    if (0..r).contains(&n) {
        Ok(n as usize)
    } else {
        Err(format!("dim {d} is out of range for a tensor of rank {rank}"))
    }
}

/// `[a,b,c]` for messages.
pub(crate) fn show(dims: &[Dim]) -> String {
    let v: Vec<String> = dims.iter().map(ToString::to_string).collect();
    format!("[{}]", v.join(","))
}

/// NumPy broadcasting of several shapes.
pub(crate) fn broadcast(shapes: &[&[Dim]]) -> Result<Vec<Dim>, String> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let one = Dim::Static(1);
    let fail = || {
        let all: Vec<String> = shapes.iter().map(|s| show(s)).collect();
        format!("operands {} do not broadcast", all.join(" and "))
    };
    (0..rank)
        .map(|i| {
            let mut out = one.clone();
            for s in shapes {
                let Some(d) = (s.len() + i).checked_sub(rank).map(|k| &s[k]) else {
                    continue;
                };
                if same_dim(d, &one) {
                    continue;
                }
                if same_dim(&out, &one) {
                    out = d.clone();
                } else if !same_dim(&out, d) {
                    return Err(fail());
                }
            }
            Ok(out)
        })
        .collect()
}

/// A single result.
pub(crate) fn one(e: Expected) -> RuleResult {
    Ok(vec![e])
}

#[cfg(test)]
mod tests;
