//! FX targets → IR ops, one file per op family: each family's tables say how each of its
//! targets is imported.
//!
//! - `translation`: the node's arguments, read by schema name (with schema defaults), give one
//!   typed [`Op`]; the tensors it reads become the node's inputs in that order.
//! - `decomposition` (`decompose/`): several IR nodes.
//! - `special`: a [`Special`] target, whose form depends on what the builder knows of the
//!   node's values beyond its arguments (their dtypes, which sizes come from data, what the
//!   ranges prove): the family names the case, `build` carries it out with what it knows.

mod control;
mod decompose;
mod elementwise;
mod linalg;
mod nn;
mod reduce;
mod shape;
mod sizes;
mod tensor;

use torchtpu_passes::ir::Op;
use torchtpu_passes::Fail;

pub(super) use control::Flow;
pub(super) use sizes::SizeOp;

use super::args::Args;

/// Reads one node's arguments into an op.
pub(super) type Translation = fn(&mut Args<'_>) -> Result<Op, String>;

/// The decomposition of an FX target into several IR nodes, if it has one (and no translation).
pub(super) fn decomposition(target: &str) -> Option<super::wire::Decomposition> {
    decompose::decomposition(target.strip_prefix("torch.ops.").unwrap_or(target))
}

/// The decomposition of an FX target given a symbolic number where its schema takes a plain
/// one (`clamp(x, -s, s)`), if it has one.
pub(super) fn symbolic_decomposition(target: &str) -> Option<super::wire::Decomposition> {
    decompose::symbolic_decomposition(target.strip_prefix("torch.ops.").unwrap_or(target))
}

/// A floating-point `item()` (see `decompose::float_item`).
pub(super) fn float_item(a: &mut Args<'_>) -> Result<super::wire::Recipe, Fail> {
    decompose::float_item(a)
}

/// `x[mask]`: indexing by a boolean mask (see `decompose::index_by_mask`).
pub(super) fn index_by_mask(a: &mut Args<'_>) -> Result<super::wire::Recipe, Fail> {
    decompose::index_by_mask(a)
}

/// `as_strided` with symbolic sizes, over a contiguous operand (see `decompose::strided_view`).
pub(super) fn strided_view(a: &mut Args<'_>) -> Result<super::wire::Recipe, Fail> {
    decompose::strided_view(a)
}

/// The target recorded for a permute the builder adds (an `as_strided` read in storage order).
pub(super) const PERMUTE: &str = "torch.ops.aten.permute.default";

/// A target imported by a case of the builder's (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Special {
    /// `nonzero`: its row count is the export's symbol for it.
    Nonzero,
    /// `repeat_interleave` of a tensor of counts: a length from data, computed at its bound.
    RepeatByCounts,
    /// `item()`: a size (a symbol the export bounds), a float, or unsupported.
    Item,
    /// `index`: by a boolean mask, the rows it keeps (a count from data); else its translation.
    IndexByMask,
    /// `split_with_sizes`: by counts from data, gathers at their running sum; else its translation.
    SplitByCounts,
    /// `constant_pad_nd`: to a length computed from a count, a scatter; else its translation.
    PadByCounts,
    /// `cat`: of pieces sized by data into a size the export asserts, scatters at offsets; else
    /// its translation.
    CatOfCounts,
    /// `as_strided`: with symbolic sizes, a view of a contiguous operand; else its translation.
    StridedView,
    /// `_assert_scalar`: an assertion on sizes, left out where the ranges prove it.
    AssertOnSizes,
    /// `_assert_async`: an assertion on tensor data (`one_hot`'s class range, …), which an XLA
    /// program cannot raise: left out, so inputs that break it get what the ops compute.
    AssertOnData,
    /// A higher-order op whose arguments include subgraphs.
    ControlFlow(Flow),
    /// Python arithmetic on sizes and the numbers made from them.
    SizeArithmetic(SizeOp),
    /// `sym_numel`, `sym_stride`, `sym_storage_offset`: a size whose value the export records.
    SizeQuery,
}

/// The [`Special`] case of an FX target, if it is one.
pub(super) fn special(target: &str) -> Option<Special> {
    let key = target.strip_prefix("torch.ops.").unwrap_or(target);
    shape::special(key)
        .or_else(|| tensor::special(key))
        .or_else(|| control::special(key))
        .or_else(|| sizes::special(key))
}

/// Why a target cannot be lowered, where the family knows a reason beyond "unsupported".
pub(super) fn known_unsupported(target: &str) -> Option<String> {
    match special(target)? {
        Special::Item => Some(format!(
            "`item()` ({target}) has an output whose size or value depends on the input data, which a static XLA \
             program cannot produce; keep it out of the exported graph, or bound it at export \
             (`torch._check(n <= N)`) and pad"
        )),
        Special::SizeArithmetic(_) => {
            Some(format!("`{target}` computes on data-dependent symbolic values, which are not supported"))
        }
        _ => None,
    }
}

/// The translation of an FX target (`torch.ops.aten.addmm.default`, `_operator.add`), if any.
pub(super) fn translation(target: &str) -> Option<Translation> {
    let key = target.strip_prefix("torch.ops.").unwrap_or(target);
    elementwise::translation(key)
        .or_else(|| linalg::translation(key))
        .or_else(|| nn::translation(key))
        .or_else(|| reduce::translation(key))
        .or_else(|| shape::translation(key))
        .or_else(|| tensor::translation(key))
}
