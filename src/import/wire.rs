//! Wiring several IR nodes for one FX node: the decompositions of [`super::ops::decomposition`].
//!
//! A decomposition reads the node's arguments (as a translation does) and returns a [`Recipe`];
//! once the tensors it read are resolved, the recipe adds the nodes through a [`Wire`] and
//! returns one value per FX result. Every node it adds is named `<node>__<k>_<op>`, carries the
//! FX node's origin (so errors name the user's op) and gets its type from the op's type rule,
//! or states one the rule agrees with; the results must have the types the archive records.

use std::collections::BTreeSet;
use torchtpu_passes::ir::ops::{Convert, Literal};

use torchtpu_passes::ir::ops::Expected;
use torchtpu_passes::ir::{DType, Graph, Node, Op, Origin, Scalar, TensorType, ValueRef};
use torchtpu_passes::{bug, Fail};

use super::args::Args;

/// Adds the nodes of one decomposition; see the module docs.
pub(super) type Recipe = Box<dyn FnOnce(&mut Wire<'_>) -> Result<Vec<ValueRef>, Fail>>;

/// Reads a node's arguments into a recipe.
pub(super) type Decomposition = fn(&mut Args<'_>) -> Result<Recipe, Fail>;

/// The graph under construction, seen from one FX node.
pub(super) struct Wire<'a> {
    pub(super) graph: &'a mut Graph,
    pub(super) names: &'a mut BTreeSet<String>,
    pub(super) node: &'a str,
    pub(super) origin: &'a Origin,
    pub(super) count: usize,
    /// The tensors the node reads, in the order its arguments were read.
    pub inputs: Vec<ValueRef>,
    /// The node's results as the archive types them.
    pub outputs: Vec<TensorType>,
}

impl Wire<'_> {
    /// The type of a value.
    pub(super) fn ty(&self, v: ValueRef) -> TensorType {
        self.graph.value_type(v).clone()
    }

    /// Adds a one-result op typed by its rule, which must tell the whole type.
    pub(super) fn op(&mut self, op: Op, inputs: &[ValueRef]) -> Result<ValueRef, Fail> {
        let expected = self.rule(&op, inputs)?;
        let ty = match expected.first() {
            Some(e) if !e.any_rank && e.dtype.is_some() && e.dims.iter().all(Option::is_some) => TensorType {
                dtype: e.dtype.expect("checked"),
                dims: e.dims.iter().map(|d| d.clone().expect("checked")).collect(),
            },
            _ => return Err(bug(format!("the type of `{}` is not determined by its operands", op.name()))),
        };
        Ok(self.add(op, inputs, vec![ty])?[0])
    }

    /// Adds an op with the given result types, which its rule must admit.
    pub(super) fn typed(&mut self, op: Op, inputs: &[ValueRef], types: Vec<TensorType>) -> Result<Vec<ValueRef>, Fail> {
        let expected = self.rule(&op, inputs)?;
        if let Some((e, t)) = expected.iter().zip(&types).find(|(e, t)| !e.admits(t)) {
            return Err(bug(format!("`{}` gives {e}, not {t}", op.name())));
        }
        self.add(op, inputs, types)
    }

    /// `v` converted to `dtype` (itself when it has that dtype).
    pub(super) fn convert(&mut self, v: ValueRef, dtype: DType) -> Result<ValueRef, Fail> {
        let ty = self.ty(v);
        if ty.dtype == dtype {
            return Ok(v);
        }
        Ok(self.typed(Op::Convert(Convert), &[v], vec![TensorType { dtype, ..ty }])?[0])
    }

    /// A constant tensor of `ty` holding `values` row-major.
    pub(super) fn literal(&mut self, values: Vec<Scalar>, ty: TensorType) -> Result<ValueRef, Fail> {
        Ok(self.add(Op::Literal(Literal { values }), &[], vec![ty])?[0])
    }

    fn rule(&self, op: &Op, inputs: &[ValueRef]) -> Result<Vec<Expected>, Fail> {
        let n_in = op.arity().inputs;
        if n_in.is_some_and(|n| n != inputs.len()) {
            return Err(bug(format!("`{}` given {} operands", op.name(), inputs.len())));
        }
        let types: Vec<&TensorType> = inputs.iter().map(|&v| self.graph.value_type(v)).collect();
        Ok(op.infer(&types)?)
    }

    fn add(&mut self, op: Op, inputs: &[ValueRef], types: Vec<TensorType>) -> Result<Vec<ValueRef>, Fail> {
        let name = format!("{}__{}_{}", self.node, self.count, op.name());
        self.count += 1;
        if !self.names.insert(name.clone()) {
            return Err(format!("another node is named `{name}`").into());
        }
        let results = types.len();
        let mut node = Node::new(name, op, types);
        node.origin =
            Origin { output_names: Vec::new(), derived_from: Some(self.node.to_string()), ..self.origin.clone() };
        let id = self.graph.add_op(node, inputs);
        Ok((0..results).map(|slot| ValueRef { node: id, slot: slot as u16 }).collect())
    }
}
