//! Views, reshapes, slices, concatenation, padding, and the ops that make a tensor of a shape.

use crate::ir::types::*;

op! {
    /// `view`/`reshape` to `size` (one entry may be -1): inputs `[x]`.
    pub struct View = "view" {
        pub size: Vec<Dim> ["size"],
    }
}

op! {
    /// `permute`: inputs `[x]`.
    pub struct Permute = "permute" {
        pub dims: Vec<i64> ["dims"],
    }
}

op! {
    /// `expand` to `size` (-1 keeps a dim): inputs `[x]`.
    pub struct Expand = "expand" {
        pub size: Vec<Dim> ["size"],
    }
}

op! {
    /// `unsqueeze`: inputs `[x]`.
    pub struct Unsqueeze = "unsqueeze" {
        pub dim: i64 ["dim"],
    }
}

op! {
    /// `squeeze` of `dims` (all size-1 dims when empty): inputs `[x]`.
    pub struct Squeeze = "squeeze" {
        pub dims: Vec<i64> ["dims"],
    }
}

op! {
    /// `slice.Tensor`: inputs `[x]`. `end` may be `i64::MAX`, meaning "to the end".
    pub struct Slice = "slice" {
        pub dim: i64 ["dim"],
        pub start: Dim ["start"],
        pub end: Dim ["end", via slice_end],
        pub step: i64 ["step"],
    }
}

op! {
    /// `select.int`: index `index` of dim `dim`, which is removed: inputs `[x]`.
    pub struct Select = "select" {
        pub dim: i64 ["dim"],
        pub index: i64 ["index"],
    }
}

op! {
    /// `flip` of `dims`: inputs `[x]`.
    pub struct Flip = "flip" {
        pub dims: Vec<i64> ["dims"],
    }
}

op! {
    /// `repeat`: tiles `x` `repeats[i]` times along each dim: inputs `[x]`.
    pub struct Repeat = "repeat" {
        pub repeats: Vec<i64> ["repeats"],
    }
}

op! {
    /// `constant_pad_nd`: `pad` is (low, high) pairs from the last dim backwards, negative
    /// entries crop: inputs `[x]`.
    pub struct Pad = "pad" {
        pub pad: Vec<i64> ["pad"],
        pub value: Scalar ["value"],
    }
}

op! {
    /// `cat` along `dim`: inputs are the tensors.
    pub struct Cat = "cat" {
        pub dim: i64 ["dim"],
    }
}

op! {
    /// `split_with_sizes`: inputs `[x]`, one output per size.
    pub struct SplitWithSizes = "split_with_sizes" {
        pub sizes: Vec<Dim> ["sizes"],
        pub dim: i64 ["dim"],
    }
}

op! {
    /// `full(size, value)`: no inputs.
    pub struct Full = "full" {
        pub size: Vec<Dim> ["size"],
        pub value: Scalar ["value"],
    }
}

op! {
    /// A constant tensor computed at compile time by `fold_constants`: its values row-major,
    /// as the output type says (bool, i32, i64 or f32); no inputs.
    pub struct Literal = "literal" {
        pub values: Vec<Scalar> ["values"],
    }
}
