//! Reductions and ops along one dim: sums and extrema, arg-reductions, variance, sort, top-k, cumulative sums, histograms and softmax.

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

op! {
    /// Reduction over `dims` (all dims when empty): inputs `[x]`.
    pub struct Reduce = "reduce_" + op {
        pub op: ReduceOp [kind],
        pub dims: Vec<i64> ["dims"],
        pub keepdim: bool ["keepdim"],
        pub dtype: Option<DType> ["dtype"],
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

op! {
    /// `var` over `dims` (all when empty) with Bessel's `correction`: inputs `[x]`.
    pub struct Var = "var" {
        pub dims: Vec<i64> ["dims"],
        pub correction: f64 ["correction"],
        pub keepdim: bool ["keepdim"],
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

op! {
    /// `sort`: inputs `[x]`, outputs `[values, indices]`; NaN sorts as the largest value.
    pub struct Sort = "sort" {
        pub dim: i64 ["dim"],
        pub descending: bool ["descending"],
        pub stable: bool ["stable"],
    }
}

op! {
    /// `topk`: inputs `[x]`, outputs `[values, indices]`.
    pub struct TopK = "top_k" {
        pub k: i64 ["k"],
        pub dim: i64 ["dim"],
        pub largest: bool ["largest"],
    }
}

op! {
    /// `cumsum`/`cumprod`/`logcumsumexp` along `dim`, in `dtype` when given: inputs `[x]`.
    pub struct Cumulative = "" + op {
        pub op: CumulativeOp [kind],
        pub dim: i64 ["dim"],
        pub dtype: Option<DType> ["dtype"],
    }
}
