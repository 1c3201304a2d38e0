//! The IR verifier: structural invariants, per-op arity, and every op's type rule
//! (`Op::infer`, its definition's rule) against the types its node declares.
//!
//! Run after import and after every pass. It reports the first problem with the node's name
//! and op, so a broken pass is caught where it broke the graph, not in XLA.

use crate::ir::ops::{Arity, Literal};
use std::collections::BTreeSet;

use thiserror::Error;

use crate::ir::{Dim, Graph, Node, NodeId, Op, TensorType};

/// A graph-level verification failure.
#[derive(Debug, Error, PartialEq)]
#[allow(missing_docs)] // fields are named by the message
pub enum VerifyError {
    /// A node breaks a rule.
    #[error("node `{node}` ({op}): {source}")]
    Node {
        node: String,
        op: String,
        #[source]
        source: NodeError,
    },
    /// The data flow has a cycle through these nodes.
    #[error("the graph has a cycle through {nodes:?}")]
    Cycle { nodes: Vec<String> },
    /// Two nodes share a name.
    #[error("two nodes are named `{0}`")]
    DuplicateName(String),
    /// A graph output refers to a value that does not exist.
    #[error("graph output {index} refers to a value that no node produces")]
    DanglingOutput { index: usize },
    /// A dimension uses a symbol that the graph does not declare.
    #[error("node `{node}` uses undeclared symbol `{symbol}`")]
    UndeclaredSymbol { node: String, symbol: String },
}

/// What is wrong with one node.
#[derive(Debug, Error, PartialEq)]
#[allow(missing_docs)] // variants and fields are named by the message
pub enum NodeError {
    #[error("expected {expected} inputs, found {found}")]
    InputCount { expected: String, found: usize },
    #[error("expected {expected} outputs, found {found}")]
    OutputCount { expected: usize, found: usize },
    #[error("input slot {slot} is fed {count} times")]
    SlotFedTwice { slot: u16, count: usize },
    #[error("input slots are not numbered 0..{count}")]
    SlotGap { count: usize },
    #[error("input {slot} reads output {src_slot} of `{producer}`, which has only {available} outputs")]
    NoSuchOutput { slot: u16, producer: String, src_slot: u16, available: usize },
    #[error("output {slot} is declared {found}, but its operands give {expected}")]
    OutputType { slot: usize, expected: String, found: String },
    #[error("{0}")]
    Shape(String),
    #[error("{0}")]
    Sharding(String),
}

/// Checks every invariant of the graph.
pub fn verify(graph: &Graph) -> Result<(), VerifyError> {
    let order = graph
        .topo_order()
        .map_err(|left| VerifyError::Cycle { nodes: left.iter().map(|&id| graph.node(id).name.clone()).collect() })?;
    let mut names = BTreeSet::new();
    for &id in &order {
        let node = graph.node(id);
        if !names.insert(node.name.as_str()) {
            return Err(VerifyError::DuplicateName(node.name.clone()));
        }
        check_symbols(graph, node)?;
        check_node(graph, id)
            .and_then(|()| check_sharding(graph, node))
            .and_then(|()| check_regions(node))
            .map_err(|source| VerifyError::Node { node: node.name.clone(), op: node.op.name(), source })?;
    }
    for (index, o) in graph.outputs().iter().enumerate() {
        let ok = graph.get(o.value.node).is_some_and(|n| usize::from(o.value.slot) < n.outputs.len());
        if !ok {
            return Err(VerifyError::DanglingOutput { index });
        }
    }
    Ok(())
}

/// Each region of a control-flow op: its signature's shape, then every invariant inside it.
fn check_regions(node: &Node) -> Result<(), NodeError> {
    for region in node.op.regions() {
        region.check_signature().map_err(NodeError::Shape)?;
        verify(&region.0).map_err(|e| NodeError::Shape(format!("in region `{}`: {e}", region.0.name)))?;
    }
    Ok(())
}

fn check_symbols(graph: &Graph, node: &Node) -> Result<(), VerifyError> {
    for ty in &node.outputs {
        for d in &ty.dims {
            if let Dim::Sym(e) = d {
                if let Some(symbol) = e.symbols().into_iter().find(|s| !graph.symbols().contains_key(s)) {
                    return Err(VerifyError::UndeclaredSymbol { node: node.name.clone(), symbol });
                }
            }
        }
    }
    Ok(())
}

/// A set sharding needs the graph's mesh, one entry per dim of the first output, known axes
/// used once, and static dims that divide into equal pieces.
fn check_sharding(graph: &Graph, node: &Node) -> Result<(), NodeError> {
    let Some(sharding) = &node.sharding else { return Ok(()) };
    let mesh =
        graph.mesh().ok_or_else(|| NodeError::Sharding(format!("sharded {sharding}, but the graph has no mesh")))?;
    let ty = node.outputs.first().ok_or_else(|| NodeError::Sharding("sharded, but it has no result".into()))?;
    // Symbolic dims (before specialization) are taken as dividing; `specialize` gives them values.
    let dims: Vec<i64> = ty
        .dims
        .iter()
        .enumerate()
        .map(|(d, dim)| match dim {
            Dim::Static(n) => *n,
            Dim::Sym(_) => sharding.pieces(d, mesh),
        })
        .collect();
    sharding.check(&dims, mesh).map_err(NodeError::Sharding)
}

fn check_node(graph: &Graph, id: NodeId) -> Result<(), NodeError> {
    let node = graph.node(id);
    let edges = graph.input_edges(id);
    for (i, (slot, v)) in edges.iter().enumerate() {
        let count = edges.iter().filter(|(s, _)| s == slot).count();
        if count > 1 {
            return Err(NodeError::SlotFedTwice { slot: *slot, count });
        }
        if usize::from(*slot) != i {
            return Err(NodeError::SlotGap { count: edges.len() });
        }
        let producer = graph.node(v.node);
        if usize::from(v.slot) >= producer.outputs.len() {
            return Err(NodeError::NoSuchOutput {
                slot: *slot,
                producer: producer.name.clone(),
                src_slot: v.slot,
                available: producer.outputs.len(),
            });
        }
    }
    let inputs: Vec<&TensorType> = edges.iter().map(|(_, v)| graph.value_type(*v)).collect();
    check_arity(&node.op, inputs.len(), node.outputs.len())?;
    check_shapes(&node.op, &inputs, &node.outputs)
}

fn check_arity(op: &Op, inputs: usize, outputs: usize) -> Result<(), NodeError> {
    let Arity { inputs: want_in, outputs: want_out } = op.arity();
    match want_in {
        Some(n) if n != inputs => return Err(NodeError::InputCount { expected: n.to_string(), found: inputs }),
        None if inputs == 0 && matches!(op, Op::Cat(_)) => {
            return Err(NodeError::InputCount { expected: "at least 1".into(), found: 0 })
        }
        _ => {}
    }
    match want_out {
        Some(n) if n != outputs => Err(NodeError::OutputCount { expected: n, found: outputs }),
        _ => Ok(()),
    }
}

/// Every output the op's type rule states must be the declared one (`Op::infer`).
fn check_shapes(op: &Op, inputs: &[&TensorType], outputs: &[TensorType]) -> Result<(), NodeError> {
    if let Op::Literal(Literal { values }) = op {
        return check_literal(values.len(), &outputs[0]);
    }
    let expected = op.infer(inputs).map_err(NodeError::Shape)?;
    for (slot, (want, found)) in expected.iter().zip(outputs).enumerate() {
        if !want.admits(found) {
            return Err(NodeError::OutputType { slot, expected: want.to_string(), found: found.to_string() });
        }
    }
    Ok(())
}

fn check_literal(values: usize, out: &TensorType) -> Result<(), NodeError> {
    match out.static_numel() {
        Some(n) if n as usize == values => Ok(()),
        n => Err(NodeError::Shape(format!(
            "{values} values for {} elements",
            n.map_or_else(|| "a dynamic number of".into(), |n| n.to_string())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ops::{Binary, Identity, Mm};
    use crate::ir::{builder::Builder, TensorType};
    use crate::ir::{BinaryOp, DType, Operand};

    fn f32(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, dims)
    }

    #[test]
    fn accepts_well_typed_matmul() {
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[4, 16]));
        let w = b.input("w", f32(&[16, 8]));
        let y = b.op("y", Op::Mm(Mm), &[x, w], f32(&[4, 8]));
        b.output(y);
        assert_eq!(verify(&b.finish()), Ok(()));
    }

    #[test]
    fn rejects_wrong_matmul_shape() {
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[4, 16]));
        let w = b.input("w", f32(&[8, 8]));
        b.op("y", Op::Mm(Mm), &[x, w], f32(&[4, 8]));
        let err = verify(&b.finish()).unwrap_err().to_string();
        assert_eq!(err, "node `y` (mm): contracting dims differ: [4,16] and [8,8]");
    }

    #[test]
    fn rejects_broadcast_mismatch_and_arity() {
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[4, 3]));
        let y = b.input("y", f32(&[4, 2]));
        let add = Op::Binary(Binary { op: BinaryOp::Add, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        b.op("z", add.clone(), &[x, y], f32(&[4, 3]));
        let err = verify(&b.finish()).unwrap_err().to_string();
        assert!(err.contains("do not broadcast"), "{err}");

        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[4, 3]));
        b.op("z", add, &[x], f32(&[4, 3]));
        let err = verify(&b.finish()).unwrap_err().to_string();
        assert_eq!(err, "node `z` (add): expected 2 inputs, found 1");
    }

    #[test]
    fn rejects_duplicate_names_and_undeclared_symbols() {
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[2]));
        b.op("x", Op::Identity(Identity), &[x], f32(&[2]));
        assert_eq!(verify(&b.finish()), Err(VerifyError::DuplicateName("x".into())));

        let mut b = Builder::new("t");
        let ty = TensorType { dtype: DType::F32, dims: vec![Dim::Sym(crate::ir::SymExpr::sym("s0"))] };
        b.input("x", ty);
        let err = verify(&b.finish()).unwrap_err();
        assert_eq!(err, VerifyError::UndeclaredSymbol { node: "x".into(), symbol: "s0".into() });
    }
}
