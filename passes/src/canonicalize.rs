//! `canonicalize`: removes operations that do not change their value — copies (`clone`,
//! `alias`), views, reshapes, expands, slices and conversions whose output type equals their
//! input type, identity permutes, single-input concatenations — and the run-time no-op
//! `_assert_tensor_metadata`. Consumers read the input directly.
//!
//! Precondition: a static graph. Postcondition: no such node is left.
//!
//! A chain of no-ops collapses onto the value underneath (a filetest: the input graph, then
//! the graph the pass leaves after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/canonicalize/noop_views_and_copies_are_dropped.ir")]
//! ```

use crate::ir::ops::{Convert, Identity, Permute, Slice};
use crate::ir::{Dim, Graph, NodeId, Op, ValueRef};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct Canonicalize;

/// Why a node is a no-op, or `None` when it is not one.
fn no_op(graph: &Graph, id: NodeId) -> Option<&'static str> {
    let node = graph.node(id);
    let inputs = graph.inputs(id);
    let same_type = || {
        let input = inputs.first()?;
        let ty = graph.value_type(*input);
        (node.outputs.len() == 1 && *ty == node.outputs[0]).then_some(())
    };
    match &node.op {
        Op::AssertMetadata(_) => Some("metadata asserts"),
        Op::Identity(Identity) => same_type().map(|()| "copies"),
        Op::View(_) | Op::Unsqueeze(_) | Op::Squeeze(_) | Op::Expand(_) => same_type().map(|()| "no-op views"),
        Op::Convert(Convert) => same_type().map(|()| "no-op conversions"),
        Op::Slice(Slice { start, step: 1, .. }) if *start == Dim::Static(0) => same_type().map(|()| "full slices"),
        Op::Permute(Permute { dims }) if dims.iter().enumerate().all(|(i, &d)| d == i as i64) => {
            same_type().map(|()| "identity permutes")
        }
        Op::Cat(_) if inputs.len() == 1 => same_type().map(|()| "single-input concatenations"),
        _ => None,
    }
}

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn inside_regions(&self) -> bool {
        true
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let found: Vec<(NodeId, &'static str)> = order.iter().filter_map(|&id| Some((id, no_op(graph, id)?))).collect();
        let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        for &(id, why) in &found {
            if let Some(&input) = graph.inputs(id).first() {
                if !graph.node(id).outputs.is_empty() {
                    graph.replace_uses(ValueRef { node: id, slot: 0 }, input);
                }
            }
            graph.remove_node(id);
            *counts.entry(why).or_default() += 1;
        }
        for (why, n) in counts {
            cx.note(n, &format!("removed {why}"));
        }
        Ok(if found.is_empty() { Changed::No } else { Changed::Yes })
    }
}
