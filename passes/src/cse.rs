//! `cse`: common-subexpression elimination. Two nodes with the same op, attributes, inputs
//! and output types compute the same value; the later one is removed and its consumers read
//! the earlier one. Graph inputs, random ops (each draw differs) and unsupported ops are never
//! merged.
//!
//! A filetest (the input graph, then the graph the pass leaves after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/cse/equal_adds_merge.ir")]
//! ```

use std::collections::BTreeMap;

use crate::ir::{Graph, NodeId, Op, ValueRef};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct Cse;

/// A key equal for nodes that compute the same value the same way (ops hold floats, so no
/// `Hash`: the `Debug` text of the op, inputs, types, precision and composite is exact and
/// deterministic).
fn key(graph: &Graph, id: NodeId) -> Option<String> {
    let node = graph.node(id);
    let mergeable = !matches!(node.op, Op::Input(_) | Op::Unsupported(_) | Op::AssertMetadata(_))
        && !node.op.is_random()
        && !node.outputs.is_empty();
    let how = (node.precision, node.composite);
    mergeable.then(|| format!("{:?}|{:?}|{:?}|{how:?}", node.op, graph.inputs(id), node.outputs))
}

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn inside_regions(&self) -> bool {
        true
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let mut first: BTreeMap<String, NodeId> = BTreeMap::new();
        let mut merged = 0;
        // In topological order a node's inputs are already merged when its key is taken.
        for id in order {
            let Some(k) = key(graph, id) else { continue };
            match first.get(&k) {
                Some(&kept) => {
                    for slot in 0..graph.node(id).outputs.len() as u16 {
                        graph.replace_uses(ValueRef { node: id, slot }, ValueRef { node: kept, slot });
                    }
                    graph.remove_node(id);
                    merged += 1;
                }
                None => {
                    first.insert(k, id);
                }
            }
        }
        cx.note(merged, "nodes merged into an equal earlier node");
        Ok(if merged > 0 { Changed::Yes } else { Changed::No })
    }
}
