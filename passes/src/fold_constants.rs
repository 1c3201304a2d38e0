//! `fold_constants`: simplifies what exports leave around constants — arithmetic identities
//! (`x * 1`, `x / 1`, `x - 0`, integer `x + 0`), `and` with an all-true `full`, `full_like`
//! (which only needs its input's shape), reshapes or conversions of a `full`, and constants
//! selected by `where` (scalar operands instead) — so that the program neither computes
//! nor reads what it does not need.
//!
//! Then a node whose inputs are all small constants is evaluated ([`crate::const_eval`]:
//! integer and boolean arithmetic, data movement and selects, exact) into an `Op::Literal(Literal)` —
//! e.g. Llama's position ids and causal mask become two literals instead of ~60 ops.
//!
//! Every rewrite is exact: float `x + 0.0` is kept (it turns `-0.0` into `0.0`), and a rewrite
//! applies only when the kept operand already has the node's output type (no broadcast, no
//! type promotion hidden in the identity).
//!
//! The identities and constant shapes, as a filetest (the input graph, then the graph the pass
//! leaves after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/fold_constants/identities_and_constant_shapes_fold.ir")]
//! ```

use crate::const_eval;
use crate::ir::ops::{Binary, Convert, Full, FullLike, Identity, Literal, ScalarTensor, Where};
use crate::ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, Operand, Scalar, ValueRef};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct FoldConstants;

fn is(s: &Operand, int: i64) -> bool {
    match *s {
        Operand::Scalar(Scalar::Int(i)) => i == int,
        Operand::Scalar(Scalar::Float(x)) => x == int as f64,
        _ => false,
    }
}

/// A scalar operand equal to +0 (`x - 0.0` is `x` for every float, `x - (-0.0)` is not: it
/// turns -0.0 into +0.0).
fn is_plus_zero(s: &Operand) -> bool {
    match *s {
        Operand::Scalar(Scalar::Int(i)) => i == 0,
        Operand::Scalar(Scalar::Float(x)) => x == 0.0 && x.is_sign_positive(),
        _ => false,
    }
}

/// The value a node's single output equals, when the node is an identity on it.
fn identity_of(graph: &Graph, id: NodeId) -> Option<ValueRef> {
    let node = graph.node(id);
    let ins = graph.inputs(id);
    let out = node.outputs.first()?;
    let same = |v: &ValueRef| graph.value_type(*v) == out;
    let kept = match &node.op {
        Op::Binary(Binary { op, lhs, rhs, alpha }) => {
            let alpha_one = alpha.is_none_or(|a| matches!(a, Scalar::Int(1)) || a == Scalar::Float(1.0));
            let int = !out.dtype.is_float() && !out.dtype.is_complex();
            match (op, lhs, rhs) {
                (BinaryOp::Mul, Operand::Tensor, s) | (BinaryOp::Mul, s, Operand::Tensor) if is(s, 1) => ins[0],
                (BinaryOp::Div, Operand::Tensor, s) if is(s, 1) => ins[0],
                (BinaryOp::Sub, Operand::Tensor, s) if is_plus_zero(s) && alpha_one => ins[0],
                (BinaryOp::Add, Operand::Tensor, s) if int && is(s, 0) => ins[0],
                (BinaryOp::Add, s, Operand::Tensor) if int && is(s, 0) && alpha_one => ins[0],
                // `x & True` is `x & 1` on integers: only truth values are kept as they are.
                (BinaryOp::BitwiseAnd | BinaryOp::LogicalAnd, Operand::Tensor, Operand::Tensor)
                    if out.dtype == DType::Bool =>
                {
                    let all_true = |v: &ValueRef| {
                        matches!(graph.node(v.node).op, Op::Full(Full { value: Scalar::Bool(true), .. }))
                    };
                    match ins[..] {
                        [a, b] if all_true(&a) => b,
                        [a, b] if all_true(&b) => a,
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    same(&kept).then_some(kept)
}

/// A `full` equal to the node's output, when the node only reshapes, converts or copies the
/// shape of a constant.
fn as_full(graph: &Graph, id: NodeId) -> Option<Op> {
    let node = graph.node(id);
    let out = node.outputs.first()?;
    let size: Vec<Dim> = out.dims.clone();
    if !out.is_static() {
        return None;
    }
    let source = |v: &ValueRef| match &graph.node(v.node).op {
        Op::Full(Full { value, .. }) => Some(*value),
        _ => None,
    };
    let value = match &node.op {
        Op::FullLike(FullLike { value }) => converted(*value, out.dtype)?,
        Op::Unsqueeze(_) | Op::View(_) | Op::Expand(_) | Op::Identity(Identity) => source(graph.inputs(id).first()?)?,
        Op::Convert(Convert) => converted(source(graph.inputs(id).first()?)?, out.dtype)?,
        _ => return None,
    };
    Some(Op::Full(Full { size, value }))
}

/// `where(c, a, b)` whose `a` or `b` is a constant (`scalar_tensor`, `full`) of the result's
/// dtype: the constant becomes a scalar operand (the select broadcasts it to the result's
/// shape). Returns the new op and inputs.
fn inline_scalars(graph: &Graph, id: NodeId) -> Option<(Op, Vec<ValueRef>)> {
    let node = graph.node(id);
    let Op::Where(Where { on_true, on_false }) = node.op else { return None };
    let dtype = node.outputs.first()?.dtype;
    let ins = graph.inputs(id);
    let constant = |v: &ValueRef| {
        let n = graph.node(v.node);
        let value = match &n.op {
            Op::ScalarTensor(ScalarTensor { value }) => *value,
            Op::Full(Full { value, .. }) => *value,
            _ => return None,
        };
        (n.outputs[0].dtype == dtype).then_some(value)
    };
    let mut rest = ins[1..].iter();
    let mut kept = vec![ins[0]];
    let mut inline = |o: Operand| match o {
        Operand::Scalar(_) => Some(o),
        Operand::Tensor => {
            let v = rest.next()?;
            match constant(v) {
                Some(value) => Some(Operand::Scalar(value)),
                None => {
                    kept.push(*v);
                    Some(o)
                }
            }
        }
    };
    let (t, f) = (inline(on_true)?, inline(on_false)?);
    let op = Op::Where(Where { on_true: t, on_false: f });
    // Only when the select still gives the node's type: a constant that set the result's
    // shape, or two scalars (whose promotion gives f32 or i64), must stay tensors.
    let types: Vec<&crate::ir::TensorType> = kept.iter().map(|v| graph.value_type(*v)).collect();
    let still = op.infer(&types).is_ok_and(|e| e.len() == 1 && e[0].admits(&node.outputs[0]));
    (kept.len() < ins.len() && still).then_some((op, kept))
}

/// The values of node `id` when it computes from constants only (see [`crate::const_eval`]).
fn evaluated(graph: &Graph, id: NodeId) -> Option<Vec<Scalar>> {
    let ins = graph.inputs(id);
    if ins.is_empty() || graph.node(id).outputs.len() != 1 {
        return None;
    }
    let constants: Vec<_> = ins.iter().map(|&v| const_eval::constant(graph, v)).collect::<Option<_>>()?;
    const_eval::evaluate(graph, id, &constants)
}

/// `value` as an element of `dtype`, when that conversion is exact and unambiguous.
fn converted(value: Scalar, dtype: DType) -> Option<Scalar> {
    match (value, dtype) {
        (_, DType::Bool) => matches!(value, Scalar::Bool(_)).then_some(value),
        (Scalar::Bool(b), d) if d.is_float() => Some(Scalar::Float(f64::from(u8::from(b)))),
        (Scalar::Bool(b), d) if d.is_integer() => Some(Scalar::Int(i64::from(b))),
        (Scalar::Int(i), d) if d.is_float() => Some(Scalar::Float(i as f64)),
        (Scalar::Float(x), d) if d.is_float() => Some(Scalar::Float(x)),
        (Scalar::Int(_), d) if d.is_integer() => Some(value),
        _ => None,
    }
}

impl Pass for FoldConstants {
    fn name(&self) -> &'static str {
        "fold_constants"
    }

    fn inside_regions(&self) -> bool {
        true
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let (mut identities, mut fulls, mut scalars, mut literals) = (0, 0, 0, 0);
        for id in order {
            if let Some(kept) = identity_of(graph, id) {
                graph.replace_uses(ValueRef { node: id, slot: 0 }, kept);
                graph.remove_node(id);
                identities += 1;
                continue;
            }
            if let Some(full) = as_full(graph, id) {
                graph.detach_inputs(id);
                graph.node_mut(id).op = full;
                fulls += 1;
            } else if let Some((op, inputs)) = inline_scalars(graph, id) {
                graph.detach_inputs(id);
                for (slot, v) in inputs.into_iter().enumerate() {
                    graph.connect(v, id, slot as u16);
                }
                graph.node_mut(id).op = op;
                scalars += 1;
            }
            // Also after a rewrite above: `where(c, full, full)` is first given scalar operands.
            if let Some(values) = evaluated(graph, id) {
                graph.detach_inputs(id);
                graph.node_mut(id).op = Op::Literal(Literal { values });
                literals += 1;
            }
        }
        cx.note(identities, "identities removed (x*1, x-0, and with all-true, …)");
        cx.note(fulls, "constants made plain `full`s");
        cx.note(scalars, "selects of constants given scalar operands");
        cx.note(literals, "ops on constants evaluated into literals");
        Ok(if identities + fulls + scalars + literals > 0 { Changed::Yes } else { Changed::No })
    }
}

#[cfg(test)]
mod tests {
    use super::FoldConstants;
    use crate::ir::builder::Builder;
    use crate::ir::ops::{Arange, Binary, Convert, Full, FullLike, Index, Literal, ScalarTensor, Unsqueeze, Where};
    use crate::ir::{print, BinaryOp, DType, Op, Operand, Scalar, TensorType};
    use crate::pass::{Pass, PassCx};

    fn bin(op: BinaryOp, rhs: Operand) -> Op {
        Op::Binary(Binary { op, lhs: Operand::Tensor, rhs, alpha: None })
    }

    #[test]
    fn identities_and_constant_shapes_fold() {
        let mut b = Builder::new("t");
        let x = b.input("x", TensorType::new(DType::F32, &[4]));
        let i = b.input("i", TensorType::new(DType::I64, &[4]));
        let f1 = b.op("f1", bin(BinaryOp::Mul, Operand::Scalar(Scalar::Float(1.0))), &[x], x_ty());
        let f2 = b.op("f2", bin(BinaryOp::Add, Operand::Scalar(Scalar::Float(0.0))), &[f1], x_ty());
        let i1 =
            b.op("i1", bin(BinaryOp::Add, Operand::Scalar(Scalar::Int(0))), &[i], TensorType::new(DType::I64, &[4]));
        let t = b.op(
            "t",
            Op::Full(Full { size: vec![], value: Scalar::Bool(true) }),
            &[],
            TensorType::new(DType::Bool, &[]),
        );
        let gt = b.op("gt", bin(BinaryOp::Gt, Operand::Scalar(Scalar::Float(0.0))), &[f2], bool_ty());
        let and =
            Op::Binary(Binary { op: BinaryOp::BitwiseAnd, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let a = b.op("a", and, &[t, gt], bool_ty());
        let z = b.op("z", Op::FullLike(FullLike { value: Scalar::Int(0) }), &[f2], x_ty());
        let st = |b: &mut Builder, name: &str, v: f64| {
            b.op(
                name,
                Op::ScalarTensor(ScalarTensor { value: Scalar::Float(v) }),
                &[],
                TensorType::new(DType::F32, &[]),
            )
        };
        let (zero, minf) = (st(&mut b, "zero", 0.0), st(&mut b, "minf", f64::NEG_INFINITY));
        let sel = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor });
        let w = b.op("w", sel, &[gt, zero, minf], x_ty());
        b.output(f2);
        b.output(i1);
        b.output(a);
        b.output(z);
        b.output(w);
        let mut g = b.finish();
        let mut cx = PassCx::default();
        FoldConstants.run(&mut g, &mut cx).expect("runs");
        crate::verify(&g).expect("verifies");
        assert_eq!(
            cx.notes,
            [
                "3 identities removed (x*1, x-0, and with all-true, …)",
                "1 constants made plain `full`s",
                "1 selects of constants given scalar operands"
            ]
        );
        insta::assert_snapshot!(print(&g), @r#"
        graph t {
          %0 = input.user #0 : f32[4]  # x
          %1 = input.user #1 : i64[4]  # i
          %2 = add(%0, 0.0) : f32[4]  # f2
          %3 = full() {size=[], value=true} : bool[]  # t
          %4 = gt(%2, 0.0) : bool[4]  # gt
          %5 = full() {size=[4], value=0.0} : f32[4]  # z
          %6 = scalar_tensor() {value=0.0} : f32[]  # zero
          %7 = scalar_tensor() {value=-inf} : f32[]  # minf
          %8 = where(%4, 0.0, -inf) : f32[4]  # w
          return user[0] = %2
          return user[1] = %1
          return user[2] = %4
          return user[3] = %5
          return user[4] = %8
        }
        "#);
    }

    fn x_ty() -> TensorType {
        TensorType::new(DType::F32, &[4])
    }

    fn bool_ty() -> TensorType {
        TensorType::new(DType::Bool, &[4])
    }

    fn fold(b: Builder) -> String {
        let mut g = b.finish();
        FoldConstants.run(&mut g, &mut PassCx::default()).expect("runs");
        crate::verify(&g).expect("verifies");
        print(&g)
    }

    /// A causal mask from `arange`: compare, select between 0 and -inf — one literal.
    #[test]
    fn a_causal_mask_becomes_a_literal() {
        let ty = |d: DType, dims: &[i64]| TensorType::new(d, dims);
        let mut b = Builder::new("t");
        let arange = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(3), step: Scalar::Int(1) });
        let r = b.op("r", arange, &[], ty(DType::I64, &[3]));
        let rows = b.op("rows", Op::Unsqueeze(Unsqueeze { dim: 1 }), &[r], ty(DType::I64, &[3, 1]));
        let le = Op::Binary(Binary { op: BinaryOp::Le, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let mask = b.op("mask", le, &[r, rows], ty(DType::Bool, &[3, 3]));
        let select = Op::Where(Where {
            on_true: Operand::Scalar(Scalar::Float(0.0)),
            on_false: Operand::Scalar(Scalar::Float(f64::NEG_INFINITY)),
        });
        let m = b.op("m", select, &[mask], ty(DType::F32, &[3, 3]));
        b.output(m);
        let text = fold(b);
        assert!(
            text.contains("%3 = literal() {values=[0.0, -inf, -inf, 0.0, 0.0, -inf, 0.0, 0.0, 0.0]} : f32[3,3]  # m"),
            "{text}"
        );
    }

    /// Float arithmetic is not evaluated (f64 on the host would round unlike f32 on the
    /// device); an integer overflow refuses; advanced indexing wraps negative indices.
    #[test]
    fn only_exact_evaluations_fold() {
        let ty = |d: DType, dims: &[i64]| TensorType::new(d, dims);
        let mut b = Builder::new("t");
        let arange = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(4), step: Scalar::Int(1) });
        let r = b.op("r", arange, &[], ty(DType::I64, &[4]));
        let f = b.op("f", Op::Convert(Convert), &[r], ty(DType::F32, &[4]));
        let half = b.op("half", bin(BinaryOp::Mul, Operand::Scalar(Scalar::Float(0.5))), &[f], ty(DType::F32, &[4]));
        let max = b.op("max", Op::Full(Full { size: vec![], value: Scalar::Int(i64::MAX) }), &[], ty(DType::I64, &[]));
        let over = b.op("over", bin(BinaryOp::Add, Operand::Scalar(Scalar::Int(1))), &[max], ty(DType::I64, &[]));
        let idx = Op::Literal(Literal { values: vec![Scalar::Int(-1), Scalar::Int(1)] });
        let idx = b.op("idx", idx, &[], ty(DType::I64, &[2]));
        let picked = b.op("picked", Op::Index(Index { present: vec![true] }), &[r, idx], ty(DType::I64, &[2]));
        for v in [half, over, picked] {
            b.output(v);
        }
        let text = fold(b);
        assert!(text.contains("literal() {values=[0.0, 1.0, 2.0, 3.0]} : f32[4]  # f"), "{text}");
        assert!(text.contains("mul(") && text.contains("add("), "{text}");
        assert!(text.contains("literal() {values=[3, 1]} : i64[2]  # picked"), "{text}");
    }
}
