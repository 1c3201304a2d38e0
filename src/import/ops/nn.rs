//! Neural-network ops: normalizations, softmax, pooling and embedding lookups.

use torchtpu_passes::ir::ops::{
    AdaptiveAvgPool, AdaptiveAvgPoolBackward, AvgPool, AvgPoolBackward, BatchNormInference, BatchNormTraining, Cdist,
    Col2Im, Embedding, EmbeddingBag, GridSampler, GroupNorm, GroupNormBackward, LayerNorm, LayerNormBackward, MaxPool,
    MaxPoolBackward, Pdist, Softmax, Upsample, UpsampleNearestBackward,
};
use torchtpu_passes::ir::{brief_list, BagMode, GridPadding, Interpolation, Op};

use super::{Args, Translation};

pub(super) fn translation(key: &str) -> Option<Translation> {
    Some(match key {
        "aten._native_batch_norm_legit_no_training.default" => batch_norm,
        "aten.native_layer_norm.default" => layer_norm,
        "aten._softmax.default" => |a| softmax(a, false),
        "aten._log_softmax.default" => |a| softmax(a, true),
        "aten.max_pool2d_with_indices.default" => |a| max_pool(a, 2),
        "aten.max_pool3d_with_indices.default" => |a| max_pool(a, 3),
        "aten.avg_pool2d.default" => |a| avg_pool(a, 2).map(Op::AvgPool),
        "aten.avg_pool3d.default" => |a| avg_pool(a, 3).map(Op::AvgPool),
        "aten._adaptive_avg_pool2d.default" => |a| {
            a.tensor("self")?;
            Ok(Op::AdaptiveAvgPool(AdaptiveAvgPool { spatial: 2 }))
        },
        "aten._adaptive_avg_pool3d.default" => |a| {
            a.tensor("self")?;
            Ok(Op::AdaptiveAvgPool(AdaptiveAvgPool { spatial: 3 }))
        },
        "aten.upsample_nearest2d.vec" => |a| upsample(a, false),
        "aten.upsample_nearest2d.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Upsample(Upsample { bilinear: false, align_corners: false, scales: nearest_scales(a)? }))
        },
        "aten.upsample_bilinear2d.vec" => |a| upsample(a, true),
        "aten.upsample_nearest2d_backward.default" => |a| {
            a.tensor("grad_output")?;
            a.dims("output_size")?;
            let input_size = a.dims("input_size")?;
            Ok(Op::UpsampleNearestBackward(UpsampleNearestBackward { input_size, scales: nearest_scales(a)? }))
        },
        "aten.native_group_norm.default" => group_norm,
        "aten._cdist_forward.default" => |a| {
            a.tensor("x1")?;
            a.tensor("x2")?;
            Ok(Op::Cdist(Cdist { p: a.float("p", None)? }))
        },
        "aten._pdist_forward.default" => |a| {
            a.tensor("self")?;
            Ok(Op::Pdist(Pdist { p: a.float("p", Some(2.0))? }))
        },
        "aten.max_pool2d_with_indices_backward.default" => |a| max_pool_backward(a, 2),
        "aten.max_pool3d_with_indices_backward.default" => |a| max_pool_backward(a, 3),
        "aten.native_layer_norm_backward.default" => |a| {
            a.tensor("grad_out")?;
            a.tensor("input")?;
            let normalized_rank = a.dims("normalized_shape")?.len();
            a.tensor("mean")?;
            a.tensor("rstd")?;
            let has_weight = a.opt_tensor("weight")?;
            let m = a.bools("output_mask")?;
            let mask = [m.first() == Some(&true), m.get(1) == Some(&true), m.get(2) == Some(&true)];
            Ok(Op::LayerNormBackward(LayerNormBackward { normalized_rank, has_weight, mask }))
        },
        "aten.native_group_norm_backward.default" => |a| {
            a.tensor("grad_out")?;
            a.tensor("input")?;
            a.tensor("mean")?;
            a.tensor("rstd")?;
            let has_weight = a.opt_tensor("weight")?;
            let m = a.bools("output_mask")?;
            let mask = [m.first() == Some(&true), m.get(1) == Some(&true), m.get(2) == Some(&true)];
            Ok(Op::GroupNormBackward(GroupNormBackward { groups: a.int("group", None)?, has_weight, mask }))
        },
        "aten.avg_pool2d_backward.default" => |a| {
            a.tensor("grad_output")?;
            Ok(Op::AvgPoolBackward(AvgPoolBackward { forward: avg_pool(a, 2)? }))
        },
        "aten.avg_pool3d_backward.default" => |a| {
            a.tensor("grad_output")?;
            Ok(Op::AvgPoolBackward(AvgPoolBackward { forward: avg_pool(a, 3)? }))
        },
        "aten._adaptive_avg_pool2d_backward.default" => |a| {
            a.tensor("grad_output")?;
            a.tensor("self")?;
            Ok(Op::AdaptiveAvgPoolBackward(AdaptiveAvgPoolBackward))
        },
        "aten._native_batch_norm_legit.default" => |a| batch_norm_legit(a, true),
        "aten._native_batch_norm_legit.no_stats" => |a| batch_norm_legit(a, false),
        "aten._native_batch_norm_legit_functional.default" => |a| {
            a.tensor("input")?;
            let has_weight = a.opt_tensor("weight")?;
            let has_bias = a.opt_tensor("bias")?;
            a.tensor("running_mean")?;
            a.tensor("running_var")?;
            if !a.bool("training", true)? {
                return Err("`training=False` with the functional batch norm is not supported".into());
            }
            let (eps, momentum) = (a.float("eps", None)?, a.float("momentum", None)?);
            Ok(Op::BatchNormTraining(BatchNormTraining {
                eps,
                has_weight,
                has_bias,
                running_stats: true,
                momentum: Some(momentum),
            }))
        },
        "aten._embedding_bag.default" | "aten._embedding_bag_forward_only.default" => embedding_bag,
        "aten.col2im.default" => |a| {
            a.tensor("self")?;
            let pair = |name: &str| -> Result<[i64; 2], String> {
                let v = a.ints(name, None)?;
                <[i64; 2]>::try_from(v.as_slice())
                    .map_err(|_| format!("`{name}` must have 2 entries, found {}", brief_list(&v, ", ")))
            };
            Ok(Op::Col2Im(Col2Im {
                output_size: pair("output_size")?,
                kernel: pair("kernel_size")?,
                dilation: pair("dilation")?,
                padding: pair("padding")?,
                stride: pair("stride")?,
            }))
        },
        "aten.grid_sampler_2d.default" => grid_sampler,
        "aten.embedding.default" => |a| {
            a.tensor("weight")?;
            a.tensor("indices")?;
            Ok(Op::Embedding(Embedding))
        },
        _ => return None,
    })
}

fn batch_norm(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("input")?;
    let has_weight = a.opt_tensor("weight")?;
    let has_bias = a.opt_tensor("bias")?;
    a.tensor("running_mean")?;
    a.tensor("running_var")?;
    Ok(Op::BatchNormInference(BatchNormInference { eps: a.float("eps", None)?, has_weight, has_bias }))
}

fn layer_norm(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("input")?;
    let normalized_rank = a.dims("normalized_shape")?.len();
    let has_weight = a.opt_tensor("weight")?;
    let has_bias = a.opt_tensor("bias")?;
    Ok(Op::LayerNorm(LayerNorm { normalized_rank, eps: a.float("eps", None)?, has_weight, has_bias }))
}

fn softmax(a: &mut Args<'_>, log: bool) -> Result<Op, String> {
    a.tensor("self")?;
    if a.bool("half_to_float", false)? {
        return Err("`half_to_float=True` is not supported (only produced for CUDA half inputs)".into());
    }
    Ok(Op::Softmax(Softmax { dim: a.int("dim", None)?, log, safe: false }))
}

/// A pooling parameter with one entry per spatial dim: PyTorch repeats a single entry
/// (`kernel_size=(6,)` in `max_pool2d` is 6×6).
fn per_spatial_dim(a: &mut Args<'_>, name: &str, default: Option<&[i64]>, spatial: usize) -> Result<Vec<i64>, String> {
    let v = a.ints(name, default)?;
    match v.len() {
        1 => Ok(vec![v[0]; spatial]),
        n if n == spatial => Ok(v),
        n => Err(format!("`{name}` has {n} entries; a {spatial}-d pool takes 1 or {spatial}")),
    }
}

/// The pooling kernel and stride; an empty or omitted stride means "same as the kernel".
fn kernel_and_stride(a: &mut Args<'_>, spatial: usize) -> Result<(Vec<i64>, Vec<i64>), String> {
    let kernel = per_spatial_dim(a, "kernel_size", None, spatial)?;
    let stride = if a.ints("stride", Some(&[]))?.is_empty() {
        kernel.clone()
    } else {
        per_spatial_dim(a, "stride", None, spatial)?
    };
    Ok((kernel, stride))
}

fn max_pool_backward(a: &mut Args<'_>, spatial: usize) -> Result<Op, String> {
    a.tensor("grad_output")?;
    a.tensor("self")?;
    a.tensor("indices")?;
    Ok(Op::MaxPoolBackward(MaxPoolBackward { spatial }))
}

fn max_pool(a: &mut Args<'_>, spatial: usize) -> Result<Op, String> {
    a.tensor("self")?;
    let (kernel, stride) = kernel_and_stride(a, spatial)?;
    Ok(Op::MaxPool(MaxPool {
        stride,
        padding: per_spatial_dim(a, "padding", Some(&[0]), spatial)?,
        dilation: per_spatial_dim(a, "dilation", Some(&[1]), spatial)?,
        ceil_mode: a.bool("ceil_mode", false)?,
        kernel,
    }))
}

fn avg_pool(a: &mut Args<'_>, spatial: usize) -> Result<AvgPool, String> {
    a.tensor("self")?;
    let (kernel, stride) = kernel_and_stride(a, spatial)?;
    Ok(AvgPool {
        stride,
        padding: per_spatial_dim(a, "padding", Some(&[0]), spatial)?,
        ceil_mode: a.bool("ceil_mode", false)?,
        count_include_pad: a.bool("count_include_pad", true)?,
        divisor_override: a.opt_int("divisor_override")?,
        kernel,
    })
}

/// `scales_h` and `scales_w` of a nearest upsampling, when either is given; an absent scale is
/// the sizes' ratio, as a non-positive one is (0).
fn nearest_scales(a: &mut Args<'_>) -> Result<Option<Vec<f64>>, String> {
    Ok(match (a.opt_float("scales_h")?, a.opt_float("scales_w")?) {
        (None, None) => None,
        (h, w) => Some(vec![h.unwrap_or(0.0), w.unwrap_or(0.0)]),
    })
}

fn upsample(a: &mut Args<'_>, bilinear: bool) -> Result<Op, String> {
    a.tensor("input")?;
    let align_corners = if bilinear { a.bool("align_corners", false)? } else { false };
    Ok(Op::Upsample(Upsample { bilinear, align_corners, scales: a.opt_floats("scale_factors")? }))
}

fn group_norm(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("input")?;
    let has_weight = a.opt_tensor("weight")?;
    let has_bias = a.opt_tensor("bias")?;
    Ok(Op::GroupNorm(GroupNorm { groups: a.int("group", None)?, eps: a.float("eps", None)?, has_weight, has_bias }))
}

/// `_native_batch_norm_legit(input, weight, bias, [running_mean, running_var,] training, momentum, eps)`.
fn batch_norm_legit(a: &mut Args<'_>, running_stats: bool) -> Result<Op, String> {
    a.tensor("input")?;
    let has_weight = a.opt_tensor("weight")?;
    let has_bias = a.opt_tensor("bias")?;
    let eps = a.float("eps", None)?;
    if running_stats {
        a.tensor("running_mean")?;
        a.tensor("running_var")?;
        if !a.bool("training", true)? {
            return Ok(Op::BatchNormInference(BatchNormInference { eps, has_weight, has_bias }));
        }
    }
    Ok(Op::BatchNormTraining(BatchNormTraining { eps, has_weight, has_bias, running_stats, momentum: None }))
}

fn embedding_bag(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("weight")?;
    a.tensor("indices")?;
    a.tensor("offsets")?;
    let mode = match a.int("mode", Some(0))? {
        0 => BagMode::Sum,
        1 => BagMode::Mean,
        2 => BagMode::Max,
        m => return Err(format!("`mode={m}` is not one of 0 (sum), 1 (mean), 2 (max)")),
    };
    let per_sample_weights = a.opt_tensor("per_sample_weights")?;
    let padding_idx = Some(a.int("padding_idx", Some(-1))?).filter(|&p| p >= 0);
    Ok(Op::EmbeddingBag(EmbeddingBag {
        mode,
        per_sample_weights,
        include_last_offset: a.bool("include_last_offset", false)?,
        padding_idx,
    }))
}

fn grid_sampler(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("input")?;
    a.tensor("grid")?;
    let mode = match a.int("interpolation_mode", None)? {
        0 => Interpolation::Bilinear,
        1 => Interpolation::Nearest,
        2 => Interpolation::Bicubic,
        m => return Err(format!("`interpolation_mode={m}` is not one of 0 (bilinear), 1 (nearest), 2 (bicubic)")),
    };
    let padding = match a.int("padding_mode", None)? {
        0 => GridPadding::Zeros,
        1 => GridPadding::Border,
        2 => GridPadding::Reflection,
        m => return Err(format!("`padding_mode={m}` is not one of 0 (zeros), 1 (border), 2 (reflection)")),
    };
    Ok(Op::GridSampler(GridSampler { mode, padding, align_corners: a.bool("align_corners", false)? }))
}
