//! Views, reshapes, slices, concatenation, padding, and the ops that make a tensor of a shape.

use std::collections::BTreeSet;

use super::rule::*;
use super::*;
use crate::ir::types::*;
use crate::ir::SymExpr;

op! {
    /// `view`/`reshape` to `size` (one entry may be -1): inputs `[x]`.
    pub struct View = "view" {
        pub size: Vec<Dim> ["size"],
    }
}

impl OpDef for View {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let View { size } = self;
        one(same_dtype(view(x, size)?))
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::View)
    }
}

op! {
    /// `permute`: inputs `[x]`.
    pub struct Permute = "permute" {
        pub dims: Vec<i64> ["dims"],
    }
}

impl OpDef for Permute {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Permute { dims } = self;
        one(same_dtype(permute(x, dims)?))
    }

    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let rank = inputs[0].rank();
        self.dims
            .iter()
            .enumerate()
            .map(|(out_dim, &d)| Along { slot: 0, dim: norm_dim(d, rank), out: 0, out_dim })
            .collect()
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `expand` to `size` (-1 keeps a dim): inputs `[x]`.
    pub struct Expand = "expand" {
        pub size: Vec<Dim> ["size"],
    }
}

impl OpDef for Expand {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Expand { size } = self;
        one(same_dtype(expand(x, size)?))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::broadcast(inputs, outputs)
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `unsqueeze`: inputs `[x]`.
    pub struct Unsqueeze = "unsqueeze" {
        pub dim: i64 ["dim"],
    }
}

impl OpDef for Unsqueeze {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Unsqueeze { dim } = self;
        let at = dim_index(*dim, x.rank() + 1)?;
        let mut dims = known(&x.dims);
        dims.insert(at, Some(Dim::Static(1)));
        one(same_dtype(dims))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let at = norm_dim(self.dim, outputs[0].rank());
        (0..inputs[0].rank()).map(|dim| Along { slot: 0, dim, out: 0, out_dim: dim + usize::from(dim >= at) }).collect()
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `squeeze` of `dims` (all size-1 dims when empty): inputs `[x]`.
    pub struct Squeeze = "squeeze" {
        pub dims: Vec<i64> ["dims"],
    }
}

impl OpDef for Squeeze {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Squeeze { dims } = self;
        one(same_dtype(squeeze(x, dims)?))
    }

    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let x = inputs[0];
        let listed = |d: usize| self.dims.is_empty() || self.dims.iter().any(|&s| norm_dim(s, x.rank()) == d);
        let kept = (0..x.rank()).filter(|&d| !(x.dims[d] == Dim::Static(1) && listed(d)));
        kept.enumerate().map(|(out_dim, dim)| Along { slot: 0, dim, out: 0, out_dim }).collect()
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
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

impl OpDef for Slice {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Slice { dim, start, end, step } = self;
        one(same_dtype(slice(x, *dim, start, end, *step)?))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], true)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Slice(self.clone()))
    }
}

op! {
    /// `select.int`: index `index` of dim `dim`, which is removed: inputs `[x]`.
    pub struct Select = "select" {
        pub dim: i64 ["dim"],
        pub index: i64 ["index"],
    }
}

impl OpDef for Select {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Select { dim, index } = self;
        if x.rank() == 0 {
            return Err("select needs a tensor of rank 1 or more".into());
        }
        let d = dim_index(*dim, x.rank())?;
        if let Some(n) = x.dims[d].as_static() {
            if !(-n..n).contains(index) {
                return Err(format!("index {index} is out of range for dim {d} of size {n}"));
            }
        }
        let mut dims = known(&x.dims);
        dims.remove(d);
        one(same_dtype(dims))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], false)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Select { dim: self.dim, index: self.index })
    }
}

op! {
    /// `flip` of `dims`: inputs `[x]`.
    pub struct Flip = "flip" {
        pub dims: Vec<i64> ["dims"],
    }
}

impl OpDef for Flip {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Flip { dims } = self;
        distinct_dims(dims, x.rank())?;
        one(like(x))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let rank = inputs[0].rank();
        Along::all_but(inputs, outputs, &self.dims.iter().map(|&d| norm_dim(d, rank)).collect::<Vec<_>>(), true)
    }
}

op! {
    /// `repeat`: tiles `x` `repeats[i]` times along each dim: inputs `[x]`. A count may be
    /// symbolic (`alibi.repeat(batch, 1, 1)`); `specialize` gives it the bucket's value.
    pub struct Repeat = "repeat" {
        pub repeats: Vec<Dim> ["repeats"],
    }
}

impl OpDef for Repeat {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Repeat { repeats } = self;
        one(same_dtype(repeat(x, repeats)?))
    }

    fn position_wise(&self, inputs: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let shift = self.repeats.len().saturating_sub(inputs[0].rank());
        let once = |d: usize| self.repeats.get(d + shift) == Some(&Dim::Static(1));
        (0..inputs[0].rank())
            .filter(|&d| once(d))
            .map(|dim| Along { slot: 0, dim, out: 0, out_dim: dim + shift })
            .collect()
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Repeat { repeats: self.repeats.clone() })
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

impl OpDef for Pad {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let Pad { pad, .. } = self;
        one(same_dtype(constant_pad(x, pad)?))
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let rank = inputs[0].rank();
        let unpadded = |d: usize| {
            let k = 2 * (rank - 1 - d);
            self.pad.get(k..k + 2).is_none_or(|p| p == [0, 0])
        };
        Along::same(inputs, outputs, (0..rank).filter(|&d| unpadded(d)))
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Pad(self.clone()))
    }
}

op! {
    /// `cat` along `dim`: inputs are the tensors.
    pub struct Cat = "cat" {
        pub dim: i64 ["dim"],
    }
}

impl OpDef for Cat {
    fn arity(&self) -> Arity {
        Arity { inputs: None, outputs: Some(1) }
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let Cat { dim } = self;
        one(cat(*dim, inputs)?)
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let rank = outputs[0].rank();
        let d = norm_dim(self.dim, rank);
        let mut links = vec![];
        for (slot, x) in inputs.iter().enumerate() {
            if x.rank() == rank {
                links.extend((0..rank).filter(|&dim| dim != d).map(|dim| Along { slot, dim, out: 0, out_dim: dim }));
            }
        }
        links
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Cat { dim: self.dim })
    }
}

op! {
    /// `split_with_sizes`: inputs `[x]`, one output per size.
    pub struct SplitWithSizes = "split_with_sizes" {
        pub sizes: Vec<Dim> ["sizes"],
        pub dim: i64 ["dim"],
    }
}

impl OpDef for SplitWithSizes {
    fn arity(&self) -> Arity {
        let SplitWithSizes { sizes, .. } = self;
        Arity::fixed(1, sizes.len())
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let same_dtype = |dims: Vec<Option<Dim>>| Expected::partial(Some(x.dtype), dims);
        let SplitWithSizes { sizes, dim } = self;
        let d = dim_index(*dim, x.rank())?;
        let total: Option<i64> = sizes.iter().map(Dim::as_static).try_fold(0i64, |acc, s| acc.checked_add(s?));
        if let (Some(total), Some(n)) = (total, x.dims[d].as_static()) {
            if total != n {
                return Err(format!("split sizes add up to {total}, but dim {d} has size {n}"));
            }
        }
        let part = |s: &Dim| {
            let mut dims = known(&x.dims);
            dims[d] = Some(s.clone());
            same_dtype(dims)
        };
        Ok(sizes.iter().map(part).collect())
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::all_but(inputs, outputs, &[norm_dim(self.dim, inputs[0].rank())], true)
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Split { dim: self.dim })
    }
}

op! {
    /// `full(size, value)`: no inputs.
    pub struct Full = "full" {
        pub size: Vec<Dim> ["size"],
        pub value: Scalar ["value"],
    }
}

impl OpDef for Full {
    fn arity(&self) -> Arity {
        Arity::fixed(0, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        let Full { size, .. } = self;
        if size.iter().any(|d| d.as_static().is_some_and(|v| v < 0)) {
            return Err(format!("size {} has a negative entry", show(size)));
        }
        one(Expected::shape(size))
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// A constant tensor computed at compile time by `fold_constants`: its values row-major,
    /// as the output type says (bool, i32, i64 or f32); no inputs.
    pub struct Literal = "literal" {
        pub values: Vec<Scalar> ["values"],
    }
}

impl OpDef for Literal {
    fn arity(&self) -> Arity {
        Arity::fixed(0, 1)
    }

    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        // Its element count against its declared type is checked by the verifier.
        Ok(vec![])
    }
}

fn known(dims: &[Dim]) -> Vec<Option<Dim>> {
    dims.iter().cloned().map(Some).collect()
}

/// The positions of `dims` among `rank` dims; refuses repeats.
fn distinct_dims(dims: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let norm = dims.iter().map(|&d| dim_index(d, rank)).collect::<Result<Vec<_>, _>>()?;
    if norm.iter().collect::<BTreeSet<_>>().len() != norm.len() {
        return Err(format!("dims {} repeat a dim", brief(dims)));
    }
    Ok(norm)
}

/// `view`/`reshape`: the same number of elements; one size may be -1 (inferred).
fn view(x: &TensorType, size: &[Dim]) -> Result<Vec<Option<Dim>>, String> {
    let holes = size.iter().filter(|d| d.as_static() == Some(-1)).count();
    if holes > 1 || size.iter().any(|d| d.as_static().is_some_and(|v| v < -1)) {
        return Err(format!("view to {} has more than one -1 or a negative size", show(size)));
    }
    let known_numel: Option<i64> = size
        .iter()
        .filter(|d| d.as_static() != Some(-1))
        .try_fold(1i64, |acc, d| d.as_static().and_then(|v| acc.checked_mul(v)));
    let numel = static_numel(x)?;
    let mut dims = known(size);
    if let (Some(total), Some(part)) = (numel, known_numel) {
        if holes == 1 {
            if part == 0 || total % part != 0 {
                return Err(format!(
                    "view of {} as {} does not divide its {total} elements",
                    show(&x.dims),
                    show(size)
                ));
            }
            let at = size.iter().position(|d| d.as_static() == Some(-1)).expect("one hole");
            dims[at] = Some(Dim::Static(total / part));
        } else if total != part {
            return Err(format!("view of {} ({total} elements) as {} ({part} elements)", show(&x.dims), show(size)));
        }
    } else if holes == 1 {
        let at = size.iter().position(|d| d.as_static() == Some(-1)).expect("one hole");
        dims[at] = None;
    }
    Ok(dims)
}

/// The element count of a static type, checked: `None` for symbolic dims.
fn static_numel(x: &TensorType) -> Result<Option<i64>, String> {
    let Some(dims) = x.static_dims() else { return Ok(None) };
    dims.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .map(Some)
        .ok_or_else(|| format!("{} has more elements than fit in 64 bits", show(&x.dims)))
}

fn permute(x: &TensorType, dims: &[i64]) -> Result<Vec<Option<Dim>>, String> {
    if dims.len() != x.rank() {
        return Err(format!("{} is not a permutation of {} dims", brief(dims), x.rank()));
    }
    let norm = distinct_dims(dims, x.rank())
        .map_err(|_| format!("{} is not a permutation of {} dims", brief(dims), x.rank()))?;
    Ok(norm.iter().map(|&d| Some(x.dims[d].clone())).collect())
}

/// `expand`: trailing dims aligned; a dim of 1 grows, -1 keeps the operand's.
fn expand(x: &TensorType, size: &[Dim]) -> Result<Vec<Option<Dim>>, String> {
    let lead = size
        .len()
        .checked_sub(x.rank())
        .ok_or_else(|| format!("expand of {} to {} has fewer dims than the operand", show(&x.dims), show(size)))?;
    let mut dims = Vec::with_capacity(size.len());
    for (i, s) in size.iter().enumerate() {
        let from = i.checked_sub(lead).map(|k| &x.dims[k]);
        let d = match (from, s.as_static()) {
            (Some(f), Some(-1)) => f.clone(),
            (None, Some(-1)) => return Err(format!("expand to {}: -1 for a new leading dim", show(size))),
            (Some(f), _) if !same_dim(f, s) && f.as_static().is_some_and(|v| v != 1) && s.as_static().is_some() => {
                return Err(format!("expand of {} to {}: a dim of size {f} cannot grow", show(&x.dims), show(size)))
            }
            _ => s.clone(),
        };
        dims.push(Some(d));
    }
    Ok(dims)
}

/// `squeeze`: the listed dims (all when none) that have size 1 are removed.
fn squeeze(x: &TensorType, dims: &[i64]) -> Result<Vec<Option<Dim>>, String> {
    let listed: Vec<usize> = if dims.is_empty() {
        (0..x.rank()).collect()
    } else {
        dims.iter().map(|&d| dim_index(d, x.rank())).collect::<Result<_, _>>()?
    };
    Ok(x.dims
        .iter()
        .enumerate()
        .filter(|(i, d)| !(listed.contains(i) && d.as_static() == Some(1)))
        .map(|(_, d)| Some(d.clone()))
        .collect())
}

/// `slice.Tensor`: PyTorch clamps `start` and `end` into the dim (negative from its end).
fn slice(x: &TensorType, dim: i64, start: &Dim, end: &Dim, step: i64) -> Result<Vec<Option<Dim>>, String> {
    if x.rank() == 0 {
        return Err("slice needs a tensor of rank 1 or more".into());
    }
    if step < 1 {
        return Err(format!("slice step {step} must be positive"));
    }
    let d = dim_index(dim, x.rank())?;
    let mut dims = known(&x.dims);
    dims[d] = match (x.dims[d].as_static(), start.as_static(), end.as_static()) {
        (Some(n), Some(s), Some(e)) => {
            let clamp = |v: i64| if v < 0 { v.saturating_add(n).max(0) } else { v.min(n) };
            let (s, e) = (clamp(s), clamp(e));
            Some(Dim::Static(if e > s { (e - s - 1) / step + 1 } else { 0 }))
        }
        // A whole symbolic dim sliced by `[0:]` keeps its size.
        (None, Some(0), Some(i64::MAX)) if step == 1 => Some(x.dims[d].clone()),
        _ => None,
    };
    Ok(dims)
}

/// `cat`: operands agree except along `dim`, which adds up; legacy 1-D empty tensors are skipped.
fn cat(dim: i64, inputs: &[&TensorType]) -> Result<Expected, String> {
    let dtype = result_type(&inputs.iter().map(|t| (Some(*t), None)).collect::<Vec<_>>());
    let parts: Vec<&TensorType> =
        inputs.iter().copied().filter(|t| !(t.rank() == 1 && t.dims[0].as_static() == Some(0))).collect();
    let Some(first) = parts.first() else {
        return Ok(Expected::exact(dtype, &[Dim::Static(0)]));
    };
    let d = dim_index(dim, first.rank())?;
    if first.rank() == 0 {
        return Err("cat of 0-d tensors".into());
    }
    let mut total = Some(0i64);
    for t in &parts {
        let agree = t.rank() == first.rank() && (0..t.rank()).all(|i| i == d || same_dim(&t.dims[i], &first.dims[i]));
        if !agree {
            return Err(format!("cat operands {} and {} differ outside dim {d}", show(&first.dims), show(&t.dims)));
        }
        total = total.zip(t.dims[d].as_static()).and_then(|(a, b)| a.checked_add(b));
    }
    let mut dims = known(&first.dims);
    dims[d] = match (total, parts.len()) {
        (Some(n), _) => Some(Dim::Static(n)),
        (None, 1) => Some(first.dims[d].clone()),
        _ => None,
    };
    Ok(Expected::partial(Some(dtype), dims))
}

/// `repeat`: as many repeats as dims or more (new leading dims); each dim multiplied.
fn repeat(x: &TensorType, repeats: &[Dim]) -> Result<Vec<Option<Dim>>, String> {
    let lead = repeats
        .len()
        .checked_sub(x.rank())
        .ok_or_else(|| format!("{} repeats for a tensor of rank {}", repeats.len(), x.rank()))?;
    if repeats.iter().any(|r| r.as_static().is_some_and(|r| r < 0)) {
        return Err(format!("negative repeat in {}", show(repeats)));
    }
    repeats
        .iter()
        .enumerate()
        .map(|(i, r)| match (i.checked_sub(lead).map(|k| &x.dims[k]), r) {
            (None, r) => Ok(Some(r.clone())),
            (Some(d), Dim::Static(1)) => Ok(Some(d.clone())),
            (Some(Dim::Static(v)), Dim::Static(r)) => {
                v.checked_mul(*r).map(|n| Some(Dim::Static(n))).ok_or_else(|| "the repeated size overflows".into())
            }
            (Some(d), r) => Ok(Some(Dim::from_expr(SymExpr::Mul(vec![d.to_expr(), r.to_expr()]).simplify()))),
        })
        .collect()
}

/// `constant_pad_nd`: (low, high) pairs from the last dim backwards; negative entries crop.
fn constant_pad(x: &TensorType, pad: &[i64]) -> Result<Vec<Option<Dim>>, String> {
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > x.rank() {
        return Err(format!("padding {} is not (low, high) pairs for at most {} dims", brief(pad), x.rank()));
    }
    let mut dims = known(&x.dims);
    for (k, pair) in pad.chunks(2).enumerate() {
        let d = x.rank() - 1 - k;
        dims[d] = match x.dims[d].as_static() {
            Some(n) => {
                let size = n.checked_add(pair[0]).and_then(|v| v.checked_add(pair[1]));
                match size {
                    Some(s) if s >= 0 => Some(Dim::Static(s)),
                    _ => return Err(format!("padding {} leaves dim {d} of size {n} with a negative size", brief(pad))),
                }
            }
            None if pair == [0, 0] => Some(x.dims[d].clone()),
            None => None,
        };
    }
    Ok(dims)
}
