//! `--state-in DIR`: the buffers and parameters a program updates (a KV cache, BatchNorm
//! statistics) start from an earlier run's `state_<fqn>.npy` files, as `run` writes them,
//! instead of the values frozen in the artifact, so that such a program runs step after step.
//! Every updated weight must be given, with its dtype (f32 stands for bf16, as `run` writes
//! bf16) and shape.

use std::path::Path;

use torchtpu_passes::ir::DType;

use super::placement::Placement;
use super::weights::DeviceWeights;
use super::{parse_dtype, to_device, RunError};
use crate::artifact::{output_files, Manifest};
use crate::npy::Array;
use crate::pjrt::Client;
use crate::Error;

/// The weights the program updates: each one's name among the weights, the output that
/// carries its new value, and the file `run` writes that to.
pub(super) fn updated(m: &Manifest) -> Vec<(String, usize, String)> {
    let files = output_files(&m.signature.outputs);
    m.signature
        .outputs
        .iter()
        .enumerate()
        .filter_map(|(i, o)| {
            let kind = o.kind.as_deref()?;
            let fqn = kind.strip_prefix("buffer_mutation ").or_else(|| kind.strip_prefix("parameter_mutation "))?;
            Some((fqn.to_string(), i, files[i].clone()))
        })
        .collect()
}

/// Replaces every updated weight on the devices with `dir`'s file of it; how many.
pub(super) fn load(
    client: &Client,
    placement: &Placement,
    m: &Manifest,
    weights: &mut DeviceWeights,
    dir: &Path,
) -> Result<usize, Error> {
    let updated = updated(m);
    if updated.is_empty() {
        let path = dir.display().to_string();
        return Err(RunError::State { path, reason: "this program updates no buffer or parameter".into() }.into());
    }
    for (fqn, _, file) in &updated {
        let path = dir.join(file);
        set(client, placement, m, weights, fqn, Array::read(&path)?, &path.display().to_string())?;
    }
    Ok(updated.len())
}

/// Replaces the updated weight `fqn` on the devices with `a` (named `label` in messages), after
/// checking its dtype (float32 stands for bfloat16) and shape.
pub(super) fn set(
    client: &Client,
    placement: &Placement,
    m: &Manifest,
    weights: &mut DeviceWeights,
    fqn: &str,
    a: Array,
    label: &str,
) -> Result<(), Error> {
    let fail = |reason: String| Error::from(RunError::State { path: label.to_string(), reason });
    let Some((_, output, _)) = updated(m).into_iter().find(|(name, _, _)| name == fqn) else {
        let names: Vec<String> = updated(m).into_iter().map(|(name, _, _)| name).collect();
        return Err(fail(format!("the program updates no weight `{fqn}` (it updates: {})", names.join(", "))));
    };
    let slot = m.weights.order.iter().position(|n| n == fqn).ok_or_else(|| {
        fail(format!("`{fqn}` is updated by the program but a pass changed how it is stored; it cannot be given"))
    })?;
    let sig = &m.signature.outputs[output];
    let dtype = parse_dtype(&sig.dtype).ok_or_else(|| fail(format!("unknown dtype {}", sig.dtype)))?;
    let dims: Vec<i64> = sig.dims.iter().filter_map(serde_json::Value::as_i64).collect();
    let a = match (a.dtype, dtype) {
        (d, w) if d == w => a,
        (DType::F32, DType::BF16) => a.f32_to_bf16().ok_or_else(|| fail("cannot be made bf16".into()))?,
        (d, w) => return Err(fail(format!("`{fqn}` is {w}, the value given is {d}"))),
    };
    if a.shape != dims {
        return Err(fail(format!("`{fqn}` has shape {dims:?}, the value given has {:?}", a.shape)));
    }
    let split = placement.split(m.sharding.as_ref().and_then(|s| s.weights.get(fqn)));
    for d in 0..placement.devices() {
        let (piece, piece_dims) = placement.piece(&a.data, &a.shape, dtype.size_bytes(), split.as_ref(), d)?;
        weights.buffers[d][slot] = to_device(client, d, dtype, &piece, &piece_dims)?;
    }
    Ok(())
}
