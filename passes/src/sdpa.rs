//! `sdpa`: marks each attention — `bmm(Q, Kᵀ)`, the ops between it and the softmax (views,
//! scale, mask add, bucket masks), the softmax, the ops after it (views, masks, conversions)
//! and `bmm(P, V)` — as one instance of the composite `torchtpu.sdpa`. The emitter wraps the
//! marked nodes into one `stablehlo.composite "torchtpu.sdpa"` whose decomposition function
//! holds exactly these ops: XLA inlines it, and a backend with a fused attention kernel can
//! match it by name. Runs last, on the graph the emitter sees; the values are unchanged.
//!
//! Only a chain whose inner values have no other user is marked, so the composite's one
//! result is the only value that leaves it; its operands are whatever the chain reads from
//! outside (Q, Kᵀ, the mask, V, …), in order of first use.
//!
//! ```text
#![doc = include_str!("../tests/sdpa/attention_marked_as_one_composite.ir")]
//! ```

use crate::ir::ops::{Binary, Bmm, Cat, Convert, ExtremumDim, Identity, Reduce, Slice, Softmax, Where};
use crate::ir::{BinaryOp, Composite, Dim, Graph, NodeId, Op, Operand, ReduceOp, SDPA};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct Sdpa;

/// How many ops a chain may have between a `bmm` and the softmax, on either side.
const MAX_CHAIN: usize = 8;

/// The operand slot through which a chain op passes the attention scores on, if `op` may sit
/// in the chain: views, conversions, element-wise functions (softcapping's `tanh`) and
/// arithmetic (scale, mask add: slot 0) and `where` selecting between the scores and a
/// constant (bucket masks: slot 1).
fn chain_slot(op: &Op) -> Option<u16> {
    match op {
        Op::View(_) | Op::Convert(Convert) | Op::Identity(Identity) | Op::Unary(_) | Op::Binary(_) => Some(0),
        Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(_) })
        | Op::Where(Where { on_true: Operand::Scalar(_), on_false: Operand::Tensor }) => Some(1),
        _ => None,
    }
}

/// The single consumer of `id`'s single output, when it is not also a graph output.
fn only_user(graph: &Graph, id: NodeId) -> Option<(NodeId, u16)> {
    match graph.users(id)[..] {
        [(user, slot, 0)] if graph.node(id).outputs.len() == 1 && !graph.is_output(id) => Some((user, slot)),
        _ => None,
    }
}

/// The way back from `cur` (the softmax or an op of the chain) to the `bmm` that makes the
/// scores, through the input slots `slots` of `cur`: the `bmm`, and the chain's ops nearest
/// first. A binary op may take the scores on either side (`bias + scores`, ALiBi's); each side
/// is tried, at most [`MAX_CHAIN`] ops deep.
fn back_to_bmm(graph: &Graph, cur: NodeId, slots: &[u16], depth: usize) -> Option<(NodeId, Vec<NodeId>)> {
    for &slot in slots {
        let Some(prev) = graph.inputs(cur).get(usize::from(slot)).map(|v| v.node) else { continue };
        if only_user(graph, prev).map(|(u, _)| u) != Some(cur) {
            continue;
        }
        if graph.node(prev).op == Op::Bmm(Bmm) {
            return Some((prev, Vec::new()));
        }
        let op = &graph.node(prev).op;
        let Some(next) = chain_slot(op) else { continue };
        let sides: &[u16] = if matches!(op, Op::Binary(_)) { &[0, 1] } else { &[next] };
        if depth < MAX_CHAIN {
            if let Some((first, mut before)) = back_to_bmm(graph, prev, sides, depth + 1) {
                before.insert(0, prev);
                return Some((first, before));
            }
        }
    }
    None
}

/// An attention sink (GPT-OSS's): each row's scores and one more logit concatenated along the
/// keys, shifted by their maximum, then the softmax — `softmax(c − max(c))` with
/// `c = cat(scores, sink)` — whose sink column is sliced off after it. The `cat`, the maximum
/// (`max.dim`, or `amax` once `dce` has dropped its unused indices) and the shift when
/// `softmax`'s input is made so, each read only there.
fn sink_before(graph: &Graph, softmax: NodeId) -> Option<[NodeId; 3]> {
    let last = |id: NodeId, dim: i64| dim == -1 || dim + 1 == graph.node(id).outputs[0].rank() as i64;
    let shift = graph.inputs(softmax).first()?.node;
    let sub = Binary { op: BinaryOp::Sub, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None };
    if graph.node(shift).op != Op::Binary(sub) || only_user(graph, shift) != Some((softmax, 0)) {
        return None;
    }
    let [c, m] = graph.inputs(shift)[..] else { return None };
    let (cat, max) = (c.node, m.node);
    let dim = match &graph.node(max).op {
        Op::ExtremumDim(ExtremumDim { max: true, dim, keepdim: true }) => *dim,
        Op::Reduce(Reduce { op: ReduceOp::Max, dims, keepdim: true, .. }) if dims.len() == 1 => dims[0],
        _ => return None,
    };
    let Op::Cat(Cat { dim: cat_dim }) = graph.node(cat).op else { return None };
    let sink = *graph.inputs(cat).get(1)?;
    let one_logit = graph.inputs(cat).len() == 2 && graph.value_type(sink).dims.last() == Some(&Dim::Static(1));
    let mut readers = vec![(max, 0, 0), (shift, 0, 0)];
    readers.sort();
    let cat_read = graph.users(cat) == readers && !graph.is_output(cat);
    let max_read = graph.users(max) == [(shift, 1, 0)] && !graph.is_output(max);
    (m.slot == 0 && last(max, dim) && last(cat, cat_dim) && one_logit && cat_read && max_read)
        .then_some([cat, max, shift])
}

/// The slice that drops a sink's column from the probabilities `probs`: its only user.
fn sink_dropped(graph: &Graph, probs: NodeId) -> Option<NodeId> {
    let (slice, _) = only_user(graph, probs)?;
    let Op::Slice(Slice { dim, start: Dim::Static(0), step: 1, .. }) = graph.node(slice).op else { return None };
    let rank = graph.node(probs).outputs[0].rank();
    let keys = |id: NodeId| graph.node(id).outputs[0].dims.last().and_then(Dim::as_static);
    let kept = (dim == -1 || dim + 1 == rank as i64) && keys(slice)? + 1 == keys(probs)?;
    kept.then_some(slice)
}

/// The attention around softmax node `softmax`, in topological order, when it is one.
fn attention(graph: &Graph, softmax: NodeId) -> Option<Vec<NodeId>> {
    let sink = sink_before(graph, softmax);
    let (first, before) = match sink {
        Some([cat, ..]) => back_to_bmm(graph, cat, &[0], 1)?,
        None => back_to_bmm(graph, softmax, &[0], 0)?,
    };
    let dropped = match sink {
        Some(_) => Some(sink_dropped(graph, softmax)?),
        None => None,
    };
    let (mut cur, mut after) = (dropped.unwrap_or(softmax), Vec::new());
    let last = loop {
        let (next, slot) = only_user(graph, cur)?;
        let op = &graph.node(next).op;
        if *op == Op::Bmm(Bmm) && slot == 0 {
            break next;
        }
        if chain_slot(op) != Some(slot) || after.len() >= MAX_CHAIN {
            return None;
        }
        after.push(next);
        cur = next;
    };
    let mut nodes = vec![first];
    nodes.extend(before.into_iter().rev());
    nodes.extend(sink.into_iter().flatten());
    nodes.push(softmax);
    nodes.extend(dropped);
    nodes.extend(after);
    nodes.push(last);
    Some(nodes)
}

impl Pass for Sdpa {
    fn name(&self) -> &'static str {
        "sdpa"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let mut instance = 0;
        for id in order {
            let node = graph.node(id);
            if !matches!(node.op, Op::Softmax(Softmax { log: false, .. })) || node.composite.is_some() {
                continue;
            }
            let Some(nodes) = attention(graph, id) else { continue };
            // A node is in one composite: a chain sharing a `bmm` with an earlier one stays inline.
            if nodes.iter().any(|&n| graph.node(n).composite.is_some()) {
                continue;
            }
            for n in nodes {
                graph.node_mut(n).composite = Some(Composite { name: SDPA, instance });
            }
            instance += 1;
        }
        cx.note(instance as usize, &format!("attentions marked as `{SDPA}` composites"));
        Ok(if instance > 0 { Changed::Yes } else { Changed::No })
    }
}

#[cfg(test)]
mod tests {
    use super::Sdpa;
    use crate::ir::builder::Builder;
    use crate::ir::ops::{Binary, Bmm, Softmax};
    use crate::ir::{print, BinaryOp, DType, Op, Operand, TensorType};
    use crate::pass::{Pass, PassCx};

    fn f32(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, dims)
    }

    fn attention(exposed: bool) -> String {
        let mut b = Builder::new("t");
        let q = b.input("q", f32(&[2, 16, 8]));
        let kt = b.input("kt", f32(&[2, 8, 16]));
        let mask = b.input("mask", f32(&[2, 16, 16]));
        let v = b.input("v", f32(&[2, 16, 8]));
        let s = b.op("s", Op::Bmm(Bmm), &[q, kt], f32(&[2, 16, 16]));
        let add = Op::Binary(Binary { op: BinaryOp::Add, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let m = b.op("m", add, &[s, mask], f32(&[2, 16, 16]));
        let p = b.op("p", Op::Softmax(Softmax { dim: -1, log: false, safe: true }), &[m], f32(&[2, 16, 16]));
        let o = b.op("o", Op::Bmm(Bmm), &[p, v], f32(&[2, 16, 8]));
        b.output(o);
        if exposed {
            b.output(p);
        }
        let mut g = b.finish();
        let mut cx = PassCx::default();
        Sdpa.run(&mut g, &mut cx).expect("runs");
        print(&g)
    }

    #[test]
    fn marks_bmm_mask_softmax_bmm() {
        let text = attention(false);
        assert_eq!(text.matches("composite=torchtpu.sdpa#0").count(), 4, "{text}");
    }

    /// Attention weights that are also returned leave the chain: nothing is marked.
    #[test]
    fn leaves_attention_whose_weights_are_used_elsewhere() {
        let text = attention(true);
        assert!(!text.contains("composite="), "{text}");
    }
}
