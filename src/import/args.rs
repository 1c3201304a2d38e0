//! Typed access to a node's named arguments, with schema defaults for omitted ones.
//!
//! The export omits every argument equal to its schema default, so each accessor takes the
//! default from the op's schema (`shared/reference/op_schemas.md`). Tensor arguments are
//! collected in call order; they become the node's input slots.

use std::collections::BTreeMap;

use torchtpu_passes::ir::{DType, Dim, Operand, Scalar};

use super::schema::{scalar_type, Argument, NamedArgument, OptionalTensorArgument, SymIntArgument};

/// The name under which random ops refer to the graph's seed input (FX names never start
/// with `<`).
pub(super) const RNG_SEED: &str = "<rng_seed>";

/// The arguments of one node.
pub(super) struct Args<'a> {
    map: BTreeMap<String, &'a Argument>,
    syms: &'a BTreeMap<String, Dim>,
    /// Names of the tensors read so far, in slot order.
    pub tensors: Vec<String>,
}

type R<T> = Result<T, String>;

fn wrong(name: &str, want: &str, found: &Argument) -> String {
    format!("argument `{name}`: expected {want}, found {}", found.kind())
}

impl<'a> Args<'a> {
    /// Indexes the node's arguments by schema name.
    pub(super) fn new(inputs: &'a [NamedArgument], syms: &'a BTreeMap<String, Dim>) -> R<Args<'a>> {
        let mut map = BTreeMap::new();
        for (i, a) in inputs.iter().enumerate() {
            // Higher-order ops have unnamed arguments; give them positional names.
            let key = if a.name.is_empty() { i.to_string() } else { a.name.clone() };
            if map.insert(key, &a.arg).is_some() {
                return Err(format!("argument `{}` is given twice", a.name));
            }
        }
        Ok(Args { map, syms, tensors: Vec::new() })
    }

    fn get(&self, name: &str) -> Option<&'a Argument> {
        self.map.get(name).copied().filter(|a| !matches!(a, Argument::AsNone(_)))
    }

    fn required(&self, name: &str) -> R<&'a Argument> {
        self.get(name).ok_or_else(|| format!("missing required argument `{name}`"))
    }

    /// True when the argument was given (and is not `None`).
    pub(super) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A required tensor argument.
    pub(super) fn tensor(&mut self, name: &str) -> R<()> {
        match self.required(name)? {
            Argument::AsTensor(t) => {
                self.tensors.push(t.name.clone());
                Ok(())
            }
            Argument::AsOptionalTensor(OptionalTensorArgument::AsTensor(t)) => {
                self.tensors.push(t.name.clone());
                Ok(())
            }
            other => Err(wrong(name, "a tensor", other)),
        }
    }

    /// An optional tensor argument; true if present.
    pub(super) fn opt_tensor(&mut self, name: &str) -> R<bool> {
        match self.get(name) {
            None | Some(Argument::AsOptionalTensor(OptionalTensorArgument::AsNone(_))) => Ok(false),
            Some(_) => self.tensor(name).map(|()| true),
        }
    }

    /// A `Tensor[]` argument; returns how many tensors it held.
    pub(super) fn tensor_list(&mut self, name: &str) -> R<usize> {
        match self.required(name)? {
            Argument::AsTensors(ts) => {
                self.tensors.extend(ts.iter().map(|t| t.name.clone()));
                Ok(ts.len())
            }
            other => Err(wrong(name, "a tensor list", other)),
        }
    }

    /// A `Tensor?[]` argument; returns which positions hold a tensor.
    pub(super) fn optional_tensor_list(&mut self, name: &str) -> R<Vec<bool>> {
        match self.required(name)? {
            Argument::AsOptionalTensors(ts) => Ok(ts
                .iter()
                .map(|t| match t {
                    OptionalTensorArgument::AsTensor(t) => {
                        self.tensors.push(t.name.clone());
                        true
                    }
                    OptionalTensorArgument::AsNone(_) => false,
                })
                .collect()),
            Argument::AsTensors(ts) => {
                self.tensors.extend(ts.iter().map(|t| t.name.clone()));
                Ok(vec![true; ts.len()])
            }
            other => Err(wrong(name, "a list of optional tensors", other)),
        }
    }

    /// The graph's random seed as the next input (random ops read it last).
    pub(super) fn rng_seed(&mut self) {
        self.tensors.push(RNG_SEED.to_string());
    }

    /// Every tensor mentioned by any argument, for ops without a translation (keeps the graph
    /// connected so that `check` and `inspect` still see the data flow).
    pub(super) fn all_tensors(&mut self) {
        for arg in self.map.values() {
            match arg {
                Argument::AsTensor(t) | Argument::AsOptionalTensor(OptionalTensorArgument::AsTensor(t)) => {
                    self.tensors.push(t.name.clone())
                }
                Argument::AsTensors(ts) => self.tensors.extend(ts.iter().map(|t| t.name.clone())),
                Argument::AsOptionalTensors(ts) => self.tensors.extend(ts.iter().filter_map(|t| match t {
                    OptionalTensorArgument::AsTensor(t) => Some(t.name.clone()),
                    OptionalTensorArgument::AsNone(_) => None,
                })),
                _ => {}
            }
        }
    }

    fn sym(&self, name: &str, s: &SymIntArgument) -> R<Dim> {
        match s {
            SymIntArgument::AsInt(v) => Ok(Dim::Static(*v)),
            SymIntArgument::AsName(n) => self
                .syms
                .get(n)
                .cloned()
                .ok_or_else(|| format!("argument `{name}` names symbolic int `{n}`, which no node produces")),
        }
    }

    /// An `int`/`SymInt` argument that must be static.
    pub(super) fn int(&self, name: &str, default: Option<i64>) -> R<i64> {
        match self.get(name) {
            None => default.ok_or_else(|| format!("missing required argument `{name}`")),
            Some(Argument::AsInt(v)) => Ok(*v),
            Some(Argument::AsSymInt(s)) => match self.sym(name, s)? {
                Dim::Static(v) => Ok(v),
                Dim::Sym(e) => Err(format!("argument `{name}` is symbolic (`{e}`) where a constant is needed")),
            },
            Some(other) => Err(wrong(name, "an int", other)),
        }
    }

    /// An `int?` argument.
    pub(super) fn opt_int(&self, name: &str) -> R<Option<i64>> {
        self.get(name).map(|_| self.int(name, None)).transpose()
    }

    /// An `int[]` argument; a single int is accepted for `int[1]` schemas.
    pub(super) fn ints(&self, name: &str, default: Option<&[i64]>) -> R<Vec<i64>> {
        match self.get(name) {
            None => default.map(<[i64]>::to_vec).ok_or_else(|| format!("missing required argument `{name}`")),
            Some(Argument::AsInts(v)) => Ok(v.clone()),
            Some(Argument::AsInt(v)) => Ok(vec![*v]),
            Some(Argument::AsSymInts(_)) => self
                .dims(name)?
                .into_iter()
                .map(|d| d.as_static().ok_or_else(|| format!("argument `{name}` has a symbolic entry `{d}`")))
                .collect(),
            Some(other) => Err(wrong(name, "a list of ints", other)),
        }
    }

    /// A `SymInt` argument, static or symbolic.
    pub(super) fn dim(&self, name: &str, default: Option<Dim>) -> R<Dim> {
        match self.get(name) {
            None => default.ok_or_else(|| format!("missing required argument `{name}`")),
            Some(Argument::AsInt(v)) => Ok(Dim::Static(*v)),
            Some(Argument::AsSymInt(s)) => self.sym(name, s),
            Some(other) => Err(wrong(name, "a symbolic int", other)),
        }
    }

    /// A `SymInt[]` argument.
    pub(super) fn dims(&self, name: &str) -> R<Vec<Dim>> {
        match self.required(name)? {
            Argument::AsInts(v) => Ok(v.iter().map(|&d| Dim::Static(d)).collect()),
            Argument::AsSymInts(v) => v.iter().map(|s| self.sym(name, s)).collect(),
            other => Err(wrong(name, "a list of symbolic ints", other)),
        }
    }

    /// A `bool` argument.
    pub(super) fn bool(&self, name: &str, default: bool) -> R<bool> {
        match self.get(name) {
            None => Ok(default),
            Some(Argument::AsBool(b)) => Ok(*b),
            Some(other) => Err(wrong(name, "a bool", other)),
        }
    }

    /// A `bool[]` argument.
    pub(super) fn bools(&self, name: &str) -> R<Vec<bool>> {
        match self.required(name)? {
            Argument::AsBools(v) => Ok(v.clone()),
            other => Err(wrong(name, "a list of bools", other)),
        }
    }

    /// A `float` argument.
    pub(super) fn float(&self, name: &str, default: Option<f64>) -> R<f64> {
        match self.get(name) {
            None => default.ok_or_else(|| format!("missing required argument `{name}`")),
            Some(Argument::AsFloat(v)) => Ok(v.0),
            Some(Argument::AsInt(v)) => Ok(*v as f64),
            Some(other) => Err(wrong(name, "a float", other)),
        }
    }

    /// A `float?` argument.
    pub(super) fn opt_float(&self, name: &str) -> R<Option<f64>> {
        self.has(name).then(|| self.float(name, None)).transpose()
    }

    /// A `float[]?` argument.
    pub(super) fn opt_floats(&self, name: &str) -> R<Option<Vec<f64>>> {
        match self.get(name) {
            None => Ok(None),
            Some(Argument::AsFloats(v)) => Ok(Some(v.iter().map(|f| f.0).collect())),
            Some(other) => Err(wrong(name, "a list of floats", other)),
        }
    }

    /// A `str` argument.
    pub(super) fn string(&self, name: &str, default: &str) -> R<String> {
        match self.get(name) {
            None => Ok(default.to_string()),
            Some(Argument::AsString(s)) => Ok(s.clone()),
            Some(other) => Err(wrong(name, "a string", other)),
        }
    }

    /// A `Scalar` argument (bool, int or float).
    pub(super) fn scalar(&self, name: &str, default: Option<Scalar>) -> R<Scalar> {
        match self.get(name) {
            None => default.ok_or_else(|| format!("missing required argument `{name}`")),
            Some(a) => scalar_of(a).ok_or_else(|| wrong(name, "a scalar", a)),
        }
    }

    /// An optional `Scalar` argument.
    pub(super) fn opt_scalar(&self, name: &str) -> R<Option<Scalar>> {
        self.get(name).map(|a| scalar_of(a).ok_or_else(|| wrong(name, "a scalar", a))).transpose()
    }

    /// A `Tensor` argument that may carry a Python scalar instead (wrapped number). A symbolic
    /// one (a size, or arithmetic on sizes: `x * x.shape[1]`) is the 0-d value of the node that
    /// computes it, evaluated per bucket as sizes are: it promotes as the Python number would
    /// (a 0-d tensor never widens a dimensioned one of its category).
    pub(super) fn operand(&mut self, name: &str) -> R<Operand> {
        let symbolic = match self.required(name)? {
            Argument::AsTensor(_) => return self.tensor(name).map(|()| Operand::Tensor),
            Argument::AsSymInt(SymIntArgument::AsName(n)) => n.clone(),
            Argument::AsSymInt(SymIntArgument::AsInt(i)) => return Ok(Operand::Scalar(Scalar::Int(*i))),
            Argument::AsSymFloat(v) => match (v.get("as_name"), v.get("as_float")) {
                (Some(n), _) => {
                    n.as_str().ok_or_else(|| format!("argument `{name}`: a symbolic float without a name"))?.to_string()
                }
                (None, Some(f)) => {
                    return f
                        .as_f64()
                        .map(|f| Operand::Scalar(Scalar::Float(f)))
                        .ok_or_else(|| format!("argument `{name}`: a float that is not a number"))
                }
                _ => return Err(format!("argument `{name}`: a symbolic float without a name or value")),
            },
            a => return scalar_of(a).map(Operand::Scalar).ok_or_else(|| wrong(name, "a tensor or scalar", a)),
        };
        self.tensors.push(symbolic);
        Ok(Operand::Tensor)
    }

    /// A `ScalarType?` argument.
    pub(super) fn dtype(&self, name: &str) -> R<Option<DType>> {
        match self.get(name) {
            None => Ok(None),
            Some(Argument::AsScalarType(v)) => {
                scalar_type(*v).map(Some).ok_or_else(|| format!("argument `{name}`: unknown dtype number {v}"))
            }
            Some(other) => Err(wrong(name, "a dtype", other)),
        }
    }
}

fn scalar_of(a: &Argument) -> Option<Scalar> {
    match a {
        Argument::AsBool(b) => Some(Scalar::Bool(*b)),
        Argument::AsInt(i) => Some(Scalar::Int(*i)),
        Argument::AsFloat(f) => Some(Scalar::Float(f.0)),
        _ => None,
    }
}
