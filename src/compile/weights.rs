//! The artifact's `weights.safetensors`: the weight arguments of the lowered program, stored
//! ones copied from the archive in chunks, derived ones computed from their recipes one tensor
//! at a time, streamed into the artifact so that no copy of all the weights is ever held.
//!
//! Any safetensors reader opens it. The layout is laid out for use in place: the JSON header is
//! padded with spaces so that the data starts 64 bytes into the entry (whose start the artifact
//! aligns to 64), and the tensors whose size is a multiple of 64 bytes come first, so that each
//! of them starts 64-byte aligned (the CPU plugin can then use it straight from the map); then
//! the rest. Within each group, safetensors' own order: descending dtype, then name.

use safetensors::tensor::Dtype;
use torchtpu_passes::ir::{DType, Graph, InputKind, Op, WeightRecipe};

use crate::artifact::safetensors_dtype;
use crate::container::write::Sink;
use crate::import::{ImportError, Program, Weight};
use crate::Error;

/// The names of `graph`'s weight arguments (stored and derived), in calling order.
pub(super) fn weight_order(graph: &Graph) -> Vec<String> {
    graph
        .graph_inputs()
        .iter()
        .filter_map(|&id| match &graph.node(id).op {
            Op::Input(InputKind::Derived { fqn, .. }) => Some(fqn.clone()),
            Op::Input(k) => k.weight_fqn().map(str::to_string),
            _ => None,
        })
        .collect()
}

/// The weight entry of one artifact, planned: every tensor's name, dtype, shape and place, and
/// the header; [`WeightsEntry::write`] then streams it.
pub(super) struct WeightsEntry<'a> {
    program: &'a Program,
    tensors: Vec<Tensor<'a>>,
    header: Vec<u8>,
}

struct Tensor<'a> {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: usize,
    source: Source<'a>,
}

enum Source<'a> {
    Stored(&'a Weight),
    Derived { recipe: &'a WeightRecipe, dtype: DType },
}

impl<'a> WeightsEntry<'a> {
    /// Plans the weight arguments of the lowered `graph`; nothing is read or computed yet.
    pub(super) fn plan(program: &'a Program, graph: &'a Graph) -> Result<WeightsEntry<'a>, Error> {
        let mut tensors = Vec::new();
        for &id in graph.graph_inputs() {
            let node = graph.node(id);
            let Op::Input(kind) = &node.op else { continue };
            let tensor = match kind {
                InputKind::Derived { fqn, recipe } => {
                    let ty = &node.outputs[0];
                    let dtype = match ty.dtype {
                        DType::BF16 => Dtype::BF16,
                        DType::F16 => Dtype::F16,
                        DType::F32 => Dtype::F32,
                        d => return Err(Error::Unsupported(format!("derived weight `{fqn}` of dtype {d}"))),
                    };
                    let shape: Vec<usize> = ty.dims.iter().filter_map(|d| d.as_static()).map(|d| d as usize).collect();
                    let bytes = byte_size(&shape, ty.dtype.size_bytes(), fqn)?;
                    Tensor {
                        name: fqn.clone(),
                        dtype,
                        shape,
                        bytes,
                        source: Source::Derived { recipe, dtype: ty.dtype },
                    }
                }
                k => {
                    let Some(fqn) = k.weight_fqn() else { continue };
                    let w = &program.weights[fqn];
                    let dtype = safetensors_dtype(w.dtype).ok_or_else(|| {
                        Error::Unsupported(format!(
                            "weight `{fqn}` has dtype {}, which the artifact cannot store",
                            w.dtype
                        ))
                    })?;
                    let shape: Vec<usize> = w.sizes.iter().map(|&s| s as usize).collect();
                    let bytes = byte_size(&shape, w.dtype.size_bytes(), fqn)?;
                    Tensor { name: fqn.to_string(), dtype, shape, bytes, source: Source::Stored(w) }
                }
            };
            tensors.push(tensor);
        }
        // One tensor per name; the aligned sizes first, then safetensors' own order.
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        tensors.dedup_by(|a, b| a.name == b.name);
        tensors.sort_by(|a, b| {
            let unaligned = |t: &Tensor| !t.bytes.is_multiple_of(ALIGN);
            unaligned(a).cmp(&unaligned(b)).then_with(|| b.dtype.cmp(&a.dtype)).then_with(|| a.name.cmp(&b.name))
        });
        let header = header(&tensors)?;
        Ok(WeightsEntry { program, tensors, header })
    }

    /// A key for the entry's content: what determines its bytes (the compiler's version, the
    /// source archive's BLAKE3, and each tensor's name, type and source or recipe), so that its
    /// digest can be remembered across compiles of the same archive.
    pub(super) fn content_key(&self, source_blake3: &str) -> String {
        use std::fmt::Write as _;
        let mut key = format!("weights\0{}\0{source_blake3}", env!("CARGO_PKG_VERSION"));
        for t in &self.tensors {
            let _ = write!(key, "\0{}:{:?}:{:?}:", t.name, t.dtype, t.shape);
            let _ = match &t.source {
                Source::Stored(w) => write!(key, "{}@{}{:?}{:?}", w.entry, w.storage_offset, w.sizes, w.strides),
                Source::Derived { recipe, dtype } => write!(key, "{recipe:?}->{dtype}"),
            };
        }
        key
    }

    /// The entry's length in bytes.
    pub(super) fn byte_len(&self) -> u64 {
        (8 + self.header.len() + self.tensors.iter().map(|t| t.bytes).sum::<usize>()) as u64
    }

    /// Writes the entry to `out`: the header, then each tensor, stored ones copied from the
    /// archive in chunks, derived ones computed one at a time.
    pub(super) fn write(&self, out: &mut dyn Sink) -> Result<(), Error> {
        let io = |source| Error::Import(ImportError::Write { source });
        out.write_all(&(self.header.len() as u64).to_le_bytes()).map_err(io)?;
        out.write_all(&self.header).map_err(io)?;
        for t in &self.tensors {
            match &t.source {
                Source::Stored(w) => w.write_contiguous(&self.program.archive, out)?,
                Source::Derived { recipe, dtype } => {
                    let written = write_derived(self.program, recipe, *dtype, out)?;
                    if written != t.bytes {
                        return Err(Error::Internal(format!(
                            "derived weight `{}` has {written} bytes, its type says {}",
                            t.name, t.bytes
                        )));
                    }
                    // The stored weights it was computed from are no longer needed resident.
                    self.program.archive.release_all();
                }
            }
        }
        Ok(())
    }
}

/// Bytes of a tensor of `shape`, checked.
fn byte_size(shape: &[usize], element: usize, name: &str) -> Result<usize, Error> {
    shape
        .iter()
        .try_fold(element, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::Unsupported(format!("weight `{name}` of shape {shape:?} is too large")))
}

/// The stored weights whose bytes, one after the other, are the derived weight's: a cast to
/// the stored dtype or rows stacked in it (Q/K/V and gate/up projections), all contiguous.
/// Those are copied as stored weights are (inside the kernel), not converted value by value.
fn byte_copies<'a>(program: &'a Program, recipe: &'a WeightRecipe, dtype: DType) -> Option<Vec<&'a Weight>> {
    let names = match recipe {
        WeightRecipe::Cast { weight } => std::slice::from_ref(weight),
        WeightRecipe::ConcatRows { weights } => &weights[..],
        _ => return None,
    };
    names.iter().map(|n| program.weights.get(n).filter(|w| w.dtype == dtype && w.is_contiguous())).collect()
}

/// How many elements of a derived weight are moved before they are written: 8 MiB of bf16.
const CHUNK_ELEMENTS: usize = 1 << 22;

/// Writes a derived weight's values in `dtype`, little-endian: weights that only move stored
/// values (casts, stacked rows, padding) a chunk of elements at a time, as byte runs where the
/// stored dtype is `dtype`; the others (BatchNorm folds, small) computed whole. Returns the
/// bytes written.
fn write_derived(program: &Program, recipe: &WeightRecipe, dtype: DType, out: &mut dyn Sink) -> Result<usize, Error> {
    if let Some(parts) = byte_copies(program, recipe, dtype) {
        let mut written = 0;
        for w in parts {
            w.write_contiguous(&program.archive, out)?;
            written += w.numel() as usize * dtype.size_bytes();
        }
        return Ok(written);
    }
    let io = |source| Error::Import(ImportError::Write { source });
    if let Some(moved) = crate::derive::Moved::of(program, recipe)? {
        let (mut start, mut written) = (0, 0);
        let mut bytes = Vec::with_capacity(CHUNK_ELEMENTS * dtype.size_bytes());
        while start < moved.len() {
            let end = (start + CHUNK_ELEMENTS).min(moved.len());
            bytes.clear();
            moved.append(start..end, dtype, &mut bytes);
            out.write_all(&bytes).map_err(io)?;
            written += bytes.len();
            // The stored pages this chunk read are not needed resident any more.
            program.archive.release_all();
            start = end;
        }
        return Ok(written);
    }
    let mut bytes = Vec::new();
    for v in crate::derive::compute(program, recipe)? {
        match dtype {
            DType::BF16 => bytes.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            DType::F16 => bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            _ => bytes.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out.write_all(&bytes).map_err(io)?;
    Ok(bytes.len())
}

/// Where the tensors' data starts, and each tensor whose size is a multiple of it.
const ALIGN: usize = 64;

/// safetensors' header: `{"NAME":{"dtype":"F32","shape":[…],"data_offsets":[a,b]},…}` in
/// tensor order, padded with spaces so that the data (after the 8-byte length) starts at a
/// multiple of [`ALIGN`].
fn header(tensors: &[Tensor<'_>]) -> Result<Vec<u8>, Error> {
    let json = |e: serde_json::Error| Error::Internal(format!("{e}"));
    let mut text = String::from("{");
    let mut offset = 0usize;
    for (i, t) in tensors.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        let end = offset + t.bytes;
        text.push_str(&serde_json::to_string(&t.name).map_err(json)?);
        text.push_str(":{\"dtype\":");
        text.push_str(&serde_json::to_string(&t.dtype).map_err(json)?);
        text.push_str(",\"shape\":");
        text.push_str(&serde_json::to_string(&t.shape).map_err(json)?);
        text.push_str(&format!(",\"data_offsets\":[{offset},{end}]}}"));
        offset = end;
    }
    text.push('}');
    let mut bytes = text.into_bytes();
    bytes.resize((8 + bytes.len()).next_multiple_of(ALIGN) - 8, b' ');
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use safetensors::tensor::{Dtype, View};
    use safetensors::SafeTensors;

    use super::WeightsEntry;
    use crate::driver::{example_bindings, lower, LowerOptions};
    use crate::import::{import, Program};
    use torchtpu_passes::ir::{DType, Graph, InputKind, Op};

    struct Reference {
        dtype: Dtype,
        shape: Vec<usize>,
        data: Vec<u8>,
    }

    impl View for &Reference {
        fn dtype(&self) -> Dtype {
            self.dtype
        }
        fn shape(&self) -> &[usize] {
            &self.shape
        }
        fn data(&self) -> Cow<'_, [u8]> {
            Cow::Borrowed(&self.data)
        }
        fn data_len(&self) -> usize {
            self.data.len()
        }
    }

    /// The weights as `safetensors::serialize` writes them from whole tensors in memory.
    fn serialized(program: &Program, graph: &Graph) -> Vec<u8> {
        let mut views = BTreeMap::new();
        for &id in graph.graph_inputs() {
            let node = graph.node(id);
            let Op::Input(kind) = &node.op else { continue };
            let (name, view) = match kind {
                InputKind::Derived { fqn, recipe } => {
                    let ty = &node.outputs[0];
                    let values = crate::derive::compute(program, recipe).expect("derives");
                    let (dtype, data) = match ty.dtype {
                        DType::BF16 => {
                            (Dtype::BF16, values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect())
                        }
                        DType::F16 => {
                            (Dtype::F16, values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect())
                        }
                        _ => (Dtype::F32, values.iter().flat_map(|v| v.to_le_bytes()).collect()),
                    };
                    let shape = ty.dims.iter().filter_map(|d| d.as_static()).map(|d| d as usize).collect();
                    (fqn.clone(), Reference { dtype, shape, data })
                }
                k => {
                    let Some(fqn) = k.weight_fqn() else { continue };
                    let w = &program.weights[fqn];
                    let data = w.contiguous_bytes(&program.archive).expect("reads").into_owned();
                    let dtype = crate::artifact::safetensors_dtype(w.dtype).expect("storable");
                    (fqn.to_string(), Reference { dtype, shape: w.sizes.iter().map(|&s| s as usize).collect(), data })
                }
            };
            views.insert(name, view);
        }
        safetensors::serialize(views.iter().map(|(k, v)| (k.as_str(), v)), None).expect("serializes")
    }

    /// The streamed entry holds, tensor for tensor and bit for bit, what safetensors writes from
    /// whole tensors: stored weights of every dtype, strided and overlapping views (edge_cases),
    /// and derived weights of every recipe, moved a chunk at a time (padded, padded in head
    /// blocks, stacked, cast, GPT-2's padded embedding) or computed (BatchNorm folds), from f32
    /// and from bf16 weights (llama_bf16, cnn_bf16). Its data
    /// starts at 64 bytes, and so does every tensor of a size that is a multiple of 64.
    #[test]
    fn streamed_weights_are_what_safetensors_writes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models");
        for model in ["edge_cases", "llama_tiny", "resnet_mini", "gpt2_tiny", "llama_bf16", "cnn_bf16"] {
            let program = import(&root.join(format!("{model}.pt2"))).expect("imports");
            let mut opts = LowerOptions::default();
            opts.pass_options.pad_multiple = Some(128);
            opts.pass_options.compute_dtype = (model == "llama_tiny").then_some(DType::BF16);
            let graph = lower(&program, example_bindings(&program).expect("sizes"), &opts).expect("lowers").graph;
            for g in [&program.graph, &graph] {
                let entry = WeightsEntry::plan(&program, g).expect("plans");
                let mut streamed = Vec::new();
                entry.write(&mut streamed).expect("writes");
                assert_eq!(streamed.len() as u64, entry.byte_len(), "{model}: planned length");
                let reference = serialized(&program, g);
                let (ours, theirs) = (SafeTensors::deserialize(&streamed), SafeTensors::deserialize(&reference));
                let (ours, theirs) = (ours.expect("ours parses"), theirs.expect("parses"));
                assert_eq!(ours.names().len(), theirs.names().len(), "{model}");
                for (name, t) in theirs.tensors() {
                    let o = ours.tensor(&name).unwrap_or_else(|e| panic!("{model}: `{name}`: {e}"));
                    assert_eq!((o.dtype(), o.shape()), (t.dtype(), t.shape()), "{model}: `{name}`");
                    assert!(o.data() == t.data(), "{model}: `{name}`: other bytes");
                    let offset = o.data().as_ptr() as usize - streamed.as_ptr() as usize;
                    if o.data().len() % 64 == 0 {
                        assert_eq!(offset % 64, 0, "{model}: `{name}` at {offset}");
                    }
                }
            }
        }
    }
}
