//! Weights and constants: the payload configs and the raw storages they point into.
//!
//! Each config entry names a storage file (the whole untyped storage, little-endian) plus
//! sizes, strides and a storage offset in elements. Several entries may share one storage
//! (tied or overlapping views); a view may be non-contiguous. Pickled entries are refused.

use std::borrow::Cow;
use std::collections::BTreeMap;

use torchtpu_passes::ir::{brief_list, DType};

use super::archive::Archive;
use super::schema::{scalar_type, PayloadConfig, SymInt, TensorMeta};
use super::ImportError;

/// Which payload config a tensor comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PayloadSource {
    /// `data/weights/`: parameters and persistent buffers (`state_dict`).
    Weights,
    /// `data/constants/`: non-persistent buffers and lifted tensor constants.
    Constants,
}

impl PayloadSource {
    fn folder(self) -> &'static str {
        match self {
            PayloadSource::Weights => "weights",
            PayloadSource::Constants => "constants",
        }
    }

    /// Root-relative path of the config file.
    pub fn config_entry(self) -> String {
        let f = self.folder();
        format!("data/{f}/model_{f}_config.json")
    }
}

/// One tensor stored in the archive, described but not copied.
#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    /// Fully qualified name, e.g. `fc1.weight` or `lifted_tensor_0`.
    pub fqn: String,
    /// Config it was listed in.
    pub source: PayloadSource,
    /// Whether it is an `nn.Parameter`.
    pub is_param: bool,
    /// Element type.
    pub dtype: DType,
    /// Sizes in elements.
    pub sizes: Vec<i64>,
    /// Strides in elements.
    pub strides: Vec<i64>,
    /// Offset of the first element in the storage, in elements.
    pub storage_offset: i64,
    /// Root-relative entry holding the storage.
    pub entry: String,
}

impl Weight {
    /// A complex weight as the real tensor of its (real, imaginary) pairs: the same bytes,
    /// of the parts' dtype, with a last dim of 2. Safetensors (the artifact's weight format)
    /// has no complex dtype; the graph views the pairs as complex again.
    pub fn as_real_pairs(&self) -> Option<Weight> {
        let part = self.dtype.complex_part()?;
        let mut w = self.clone();
        w.dtype = part;
        w.sizes.push(2);
        w.strides = self.strides.iter().map(|s| s.checked_mul(2)).collect::<Option<Vec<i64>>>()?;
        w.strides.push(1);
        w.storage_offset = self.storage_offset.checked_mul(2)?;
        Some(w)
    }

    /// Number of elements (checked to fit when the config was read).
    pub fn numel(&self) -> i64 {
        self.sizes.iter().product()
    }

    /// Bytes of the tensor itself (not of its storage).
    pub fn nbytes(&self) -> u64 {
        self.numel() as u64 * self.dtype.size_bytes() as u64
    }

    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for (&size, &stride) in self.sizes.iter().zip(&self.strides).rev() {
            if size != 1 && stride != expected {
                return false;
            }
            expected *= size;
        }
        true
    }

    /// The tensor's bytes in row-major order: borrowed from the archive map when the view is
    /// contiguous, gathered into a new buffer otherwise. The view was checked against its
    /// storage when the config was read ([`load_payloads`]).
    pub fn contiguous_bytes<'a>(&self, archive: &'a Archive) -> Result<Cow<'a, [u8]>, ImportError> {
        let storage = archive.bytes(&self.entry)?;
        let es = self.dtype.size_bytes();
        let n = self.numel() as usize;
        if n == 0 {
            return Ok(Cow::Borrowed(&[]));
        }
        let start = self.storage_offset as usize * es;
        if self.is_contiguous() {
            return Ok(Cow::Borrowed(&storage[start..start + n * es]));
        }
        let mut out = Vec::with_capacity(n * es);
        let mut index = vec![0i64; self.sizes.len()];
        for _ in 0..n {
            let elem: i64 = self.storage_offset + index.iter().zip(&self.strides).map(|(i, s)| i * s).sum::<i64>();
            let at = elem as usize * es;
            out.extend_from_slice(&storage[at..at + es]);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < self.sizes[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(Cow::Owned(out))
    }
}

impl Weight {
    /// Writes the tensor's bytes, row-major and contiguous, to `out`: a contiguous tensor
    /// straight from the archive in chunks (memory stays flat), a strided one gathered first.
    pub fn write_contiguous(
        &self,
        archive: &Archive,
        out: &mut dyn crate::container::write::Sink,
    ) -> Result<(), ImportError> {
        if self.is_contiguous() {
            let es = self.dtype.size_bytes();
            let start = self.storage_offset as usize * es;
            return archive.copy_payload(&self.entry, start..start + self.numel() as usize * es, out);
        }
        let bytes = self.contiguous_bytes(archive)?;
        out.write_all(&bytes).map_err(|source| ImportError::Write { source })
    }
}

/// Reads both payload configs and checks every entry against its storage.
pub(super) fn load_payloads(archive: &Archive) -> Result<BTreeMap<String, Weight>, ImportError> {
    let mut out = BTreeMap::new();
    for source in [PayloadSource::Weights, PayloadSource::Constants] {
        let entry = source.config_entry();
        if !archive.has(&entry) {
            continue; // older archives omit an empty constants config
        }
        let config: PayloadConfig = super::parse_json(archive, &entry)?;
        for (fqn, meta) in config.config {
            let bad =
                |reason: String| ImportError::Payload { fqn: fqn.clone(), entry: archive.entry_name(&entry), reason };
            if meta.use_pickle {
                return Err(bad(format!(
                    "it is pickled (`use_pickle: true`, file `{}`), which this compiler never loads; \
                     convert tensor subclasses to plain tensors before export",
                    meta.path_name
                )));
            }
            let tm = meta.tensor_meta.as_ref().ok_or_else(|| bad("it has no tensor_meta (a custom object?)".into()))?;
            let storage_entry = format!("data/{}/{}", source.folder(), meta.path_name);
            let weight = decode_meta(&fqn, source, meta.is_param, tm, storage_entry).map_err(bad)?;
            check_storage(archive, &weight)?;
            if out.insert(fqn.clone(), weight).is_some() {
                return Err(bad("the name appears in both payload configs".into()));
            }
        }
    }
    Ok(out)
}

fn static_int(v: &SymInt, what: &str) -> Result<i64, String> {
    match v {
        SymInt::AsInt(i) => Ok(*i),
        SymInt::AsExpr(e) => Err(format!("{what} is symbolic (`{}`); stored tensors must be static", e.expr_str)),
    }
}

fn decode_meta(
    fqn: &str,
    source: PayloadSource,
    is_param: bool,
    tm: &TensorMeta,
    entry: String,
) -> Result<Weight, String> {
    let dtype = scalar_type(tm.dtype).ok_or_else(|| format!("unknown dtype number {}", tm.dtype))?;
    let sizes = tm.sizes.iter().map(|s| static_int(s, "a size")).collect::<Result<Vec<_>, _>>()?;
    let strides = tm.strides.iter().map(|s| static_int(s, "a stride")).collect::<Result<Vec<_>, _>>()?;
    let storage_offset = tm.storage_offset.as_ref().map_or(Ok(0), |s| static_int(s, "the storage offset"))?;
    if strides.len() != sizes.len() {
        return Err(format!("{} sizes but {} strides", sizes.len(), strides.len()));
    }
    if sizes.iter().chain(&strides).any(|&v| v < 0) || storage_offset < 0 {
        return Err("negative size, stride or storage offset".into());
    }
    let es = i64::try_from(dtype.size_bytes()).unwrap_or(i64::MAX);
    let numel = sizes.iter().try_fold(1i64, |n, &s| n.checked_mul(s));
    if numel.and_then(|n| n.checked_mul(es)).is_none() {
        return Err(format!(
            "its sizes {} hold more elements than any file can (the product overflows)",
            brief_list(&sizes, ", ")
        ));
    }
    Ok(Weight { fqn: fqn.to_string(), source, is_param, dtype, sizes, strides, storage_offset, entry })
}

/// The storage must exist, hold whole elements and cover every element the view touches.
/// All arithmetic is checked: a config near `i64::MAX` is an error, never a wrapped offset.
fn check_storage(archive: &Archive, w: &Weight) -> Result<(), ImportError> {
    let storage = archive.bytes(&w.entry).map_err(|_| ImportError::Payload {
        fqn: w.fqn.clone(),
        entry: archive.entry_name(&w.entry),
        reason: "the storage file is missing from the archive".into(),
    })?;
    let bad = |reason: String| ImportError::Payload { fqn: w.fqn.clone(), entry: archive.entry_name(&w.entry), reason };
    let es = w.dtype.size_bytes();
    if storage.len() % es != 0 {
        return Err(bad(format!("{} bytes is not a whole number of {}-byte {} elements", storage.len(), es, w.dtype)));
    }
    if w.numel() == 0 {
        return Ok(());
    }
    let view = || {
        format!(
            "the view (sizes {}, strides {}, offset {})",
            brief_list(&w.sizes, ", "),
            brief_list(&w.strides, ", "),
            w.storage_offset
        )
    };
    let last = w
        .sizes
        .iter()
        .zip(&w.strides)
        .try_fold(w.storage_offset, |acc, (&n, &s)| (n - 1).checked_mul(s).and_then(|step| acc.checked_add(step)));
    let Some(last) = last else {
        return Err(bad(format!("{} reaches past any storage (the offset arithmetic overflows)", view())));
    };
    let available = (storage.len() / es) as i64;
    if last >= available {
        return Err(bad(format!("{} needs {} elements but the storage holds {available}", view(), last + 1)));
    }
    Ok(())
}
