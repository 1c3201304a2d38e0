//! Skipping blocks of keys: the masks applied to the scores between `bmm(Q, Kᵀ)` and the
//! softmax, found and rebuilt as a graph on one block, so that the loop can check them before
//! it reads the block's `Kᵀ` and `V` (see [`super::lower`]).

use std::collections::{BTreeMap, BTreeSet};

use torchtpu_passes::ir::ops::{Binary, Where};
use torchtpu_passes::ir::{BinaryOp, DType, Graph, Node, NodeId, Op, Operand, Scalar, TensorType, ValueRef};

use super::{Building, Part};

/// The masks on the way from `bmm(Q, Kᵀ)` to the softmax, on one block: a block where one of
/// them makes every score −inf is skipped.
pub(super) struct Skip {
    /// Returns the masks, on block operands.
    pub(super) masks: Graph,
    pub(super) masks_reads: Vec<usize>,
    /// Per mask: its type on one block and what in it masks a score.
    pub(super) kinds: Vec<(TensorType, Masks)>,
}

/// What in a mask makes a score −inf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Masks {
    /// An additive mask: −inf.
    NegInf,
    /// The condition of `where(c, scores, −inf)`: false.
    False,
    /// The condition of `where(c, −inf, scores)`: true.
    True,
}

/// The masks that let a block be skipped (`None` when there is none, or when an op after one
/// could turn −inf into something else).
pub(super) fn skip(part: &Part, before: &[NodeId], softmax_input: ValueRef) -> Option<Skip> {
    let (masks, independent) = masks_before_softmax(part.graph, before, softmax_input)?;
    let expanded: BTreeSet<ValueRef> = part.expanded.iter().chain(&independent).copied().collect();
    let part = Part { expanded: &expanded, ..*part };
    let mut b =
        Building { g: torchtpu_passes::ir::builder::Builder::new("masks"), map: BTreeMap::new(), reads: vec![] };
    let mut kinds = Vec::with_capacity(masks.len());
    for (v, kind) in masks {
        let mask = part.value(&mut b, v)?;
        b.g.output(mask);
        kinds.push((b.g.graph_mut().value_type(mask).clone(), kind));
    }
    Some(Skip { masks: b.g.finish(), masks_reads: b.reads, kinds })
}

/// The masks applied to the scores between the first `bmm` (`before[0]`) and the softmax's
/// input, and the values of `before` that do not depend on the scores. Every op on the scores
/// after the first mask must keep −inf: another mask, a view, a conversion, a product or
/// quotient by a positive number.
#[allow(clippy::type_complexity)]
fn masks_before_softmax(
    graph: &Graph,
    before: &[NodeId],
    softmax_input: ValueRef,
) -> Option<(Vec<(ValueRef, Masks)>, BTreeSet<ValueRef>)> {
    let mut scores = BTreeSet::from([ValueRef { node: *before.first()?, slot: 0 }]);
    let (mut masks, mut independent) = (Vec::new(), BTreeSet::new());
    // The scores once masked: every later op on the scores must read it.
    let mut masked: Option<ValueRef> = None;
    for &id in &before[1..] {
        let inputs = graph.inputs(id);
        let node = graph.node(id);
        let out = ValueRef { node: id, slot: 0 };
        let on_scores: Vec<usize> = (0..inputs.len()).filter(|&k| scores.contains(&inputs[k])).collect();
        if on_scores.is_empty() {
            independent.extend((0..node.outputs.len()).map(|slot| ValueRef { node: id, slot: slot as u16 }));
            continue;
        }
        let mask = match on_scores[..] {
            [k] => mask_of(&node.op, &inputs, k).filter(|(m, kind)| {
                // An additive mask is a float; a `where`'s condition a bool.
                let dtype = graph.value_type(*m).dtype;
                if *kind == Masks::NegInf {
                    dtype.is_float()
                } else {
                    dtype == DType::Bool
                }
            }),
            _ => None,
        };
        if let Some(m) = masked {
            if on_scores.len() != 1 || inputs[on_scores[0]] != m || (mask.is_none() && !keeps_neg_inf(node)) {
                return None;
            }
        }
        if let Some(mask) = mask {
            masks.push(mask);
        }
        if mask.is_some() || masked.is_some() {
            masked = Some(out);
        }
        scores.insert(out);
    }
    (masked == Some(softmax_input)).then_some((masks, independent))
}

/// The mask `node` applies to the scores (its input `k`): `scores + mask`, `where(c, scores,
/// −inf)`, `where(c, −inf, scores)`.
fn mask_of(op: &Op, inputs: &[ValueRef], k: usize) -> Option<(ValueRef, Masks)> {
    let neg_inf = |o: &Operand| matches!(o, Operand::Scalar(Scalar::Float(f)) if *f == f64::NEG_INFINITY);
    match op {
        Op::Binary(Binary { op: BinaryOp::Add, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None }) => {
            Some((inputs[1 - k], Masks::NegInf))
        }
        Op::Where(Where { on_true: Operand::Tensor, on_false }) if k == 1 && neg_inf(on_false) => {
            Some((inputs[0], Masks::False))
        }
        Op::Where(Where { on_true, on_false: Operand::Tensor }) if k == 1 && neg_inf(on_true) => {
            Some((inputs[0], Masks::True))
        }
        _ => None,
    }
}

/// Whether `node` on the masked scores keeps −inf at −inf.
fn keeps_neg_inf(node: &Node) -> bool {
    let positive = |o: &Operand| matches!(o, Operand::Scalar(s) if s.as_f64() > 0.0 && s.as_f64().is_finite());
    match &node.op {
        Op::View(_) | Op::Identity(_) => true,
        Op::Convert(_) => node.outputs.iter().all(|o| o.dtype.is_float()),
        Op::Binary(Binary { op: BinaryOp::Mul, lhs, rhs, .. }) => positive(lhs) || positive(rhs),
        Op::Binary(Binary { op: BinaryOp::Div, lhs: Operand::Tensor, rhs, .. }) => positive(rhs),
        _ => false,
    }
}
