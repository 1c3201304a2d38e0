//! Control flow: ops that hold subgraphs ([`Region`]s) and run them — `cond` (one of two
//! branches), `while_loop` (a body while a condition holds) and `scan` (a body over the
//! leading dim of its operands; `map` is a scan that carries nothing).
//!
//! A region is a graph of its own: its inputs are `input.user #0, #1, …` in order, its results
//! `return user[0], user[1], …`, and it declares the symbols its types use (the enclosing
//! graph's). The printed form puts each region, as a graph, on the lines after its node,
//! indented. The rules check the regions' signatures against the operands and give the results;
//! `verify` checks inside each region.

use std::fmt;

use super::rule::{same_dim, Arity, Expected, RuleResult};
use super::{AttrReader, OpDef, OpSyntax, ParseOp};
use crate::ir::graph::{Graph, OutputKind};
use crate::ir::op::InputKind;
use crate::ir::ops::Op;
use crate::ir::types::{DType, Dim, Scalar, TensorType};

/// The deepest nesting of regions (a loop in a branch in a loop …) the parser and the
/// importer accept, so that hostile input cannot overflow the stack.
pub const MAX_REGION_DEPTH: usize = 16;

/// A subgraph an op runs (see the module doc). Equal when their printed forms are.
#[derive(Clone)]
pub struct Region(pub Box<Graph>);

impl Region {
    /// The region of `graph`.
    pub fn new(graph: Graph) -> Region {
        Region(Box::new(graph))
    }

    /// An empty region, which the parser fills.
    pub(crate) fn placeholder() -> Region {
        Region::new(Graph::new(""))
    }

    /// The types of its inputs, in calling order.
    pub fn input_types(&self) -> Vec<&TensorType> {
        self.0.graph_inputs().iter().map(|&id| &self.0.node(id).outputs[0]).collect()
    }

    /// The types of its results, in order.
    pub fn output_types(&self) -> Vec<&TensorType> {
        self.0.outputs().iter().map(|o| self.0.value_type(o.value)).collect()
    }

    /// Its signature's shape: user inputs `#0, #1, …` and results `user[0], user[1], …`, in
    /// order; nothing else comes in or goes out.
    pub fn check_signature(&self) -> Result<(), String> {
        let g = &self.0;
        for (i, &id) in g.graph_inputs().iter().enumerate() {
            if !matches!(&g.node(id).op, Op::Input(InputKind::User { index }) if *index == i) {
                return Err(format!("input {i} of region `{}` is not `input.user #{i}`", g.name));
            }
        }
        for (i, o) in g.outputs().iter().enumerate() {
            if o.kind != (OutputKind::User { index: i }) {
                return Err(format!("result {i} of region `{}` is not `user[{i}]`", g.name));
            }
        }
        Ok(())
    }
}

impl PartialEq for Region {
    fn eq(&self, other: &Region) -> bool {
        crate::ir::print(&self.0) == crate::ir::print(&other.0)
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::ir::print(&self.0))
    }
}

/// `what`'s types against `expected`, one by one (dims compared in canonical form).
fn same_types(what: &str, found: &[&TensorType], expected: &[&TensorType]) -> Result<(), String> {
    if found.len() != expected.len() {
        return Err(format!("{what}: {} values where {} are expected", found.len(), expected.len()));
    }
    for (i, (f, e)) in found.iter().zip(expected).enumerate() {
        let same =
            f.dtype == e.dtype && f.rank() == e.rank() && f.dims.iter().zip(&e.dims).all(|(a, b)| same_dim(a, b));
        if !same {
            return Err(format!("{what}: value {i} is {f} where {e} is expected"));
        }
    }
    Ok(())
}

/// A predicate: a bool tensor of one element.
fn check_predicate(what: &str, ty: &TensorType) -> Result<(), String> {
    if ty.dtype == DType::Bool && ty.dims.iter().all(|d| *d == Dim::Static(1)) {
        Ok(())
    } else {
        Err(format!("{what} must be a bool tensor of one element, found {ty}"))
    }
}

fn exact(types: &[&TensorType]) -> Vec<Expected> {
    types.iter().map(|t| Expected::exact(t.dtype, &t.dims)).collect()
}

/// `cond(pred, operands…)`: runs `then` on the operands when the one-element bool `pred` is
/// true, else `otherwise`; both take the operands' types and give the same result types.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    /// The branch taken when `pred` is true.
    pub then: Region,
    /// The branch taken when it is false.
    pub otherwise: Region,
}

impl Cond {
    /// The printed name.
    pub const NAME: &'static str = "cond";
}

impl OpSyntax for Cond {
    fn name(&self) -> String {
        Self::NAME.into()
    }

    fn attrs(&self, _: &mut Vec<String>) {}
}

impl ParseOp for Cond {
    fn parse(name: &str, _: &mut AttrReader<'_, '_>, _: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        (name == Self::NAME).then(|| Ok(Cond { then: Region::placeholder(), otherwise: Region::placeholder() }))
    }
}

impl OpDef for Cond {
    fn arity(&self) -> Arity {
        Arity { inputs: Some(1 + self.then.input_types().len()), outputs: Some(self.then.output_types().len()) }
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        check_predicate("the predicate of `cond`", inputs[0])?;
        same_types("the operands of the `then` branch", &inputs[1..], &self.then.input_types())?;
        same_types("the operands of the `else` branch", &inputs[1..], &self.otherwise.input_types())?;
        let results = self.then.output_types();
        same_types("the results of the `else` branch", &self.otherwise.output_types(), &results)?;
        Ok(exact(&results))
    }
}

/// `while_loop(carried…, extra…)`: while `cond` (all operands → a one-element bool) holds,
/// `body` (all operands → the new carried values) runs; the results are the last carried
/// values. The `extra` operands are read by every iteration and never change.
#[derive(Clone, Debug, PartialEq)]
pub struct WhileLoop {
    /// How many leading operands the loop carries.
    pub carried: usize,
    /// The condition.
    pub cond: Region,
    /// The body.
    pub body: Region,
}

impl WhileLoop {
    /// The printed name.
    pub const NAME: &'static str = "while_loop";
}

impl OpSyntax for WhileLoop {
    fn name(&self) -> String {
        Self::NAME.into()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("carried={}", self.carried));
    }
}

impl ParseOp for WhileLoop {
    fn parse(name: &str, r: &mut AttrReader<'_, '_>, _: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        (name == Self::NAME).then(|| {
            let carried = r.key("carried")?.uint()?;
            Ok(WhileLoop { carried, cond: Region::placeholder(), body: Region::placeholder() })
        })
    }
}

impl OpDef for WhileLoop {
    fn arity(&self) -> Arity {
        Arity { inputs: Some(self.body.input_types().len()), outputs: Some(self.carried) }
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let carried = inputs.get(..self.carried).ok_or("more carried values than operands")?;
        same_types("the operands of the condition", inputs, &self.cond.input_types())?;
        same_types("the operands of the body", inputs, &self.body.input_types())?;
        match self.cond.output_types().as_slice() {
            [pred] => check_predicate("the condition's result", pred)?,
            other => return Err(format!("the condition gives {} results, not one", other.len())),
        }
        same_types("the body's results", &self.body.output_types(), carried)?;
        Ok(exact(carried))
    }
}

/// `scan(init…, xs…, extra…)`: `body(carry…, x…, extra…) → (carry…, y…)` runs once per
/// position `i` of the leading dim of the `xs` (all of one length `n`), `x` being each `xs`'s
/// slice at `i`; the results are the last carry and each `y` stacked along a new leading dim of
/// size `n`. `map` is a scan with no carry.
#[derive(Clone, Debug, PartialEq)]
pub struct Scan {
    /// How many leading operands (and leading body results) are the carry.
    pub carried: usize,
    /// How many operands after them are scanned along their leading dim.
    pub scanned: usize,
    /// The body.
    pub body: Region,
}

impl Scan {
    /// The printed name.
    pub const NAME: &'static str = "scan";

    /// The length of the scan: the scanned operands' leading dim.
    pub fn length(&self, inputs: &[&TensorType]) -> Result<Dim, String> {
        let xs = inputs.get(self.carried..self.carried + self.scanned).ok_or("fewer operands than the scan reads")?;
        let first = xs.first().ok_or("`scan` scans no operand")?;
        let n = first.dims.first().ok_or_else(|| format!("a scanned operand is 0-d ({first})"))?;
        for x in xs {
            if !x.dims.first().is_some_and(|d| same_dim(d, n)) {
                return Err(format!("the scanned operands differ in length: {first} and {x}"));
            }
        }
        Ok(n.clone())
    }
}

impl OpSyntax for Scan {
    fn name(&self) -> String {
        Self::NAME.into()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("carried={}", self.carried));
        out.push(format!("scanned={}", self.scanned));
    }
}

impl ParseOp for Scan {
    fn parse(name: &str, r: &mut AttrReader<'_, '_>, _: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        (name == Self::NAME).then(|| {
            let carried = r.key("carried")?.uint()?;
            let scanned = r.key("scanned")?.uint()?;
            Ok(Scan { carried, scanned, body: Region::placeholder() })
        })
    }
}

impl OpDef for Scan {
    fn arity(&self) -> Arity {
        let ys = self.body.output_types().len().saturating_sub(self.carried);
        Arity { inputs: Some(self.body.input_types().len()), outputs: Some(self.carried + ys) }
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let n = self.length(inputs)?;
        let slices: Vec<TensorType> = inputs[self.carried..self.carried + self.scanned]
            .iter()
            .map(|x| TensorType { dtype: x.dtype, dims: x.dims[1..].to_vec() })
            .collect();
        let mut operands: Vec<&TensorType> = inputs[..self.carried].to_vec();
        operands.extend(&slices);
        operands.extend(&inputs[self.carried + self.scanned..]);
        same_types("the operands of the body", &operands, &self.body.input_types())?;
        let results = self.body.output_types();
        let carry = results.get(..self.carried).ok_or("the body gives fewer results than the scan carries")?;
        same_types("the carry the body gives", carry, &inputs[..self.carried])?;
        let mut out = exact(carry);
        for y in &results[self.carried..] {
            let dims: Vec<Dim> = std::iter::once(n.clone()).chain(y.dims.iter().cloned()).collect();
            out.push(Expected::exact(y.dtype, &dims));
        }
        Ok(out)
    }
}
