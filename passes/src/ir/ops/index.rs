//! Indexing, gathers, scatters and embeddings.

use crate::ir::op::*;
use crate::ir::types::*;

op! {
    /// Advanced indexing `x[i0, :, i2]`: inputs `[x, present indices...]`; `present[k]` says
    /// whether position `k` has an index tensor (`None` is a full slice).
    pub struct Index = "index" {
        pub present: Vec<bool> ["indices", via index_slots],
    }
}

op! {
    /// `index_select(x, dim, idx)`: inputs `[x, idx]`.
    pub struct IndexSelect = "index_select" {
        pub dim: i64 ["dim"],
    }
}

op! {
    /// `gather(x, dim, index)`: inputs `[x, index]`.
    pub struct Gather = "gather" {
        pub dim: i64 ["dim"],
    }
}

op! {
    /// `scatter`/`scatter_add`/`scatter_reduce` along `dim`: inputs `[self, index, (src)]`; a
    /// scalar `value` replaces `src` for `scatter.value`.
    pub struct Scatter = "scatter" {
        pub dim: i64 ["dim"],
        pub reduce: ScatterReduce ["reduce"],
        pub include_self: bool ["include_self"],
        pub value: Option<Scalar> ["value"],
    }
}

op! {
    /// `index_put(self, indices, values, accumulate)`: inputs `[self, present indices..., values]`.
    pub struct IndexPut = "index_put" {
        pub present: Vec<bool> ["indices", via index_slots],
        pub accumulate: bool ["accumulate"],
    }
}

op! {
    /// `slice_scatter`: `src` written over `self[start:end:step]` along `dim`: inputs `[self, src]`.
    pub struct SliceScatter = "slice_scatter" {
        pub dim: i64 ["dim"],
        pub start: Dim ["start"],
        pub end: Dim ["end", via slice_end],
        pub step: i64 ["step"],
    }
}

op! {
    /// `select_scatter`: `src` written over `self.select(dim, index)`: inputs `[self, src]`.
    pub struct SelectScatter = "select_scatter" {
        pub dim: i64 ["dim"],
        pub index: i64 ["index"],
    }
}

op! {
    /// `masked_scatter`: positions where `mask` is true take `source`'s elements in order:
    /// inputs `[self, mask, source]`.
    pub struct MaskedScatter = "masked_scatter";
}

op! {
    /// `embedding_dense_backward`: rows of the gradient summed per index: inputs
    /// `[grad_output, indices]`.
    pub struct EmbeddingBackward = "embedding_backward" {
        pub num_weights: i64 ["num_weights"],
        pub padding_idx: i64 ["padding_idx"],
        pub scale_grad_by_freq: bool ["scale_grad_by_freq"],
    }
}

op! {
    /// `embedding(weight, indices)`: inputs `[weight, indices]`.
    pub struct Embedding = "embedding";
}

op! {
    /// `_embedding_bag` with 1-D indices and offsets: inputs `[weight, indices, offsets,
    /// (per_sample_weights)]`, outputs `[output, offset2bag, bag_size, max_indices]` shaped as
    /// PyTorch's CPU kernel makes them. Entries equal to `padding_idx` are skipped.
    pub struct EmbeddingBag = "embedding_bag" {
        pub mode: BagMode ["mode"],
        pub per_sample_weights: bool ["per_sample_weights"],
        pub include_last_offset: bool ["include_last_offset"],
        pub padding_idx: Option<i64> ["padding_idx"],
    }
}
