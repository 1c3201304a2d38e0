//! `safe_softmax`: the guard exports put around attention's softmax for rows whose keys are
//! all masked — `where(not(any(not(eq(x, -inf)), dim)), 0, softmax(x, dim))` — becomes one
//! softmax that gives zeros for such rows (`_safe_softmax`). The emitter checks the row's
//! maximum (already computed by the softmax) against -inf instead of comparing, negating and
//! reducing the whole score tensor: attention is `bmm`, mask add, one softmax, `bmm`.
//!
//! Exact: a row's maximum is -inf exactly when every element is -inf (a NaN makes the
//! maximum NaN, and the guard keeps the NaN too). In a size bucket, `bucket_masks` has masked
//! the softmax's input with -inf and the guard's with false past the real length, by equal
//! masks that `cse` (earlier in the pipeline) makes one value: the guard then asks the same of
//! the valid positions, and the rewrite still holds.
//!
//! A filetest (the input graph, then the graph after the pass and `dce`, after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/safe_softmax/guarded_softmax_becomes_safe.ir")]
//! ```

use crate::ir::ops::{Binary, Reduce, Softmax, Where};
use crate::ir::{norm_dim, BinaryOp, Graph, Node, NodeId, Op, Operand, ReduceOp, Scalar, UnaryOp, ValueRef};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct SafeSoftmax;

fn single_input(graph: &Graph, id: NodeId) -> Option<ValueRef> {
    match graph.inputs(id)[..] {
        [x] => Some(x),
        _ => None,
    }
}

/// The softmax node guarded by the `where` node `id`, when `id` is the guard.
fn guarded(graph: &Graph, id: NodeId) -> Option<NodeId> {
    let is_zero = |o: &Operand| {
        matches!(o, Operand::Scalar(Scalar::Float(z)) if *z == 0.0) || matches!(o, Operand::Scalar(Scalar::Int(0)))
    };
    let Op::Where(Where { on_true, on_false: Operand::Tensor }) = &graph.node(id).op else { return None };
    if !is_zero(on_true) {
        return None;
    }
    let [cond, soft] = graph.inputs(id)[..] else { return None };
    let Op::Softmax(Softmax { dim, log: false, safe: false }) = graph.node(soft.node).op else { return None };
    let x = single_input(graph, soft.node)?;
    let rank = graph.value_type(x).rank();
    // cond = not(any(not(eq(x, -inf)), [dim], keepdim))
    let not_any = |v: ValueRef| {
        (graph.node(v.node).op == Op::Unary(UnaryOp::LogicalNot)).then(|| single_input(graph, v.node)).flatten()
    };
    let any = not_any(cond)?;
    let Op::Reduce(Reduce { op: ReduceOp::Any, dims, keepdim: true, .. }) = &graph.node(any.node).op else {
        return None;
    };
    if dims.len() != 1 || norm_dim(dims[0], rank) != norm_dim(dim, rank) {
        return None;
    }
    let mut any_input = single_input(graph, any.node)?;
    let mut x = x;
    // A size bucket masks the softmax's input past the real length with -inf and the guard's
    // with false, by the same mask: the guard then asks whether x is -inf at every valid
    // position, which is what the masked input's row maximum says.
    let minus_inf = Scalar::Float(f64::NEG_INFINITY);
    if let (Some((valid, guard_in)), Some((same, scores))) =
        (bucket_masked(graph, any_input, Scalar::Bool(false)), bucket_masked(graph, x, minus_inf))
    {
        if valid == same {
            (any_input, x) = (guard_in, scores);
        }
    }
    let eq = not_any(any_input)?;
    let Op::Binary(Binary { op: BinaryOp::Eq, lhs: Operand::Tensor, rhs: Operand::Scalar(Scalar::Float(v)), .. }) =
        graph.node(eq.node).op
    else {
        return None;
    };
    (v == f64::NEG_INFINITY && single_input(graph, eq.node) == Some(x)).then_some(soft.node)
}

/// `(valid, v)` when `masked` is `where(valid, v, fill)` (a size bucket's mask).
fn bucket_masked(graph: &Graph, masked: ValueRef, fill: Scalar) -> Option<(ValueRef, ValueRef)> {
    let Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(f) }) = graph.node(masked.node).op else {
        return None;
    };
    match graph.inputs(masked.node)[..] {
        [valid, v] if f == fill => Some((valid, v)),
        _ => None,
    }
}

/// The safe form of softmax `soft`, whose guard is `guard`: the softmax itself when the guard
/// is all that reads it, else a new safe softmax beside it (its other readers keep PyTorch's
/// NaN rows).
fn safe_softmax(graph: &mut Graph, soft: NodeId, guard: NodeId) -> ValueRef {
    let only_the_guard = graph.users(soft).iter().all(|&(user, _, _)| user == guard) && !graph.is_output(soft);
    if only_the_guard {
        if let Op::Softmax(Softmax { safe, .. }) = &mut graph.node_mut(soft).op {
            *safe = true;
        }
        return ValueRef { node: soft, slot: 0 };
    }
    let node = graph.node(soft);
    let Op::Softmax(Softmax { dim, log, .. }) = node.op else { return ValueRef { node: soft, slot: 0 } };
    let derived =
        Node::derived(node, "safe_softmax", Op::Softmax(Softmax { dim, log, safe: true }), node.outputs.clone());
    let x = graph.inputs(soft)[0];
    ValueRef { node: graph.add_op(derived, &[x]), slot: 0 }
}

impl Pass for SafeSoftmax {
    fn name(&self) -> &'static str {
        "safe_softmax"
    }

    fn inside_regions(&self) -> bool {
        true
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let mut count = 0;
        for id in order {
            let Some(soft) = guarded(graph, id) else { continue };
            let safe = safe_softmax(graph, soft, id);
            graph.replace_uses(ValueRef { node: id, slot: 0 }, safe);
            graph.remove_node(id);
            count += 1;
        }
        cx.note(count, "guarded softmaxes made one safe softmax (the guard goes to dce)");
        Ok(if count > 0 { Changed::Yes } else { Changed::No })
    }
}

#[cfg(test)]
mod tests {
    use super::SafeSoftmax;
    use crate::dce::Dce;
    use crate::ir::builder::Builder;
    use crate::ir::ops::{Binary, Reduce, Softmax, Where};
    use crate::ir::{print, BinaryOp, DType, Op, Operand, ReduceOp, Scalar, TensorType, UnaryOp};
    use crate::pass::{Pass, PassCx};

    /// `where(not(any(not(eq(x, -inf)))), 0, softmax(x))`, run through the pass and `dce`; with
    /// `bucket_masked`, the softmax's input and the guard's masked by one `valid` input as
    /// `bucket_masks` does in a size bucket.
    fn guarded_softmax(bucket_masked: bool) -> String {
        let f32 = TensorType::new(DType::F32, &[2, 4]);
        let bool_ = |d: &[i64]| TensorType::new(DType::Bool, d);
        let minf = Scalar::Float(f64::NEG_INFINITY);
        let mut b = Builder::new("t");
        let x = b.input("x", f32.clone());
        let valid = bucket_masked.then(|| b.input("valid", bool_(&[2, 4])));
        let mask = |b: &mut Builder, name: &str, fill, v, ty: TensorType| match valid {
            Some(valid) => {
                let op = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(fill) });
                b.op(name, op, &[valid, v], ty)
            }
            None => v,
        };
        let scores = mask(&mut b, "masked", minf, x, f32.clone());
        let s = b.op("s", Op::Softmax(Softmax { dim: -1, log: false, safe: false }), &[scores], f32.clone());
        let eq = Op::Binary(Binary { op: BinaryOp::Eq, lhs: Operand::Tensor, rhs: Operand::Scalar(minf), alpha: None });
        let eq = b.op("eq", eq, &[x], bool_(&[2, 4]));
        let n = b.op("n", Op::Unary(UnaryOp::LogicalNot), &[eq], bool_(&[2, 4]));
        let n = mask(&mut b, "n_masked", Scalar::Bool(false), n, bool_(&[2, 4]));
        let any = Op::Reduce(Reduce { op: ReduceOp::Any, dims: vec![-1], keepdim: true, dtype: None });
        let a = b.op("a", any, &[n], bool_(&[2, 1]));
        let m = b.op("m", Op::Unary(UnaryOp::LogicalNot), &[a], bool_(&[2, 1]));
        let guard = Op::Where(Where { on_true: Operand::Scalar(Scalar::Float(0.0)), on_false: Operand::Tensor });
        let w = b.op("w", guard, &[m, s], f32);
        b.output(w);
        let mut g = b.finish();
        let mut cx = PassCx::default();
        SafeSoftmax.run(&mut g, &mut cx).expect("runs");
        Dce.run(&mut g, &mut cx).expect("runs");
        crate::verify(&g).expect("verifies");
        print(&g)
    }

    #[test]
    fn the_fully_masked_row_guard_folds_into_the_softmax() {
        insta::assert_snapshot!(guarded_softmax(false), @r"
        graph t {
          %0 = input.user #0 : f32[2,4]  # x
          %1 = softmax(%0) {dim=-1, log=false, safe=true} : f32[2,4]  # s
          return user[0] = %1
        }
        ");
    }

    /// In a size bucket both the softmax's input and the guard's are masked by one `valid`.
    #[test]
    fn the_guard_of_a_bucket_masked_softmax_folds_too() {
        let text = guarded_softmax(true);
        assert!(text.contains("safe=true") && !text.contains("reduce_any"), "{text}");
    }
}
