//! `dce`: dead-code elimination. Removes every node whose values no graph output needs,
//! including weights nothing reads any more (e.g. after a fold). Inputs the caller passes (user
//! inputs, the seed, a bucket's sizes) stay: they are the program's signature.
//!
//! ```text
#![doc = include_str!("../tests/dce/dead_chain_and_weight_removed.ir")]
//! ```

use crate::ir::{Graph, NodeId, Op};
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
        Ok(if removed > 0 { Changed::Yes } else { Changed::No })
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
