//! The weights of a run, from the artifact's map (or the external weights file beside it) to
//! the device tensor by tensor, each handed to the plugin straight from the map: the CPU plugin
//! uses the mapped bytes in place where they are aligned for it (16 bytes) and copies the rest,
//! and each tensor's pages are handed back once it is on the device (an aliased tensor's are
//! read again from the page cache when the program runs). So the process holds at most one
//! copy of the weights, never a second.
//!
//! The bytes are checked against the manifest's sha256 on the same pass (the outputs are not
//! computed when they differ), unless the local cache remembers this very file (by its
//! identity: path, inode, size, modification and change times) as verified with that sha256;
//! `--verify-weights` always hashes. A weights file of the wrong size is refused before any
//! read.

use std::ops::Range;
use std::path::{Path, PathBuf};

use safetensors::SafeTensors;

use super::placement::Placement;
use super::{element_type, RunError};
use crate::artifact::{dtype_of_safetensors, Artifact};
use crate::cache::{entry_digest_key, file_digest_key, Cache};
use crate::container::MappedFile;
use crate::digest::{Hasher, WeightsDigest};
use crate::pjrt::{Buffer, Client};
use crate::Error;

/// How the weights are checked.
pub struct Verification<'c> {
    /// Hash them even when the cache remembers the file as verified (`--verify-weights`).
    pub always_hash: bool,
    /// Where verified files are remembered; `None`: nowhere (every run hashes).
    pub cache: Option<&'c Cache>,
}

/// Where the weights of an artifact are: a mapped file and the range of it they fill.
struct Located<'a> {
    file: Mapped<'a>,
    range: Range<usize>,
    /// The file (for messages).
    path: PathBuf,
    /// The key under which the cache remembers the weights as verified.
    digest_key: Option<String>,
}

enum Mapped<'a> {
    Entry(&'a MappedFile),
    External(MappedFile),
}

impl Mapped<'_> {
    fn get(&self) -> &MappedFile {
        match self {
            Mapped::Entry(f) => f,
            Mapped::External(f) => f,
        }
    }
}

/// The weights on the devices, per device in the order the program takes them; they may use
/// the mapped file in place, which they keep open.
pub(super) struct DeviceWeights {
    /// Per device, its weights. Declared first, so dropped before the map they may read.
    pub buffers: Vec<Vec<Buffer>>,
    /// The file they came from when it is not the artifact: its external weights file, or
    /// another checkpoint's (see `checkpoint`), whose values `reload` reads again.
    file: Option<MappedFile>,
    /// They are another checkpoint's, whose values `reload` reads.
    checkpoint: bool,
}

/// The weights of `art` on `client`'s devices as `placement` splits them, verified.
pub(super) fn load(
    client: &Client,
    art: &Artifact,
    placement: &Placement,
    verification: &Verification,
) -> Result<DeviceWeights, Error> {
    let m = &art.manifest;
    let at = locate(art)?;
    let expected = &m.weights.digest;
    // A digest remembered by another algorithm says nothing: the file is hashed.
    let known = match (verification.always_hash, verification.cache, &at.digest_key) {
        (false, Some(cache), Some(key)) => cache.known_digest(key).filter(|k| k.algorithm() == expected.algorithm()),
        _ => None,
    };
    if let Some(k) = known.as_ref().filter(|k| *k != expected) {
        return Err(changed(&at.path, k, expected));
    }
    let mut hasher = known.is_none().then(|| expected.hasher());
    let buffers = transfer(client, art, placement, &at, hasher.as_mut())?;
    if let Some(h) = hasher {
        let actual = h.finish();
        if actual != *expected {
            return Err(changed(&at.path, &actual, expected));
        }
        if let (Some(cache), Some(key)) = (verification.cache, &at.digest_key) {
            cache.remember_digest(key, &actual);
        }
    }
    let file = match at.file {
        Mapped::External(f) => Some(f),
        Mapped::Entry(_) => None,
    };
    Ok(DeviceWeights { buffers, file, checkpoint: false })
}

/// Another checkpoint of an artifact's program: a safetensors file, mapped, that holds every
/// weight of the programs with the artifact's dtype and shape (checked when opened).
pub(super) struct Checkpoint {
    file: MappedFile,
    path: PathBuf,
}

impl Checkpoint {
    /// Maps the safetensors file at `path` and checks it against `art`'s weights; nothing is
    /// put on a device yet.
    pub(super) fn open(art: &Artifact, path: &Path) -> Result<Checkpoint, Error> {
        let file = MappedFile::open(path)
            .map_err(|e| RunError::Checkpoint { path: path.display().to_string(), reason: e.to_string() })?;
        let checkpoint = Checkpoint { file, path: path.to_path_buf() };
        check_against(art, &checkpoint.parse()?, path)?;
        Ok(checkpoint)
    }

    fn parse(&self) -> Result<SafeTensors<'_>, Error> {
        SafeTensors::deserialize(self.file.bytes()).map_err(|e| {
            let reason = format!("not a safetensors file ({e}); a checkpoint is a `.pt2` or a `.safetensors`");
            RunError::Checkpoint { path: self.path.display().to_string(), reason }.into()
        })
    }

    /// Every weight the programs take, put on the devices (the tensors they do not take are
    /// left).
    pub(super) fn load(self, client: &Client, art: &Artifact, placement: &Placement) -> Result<DeviceWeights, Error> {
        let st = self.parse()?;
        let splits = art.manifest.sharding.as_ref().map(|s| &s.weights);
        let mut per_device: Vec<Vec<Buffer>> = (0..placement.devices()).map(|_| Vec::new()).collect();
        for name in &art.manifest.weights.order {
            let view = st.tensor(name).map_err(|e| RunError::Weights(format!("`{name}`: {e}")))?;
            let split = placement.split(splits.and_then(|w| w.get(name)));
            let pieces = to_devices(client, placement, split.as_ref(), name, &view, InPlace::Copied)?;
            for (d, piece) in pieces.into_iter().enumerate() {
                per_device[d].push(piece);
            }
        }
        drop(st);
        Ok(DeviceWeights { buffers: per_device, file: Some(self.file), checkpoint: true })
    }
}

/// Every weight of `art`'s programs is in `st`, of the artifact's dtype and shape.
fn check_against(art: &Artifact, st: &SafeTensors, path: &Path) -> Result<(), Error> {
    let at = locate(art)?;
    let ours = SafeTensors::deserialize(&at.file.get().bytes()[at.range.clone()])
        .map_err(|e| unreadable(art, &at, &e.to_string()))?;
    let refused = |reason: String| RunError::Checkpoint { path: path.display().to_string(), reason };
    for name in &art.manifest.weights.order {
        let want = ours.tensor(name).map_err(|e| RunError::Weights(format!("`{name}`: {e}")))?;
        let Ok(got) = st.tensor(name) else {
            return Err(refused(format!(
                "it has no `{name}`, a weight of the program (weights the compiler derives — fused, padded, \
                 folded — come from a checkpoint given as a `.pt2` of the same program)"
            ))
            .into());
        };
        if got.dtype() != want.dtype() || got.shape() != want.shape() {
            return Err(refused(format!(
                "`{name}` is {:?}{:?}, the program takes {:?}{:?}",
                got.dtype(),
                got.shape(),
                want.dtype(),
                want.shape()
            ))
            .into());
        }
    }
    Ok(())
}

/// The current checkpoint's values of the weights `names` (the artifact's, or those of the
/// checkpoint `weights` came from), copied to the devices (owned buffers, which a call may
/// replace), per name and device. Not hashed: they were checked when the session took them.
pub(super) fn reload(
    client: &Client,
    art: &Artifact,
    placement: &Placement,
    weights: &DeviceWeights,
    names: &[&str],
) -> Result<Vec<Vec<Buffer>>, Error> {
    let at = locate(art)?;
    let bytes = match (&weights.file, weights.checkpoint) {
        (Some(file), true) => file.bytes(),
        _ => &at.file.get().bytes()[at.range.clone()],
    };
    let st = SafeTensors::deserialize(bytes).map_err(|e| unreadable(art, &at, &e.to_string()))?;
    let splits = art.manifest.sharding.as_ref().map(|s| &s.weights);
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let view = st.tensor(name).map_err(|e| RunError::Weights(format!("`{name}`: {e}")))?;
        let dtype = dtype_of_safetensors(view.dtype())
            .ok_or_else(|| RunError::Weights(format!("`{name}` has unsupported dtype {:?}", view.dtype())))?;
        let dims: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        let split = placement.split(splits.and_then(|w| w.get(*name)));
        let mut pieces = Vec::with_capacity(placement.devices());
        for d in 0..placement.devices() {
            let (piece, piece_dims) = placement.piece(view.data(), &dims, dtype.size_bytes(), split.as_ref(), d)?;
            pieces.push(super::to_device(client, d, dtype, &piece, &piece_dims)?);
        }
        out.push(pieces);
    }
    Ok(out)
}

/// The mapped weights: the artifact's entry, or the external file (of the recorded size).
fn locate(art: &Artifact) -> Result<Located<'_>, Error> {
    let w = &art.manifest.weights;
    let Some(path) = art.external_weights()? else {
        let range = art.zip().range(&w.entry).ok_or_else(|| {
            RunError::Weights(format!("the artifact has no `{}` entry, which its manifest names", w.entry))
        })?;
        let digest_key = entry_digest_key(art.path(), &w.entry);
        return Ok(Located { file: Mapped::Entry(art.zip().file()), range, path: art.path().into(), digest_key });
    };
    let file = MappedFile::open(&path).map_err(|e| RunError::WeightsFile {
        path: path.display().to_string(),
        reason: format!("{e}; it is written by `compile --weights external` beside the artifact"),
    })?;
    let len = file.bytes().len();
    if len as u64 != w.bytes {
        return Err(RunError::WeightsFile {
            path: path.display().to_string(),
            reason: format!("it has {len} bytes, the artifact was compiled with {} bytes of weights", w.bytes),
        }
        .into());
    }
    let digest_key = file_digest_key(&path);
    Ok(Located { file: Mapped::External(file), range: 0..len, path, digest_key })
}

/// Every tensor of the weights file in the order of its bytes: the ones the program takes go to
/// the device, all are hashed (with `hasher`) with the bytes between them, and each one's pages
/// are handed back after it.
fn transfer(
    client: &Client,
    art: &Artifact,
    placement: &Placement,
    at: &Located,
    mut hasher: Option<&mut Hasher>,
) -> Result<Vec<Vec<Buffer>>, Error> {
    let order = &art.manifest.weights.order;
    let file = at.file.get();
    let bytes = &file.bytes()[at.range.clone()];
    let st = match SafeTensors::deserialize(bytes) {
        Ok(st) => st,
        // Damage (or an edit) is reported as such, not as what it broke.
        Err(e) => return Err(unreadable(art, at, &e.to_string())),
    };
    let mut tensors: Vec<(usize, String)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| (view.data().as_ptr() as usize - bytes.as_ptr() as usize, name))
        .collect();
    tensors.sort();
    let slot: std::collections::HashMap<&str, usize> = order.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let mut buffers: Vec<Option<Vec<Buffer>>> = order.iter().map(|_| None).collect();
    let splits = art.manifest.sharding.as_ref().map(|s| &s.weights);
    let mut hashed = 0;
    for (offset, name) in &tensors {
        let view = st.tensor(name).map_err(|e| RunError::Weights(format!("`{name}`: {e}")))?;
        let end = offset + view.data().len();
        if let Some(&i) = slot.get(name.as_str()) {
            let split = placement.split(splits.and_then(|w| w.get(name)));
            buffers[i] = Some(to_devices(client, placement, split.as_ref(), name, &view, InPlace::Allowed)?);
        }
        if let Some(h) = hasher.as_deref_mut() {
            h.update(&bytes[hashed..end.max(hashed)]);
            hashed = hashed.max(end);
        }
        file.release(at.range.start + offset..at.range.start + end);
    }
    if let Some(h) = hasher {
        h.update(&bytes[hashed..]);
    }
    let mut per_device: Vec<Vec<Buffer>> = (0..placement.devices()).map(|_| Vec::new()).collect();
    for (name, b) in order.iter().zip(buffers) {
        let pieces =
            b.ok_or_else(|| RunError::Weights(format!("the weights lack `{name}`, which the program takes")))?;
        for (d, piece) in pieces.into_iter().enumerate() {
            per_device[d].push(piece);
        }
    }
    Ok(per_device)
}

/// Weights that do not parse: changed since the compile when their sha256 says so, else
/// unreadable as they were written.
fn unreadable(art: &Artifact, at: &Located, reason: &str) -> Error {
    let expected = &art.manifest.weights.digest;
    let actual = at.file.get().digest_like(at.range.clone(), expected);
    if actual != *expected {
        return changed(&at.path, &actual, expected);
    }
    RunError::Weights(format!("`{}`: {reason}", at.path.display())).into()
}

/// Whether a device buffer may use the mapped bytes in place (the CPU plugin does where they
/// are aligned): for the artifact's own weights, whose bytes were verified; not for another
/// checkpoint's file, which its owner may rewrite while the session runs (a training job
/// saving to the same path), so its values are copied.
#[derive(Clone, Copy)]
enum InPlace {
    Allowed,
    Copied,
}

/// A weight on every device: its piece where `split` splits it, else the whole of it.
fn to_devices(
    client: &Client,
    placement: &Placement,
    split: Option<&torchtpu_passes::ir::Sharding>,
    name: &str,
    view: &safetensors::tensor::TensorView,
    in_place: InPlace,
) -> Result<Vec<Buffer>, Error> {
    let dtype = dtype_of_safetensors(view.dtype())
        .ok_or_else(|| RunError::Weights(format!("`{name}` has unsupported dtype {:?}", view.dtype())))?;
    let dims: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
    let ty = element_type(dtype).ok_or_else(|| RunError::Weights(format!("`{name}`: dtype {dtype}")))?;
    let mut out = Vec::with_capacity(placement.devices());
    for d in 0..placement.devices() {
        let (piece, piece_dims) = placement
            .piece(view.data(), &dims, dtype.size_bytes(), split, d)
            .map_err(|e| RunError::Weights(format!("`{name}`: {e}")))?;
        out.push(
            match piece {
                // SAFETY: the bytes are a read-only map that outlives the buffer: the artifact's
                // (which the caller keeps until the run is over) or the external file's (kept in
                // `DeviceWeights`).
                std::borrow::Cow::Borrowed(b) if matches!(in_place, InPlace::Allowed) => unsafe {
                    client.buffer_viewing_host_on(d, b, ty, &piece_dims)
                },
                piece => client.buffer_from_host_on(d, &piece, ty, &piece_dims),
            }
            .map_err(RunError::Execute)?,
        );
    }
    Ok(out)
}

fn changed(path: &Path, actual: &WeightsDigest, expected: &WeightsDigest) -> Error {
    RunError::WeightsFile {
        path: path.display().to_string(),
        reason: format!(
            "the weights' {} is {}, the artifact was compiled with {}: they changed since the compile; restore \
             them or compile again",
            expected.algorithm(),
            actual.hex(),
            expected.hex()
        ),
    }
    .into()
}
