//! Contractions (`mm`, `bmm`, `addmm`, `convolution` and its backward) and Fourier transforms.

use torchtpu_passes::ir::ops::{Addmm, Bmm, Convolution, ConvolutionBackward, Fft, GroupedMm, Mm};
use torchtpu_passes::ir::{Op, Scalar};

use super::{Args, Translation};

pub(super) fn translation(key: &str) -> Option<Translation> {
    Some(match key {
        "aten.mm.default" => |a| {
            a.tensor("self")?;
            a.tensor("mat2")?;
            Ok(Op::Mm(Mm))
        },
        "aten.bmm.default" => |a| {
            a.tensor("self")?;
            a.tensor("mat2")?;
            Ok(Op::Bmm(Bmm))
        },
        "aten.addmm.default" => addmm,
        "aten._grouped_mm.default" => grouped_mm,
        // transformers' own grouped matmul (its MoE layers call it where `torch._grouped_mm` is
        // not used: f32 weights under export): `_grouped_mm`'s mixture-of-experts form.
        "transformers.grouped_mm_fallback.default" => |a| {
            a.tensor("input")?;
            a.tensor("weight")?;
            a.tensor("offs")?;
            Ok(Op::GroupedMm(GroupedMm))
        },
        "aten._fft_r2c.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Fft(Fft {
                dims: a.ints("dim", None)?,
                normalization: a.int("normalization", None)?,
                inverse: false,
                onesided: a.bool("onesided", true)?,
            }))
        },
        // The output's last transformed dim has `last_dim_size` entries: the output type says so.
        "aten._fft_c2r.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Fft(Fft {
                dims: a.ints("dim", None)?,
                normalization: a.int("normalization", None)?,
                inverse: true,
                onesided: true,
            }))
        },
        // Complex to complex, forward or inverse (FNet's token mixing).
        "aten._fft_c2c.default" => |a| {
            a.tensor("self")?;
            let dims = a.ints("dim", None)?;
            let normalization = a.int("normalization", None)?;
            Ok(Op::Fft(Fft { dims, normalization, inverse: !a.bool("forward", true)?, onesided: false }))
        },
        // `_convolution` adds backend switches (benchmark, cudnn_enabled, …) that change nothing here.
        "aten.convolution.default" | "aten._convolution.default" => convolution,
        "aten.convolution_backward.default" => |a| {
            a.tensor("grad_output")?;
            a.tensor("input")?;
            a.tensor("weight")?;
            let forward = Convolution {
                stride: a.ints("stride", None)?,
                padding: a.ints("padding", None)?,
                dilation: a.ints("dilation", None)?,
                transposed: a.bool("transposed", false)?,
                output_padding: a.ints("output_padding", None)?,
                groups: a.int("groups", None)?,
                has_bias: false,
            };
            let m = a.bools("output_mask")?;
            let mask = [m.first() == Some(&true), m.get(1) == Some(&true), m.get(2) == Some(&true)];
            Ok(Op::ConvolutionBackward(ConvolutionBackward { forward, mask }))
        },
        _ => return None,
    })
}

fn addmm(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    a.tensor("mat1")?;
    a.tensor("mat2")?;
    Ok(Op::Addmm(Addmm {
        beta: a.scalar("beta", Some(Scalar::Int(1)))?,
        alpha: a.scalar("alpha", Some(Scalar::Int(1)))?,
    }))
}

fn convolution(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("input")?;
    a.tensor("weight")?;
    let has_bias = a.opt_tensor("bias")?;
    Ok(Op::Convolution(Convolution {
        stride: a.ints("stride", None)?,
        padding: a.ints("padding", None)?,
        dilation: a.ints("dilation", None)?,
        transposed: a.bool("transposed", false)?,
        output_padding: a.ints("output_padding", None)?,
        groups: a.int("groups", None)?,
        has_bias,
    }))
}

/// `_grouped_mm(self, mat2, offs, bias, out_dtype)` in its mixture-of-experts form: 2-d rows,
/// 3-d per-group weights and the groups' end offsets.
fn grouped_mm(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    a.tensor("mat2")?;
    if !a.opt_tensor("offs")? {
        return Err("`_grouped_mm` without `offs` (one group per batch entry) is not supported; it is a `bmm`".into());
    }
    if a.opt_tensor("bias")? {
        return Err("`_grouped_mm` with a bias is not supported".into());
    }
    if a.dtype("out_dtype")?.is_some() {
        return Err("`_grouped_mm` with an `out_dtype` is not supported".into());
    }
    Ok(Op::GroupedMm(GroupedMm))
}
