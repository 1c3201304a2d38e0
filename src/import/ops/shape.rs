//! Shape and indexing ops: views, permutes, slices, concatenation, splits and gathers.

use torchtpu_passes::ir::ops::{
    AsStrided, Cat, Diagonal, EmbeddingBackward, Expand, Flip, Gather, Identity, Index, IndexPut, IndexSelect,
    MaskedScatter, Pad, PadMode, Permute, Repeat, Scatter, Select, SelectScatter, Slice, SliceScatter, SplitWithSizes,
    Squeeze, Unsqueeze, View,
};
use torchtpu_passes::ir::{Dim, Op, Scalar, ScatterReduce};

use super::{Args, Special, Translation};

/// The targets of this family that a case of the builder's imports where what it knows of
/// their values calls for it (see [`Special`]); their translations below are the other case.
pub(super) fn special(key: &str) -> Option<Special> {
    Some(match key {
        "aten.index.Tensor" => Special::IndexByMask,
        "aten.split_with_sizes.default" => Special::SplitByCounts,
        "aten.constant_pad_nd.default" => Special::PadByCounts,
        "aten.cat.default" => Special::CatOfCounts,
        "aten.as_strided.default" => Special::StridedView,
        _ => return None,
    })
}

pub(super) fn translation(key: &str) -> Option<Translation> {
    Some(match key {
        "aten.view.default" | "aten._unsafe_view.default" => |a| {
            a.tensor("self")?;
            Ok(Op::View(View { size: a.dims("size")? }))
        },
        // As a program that is not decomposed holds it: its sizes are named `shape`.
        "aten.reshape.default" => |a| {
            a.tensor("self")?;
            Ok(Op::View(View { size: a.dims("shape")? }))
        },
        "aten.permute.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Permute(Permute { dims: a.ints("dims", None)? }))
        },
        "aten.expand.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Expand(Expand { size: a.dims("size")? }))
        },
        "aten.unsqueeze.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Unsqueeze(Unsqueeze { dim: a.int("dim", None)? }))
        },
        "aten.squeeze.dims" | "aten.squeeze.dim" => |a| {
            a.tensor("self")?;
            let dims = a.ints("dim", None)?;
            // `squeeze(dim=())` squeezes nothing; the IR's empty list means every size-1 dim.
            Ok(if dims.is_empty() { Op::Identity(Identity) } else { Op::Squeeze(Squeeze { dims }) })
        },
        "aten.squeeze.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Squeeze(Squeeze { dims: vec![] }))
        },
        "aten.slice.Tensor" => slice,
        "aten.select.int" => |a| {
            a.tensor("self")?;
            Ok(Op::Select(Select { dim: a.int("dim", None)?, index: a.int("index", None)? }))
        },
        "aten.diagonal.default" => |a| {
            a.tensor("self")?;
            let offset = a.int("offset", Some(0))?;
            Ok(Op::Diagonal(Diagonal { offset, dim1: a.int("dim1", Some(0))?, dim2: a.int("dim2", Some(1))? }))
        },
        "aten.flip.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Flip(Flip { dims: a.ints("dims", None)? }))
        },
        "aten.repeat.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Repeat(Repeat { repeats: a.dims("repeats")? }))
        },
        "aten.reflection_pad1d.default" | "aten.reflection_pad2d.default" | "aten.reflection_pad3d.default" => |a| {
            a.tensor("self")?;
            Ok(Op::PadMode(PadMode { pad: a.ints("padding", None)?, reflect: true }))
        },
        "aten.replication_pad2d.default" | "aten.replication_pad3d.default" => |a| {
            a.tensor("self")?;
            Ok(Op::PadMode(PadMode { pad: a.ints("padding", None)?, reflect: false }))
        },
        "aten.as_strided.default" => |a| {
            a.tensor("self")?;
            let size = a.ints("size", None)?;
            let stride = a.ints("stride", None)?;
            // The offset is settled against the operand's storage by the builder (`on_storage`).
            Ok(Op::AsStrided(AsStrided { size, stride, offset: a.opt_int("storage_offset")?.unwrap_or(0) }))
        },
        "aten.constant_pad_nd.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Pad(Pad { pad: a.ints("pad", None)?, value: a.scalar("value", Some(Scalar::Int(0)))? }))
        },
        "aten.cat.default" => |a| {
            a.tensor_list("tensors")?;
            Ok(Op::Cat(Cat { dim: a.int("dim", Some(0))? }))
        },
        "aten.split_with_sizes.default" => |a| {
            a.tensor("self")?;
            Ok(Op::SplitWithSizes(SplitWithSizes { sizes: a.dims("split_sizes")?, dim: a.int("dim", Some(0))? }))
        },
        "aten.index.Tensor" => |a| {
            a.tensor("self")?;
            Ok(Op::Index(Index { present: a.optional_tensor_list("indices")? }))
        },
        "aten.index_select.default" => |a| {
            a.tensor("self")?;
            let dim = a.int("dim", None)?;
            a.tensor("index")?;
            Ok(Op::IndexSelect(IndexSelect { dim }))
        },
        "aten.scatter.src" | "aten.scatter.value" | "aten.scatter_reduce.two" => |a| scatter(a, ScatterReduce::Replace),
        "aten.scatter_add.default" => |a| scatter(a, ScatterReduce::Sum),
        // `_index_put_impl` adds `unsafe` (skip bounds checks), which changes nothing here.
        "aten.index_put.default" | "aten._index_put_impl.default" => |a| {
            a.tensor("self")?;
            let present = a.optional_tensor_list("indices")?;
            a.tensor("values")?;
            Ok(Op::IndexPut(IndexPut { present, accumulate: a.bool("accumulate", false)? }))
        },
        "aten.slice_scatter.default" => |a| {
            a.tensor("self")?;
            a.tensor("src")?;
            Ok(Op::SliceScatter(SliceScatter {
                dim: a.int("dim", Some(0))?,
                start: a.dim("start", Some(Dim::Static(0)))?,
                end: a.dim("end", Some(Dim::Static(i64::MAX)))?,
                step: a.int("step", Some(1))?,
            }))
        },
        "aten.select_scatter.default" => |a| {
            a.tensor("self")?;
            a.tensor("src")?;
            Ok(Op::SelectScatter(SelectScatter { dim: a.int("dim", None)?, index: a.int("index", None)? }))
        },
        "aten.masked_scatter.default" => |a| {
            a.tensor("self")?;
            a.tensor("mask")?;
            a.tensor("source")?;
            Ok(Op::MaskedScatter(MaskedScatter))
        },
        "aten.embedding_dense_backward.default" => |a| {
            a.tensor("grad_output")?;
            a.tensor("indices")?;
            Ok(Op::EmbeddingBackward(EmbeddingBackward {
                num_weights: a.int("num_weights", None)?,
                padding_idx: a.int("padding_idx", None)?,
                scale_grad_by_freq: a.bool("scale_grad_by_freq", false)?,
            }))
        },
        "aten.gather.default" => |a| {
            a.tensor("self")?;
            let dim = a.int("dim", None)?;
            a.tensor("index")?;
            Ok(Op::Gather(Gather { dim }))
        },
        _ => return None,
    })
}

/// `slice(self, dim=0, start=None, end=None, step=1)`; `None` bounds mean the whole dim.
fn slice(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Slice(Slice {
        dim: a.int("dim", Some(0))?,
        start: a.dim("start", Some(Dim::Static(0)))?,
        end: a.dim("end", Some(Dim::Static(i64::MAX)))?,
        step: a.int("step", Some(1))?,
    }))
}

/// `scatter.src/value`, `scatter_add`, `scatter_reduce.two` (`reduce` among sum, prod, mean,
/// amax, amin; `include_self` defaults to true).
fn scatter(a: &mut Args<'_>, default: ScatterReduce) -> Result<Op, String> {
    a.tensor("self")?;
    let dim = a.int("dim", None)?;
    a.tensor("index")?;
    let value = if a.has("value") { Some(a.scalar("value", None)?) } else { None };
    if value.is_none() {
        a.tensor("src")?;
    }
    let reduce = match a.string("reduce", "")?.as_str() {
        "" => default,
        "sum" | "add" => ScatterReduce::Sum,
        "prod" | "multiply" => ScatterReduce::Prod,
        "mean" => ScatterReduce::Mean,
        "amax" => ScatterReduce::Amax,
        "amin" => ScatterReduce::Amin,
        other => return Err(format!("argument `reduce`: unknown value `{other}`")),
    };
    Ok(Op::Scatter(Scatter { dim, reduce, include_self: a.bool("include_self", true)?, value }))
}
