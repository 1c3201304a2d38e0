//! The graph container: the only module that touches petgraph.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use petgraph::stable_graph::StableDiGraph;
use petgraph::visit::EdgeRef;
use petgraph::Direction;

use super::node::{Edge, Node, NodeId, ValueRef};
use super::types::{Bounds, TensorType};

/// What a graph output is, from the export's output specs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // fields: the state-dict name or user-input name concerned
pub enum OutputKind {
    /// The `index`-th value returned to the caller.
    User { index: usize },
    /// The new value of a mutated buffer.
    BufferMutation { fqn: String },
    /// The new value of a mutated parameter.
    ParameterMutation { fqn: String },
    /// The new value of a mutated user input.
    UserInputMutation { input: String },
    /// A training loss.
    Loss,
    /// A gradient of a parameter.
    GradientToParameter { fqn: String },
    /// A gradient of a user input.
    GradientToUserInput { input: String },
    /// The real value of a size the program computes from data (`nonzero`'s count, an
    /// `item()`), an `i64[]` after every other output: what the caller cuts outputs of that size
    /// with (and checks against the symbol's range).
    Size { symbol: String },
}

/// One output of the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphOutput {
    /// The value returned.
    pub value: ValueRef,
    /// Its role.
    pub kind: OutputKind,
}

/// A data-flow graph of [`Node`]s. Invariants (checked by `verify`): acyclic, every input
/// slot of a node has exactly one producer, slots are numbered densely from 0.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Display name, usually the model's.
    pub name: String,
    g: StableDiGraph<Node, Edge>,
    inputs: Vec<NodeId>,
    outputs: Vec<GraphOutput>,
    symbols: BTreeMap<String, Bounds>,
    /// The devices the program is split over (`--mesh`); `None`: one device.
    mesh: Option<super::sharding::Mesh>,
}

impl Graph {
    /// The device mesh the program is split over, if any.
    pub fn mesh(&self) -> Option<&super::sharding::Mesh> {
        self.mesh.as_ref()
    }

    /// Sets (or clears) the device mesh.
    pub fn set_mesh(&mut self, mesh: Option<super::sharding::Mesh>) {
        self.mesh = mesh;
    }

    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph { name: name.into(), ..Graph::default() }
    }

    /// Adds a node with no inputs yet.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        NodeId(self.g.add_node(node))
    }

    /// The type of a value: output `v.slot` of node `v.node`.
    pub fn value_type(&self, v: ValueRef) -> &TensorType {
        &self.node(v.node).outputs[usize::from(v.slot)]
    }

    /// The name the exported program gives a value: the FX name of that output of a
    /// multi-output node, else the node's name.
    pub fn value_name(&self, v: ValueRef) -> &str {
        let node = self.node(v.node);
        node.origin.output_names.get(usize::from(v.slot)).unwrap_or(&node.name)
    }

    /// Adds a node and wires `inputs` to its slots 0.., in order.
    pub fn add_op(&mut self, node: Node, inputs: &[ValueRef]) -> NodeId {
        let id = self.add_node(node);
        for (slot, &v) in inputs.iter().enumerate() {
            self.connect(v, id, slot_u16(slot));
        }
        id
    }

    /// Adds a node and registers it as the next graph input.
    pub fn add_input(&mut self, node: Node) -> NodeId {
        let id = self.add_node(node);
        self.inputs.push(id);
        id
    }

    /// Adds a weight input just before the first input the caller binds (user inputs, seed),
    /// so that weights stay first in calling order.
    pub fn add_weight_input(&mut self, node: Node) -> NodeId {
        let at = self
            .inputs
            .iter()
            .position(|&i| matches!(&self.g[i.0].op, super::ops::Op::Input(k) if !k.is_weight()))
            .unwrap_or(self.inputs.len());
        let id = self.add_node(node);
        self.inputs.insert(at, id);
        id
    }

    /// Wires `src` to input slot `dst_slot` of `dst`.
    pub fn connect(&mut self, src: ValueRef, dst: NodeId, dst_slot: u16) {
        self.g.add_edge(src.node.0, dst.0, Edge { src_slot: src.slot, dst_slot });
    }

    /// Removes a node and every edge touching it.
    pub fn remove_node(&mut self, id: NodeId) -> Option<Node> {
        self.inputs.retain(|&i| i != id);
        self.g.remove_node(id.0)
    }

    /// Makes every consumer of `old` (nodes and graph outputs) read `new` instead.
    pub fn replace_uses(&mut self, old: ValueRef, new: ValueRef) {
        let edges: Vec<_> = self
            .g
            .edges_directed(old.node.0, Direction::Outgoing)
            .filter(|e| e.weight().src_slot == old.slot)
            .map(|e| (e.id(), NodeId(e.target()), e.weight().dst_slot))
            .collect();
        for (edge, user, dst_slot) in edges {
            self.g.remove_edge(edge);
            self.connect(new, user, dst_slot);
        }
        self.redirect_outputs(old, new);
    }

    /// Makes the graph outputs that return `old` return `new` (node inputs are unchanged).
    pub fn redirect_outputs(&mut self, old: ValueRef, new: ValueRef) {
        for o in &mut self.outputs {
            if o.value == old {
                o.value = new;
            }
        }
    }

    /// Removes every input edge of `id` (e.g. when it becomes a constant).
    pub fn detach_inputs(&mut self, id: NodeId) {
        let edges: Vec<_> = self.g.edges_directed(id.0, Direction::Incoming).map(|e| e.id()).collect();
        for e in edges {
            self.g.remove_edge(e);
        }
    }

    /// Makes input slot `slot` of `dst` read `value`.
    pub fn set_input(&mut self, dst: NodeId, slot: u16, value: ValueRef) {
        let old: Vec<_> = self
            .g
            .edges_directed(dst.0, Direction::Incoming)
            .filter(|e| e.weight().dst_slot == slot)
            .map(|e| e.id())
            .collect();
        for e in old {
            self.g.remove_edge(e);
        }
        self.connect(value, dst, slot);
    }

    /// True when a graph output reads a value of `id`.
    pub fn is_output(&self, id: NodeId) -> bool {
        self.outputs.iter().any(|o| o.value.node == id)
    }

    /// The node, if it exists.
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.g.node_weight(id.0)
    }

    /// The node. Panics on a removed id, which is an internal invariant violation.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[id.0]
    }

    /// Mutable access to a node.
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.g[id.0]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.g.node_count()
    }

    /// True when the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.g.node_count() == 0
    }

    /// All node ids in index order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.g.node_indices().map(NodeId)
    }

    /// Incoming edges of `id` as `(dst_slot, producer value)`, sorted by slot (petgraph itself
    /// keeps no order). A verified graph has exactly one entry per slot.
    pub fn input_edges(&self, id: NodeId) -> Vec<(u16, ValueRef)> {
        let mut v: Vec<(u16, ValueRef)> = self
            .g
            .edges_directed(id.0, Direction::Incoming)
            .map(|e| {
                let w = e.weight();
                (w.dst_slot, ValueRef { node: NodeId(e.source()), slot: w.src_slot })
            })
            .collect();
        v.sort();
        v
    }

    /// The values feeding `id`, in slot order.
    pub fn inputs(&self, id: NodeId) -> Vec<ValueRef> {
        self.input_edges(id).into_iter().map(|(_, v)| v).collect()
    }

    /// Consumers of `id` as `(consumer, its input slot, our output slot)`, sorted.
    pub fn users(&self, id: NodeId) -> Vec<(NodeId, u16, u16)> {
        let mut v: Vec<_> = self
            .g
            .edges_directed(id.0, Direction::Outgoing)
            .map(|e| (NodeId(e.target()), e.weight().dst_slot, e.weight().src_slot))
            .collect();
        v.sort();
        v
    }

    /// Graph inputs in calling order (parameters, buffers, constants, then user inputs).
    pub fn graph_inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    /// Graph outputs in calling order.
    pub fn outputs(&self) -> &[GraphOutput] {
        &self.outputs
    }

    /// Appends a graph output.
    pub fn add_output(&mut self, value: ValueRef, kind: OutputKind) {
        self.outputs.push(GraphOutput { value, kind });
    }

    /// Symbols with their bounds, by name.
    pub fn symbols(&self) -> &BTreeMap<String, Bounds> {
        &self.symbols
    }

    /// Removes every symbol (after specialization no dim refers to one).
    pub fn clear_symbols(&mut self) {
        self.symbols.clear();
    }

    /// Declares a symbol.
    pub fn add_symbol(&mut self, name: impl Into<String>, bounds: Bounds) {
        self.symbols.insert(name.into(), bounds);
    }

    /// A deterministic topological order: Kahn's algorithm, ties broken by smallest `NodeId`.
    /// Returns `Err` with the nodes left over when the graph has a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, Vec<NodeId>> {
        let mut indegree: BTreeMap<NodeId, usize> = BTreeMap::new();
        for id in self.node_ids() {
            let n = self.g.edges_directed(id.0, Direction::Incoming).count();
            indegree.insert(id, n);
        }
        let mut ready: BinaryHeap<Reverse<NodeId>> =
            indegree.iter().filter(|(_, &d)| d == 0).map(|(&id, _)| Reverse(id)).collect();
        let mut order = Vec::with_capacity(indegree.len());
        while let Some(Reverse(id)) = ready.pop() {
            order.push(id);
            for e in self.g.edges_directed(id.0, Direction::Outgoing) {
                let t = NodeId(e.target());
                if let Some(d) = indegree.get_mut(&t) {
                    *d -= 1;
                    if *d == 0 {
                        ready.push(Reverse(t));
                    }
                }
            }
        }
        if order.len() == indegree.len() {
            Ok(order)
        } else {
            let done: std::collections::BTreeSet<NodeId> = order.into_iter().collect();
            Err(indegree.keys().filter(|id| !done.contains(id)).copied().collect())
        }
    }
}

/// The most tensor operands one node can have (slot numbers are `u16`). The importer refuses
/// larger nodes; beyond it, a slot number is an internal invariant violation.
pub const MAX_OPERANDS: usize = u16::MAX as usize + 1;

/// Slot numbers are `u16`; more than [`MAX_OPERANDS`] operands is an internal invariant violation.
pub(crate) fn slot_u16(slot: usize) -> u16 {
    u16::try_from(slot).expect("more than 65535 operands on one node")
}
