//! Shape and indexing ops: views, permutes, slices, concatenation, splits and gathers.

use torchtpu_passes::ir::{Dim, Op, Scalar};

use super::{Args, Lowering};

pub fn lowering(key: &str) -> Option<Lowering> {
    Some(match key {
        "aten.view.default" | "aten._unsafe_view.default" | "aten.reshape.default" => |a| {
            a.tensor("self")?;
            Ok(Op::View { size: a.dims("size")? })
        },
        "aten.permute.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Permute { dims: a.ints("dims", None)? })
        },
        "aten.expand.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Expand { size: a.dims("size")? })
        },
        "aten.unsqueeze.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Unsqueeze { dim: a.int("dim", None)? })
        },
        "aten.squeeze.dims" | "aten.squeeze.dim" => |a| {
            a.tensor("self")?;
            Ok(Op::Squeeze { dims: a.ints("dim", None)? })
        },
        "aten.squeeze.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Squeeze { dims: vec![] })
        },
        "aten.slice.Tensor" => slice,
        "aten.select.int" => |a| {
            a.tensor("self")?;
            Ok(Op::Select { dim: a.int("dim", None)?, index: a.int("index", None)? })
        },
        "aten.diagonal.default" => |a| {
            a.tensor("self")?;
            let offset = a.int("offset", Some(0))?;
            Ok(Op::Diagonal { offset, dim1: a.int("dim1", Some(0))?, dim2: a.int("dim2", Some(1))? })
        },
        "aten.flip.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Flip { dims: a.ints("dims", None)? })
        },
        "aten.repeat.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Repeat { repeats: a.ints("repeats", None)? })
        },
        "aten.constant_pad_nd.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Pad { pad: a.ints("pad", None)?, value: a.scalar("value", Some(Scalar::Int(0)))? })
        },
        "aten.cat.default" => |a| {
            a.tensor_list("tensors")?;
            Ok(Op::Cat { dim: a.int("dim", Some(0))? })
        },
        "aten.split_with_sizes.default" => |a| {
            a.tensor("self")?;
            Ok(Op::SplitWithSizes { sizes: a.dims("split_sizes")?, dim: a.int("dim", Some(0))? })
        },
        "aten.index.Tensor" => |a| {
            a.tensor("self")?;
            Ok(Op::Index { present: a.optional_tensor_list("indices")? })
        },
        "aten.index_select.default" => |a| {
            a.tensor("self")?;
            let dim = a.int("dim", None)?;
            a.tensor("index")?;
            Ok(Op::IndexSelect { dim })
        },
        "aten.gather.default" => |a| {
            a.tensor("self")?;
            let dim = a.int("dim", None)?;
            a.tensor("index")?;
            Ok(Op::Gather { dim })
        },
        _ => return None,
    })
}

/// `slice(self, dim=0, start=None, end=None, step=1)`; `None` bounds mean the whole dim.
fn slice(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    Ok(Op::Slice {
        dim: a.int("dim", Some(0))?,
        start: a.dim("start", Some(Dim::Static(0)))?,
        end: a.dim("end", Some(Dim::Static(i64::MAX)))?,
        step: a.int("step", Some(1))?,
    })
}
