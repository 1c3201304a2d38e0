//! The `.pt2` archive: a [`MappedZip`] whose entries all live under one root folder.
//!
//! `torch.export.save` writes every entry STORED (uncompressed) and 64-byte aligned under one
//! root folder whose name is not fixed (the file's stem, or `archive`). Entries are addressed
//! relative to that root; payloads are borrowed from the memory map, never copied.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use super::ImportError;
use crate::container::write::Sink;
use crate::container::{ContainerError, MappedZip};

/// An opened archive.
pub struct Archive {
    zip: MappedZip,
    root: String,
    /// Entry name relative to the root → byte range of its payload in the map.
    entries: BTreeMap<String, Range<usize>>,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive").field("path", &self.zip.path()).field("root", &self.root).finish()
    }
}

impl From<ContainerError> for ImportError {
    fn from(e: ContainerError) -> ImportError {
        match e {
            ContainerError::Io { path, source } => ImportError::Io { path, source },
            ContainerError::NotZip { reason } => ImportError::NotAnArchive { reason },
            ContainerError::BadEntry { entry, reason } => ImportError::BadEntry { entry, reason },
        }
    }
}

impl Archive {
    /// The archive file's BLAKE3, every entry checked against its CRC-32 in the same read:
    /// what a compile of an archive opened with `Integrity::PayloadsLater` runs beside XLA.
    pub fn blake3_verifying(&self) -> Result<String, ImportError> {
        Ok(self.zip.blake3_verifying()?)
    }

    /// Hands every page of the archive back to the system (see [`MappedZip::release`]): after
    /// a derived weight is computed from stored ones, so that memory stays flat.
    pub fn release_all(&self) {
        self.zip.release(0..self.zip.file_len());
    }

    /// Appends bytes `within` of entry `rel`'s payload to `out` by a kernel copy from the file
    /// (see [`Sink`]), with the entry's CRC-32 when they are all of it.
    pub fn copy_payload(&self, rel: &str, within: Range<usize>, out: &mut dyn Sink) -> Result<(), ImportError> {
        let range = self.entries.get(rel).ok_or_else(|| ImportError::MissingEntry { entry: self.entry_name(rel) })?;
        let (start, end) = (range.start.saturating_add(within.start), range.start.saturating_add(within.end));
        if within.start > within.end || end > range.end {
            return Err(ImportError::BadEntry {
                entry: self.entry_name(rel),
                reason: format!("bytes {within:?} lie outside its {} bytes", range.len()),
            });
        }
        let name = format!("{}/{rel}", self.root);
        let crc = if within.start == 0 && end == range.end { self.zip.crc(&name) } else { None };
        out.copy_range(self.zip.file(), start..end, crc).map_err(|source| match source.kind() {
            // The archive is mapped and was checked: it ends early only if changed underneath.
            std::io::ErrorKind::UnexpectedEof => ImportError::Io { path: self.zip.path().to_path_buf(), source },
            _ => ImportError::Write { source },
        })
    }

    /// Maps `path`, checks it as `integrity` says (telling `progress` the bytes checked) and
    /// indexes its entries under the common root folder.
    pub fn open(path: &Path, integrity: super::Integrity, progress: &dyn Fn(u64)) -> Result<Archive, ImportError> {
        let zip = match integrity {
            super::Integrity::Check => MappedZip::open_verified_reporting(path, progress)?,
            super::Integrity::KnownIntact => MappedZip::open(path)?,
            super::Integrity::PayloadsLater => {
                let zip = MappedZip::open(path)?;
                zip.verify(|name| !is_payload(name))?;
                zip
            }
        };
        let mut root: Option<String> = None;
        let mut entries = BTreeMap::new();
        for (name, range) in zip.entries() {
            let (first, rel) = name.split_once('/').unwrap_or((name.as_str(), ""));
            let root = root.get_or_insert_with(|| first.to_string());
            if first != root.as_str() {
                return Err(ImportError::BadEntry {
                    entry: name.clone(),
                    reason: format!("it is outside the archive's root folder `{root}/`"),
                });
            }
            if !rel.is_empty() {
                entries.insert(rel.to_string(), range.clone());
            }
        }
        let root = root.ok_or_else(|| ImportError::NotAnArchive { reason: "the zip has no entries".into() })?;
        Ok(Archive { zip, root, entries })
    }

    /// The file this archive was read from.
    pub fn path(&self) -> &Path {
        self.zip.path()
    }

    /// The root folder name (e.g. `mlp` for `mlp.pt2`).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The full entry name of a root-relative path, for messages.
    pub fn entry_name(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    /// True if the root-relative entry exists.
    pub fn has(&self, rel: &str) -> bool {
        self.entries.contains_key(rel)
    }

    /// The payload of a root-relative entry, borrowed from the map.
    pub fn bytes(&self, rel: &str) -> Result<&[u8], ImportError> {
        let range = self.entries.get(rel).ok_or_else(|| ImportError::MissingEntry { entry: self.entry_name(rel) })?;
        Ok(self.zip.slice(range.clone()))
    }

    /// Absolute file offset of an entry's payload (for alignment checks and memory mapping).
    pub fn data_offset(&self, rel: &str) -> Option<usize> {
        self.entries.get(rel).map(|r| r.start)
    }

    /// Root-relative names of all entries, sorted.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }
}

/// Whether the entry `name` holds a weight's or a constant's bytes (`<root>/data/weights/…`,
/// `<root>/data/constants/…`): the bulk of an archive, checked later with
/// `Integrity::PayloadsLater`.
fn is_payload(name: &str) -> bool {
    name.split_once('/').is_some_and(|(_, rel)| rel.starts_with("data/weights/") || rel.starts_with("data/constants/"))
}
