//! Higher-order ops: `cond`, `while_loop`, `scan` and `map_impl` become control-flow ops whose
//! regions are the subgraphs the archive holds as `as_graph` arguments, each built like the
//! program's own graph (its inputs are the region's inputs, in order). Regions nest at most
//! `MAX_REGION_DEPTH` deep; random ops inside one are refused (the random state is threaded
//! through the program in order, which a branch or a loop body would break).

use std::collections::{BTreeMap, BTreeSet};

use torchtpu_passes::ir::ops::{Cond, Region, Scan, WhileLoop, MAX_REGION_DEPTH};
use torchtpu_passes::ir::{Graph, InputKind, Node, Op, OutputKind, ValueRef};

use super::Builder;
use crate::import::ops::Flow;
use crate::import::schema::{self, Argument, NamedArgument};
use crate::import::shown;

/// A subgraph argument as the archive writes it.
#[derive(serde::Deserialize)]
struct GraphArgument {
    name: String,
    graph: schema::Graph,
}

impl Builder<'_> {
    /// The control-flow op of a higher-order node and the values it reads, in slot order.
    pub(super) fn higher_order(&mut self, node: &schema::Node, flow: Flow) -> Result<(Op, Vec<ValueRef>), String> {
        let args: Vec<&Argument> = node.inputs.iter().map(|a: &NamedArgument| &a.arg).collect();
        let wrong = || format!("arguments of unexpected kinds {}", kinds(&args));
        match (flow, args.as_slice()) {
            (Flow::Cond, [pred, then, otherwise, operands]) => {
                let mut values = vec![self.predicate(pred)?];
                values.extend(self.tensors(operands)?);
                let op = Cond { then: self.region(then)?, otherwise: self.region(otherwise)? };
                Ok((Op::Cond(op), values))
            }
            (Flow::WhileLoop, [cond, body, carried, extra]) => {
                let mut values = self.tensors(carried)?;
                let carried = values.len();
                values.extend(self.tensors(extra)?);
                Ok((Op::WhileLoop(WhileLoop { carried, cond: self.region(cond)?, body: self.region(body)? }), values))
            }
            (Flow::Scan, [body, init, xs, extra]) => {
                let mut values = self.tensors(init)?;
                let carried = values.len();
                let scanned = self.tensors(xs)?;
                let count = scanned.len();
                values.extend(scanned);
                values.extend(self.tensors(extra)?);
                Ok((Op::Scan(Scan { carried, scanned: count, body: self.region(body)? }), values))
            }
            (Flow::Map, [body, xs, extra]) => {
                let mut values = self.tensors(xs)?;
                let scanned = values.len();
                values.extend(self.tensors(extra)?);
                Ok((Op::Scan(Scan { carried: 0, scanned, body: self.region(body)? }), values))
            }
            _ => Err(wrong()),
        }
    }

    /// `cond`'s predicate: a bool tensor, or a symbolic bool computed from sizes.
    fn predicate(&self, arg: &Argument) -> Result<ValueRef, String> {
        let name = match arg {
            Argument::AsTensor(t) => t.name.clone(),
            Argument::AsSymBool(v) => super::sym_name(v)?,
            other => return Err(format!("a predicate of kind `{}` (expected a bool tensor)", other.kind())),
        };
        self.value(&name)
    }

    /// A list of tensors (the serializer writes an empty tuple as an empty tensor list).
    fn tensors(&self, arg: &Argument) -> Result<Vec<ValueRef>, String> {
        match arg {
            Argument::AsTensors(ts) => ts.iter().map(|t| self.value(&t.name)).collect(),
            other => Err(format!(
                "an operand list of kind `{}`: only tensors can be passed into control flow (make a size a \
                 tensor first)",
                other.kind()
            )),
        }
    }

    fn value(&self, name: &str) -> Result<ValueRef, String> {
        self.values
            .get(name)
            .copied()
            .ok_or_else(|| format!("reads `{}`, which no graph input or earlier node produces", shown(name)))
    }

    /// The region of an `as_graph` argument, built by a builder of its own.
    fn region(&mut self, arg: &Argument) -> Result<Region, String> {
        let Argument::AsGraph(raw) = arg else {
            return Err(format!("expected a subgraph, found an argument of kind `{}`", arg.kind()));
        };
        if self.depth + 1 > MAX_REGION_DEPTH {
            return Err(format!("control flow nests more than {MAX_REGION_DEPTH} deep"));
        }
        let sub: GraphArgument =
            serde_json::from_value(raw.clone()).map_err(|e| format!("a subgraph that does not parse: {e}"))?;
        let mut b = Builder {
            ep: self.ep,
            archive: self.archive,
            json: &sub.graph,
            graph: Graph::new(sub.name.clone()),
            values: BTreeMap::new(),
            sym_values: self.sym_values.clone(),
            symbols: BTreeSet::new(),
            bindings: BTreeMap::new(),
            derived: BTreeSet::new(),
            equalities: self.equalities.clone(),
            sizes_seen: self.sizes_seen.clone(),
            depth: self.depth + 1,
        };
        let inside = |e: String| format!("in subgraph `{}`: {e}", shown(&sub.name));
        for (name, v) in &sub.graph.sym_int_values {
            let dim = b.sym_int(v).map_err(|e| inside(format!("symbolic int `{}`: {e}", shown(name))))?;
            b.sym_values.insert(name.clone(), dim);
        }
        for (index, input) in sub.graph.inputs.iter().enumerate() {
            let Argument::AsTensor(t) = input else {
                return Err(inside(format!("input {index} is of kind `{}`; only tensors are supported", input.kind())));
            };
            let ty = b.tensor_type(&t.name).map_err(|e| inside(e.to_string()))?;
            let id = b.graph.add_input(Node::new(t.name.clone(), Op::Input(InputKind::User { index }), [ty]));
            b.values.insert(t.name.clone(), ValueRef { node: id, slot: 0 });
        }
        let mut names = BTreeSet::new();
        for node in &sub.graph.nodes {
            b.node(node, &mut names).map_err(|e| inside(e.to_string()))?;
        }
        for (index, out) in sub.graph.outputs.iter().enumerate() {
            let Argument::AsTensor(t) = out else {
                return Err(inside(format!("result {index} is of kind `{}`; only tensors are supported", out.kind())));
            };
            let v = b.value(&t.name).map_err(inside)?;
            b.graph.add_output(v, OutputKind::User { index });
        }
        self.symbols.extend(b.symbols);
        Ok(Region::new(b.graph))
    }
}

/// The regions of every control-flow op declare the symbols of the graph around them.
pub(super) fn declare_symbols_in_regions(graph: &mut Graph) {
    let symbols = graph.symbols().clone();
    let ids: Vec<_> = graph.node_ids().collect();
    for id in ids {
        for region in graph.node_mut(id).op.regions_mut() {
            for (s, bounds) in &symbols {
                region.0.add_symbol(s.clone(), *bounds);
            }
            declare_symbols_in_regions(&mut region.0);
        }
    }
}

fn kinds(args: &[&Argument]) -> String {
    args.iter().map(|a| a.kind()).collect::<Vec<_>>().join(", ")
}
