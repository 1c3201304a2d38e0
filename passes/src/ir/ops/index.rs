//! Indexing, gathers, scatters and embeddings.

use super::rule::*;
use super::*;
use crate::ir::op::*;
use crate::ir::types::*;

op! {
    /// Advanced indexing `x[i0, :, i2]`: inputs `[x, present indices...]`; `present[k]` says
    /// whether position `k` has an index tensor (`None` is a full slice).
    pub struct Index = "index" {
        pub present: Vec<bool> ["indices", via index_slots],
    }
}

impl OpDef for Index {
    fn arity(&self) -> Arity {
        let Index { present } = self;
        Arity::fixed(1 + present.iter().filter(|&&p| p).count(), 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Index { present } = self;
        one(index(x, present, &inputs[1..])?)
    }

    /// With index tensors of one shape (`x[i]`, or `x[i, j]` with `i` and `j` alike): the index
    /// dims and the dims of `x` that are not indexed, each where the result holds it (in place
    /// of the indexed dims when they are adjacent, in front otherwise).
    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let present: Vec<usize> = (0..self.present.len()).filter(|&k| self.present[k]).collect();
        let (x, indices) = (inputs[0], &inputs[1..]);
        if present.is_empty() || indices.iter().any(|t| t.dims != indices[0].dims) {
            return vec![];
        }
        let rank = indices[0].rank();
        let first = if present.windows(2).all(|w| w[1] == w[0] + 1) { present[0] } else { 0 };
        let link = |slot, dim, out_dim| Along { slot, dim, out: 0, out_dim };
        let mut links: Vec<Along> =
            (1..inputs.len()).flat_map(|slot| (0..rank).map(move |j| link(slot, j, first + j))).collect();
        let rest = (0..x.rank()).filter(|d| !present.contains(d));
        links.extend(rest.enumerate().map(|(i, d)| link(0, d, if i < first { i } else { i + rank })));
        links
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Gather)
    }
}

op! {
    /// `index_select(x, dim, idx)`: inputs `[x, idx]`.
    pub struct IndexSelect = "index_select" {
        pub dim: i64 ["dim"],
    }
}

impl OpDef for IndexSelect {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let IndexSelect { dim } = self;
        let d = dim_index(*dim, x.rank())?;
        let idx = integer_indices(inputs[1], "index_select")?;
        if idx.rank() > 1 {
            return Err(format!("index_select takes a 0-d or 1-d index, found {}", show(&idx.dims)));
        }
        let mut dims = x.dims.clone();
        if let Some(slot) = dims.get_mut(d) {
            *slot = idx.dims.first().cloned().unwrap_or(Dim::Static(1));
        }
        one(Expected::exact(x.dtype, &dims))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let d = norm_dim(self.dim, inputs[0].rank());
        let mut links = Along::all_but(inputs, outputs, &[d], true);
        links.push(Along { slot: 1, dim: 0, out: 0, out_dim: d });
        links
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Gather)
    }
}

op! {
    /// `gather(x, dim, index)`: inputs `[x, index]`.
    pub struct Gather = "gather" {
        pub dim: i64 ["dim"],
    }
}

impl OpDef for Gather {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Gather { dim } = self;
        dim_index(*dim, x.rank())?;
        let idx = integer_indices(inputs[1], "gather")?;
        if idx.rank() != x.rank() && !(idx.rank() <= 1 && x.rank() <= 1) {
            return Err(format!("gather's index {} and input {} differ in rank", show(&idx.dims), show(&x.dims)));
        }
        one(Expected::exact(x.dtype, &idx.dims))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let d = norm_dim(self.dim, inputs[0].rank());
        let (x, out) = (inputs[0], &outputs[0]);
        let mut links: Vec<Along> = (0..out.rank()).map(|dim| Along { slot: 1, dim, out: 0, out_dim: dim }).collect();
        let same = |dim: usize| dim != d && x.dims.get(dim).is_some_and(|s| same_dim(s, &out.dims[dim]));
        links.extend((0..x.rank()).filter(|&dim| same(dim)).map(|dim| Along { slot: 0, dim, out: 0, out_dim: dim }));
        links
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Gather)
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

impl OpDef for Scatter {
    fn arity(&self) -> Arity {
        let Scatter { value, .. } = self;
        Arity::fixed(2 + usize::from(value.is_none()), 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Scatter { dim, .. } = self;
        dim_index(*dim, x.rank())?;
        let idx = integer_indices(inputs[1], "scatter")?;
        if idx.rank() != x.rank() && !(idx.rank() <= 1 && x.rank() <= 1) {
            return Err(format!("scatter's index {} and self {} differ in rank", show(&idx.dims), show(&x.dims)));
        }
        one(like(x))
    }

    /// Every dim but `dim`: row by row, where the index (and source) rows match the result's.
    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let out = &outputs[0];
        let d = norm_dim(self.dim, out.rank());
        let mut links = vec![];
        for (slot, x) in inputs.iter().enumerate() {
            let same = |dim: usize| dim != d && x.dims.get(dim).is_some_and(|s| same_dim(s, &out.dims[dim]));
            if x.rank() == out.rank() {
                links.extend((0..x.rank()).filter(|&dim| same(dim)).map(|dim| Along {
                    slot,
                    dim,
                    out: 0,
                    out_dim: dim,
                }));
            }
        }
        links
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Scatter { dim: self.dim })
    }
}

op! {
    /// `index_put(self, indices, values, accumulate)`: inputs `[self, present indices..., values]`.
    pub struct IndexPut = "index_put" {
        pub present: Vec<bool> ["indices", via index_slots],
        pub accumulate: bool ["accumulate"],
    }
}

impl OpDef for IndexPut {
    fn arity(&self) -> Arity {
        let IndexPut { present, .. } = self;
        Arity::fixed(2 + present.iter().filter(|&&p| p).count(), 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        one(like(x))
    }

    /// `x[mask] = v` with one boolean mask over the leading dims and values that broadcast to the
    /// trailing ones is a select (see the emitter): position-wise along every dim.
    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let ([true], [x, mask, values]) = (self.present.as_slice(), inputs) else { return vec![] };
        let trailing = x.rank().saturating_sub(mask.rank());
        let value_dims: Vec<&Dim> = values.dims.iter().skip_while(|d| **d == Dim::Static(1)).collect();
        if mask.dtype != DType::Bool || value_dims.len() > trailing {
            return vec![];
        }
        let mut links = Along::same(&inputs[..1], outputs, 0..x.rank());
        links.extend((0..mask.rank()).map(|d| Along { slot: 1, dim: d, out: 0, out_dim: d }));
        let lead = values.rank() - value_dims.len();
        let shift = x.rank() - value_dims.len();
        for (i, d) in value_dims.iter().enumerate() {
            if same_dim(d, &x.dims[shift + i]) {
                links.push(Along { slot: 2, dim: lead + i, out: 0, out_dim: shift + i });
            }
        }
        links
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::IndexPut { present: self.present.clone(), accumulate: self.accumulate })
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

impl OpDef for SliceScatter {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let SliceScatter { dim, start, end, step } = self;
        let slice = Slice { dim: *dim, start: start.clone(), end: end.clone(), step: *step };
        let window = slice.infer(&[x])?;
        if !window[0].admits(&TensorType { dtype: x.dtype, dims: inputs[1].dims.clone() }) {
            return Err(format!("src {} does not fill the slice {}", show(&inputs[1].dims), window[0]));
        }
        one(like(x))
    }

    /// Every dim but the one written along, and that one too where the slice is all of it
    /// (`x[:, :half] = v` writes the whole first dim: functionalized, a `slice_scatter` along
    /// it from 0 to the end).
    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let rank = inputs[0].rank();
        let d = norm_dim(self.dim, rank);
        let whole = self.start == Dim::Static(0) && self.end == Dim::Static(i64::MAX) && self.step == 1;
        let kept = (0..rank).filter(|&dim| dim != d || whole);
        kept.flat_map(|dim| (0..2).map(move |slot| Along { slot, dim, out: 0, out_dim: dim })).collect()
    }
}

op! {
    /// `select_scatter`: `src` written over `self.select(dim, index)`: inputs `[self, src]`.
    pub struct SelectScatter = "select_scatter" {
        pub dim: i64 ["dim"],
        pub index: i64 ["index"],
    }
}

impl OpDef for SelectScatter {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let SelectScatter { dim, index } = self;
        let window = Select { dim: *dim, index: *index }.infer(&[x])?;
        if !window[0].admits(&TensorType { dtype: x.dtype, dims: inputs[1].dims.clone() }) {
            return Err(format!("src {} does not fill the selected {}", show(&inputs[1].dims), window[0]));
        }
        one(like(x))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let rank = inputs[0].rank();
        let d = norm_dim(self.dim, rank);
        let mut links = Along::all_but(inputs, outputs, &[d], true);
        links.extend((0..inputs[1].rank()).map(|dim| Along {
            slot: 1,
            dim,
            out: 0,
            out_dim: dim + usize::from(dim >= d),
        }));
        links
    }
}

op! {
    /// `masked_scatter`: positions where `mask` is true take `source`'s elements in order:
    /// inputs `[self, mask, source]`.
    pub struct MaskedScatter = "masked_scatter";
}

impl OpDef for MaskedScatter {
    fn arity(&self) -> Arity {
        Arity::fixed(3, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        if inputs[1].dtype != DType::Bool {
            return Err(format!("the mask is {}, not bool", inputs[1].dtype));
        }
        broadcast(&[&x.dims, &inputs[1].dims])?;
        one(like(x))
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::MaskedScatter)
    }
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

impl OpDef for EmbeddingBackward {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let EmbeddingBackward { num_weights, .. } = self;
        let width = x.dims.last().cloned().ok_or("the gradient is 0-d")?;
        one(Expected::exact(x.dtype, &[Dim::Static(*num_weights), width]))
    }
}

op! {
    /// `embedding(weight, indices)`: inputs `[weight, indices]`.
    pub struct Embedding = "embedding";
}

impl OpDef for Embedding {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let (w, idx) = (x, integer_indices(inputs[1], "embedding")?);
        if w.rank() != 2 {
            return Err(format!("the embedding table {} is not 2-d", show(&w.dims)));
        }
        let mut dims = idx.dims.clone();
        dims.push(w.dims[1].clone());
        one(Expected::exact(w.dtype, &dims))
    }

    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        (0..inputs[1].rank()).map(|dim| Along { slot: 1, dim, out: 0, out_dim: dim }).collect()
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
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

impl OpDef for EmbeddingBag {
    fn arity(&self) -> Arity {
        let EmbeddingBag { per_sample_weights, .. } = self;
        Arity::fixed(3 + usize::from(*per_sample_weights), 4)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let EmbeddingBag { include_last_offset, .. } = self;
        let (w, offsets) = (x, inputs[2]);
        if w.rank() != 2 || offsets.rank() != 1 {
            return Err(format!("embedding bag of table {} with offsets {}", show(&w.dims), show(&offsets.dims)));
        }
        let bags = match offsets.dims[0].as_static() {
            Some(n) if *include_last_offset => Some(Dim::Static((n - 1).max(0))),
            Some(n) => Some(Dim::Static(n)),
            None => None,
        };
        Ok(vec![Expected::partial(Some(w.dtype), vec![bags, Some(w.dims[1].clone())])])
    }
}

op! {
    /// `nonzero(x)`: the coordinates of `x`'s non-zero elements in row-major order, `i64[size,
    /// rank]`; inputs `[x]`. How many there are depends on the data: `size` is the export's
    /// symbol for that count, which a bucket sets to its bound (at most `x`'s element count).
    /// Rows past the real count hold zeros; the real count is `sum(x != 0)`, which
    /// `bucket_masks` computes where the symbol's real value is needed.
    pub struct Nonzero = "nonzero" {
        pub size: Dim ["size"],
    }
}

impl OpDef for Nonzero {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let numel: Option<i64> = x.dims.iter().map(Dim::as_static).product();
        if let (Some(n), Some(numel)) = (self.size.as_static(), numel) {
            if n < 0 || n > numel {
                return Err(format!("{n} rows for the non-zero elements of {}, which has {numel}", show(&x.dims)));
            }
        }
        one(Expected::exact(DType::I64, &[self.size.clone(), Dim::Static(x.rank() as i64)]))
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Nonzero)
    }
}

op! {
    /// `item()` of a 0-d integer tensor used as a size: its value as `i64[]`; inputs `[x]`.
    /// `size` is the export's symbol for the value, which a bucket sets to its declared maximum
    /// (a `torch._check(n <= N)`), or to `at_most` at the bucket's sizes where that is smaller
    /// (an expression of the inputs' sizes the program asserts: an MoE's per-expert counts
    /// sum to its tokens times k); `bucket_masks` takes the value, clamped to that range, as
    /// the symbol's real value.
    pub struct Item = "item" {
        pub size: Dim ["size"],
        pub at_most: Option<Dim> ["at_most", optional],
    }
}

impl OpDef for Item {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        if !x.dtype.is_integer() || x.dims.iter().any(|d| d.as_static() != Some(1)) {
            return Err(format!("item() as a size takes one integer, found {x}"));
        }
        one(Expected::exact(DType::I64, &[]))
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Item)
    }
}

op! {
    /// Non-maximum suppression's decision (torchvision's `nms` is this, then a `nonzero`):
    /// inputs `[boxes [N, 4] (x1, y1, x2, y2), scores [N]]`, outputs `[keep bool[N], order
    /// i64[N]]`: `order` sorts the boxes by score, highest first, and `keep[i]` says whether
    /// box `order[i]` is kept — no kept box before it overlaps it by an IoU above the threshold.
    pub struct NmsKeep = "nms_keep" {
        pub iou_threshold: f64 ["iou_threshold"],
    }
}

impl OpDef for NmsKeep {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 2)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let (boxes, scores) = (inputs[0], inputs[1]);
        let n = boxes.dims.first().cloned();
        if boxes.rank() != 2 || boxes.dims[1] != Dim::Static(4) || scores.dims != n.iter().cloned().collect::<Vec<_>>()
        {
            return Err(format!("nms takes boxes [N, 4] and scores [N], found {boxes} and {scores}"));
        }
        if !boxes.dtype.is_float() || boxes.dtype != scores.dtype {
            return Err(format!("nms takes floating-point boxes and scores of one dtype, found {boxes} and {scores}"));
        }
        Ok(vec![Expected::exact(DType::Bool, &scores.dims), Expected::exact(DType::I64, &scores.dims)])
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Nms)
    }
}

/// Index tensors hold integers (bool masks are data-dependent and handled apart).
fn integer_indices<'t>(t: &'t TensorType, what: &str) -> Result<&'t TensorType, String> {
    if t.dtype.is_integer() {
        Ok(t)
    } else {
        Err(format!("{what} takes integer indices, found {}", t.dtype))
    }
}

/// `x[i0, :, i2]`: the broadcast index shape replaces the indexed dims, in place when they are
/// adjacent, in front otherwise (NumPy's rule). Bool masks select a data-dependent number of
/// elements, so their result is left unstated.
fn index(x: &TensorType, present: &[bool], indices: &[&TensorType]) -> Result<Expected, String> {
    if present.len() > x.rank() {
        return Err(format!("{} indices for a tensor of rank {}", present.len(), x.rank()));
    }
    if indices.iter().any(|t| t.dtype == DType::Bool || t.dtype == DType::U8) {
        return Ok(Expected::unstated().with_dtype(x.dtype));
    }
    let shapes: Vec<&[Dim]> = indices.iter().map(|t| t.dims.as_slice()).collect();
    let batch = broadcast(&shapes)?;
    let indexed: Vec<usize> = present.iter().enumerate().filter(|(_, &p)| p).map(|(d, _)| d).collect();
    let Some(&first) = indexed.first() else {
        return Ok(like(x));
    };
    let adjacent = indexed.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<Dim> = (0..x.rank()).filter(|d| !indexed.contains(d)).map(|d| x.dims[d].clone()).collect();
    let dims: Vec<Dim> = if adjacent {
        let before = rest.iter().take(first).cloned();
        before.chain(batch.iter().cloned()).chain(rest.iter().skip(first).cloned()).collect()
    } else {
        batch.iter().cloned().chain(rest.iter().cloned()).collect()
    };
    Ok(Expected::exact(x.dtype, &dims))
}
