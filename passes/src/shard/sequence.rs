//! The `sequence` style of plan files (PyTorch's `SequenceParallel`): a module between
//! tensor-parallel blocks (a norm, a dropout) runs on activations split along the sequence
//! (dim 1) over `tp`, so that each device normalizes a part of the tokens instead of all of them.
//! Each value the module gives to the rest of the graph gets a constraint splitting dim 1 along
//! `tp` (the other dims open), and the partitioner gathers the sequence where a matmul needs it
//! whole. Any placement the partitioner chooses computes the same numbers: the constraints move
//! work, never change it. What it does not do yet, on the CPU plugin 0.11.2 and libtpu 0.0.52
//! alike: turn the all-reduce before such a module into a reduce-scatter (the tiny Llama with
//! its norms `sequence` on `tp=2` keeps its 5 all-reduces and gathers 6–7 times instead of
//! once), so today the style saves norm work per device, not communication.

use crate::ir::{Graph, NodeId, Sharding};

use super::plan::{covers, ShardPlan, Style};
use super::TENSOR;

/// The sequence dim of activations `[batch, sequence, …]`.
const SEQUENCE_DIM: usize = 1;

/// Constrains the outputs of every module the plan calls `sequence` to be split along the
/// sequence over `tp` devices; the number constrained, or why it cannot be done.
pub(super) fn constrain(graph: &mut Graph, plan: &ShardPlan, tp: i64) -> Result<usize, String> {
    let patterns: Vec<&String> = plan.modules.iter().filter(|(_, &s)| s == Style::Sequence).map(|(p, _)| p).collect();
    let mut outputs: Vec<(NodeId, String)> = Vec::new();
    for pattern in &patterns {
        let found = module_outputs(graph, pattern);
        if found.is_empty() {
            return Err(format!("plan: `{pattern}` (`sequence`) names no module of the graph"));
        }
        outputs.extend(found);
    }
    for &(id, ref module) in &outputs {
        let node = graph.node(id);
        let dims = node.outputs[0].static_dims().unwrap_or_default();
        let Some(&len) = dims.get(SEQUENCE_DIM).filter(|_| dims.len() >= 3) else {
            return Err(format!(
                "plan: module `{module}` is `sequence`, but its output `{}` ({:?}) has no sequence dim (dim 1 of \
                 [batch, sequence, …])",
                node.name, dims
            ));
        };
        if len % tp != 0 {
            return Err(format!(
                "plan: module `{module}` is `sequence`, but the sequence of its output `{}` ({len}, dim 1) does not \
                 divide along mesh axis `tp` ({tp} devices)",
                node.name
            ));
        }
        let rank = dims.len();
        graph.node_mut(id).sharding = Some(Sharding::split(rank, SEQUENCE_DIM, TENSOR).open_but(&[]));
    }
    Ok(outputs.len())
}

/// The nodes inside a module `pattern` covers whose single result is read outside it, with the
/// module's path.
fn module_outputs(graph: &Graph, pattern: &str) -> Vec<(NodeId, String)> {
    let depth = pattern.split('.').count();
    // The module the pattern names: the innermost module's path cut to the pattern's length.
    let named = |id: NodeId| {
        let path = graph.node(id).origin.module_path.last().filter(|m| covers(pattern, m))?;
        Some(path.split('.').take(depth).collect::<Vec<_>>().join("."))
    };
    let mut found = Vec::new();
    for id in graph.topo_order().unwrap_or_default() {
        let Some(module) = named(id) else { continue };
        let node = graph.node(id);
        if node.outputs.len() != 1 || node.sharding.is_some() {
            continue;
        }
        let inside = |user: NodeId| graph.node(user).origin.module_path.iter().any(|m| m == &module);
        let read_outside = graph.users(id).iter().any(|&(u, _, _)| !inside(u)) || graph.is_output(id);
        if read_outside {
            found.push((id, module));
        }
    }
    found
}
