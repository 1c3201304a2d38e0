//! What the builder does after the nodes: the graph's outputs from the output specs, checked
//! against the graph's own output list, and the symbols with their bounds, checked (those only
//! dead code uses dropped with it).

use std::collections::BTreeSet;
use torchtpu_passes::ir::ops::ScalarTensor;

use torchtpu_passes::ir::{Bounds, DType, Graph, Node, NodeId, Op, OutputKind, Scalar, TensorType, ValueRef};
use torchtpu_passes::specialize::node_symbols;

use super::{sym_name, Builder};
use crate::import::schema::{Argument, OutputSpec, SymIntArgument};
use crate::import::{shown, ImportError};

impl Builder<'_> {
    /// The graph's outputs, one per output spec and in its order, each the value the graph's
    /// own output list returns at that position.
    pub(super) fn outputs(&mut self) -> Result<(), ImportError> {
        let specs = &self.ep.graph_module.signature.output_specs;
        let sig = |reason: String| ImportError::Signature { reason };
        // The graph's own output list and the specs must describe the same values: a graph that
        // drops an output the specs keep (or adds one) has lost its meaning.
        let returned = &self.ep.graph_module.graph.outputs;
        let mut users = 0;
        for (position, spec) in specs.iter().enumerate() {
            let (arg, kind) = match spec {
                OutputSpec::UserOutput { arg } => {
                    users += 1;
                    (arg.clone(), OutputKind::User { index: users - 1 })
                }
                OutputSpec::LossOutput { arg } => (Argument::AsTensor(arg.clone()), OutputKind::Loss),
                OutputSpec::BufferMutation { arg, buffer_name } => {
                    (Argument::AsTensor(arg.clone()), OutputKind::BufferMutation { fqn: buffer_name.clone() })
                }
                OutputSpec::ParameterMutation { arg, parameter_name } => {
                    (Argument::AsTensor(arg.clone()), OutputKind::ParameterMutation { fqn: parameter_name.clone() })
                }
                OutputSpec::UserInputMutation { arg, user_input_name } => {
                    (Argument::AsTensor(arg.clone()), OutputKind::UserInputMutation { input: user_input_name.clone() })
                }
                OutputSpec::GradientToParameter { arg, parameter_name } => {
                    (Argument::AsTensor(arg.clone()), OutputKind::GradientToParameter { fqn: parameter_name.clone() })
                }
                OutputSpec::GradientToUserInput { arg, user_input_name } => (
                    Argument::AsTensor(arg.clone()),
                    OutputKind::GradientToUserInput { input: user_input_name.clone() },
                ),
                OutputSpec::Token(_) => return Err(sig("effect-token outputs are not supported".into())),
            };
            // A symbolic int returned to the caller is a 0-d int64 value.
            let name = match &arg {
                Argument::AsTensor(t) => t.name.clone(),
                Argument::AsSymInt(SymIntArgument::AsName(n)) => n.clone(),
                // A float computed from sizes is a 0-d f32 value; one computed from data is the
                // output of an unsupported node, which `check` reports.
                Argument::AsSymFloat(v) => sym_name(v).map_err(sig)?,
                Argument::AsSymBool(_) => {
                    return Err(sig("an output is a Python bool computed at run time (from tensor data with \
                         `item()`, or from symbolic sizes), which a compiled program cannot return; return a tensor \
                         instead"
                        .into()))
                }
                Argument::AsInt(i) => self.constant_output(Scalar::Int(*i), DType::I64, position).map_err(sig)?,
                Argument::AsBool(b) => self.constant_output(Scalar::Bool(*b), DType::Bool, position).map_err(sig)?,
                Argument::AsFloat(f) => self.constant_output(Scalar::Float(f.0), DType::F32, position).map_err(sig)?,
                _ => return Err(sig(format!("outputs of kind `{}` are not supported (only tensors)", arg.kind()))),
            };
            let value = self
                .values
                .get(&name)
                .copied()
                .ok_or_else(|| sig(format!("output `{}` is produced by no node or input", shown(&name))))?;
            if let Some(other) = returned.get(position).and_then(argument_name).filter(|r| *r != name) {
                return Err(sig(format!(
                    "output {position} of the graph is `{}`, but its output spec names `{}`",
                    shown(&other),
                    shown(&name)
                )));
            }
            self.graph.add_output(value, kind);
        }
        if returned.len() != specs.len() {
            return Err(sig(format!(
                "the graph returns {} value(s), but its output specs describe {}",
                returned.len(),
                specs.len()
            )));
        }
        Ok(())
    }

    /// A Python `int`, `bool` or `float` that the program returns, fixed at export (computed
    /// from static sizes): a node making it a 0-d tensor (i64, bool, or f32, as TPUs have no
    /// f64), named `output_<position>_constant`; returns that name.
    fn constant_output(&mut self, value: Scalar, dtype: DType, position: usize) -> Result<String, String> {
        let name = format!("output_{position}_constant");
        if self.values.contains_key(&name) {
            return Err(format!("output {position} is a constant, but a graph value is already named `{name}`"));
        }
        let node = Node::new(name.clone(), Op::ScalarTensor(ScalarTensor { value }), [TensorType::new(dtype, &[])]);
        let id = self.graph.add_op(node, &[]);
        self.values.insert(name.clone(), ValueRef { node: id, slot: 0 });
        Ok(name)
    }

    /// Symbols only dead code uses — `item()` values the program asserts on (`_assert_scalar`
    /// from a `torch._check`) and never computes with — are dropped with that code; otherwise
    /// they would be sizes to compile buckets for. A graph without such symbols is left whole.
    pub(super) fn drop_dead_symbols(&mut self) {
        let graph = &self.graph;
        let mut live: BTreeSet<NodeId> = graph.graph_inputs().iter().copied().collect();
        let mut stack: Vec<NodeId> = graph.outputs().iter().map(|o| o.value.node).collect();
        while let Some(id) = stack.pop() {
            if live.insert(id) {
                stack.extend(graph.inputs(id).iter().map(|v| v.node));
            }
        }
        let used: BTreeSet<String> = live.iter().flat_map(|&id| symbols_of(graph, id)).collect();
        let unused: Vec<String> = self.symbols.iter().filter(|s| !used.contains(*s)).cloned().collect();
        if unused.is_empty() {
            return;
        }
        let dead: Vec<NodeId> = graph.node_ids().filter(|id| !live.contains(id)).collect();
        for id in dead {
            self.graph.remove_node(id);
        }
        for s in unused {
            self.symbols.remove(&s);
        }
    }

    /// Declares every symbol seen, with its `range_constraints` bounds (unbounded if absent).
    /// Every symbol is a size: a bound that is negative, or a minimum above the maximum, is
    /// refused rather than believed.
    pub(super) fn declare_symbols(&mut self) -> Result<(), ImportError> {
        for s in &self.symbols {
            let mut bounds = self
                .ep
                .range_constraints
                .get(s)
                .map_or(Bounds { min: None, max: None }, |rc| Bounds { min: rc.min_val, max: rc.max_val });
            if bounds.max.is_none() {
                bounds.max = self.bound_by_equality(s);
            }
            let refuse = |reason: String| ImportError::RangeConstraint { symbol: shown(s), reason };
            for (which, bound) in [("minimum", bounds.min), ("maximum", bounds.max)] {
                if let Some(v) = bound.filter(|v| *v < 0) {
                    return Err(refuse(format!("its {which} is {v}, but a size cannot be negative")));
                }
            }
            if let (Some(min), Some(max)) = (bounds.min, bounds.max) {
                if min > max {
                    return Err(refuse(format!("its minimum {min} is above its maximum {max}")));
                }
            }
            self.graph.add_symbol(s.clone(), bounds);
        }
        Ok(())
    }
}

/// The symbols node `id` uses, in its types, attributes and regions.
fn symbols_of(graph: &Graph, id: NodeId) -> BTreeSet<String> {
    let node = graph.node(id);
    let mut symbols = node_symbols(node);
    for region in node.op.regions() {
        for inner in region.0.node_ids() {
            symbols.extend(symbols_of(&region.0, inner));
        }
    }
    symbols
}

/// The value an argument names, when it names one (a tensor or a symbolic int).
fn argument_name(arg: &Argument) -> Option<String> {
    match arg {
        Argument::AsTensor(t) => Some(t.name.clone()),
        Argument::AsSymInt(SymIntArgument::AsName(n)) => Some(n.clone()),
        _ => None,
    }
}
