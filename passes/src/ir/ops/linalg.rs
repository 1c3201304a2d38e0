//! Contractions: matrix products and convolutions.

use crate::ir::types::*;

op! {
    /// `mm(a, b)`: inputs `[a, b]`.
    pub struct Mm = "mm";
}

op! {
    /// `bmm(a, b)`: inputs `[a, b]`.
    pub struct Bmm = "bmm";
}

op! {
    /// `beta*c + alpha*(a @ b)`: inputs `[c, a, b]`.
    pub struct Addmm = "addmm" {
        pub beta: Scalar ["beta"],
        pub alpha: Scalar ["alpha"],
    }
}

op! {
    /// `_grouped_mm(a, b, offs)` as mixture-of-experts layers use it: inputs `[a [S, K],
    /// b [G, K, N], offs i32 [G]]`; rows `offs[g-1]..offs[g]` of `a` (from 0 for `g = 0`) are
    /// multiplied by `b[g]`, rows past `offs[G-1]` give zeros (PyTorch leaves them undefined).
    pub struct GroupedMm = "grouped_mm";
}

op! {
    /// N-d convolution: inputs `[x, w]` or `[x, w, bias]`.
    pub struct Convolution = "convolution" {
        pub stride: Vec<i64> ["stride"],
        pub padding: Vec<i64> ["padding"],
        pub dilation: Vec<i64> ["dilation"],
        pub transposed: bool ["transposed"],
        pub output_padding: Vec<i64> ["output_padding"],
        pub groups: i64 ["groups"],
        pub has_bias: bool ["bias"],
    }
}
