//! Derived weights: the values of `InputKind::Derived` inputs that passes create (e.g. a
//! convolution with a BatchNorm folded in), computed on the host from the archive's weights,
//! in f64 and stored as f32.

use torchtpu_passes::ir::{DType, WeightRecipe};

use crate::import::Program;
use crate::Error;

/// A stored weight as f64 values (f32 weights only: passes fold nothing else).
fn values(program: &Program, fqn: &str) -> Result<Vec<f64>, Error> {
    let w =
        program.weights.get(fqn).ok_or_else(|| Error::Unsupported(format!("derived weight reads unknown `{fqn}`")))?;
    if w.dtype != DType::F32 {
        return Err(Error::Unsupported(format!("derived weight reads `{fqn}` of dtype {}, expected f32", w.dtype)));
    }
    let bytes = w.contiguous_bytes(&program.archive)?;
    Ok(bytes.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect())
}

fn optional(program: &Program, fqn: Option<&String>, len: usize, default: f64) -> Result<Vec<f64>, Error> {
    fqn.map_or_else(|| Ok(vec![default; len]), |f| values(program, f))
}

/// `gamma / sqrt(var + eps)` per channel.
fn bn_scale(program: &Program, gamma: Option<&String>, var: &str, eps: f64) -> Result<Vec<f64>, Error> {
    let var = values(program, var)?;
    let gamma = optional(program, gamma, var.len(), 1.0)?;
    Ok(var.iter().zip(&gamma).map(|(v, g)| g / (v + eps).sqrt()).collect())
}

/// The recipe's values in row-major order, as f32.
pub fn compute(program: &Program, recipe: &WeightRecipe) -> Result<Vec<f32>, Error> {
    Ok(compute_f64(program, recipe)?.into_iter().map(|v| v as f32).collect())
}

/// `values` (row-major, shape `dims`) with zeros appended up to `padded` in each dim; a dim
/// with `blocks[d] > 1` is that many equal blocks, each padded at its own end.
fn zero_pad(values: &[f64], dims: &[i64], padded: &[i64], blocks: &[i64]) -> Result<Vec<f64>, Error> {
    let numel = |d: &[i64]| d.iter().product::<i64>() as usize;
    let blocks_of = |d: usize| blocks.get(d).copied().unwrap_or(1).max(1);
    let valid = values.len() == numel(dims)
        && dims.len() == padded.len()
        && (0..dims.len()).all(|d| {
            let b = blocks_of(d);
            padded[d] >= dims[d] && dims[d] % b == 0 && padded[d] % b == 0
        });
    if !valid {
        return Err(Error::Unsupported(format!(
            "cannot pad {} values of shape {dims:?} to {padded:?} in blocks {blocks:?}",
            values.len()
        )));
    }
    let mut out = vec![0.0; numel(padded)];
    let rank = dims.len();
    for (i, &v) in values.iter().enumerate() {
        // The flat index in the padded shape: each coordinate moved to its block's padded
        // start, wider strides.
        let (mut rest, mut at, mut stride) = (i, 0usize, 1usize);
        for d in (0..rank).rev() {
            let (size, b) = (dims[d] as usize, blocks_of(d) as usize);
            let c = rest % size;
            let (block, padded_block) = (size / b, padded[d] as usize / b);
            at += (c / block * padded_block + c % block) * stride;
            rest /= size;
            stride *= padded[d] as usize;
        }
        out[at] = v;
    }
    Ok(out)
}

fn compute_f64(program: &Program, recipe: &WeightRecipe) -> Result<Vec<f64>, Error> {
    Ok(match recipe {
        WeightRecipe::BnFoldedWeight { weight, gamma, var, eps } => {
            let s = bn_scale(program, gamma.as_ref(), var, *eps)?;
            let w = values(program, weight)?;
            let per_channel = w.len() / s.len().max(1);
            w.iter().enumerate().map(|(i, v)| v * s[i / per_channel.max(1)]).collect()
        }
        WeightRecipe::Cast { weight } => values(program, weight)?,
        WeightRecipe::ConcatRows { weights } => {
            let mut all = Vec::new();
            for w in weights {
                all.extend(values(program, w)?);
            }
            all
        }
        WeightRecipe::BnFoldedBias { bias, gamma, beta, mean, var, eps } => {
            let s = bn_scale(program, gamma.as_ref(), var, *eps)?;
            let mean = values(program, mean)?;
            let bias = optional(program, bias.as_ref(), s.len(), 0.0)?;
            let beta = optional(program, beta.as_ref(), s.len(), 0.0)?;
            (0..s.len()).map(|c| (bias[c] - mean[c]) * s[c] + beta[c]).collect()
        }
        WeightRecipe::Pad { source, dims, padded, blocks } => {
            zero_pad(&compute_f64(program, source)?, dims, padded, blocks)?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::zero_pad;

    #[test]
    fn pads_at_the_end_of_each_dim_or_of_each_block() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let at_end = zero_pad(&v, &[2, 3], &[3, 4], &[]).expect("pads");
        assert_eq!(at_end, [1.0, 2.0, 3.0, 0.0, 4.0, 5.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        // Dim 1 as 3 blocks of 1 → 3 blocks of 2 (e.g. three heads, each padded).
        let blocks = zero_pad(&v, &[2, 3], &[2, 6], &[1, 3]).expect("pads");
        assert_eq!(blocks, [1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0, 5.0, 0.0, 6.0, 0.0]);
        assert!(zero_pad(&v, &[2, 3], &[2, 5], &[1, 3]).is_err(), "5 is not 3 equal blocks");
    }
}
