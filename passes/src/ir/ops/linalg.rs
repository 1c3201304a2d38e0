//! Contractions: matrix products and convolutions.

use super::rule::*;
use super::*;
use crate::ir::types::*;

op! {
    /// `mm(a, b)`: inputs `[a, b]`.
    pub struct Mm = "mm";
}

impl OpDef for Mm {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        one(matmul(inputs[0], inputs[1], 0)?)
    }

    fn position_wise(&self, _: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        vec![Along { slot: 0, dim: 0, out: 0, out_dim: 0 }, Along { slot: 1, dim: 1, out: 0, out_dim: 1 }]
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Contract { lhs: (0, 1), rhs: (1, 0) })
    }
}

op! {
    /// `bmm(a, b)`: inputs `[a, b]`.
    pub struct Bmm = "bmm";
}

impl OpDef for Bmm {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        one(matmul(inputs[0], inputs[1], 1)?)
    }

    fn position_wise(&self, _: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        let link = |slot, dim, out_dim| Along { slot, dim, out: 0, out_dim };
        vec![link(0, 0, 0), link(1, 0, 0), link(0, 1, 1), link(1, 2, 2)]
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Contract { lhs: (0, 2), rhs: (1, 1) })
    }
}

op! {
    /// `beta*c + alpha*(a @ b)`: inputs `[c, a, b]`.
    pub struct Addmm = "addmm" {
        pub beta: Scalar ["beta"],
        pub alpha: Scalar ["alpha"],
    }
}

impl OpDef for Addmm {
    fn arity(&self) -> Arity {
        Arity::fixed(3, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let e = matmul(inputs[1], inputs[2], 0)?;
        let dims: Vec<Dim> = e.dims.iter().flatten().cloned().collect();
        broadcast(&[&inputs[0].dims, &dims])
            .map_err(|_| format!("the added term {} does not broadcast to {}", show(&inputs[0].dims), show(&dims)))?;
        one(e)
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        let mut links = Along::broadcast(&inputs[..1], outputs);
        links.extend([Along { slot: 1, dim: 0, out: 0, out_dim: 0 }, Along { slot: 2, dim: 1, out: 0, out_dim: 1 }]);
        links
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Contract { lhs: (1, 1), rhs: (2, 0) })
    }
}

op! {
    /// `_grouped_mm(a, b, offs)` as mixture-of-experts layers use it: inputs `[a [S, K],
    /// b [G, K, N], offs i32 [G]]`; rows `offs[g-1]..offs[g]` of `a` (from 0 for `g = 0`) are
    /// multiplied by `b[g]`, rows past `offs[G-1]` give zeros (PyTorch leaves them undefined).
    pub struct GroupedMm = "grouped_mm";
}

impl OpDef for GroupedMm {
    fn arity(&self) -> Arity {
        Arity::fixed(3, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let (a, b, offs) = (inputs[0], inputs[1], inputs[2]);
        if a.rank() != 2 || b.rank() != 3 || offs.rank() != 1 || offs.dtype != DType::I32 {
            return Err(format!(
                "grouped matmul takes rows [S, K], groups of weights [G, K, N] and i32 offsets [G], found {}, {} \
                 and {}{}",
                show(&a.dims),
                show(&b.dims),
                offs.dtype,
                show(&offs.dims)
            ));
        }
        if !same_dim(&a.dims[1], &b.dims[1]) || !same_dim(&offs.dims[0], &b.dims[0]) {
            return Err(format!(
                "grouped matmul of {} by {} with offsets {}: K or G differ",
                show(&a.dims),
                show(&b.dims),
                show(&offs.dims)
            ));
        }
        let dtype = contraction_dtype(a, b)?;
        one(Expected::partial(dtype, vec![Some(a.dims[0].clone()), Some(b.dims[2].clone())]))
    }

    fn position_wise(&self, _: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        vec![Along { slot: 0, dim: 0, out: 0, out_dim: 0 }]
    }
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

impl OpDef for Convolution {
    fn arity(&self) -> Arity {
        let Convolution { has_bias, .. } = self;
        Arity::fixed(2 + usize::from(*has_bias), 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        one(convolution(self, inputs)?)
    }

    fn position_wise(&self, _: &[&TensorType], _: &[TensorType]) -> Vec<Along> {
        vec![Along { slot: 0, dim: 0, out: 0, out_dim: 0 }]
    }

    fn under_padding(&self) -> Padding {
        Padding::Rule(PaddingRule::Convolution(self.clone()))
    }
}

impl Window {
    /// The output size over an input of `input` with a kernel of `kernel`; `transposed` gives a
    /// transposed convolution's `output_padding`. `None` when the kernel does not fit or the
    /// arithmetic overflows.
    pub fn output(&self, input: i64, kernel: i64, transposed: Option<i64>) -> Option<i64> {
        let reach = self.dilation.checked_mul(kernel.checked_sub(1)?)?;
        let padded = input.checked_add(self.padding.checked_mul(2)?)?;
        match transposed {
            Some(extra) => {
                let span = (input.checked_sub(1)?).checked_mul(self.stride)?;
                span.checked_sub(self.padding.checked_mul(2)?)?.checked_add(reach)?.checked_add(extra)?.checked_add(1)
            }
            None => {
                let room = padded.checked_sub(reach)?.checked_sub(1)?;
                (room >= 0).then(|| room / self.stride + 1)
            }
        }
    }
}

/// The result dtype of a contraction: its operands' (which must agree), except that bf16
/// operands may accumulate into f32 (the `compute_dtype` pass), so that one is left open.
fn contraction_dtype(a: &TensorType, b: &TensorType) -> Result<Option<DType>, String> {
    if a.dtype != b.dtype {
        return Err(format!("operands are {} and {}; a contraction takes one dtype", a.dtype, b.dtype));
    }
    Ok((a.dtype != DType::BF16).then_some(a.dtype))
}

/// `[..batch, m, k] x [..batch, k, n] -> [..batch, m, n]` with `batch` leading dims.
fn matmul(a: &TensorType, b: &TensorType, batch: usize) -> Result<Expected, String> {
    let rank = batch + 2;
    let (ad, bd) = (&a.dims, &b.dims);
    if ad.len() != rank || bd.len() != rank {
        return Err(format!("matmul operands {} and {} are not rank {rank}", show(ad), show(bd)));
    }
    if !same_dim(&ad[batch + 1], &bd[batch]) {
        return Err(format!("contracting dims differ: {} and {}", show(ad), show(bd)));
    }
    if (0..batch).any(|i| !same_dim(&ad[i], &bd[i])) {
        return Err(format!("batch dims differ: {} and {}", show(ad), show(bd)));
    }
    let mut dims: Vec<Dim> = ad[..batch + 1].to_vec();
    dims.push(bd[batch + 1].clone());
    Ok(Expected { dtype: contraction_dtype(a, b)?, ..Expected::shape(&dims) })
}

/// `[N, C_in, *spatial] * [C_out, C_in / groups, *kernel] -> [N, C_out, *out]`; transposed:
/// weight `[C_in, C_out / groups, *kernel]`.
fn convolution(conv: &Convolution, inputs: &[&TensorType]) -> Result<Expected, String> {
    let Convolution { stride, padding, dilation, transposed, output_padding, groups, has_bias } = conv;
    let (x, w) = (inputs[0], inputs[1]);
    let n = stride.len();
    if [padding.len(), dilation.len()].iter().any(|&l| l != n) || (*transposed && output_padding.len() != n) {
        return Err(format!(
            "stride, padding and dilation have {n}, {} and {} entries; they must have one per spatial dim",
            padding.len(),
            dilation.len()
        ));
    }
    if x.rank() != n + 2 || w.rank() != n + 2 {
        return Err(format!(
            "a {n}-d convolution takes an input and a weight of rank {}, found {} and {}",
            n + 2,
            show(&x.dims),
            show(&w.dims)
        ));
    }
    if *groups < 1 || stride.iter().chain(dilation).any(|&v| v < 1) || padding.iter().any(|&v| v < 0) {
        return Err(format!(
            "groups {groups}, stride {stride:?}, dilation {dilation:?} or padding {padding:?} is out of range"
        ));
    }
    // `dim * groups`, when it can be told without symbolic arithmetic.
    let times = |d: &Dim| match d.as_static() {
        Some(v) => v.checked_mul(*groups).map(Dim::Static),
        None => (*groups == 1).then(|| d.clone()),
    };
    let (c_in, c_out) = if *transposed {
        (Some(w.dims[0].clone()), times(&w.dims[1]))
    } else {
        (times(&w.dims[1]), Some(w.dims[0].clone()))
    };
    if let Some(c_in) = c_in.filter(|c| !same_dim(&x.dims[1], c)) {
        return Err(format!(
            "the input has {} channels but the weight {} with {groups} groups takes {c_in}",
            x.dims[1],
            show(&w.dims)
        ));
    }
    if *has_bias {
        let b = inputs[2];
        if b.rank() != 1 || c_out.as_ref().is_some_and(|c| !same_dim(&b.dims[0], c)) {
            return Err(format!("the bias {} is not one value per output channel", show(&b.dims)));
        }
    }
    let mut dims = vec![Some(x.dims[0].clone()), c_out];
    for i in 0..n {
        let (input, kernel) = (x.dims[i + 2].as_static(), w.dims[i + 2].as_static());
        let geometry = Window { stride: stride[i], padding: padding[i], dilation: dilation[i] };
        let out = input.zip(kernel).map(|(input, kernel)| {
            let extra = if *transposed { Some(output_padding[i]) } else { None };
            geometry
                .output(input, kernel, extra)
                .ok_or_else(|| format!("the kernel {} does not fit the padded input {}", show(&w.dims), show(&x.dims)))
        });
        let out = out.transpose()?;
        dims.push(out.map(Dim::Static));
    }
    Ok(Expected::partial(contraction_dtype(x, w)?, dims))
}

/// One spatial dim of a sliding window (convolution or pooling).
pub(super) struct Window {
    pub stride: i64,
    pub padding: i64,
    pub dilation: i64,
}
