//! Reads the text form [`print`](super::print) writes back into a [`Graph`], so that
//! `print(&parse(t)?) == t` for every text the printer produces.
//!
//! The grammar, line by line (literal text in quotes, `[x]` optional, `x*` repeated):
//!
//! ```text
//! graph   := "graph " LABEL " {"  sym*  [mesh]  node*  return*  "}"
//! sym     := "  sym " IDENT " in [" (INT | "?") ", " (INT | "?") "]"
//! mesh    := "  mesh [" STRING "=" INT (", " STRING "=" INT)* "]"
//! node    := "  " [VALUE (", " VALUE)* " = "] op [" : " type (", " type)*] [" sharded " shard] "  # " LABEL
//! shard   := "[" [dshard (", " dshard)*] "]"
//! dshard  := "{" [STRING (", " STRING)* [", ?"] | "?"] "}"
//! op      := "input." KIND ...                       (see `input_kind`)
//!          | NAME "(" [arg (", " arg)*] ")" [" {" KEY "=" value (", " KEY "=" value)* "}"]
//! arg     := VALUE | SCALAR                          (scalars only for binary ops and `where`)
//! type    := DTYPE "[" [dim ("," dim)*] "]"
//! dim     := sum                                      (`SymExpr`'s infix form)
//! sum     := term (" + " term | " - " UINT)*
//! term    := product (" // " power | " % " power)*
//! product := power ("*" power)*
//! power   := atom ["^" atom]
//! atom    := INT | IDENT | "(" sum ")" | ("ceildiv" | "max" | "min") "(" [sum (", " sum)*] ")"
//! return  := "  return " OUTPUT_KIND " = " VALUE
//! region  := a graph, each line indented by four more spaces, after the node of its op
//! VALUE   := "%" UINT, defined by an earlier line
//! LABEL   := the rest of the line, or a quoted STRING
//! ```
//!
//! Attributes come in the printer's order. Nodes are added in the text's order, so printing
//! the result numbers them as the text does. The inputs' calling order is not printed: weights
//! come first, then the other inputs, each in text order (the order the importer and the
//! passes give them). Regions nest at most `MAX_REGION_DEPTH` deep, parenthesized expressions
//! and derived-weight recipes at most [`MAX_DEPTH`](super::cursor::MAX_DEPTH), so hostile input cannot overflow the
//! stack.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use thiserror::Error;

use super::cursor::Cursor;
use super::graph::{Graph, OutputKind};
use super::node::{Composite, Node, NodeId, ValueRef, COMPOSITES};
use super::op::InputKind;
use super::ops::{AttrReader, Op, Region, Unsupported, MAX_REGION_DEPTH};
use super::sharding::{Mesh, MeshAxis, Sharding};
use super::types::{Bounds, Precision, Scalar};

/// Why a text is not a printed graph.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was expected, and what was found.
    pub message: String,
}

/// Parses the printer's text form of a graph. The graph is not verified.
pub fn parse(text: &str) -> Result<Graph, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    parse_lines(&lines, 1, 0)
}

/// The graph of `lines`, the first being line `first` of the text, at region depth `depth`.
fn parse_lines(lines: &[&str], first: usize, depth: usize) -> Result<Graph, ParseError> {
    let at = |line: usize| move |message: String| ParseError { line, message };
    let head = lines.first().ok_or_else(|| at(first)("expected `graph NAME {`, found an empty text".into()))?;
    let mut p = Parser { graph: Graph::new(header(head).map_err(at(first))?), values: BTreeMap::new() };
    let mut closed = None;
    let mut i = 1;
    while let Some(&line) = lines.get(i) {
        let n = first + i;
        i += 1;
        match closed {
            Some(c) => return Err(at(n)(format!("expected nothing after the `}}` of line {c}"))),
            None if line == "}" => closed = Some(n),
            None => {
                if let Some(id) = p.line(line).map_err(at(n))? {
                    i = p.regions(id, lines, (i, first), depth)?;
                }
            }
        }
    }
    match closed {
        Some(_) => Ok(p.graph),
        None => Err(at(first + lines.len())("expected `}` closing the graph".into())),
    }
}

fn header(line: &str) -> Result<String, String> {
    let mut c = Cursor { rest: line };
    c.expect("graph ")?;
    if c.peek("\"") {
        let name = c.string()?;
        c.expect(" {")?;
        c.end()?;
        return Ok(name);
    }
    c.rest.strip_suffix(" {").map(str::to_string).ok_or_else(|| "expected `graph NAME {`".to_string())
}

struct Parser {
    graph: Graph,
    /// Printed value numbers defined so far.
    values: BTreeMap<usize, ValueRef>,
}

/// A node line's op, its tensor inputs in slot order, and the node's attributes.
struct Body {
    op: Op,
    inputs: Vec<ValueRef>,
    precision: Option<Precision>,
    composite: Option<Composite>,
}

/// An operand as written: a value, or a Python scalar.
enum Arg {
    Value(ValueRef),
    Scalar(Scalar),
}

impl Parser {
    /// Reads one line; returns the node it adds when that node's op has regions, which the
    /// next lines hold.
    fn line(&mut self, line: &str) -> Result<Option<NodeId>, String> {
        let mut c = Cursor { rest: line };
        c.expect("  ")?;
        if c.eat("sym ") {
            let name = c.ident()?.to_string();
            c.expect(" in [")?;
            let min = c.opt_bound()?;
            let max = c.after(", ")?.opt_bound()?;
            c.expect("]")?;
            self.graph.add_symbol(name, Bounds { min, max });
        } else if c.eat("mesh ") {
            let axes = bracketed(&mut c, |c| {
                let name = c.string()?;
                let size = c.after("=")?.int()?;
                Ok(MeshAxis { name, size })
            })?;
            self.graph.set_mesh(Some(Mesh::new(axes)?));
        } else if c.eat("return ") {
            let kind = output_kind(&mut c)?;
            let value = self.value(c.after(" = ")?)?;
            self.graph.add_output(value, kind);
        } else {
            let id = self.node(&mut c)?;
            c.end()?;
            return Ok((!self.graph.node(id).op.regions().is_empty()).then_some(id));
        }
        c.end().map(|()| None)
    }

    /// Reads the regions of node `id` from `lines[i..]` (line `i` is line `first + i` of the
    /// text): each a graph indented by four spaces. Returns the index of the line after them.
    fn regions(
        &mut self,
        id: NodeId,
        lines: &[&str],
        (mut i, first): (usize, usize),
        depth: usize,
    ) -> Result<usize, ParseError> {
        let count = self.graph.node(id).op.regions().len();
        for r in 0..count {
            let at = |line: usize, message: String| ParseError { line, message };
            if depth + 1 > MAX_REGION_DEPTH {
                return Err(at(first + i, format!("regions nest more than {MAX_REGION_DEPTH} deep")));
            }
            if !lines.get(i).is_some_and(|l| l.starts_with("    graph ")) {
                let op = self.graph.node(id).op.name();
                return Err(at(first + i, format!("expected region {r} of `{op}`: `    graph NAME {{`")));
            }
            let end = lines[i..].iter().position(|l| *l == "    }").map(|k| i + k).ok_or_else(|| {
                at(first + lines.len(), format!("expected `    }}` closing the region of line {}", first + i))
            })?;
            let mut inner = Vec::with_capacity(end + 1 - i);
            for (k, l) in lines[i..=end].iter().enumerate() {
                let l = l.strip_prefix("    ").ok_or_else(|| at(first + i + k, "expected a region line".into()))?;
                inner.push(l);
            }
            let region = parse_lines(&inner, first + i, depth + 1)?;
            *self.graph.node_mut(id).op.regions_mut()[r] = Region::new(region);
            i = end + 1;
        }
        Ok(i)
    }

    fn value(&self, c: &mut Cursor<'_>) -> Result<ValueRef, String> {
        let n = c.after("%")?.uint()?;
        self.values.get(&n).copied().ok_or_else(|| format!("`%{n}` is not defined by an earlier line"))
    }

    fn node(&mut self, c: &mut Cursor<'_>) -> Result<NodeId, String> {
        let results = if c.peek("%") { c.sep_by(", ", |c| c.after("%")?.uint())? } else { vec![] };
        if !results.is_empty() {
            c.expect(" = ")?;
        }
        let Body { op, inputs, precision, composite } = if c.eat("input.") {
            Body { op: Op::Input(input_kind(c)?), inputs: vec![], precision: None, composite: None }
        } else {
            self.call(c)?
        };
        let types = if c.eat(" : ") { c.sep_by(", ", Cursor::tensor_type)? } else { vec![] };
        let sharding = if c.eat(" sharded ") { Some(sharding(c)?) } else { None };
        let name = c.after("  # ")?.label()?;
        if results.len() != types.len() {
            return Err(format!("expected as many types as results ({}), found {}", results.len(), types.len()));
        }
        if let Some(n) = results.iter().find(|n| self.values.contains_key(n)) {
            return Err(format!("`%{n}` is defined twice"));
        }
        let is_weight = matches!(&op, Op::Input(k) if k.is_weight());
        let node = Node { precision, composite, sharding, ..Node::new(name, op, types) };
        let id = match &node.op {
            Op::Input(_) if is_weight => self.graph.add_weight_input(node),
            Op::Input(_) => self.graph.add_input(node),
            _ => self.graph.add_node(node),
        };
        for (slot, v) in inputs.into_iter().enumerate() {
            let slot = u16::try_from(slot).map_err(|_| "more than 65536 operands".to_string())?;
            self.graph.connect(v, id, slot);
        }
        for (slot, n) in results.into_iter().enumerate() {
            let slot = u16::try_from(slot).map_err(|_| "more than 65536 results".to_string())?;
            self.values.insert(n, ValueRef { node: id, slot });
        }
        Ok(id)
    }

    /// `NAME(args) {attrs}`.
    fn call(&self, c: &mut Cursor<'_>) -> Result<Body, String> {
        let target = if c.eat("unsupported<") {
            let t = if c.peek("\"") { c.string()? } else { c.take_while(|ch| ch != '>').to_string() };
            c.expect(">")?;
            Some(t)
        } else {
            None
        };
        let name = if target.is_some() { "unsupported" } else { c.ident()? };
        c.expect("(")?;
        let args = if c.peek(")") { vec![] } else { c.sep_by(", ", |c| self.arg(c))? };
        c.expect(")")?;
        let mut a = AttrReader { c, count: 0 };
        let op = match target {
            Some(target) => Op::Unsupported(Unsupported { target, reason: a.opt_key("reason", Cursor::string)? }),
            None => {
                let scalars: Vec<Option<Scalar>> =
                    args.iter().map(|a| if let Arg::Scalar(s) = a { Some(*s) } else { None }).collect();
                Op::parse_named(name, &mut a, &scalars).ok_or_else(|| format!("unknown op `{name}`"))??
            }
        };
        let precision = a.opt_key("precision", |c| {
            let p = c.ident()?;
            Precision::parse(p).ok_or_else(|| format!("unknown precision `{p}`"))
        })?;
        let composite = a.opt_key("composite", composite)?;
        a.finish()?;
        let mut inputs = Vec::with_capacity(args.len());
        for (i, arg) in args.into_iter().enumerate() {
            match arg {
                Arg::Value(v) => inputs.push(v),
                Arg::Scalar(_) if matches!(op, Op::Binary(_) | Op::Where(_)) => {}
                Arg::Scalar(s) => {
                    return Err(format!("operand {i} of `{}` is the scalar `{s}`, not a value", op.name()))
                }
            }
        }
        Ok(Body { op, inputs, precision, composite })
    }

    fn arg(&self, c: &mut Cursor<'_>) -> Result<Arg, String> {
        if c.peek("%") {
            self.value(c).map(Arg::Value)
        } else {
            c.scalar().map(Arg::Scalar)
        }
    }
}

/// `[item, item, …]` (possibly empty).
fn bracketed<T>(c: &mut Cursor<'_>, item: impl FnMut(&mut Cursor<'_>) -> Result<T, String>) -> Result<Vec<T>, String> {
    c.expect("[")?;
    let items = if c.peek("]") { vec![] } else { c.sep_by(", ", item)? };
    c.expect("]")?;
    Ok(items)
}

/// `[{"tp"}, {}]`: per dim, the mesh axes that split it, `?` last when the dim is open.
fn sharding(c: &mut Cursor<'_>) -> Result<Sharding, String> {
    let dims = bracketed(c, |c| {
        c.expect("{")?;
        let mut axes = Vec::new();
        let mut open = false;
        while !c.peek("}") {
            if !axes.is_empty() || open {
                c.expect(", ")?;
            }
            if c.eat("?") {
                open = true;
                break;
            }
            axes.push(c.string()?);
        }
        c.expect("}")?;
        Ok((axes, open))
    })?;
    let open: Vec<bool> = dims.iter().map(|(_, o)| *o).collect();
    let open = if open.iter().any(|&o| o) { open } else { Vec::new() };
    Ok(Sharding { dims: dims.into_iter().map(|(a, _)| a).collect(), open })
}

fn composite(c: &mut Cursor<'_>) -> Result<Composite, String> {
    let name = c.take_while(|ch| ch != '#');
    let name = COMPOSITES.iter().copied().find(|&k| k == name).ok_or_else(|| format!("unknown composite `{name}`"))?;
    let instance = u32::try_from(c.after("#")?.uint()?).map_err(|_| "composite instance too large".to_string())?;
    Ok(Composite { name, instance })
}

fn input_kind(c: &mut Cursor<'_>) -> Result<InputKind, String> {
    Ok(match c.ident()? {
        "param" => InputKind::Parameter { fqn: c.after(" ")?.string()? },
        "buffer" => InputKind::Buffer { fqn: c.after(" ")?.string()?, persistent: !c.eat(" non_persistent") },
        "const" => InputKind::Constant { fqn: c.after(" ")?.string()? },
        "user" => InputKind::User { index: c.after(" #")?.uint()? },
        // The printer names the kind twice: `input.rng_seed rng_seed`.
        "rng_seed" => c.after(" rng_seed").map(|_| InputKind::RngSeed)?,
        "size" => InputKind::Size { symbol: c.after(" ")?.ident()?.to_string() },
        "derived" => InputKind::Derived { fqn: c.after(" ")?.string()?, recipe: c.after(" from ")?.recipe(0)? },
        other => return Err(format!("unknown input kind `input.{other}`")),
    })
}

fn output_kind(c: &mut Cursor<'_>) -> Result<OutputKind, String> {
    Ok(match c.ident()? {
        "user" => {
            let index = c.after("[")?.uint()?;
            c.expect("]")?;
            OutputKind::User { index }
        }
        "buffer_mutation" => OutputKind::BufferMutation { fqn: c.after(" ")?.string()? },
        "parameter_mutation" => OutputKind::ParameterMutation { fqn: c.after(" ")?.string()? },
        "user_input_mutation" => OutputKind::UserInputMutation { input: c.after(" ")?.string()? },
        "loss" => OutputKind::Loss,
        "grad" => OutputKind::GradientToParameter { fqn: c.after(" ")?.string()? },
        "grad_input" => OutputKind::GradientToUserInput { input: c.after(" ")?.string()? },
        "size" => OutputKind::Size { symbol: c.after(" ")?.ident()?.to_string() },
        other => return Err(format!("unknown output kind `{other}`")),
    })
}
