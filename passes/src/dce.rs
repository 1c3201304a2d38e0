//! `dce`: dead-code elimination. Removes every node whose values no graph output needs,
//! including weights nothing reads any more (e.g. after a fold). Inputs the caller passes (user
//! inputs, the seed, a bucket's sizes) stay: they are the program's signature.
//!
//! It also narrows `max.dim`/`min.dim` whose indices nobody reads to `amax`/`amin`: the same
//! values from a plain reduce instead of a (value, index) one. That is cheaper, and it avoids a
//! crash of libtpu 0.0.52's fusion on a variadic reduce whose second result is dead (the
//! `max(…).values` of attention with sinks, transformers' HunYuan v4, in a bucketed program).
//!
//! ```text
#![doc = include_str!("../tests/dce/dead_chain_and_weight_removed.ir")]
//! ```

use crate::ir::ops::{ExtremumDim, Reduce};
use crate::ir::{Graph, NodeId, Op, ReduceOp, ValueRef};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn inside_regions(&self) -> bool {
        true
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let removed = remove_dead(graph, &order);
        cx.note(removed, "unused nodes removed");
        let narrowed = order.iter().filter(|&&id| graph.get(id).is_some() && narrow_extremum(graph, id)).count();
        cx.note(narrowed, "max.dim/min.dim without used indices narrowed to amax/amin");
        Ok(if removed + narrowed > 0 { Changed::Yes } else { Changed::No })
    }
}

/// Removes the nodes no output needs (`order`: topological); returns how many.
pub(crate) fn remove_dead(graph: &mut Graph, order: &[NodeId]) -> usize {
    let mut removed = 0;
    // Consumers come later in topological order: sweeping backwards removes whole dead
    // chains in one pass.
    for &id in order.iter().rev() {
        let caller_bound = matches!(&graph.node(id).op, Op::Input(k) if !k.is_weight());
        let dead = !caller_bound && !graph.is_output(id) && graph.users(id).is_empty();
        if dead {
            graph.remove_node(id);
            removed += 1;
        }
    }
    removed
}

/// Turns `max.dim`/`min.dim` node `id` into `amax`/`amin` when nothing reads its indices;
/// true when it did.
fn narrow_extremum(graph: &mut Graph, id: NodeId) -> bool {
    let Op::ExtremumDim(ExtremumDim { max, dim, keepdim }) = graph.node(id).op else { return false };
    let indices = ValueRef { node: id, slot: 1 };
    let read =
        graph.users(id).iter().any(|&(_, _, slot)| slot == 1) || graph.outputs().iter().any(|o| o.value == indices);
    if read {
        return false;
    }
    let op = if max { ReduceOp::Max } else { ReduceOp::Min };
    let node = graph.node_mut(id);
    node.op = Op::Reduce(Reduce { op, dims: vec![dim], keepdim, dtype: None });
    node.outputs.truncate(1);
    true
}
