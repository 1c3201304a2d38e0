//! `grouped_attention`: grouped-query attention without copies of the K/V heads. An export of
//! GQA repeats each K/V head for its group of query heads (`unsqueeze` → `expand` → `view`,
//! PyTorch's `repeat_kv`) and then runs `bmm` over all query heads, so the repeated K and V are
//! materialized. Because the query heads of one group are adjacent, the same products are one
//! `bmm` per K/V head with the group's query rows stacked: `q [B, H, M, K]` viewed as
//! `[B·Hkv, G·M, K]` against the shared head `[B·Hkv, K, N]`, and the result viewed back as
//! `[B·H, M, N]` — the same numbers, with no repeat.
//!
//! Matched: `bmm(view(a), view(f(repeat(kv))))`, `a: [B, H, M, K]`, `f` a chain of permutes
//! that keep the batch and head dims, element-wise ops with scalars and conversions (the
//! transpose and scaling of K). Both attention products (scores and the weighted sum of V)
//! have this form. The repeat is left to `dce` once nothing reads it.
//!
//! Both products of one attention with `G = 2`, as a filetest (the input graph, then the graph
//! after the pass and `dce`, after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/grouped_attention/repeated_kv_heads_read_once.ir")]
//! ```

use crate::ir::ops::{Binary, Bmm, Convert, Identity, Permute, Unsqueeze, View};
use crate::ir::{Dim, Graph, Node, NodeId, Op, Operand, TensorType, ValueRef};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct GroupedAttention;

/// A repeat of K/V heads: `view(expand(unsqueeze(kv, 2)))` from `[B, Hkv, S, D]` to
/// `[B, Hkv·G, S, D]`. Returns `kv` and `G`.
fn repeated_heads(graph: &Graph, v: ValueRef) -> Option<(ValueRef, i64)> {
    let single_input = |id: NodeId| match graph.inputs(id)[..] {
        [x] => Some(x),
        _ => None,
    };
    let view = graph.node(v.node);
    let Op::View(_) = view.op else { return None };
    let expand = single_input(v.node)?;
    let Op::Expand(_) = graph.node(expand.node).op else { return None };
    let unsqueeze = single_input(expand.node)?;
    let Op::Unsqueeze(Unsqueeze { dim: 2 }) = graph.node(unsqueeze.node).op else { return None };
    let kv = single_input(unsqueeze.node)?;
    let (k, e, out) =
        (graph.value_type(kv).static_dims()?, graph.value_type(expand).static_dims()?, view.outputs[0].static_dims()?);
    let [b, hkv, s, d] = k[..] else { return None };
    let g = e.get(2).copied()?;
    (e == [b, hkv, g, s, d] && out == [b, hkv * g, s, d] && g > 1).then_some((kv, g))
}

/// Ops that may sit between the repeat and the `bmm`: they act on each head alike.
fn per_head(op: &Op) -> bool {
    match op {
        Op::Permute(Permute { dims }) => dims.len() == 4 && dims[0] == 0 && dims[1] == 1,
        Op::Binary(Binary { lhs, rhs, .. }) => {
            matches!((lhs, rhs), (Operand::Tensor, Operand::Scalar(_)) | (Operand::Scalar(_), Operand::Tensor))
        }
        Op::Unary(_) | Op::Convert(Convert) | Op::Identity(Identity) => true,
        _ => false,
    }
}

/// `bmm`'s right operand `view(f(repeat(kv)))`: the chain `f` (outermost last), `kv` and `G`.
fn shared_operand(graph: &Graph, rhs: ValueRef) -> Option<(Vec<NodeId>, ValueRef, i64)> {
    let Op::View(_) = graph.node(rhs.node).op else { return None };
    let mut v = *graph.inputs(rhs.node).first()?;
    let mut chain = Vec::new();
    loop {
        if let Some((kv, g)) = repeated_heads(graph, v) {
            chain.reverse();
            return Some((chain, kv, g));
        }
        let node = graph.node(v.node);
        if !per_head(&node.op) || node.outputs.len() != 1 {
            return None;
        }
        chain.push(v.node);
        v = *graph.inputs(v.node).first()?;
    }
}

/// Rewrites one `bmm` when it matches; returns whether it did.
fn rewrite(graph: &mut Graph, bmm: NodeId) -> Option<()> {
    let [lhs, rhs] = graph.inputs(bmm)[..] else { return None };
    let Op::View(_) = graph.node(lhs.node).op else { return None };
    let q = *graph.inputs(lhs.node).first()?;
    let (chain, kv, g) = shared_operand(graph, rhs)?;
    let [b, h, m, k] = graph.value_type(q).static_dims()?[..] else { return None };
    let old = graph.node(bmm).clone();
    let [_, _, n] = old.outputs[0].static_dims()?[..] else { return None };
    let hkv = h / g;
    let r = graph.value_type(rhs).static_dims()?;
    if h != hkv * g || r.len() != 3 || r[0] != b * h || r[1] != k {
        return None;
    }
    let add = |graph: &mut Graph, tag: &str, op: Op, ty: TensorType, input: ValueRef| {
        let node = Node::derived(&old, format_args!("grouped_attention.{tag}"), op, [ty]);
        ValueRef { node: graph.add_op(node, &[input]), slot: 0 }
    };
    // The chain, replayed on the shared heads.
    let mut shared = kv;
    for (i, &id) in chain.iter().enumerate() {
        let node = graph.node(id).clone();
        let mut t = node.outputs[0].clone();
        t.dims[1] = Dim::Static(hkv);
        shared = add(graph, &format!("kv{i}"), node.op, t, shared);
    }
    let dtype = |v: ValueRef, graph: &Graph| graph.value_type(v).dtype;
    let view = |size: &[i64]| Op::View(View { size: size.iter().map(|&d| Dim::Static(d)).collect() });
    let qt = TensorType::new(dtype(q, graph), &[b * hkv, g * m, k]);
    let q2 = add(graph, "q", view(&[b * hkv, g * m, k]), qt, q);
    let kt = TensorType::new(dtype(shared, graph), &[b * hkv, k, n]);
    let k2 = add(graph, "kv", view(&[b * hkv, k, n]), kt, shared);
    let mut prod = Node::derived(
        &old,
        "grouped_attention.bmm",
        Op::Bmm(Bmm),
        [TensorType::new(old.outputs[0].dtype, &[b * hkv, g * m, n])],
    );
    prod.precision = old.precision;
    let p = ValueRef { node: graph.add_op(prod, &[q2, k2]), slot: 0 };
    let back = add(graph, "out", view(&[b * h, m, n]), old.outputs[0].clone(), p);
    graph.replace_uses(ValueRef { node: bmm, slot: 0 }, back);
    graph.remove_node(bmm);
    Some(())
}

impl Pass for GroupedAttention {
    fn name(&self) -> &'static str {
        "grouped_attention"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let bmms: Vec<NodeId> = order.into_iter().filter(|&id| graph.node(id).op == Op::Bmm(Bmm)).collect();
        let rewritten = bmms.into_iter().filter(|&id| rewrite(graph, id).is_some()).count();
        cx.note(rewritten, "attention products read shared K/V heads instead of repeated ones");
        Ok(if rewritten > 0 { Changed::Yes } else { Changed::No })
    }
}

#[cfg(test)]
mod tests {
    use super::GroupedAttention;
    use crate::dce::Dce;
    use crate::ir::builder::Builder;
    use crate::ir::ops::{Binary, Bmm, Expand, Permute, Unsqueeze, View};
    use crate::ir::{print, BinaryOp, DType, Dim, Op, Operand, Scalar, TensorType};
    use crate::pass::{Pass, PassCx};

    fn f32(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, dims)
    }

    fn view(dims: &[i64]) -> Op {
        Op::View(View { size: dims.iter().map(|&d| Dim::Static(d)).collect() })
    }

    /// Llama's `repeat_kv` then `q @ (k * 0.5)ᵀ`: one `bmm` per K/V head, no repeat left.
    #[test]
    fn repeated_kv_heads_are_read_once() {
        let mut b = Builder::new("t");
        let q = b.input("q", f32(&[1, 4, 16, 8]));
        let k = b.input("k", f32(&[1, 2, 16, 8]));
        let u = b.op("u", Op::Unsqueeze(Unsqueeze { dim: 2 }), &[k], f32(&[1, 2, 1, 16, 8]));
        let size = [1, 2, 2, 16, 8].map(Dim::Static).to_vec();
        let e = b.op("e", Op::Expand(Expand { size }), &[u], f32(&[1, 2, 2, 16, 8]));
        let r = b.op("r", view(&[1, 4, 16, 8]), &[e], f32(&[1, 4, 16, 8]));
        let t = b.op("t", Op::Permute(Permute { dims: vec![0, 1, 3, 2] }), &[r], f32(&[1, 4, 8, 16]));
        let half = Operand::Scalar(Scalar::Float(0.5));
        let mul = Op::Binary(Binary { op: BinaryOp::Mul, lhs: Operand::Tensor, rhs: half, alpha: None });
        let s = b.op("s", mul, &[t], f32(&[1, 4, 8, 16]));
        let qv = b.op("qv", view(&[4, 16, 8]), &[q], f32(&[4, 16, 8]));
        let kv = b.op("kv", view(&[4, 8, 16]), &[s], f32(&[4, 8, 16]));
        let scores = b.op("scores", Op::Bmm(Bmm), &[qv, kv], f32(&[4, 16, 16]));
        b.output(scores);
        let mut g = b.finish();
        let mut cx = PassCx::default();
        GroupedAttention.run(&mut g, &mut cx).expect("runs");
        Dce.run(&mut g, &mut cx).expect("runs");
        crate::verify(&g).expect("verifies");
        assert_eq!(cx.notes[0], "1 attention products read shared K/V heads instead of repeated ones");
        insta::assert_snapshot!(print(&g), @r#"
        graph t {
          %0 = input.user #0 : f32[1,4,16,8]  # q
          %1 = input.user #1 : f32[1,2,16,8]  # k
          %2 = permute(%1) {dims=[0, 1, 3, 2]} : f32[1,2,8,16]  # scores.grouped_attention.kv0
          %3 = mul(%2, 0.5) : f32[1,2,8,16]  # scores.grouped_attention.kv1
          %4 = view(%0) {size=[2, 32, 8]} : f32[2,32,8]  # scores.grouped_attention.q
          %5 = view(%3) {size=[2, 8, 16]} : f32[2,8,16]  # scores.grouped_attention.kv
          %6 = bmm(%4, %5) : f32[2,32,16]  # scores.grouped_attention.bmm
          %7 = view(%6) {size=[4, 16, 16]} : f32[4,16,16]  # scores.grouped_attention.out
          return user[0] = %7
        }
        "#);
    }
}
