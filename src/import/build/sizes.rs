//! Python numbers the program computes from sizes: symbolic ints (`s0 * 2`), floats
//! (`s0 / 2`) and bools (`s0 > 4`, a `cond`'s predicate), each a 0-d value of the node that
//! computes it. Which targets they are, and the op of each, is `ops::sizes`'s table.

use torchtpu_passes::ir::ops::{Binary, Convert};
use torchtpu_passes::ir::{Op, Operand, Scalar, UnaryOp};

use crate::import::ops::{SizeOp, Special};
use crate::import::schema::{self, Argument, SymIntArgument};
use crate::import::shown;

/// The name in a symbolic float argument (`{"as_name": …}`).
pub(super) fn sym_name(v: &serde_json::Value) -> Result<String, String> {
    v.get("as_name")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("a symbolic float without a name ({})", shown(&v.to_string())))
}

/// Python arithmetic on sizes and numbers whose result is a float (`n / 2`, `float(n)`,
/// `n * 1.5`, …) or a bool (`n > 4`, `a == b`, and `and`/`or`/`not` of such bools), which the
/// program computes with `op`.
pub(super) fn is_size_number_node(node: &schema::Node, op: SizeOp) -> bool {
    match node.outputs.as_slice() {
        [Argument::AsSymFloat(_)] => op.computes(false),
        [Argument::AsSymBool(_)] => op.computes(true),
        _ => false,
    }
}

/// The op of an [`is_size_number_node`] node on the 0-d values of its symbolic operands (the
/// names pushed to `tensors`) and its numbers: floats in f32 (TPUs have no f64, so sizes above
/// 2^24 lose precision), comparisons on the `i64` sizes; a data-dependent operand (from `item()`) is the output of an
/// unsupported node, which `check` reports.
pub(super) fn size_number_op(node: &schema::Node, size_op: SizeOp, tensors: &mut Vec<String>) -> Result<Op, String> {
    let mut operands = Vec::new();
    for a in &node.inputs {
        operands.push(match &a.arg {
            Argument::AsSymInt(SymIntArgument::AsName(n)) => {
                tensors.push(n.clone());
                Operand::Tensor
            }
            Argument::AsSymFloat(v) | Argument::AsSymBool(v) => {
                tensors.push(sym_name(v)?);
                Operand::Tensor
            }
            Argument::AsSymInt(SymIntArgument::AsInt(i)) | Argument::AsInt(i) => Operand::Scalar(Scalar::Int(*i)),
            Argument::AsBool(b) => Operand::Scalar(Scalar::Bool(*b)),
            Argument::AsFloat(f) => Operand::Scalar(Scalar::Float(f.0)),
            other => return Err(format!("an operand of kind `{}` in arithmetic on sizes", other.kind())),
        });
    }
    match (size_op, operands.as_slice()) {
        (SizeOp::Binary(op), &[lhs, rhs]) => Ok(Op::Binary(Binary { op, lhs, rhs, alpha: None })),
        (SizeOp::Binary(_), _) => Err(format!("`{}` takes two operands, found {}", node.target, operands.len())),
        (SizeOp::Float, [Operand::Tensor]) => Ok(Op::Convert(Convert)),
        (SizeOp::Not, [Operand::Tensor]) => Ok(Op::Unary(UnaryOp::LogicalNot)),
        (SizeOp::Neg, [Operand::Tensor]) => Ok(Op::Unary(UnaryOp::Neg)),
        _ => Err(format!("`{}` on these operands is not supported", node.target)),
    }
}

/// True when an argument is a symbolic float or bool: a value computed from tensor data.
pub(super) fn has_data_dependent_arg(node: &schema::Node) -> bool {
    node.inputs.iter().any(|a| matches!(a.arg, Argument::AsSymFloat(_) | Argument::AsSymBool(_)))
}

/// Python arithmetic on sizes (`_operator.add`, …) and the size queries `sym_numel`,
/// `sym_stride` and `sym_storage_offset`: nodes with one symbolic-int output.
pub(super) fn is_sym_int_node(node: &schema::Node, special: Option<Special>) -> bool {
    matches!(special, Some(Special::SizeArithmetic(_) | Special::SizeQuery))
        && matches!(node.outputs.as_slice(), [Argument::AsSymInt(_)])
}

/// True when an argument is a symbolic number (a size, or arithmetic on sizes), not a list.
pub(super) fn has_symbolic_number(node: &schema::Node) -> bool {
    node.inputs.iter().any(|a| match &a.arg {
        Argument::AsSymInt(SymIntArgument::AsName(_)) => true,
        Argument::AsSymFloat(v) => v.get("as_name").is_some(),
        _ => false,
    })
}
