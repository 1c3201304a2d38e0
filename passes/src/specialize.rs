//! Specialization: substitutes concrete values for the symbols, giving a fully static graph.
//!
//! Used to compile a dynamic program at one size (the export's example size today, one per
//! bucket later). Every symbolic dim in output types and op attributes is evaluated; values
//! outside a symbol's bounds are refused. The regions of control-flow ops are specialized with
//! the same values. A size the data decides (`nonzero`'s count) takes its bound at the bucket
//! ([`computed_bounds`]).

use crate::ir::ops::{ArangeSym, Expand, Full, Item, Nonzero, Repeat, Slice, SplitWithSizes, SymInt, TopK, View};
use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use crate::ir::{Dim, Graph, Op, SymExpr, Symbolic};

/// Why a graph could not be specialized.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpecializeError {
    /// A symbol has no value.
    #[error("symbol `{symbol}` has no value")]
    Unbound {
        /// The symbol.
        symbol: String,
    },
    /// A value lies outside the symbol's bounds.
    #[error("symbol `{symbol}` = {value} is outside its range {range}")]
    OutOfBounds {
        /// The symbol.
        symbol: String,
        /// The value given.
        value: i64,
        /// The allowed range, e.g. `[2, 512]`.
        range: String,
    },
    /// A symbol is neither an input's size nor a size an op bounds.
    #[error(
        "symbol `{symbol}`{made_by} is neither a dim of an input nor the count of a `nonzero`, and no maximum is \
         declared for it: bound it at export, `torch._check(n <= N)` on the value `n` that becomes this size"
    )]
    Unbounded {
        /// The symbol.
        symbol: String,
        /// ` (the value of item() at node `…`)` where an `item()` makes it, else empty.
        made_by: String,
    },
    /// The graph has a cycle.
    #[error("the graph has a cycle")]
    Cycle,
    /// An expression could not be evaluated (overflow or division by zero).
    #[error("node `{node}`: cannot evaluate `{expr}`")]
    Eval {
        /// The node whose type or attribute holds the expression.
        node: String,
        /// The expression.
        expr: String,
    },
}

/// Returns a copy of `graph` with every symbol replaced by its value in `env`.
pub fn specialize(graph: &Graph, env: &BTreeMap<String, i64>) -> Result<Graph, SpecializeError> {
    for (symbol, bounds) in graph.symbols() {
        let value = *env.get(symbol).ok_or_else(|| SpecializeError::Unbound { symbol: symbol.clone() })?;
        if bounds.min.is_some_and(|m| value < m) || bounds.max.is_some_and(|m| value > m) {
            return Err(SpecializeError::OutOfBounds { symbol: symbol.clone(), value, range: bounds.to_string() });
        }
    }
    let mut out = graph.clone();
    let ids: Vec<_> = out.node_ids().collect();
    for id in ids {
        let node = out.node_mut(id);
        let name = node.name.clone();
        let mut op = node.op.clone();
        let symbolic =
            node.outputs.iter().any(|t| !t.is_static()) || op_dims(&mut op).iter().any(|d| d.as_static().is_none());
        if symbolic {
            node.symbolic = Some(Box::new(Symbolic { op, outputs: node.outputs.to_vec() }));
        }
        let fix = |d: &mut Dim| -> Result<(), SpecializeError> {
            if let Dim::Sym(e) = d {
                let v = e.eval(env).ok_or_else(|| SpecializeError::Eval { node: name.clone(), expr: e.to_string() })?;
                *d = Dim::Static(v);
            }
            Ok(())
        };
        for ty in node.outputs.iter_mut() {
            ty.dims.iter_mut().try_for_each(fix)?;
        }
        for d in op_dims(&mut node.op) {
            fix(d)?;
        }
        for region in node.op.regions_mut() {
            *region.0 = specialize(&region.0, env)?;
        }
    }
    out.clear_symbols();
    Ok(out)
}

/// The symbol whose value the data decides at an op: `nonzero`'s row count, an `item()`.
pub fn count_symbol(op: &Op) -> Option<&str> {
    match op {
        Op::Nonzero(Nonzero { size: Dim::Sym(SymExpr::Sym(s)) })
        | Op::Item(Item { size: Dim::Sym(SymExpr::Sym(s)), .. }) => Some(s),
        _ => None,
    }
}

/// True when some size of the graph comes from data (some node decides a [`count_symbol`]).
pub fn has_sizes_from_data(graph: &Graph) -> bool {
    graph.node_ids().any(|id| count_symbol(&graph.node(id).op).is_some())
}

/// The value of every data-dependent size at a bucket whose other symbols are `values`: for a
/// `nonzero`, its operand's element count there, or the symbol's declared maximum when that is
/// smaller (a `torch._check` the export recorded); for an `item()`, that maximum. `Err` names a
/// symbol that nothing bounds.
pub fn computed_bounds(
    graph: &Graph,
    values: &BTreeMap<String, i64>,
) -> Result<BTreeMap<String, i64>, SpecializeError> {
    let order = graph.topo_order().map_err(|_| SpecializeError::Cycle)?;
    let mut env = values.clone();
    let mut out = BTreeMap::new();
    let sizes_used = symbols_used_as_sizes(graph);
    for id in order {
        let Some(symbol) = count_symbol(&graph.node(id).op) else { continue };
        let Some(&x) = graph.inputs(id).first() else { continue };
        let declared = graph.symbols().get(symbol).and_then(|b| b.max);
        if let Op::Item(Item { at_most, .. }) = &graph.node(id).op {
            let asserted = at_most.as_ref().and_then(|d| match d {
                Dim::Static(v) => Some(*v),
                Dim::Sym(e) => e.eval(&env),
            });
            // An `item()` only used as a number needs no bound: any value stands for it.
            let bound = match declared {
                Some(max) => asserted.map_or(max, |a| a.clamp(0, max)),
                None if !sizes_used.contains(symbol) => graph.symbols().get(symbol).and_then(|b| b.min).unwrap_or(0),
                None => {
                    let made_by = format!(" (the value of item() at node `{}`)", graph.node(id).name);
                    return Err(SpecializeError::Unbounded { symbol: symbol.to_string(), made_by });
                }
            };
            env.insert(symbol.to_string(), bound);
            out.insert(symbol.to_string(), bound);
            continue;
        }
        let numel = graph.value_type(x).dims.iter().try_fold(1i64, |n, d| match d {
            Dim::Static(v) => n.checked_mul(*v),
            Dim::Sym(e) => e.eval(&env).and_then(|v| n.checked_mul(v)),
        });
        let numel = numel.ok_or_else(|| SpecializeError::Eval {
            node: graph.node(id).name.clone(),
            expr: format!("the element count of {}", graph.value_type(x)),
        })?;
        let bound = numel.min(declared.unwrap_or(i64::MAX));
        env.insert(symbol.to_string(), bound);
        out.insert(symbol.to_string(), bound);
    }
    let unbounded: Vec<&String> =
        graph.symbols().keys().filter(|s| !values.contains_key(*s) && !out.contains_key(*s)).collect();
    if let Some(s) = unbounded.first() {
        return Err(SpecializeError::Unbounded { symbol: s.to_string(), made_by: String::new() });
    }
    Ok(out)
}

/// The symbols that some node other than their `item()` uses (in a type or an attribute):
/// one walk over the graph, whatever the number of `item()`s.
fn symbols_used_as_sizes(graph: &Graph) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for id in graph.node_ids() {
        let node = graph.node(id);
        let own = match node.op {
            Op::Item(_) => count_symbol(&node.op),
            _ => None,
        };
        used.extend(node_symbols(node).into_iter().filter(|s| Some(s.as_str()) != own));
    }
    used
}

/// The symbols a node uses: in its result types and its op's attributes.
pub fn node_symbols(node: &crate::ir::Node) -> BTreeSet<String> {
    let mut op = node.op.clone();
    let attrs: Vec<Dim> = op_dims(&mut op).into_iter().map(|d| d.clone()).collect();
    let types = node.outputs.iter().flat_map(|t| t.dims.iter());
    attrs
        .iter()
        .chain(types)
        .filter_map(|d| if let Dim::Sym(e) = d { Some(e.symbols()) } else { None })
        .flatten()
        .collect()
}

/// The dims held in an op's attributes.
fn op_dims(op: &mut Op) -> Vec<&mut Dim> {
    match op {
        Op::View(View { size }) | Op::Expand(Expand { size }) | Op::Full(Full { size, .. }) => {
            size.iter_mut().collect()
        }
        Op::SplitWithSizes(SplitWithSizes { sizes, .. }) => sizes.iter_mut().collect(),
        Op::Slice(Slice { start, end, .. }) => vec![start, end],
        Op::ArangeSym(ArangeSym { start, end, .. }) => vec![start, end],
        Op::Repeat(Repeat { repeats }) => repeats.iter_mut().collect(),
        Op::TopK(TopK { k, .. }) | Op::Nonzero(Nonzero { size: k }) => vec![k],
        Op::Item(Item { size, at_most }) => std::iter::once(size).chain(at_most).collect(),
        Op::SymInt(SymInt { value }) => vec![value],
        // Every other op's attributes are plain integers.
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{builder::Builder, print, Bounds, DType, SymExpr, TensorType};

    fn dynamic_graph() -> Graph {
        let s = Dim::Sym(SymExpr::sym("s0"));
        let twice = Dim::Sym(SymExpr::Mul(vec![SymExpr::Int(2), SymExpr::sym("s0")]));
        let mut b = Builder::new("g");
        b.graph_mut().add_symbol("s0", Bounds { min: Some(2), max: Some(8) });
        let x = b.input("x", TensorType { dtype: DType::F32, dims: vec![s.clone()] });
        let y = b.op(
            "y",
            Op::View(View { size: vec![twice.clone()] }),
            &[x],
            TensorType { dtype: DType::F32, dims: vec![twice] },
        );
        b.output(y);
        b.finish()
    }

    #[test]
    fn substitutes_types_and_attributes() {
        let g = specialize(&dynamic_graph(), &BTreeMap::from([("s0".into(), 3)])).unwrap();
        insta::assert_snapshot!(print(&g), @r"
        graph g {
          %0 = input.user #0 : f32[3]  # x
          %1 = view(%0) {size=[6]} : f32[6]  # y
          return user[0] = %1
        }
        ");
    }

    /// An `item()` that an asserted sum bounds by `2·s0` (an MoE's per-expert count) computes
    /// at that bound in each bucket, within its declared maximum.
    #[test]
    fn item_bounded_by_an_expression_computes_at_the_buckets_value() {
        let mut b = Builder::new("g");
        b.graph_mut().add_symbol("s0", Bounds { min: Some(1), max: Some(8) });
        b.graph_mut().add_symbol("u0", Bounds { min: Some(0), max: Some(10) });
        let x = b.input("x", TensorType::new(DType::I64, &[1]));
        let at_most = Some(Dim::Sym(SymExpr::Mul(vec![SymExpr::Int(2), SymExpr::sym("s0")])));
        let item = Op::Item(Item { size: Dim::Sym(SymExpr::sym("u0")), at_most });
        let n = b.op("n", item, &[x], TensorType::new(DType::I64, &[]));
        b.output(n);
        let g = b.finish();
        let at = |s0: i64| computed_bounds(&g, &BTreeMap::from([("s0".into(), s0)])).unwrap()["u0"];
        assert_eq!((at(3), at(5), at(8)), (6, 10, 10));
    }

    #[test]
    fn refuses_missing_and_out_of_range_values() {
        let g = dynamic_graph();
        assert_eq!(specialize(&g, &BTreeMap::new()).unwrap_err(), SpecializeError::Unbound { symbol: "s0".into() });
        let err = specialize(&g, &BTreeMap::from([("s0".into(), 9)])).unwrap_err();
        assert_eq!(err.to_string(), "symbol `s0` = 9 is outside its range [2, 8]");
    }
}
