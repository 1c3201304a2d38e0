//! Reductions and ops along one dim: sums and extrema, arg-reductions, variance, sort, top-k,
//! cumulative sums, histograms and softmax.

use std::collections::BTreeSet;

use super::rule::*;
use super::*;
use crate::ir::op::*;
use crate::ir::types::*;

op! {
    /// `histc(x, bins, min, max)`: counts of `x`'s elements in `bins` equal bins over
    /// `[min, max]` (the last bin includes `max`, others ignored), in `x`'s dtype: inputs `[x]`.
    pub struct Histc = "histc" {
        pub bins: i64 ["bins"],
        pub min: f64 ["min"],
        pub max: f64 ["max"],
    }
}

impl OpDef for Histc {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Histc { bins, min, max } = self;
        if *bins < 1 || min.partial_cmp(max) != Some(std::cmp::Ordering::Less) {
            return Err(format!("histc needs bins ≥ 1 and min < max, found {bins} bins over [{min}, {max}]"));
        }
        if !x.dtype.is_float() && !x.dtype.is_integer() {
            return Err(format!("histc counts real numbers, found {}", x.dtype));
        }
        one(Expected::exact(x.dtype, &[Dim::Static(*bins)]))
    }

    fn under_padding(&self) -> Padding {
        if self.min < self.max {
            Padding::Rule(PaddingRule::Histc)
        } else {
            Padding::RefusedBecause("takes its range from the data (min = max), which the padding would change")
        }
    }
}

op! {
    /// `_softmax` / `_log_softmax` along `dim`: inputs `[x]`. `safe`: a row whose inputs are
    /// all -inf gives zeros instead of NaN (`_safe_softmax`, the guard of attention with
    /// fully masked rows).
    pub struct Softmax = "softmax" {
        pub dim: i64 ["dim"],
        pub log: bool ["log"],
        pub safe: bool ["safe", optional],
    }
}

impl OpDef for Softmax {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Softmax { dim, .. } = self;
        dim_index(*dim, x.rank())?;
        one(like(x))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], true)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Softmax { dim: self.dim })
    }
}

op! {
    /// Reduction over `dims` (all dims when empty): inputs `[x]`.
    pub struct Reduce = "reduce_" + op {
        pub op: ReduceOp [kind],
        pub dims: Vec<i64> ["dims"],
        pub keepdim: bool ["keepdim"],
        pub dtype: Option<DType> ["dtype"],
    }
}

impl OpDef for Reduce {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Reduce { op: r, dims, keepdim, dtype } = self;
        let out = reduced(x, dims, *keepdim)?;
        let dtype = dtype.unwrap_or(match r {
            ReduceOp::Sum | ReduceOp::Prod if !x.dtype.is_float() && !x.dtype.is_complex() => DType::I64,
            ReduceOp::Any | ReduceOp::All if x.dtype != DType::U8 => DType::Bool,
            _ => x.dtype,
        });
        one(Expected::exact(dtype, &out))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &worked_dims(&self.dims, inputs[0].rank()), self.keepdim)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Reduce { op: self.op, dims: self.dims.clone() })
    }
}

op! {
    /// `argmax`/`argmin` over `dim` (flattened when `None`): inputs `[x]`.
    pub struct ArgReduce = "" + op {
        pub op: ArgReduceOp [kind],
        pub dim: Option<i64> ["dim"],
        pub keepdim: bool ["keepdim"],
    }
}

impl OpDef for ArgReduce {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let ArgReduce { dim, keepdim, .. } = self;
        let out = match dim {
            Some(d) => reduced(x, &[*d], *keepdim)?,
            None if *keepdim => vec![Dim::Static(1); x.rank()],
            None => vec![],
        };
        one(Expected::exact(DType::I64, &out))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        match self.dim {
            Some(d) => Along::all_but(inputs, outputs, &[norm_dim(d, inputs[0].rank())], self.keepdim),
            None => vec![],
        }
    }

    fn under_padding(&self) -> Padding {
        match self.dim {
            Some(dim) => Padding::Rule(PaddingRule::ArgExtremum { op: self.op, dim }),
            None => Padding::Refused,
        }
    }
}

op! {
    /// `var` over `dims` (all when empty) with Bessel's `correction`: inputs `[x]`.
    pub struct Var = "var" {
        pub dims: Vec<i64> ["dims"],
        pub correction: f64 ["correction"],
        pub keepdim: bool ["keepdim"],
    }
}

impl OpDef for Var {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Var { dims, keepdim, .. } = self;
        let out = reduced(x, dims, *keepdim)?;
        one(Expected { dtype: x.dtype.is_float().then_some(x.dtype), ..Expected::shape(&out) })
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &worked_dims(&self.dims, inputs[0].rank()), self.keepdim)
    }
}

op! {
    /// `max.dim`/`min.dim`: inputs `[x]`, outputs `[values, indices]` (first index on ties).
    pub struct ExtremumDim = "extremum_dim" {
        pub max: bool ["max"],
        pub dim: i64 ["dim"],
        pub keepdim: bool ["keepdim"],
    }
}

impl OpDef for ExtremumDim {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 2)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let ExtremumDim { dim, keepdim, .. } = self;
        let out = reduced(x, &[*dim], *keepdim)?;
        Ok(vec![Expected::exact(x.dtype, &out), Expected::exact(DType::I64, &out)])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], self.keepdim)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Extremum { max: self.max, dim: self.dim })
    }
}

op! {
    /// `sort`: inputs `[x]`, outputs `[values, indices]`; NaN sorts as the largest value.
    pub struct Sort = "sort" {
        pub dim: i64 ["dim"],
        pub descending: bool ["descending"],
        pub stable: bool ["stable"],
    }
}

impl OpDef for Sort {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 2)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Sort { dim, .. } = self;
        dim_index(*dim, x.rank())?;
        Ok(vec![like(x), Expected::exact(DType::I64, &x.dims)])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], true)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Sort { descending: self.descending, what: "sorts" })
    }
}

op! {
    /// `topk`: inputs `[x]`, outputs `[values, indices]`.
    pub struct TopK = "top_k" {
        pub k: Dim ["k"],
        pub dim: i64 ["dim"],
        pub largest: bool ["largest"],
    }
}

impl OpDef for TopK {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 2)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let TopK { k, dim, .. } = self;
        let d = dim_index(*dim, x.rank())?;
        if let (Some(k), Some(size)) = (k.as_static(), x.dims.get(d).and_then(Dim::as_static)) {
            if k < 0 || k > size {
                return Err(format!("k = {k} is out of range for dim {d} of {}", show(&x.dims)));
            }
        }
        let mut out = x.dims.clone();
        if let Some(slot) = out.get_mut(d) {
            *slot = k.clone();
        }
        Ok(vec![Expected::exact(x.dtype, &out), Expected::exact(DType::I64, &out)])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], true)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Sort { descending: self.largest, what: "takes the top k" })
    }
}

op! {
    /// `cumsum`/`cumprod`/`logcumsumexp`/`cummax`/`cummin` along `dim`, in `dtype` when given
    /// (not for the extrema, which keep `x`'s): inputs `[x]`.
    pub struct Cumulative = "" + op {
        pub op: CumulativeOp [kind],
        pub dim: i64 ["dim"],
        pub dtype: Option<DType> ["dtype"],
    }
}

impl OpDef for Cumulative {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Cumulative { op, dim, dtype } = self;
        dim_index(*dim, x.rank())?;
        if *op == CumulativeOp::Logcumsumexp && !(x.dtype.is_float() || x.dtype.is_complex()) {
            return Err(format!("logcumsumexp takes floating-point values, found {}", x.dtype));
        }
        if op.is_extremum() {
            if x.dtype.is_complex() || dtype.is_some() {
                return Err(format!("{} takes real values and no dtype, found {} and {dtype:?}", self.name(), x.dtype));
            }
            return one(Expected::exact(x.dtype, &x.dims));
        }
        let dtype = dtype.unwrap_or(if x.dtype.is_float() || x.dtype.is_complex() { x.dtype } else { DType::I64 });
        one(Expected::exact(dtype, &x.dims))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], true)
    }

    // A running reduction at a position reads only the positions before it: padding at the
    // end changes nothing real.
    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

/// The dims left after reducing `dims` (all when empty): removed, or 1 with `keepdim`.
/// Each dim may be named once; a 0-d operand accepts 0 and -1 and stays 0-d.
fn reduced(x: &TensorType, dims: &[i64], keepdim: bool) -> Result<Vec<Dim>, String> {
    let listed: Vec<usize> = dims.iter().map(|&d| dim_index(d, x.rank())).collect::<Result<_, _>>()?;
    if listed.iter().collect::<BTreeSet<_>>().len() != listed.len() {
        return Err(format!("dims {} name a dim more than once", brief(dims)));
    }
    let all = dims.is_empty();
    Ok(x.dims
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match all || listed.contains(&i) {
            true if keepdim => Some(Dim::Static(1)),
            true => None,
            false => Some(d.clone()),
        })
        .collect())
}
