//! `precision`: per-node precision of contractions (`mm`, `bmm`, `addmm`, convolutions and
//! their backward). Each `--precision-override PATTERN=LEVEL` sets LEVEL on the contractions
//! whose node name or module path (from the export's `nn_module_stack`, e.g.
//! `model.lm_head`) contains PATTERN; the last matching override wins. The others keep the
//! program-wide `--precision`, which the emitter applies.
//!
//! With `--precision-override lm_head=highest`, matching a node name (filetests have no module
//! paths):
//!
//! ```text
#![doc = include_str!("../tests/precision/override_sets_matching_contraction.ir")]
//! ```

use crate::ir::ops::{Bmm, Mm};
use crate::ir::{Graph, Node, Op, Precision};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct PrecisionPass {
    /// `(pattern, level)` in command-line order.
    pub overrides: Vec<(String, Precision)>,
}

fn is_contraction(op: &Op) -> bool {
    matches!(op, Op::Mm(Mm) | Op::Bmm(Bmm) | Op::Addmm(_) | Op::Convolution(_) | Op::ConvolutionBackward(_))
}

fn matches(node: &Node, pattern: &str) -> bool {
    node.name.contains(pattern) || node.origin.module_path.iter().any(|m| m.contains(pattern))
}

impl Pass for PrecisionPass {
    fn name(&self) -> &'static str {
        "precision"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let ids: Vec<_> = graph.node_ids().collect();
        let mut counts = vec![0usize; self.overrides.len()];
        for id in ids {
            let node = graph.node(id);
            if !is_contraction(&node.op) {
                continue;
            }
            let hit = self.overrides.iter().enumerate().rev().find(|(_, (pattern, _))| matches(node, pattern));
            if let Some((i, &(_, level))) = hit {
                graph.node_mut(id).precision = Some(level);
                counts[i] += 1;
            }
        }
        for ((pattern, level), n) in self.overrides.iter().zip(&counts) {
            cx.note(*n, &format!("contractions set to {} by `{pattern}`", level.name()));
        }
        Ok(if counts.iter().any(|&n| n > 0) { Changed::Yes } else { Changed::No })
    }
}
