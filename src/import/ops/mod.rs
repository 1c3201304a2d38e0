//! ATen targets → IR ops (translation), one file per op family.
//!
//! Each translation reads the node's arguments by schema name (with schema defaults) and returns
//! the typed [`Op`]; the tensors it reads become the node's inputs in that order.

mod decompose;
mod elementwise;
mod linalg;
mod nn;
mod reduce;
mod shape;
mod tensor;

use torchtpu_passes::ir::Op;

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
pub(super) fn float_item(a: &mut Args<'_>) -> Result<super::wire::Recipe, String> {
    decompose::float_item(a)
}

/// `x[mask]`: indexing by a boolean mask (see `decompose::index_by_mask`).
pub(super) fn index_by_mask(a: &mut Args<'_>) -> Result<super::wire::Recipe, String> {
    decompose::index_by_mask(a)
}

/// `as_strided` with symbolic sizes, over a contiguous operand (see `decompose::strided_view`).
pub(super) fn strided_view(a: &mut Args<'_>) -> Result<super::wire::Recipe, String> {
    decompose::strided_view(a)
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
