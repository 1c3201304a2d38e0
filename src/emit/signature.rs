//! The attributes of `@main`'s arguments and results.
//!
//! - On a mesh, every argument's and result's Shardy sharding (see `sharding`).
//! - `tf.aliasing_output = j` on a weight whose new value the program returns as result `j` (a
//!   mutated buffer or parameter: a KV cache, BatchNorm statistics), when the two have the same
//!   type. XLA then writes the result into the weight's memory when the caller donates it,
//!   instead of a fresh copy of the whole weight each call. On a mesh, such a result is split as
//!   its weight is (a KV cache split along its heads stays split: each device keeps its piece),
//!   every other result is whole.

use torchtpu_passes::ir::{Graph, GraphOutput, InputKind, Op, OutputKind};

use super::sharding;

/// `(arg_attrs, res_attrs)` of `@main`, as attribute text; `None` for what has none.
pub(super) fn attributes(graph: &Graph) -> (Option<String>, Option<String>) {
    let aliases = aliases(graph);
    let mesh = graph.mesh().is_some();
    if !mesh && aliases.iter().all(Option::is_none) {
        return (None, None);
    }
    let args = graph.graph_inputs().iter().zip(&aliases).map(|(&id, alias)| {
        let node = graph.node(id);
        let mut entries = Vec::new();
        if mesh {
            entries.push(sharding::entry(node.sharding.as_ref(), node.outputs[0].rank()));
        }
        if let Some(j) = alias {
            entries.push(format!("tf.aliasing_output = {j} : i32"));
        }
        dictionary(&entries)
    });
    let results = graph.outputs().iter().map(|o| {
        let weight = updated_weight(graph, o).and_then(|i| graph.node(graph.graph_inputs()[i]).sharding.as_ref());
        dictionary(&[sharding::entry(weight, graph.value_type(o.value).rank())])
    });
    (Some(list(args)), mesh.then(|| list(results)))
}

/// Per argument of `@main`, the result that carries its new value in its place, if any.
fn aliases(graph: &Graph) -> Vec<Option<usize>> {
    let inputs = graph.graph_inputs();
    let mut aliases = vec![None; inputs.len()];
    for (j, out) in graph.outputs().iter().enumerate() {
        let Some(i) = updated_weight(graph, out) else { continue };
        if aliases[i].is_none() && graph.node(inputs[i]).outputs[0] == *graph.value_type(out.value) {
            aliases[i] = Some(j);
        }
    }
    aliases
}

/// The argument (its index among the graph's inputs) of the weight whose new value `out` is.
fn updated_weight(graph: &Graph, out: &GraphOutput) -> Option<usize> {
    let (OutputKind::BufferMutation { fqn } | OutputKind::ParameterMutation { fqn }) = &out.kind else {
        return None;
    };
    graph.graph_inputs().iter().position(|&id| weight_name(graph, id) == Some(fqn))
}

/// The state-dict name of a parameter or buffer input.
fn weight_name(graph: &Graph, id: torchtpu_passes::ir::NodeId) -> Option<&String> {
    match &graph.node(id).op {
        Op::Input(InputKind::Parameter { fqn } | InputKind::Buffer { fqn, .. }) => Some(fqn),
        _ => None,
    }
}

fn dictionary(entries: &[String]) -> String {
    format!("{{{}}}", entries.join(", "))
}

fn list(items: impl Iterator<Item = String>) -> String {
    format!("[{}]", items.collect::<Vec<_>>().join(", "))
}
