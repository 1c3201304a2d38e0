//! The op table of the parser: each op's attributes read back in the printer's order.

use serde::de::value::{Error as SerdeError, StrDeserializer};
use serde::de::IntoDeserializer;
use serde::Deserialize;

use super::cursor::Cursor;
use super::Arg;
use crate::ir::op::{ArgReduceOp, BinaryOp, CumulativeOp, Op, Operand, ReduceOp, UnaryOp};
use crate::ir::types::{Dim, Scalar};

/// A variant of a unit-only enum by its serde (snake_case) name.
pub(super) fn by_name<'a, T: Deserialize<'a>>(name: &'a str) -> Option<T> {
    let d: StrDeserializer<'a, SerdeError> = name.into_deserializer();
    T::deserialize(d).ok()
}

/// The op named `name`, its attributes read from `a` in the printer's order.
pub(super) fn build_op(name: &str, args: &[Arg], a: &mut Attrs<'_, '_>) -> Result<Op, String> {
    let arity = |n: usize| match args.len() {
        found if found == n => Ok(()),
        found => Err(format!("`{name}` takes {n} operands, found {found}")),
    };
    let operand = |i: usize| match args.get(i) {
        Some(Arg::Scalar(s)) => Operand::Scalar(*s),
        _ => Operand::Tensor,
    };
    if let Some(op) = by_name::<UnaryOp>(name) {
        return Ok(Op::Unary(op));
    }
    if let Some(op) = by_name::<BinaryOp>(name) {
        arity(2)?;
        return Ok(Op::Binary { op, lhs: operand(0), rhs: operand(1), alpha: a.opt_key("alpha", Cursor::scalar)? });
    }
    if name == "where" {
        arity(3)?;
        if !matches!(args.first(), Some(Arg::Value(_))) {
            return Err("the condition of `where` must be a value".into());
        }
        return Ok(Op::Where { on_true: operand(1), on_false: operand(2) });
    }
    if let Some(op) = name.strip_prefix("reduce_").and_then(by_name::<ReduceOp>) {
        let (dims, keepdim) = (a.ints("dims")?, a.flag("keepdim")?);
        return Ok(Op::Reduce { op, dims, keepdim, dtype: a.key("dtype")?.opt(Cursor::dtype)? });
    }
    if let Some(op) = by_name::<ArgReduceOp>(name) {
        return Ok(Op::ArgReduce { op, dim: a.key("dim")?.opt(Cursor::int)?, keepdim: a.flag("keepdim")? });
    }
    if let Some(op) = by_name::<CumulativeOp>(name) {
        return Ok(Op::Cumulative { op, dim: a.int("dim")?, dtype: a.key("dtype")?.opt(Cursor::dtype)? });
    }
    for family in [math_op, nn_op, backward_op, shape_op, index_op, creation_op] {
        if let Some(op) = family(name, a)? {
            return Ok(op);
        }
    }
    Err(format!("unknown op `{name}`"))
}

/// Element-wise ops with attributes, contractions and other math.
pub(super) fn math_op(name: &str, a: &mut Attrs<'_, '_>) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "mm" => Op::Mm,
        "bmm" => Op::Bmm,
        "grouped_mm" => Op::GroupedMm,
        "copy" => Op::Copy,
        "convert" => Op::Convert,
        "clamp" => Op::Clamp { min: a.key("min")?.opt(Cursor::scalar)?, max: a.key("max")?.opt(Cursor::scalar)? },
        "clamp_tensor" => Op::ClampTensor { has_min: a.flag("min")?, has_max: a.flag("max")? },
        "elu" => Op::Elu { alpha: a.float("alpha")?, scale: a.float("scale")?, input_scale: a.float("input_scale")? },
        "leaky_relu" => Op::LeakyRelu { slope: a.float("slope")? },
        "addmm" => Op::Addmm { beta: a.scalar("beta")?, alpha: a.scalar("alpha")? },
        "histc" => Op::Histc { bins: a.int("bins")?, min: a.float("min")?, max: a.float("max")? },
        "convolution" => convolution(a)?,
        "cdist" => Op::Cdist { p: a.float("p")? },
        "pdist" => Op::Pdist { p: a.float("p")? },
        "var" => Op::Var { dims: a.ints("dims")?, correction: a.float("correction")?, keepdim: a.flag("keepdim")? },
        "extremum_dim" => Op::ExtremumDim { max: a.flag("max")?, dim: a.int("dim")?, keepdim: a.flag("keepdim")? },
        "sort" => Op::Sort { dim: a.int("dim")?, descending: a.flag("descending")?, stable: a.flag("stable")? },
        "top_k" => Op::TopK { k: a.int("k")?, dim: a.int("dim")?, largest: a.flag("largest")? },
        "fft" => Op::Fft {
            dims: a.ints("dims")?,
            normalization: a.int("normalization")?,
            inverse: a.flag("inverse")?,
            onesided: a.flag("onesided")?,
        },
        _ => return Ok(None),
    }))
}

pub(super) fn convolution(a: &mut Attrs<'_, '_>) -> Result<Op, String> {
    Ok(Op::Convolution {
        stride: a.ints("stride")?,
        padding: a.ints("padding")?,
        dilation: a.ints("dilation")?,
        transposed: a.flag("transposed")?,
        output_padding: a.ints("output_padding")?,
        groups: a.int("groups")?,
        has_bias: a.flag("bias")?,
    })
}

pub(super) fn avg_pool(a: &mut Attrs<'_, '_>) -> Result<Op, String> {
    Ok(Op::AvgPool {
        kernel: a.ints("kernel")?,
        stride: a.ints("stride")?,
        padding: a.ints("padding")?,
        ceil_mode: a.flag("ceil_mode")?,
        count_include_pad: a.flag("count_include_pad")?,
        divisor_override: a.key("divisor")?.opt(Cursor::int)?,
    })
}

/// Pooling, normalization, sampling and random ops.
pub(super) fn nn_op(name: &str, a: &mut Attrs<'_, '_>) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "avg_pool" => avg_pool(a)?,
        "max_pool" => Op::MaxPool {
            kernel: a.ints("kernel")?,
            stride: a.ints("stride")?,
            padding: a.ints("padding")?,
            dilation: a.ints("dilation")?,
            ceil_mode: a.flag("ceil_mode")?,
        },
        "adaptive_avg_pool" => Op::AdaptiveAvgPool { spatial: a.uint("spatial")? },
        "upsample" => Op::Upsample {
            bilinear: a.key("mode")?.choice("bilinear", "nearest")?,
            align_corners: a.flag("align_corners")?,
            scales: a.key("scales")?.opt(|c| c.list(Cursor::float))?,
        },
        "group_norm" => Op::GroupNorm {
            groups: a.int("groups")?,
            eps: a.float("eps")?,
            has_weight: a.flag("weight")?,
            has_bias: a.flag("bias")?,
        },
        "batch_norm_training" => Op::BatchNormTraining {
            eps: a.float("eps")?,
            has_weight: a.flag("weight")?,
            has_bias: a.flag("bias")?,
            running_stats: a.flag("running_stats")?,
            momentum: a.key("momentum")?.opt(Cursor::float)?,
        },
        "batch_norm_inference" => {
            Op::BatchNormInference { eps: a.float("eps")?, has_weight: a.flag("weight")?, has_bias: a.flag("bias")? }
        }
        "layer_norm" => Op::LayerNorm {
            normalized_rank: a.uint("normalized_rank")?,
            eps: a.float("eps")?,
            has_weight: a.flag("weight")?,
            has_bias: a.flag("bias")?,
        },
        "softmax" => Op::Softmax {
            dim: a.int("dim")?,
            log: a.flag("log")?,
            safe: a.opt_key("safe", Cursor::boolean)?.unwrap_or(false),
        },
        "grid_sampler" => Op::GridSampler {
            mode: a.key("mode")?.variant()?,
            padding: a.key("padding")?.variant()?,
            align_corners: a.flag("align_corners")?,
        },
        "embedding" => Op::Embedding,
        "embedding_bag" => Op::EmbeddingBag {
            mode: a.key("mode")?.variant()?,
            per_sample_weights: a.flag("per_sample_weights")?,
            include_last_offset: a.flag("include_last_offset")?,
            padding_idx: a.key("padding_idx")?.opt(Cursor::int)?,
        },
        "rand" => Op::Rand { normal: a.flag("normal")? },
        "rand_perm" => Op::RandPerm,
        "dropout" => Op::Dropout { p: a.float("p")?, train: a.flag("train")? },
        _ => return Ok(None),
    }))
}

/// Gradients of the training graphs; the forward ops' attributes come first where they have any.
pub(super) fn backward_op(name: &str, a: &mut Attrs<'_, '_>) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "max_pool_backward" => Op::MaxPoolBackward { spatial: a.uint("spatial")? },
        "avg_pool_backward" => Op::AvgPoolBackward(Box::new(avg_pool(a)?)),
        "adaptive_avg_pool_backward" => Op::AdaptiveAvgPoolBackward,
        "convolution_backward" => {
            Op::ConvolutionBackward { forward: Box::new(convolution(a)?), mask: a.key("mask")?.mask()? }
        }
        "group_norm_backward" => Op::GroupNormBackward {
            groups: a.int("groups")?,
            has_weight: a.flag("weight")?,
            mask: a.key("mask")?.mask()?,
        },
        "layer_norm_backward" => Op::LayerNormBackward {
            normalized_rank: a.uint("normalized_rank")?,
            has_weight: a.flag("weight")?,
            mask: a.key("mask")?.mask()?,
        },
        "embedding_backward" => Op::EmbeddingBackward {
            num_weights: a.int("num_weights")?,
            padding_idx: a.int("padding_idx")?,
            scale_grad_by_freq: a.flag("scale_grad_by_freq")?,
        },
        "col2im" => Op::Col2Im {
            output_size: a.key("output_size")?.pair()?,
            kernel: a.key("kernel")?.pair()?,
            dilation: a.key("dilation")?.pair()?,
            padding: a.key("padding")?.pair()?,
            stride: a.key("stride")?.pair()?,
        },
        _ => return Ok(None),
    }))
}

/// Views, reshapes and padding.
pub(super) fn shape_op(name: &str, a: &mut Attrs<'_, '_>) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "view" => Op::View { size: a.dims("size")? },
        "expand" => Op::Expand { size: a.dims("size")? },
        "permute" => Op::Permute { dims: a.ints("dims")? },
        "unsqueeze" => Op::Unsqueeze { dim: a.int("dim")? },
        "squeeze" => Op::Squeeze { dims: a.ints("dims")? },
        "cat" => Op::Cat { dim: a.int("dim")? },
        "split_with_sizes" => Op::SplitWithSizes { sizes: a.dims("sizes")?, dim: a.int("dim")? },
        "slice" => {
            let (dim, start, end) = (a.int("dim")?, a.dim("start")?, a.key("end")?.slice_end()?);
            Op::Slice { dim, start, end, step: a.int("step")? }
        }
        "select" => Op::Select { dim: a.int("dim")?, index: a.int("index")? },
        "diagonal" => Op::Diagonal { offset: a.int("offset")?, dim1: a.int("dim1")?, dim2: a.int("dim2")? },
        "flip" => Op::Flip { dims: a.ints("dims")? },
        "repeat" => Op::Repeat { repeats: a.ints("repeats")? },
        "pad" => Op::Pad { pad: a.ints("pad")?, value: a.scalar("value")? },
        "pad_mode" => Op::PadMode { pad: a.ints("pad")?, reflect: a.key("mode")?.choice("reflect", "replicate")? },
        "as_strided" => Op::AsStrided { size: a.ints("size")?, stride: a.ints("stride")?, offset: a.int("offset")? },
        _ => return Ok(None),
    }))
}

/// Indexing, gathers and scatters.
pub(super) fn index_op(name: &str, a: &mut Attrs<'_, '_>) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "index" => Op::Index { present: a.key("indices")?.present()? },
        "index_select" => Op::IndexSelect { dim: a.int("dim")? },
        "gather" => Op::Gather { dim: a.int("dim")? },
        "scatter" => Op::Scatter {
            dim: a.int("dim")?,
            reduce: a.key("reduce")?.variant()?,
            include_self: a.flag("include_self")?,
            value: a.key("value")?.opt(Cursor::scalar)?,
        },
        "index_put" => Op::IndexPut { present: a.key("indices")?.present()?, accumulate: a.flag("accumulate")? },
        "slice_scatter" => {
            let (dim, start, end) = (a.int("dim")?, a.dim("start")?, a.key("end")?.slice_end()?);
            Op::SliceScatter { dim, start, end, step: a.int("step")? }
        }
        "select_scatter" => Op::SelectScatter { dim: a.int("dim")?, index: a.int("index")? },
        "masked_scatter" => Op::MaskedScatter,
        "copy_from" => Op::CopyFrom,
        _ => return Ok(None),
    }))
}

/// Ops that make values out of attributes, and the size ops.
pub(super) fn creation_op(name: &str, a: &mut Attrs<'_, '_>) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "arange" => Op::Arange { start: a.scalar("start")?, end: a.scalar("end")?, step: a.scalar("step")? },
        "arange_sym" => Op::ArangeSym { start: a.int("start")?, end: a.dim("end")?, step: a.int("step")? },
        "full" => Op::Full { size: a.dims("size")?, value: a.scalar("value")? },
        "literal" => Op::Literal { values: a.key("values")?.list(Cursor::scalar)? },
        "full_like" => Op::FullLike { value: a.scalar("value")? },
        "scalar_tensor" => Op::ScalarTensor { value: a.scalar("value")? },
        "assert_metadata" => Op::AssertMetadata { dtype: a.key("dtype")?.opt(Cursor::dtype)? },
        "sym_size" => Op::SymSize { dim: a.int("dim")? },
        "sym_int" => Op::SymInt { value: a.dim("value")? },
        _ => return Ok(None),
    }))
}

/// The ` {key=value, …}` block of a node, read key by key in the printer's order.
pub(super) struct Attrs<'c, 'a> {
    pub(super) c: &'c mut Cursor<'a>,
    pub(super) count: usize,
}

impl<'a> Attrs<'_, 'a> {
    pub(super) fn separator(&self) -> &'static str {
        if self.count == 0 {
            " {"
        } else {
            ", "
        }
    }

    pub(super) fn has(&self, key: &str) -> bool {
        let rest = self.c.rest.strip_prefix(self.separator()).and_then(|r| r.strip_prefix(key));
        rest.is_some_and(|r| r.starts_with('='))
    }

    /// Reads `key=` and returns the cursor at its value.
    pub(super) fn key(&mut self, key: &str) -> Result<&mut Cursor<'a>, String> {
        self.c.expect(&format!("{}{key}=", self.separator()))?;
        self.count += 1;
        Ok(&mut *self.c)
    }

    pub(super) fn int(&mut self, key: &str) -> Result<i64, String> {
        self.key(key)?.int()
    }

    pub(super) fn uint(&mut self, key: &str) -> Result<usize, String> {
        self.key(key)?.uint()
    }

    pub(super) fn flag(&mut self, key: &str) -> Result<bool, String> {
        self.key(key)?.boolean()
    }

    pub(super) fn float(&mut self, key: &str) -> Result<f64, String> {
        self.key(key)?.float()
    }

    pub(super) fn scalar(&mut self, key: &str) -> Result<Scalar, String> {
        self.key(key)?.scalar()
    }

    pub(super) fn ints(&mut self, key: &str) -> Result<Vec<i64>, String> {
        self.key(key)?.ints()
    }

    pub(super) fn dim(&mut self, key: &str) -> Result<Dim, String> {
        self.key(key)?.dim()
    }

    pub(super) fn dims(&mut self, key: &str) -> Result<Vec<Dim>, String> {
        self.key(key)?.dims()
    }

    pub(super) fn opt_key<T>(
        &mut self,
        key: &str,
        value: impl FnOnce(&mut Cursor<'a>) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        if self.has(key) {
            value(self.key(key)?).map(Some)
        } else {
            Ok(None)
        }
    }

    pub(super) fn finish(self) -> Result<(), String> {
        if self.count > 0 {
            self.c.expect("}")?;
        }
        Ok(())
    }
}
