//! Derived weights: the values of `InputKind::Derived` inputs that passes create, from the
//! archive's weights. Those that only move stored values (casts, stacked rows, zero padding)
//! are read a run at a time ([`Moved`]), so that a padded embedding of hundreds of megabytes
//! streams in bounded memory; the others (BatchNorm folds, permuted convolution kernels) are
//! computed one tensor at a time, in f64. Stored
//! weights are read in f32, bf16 or f16, widened exactly to f32; the derived input's dtype
//! says how they are written back (moved values exactly, computed ones rounded).

use torchtpu_passes::ir::{DType, WeightRecipe};

use crate::import::Program;
use crate::Error;

/// Bytes per element of a stored weight of `dtype` that recipes read.
fn element_bytes(fqn: &str, dtype: DType) -> Result<usize, Error> {
    match dtype {
        DType::F32 => Ok(4),
        DType::BF16 | DType::F16 => Ok(2),
        d => Err(Error::Unsupported(format!(
            "derived weight reads `{fqn}` of dtype {d}; recipes read f32, bf16 and f16 weights"
        ))),
    }
}

/// Appends the little-endian elements of `dtype` in `bytes` to `out`, widened exactly to f32.
fn decode(dtype: DType, bytes: &[u8], out: &mut Vec<f32>) {
    match dtype {
        DType::BF16 => out.extend(bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())),
        DType::F16 => out.extend(bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())),
        _ => out.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
    }
}

/// The stored weight `fqn`, checked to be one recipes read.
fn stored<'a>(program: &'a Program, fqn: &str) -> Result<(&'a crate::import::Weight, usize), Error> {
    let w =
        program.weights.get(fqn).ok_or_else(|| Error::Unsupported(format!("derived weight reads unknown `{fqn}`")))?;
    Ok((w, element_bytes(fqn, w.dtype)?))
}

/// A stored weight as f64 values.
fn values(program: &Program, fqn: &str) -> Result<Vec<f64>, Error> {
    let (w, _) = stored(program, fqn)?;
    let mut out = Vec::new();
    decode(w.dtype, &w.contiguous_bytes(&program.archive)?, &mut out);
    Ok(out.into_iter().map(f64::from).collect())
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
pub(crate) fn compute(program: &Program, recipe: &WeightRecipe) -> Result<Vec<f32>, Error> {
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

/// `values` (row-major, shape `dims`) with its dims reordered: result dim `i` is dim `perm[i]`.
fn permute(values: &[f64], dims: &[i64], perm: &[i64]) -> Result<Vec<f64>, Error> {
    let rank = dims.len();
    let dims_usize: Option<Vec<usize>> = dims.iter().map(|&d| usize::try_from(d).ok()).collect();
    let perm_usize: Option<Vec<usize>> = perm.iter().map(|&p| usize::try_from(p).ok().filter(|&p| p < rank)).collect();
    let (Some(dims_u), Some(perm_u)) = (dims_usize, perm_usize) else {
        return Err(Error::Unsupported(format!("cannot permute shape {dims:?} by {perm:?}")));
    };
    let mut seen = vec![false; rank];
    let is_permutation = perm_u.len() == rank && perm_u.iter().all(|&p| !std::mem::replace(&mut seen[p], true));
    let numel = dims_u.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if !is_permutation || numel != Some(values.len()) {
        return Err(Error::Unsupported(format!(
            "cannot permute {} values of shape {dims:?} by {perm:?}",
            values.len()
        )));
    }
    // Row-major strides of the source, taken in the result's dim order.
    let mut strides = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims_u[d + 1];
    }
    let out_dims: Vec<usize> = perm_u.iter().map(|&p| dims_u[p]).collect();
    let out_strides: Vec<usize> = perm_u.iter().map(|&p| strides[p]).collect();
    let mut out = Vec::with_capacity(values.len());
    let mut index = vec![0usize; rank];
    for _ in 0..values.len() {
        out.push(values[index.iter().zip(&out_strides).map(|(i, s)| i * s).sum::<usize>()]);
        for d in (0..rank).rev() {
            index[d] += 1;
            if index[d] < out_dims[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(out)
}

/// `values` (row-major, shape `dims`) narrowed to indices `start..start + len` of dim `dim`.
fn narrow(values: &[f64], dims: &[i64], dim: i64, start: i64, len: i64) -> Result<Vec<f64>, Error> {
    let d = usize::try_from(dim).ok().filter(|&d| d < dims.len());
    let numel = dims.iter().try_fold(1i64, |n, &x| n.checked_mul(x).filter(|_| x >= 0));
    let (Some(d), Some(n)) = (d, numel) else {
        return Err(Error::Unsupported(format!("cannot narrow dim {dim} of shape {dims:?}")));
    };
    if n as usize != values.len() || start < 0 || len < 0 || start.checked_add(len).is_none_or(|e| e > dims[d]) {
        return Err(Error::Unsupported(format!(
            "cannot narrow {} values of shape {dims:?} to {start}..{start}+{len} of dim {dim}",
            values.len()
        )));
    }
    let inner: usize = dims[d + 1..].iter().product::<i64>() as usize;
    let (size, outer) = (dims[d] as usize, dims[..d].iter().product::<i64>() as usize);
    let mut out = Vec::with_capacity(outer * len as usize * inner);
    for o in 0..outer {
        let at = (o * size + start as usize) * inner;
        out.extend_from_slice(&values[at..at + len as usize * inner]);
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
        WeightRecipe::Permute { source, dims, perm } => permute(&compute_f64(program, source)?, dims, perm)?,
        WeightRecipe::Narrow { source, dims, dim, start, len } => {
            narrow(&compute_f64(program, source)?, dims, *dim, *start, *len)?
        }
    })
}

/// A derived weight that only moves stored values (a cast, stacked rows, zero padding, or
/// padding of those), read element by element without computing the whole tensor: what lets
/// [`crate::compile`] stream a padded embedding of hundreds of megabytes in bounded memory.
pub(crate) enum Moved<'a> {
    /// Stored weights end to end (`Cast` is one, `ConcatRows` several), each with its dtype and
    /// the element offset where it starts.
    Parts { parts: Vec<(&'a [u8], DType)>, starts: Vec<usize>, len: usize },
    /// `source` with zeros appended to `padded` in each dim (or each block of a dim).
    Padded { source: Box<Moved<'a>>, dims: Vec<usize>, padded: Vec<usize>, blocks: Vec<usize>, len: usize },
}

impl<'a> Moved<'a> {
    /// The recipe as moved values, or `None` for one that computes (BatchNorm folds) or reads
    /// a strided stored weight (then [`compute`] gathers it).
    pub(crate) fn of(program: &'a Program, recipe: &WeightRecipe) -> Result<Option<Moved<'a>>, Error> {
        Ok(Some(match recipe {
            WeightRecipe::Cast { weight } => return Moved::parts(program, std::slice::from_ref(weight)),
            WeightRecipe::ConcatRows { weights } => return Moved::parts(program, weights),
            WeightRecipe::Pad { source, dims, padded, blocks } => {
                let Some(source) = Moved::of(program, source)? else { return Ok(None) };
                Moved::padded(source, dims, padded, blocks)?
            }
            WeightRecipe::BnFoldedWeight { .. }
            | WeightRecipe::BnFoldedBias { .. }
            | WeightRecipe::Permute { .. }
            | WeightRecipe::Narrow { .. } => return Ok(None),
        }))
    }

    fn parts(program: &'a Program, fqns: &[String]) -> Result<Option<Moved<'a>>, Error> {
        let (mut parts, mut starts, mut len) = (Vec::new(), Vec::new(), 0usize);
        for fqn in fqns {
            let (w, es) = stored(program, fqn)?;
            let std::borrow::Cow::Borrowed(bytes) = w.contiguous_bytes(&program.archive)? else { return Ok(None) };
            starts.push(len);
            len += bytes.len() / es;
            parts.push((bytes, w.dtype));
        }
        Ok(Some(Moved::Parts { parts, starts, len }))
    }

    fn padded(source: Moved<'a>, dims: &[i64], padded: &[i64], blocks: &[i64]) -> Result<Moved<'a>, Error> {
        let as_usize = |v: &[i64]| v.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<Vec<usize>>>();
        let (Some(dims), Some(padded)) = (as_usize(dims), as_usize(padded)) else {
            return Err(Error::Unsupported(format!("cannot pad to {padded:?}")));
        };
        let blocks: Vec<usize> = (0..dims.len()).map(|d| blocks.get(d).map_or(1, |&b| b.max(1) as usize)).collect();
        let numel = |d: &[usize]| d.iter().try_fold(1usize, |n, &x| n.checked_mul(x));
        let valid = numel(&dims) == Some(source.len())
            && dims.len() == padded.len()
            && (0..dims.len()).all(|d| padded[d] >= dims[d] && dims[d] % blocks[d] == 0 && padded[d] % blocks[d] == 0);
        let len = numel(&padded).filter(|_| valid).ok_or_else(|| {
            Error::Unsupported(format!(
                "cannot pad {} values of shape {dims:?} to {padded:?} in blocks {blocks:?}",
                source.len()
            ))
        })?;
        Ok(Moved::Padded { source: Box::new(source), dims, padded, blocks, len })
    }

    /// The number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Moved::Parts { len, .. } | Moved::Padded { len, .. } => *len,
        }
    }

    /// Element `i` (row-major), `i < len()`, as f32; for tests, which check elements one by one.
    #[cfg(test)]
    pub(crate) fn get(&self, i: usize) -> f32 {
        let mut one = Vec::with_capacity(4);
        self.append(i..i + 1, DType::F32, &mut one);
        one.get(..4).map_or(0.0, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Appends elements `range` (row-major, within `len()`) to `out` as little-endian `dtype`
    /// (f32, bf16 or f16): runs of stored values of that dtype copied as bytes, others converted
    /// (exactly when widened, rounded to nearest even when narrowed), padding as zero bytes.
    pub(crate) fn append(&self, range: std::ops::Range<usize>, dtype: DType, out: &mut Vec<u8>) {
        match self {
            Moved::Parts { parts, starts, .. } => {
                let mut at = range.start;
                while at < range.end {
                    let p = starts.partition_point(|&s| s <= at).saturating_sub(1);
                    let (bytes, stored) = parts[p];
                    let es = if stored == DType::F32 { 4 } else { 2 };
                    let end = range.end.min(starts[p] + bytes.len() / es);
                    let run = bytes.get((at - starts[p]) * es..(end - starts[p]) * es).unwrap_or_default();
                    convert(stored, run, dtype, out);
                    if end <= at {
                        break; // a part shorter than its start says: never for a checked weight
                    }
                    at = end;
                }
            }
            Moved::Padded { source, dims, padded, blocks, .. } => {
                let rank = dims.len();
                let (last, padded_last) = (dims.last().copied().unwrap_or(1), padded.last().copied().unwrap_or(1));
                let mut at = range.start;
                while at < range.end {
                    let (row, col) = (at / padded_last.max(1), at % padded_last.max(1));
                    let end_col = padded_last.min(col + (range.end - at));
                    let es = dtype.size_bytes();
                    match source_row(row, &dims[..rank.saturating_sub(1)], &padded[..rank.saturating_sub(1)], blocks) {
                        None => out.resize(out.len() + (end_col - col) * es, 0),
                        Some(base) => {
                            // The last dim: each block's true values, then its zeros.
                            let b = blocks.last().copied().unwrap_or(1);
                            let (block, padded_block) = (last / b, padded_last / b);
                            let mut c = col;
                            while c < end_col {
                                let (blk, offset) = (c / padded_block, c % padded_block);
                                let block_end = end_col.min((blk + 1) * padded_block);
                                if offset < block {
                                    let n = (block - offset).min(block_end - c);
                                    let from = base * last + blk * block + offset;
                                    source.append(from..from + n, dtype, out);
                                    c += n;
                                } else {
                                    out.resize(out.len() + (block_end - c) * es, 0);
                                    c = block_end;
                                }
                            }
                        }
                    }
                    at += end_col - col;
                }
            }
        }
    }
}

/// Appends the little-endian elements of `from` in `bytes` to `out` as `to`: a copy when the
/// dtypes agree, else each element converted through f32 (exact for the widening, round to
/// nearest even for the narrowing).
fn convert(from: DType, bytes: &[u8], to: DType, out: &mut Vec<u8>) {
    if from == to {
        out.extend_from_slice(bytes);
        return;
    }
    let mut values = Vec::with_capacity(bytes.len() / from.size_bytes());
    decode(from, bytes, &mut values);
    out.reserve(values.len() * to.size_bytes());
    match to {
        DType::BF16 => values.iter().for_each(|&v| out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes())),
        DType::F16 => values.iter().for_each(|&v| out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes())),
        _ => values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
    }
}

/// The source row (in the unpadded leading dims) of padded row `row`, or `None` when the row
/// is padding.
fn source_row(row: usize, dims: &[usize], padded: &[usize], blocks: &[usize]) -> Option<usize> {
    let (mut rest, mut at, mut stride) = (row, 0usize, 1usize);
    for d in (0..dims.len()).rev() {
        let c = rest % padded[d];
        rest /= padded[d];
        let (block, padded_block) = (dims[d] / blocks[d], padded[d] / blocks[d]);
        let offset = c % padded_block;
        if offset >= block {
            return None;
        }
        at += (c / padded_block * block + offset) * stride;
        stride *= dims[d];
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::{compute, narrow, permute, zero_pad, Moved};
    use crate::driver::{example_bindings, lower, LowerOptions};
    use torchtpu_passes::ir::{InputKind, Op};

    /// Moved weights read element by element are the computed ones: every padded (also in head
    /// blocks), stacked and cast weight of the tiny Llama and GPT-2 with pad 128 and bf16.
    #[test]
    fn moved_weights_are_the_computed_ones() {
        let mut moved = 0;
        for model in ["llama_tiny", "gpt2_tiny"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("testdata/models/{model}.pt2"));
            let program = crate::import::import(&path).expect("imports");
            let mut opts = LowerOptions::default();
            opts.pass_options.pad_multiple = Some(128);
            opts.pass_options.compute_dtype = Some(torchtpu_passes::ir::DType::BF16);
            let graph = lower(&program, example_bindings(&program).expect("sizes"), &opts).expect("lowers").graph;
            for &id in graph.graph_inputs() {
                let Op::Input(InputKind::Derived { fqn, recipe }) = &graph.node(id).op else { continue };
                let Some(m) = Moved::of(&program, recipe).expect("reads") else { continue };
                let values = compute(&program, recipe).expect("computes");
                assert_eq!(m.len(), values.len(), "{model}: `{fqn}`");
                assert!((0..m.len()).all(|i| m.get(i).to_bits() == values[i].to_bits()), "{model}: `{fqn}` differs");
                moved += 1;
            }
        }
        assert!(moved >= 10, "only {moved} moved weights checked");
    }

    #[test]
    fn narrows_a_dim_and_refuses_what_is_out_of_range() {
        let v: Vec<f64> = (0..12).map(f64::from).collect();
        // Columns 2..4 of a 3x4 matrix.
        assert_eq!(narrow(&v, &[3, 4], 1, 2, 2).expect("narrows"), [2.0, 3.0, 6.0, 7.0, 10.0, 11.0]);
        assert_eq!(narrow(&v, &[3, 4], 0, 1, 1).expect("narrows"), [4.0, 5.0, 6.0, 7.0]);
        assert!(narrow(&v, &[3, 4], 1, 3, 2).is_err(), "past the end");
        assert!(narrow(&v, &[3, 4], 2, 0, 1).is_err(), "no such dim");
        assert!(narrow(&v, &[4, 4], 1, 0, 1).is_err(), "a shape that is not the values'");
    }

    #[test]
    fn permutes_dims_and_refuses_what_is_not_a_permutation() {
        let v: Vec<f64> = (0..6).map(f64::from).collect();
        assert_eq!(permute(&v, &[2, 3], &[1, 0]).expect("permutes"), [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        // OIHW [2,1,1,3] -> HWIO [1,3,1,2]: each kernel position's output channels together.
        assert_eq!(permute(&v, &[2, 1, 1, 3], &[2, 3, 1, 0]).expect("permutes"), [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(permute(&v, &[2, 3], &[0, 1]).expect("identity"), v);
        assert!(permute(&v, &[2, 3], &[0, 0]).is_err(), "a repeated dim");
        assert!(permute(&v, &[2, 3], &[1, 2]).is_err(), "a dim out of range");
        assert!(permute(&v, &[2, 4], &[1, 0]).is_err(), "a shape that is not the values'");
    }

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
