//! Tensor creation (including random tensors), copies and conversions, metadata checks and
//! `sym_size`.

use torchtpu_passes::ir::ops::{
    Arange, ArangeSym, AssertMetadata, Convert, CopyFrom, Dropout, Expand, Full, FullLike, Identity, Rand, RandPerm,
    ScalarTensor, SymSize,
};
use torchtpu_passes::ir::{Dim, Op, Operand, Scalar};

use super::{Args, Special, Translation};

/// The targets of this family that a case of the builder's imports (see [`Special`]): sizes
/// and numbers from data, and assertions.
pub(super) fn special(key: &str) -> Option<Special> {
    Some(match key {
        "aten.nonzero.default" => Special::Nonzero,
        "aten.repeat_interleave.Tensor" => Special::RepeatByCounts,
        "aten._local_scalar_dense.default" => Special::Item,
        "aten._assert_scalar.default" => Special::AssertOnSizes,
        "aten._assert_async.msg" | "aten._assert_async.default" => Special::AssertOnData,
        _ => return None,
    })
}

pub(super) fn translation(key: &str) -> Option<Translation> {
    Some(match key {
        "aten.clone.default" | "aten.alias.default" | "aten.lift_fresh_copy.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Identity(Identity))
        },
        "aten._to_copy.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Convert(Convert))
        },
        // The dtype is the result's, which the archive records.
        "prims.convert_element_type.default" => |a| {
            a.tensor("a")?;
            Ok(Op::Convert(Convert))
        },
        "aten.arange.start_step" => arange,
        "aten.arange.default" | "aten.arange.start" => arange,
        "aten.full.default" => full,
        "aten.full_like.default" => |a| {
            a.tensor("self")?;
            Ok(Op::FullLike(FullLike { value: a.scalar("fill_value", None)? }))
        },
        "aten.copy.default" => |a| {
            a.tensor("self")?;
            a.tensor("src")?;
            Ok(Op::CopyFrom(CopyFrom))
        },
        "aten.fill.Scalar" => |a| {
            a.tensor("self")?;
            Ok(Op::FullLike(FullLike { value: a.scalar("value", None)? }))
        },
        // The values of `empty` are unspecified; zeros are one valid choice.
        // Values are undefined: zeros are one choice. `empty_permuted`'s physical layout does not
        // change the logical tensor.
        "aten.empty.memory_format" | "aten.empty_strided.default" | "aten.empty_permuted.default" => {
            |a| Ok(Op::Full(Full { size: a.dims("size")?, value: Scalar::Int(0) }))
        }
        "aten.scalar_tensor.default" => |a| Ok(Op::ScalarTensor(ScalarTensor { value: a.scalar("s", None)? })),
        "aten._assert_tensor_metadata.default" => |a| {
            a.tensor("a")?;
            Ok(Op::AssertMetadata(AssertMetadata { dtype: a.dtype("dtype")? }))
        },
        "aten.rand.default" | "aten.rand.generator" => |a| {
            without_generator(a)?;
            a.rng_seed();
            Ok(Op::Rand(Rand { normal: false }))
        },
        "aten.randn.default" | "aten.randn.generator" => |a| {
            without_generator(a)?;
            a.rng_seed();
            Ok(Op::Rand(Rand { normal: true }))
        },
        "aten.randperm.default" => |a| {
            a.rng_seed();
            Ok(Op::RandPerm(RandPerm))
        },
        "aten.native_dropout.default" => |a| {
            a.tensor("input")?;
            a.rng_seed();
            let p = a.float("p", None)?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("dropout probability {p} is not in [0, 1]"));
            }
            // `train=None` means training, as in ATen.
            Ok(Op::Dropout(Dropout { p, train: a.bool("train", true)? }))
        },
        "aten.sym_size.int" => |a| {
            a.tensor("self")?;
            Ok(Op::SymSize(SymSize { dim: a.int("dim", None)? }))
        },
        _ => return None,
    })
}

/// A random op's `generator=None` (the `.generator` overloads, which transformers' UnivNet
/// calls) draws from the default generator, as the `.default` overload does: the program's
/// seed. A given generator is refused: its state is not in the archive.
fn without_generator(a: &Args<'_>) -> Result<(), String> {
    if a.has("generator") {
        return Err("draws from a `torch.Generator` given to it, whose state the archive does not hold; \
                    export with the default generator (`generator=None`)"
            .into());
    }
    Ok(())
}

/// `arange(start=0, end, step=1)`; a symbolic `start` or `end` (a dynamic length) gets its own
/// op.
fn arange(a: &mut Args<'_>) -> Result<Op, String> {
    let step = a.scalar("step", Some(Scalar::Int(1)))?;
    let zero = match step {
        Scalar::Int(v) => v == 0,
        Scalar::Float(v) => v == 0.0 || !v.is_finite(),
        Scalar::Bool(v) => !v,
    };
    if zero {
        return Err(format!("`step` is {step}; arange needs a finite, non-zero step"));
    }
    let (start, end) = (a.dim("start", Some(Dim::Static(0))), a.dim("end", None));
    match (start, end, step) {
        (Ok(start), Ok(end), Scalar::Int(step)) if start.as_static().is_none() || end.as_static().is_none() => {
            Ok(Op::ArangeSym(ArangeSym { start, end, step }))
        }
        _ => {
            let start = a.scalar("start", Some(Scalar::Int(0)))?;
            Ok(Op::Arange(Arange { start, end: a.scalar("end", None)?, step }))
        }
    }
}

/// `full(size, fill_value)`; a symbolic fill value (a size: `torch.full((n,), x.shape[1])`) is
/// the 0-d value that computes it, expanded to `size` (its dtype must be the result's, which
/// the verifier checks against the archive).
fn full(a: &mut Args<'_>) -> Result<Op, String> {
    let size = a.dims("size")?;
    match a.operand("fill_value")? {
        Operand::Scalar(value) => Ok(Op::Full(Full { size, value })),
        Operand::Tensor => Ok(Op::Expand(Expand { size })),
    }
}
