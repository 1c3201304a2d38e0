//! Python numbers the program computes from sizes: symbolic ints (`s0 * 2`), floats
//! (`s0 / 2`) and bools (`s0 > 4`, a `cond`'s predicate), each a 0-d value of the node that
//! computes it; and why a node of data-dependent numbers cannot be lowered.

use torchtpu_passes::ir::ops::{Binary, Convert};
use torchtpu_passes::ir::{BinaryOp, Op, Operand, Scalar, UnaryOp};

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
/// `n * 1.5`, …: `_operator.truediv`, `torch.sym_float`, …) or a bool (`n > 4`, `a == b`, and
/// `and`/`or`/`not` of such bools).
pub(super) fn is_size_number_node(node: &schema::Node) -> bool {
    let floats =
        ["_operator.add", "_operator.sub", "_operator.mul", "_operator.truediv", "_operator.neg", "torch.sym_float"];
    let bools = [
        "_operator.gt",
        "_operator.ge",
        "_operator.lt",
        "_operator.le",
        "_operator.eq",
        "_operator.ne",
        "_operator.and_",
        "_operator.or_",
        "torch.sym_not",
    ];
    match node.outputs.as_slice() {
        [Argument::AsSymFloat(_)] => floats.contains(&node.target.as_str()),
        [Argument::AsSymBool(_)] => bools.contains(&node.target.as_str()),
        _ => false,
    }
}

/// The op of an [`is_size_number_node`] node on the 0-d values of its symbolic operands (the
/// names pushed to `tensors`) and its numbers: floats in f32 (TPUs have no f64, so sizes above
/// 2^24 lose precision), comparisons on the `i64` sizes; a data-dependent operand (from `item()`) is the output of an
/// unsupported node, which `check` reports.
pub(super) fn size_number_op(node: &schema::Node, tensors: &mut Vec<String>) -> Result<Op, String> {
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
    let op = |op| match operands.as_slice() {
        [lhs, rhs] => Ok(Op::Binary(Binary { op, lhs: *lhs, rhs: *rhs, alpha: None })),
        _ => Err(format!("`{}` takes two operands, found {}", node.target, operands.len())),
    };
    match node.target.as_str() {
        "_operator.add" => op(BinaryOp::Add),
        "_operator.sub" => op(BinaryOp::Sub),
        "_operator.mul" => op(BinaryOp::Mul),
        "_operator.truediv" => op(BinaryOp::Div),
        "_operator.gt" => op(BinaryOp::Gt),
        "_operator.ge" => op(BinaryOp::Ge),
        "_operator.lt" => op(BinaryOp::Lt),
        "_operator.le" => op(BinaryOp::Le),
        "_operator.eq" => op(BinaryOp::Eq),
        "_operator.ne" => op(BinaryOp::Ne),
        "_operator.and_" => op(BinaryOp::LogicalAnd),
        "_operator.or_" => op(BinaryOp::LogicalOr),
        "_operator.neg" | "torch.sym_float" | "torch.sym_not" if operands == [Operand::Tensor] => {
            Ok(match node.target.as_str() {
                "torch.sym_float" => Op::Convert(Convert),
                "torch.sym_not" => Op::Unary(UnaryOp::LogicalNot),
                _ => Op::Unary(UnaryOp::Neg),
            })
        }
        other => Err(format!("`{other}` on these operands is not supported")),
    }
}

/// True when an argument is a symbolic float or bool: a value computed from tensor data.
pub(super) fn has_data_dependent_arg(node: &schema::Node) -> bool {
    node.inputs.iter().any(|a| matches!(a.arg, Argument::AsSymFloat(_) | Argument::AsSymBool(_)))
}

/// Why some targets cannot be lowered, and what the user can do about it.
pub(super) fn known_unsupported(target: &str) -> Option<String> {
    let data_dependent = "has an output whose size or value depends on the input data, which a static XLA program \
        cannot produce; keep it out of the exported graph, or bound it at export (`torch._check(n <= N)`) and pad";
    match target.strip_prefix("torch.ops.aten.") {
        Some("_local_scalar_dense.default") => Some(format!("`item()` ({target}) {data_dependent}")),
        _ if target.starts_with("_operator.") => {
            Some(format!("`{target}` computes on data-dependent symbolic values, which are not supported"))
        }
        _ => None,
    }
}

/// Python arithmetic on sizes (`_operator.add`, …) and the size queries `sym_numel`,
/// `sym_stride` and `sym_storage_offset`: nodes with one symbolic-int output.
pub(super) fn is_sym_int_node(node: &schema::Node) -> bool {
    let sym_query = [
        "torch.ops.aten.sym_numel.default",
        "torch.ops.aten.sym_stride.int",
        "torch.ops.aten.sym_storage_offset.default",
    ];
    (node.target.starts_with("_operator.") || sym_query.contains(&node.target.as_str()))
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
