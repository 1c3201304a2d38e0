//! A small builder for tests and passes, in the style of tract's `wire_node`.

use super::graph::{Graph, OutputKind};
use super::node::{Node, ValueRef};
use super::op::InputKind;
use super::ops::Op;
use super::types::TensorType;

/// Builds a graph node by node.
pub struct Builder {
    graph: Graph,
    users: usize,
    outputs: usize,
}

impl Builder {
    /// Starts an empty graph.
    pub fn new(name: &str) -> Builder {
        Builder { graph: Graph::new(name), users: 0, outputs: 0 }
    }

    /// Adds the next user input.
    pub fn input(&mut self, name: &str, ty: TensorType) -> ValueRef {
        let op = Op::Input(InputKind::User { index: self.users });
        self.users += 1;
        let node = self.graph.add_input(Node::new(name, op, [ty]));
        ValueRef { node, slot: 0 }
    }

    /// Adds a parameter input.
    pub fn param(&mut self, name: &str, fqn: &str, ty: TensorType) -> ValueRef {
        let op = Op::Input(InputKind::Parameter { fqn: fqn.to_string() });
        let node = self.graph.add_input(Node::new(name, op, [ty]));
        ValueRef { node, slot: 0 }
    }

    /// Adds a single-output op and returns its value.
    pub fn op(&mut self, name: &str, op: Op, inputs: &[ValueRef], ty: TensorType) -> ValueRef {
        let node = self.graph.add_op(Node::new(name, op, [ty]), inputs);
        ValueRef { node, slot: 0 }
    }

    /// Marks `value` as the next user output.
    pub fn output(&mut self, value: ValueRef) {
        self.graph.add_output(value, OutputKind::User { index: self.outputs });
        self.outputs += 1;
    }

    /// Mutable access to the graph under construction (e.g. to declare symbols).
    pub fn graph_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }

    /// Returns the graph.
    pub fn finish(self) -> Graph {
        self.graph
    }
}
