//! The rest: constant makers, size queries, random ops, FFTs, strided views, distances,
//! resampling, image/column transforms and the backward ops.

use super::{dim_index, one, show, Expected, RuleResult};
use crate::ir::ops::{
    AdaptiveAvgPoolBackward, Arange, ArangeSym, AsStrided, Col2Im, ConvolutionBackward, Diagonal, Fft,
    GroupNormBackward, LayerNormBackward, Pad, PadMode, RandPerm, SymSize,
};
use crate::ir::{DType, Dim, Op, Scalar, TensorType};

pub(super) fn infer(op: &Op, inputs: &[&TensorType]) -> RuleResult {
    let first = inputs.first().copied();
    let like = |t: &TensorType| Expected::exact(t.dtype, &t.dims);
    match op {
        Op::Arange(Arange { start, end, step }) => {
            one(Expected::partial(None, vec![Some(Dim::Static(arange_len(*start, *end, *step)?))]))
        }
        Op::ArangeSym(ArangeSym { start: 0, end, step: 1 }) => one(Expected::shape(std::slice::from_ref(end))),
        Op::ArangeSym(ArangeSym { step, .. }) if *step == 0 => Err("arange step 0".into()),
        Op::ArangeSym(_) | Op::RandPerm(RandPerm) => one(Expected::partial(None, vec![None])),
        Op::ScalarTensor(_) => one(Expected::shape(&[])),
        Op::SymInt(_) => one(Expected::exact(DType::I64, &[])),
        Op::SymSize(SymSize { dim }) => {
            let x = first.expect("arity: one operand");
            if x.rank() == 0 {
                return Err("sym_size of a 0-d tensor".into());
            }
            dim_index(*dim, x.rank())?;
            one(Expected::exact(DType::I64, &[]))
        }
        Op::AssertMetadata(_) => Ok(vec![]),
        // The shape of a random tensor is its declared type; only the seed is an operand.
        Op::Rand(_) => one(Expected::unstated()),
        Op::Fft(Fft { dims, inverse, onesided, .. }) => {
            let x = first.expect("arity: one operand");
            let norm = dims.iter().map(|&d| dim_index(d, x.rank())).collect::<Result<Vec<_>, _>>()?;
            let last = norm.last().copied();
            let out = (0..x.rank())
                .map(|d| match (Some(d) == last, *inverse, *onesided) {
                    (true, true, _) => None,
                    (true, false, true) => x.dims[d].as_static().map(|n| Dim::Static(n / 2 + 1)),
                    _ => Some(x.dims[d].clone()),
                })
                .collect();
            one(Expected::partial(None, out))
        }
        Op::AsStrided(AsStrided { size, stride, offset }) => {
            let x = first.expect("arity: one operand");
            strided_in_bounds(x, size, stride, *offset)?;
            one(Expected::exact(x.dtype, &size.iter().map(|&s| Dim::Static(s)).collect::<Vec<_>>()))
        }
        Op::Diagonal(Diagonal { offset, dim1, dim2 }) => {
            let x = first.expect("arity: one operand");
            let (a, b) = (dim_index(*dim1, x.rank())?, dim_index(*dim2, x.rank())?);
            if a == b || x.rank() < 2 {
                return Err(format!("diagonal of dims {dim1} and {dim2} of {}", show(&x.dims)));
            }
            let len = match (x.dims[a].as_static(), x.dims[b].as_static()) {
                (Some(n1), Some(n2)) if *offset >= 0 => Some(Dim::Static(n1.min(n2.saturating_sub(*offset)).max(0))),
                (Some(n1), Some(n2)) => Some(Dim::Static(n1.saturating_add(*offset).min(n2).max(0))),
                _ => None,
            };
            let mut dims: Vec<Option<Dim>> =
                (0..x.rank()).filter(|&d| d != a && d != b).map(|d| Some(x.dims[d].clone())).collect();
            dims.push(len);
            one(Expected::partial(Some(x.dtype), dims))
        }
        Op::PadMode(PadMode { pad, .. }) => {
            let x = first.expect("arity: one operand");
            let constant = Op::Pad(Pad { pad: pad.clone(), value: Scalar::Float(0.0) });
            super::infer(&constant, &[x])
        }
        Op::Cdist(_) => {
            let (a, b) = (inputs[0], inputs[1]);
            if a.rank() < 2 || a.rank() != b.rank() {
                return Err(format!("cdist of {} and {}", show(&a.dims), show(&b.dims)));
            }
            let r = a.rank();
            let mut dims = a.dims[..r - 1].to_vec();
            dims.push(b.dims[r - 2].clone());
            one(Expected::exact(a.dtype, &dims))
        }
        Op::Pdist(_) => {
            let x = first.expect("arity: one operand");
            if x.rank() != 2 {
                return Err(format!("pdist takes a 2-d input, found {}", show(&x.dims)));
            }
            let pairs = x.dims[0].as_static().and_then(|n| n.checked_mul(n - 1)).map(|p| Dim::Static(p / 2));
            one(Expected::partial(Some(x.dtype), vec![pairs]))
        }
        Op::Upsample(_) => {
            let x = first.expect("arity: one operand");
            if x.rank() < 3 {
                return Err(format!("upsampling takes [N, C, *spatial], found {}", show(&x.dims)));
            }
            let mut dims: Vec<Option<Dim>> = x.dims[..2].iter().cloned().map(Some).collect();
            dims.extend(std::iter::repeat_n(None, x.rank() - 2));
            one(Expected::partial(Some(x.dtype), dims))
        }
        Op::Col2Im(Col2Im { output_size, kernel, .. }) => {
            let x = first.expect("arity: one operand");
            let columns = x.rank().checked_sub(2).map(|r| &x.dims[r]);
            let per = kernel[0].checked_mul(kernel[1]).filter(|&k| k > 0);
            let channels = match (columns.and_then(Dim::as_static), per) {
                (Some(c), Some(k)) if c % k == 0 => Some(Dim::Static(c / k)),
                (Some(c), Some(_)) => return Err(format!("{c} columns are not a multiple of the kernel {kernel:?}")),
                _ => None,
            };
            let mut dims: Vec<Option<Dim>> = if x.rank() == 3 { vec![Some(x.dims[0].clone())] } else { vec![] };
            dims.extend([channels, Some(Dim::Static(output_size[0])), Some(Dim::Static(output_size[1]))]);
            one(Expected::partial(Some(x.dtype), dims))
        }
        Op::GridSampler(_) => {
            let (x, grid) = (inputs[0], inputs[1]);
            if x.rank() != 4 || grid.rank() != 4 {
                return Err(format!("grid_sampler_2d of {} at grid {}", show(&x.dims), show(&grid.dims)));
            }
            let dims = [x.dims[0].clone(), x.dims[1].clone(), grid.dims[1].clone(), grid.dims[2].clone()];
            one(Expected::exact(x.dtype, &dims))
        }
        // The gradient of an input has the input's type.
        Op::MaxPoolBackward(_) | Op::AvgPoolBackward(_) | Op::AdaptiveAvgPoolBackward(AdaptiveAvgPoolBackward) => {
            one(like(inputs[1]))
        }
        Op::ConvolutionBackward(ConvolutionBackward { forward, mask }) => {
            let (input, weight) = (inputs[1], inputs[2]);
            // One bias per output channel: weight dim 0, or dim 1 times the groups when transposed.
            let channels = if forward.transposed {
                weight.dims.get(1).and_then(Dim::as_static).and_then(|c| c.checked_mul(forward.groups)).map(Dim::Static)
            } else {
                weight.dims.first().cloned()
            };
            let bias = Expected::partial(Some(weight.dtype), vec![channels]);
            Ok(masked(mask, [like(input), like(weight), bias]))
        }
        Op::LayerNormBackward(LayerNormBackward { mask, .. })
        | Op::GroupNormBackward(GroupNormBackward { mask, .. }) => {
            // PyTorch's kernels do not check this, and read past a smaller gradient.
            if inputs[0].dims != inputs[1].dims {
                return Err(format!(
                    "the gradient {} does not have the input's shape {}",
                    show(&inputs[0].dims),
                    show(&inputs[1].dims)
                ));
            }
            Ok(masked(mask, [like(inputs[1]), Expected::unstated(), Expected::unstated()]))
        }
        _ => Err(format!("internal: `{}` is not in this rule family", op.name())),
    }
}

/// Gradients that `mask` does not ask for are undefined: nothing is said of them.
fn masked(mask: &[bool; 3], results: [Expected; 3]) -> Vec<Expected> {
    results.into_iter().zip(mask).map(|(e, &wanted)| if wanted { e } else { Expected::unstated() }).collect()
}

/// `arange`'s length, `ceil((end - start) / step)` as PyTorch computes it (in double for float
/// arguments), refusing a zero or non-finite step and lengths that do not fit.
fn arange_len(start: Scalar, end: Scalar, step: Scalar) -> Result<i64, String> {
    if let (Scalar::Int(a), Scalar::Int(b), Scalar::Int(s)) = (start, end, step) {
        if s == 0 {
            return Err("arange step 0".into());
        }
        let span = b.checked_sub(a).ok_or("arange's length overflows")?;
        let n = span.checked_add(s - s.signum()).ok_or("arange's length overflows")? / s;
        return Ok(n.max(0));
    }
    let (a, b, s) = (start.as_f64(), end.as_f64(), step.as_f64());
    let n = ((b - a) / s).ceil();
    if !n.is_finite() || s == 0.0 || n > i64::MAX as f64 {
        return Err(format!("arange({start}, {end}, {step}) has no finite length"));
    }
    Ok((n as i64).max(0))
}

/// `as_strided` over `x`'s contiguous storage must stay inside it.
fn strided_in_bounds(x: &TensorType, size: &[i64], stride: &[i64], offset: i64) -> Result<(), String> {
    if size.len() != stride.len() || size.iter().chain(stride).any(|&v| v < 0) || offset < 0 {
        return Err(format!("as_strided sizes {size:?}, strides {stride:?}, offset {offset}"));
    }
    if size.contains(&0) {
        return Ok(());
    }
    let last = size.iter().zip(stride).try_fold(offset, |acc, (&n, &s)| (n - 1).checked_mul(s)?.checked_add(acc));
    let numel = x.static_dims().map(|d| d.iter().try_fold(1i64, |a, &n| a.checked_mul(n)));
    match (last, numel) {
        (None, _) => Err("as_strided reaches past any storage (the offset arithmetic overflows)".into()),
        (Some(l), Some(Some(n))) if l >= n => Err(format!(
            "as_strided (sizes {size:?}, strides {stride:?}, offset {offset}) reads element {l} of a {n}-element input"
        )),
        _ => Ok(()),
    }
}
