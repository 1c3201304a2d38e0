//! Gathers and scatters: advanced indexing, `index_select`, `gather`, the scatters,
//! `index_put`, embeddings.

use super::{broadcast, dim_index, one, show, Expected, RuleResult};
use crate::ir::ops::{
    Embedding, EmbeddingBackward, EmbeddingBag, Gather, Index, IndexSelect, MaskedScatter, Scatter, Select,
    SelectScatter, Slice, SliceScatter,
};
use crate::ir::{DType, Dim, Op, TensorType};

pub(super) fn infer(op: &Op, inputs: &[&TensorType]) -> RuleResult {
    let x = inputs[0];
    let like_x = || Expected::exact(x.dtype, &x.dims);
    match op {
        Op::Index(Index { present }) => one(index(x, present, &inputs[1..])?),
        Op::IndexSelect(IndexSelect { dim }) => {
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
        Op::Gather(Gather { dim }) => {
            dim_index(*dim, x.rank())?;
            let idx = integer_indices(inputs[1], "gather")?;
            if idx.rank() != x.rank() && !(idx.rank() <= 1 && x.rank() <= 1) {
                return Err(format!("gather's index {} and input {} differ in rank", show(&idx.dims), show(&x.dims)));
            }
            one(Expected::exact(x.dtype, &idx.dims))
        }
        Op::Scatter(Scatter { dim, .. }) => {
            dim_index(*dim, x.rank())?;
            let idx = integer_indices(inputs[1], "scatter")?;
            if idx.rank() != x.rank() && !(idx.rank() <= 1 && x.rank() <= 1) {
                return Err(format!("scatter's index {} and self {} differ in rank", show(&idx.dims), show(&x.dims)));
            }
            one(like_x())
        }
        Op::IndexPut(_) => one(like_x()),
        Op::SliceScatter(SliceScatter { dim, start, end, step }) => {
            let slice = Op::Slice(Slice { dim: *dim, start: start.clone(), end: end.clone(), step: *step });
            let window = super::infer(&slice, &[x])?;
            if !window[0].admits(&TensorType { dtype: x.dtype, dims: inputs[1].dims.clone() }) {
                return Err(format!("src {} does not fill the slice {}", show(&inputs[1].dims), window[0]));
            }
            one(like_x())
        }
        Op::SelectScatter(SelectScatter { dim, index }) => {
            let select = Op::Select(Select { dim: *dim, index: *index });
            let window = super::infer(&select, &[x])?;
            if !window[0].admits(&TensorType { dtype: x.dtype, dims: inputs[1].dims.clone() }) {
                return Err(format!("src {} does not fill the selected {}", show(&inputs[1].dims), window[0]));
            }
            one(like_x())
        }
        Op::MaskedScatter(MaskedScatter) => {
            if inputs[1].dtype != DType::Bool {
                return Err(format!("the mask is {}, not bool", inputs[1].dtype));
            }
            broadcast(&[&x.dims, &inputs[1].dims])?;
            one(like_x())
        }
        Op::Embedding(Embedding) => {
            let (w, idx) = (x, integer_indices(inputs[1], "embedding")?);
            if w.rank() != 2 {
                return Err(format!("the embedding table {} is not 2-d", show(&w.dims)));
            }
            let mut dims = idx.dims.clone();
            dims.push(w.dims[1].clone());
            one(Expected::exact(w.dtype, &dims))
        }
        Op::EmbeddingBackward(EmbeddingBackward { num_weights, .. }) => {
            let width = x.dims.last().cloned().ok_or("the gradient is 0-d")?;
            one(Expected::exact(x.dtype, &[Dim::Static(*num_weights), width]))
        }
        Op::EmbeddingBag(EmbeddingBag { include_last_offset, .. }) => {
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
        _ => Err(format!("internal: `{}` is not in this rule family", op.name())),
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
        return Ok(Expected::exact(x.dtype, &x.dims));
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
