//! Python arithmetic on sizes (`_operator.add`, `torch.sym_float`, …) and the size queries
//! (`sym_numel`, …). A symbolic int's value is the expression the export records for it; a
//! symbolic float or bool is computed in the program, on 0-d values, by the op named here
//! (see `build::sizes`).

use torchtpu_passes::ir::BinaryOp;

use super::Special;

/// What a node of arithmetic on sizes computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::import) enum SizeOp {
    /// A binary operator: arithmetic (`+ - * /`), a comparison, `and`, `or`.
    Binary(BinaryOp),
    /// `-n`.
    Neg,
    /// `float(n)`.
    Float,
    /// `not b`.
    Not,
    /// Another `_operator` (`floordiv`, `mod`, …), `torch.sym_min` or `torch.sym_max`: only
    /// its symbolic-int results, whose values the export records, are taken.
    RecordedOnly,
}

impl SizeOp {
    /// Whether the program computes this op for a symbolic bool result (`true`) or a symbolic
    /// float one (`false`).
    pub(in crate::import) fn computes(self, bool_result: bool) -> bool {
        use BinaryOp::*;
        match self {
            SizeOp::Binary(Add | Sub | Mul | Div) | SizeOp::Neg | SizeOp::Float => !bool_result,
            SizeOp::Binary(Gt | Ge | Lt | Le | Eq | Ne | LogicalAnd | LogicalOr) | SizeOp::Not => bool_result,
            SizeOp::Binary(_) | SizeOp::RecordedOnly => false,
        }
    }
}

/// The targets of this family (all of them [`Special`]).
pub(super) fn special(key: &str) -> Option<Special> {
    let op = match key {
        "_operator.add" => SizeOp::Binary(BinaryOp::Add),
        "_operator.sub" => SizeOp::Binary(BinaryOp::Sub),
        "_operator.mul" => SizeOp::Binary(BinaryOp::Mul),
        "_operator.truediv" => SizeOp::Binary(BinaryOp::Div),
        "_operator.gt" => SizeOp::Binary(BinaryOp::Gt),
        "_operator.ge" => SizeOp::Binary(BinaryOp::Ge),
        "_operator.lt" => SizeOp::Binary(BinaryOp::Lt),
        "_operator.le" => SizeOp::Binary(BinaryOp::Le),
        "_operator.eq" => SizeOp::Binary(BinaryOp::Eq),
        "_operator.ne" => SizeOp::Binary(BinaryOp::Ne),
        "_operator.and_" => SizeOp::Binary(BinaryOp::LogicalAnd),
        "_operator.or_" => SizeOp::Binary(BinaryOp::LogicalOr),
        "_operator.neg" => SizeOp::Neg,
        "torch.sym_float" => SizeOp::Float,
        "torch.sym_not" => SizeOp::Not,
        // `min(n, 16)` on sizes: the export records its value, `Min(16, s)`.
        "torch.sym_min" | "torch.sym_max" => SizeOp::RecordedOnly,
        "aten.sym_numel.default" | "aten.sym_stride.int" | "aten.sym_storage_offset.default" => {
            return Some(Special::SizeQuery)
        }
        other if other.starts_with("_operator.") => SizeOp::RecordedOnly,
        _ => return None,
    };
    Some(Special::SizeArithmetic(op))
}
