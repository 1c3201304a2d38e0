//! Neural-network ops: normalizations, softmax, pooling and embedding lookups.

use torchtpu_passes::ir::Op;

use super::{Args, Lowering};

pub fn lowering(key: &str) -> Option<Lowering> {
    Some(match key {
        "aten._native_batch_norm_legit_no_training.default" => batch_norm,
        "aten.native_layer_norm.default" => layer_norm,
        "aten._softmax.default" => |a| softmax(a, false),
        "aten._log_softmax.default" => |a| softmax(a, true),
        "aten.max_pool2d_with_indices.default" => max_pool2d,
        "aten.embedding.default" => |a| {
            a.tensor("weight")?;
            a.tensor("indices")?;
            Ok(Op::Embedding)
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
    Ok(Op::BatchNormInference { eps: a.float("eps", None)?, has_weight, has_bias })
}

fn layer_norm(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("input")?;
    let normalized_rank = a.dims("normalized_shape")?.len();
    let has_weight = a.opt_tensor("weight")?;
    let has_bias = a.opt_tensor("bias")?;
    Ok(Op::LayerNorm { normalized_rank, eps: a.float("eps", None)?, has_weight, has_bias })
}

fn softmax(a: &mut Args<'_>, log: bool) -> Result<Op, String> {
    a.tensor("self")?;
    if a.bool("half_to_float", false)? {
        return Err("`half_to_float=True` is not supported (only produced for CUDA half inputs)".into());
    }
    Ok(Op::Softmax { dim: a.int("dim", None)?, log })
}

fn max_pool2d(a: &mut Args<'_>) -> Result<Op, String> {
    a.tensor("self")?;
    let kernel = a.ints("kernel_size", None)?;
    // An empty or omitted stride means "same as the kernel".
    let stride = a.ints("stride", Some(&[]))?;
    let stride = if stride.is_empty() { kernel.clone() } else { stride };
    Ok(Op::MaxPool2d {
        stride,
        padding: a.ints("padding", Some(&[0, 0]))?,
        dilation: a.ints("dilation", Some(&[1, 1]))?,
        ceil_mode: a.bool("ceil_mode", false)?,
        kernel,
    })
}
