//! What a type rule says: [`Expected`] result types, [`Arity`], and the checks the rules
//! share (dim indices the way PyTorch checks them, broadcasting, dims compared in canonical
//! form).
//!
//! A rule may leave part of a result open ([`Expected`]: a dtype or a dim it cannot tell, such
//! as a size computed from a symbolic input or an adaptive pool's recorded output size; a whole
//! result, such as an undefined gradient), or state only the leading results (a norm's saved
//! statistics); what it states is checked. Graph inputs state nothing (their declared type is
//! the contract), nor do unsupported ops (they have no semantics here).

use crate::ir::{norm_dim, DType, Dim, TensorType};

/// How many tensor operands an op takes and results it makes; `None`: any number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arity {
    /// Tensor operands (node inputs); `None`: any number, at least one.
    pub inputs: Option<usize>,
    /// Results (node outputs); `None`: any number.
    pub outputs: Option<usize>,
}

impl Arity {
    /// A fixed number of operands and results.
    pub fn fixed(inputs: usize, outputs: usize) -> Arity {
        Arity { inputs: Some(inputs), outputs: Some(outputs) }
    }
}

/// One dim an op works along position by position (see `OpDef::position_wise`): operand
/// `slot`'s dim `dim` is result `out`'s dim `out_dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Along {
    /// The operand.
    pub slot: usize,
    /// The operand's dim.
    pub dim: usize,
    /// The result.
    pub out: usize,
    /// The result's dim.
    pub out_dim: usize,
}

impl Along {
    /// Broadcasting operands (dims aligned from the right): every operand dim of the result's
    /// size, into every result.
    pub fn broadcast(inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let mut links = vec![];
        for (out, o) in outputs.iter().enumerate() {
            for (slot, x) in inputs.iter().enumerate() {
                let Some(shift) = o.rank().checked_sub(x.rank()) else { continue };
                for (dim, d) in x.dims.iter().enumerate() {
                    if same_dim(d, &o.dims[dim + shift]) {
                        links.push(Along { slot, dim, out, out_dim: dim + shift });
                    }
                }
            }
        }
        links
    }

    /// Operand 0's dims but `worked` (normalized), into every result of its rank (`keepdim`)
    /// or of its rank less `worked.len()` (the worked dims dropped).
    pub fn all_but(inputs: &[&TensorType], outputs: &[TensorType], worked: &[usize], keepdim: bool) -> Vec<Along> {
        let rank = inputs[0].rank();
        let mut links = vec![];
        for (out, o) in outputs.iter().enumerate() {
            let kept = if keepdim { rank } else { rank - worked.len().min(rank) };
            if o.rank() != kept {
                continue;
            }
            let mut out_dim = 0;
            for dim in 0..rank {
                if worked.contains(&dim) {
                    out_dim += usize::from(keepdim);
                    continue;
                }
                links.push(Along { slot: 0, dim, out, out_dim });
                out_dim += 1;
            }
        }
        links
    }

    /// Operand 0's `dims`, each into the same dim of every result of operand 0's rank.
    pub fn same(
        inputs: &[&TensorType],
        outputs: &[TensorType],
        dims: impl IntoIterator<Item = usize> + Clone,
    ) -> Vec<Along> {
        let rank = inputs[0].rank();
        let mut links = vec![];
        for (out, o) in outputs.iter().enumerate() {
            if o.rank() == rank {
                links.extend(dims.clone().into_iter().filter(|&d| d < rank).map(|dim| Along {
                    slot: 0,
                    dim,
                    out,
                    out_dim: dim,
                }));
            }
        }
        links
    }
}

/// The dims a reduction works along, normalized: `dims`, or all of them when empty.
pub fn worked_dims(dims: &[i64], rank: usize) -> Vec<usize> {
    if dims.is_empty() {
        (0..rank).collect()
    } else {
        dims.iter().map(|&d| norm_dim(d, rank)).collect()
    }
}

/// What a rule says of one result: its dtype and each of its dims, where the rule can tell.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// The element type, when the rule determines it.
    pub dtype: Option<DType>,
    /// The dims; `None` for a dim the rule cannot tell.
    pub dims: Vec<Option<Dim>>,
    /// True when not even the rank is stated (`dims` is then empty).
    pub any_rank: bool,
}

impl Expected {
    /// A result of fully known type.
    pub fn exact(dtype: DType, dims: &[Dim]) -> Expected {
        Expected::shape(dims).with_dtype(dtype)
    }

    /// A result with known dims whose dtype the rule leaves open.
    pub fn shape(dims: &[Dim]) -> Expected {
        Expected::partial(None, dims.iter().cloned().map(Some).collect())
    }

    /// A result of known rank with the given dtype and dims, each possibly open.
    pub fn partial(dtype: Option<DType>, dims: Vec<Option<Dim>>) -> Expected {
        Expected { dtype, dims, any_rank: false }
    }

    /// A result the rule says nothing about (an undefined gradient, a random tensor's shape).
    pub fn unstated() -> Expected {
        Expected { dtype: None, dims: vec![], any_rank: true }
    }

    /// The same dims with the dtype set.
    pub fn with_dtype(mut self, dtype: DType) -> Expected {
        self.dtype = Some(dtype);
        self
    }

    /// True when `ty` agrees with everything this says.
    pub fn admits(&self, ty: &TensorType) -> bool {
        self.dtype.is_none_or(|d| d == ty.dtype)
            && (self.any_rank
                || self.dims.len() == ty.dims.len()
                    && self.dims.iter().zip(&ty.dims).all(|(e, d)| e.as_ref().is_none_or(|e| same_dim(e, d))))
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.dtype {
            Some(d) => write!(f, "{d}")?,
            None => f.write_str("?")?,
        }
        if self.any_rank {
            return f.write_str("[…]");
        }
        f.write_str("[")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match d {
                Some(d) => write!(f, "{d}")?,
                None => f.write_str("?")?,
            }
        }
        f.write_str("]")
    }
}

/// What a rule says of an op's results (the leading ones at least), or why its operands cannot
/// be given to it (wrong rank, dims out of range, shapes that do not broadcast, …).
pub type RuleResult = Result<Vec<Expected>, String>;

/// Two dims are equal when their canonical forms are.
pub fn same_dim(a: &Dim, b: &Dim) -> bool {
    a == b || a.to_expr().simplify() == b.to_expr().simplify()
}

/// A dim index of an operand of rank `rank` (negative counts from the end), checked the way
/// PyTorch checks it; a 0-d operand accepts `0` and `-1`, as PyTorch's reductions do.
pub(crate) fn dim_index(d: i64, rank: usize) -> Result<usize, String> {
    let r = rank.max(1) as i64;
    let n = if d < 0 { d + r } else { d };
    if (0..r).contains(&n) {
        Ok(n as usize)
    } else {
        Err(format!("dim {d} is out of range for a tensor of rank {rank}"))
    }
}

/// `[a,b,c]` for messages.
pub(crate) fn show(dims: &[Dim]) -> String {
    crate::ir::brief_list(dims, ",")
}

/// A list of attribute values for a message, `[1, 2, 3]`, a long one cut short.
pub(crate) fn brief<T: std::fmt::Display>(items: &[T]) -> String {
    crate::ir::brief_list(items, ", ")
}

/// NumPy broadcasting of several shapes.
pub(crate) fn broadcast(shapes: &[&[Dim]]) -> Result<Vec<Dim>, String> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let one = Dim::Static(1);
    let fail = || {
        let all: Vec<String> = shapes.iter().map(|s| show(s)).collect();
        format!("operands {} do not broadcast", all.join(" and "))
    };
    (0..rank)
        .map(|i| {
            let mut out = one.clone();
            for s in shapes {
                let Some(d) = (s.len() + i).checked_sub(rank).map(|k| &s[k]) else {
                    continue;
                };
                if same_dim(d, &one) {
                    continue;
                }
                if same_dim(&out, &one) {
                    out = d.clone();
                } else if !same_dim(&out, d) {
                    return Err(fail());
                }
            }
            Ok(out)
        })
        .collect()
}

/// A result of its operand's type (the same dtype and dims).
pub(crate) fn like(t: &TensorType) -> Expected {
    Expected::exact(t.dtype, &t.dims)
}

/// A single result.
pub(crate) fn one(e: Expected) -> RuleResult {
    Ok(vec![e])
}
