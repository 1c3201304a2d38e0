//! Builds the IR graph from the parsed `ExportedProgram`.
//!
//! Graph inputs follow `signature.input_specs` (parameters, buffers, constants, user inputs);
//! nodes follow the FX node list, which is topologically ordered; outputs follow
//! `signature.output_specs`. Every tensor's type comes from `graph.tensor_values`.

use std::collections::{BTreeMap, BTreeSet};
use torchtpu_passes::ir::ops::{AsStrided, Convolution, ConvolutionBackward, Permute, Unsupported, ViewAsComplex};

use torchtpu_passes::ir::{
    DType, Dim, Graph, InputKind, Node, Op, Origin, SymExpr, TensorType, ValueRef, MAX_OPERANDS,
};

use super::archive::Archive;
use super::args::{Args, RNG_SEED};
use super::ops;
use super::payload::Weight;
use super::schema::{self, scalar_type, Argument, InputSpec, SymInt, SymIntArgument};
use super::srepr;
use super::wire::{Recipe, Wire};
use super::{shown, ImportError};

mod data;
mod finish;
mod regions;
mod sizes;

use super::ops::Special;
use sizes::{
    has_data_dependent_arg, has_symbolic_number, is_size_number_node, is_sym_int_node, size_number_op, sym_name,
};
use torchtpu_passes::{bug, Fail};

/// Where a symbol's value comes from at run time: a dimension of a user input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolBinding {
    /// Position among the user inputs.
    pub input: usize,
    /// The input's name.
    pub input_name: String,
    /// The dimension whose size is the symbol.
    pub dim: usize,
    /// The size in the example inputs used at export, when recorded.
    pub example: Option<i64>,
}

/// The graph and what the program needs besides it.
pub(super) struct Built {
    pub graph: Graph,
    pub bindings: BTreeMap<String, SymbolBinding>,
    pub constant_inputs: Vec<(String, String)>,
}

struct Builder<'a> {
    ep: &'a schema::ExportedProgram,
    archive: &'a Archive,
    /// The graph being read: the program's, or a subgraph of a control-flow op.
    json: &'a schema::Graph,
    graph: Graph,
    /// FX tensor name → the value holding it.
    values: BTreeMap<String, ValueRef>,
    /// FX symbolic-int name → its expression.
    sym_values: BTreeMap<String, Dim>,
    symbols: BTreeSet<String>,
    bindings: BTreeMap<String, SymbolBinding>,
    /// The symbols bound by a derived dim (`8*s`), which a bare one replaces.
    derived: BTreeSet<String>,
    /// Sizes made by data that the program asserts equal to others (`Eq(u0 + u1, 32)`), taken
    /// as facts.
    equalities: Vec<(SymExpr, SymExpr)>,
    /// The sizes read so far and their parts, one of each value ([`SymExpr::unified`]).
    sizes_seen: Vec<SymExpr>,
    /// How many control-flow regions enclose the graph being read.
    depth: usize,
}

/// Builds the graph; does not verify it (the caller does).
pub(super) fn build(
    name: &str,
    archive: &Archive,
    ep: &schema::ExportedProgram,
    weights: &BTreeMap<String, Weight>,
) -> Result<Built, ImportError> {
    let mut b = Builder {
        ep,
        archive,
        json: &ep.graph_module.graph,
        graph: Graph::new(name),
        values: BTreeMap::new(),
        sym_values: BTreeMap::new(),
        symbols: BTreeSet::new(),
        bindings: BTreeMap::new(),
        derived: BTreeSet::new(),
        equalities: Vec::new(),
        sizes_seen: Vec::new(),
        depth: 0,
    };
    // The inputs bind the symbols they give; the others are made by data, which the equalities
    // the program asserts are about, and those rewrite the symbolic values read after them.
    let constant_inputs = b.inputs(weights)?;
    b.equalities = data::asserted_equalities(b.json, &b.bindings);
    for (sym_name, v) in &ep.graph_module.graph.sym_int_values {
        let dim = b.sym_int(v).map_err(|reason| ImportError::TensorMeta { tensor: sym_name.clone(), reason })?;
        b.sym_values.insert(sym_name.clone(), dim);
    }
    let mut names = BTreeSet::new();
    for node in &ep.graph_module.graph.nodes {
        b.node(node, &mut names)?;
    }
    b.outputs()?;
    b.drop_dead_symbols();
    b.declare_symbols()?;
    regions::declare_symbols_in_regions(&mut b.graph);
    Ok(Built { graph: b.graph, bindings: b.bindings, constant_inputs })
}

impl<'a> Builder<'a> {
    fn graph_json(&self) -> &'a schema::Graph {
        self.json
    }

    /// The symbols' ranges that bound both sides, from `range_constraints` (validated later,
    /// in `declare_symbols`; a range that is not valid bounds nothing here).
    fn ranges(&self) -> BTreeMap<String, (i64, i64)> {
        let bounded = |rc: &schema::RangeConstraint| match (rc.min_val, rc.max_val) {
            (Some(lo), Some(hi)) if 0 <= lo && lo <= hi => Some((lo, hi)),
            _ => None,
        };
        self.ep.range_constraints.iter().filter_map(|(s, rc)| Some((s.clone(), bounded(rc)?))).collect()
    }

    fn sym_int(&mut self, v: &SymInt) -> Result<Dim, String> {
        match v {
            SymInt::AsInt(i) => Ok(Dim::Static(*i)),
            SymInt::AsExpr(e) => {
                let ranges = self.ranges();
                let expr = srepr::parse(&e.expr_str)
                    .map_err(|err| format!("cannot parse symbolic size `{}`: {}", shown(&e.expr_str), err.0))?
                    .simplify()
                    .within(&ranges);
                let expr = self.asserted_equal(&expr).unwrap_or(expr);
                let expr = expr.unified(&mut self.sizes_seen, &ranges).within(&ranges);
                if expr.symbols().is_empty() && expr.as_const().is_none() {
                    return Err(format!(
                        "size `{}` has no symbols but no value either (it overflows or divides by zero)",
                        shown(&e.expr_str)
                    ));
                }
                self.symbols.extend(expr.symbols());
                Ok(Dim::from_expr(expr))
            }
        }
    }

    /// The type of a named tensor, from `tensor_values`.
    fn tensor_type(&mut self, name: &str) -> Result<TensorType, ImportError> {
        let bad = |reason: String| ImportError::TensorMeta { tensor: shown(name), reason };
        let meta =
            self.graph_json().tensor_values.get(name).ok_or_else(|| bad("no entry (its type is unknown)".into()))?;
        let dtype = scalar_type(meta.dtype).ok_or_else(|| bad(format!("unknown dtype number {}", meta.dtype)))?;
        let sizes = meta.sizes.clone();
        let dims = sizes.iter().map(|s| self.sym_int(s)).collect::<Result<Vec<_>, _>>().map_err(bad)?;
        if dims.iter().any(|d| d.as_static().is_some_and(|v| v < 0)) {
            return Err(bad("a size is negative".into()));
        }
        let bytes = dims.iter().filter_map(Dim::as_static).try_fold(dtype.size_bytes() as i64, |n, d| n.checked_mul(d));
        if bytes.is_none() {
            return Err(bad(format!("its sizes hold more bytes than fit in 64 bits ({})", dtype)));
        }
        Ok(TensorType { dtype, dims })
    }

    /// Creates the graph inputs from the signature, checking each against the payloads.
    fn inputs(&mut self, weights: &BTreeMap<String, Weight>) -> Result<Vec<(String, String)>, ImportError> {
        let specs = &self.ep.graph_module.signature.input_specs;
        let sig = |reason: String| ImportError::Signature { reason };
        if specs.len() != self.graph_json().inputs.len() {
            return Err(sig(format!(
                "{} input specs for {} graph inputs",
                specs.len(),
                self.graph_json().inputs.len()
            )));
        }
        let mut constants = Vec::new();
        let mut users = 0;
        for spec in specs {
            let (name, kind) = match spec {
                InputSpec::Parameter { arg, parameter_name } => {
                    (arg.name.clone(), InputKind::Parameter { fqn: parameter_name.clone() })
                }
                InputSpec::Buffer { arg, buffer_name, persistent } => {
                    (arg.name.clone(), InputKind::Buffer { fqn: buffer_name.clone(), persistent: *persistent })
                }
                InputSpec::TensorConstant { arg, tensor_constant_name } => {
                    (arg.name.clone(), InputKind::Constant { fqn: tensor_constant_name.clone() })
                }
                InputSpec::UserInput { arg: Argument::AsTensor(t) } => {
                    users += 1;
                    (t.name.clone(), InputKind::User { index: users - 1 })
                }
                InputSpec::UserInput { arg } => {
                    return Err(sig(format!("user inputs of kind `{}` are not supported (only tensors)", arg.kind())))
                }
                InputSpec::ConstantInput { name, value } => {
                    constants.push((name.clone(), value.to_string()));
                    continue;
                }
                InputSpec::CustomObj(_) | InputSpec::Token(_) => {
                    return Err(sig("custom-object and effect-token inputs are not supported".into()))
                }
            };
            let weight = match kind.weight_fqn() {
                Some(fqn) => Some(weights.get(fqn).ok_or_else(|| {
                    sig(format!("input `{name}` refers to `{fqn}`, which neither payload config holds"))
                })?),
                None => None,
            };
            let ty = self.tensor_type(&name)?;
            // A complex weight is stored as its (real, imaginary) pairs, viewed as complex.
            let stored = match ty.dtype.complex_part() {
                Some(part) if weight.is_some() => {
                    let mut dims = ty.dims.clone();
                    dims.push(Dim::Static(2));
                    TensorType { dtype: part, dims }
                }
                _ => ty.clone(),
            };
            if let Some(w) = weight {
                self.check_stored_layout(&name, &stored, w)?;
            }
            if let InputKind::User { index } = kind {
                self.bind_symbols(&name, index, &ty);
            }
            let mut value =
                ValueRef { node: self.graph.add_input(Node::new(name.clone(), Op::Input(kind), [stored])), slot: 0 };
            if ty.dtype.is_complex() && weight.is_some() {
                let view = Node::new(format!("{name}.as_complex"), Op::ViewAsComplex(ViewAsComplex), [ty]);
                value = ValueRef { node: self.graph.add_op(view, &[value]), slot: 0 };
            }
            self.values.insert(name, value);
        }
        Ok(constants)
    }

    /// A stored tensor's payload config must describe the tensor the graph reads: same dtype,
    /// sizes and strides as its `tensor_values` entry. Otherwise the bytes would be read with
    /// another layout than the program was traced with.
    fn check_stored_layout(&self, name: &str, ty: &TensorType, w: &Weight) -> Result<(), ImportError> {
        let bad = |reason: String| ImportError::Payload {
            fqn: w.fqn.clone(),
            entry: self.archive.entry_name(&w.entry),
            reason,
        };
        let sizes: Vec<Dim> = w.sizes.iter().map(|&s| Dim::Static(s)).collect();
        if ty.dtype != w.dtype || ty.dims != sizes {
            return Err(bad(format!(
                "its payload config says {}{:?} but the graph reads input `{name}` as {ty}",
                w.dtype, w.sizes
            )));
        }
        let declared = self.graph_json().tensor_values.get(name).map(|m| m.strides.as_slice()).unwrap_or_default();
        let mut strides: Option<Vec<i64>> =
            declared.iter().map(|s| if let SymInt::AsInt(v) = s { Some(*v) } else { None }).collect();
        // A complex tensor read as (real, imaginary) pairs: its strides in parts.
        if w.sizes.len() == declared.len() + 1 {
            strides = strides.map(|st| st.iter().map(|s| s.saturating_mul(2)).chain([1]).collect());
        }
        match strides {
            Some(st) if !st.is_empty() && st != w.strides => Err(bad(format!(
                "its payload config gives strides {:?} but the graph's `{name}` has strides {st:?}",
                w.strides
            ))),
            _ => Ok(()),
        }
    }

    /// The seed input of a graph with random ops, after every other input.
    fn add_rng_seed(&mut self) {
        let ty = TensorType::new(DType::U64, &[2]);
        let id = self.graph.add_input(Node::new("rng_seed".to_string(), Op::Input(InputKind::RngSeed), [ty]));
        self.values.insert(RNG_SEED.to_string(), ValueRef { node: id, slot: 0 });
    }

    /// A user-input dim that is a bare symbol gives that symbol its value at run time; so does
    /// a derived dim `a*s + b` (`8*Dim("kh")`, an image side that must be a multiple of 8), by
    /// solving for `s`, where no input has `s` bare.
    fn bind_symbols(&mut self, name: &str, index: usize, ty: &TensorType) {
        let sizes = self.graph_json().tensor_values.get(name).map(|m| m.sizes.clone()).unwrap_or_default();
        for (dim, d) in ty.dims.iter().enumerate() {
            let Dim::Sym(e) = d else { continue };
            let Some((s, _, _)) = e.linear() else { continue };
            let bare = matches!(e, SymExpr::Sym(_));
            let example = match sizes.get(dim) {
                Some(SymInt::AsExpr(x)) => x.hint.as_ref().and_then(|h| h.get("as_int")?.as_i64()),
                _ => None,
            };
            // The first input dim that gives `s` binds it, unless it was derived and this is bare.
            let replaces = bare && self.derived.contains(s);
            if self.bindings.contains_key(s) && !replaces {
                continue;
            }
            let example = example.and_then(|v| if bare { Some(v) } else { e.solve_linear(v) });
            if bare {
                self.derived.remove(s);
            } else {
                self.derived.insert(s.to_string());
            }
            let binding = SymbolBinding { input: index, input_name: name.to_string(), dim, example };
            self.bindings.insert(s.to_string(), binding);
        }
    }

    fn node(&mut self, node: &schema::Node, names: &mut BTreeSet<String>) -> Result<(), ImportError> {
        let name = node_name(node);
        let stack = node.metadata.get("stack_trace").cloned();
        let origin = Origin {
            target: node.target.clone(),
            output_names: Vec::new(),
            stack_trace: stack.clone(),
            module_path: module_path(node.metadata.get("nn_module_stack")),
            derived_from: None,
        };
        let fail = |reason: String| ImportError::Node {
            node: shown(&name),
            target: shown(&node.target),
            reason,
            stack: origin.source_line().map(str::to_string),
        };
        // A decomposition's failure: a refusal of the program, or a bug of the importer.
        let failed = |why: Fail| match why {
            Fail::Refused(reason) => fail(reason),
            Fail::Bug(reason) => ImportError::Bug { node: shown(&name), target: shown(&node.target), reason },
        };
        if !names.insert(name.clone()) {
            return Err(fail("another node has the same name".into()));
        }
        let special = ops::special(&node.target);
        match special {
            Some(Special::AssertOnData) => return Ok(()),
            Some(Special::AssertOnSizes) if self.asserts_what_holds(node) => return Ok(()),
            Some(Special::ControlFlow(flow)) => {
                let (op, inputs) = self.higher_order(node, flow).map_err(&fail)?;
                return self.add_node(node, name.clone(), origin.clone(), op, &inputs).map_err(&fail);
            }
            _ => {}
        }
        let symbolic_strided = special == Some(Special::StridedView) && has_symbolic_sizes(node);
        if symbolic_strided {
            self.contiguous_operand(node).map_err(&fail)?;
        }
        let by_mask = special == Some(Special::IndexByMask) && self.indexes_by_mask(node);
        let split_by_counts = special == Some(Special::SplitByCounts) && self.takes_counts(node);
        let pad_by_counts =
            special == Some(Special::PadByCounts) && (self.takes_counts(node) || has_symbolic_sizes(node));
        let cat_by_counts = special == Some(Special::CatOfCounts) && self.concatenates_counts(node);
        let size_from_data = self.size_from_data(node, special).map_err(&fail)?;
        let mut args = Args::new(&node.inputs, &self.sym_values).map_err(&fail)?;
        let sym_scalar_out = node.outputs.iter().any(|o| matches!(o, Argument::AsSymBool(_) | Argument::AsSymFloat(_)));
        // Arithmetic on sizes whose float or bool result the program computes.
        let number_op = match special {
            Some(Special::SizeArithmetic(op)) if sym_scalar_out && is_size_number_node(node, op) => Some(op),
            _ => None,
        };
        let lowered = if let Some((lowered, operand)) = size_from_data {
            args.tensor(operand).map_err(&fail)?;
            lowered
        } else if let Some(op) = number_op {
            Lowered::Op(size_number_op(node, op, &mut args.tensors).map_err(&fail)?)
        } else {
            match ops::translation(&node.target) {
                _ if special == Some(Special::Item) && matches!(node.outputs.as_slice(), [Argument::AsSymFloat(_)]) => {
                    Lowered::Recipe(ops::float_item(&mut args).map_err(&failed)?)
                }
                _ if sym_scalar_out => {
                    args.all_tensors();
                    let reason = ops::known_unsupported(&node.target).unwrap_or_else(|| {
                        format!(
                            "`{}` produces a symbolic bool or float (data-dependent control), which is not supported",
                            node.target
                        )
                    });
                    Lowered::Op(Op::Unsupported(Unsupported { target: node.target.clone(), reason: Some(reason) }))
                }
                _ if split_by_counts => Lowered::Recipe(data::split_by_counts(&mut args).map_err(&failed)?),
                _ if pad_by_counts => Lowered::Recipe(data::pad_by_counts(&mut args, &self.ranges()).map_err(&failed)?),
                _ if cat_by_counts => Lowered::Recipe(data::cat_by_counts(&mut args).map_err(&failed)?),
                _ if by_mask => Lowered::Recipe(ops::index_by_mask(&mut args).map_err(&failed)?),
                Some(_) if symbolic_strided => Lowered::Recipe(ops::strided_view(&mut args).map_err(&failed)?),
                Some(_) if has_symbolic_number(node) && ops::symbolic_decomposition(&node.target).is_some() => {
                    let decompose = ops::symbolic_decomposition(&node.target)
                        .ok_or_else(|| failed(bug("the symbolic decomposition it has is gone")))?;
                    Lowered::Recipe(decompose(&mut args).map_err(&failed)?)
                }
                Some(lower) => match lower(&mut args) {
                    Ok(op) => Lowered::Op(op),
                    // Arguments computed from data (`item()` results) cannot be lowered: keep the
                    // node so that `check` lists it with the reason.
                    Err(reason) if has_data_dependent_arg(node) => data_dependent(&mut args, node, &reason),
                    Err(reason) => return Err(fail(reason)),
                },
                None if is_sym_int_node(node, special) => Lowered::Op(self.sym_int_op(node).map_err(&fail)?),
                None => match ops::decomposition(&node.target) {
                    Some(decompose) => match decompose(&mut args) {
                        Ok(recipe) => Lowered::Recipe(recipe),
                        Err(Fail::Refused(reason)) if has_data_dependent_arg(node) => {
                            data_dependent(&mut args, node, &reason)
                        }
                        Err(why) => return Err(failed(why)),
                    },
                    None => {
                        args.all_tensors();
                        Lowered::Op(Op::Unsupported(Unsupported {
                            target: node.target.clone(),
                            reason: ops::known_unsupported(&node.target),
                        }))
                    }
                },
            }
        };
        if args.tensors.len() > MAX_OPERANDS {
            return Err(fail(format!(
                "it reads {} tensors; one node can read at most {MAX_OPERANDS} (split the `cat` or `stack`)",
                args.tensors.len()
            )));
        }
        // `as_strided`'s own offset, if given (see `on_storage`).
        let given_offset = if matches!(lowered, Lowered::Op(Op::AsStrided(_))) {
            args.opt_int("storage_offset").map_err(&fail)?
        } else {
            None
        };
        let tensors = args.tensors;
        let mut inputs = Vec::with_capacity(tensors.len());
        for t in &tensors {
            if t == RNG_SEED && self.depth > 0 {
                return Err(fail(
                    "random ops inside control flow (`cond`, `while_loop`, `scan`, `map`) are not supported".into(),
                ));
            }
            if t == RNG_SEED && !self.values.contains_key(t) {
                self.add_rng_seed();
            }
            let v = self.values.get(t).copied().ok_or_else(|| {
                fail(format!("reads tensor `{}`, which no graph input or earlier node produces", shown(t)))
            })?;
            inputs.push(v);
        }
        let op = match lowered {
            Lowered::Recipe(recipe) => {
                return self.wire(node, (&name, names), &origin, recipe, inputs).map_err(&failed)
            }
            Lowered::Op(Op::AsStrided(AsStrided { size, stride, .. })) => self
                .on_storage((&name, names), (size, stride, given_offset), &tensors[0], &mut inputs[0])
                .map_err(&fail)?,
            Lowered::Op(op @ (Op::Convolution(_) | Op::ConvolutionBackward(_))) => {
                // The weight's rank says how many spatial dims the parameter lists cover.
                let weight = inputs.get(if matches!(op, Op::Convolution(_)) { 1 } else { 2 });
                let spatial = weight.map_or(0, |&w| self.graph.value_type(w).rank().saturating_sub(2));
                expand_convolution_lists(op, spatial)
            }
            Lowered::Op(other) => other,
        };
        self.add_node(node, name.clone(), origin.clone(), op, &inputs).map_err(&fail)
    }

    /// Adds the IR node of `node` and binds its outputs' names.
    fn add_node(
        &mut self,
        node: &schema::Node,
        name: String,
        mut origin: Origin,
        op: Op,
        inputs: &[ValueRef],
    ) -> Result<(), String> {
        let (output_names, types) = self.outputs_of(node)?;
        if output_names.len() > MAX_OPERANDS {
            return Err(format!("it has {} outputs; one node can have at most {MAX_OPERANDS}", output_names.len()));
        }
        origin.output_names.clone_from(&output_names);
        let mut ir = Node::new(name, op, types);
        ir.origin = origin;
        let id = self.graph.add_op(ir, inputs);
        for (slot, out) in output_names.into_iter().enumerate().filter(|(_, n)| !n.is_empty()) {
            if self.values.insert(out.clone(), ValueRef { node: id, slot: slot as u16 }).is_some() {
                return Err(format!("output `{}` is also produced by another node or input", shown(&out)));
            }
        }
        Ok(())
    }

    /// Adds the nodes of a decomposition and binds the node's results to what it returns,
    /// which must have the types the archive records.
    fn wire(
        &mut self,
        node: &schema::Node,
        (name, names): (&str, &mut BTreeSet<String>),
        origin: &Origin,
        recipe: Recipe,
        inputs: Vec<ValueRef>,
    ) -> Result<(), Fail> {
        let (output_names, outputs) = self.outputs_of(node)?;
        let mut wire = Wire { graph: &mut self.graph, names, node: name, origin, count: 0, inputs, outputs };
        let results = recipe(&mut wire)?;
        if results.len() != output_names.len() {
            return Err(bug(format!(
                "the decomposition gives {} results, the node has {}",
                results.len(),
                output_names.len()
            )));
        }
        for ((out, v), declared) in output_names.into_iter().zip(results).zip(&wire.outputs) {
            if out.is_empty() {
                continue;
            }
            let got = self.graph.value_type(v);
            if got != declared {
                return Err(format!(
                    "output `{}` is declared {declared}, but its operands give {got} (decomposed)",
                    shown(&out)
                )
                .into());
            }
            if self.values.insert(out.clone(), v).is_some() {
                return Err(format!("output `{}` is also produced by another node or input", shown(&out)).into());
            }
        }
        Ok(())
    }

    /// `as_strided` indexes the storage under its operand, not the operand's elements in
    /// row-major order: the two differ when the operand is a view (`t()`, `permute`,
    /// channels-last, `narrow`, …). From the operand's recorded strides and storage offset: a
    /// contiguous operand is its storage; a dense one in another order (every element once,
    /// none between) is permuted into storage order first, the offset made relative to its
    /// first element (a missing offset is the operand's own, as in PyTorch); any other layout
    /// (gaps, stride-0 dims) holds storage the program cannot see, and is refused.
    fn on_storage(
        &mut self,
        (name, names): (&str, &mut BTreeSet<String>),
        (size, stride, given): (Vec<i64>, Vec<i64>, Option<i64>),
        operand: &str,
        input: &mut ValueRef,
    ) -> Result<Op, String> {
        let ty = self.graph.value_type(*input).clone();
        let meta = self.graph_json().tensor_values.get(operand);
        let statics = |v: &[SymInt]| -> Option<Vec<i64>> {
            v.iter().map(|s| if let SymInt::AsInt(v) = s { Some(*v) } else { None }).collect()
        };
        let strides = meta.map_or(Some(vec![]), |m| statics(&m.strides));
        let own_offset = match meta.and_then(|m| m.storage_offset.as_ref()) {
            None => Some(0),
            Some(SymInt::AsInt(o)) => Some(*o),
            Some(SymInt::AsExpr(_)) => None,
        };
        let (Some(dims), Some(strides), Some(own_offset)) = (ty.static_dims(), strides, own_offset) else {
            return Err(format!(
                "as_strided of `{}`, whose sizes, strides or storage offset are symbolic",
                shown(operand)
            ));
        };
        let order = if strides.is_empty() { Some((0..dims.len()).collect()) } else { storage_order(&dims, &strides) };
        let Some(order) = order else {
            return Err(format!(
                "as_strided reads the storage under `{}`, a view with gaps or repeats (sizes {dims:?}, strides \
                 {strides:?}, storage offset {own_offset}): that storage holds elements the program does not \
                 have; only operands whose elements fill their storage span are supported",
                shown(operand)
            ));
        };
        let offset = given.unwrap_or(own_offset).checked_sub(own_offset).filter(|o| *o >= 0).ok_or_else(|| {
            format!("as_strided starts before the first element of `{}` (storage offset {own_offset})", shown(operand))
        })?;
        if order.iter().enumerate().any(|(i, &d)| i != d) {
            let permuted: Vec<Dim> = order.iter().map(|&d| ty.dims[d].clone()).collect();
            let perm_name = format!("{name}__storage_order");
            if !names.insert(perm_name.clone()) {
                return Err(format!("another node is named `{}`", shown(&perm_name)));
            }
            let dims_attr = order.iter().map(|&d| d as i64).collect();
            let mut node =
                Node::new(perm_name, Op::Permute(Permute { dims: dims_attr }), [TensorType { dims: permuted, ..ty }]);
            node.origin.target = ops::PERMUTE.into();
            node.origin.derived_from = Some(name.to_string());
            let id = self.graph.add_op(node, &[*input]);
            *input = ValueRef { node: id, slot: 0 };
        }
        Ok(Op::AsStrided(AsStrided { size, stride, offset }))
    }

    /// The operand of a symbolic `as_strided` must lie in its storage row-major from offset 0,
    /// as a contiguous tensor does (its recorded strides say so): then the strides describe a
    /// reordering of its elements.
    fn contiguous_operand(&mut self, node: &schema::Node) -> Result<(), String> {
        let operand = node.inputs.iter().find_map(|a| match &a.arg {
            Argument::AsTensor(t) if a.name == "self" => Some(t.name.clone()),
            _ => None,
        });
        let operand = operand.ok_or("as_strided has no `self` tensor")?;
        let meta = self.graph_json().tensor_values.get(&operand).ok_or("its operand has no type")?;
        let (sizes, strides, offset) = (meta.sizes.clone(), meta.strides.clone(), meta.storage_offset.clone());
        let dims: Vec<SymExpr> =
            sizes.iter().map(|s| self.sym_int(s).map(|d| d.to_expr())).collect::<Result<_, _>>()?;
        let strides: Vec<SymExpr> =
            strides.iter().map(|s| self.sym_int(s).map(|d| d.to_expr().simplify())).collect::<Result<_, _>>()?;
        let mut expected = SymExpr::Int(1);
        let mut row_major = strides.len() == dims.len();
        for (d, st) in dims.iter().zip(&strides).rev() {
            row_major &= *st == expected || d.as_const() == Some(1);
            expected = SymExpr::Mul(vec![expected, d.clone()]).simplify();
        }
        let offset_zero = offset.as_ref().is_none_or(|o| matches!(o, SymInt::AsInt(0)));
        if row_major && offset_zero {
            Ok(())
        } else {
            Err(format!("as_strided with symbolic sizes of `{}`, which is not contiguous", shown(&operand)))
        }
    }

    /// A symbolic-int node: its value is recorded in `sym_int_values`, so the operands need not
    /// be kept.
    fn sym_int_op(&self, node: &schema::Node) -> Result<Op, String> {
        match node.outputs.as_slice() {
            [Argument::AsSymInt(SymIntArgument::AsName(n))] => {
                let value = self.sym_values.get(n).cloned();
                value
                    .map(|value| Op::SymInt(torchtpu_passes::ir::ops::SymInt { value }))
                    .ok_or_else(|| format!("symbolic int `{n}` has no recorded value"))
            }
            _ => Err("expected one symbolic-int output".into()),
        }
    }

    /// Output names and types of a node, in slot order.
    fn outputs_of(&mut self, node: &schema::Node) -> Result<(Vec<String>, Vec<TensorType>), String> {
        let mut names = Vec::new();
        for out in &node.outputs {
            match out {
                Argument::AsTensor(t) => names.push(t.name.clone()),
                Argument::AsTensors(ts) => names.extend(ts.iter().map(|t| t.name.clone())),
                Argument::AsSymInt(SymIntArgument::AsName(n)) => names.push(n.clone()),
                // A symbolic float is a 0-d f32 value (see `size_number_op`), a symbolic bool a
                // 0-d bool.
                Argument::AsSymFloat(v) | Argument::AsSymBool(v) => names.push(sym_name(v)?),
                // An undefined optional result (e.g. a masked-out gradient) keeps its slot.
                Argument::AsNone(_) => names.push(String::new()),
                other => return Err(format!("outputs of kind `{}` are not supported", other.kind())),
            }
        }
        let mut types = Vec::with_capacity(names.len());
        for n in &names {
            if n.is_empty() {
                types.push(TensorType { dtype: DType::F32, dims: vec![] });
            } else if self.sym_values.contains_key(n) {
                types.push(TensorType { dtype: DType::I64, dims: vec![] });
            } else if node
                .outputs
                .iter()
                .any(|o| matches!(o, Argument::AsSymFloat(v) if sym_name(v).as_deref() == Ok(n)))
            {
                types.push(TensorType { dtype: DType::F32, dims: vec![] });
            } else if node
                .outputs
                .iter()
                .any(|o| matches!(o, Argument::AsSymBool(v) if sym_name(v).as_deref() == Ok(n)))
            {
                types.push(TensorType { dtype: DType::Bool, dims: vec![] });
            } else {
                types.push(self.tensor_type(n).map_err(|e| e.to_string())?);
            }
        }
        Ok((names, types))
    }
}

/// A convolution's one-element `stride`, `padding`, `dilation` and `output_padding` repeated
/// for each of its `spatial` dims, as PyTorch expands them.
fn expand_convolution_lists(op: Op, spatial: usize) -> Op {
    let expand = |c: Convolution| {
        let expand = |v: Vec<i64>| if v.len() == 1 && spatial > 1 { vec![v[0]; spatial] } else { v };
        Convolution {
            stride: expand(c.stride),
            padding: expand(c.padding),
            dilation: expand(c.dilation),
            output_padding: expand(c.output_padding),
            ..c
        }
    };
    match op {
        Op::Convolution(c) => Op::Convolution(expand(c)),
        Op::ConvolutionBackward(ConvolutionBackward { forward, mask }) => {
            Op::ConvolutionBackward(ConvolutionBackward { forward: expand(forward), mask })
        }
        other => other,
    }
}

/// What a node's op becomes.
enum Lowered {
    /// One IR node.
    Op(Op),
    /// Several, wired by a decomposition.
    Recipe(Recipe),
}

/// A node whose arguments are computed from data: kept as unsupported so that `check` lists it
/// with the reason.
fn data_dependent(args: &mut Args<'_>, node: &schema::Node, reason: &str) -> Lowered {
    args.all_tensors();
    Lowered::Op(Op::Unsupported(Unsupported {
        target: node.target.clone(),
        reason: Some(format!("{reason} (a data-dependent value)")),
    }))
}

/// True when a list argument holds a symbolic size: an `as_strided` of them is read as a view
/// and a permute.
fn has_symbolic_sizes(node: &schema::Node) -> bool {
    node.inputs
        .iter()
        .any(|a| matches!(&a.arg, Argument::AsSymInts(v) if v.iter().any(|s| matches!(s, SymIntArgument::AsName(_)))))
}

/// The order of `dims` from the largest stride to the smallest when the layout is dense:
/// every element at its own position and no position between them, i.e. a permutation of a
/// contiguous layout. Size-1 dims may have any stride and keep their place. `None` otherwise.
fn storage_order(dims: &[i64], strides: &[i64]) -> Option<Vec<usize>> {
    if dims.len() != strides.len() {
        return None;
    }
    if dims.contains(&0) {
        return Some((0..dims.len()).collect());
    }
    let mut order: Vec<usize> = (0..dims.len()).collect();
    // Stable: size-1 dims stay where they are relative to equal strides.
    order.sort_by_key(|&d| std::cmp::Reverse(if dims[d] == 1 { i64::MIN } else { strides[d] }));
    let moved: Vec<usize> = order.iter().copied().filter(|&d| dims[d] != 1).collect();
    let mut expected = 1i64;
    for &d in moved.iter().rev() {
        if strides[d] != expected {
            return None;
        }
        expected = expected.checked_mul(dims[d])?;
    }
    // Size-1 dims go back to their own positions among the others.
    let mut big = moved.into_iter();
    dims.iter().enumerate().map(|(d, &n)| if n == 1 { Some(d) } else { big.next() }).collect()
}

/// The FX node name; older exports may omit it, then the first output's name stands in.
fn node_name(node: &schema::Node) -> String {
    if let Some(n) = &node.name {
        return n.clone();
    }
    match node.outputs.first() {
        Some(Argument::AsTensor(t)) => t.name.clone(),
        Some(Argument::AsSymInt(SymIntArgument::AsName(n))) => n.clone(),
        _ => node.target.clone(),
    }
}

/// `nn_module_stack` is `key,fqn,class;key,fqn,class…`; keep the fqns, outermost first.
fn module_path(stack: Option<&String>) -> Vec<String> {
    stack
        .map(|s| {
            s.split(';')
                .filter_map(|entry| entry.split(',').nth(1))
                .filter(|fqn| !fqn.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::storage_order;

    #[test]
    fn storage_order_of_dense_layouts_and_none_for_others() {
        assert_eq!(storage_order(&[2, 3], &[3, 1]), Some(vec![0, 1]), "contiguous");
        assert_eq!(storage_order(&[3, 2], &[1, 3]), Some(vec![1, 0]), "t()");
        assert_eq!(storage_order(&[1, 3, 2, 2], &[12, 1, 6, 3]), Some(vec![0, 2, 3, 1]), "channels-last");
        assert_eq!(storage_order(&[4, 1, 3], &[1, 7, 4]), Some(vec![2, 1, 0]), "size-1 dims keep their place");
        assert_eq!(storage_order(&[0, 3], &[5, 9]), Some(vec![0, 1]), "empty: nothing to read");
        assert_eq!(storage_order(&[3, 2], &[4, 2]), None, "stepped slice: gaps");
        assert_eq!(storage_order(&[2, 3], &[0, 1]), None, "expand: repeats");
        assert_eq!(storage_order(&[2, 2], &[2, 2]), None, "overlap");
        assert_eq!(storage_order(&[2], &[1, 1]), None, "rank mismatch");
    }
}
