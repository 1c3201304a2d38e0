//! The `.pt2` zip container: memory-mapped, entries located once, payloads borrowed in place.
//!
//! `torch.export.save` writes every entry STORED (uncompressed) and 64-byte aligned under one
//! root folder whose name is not fixed. We map the file once and hand out slices of the map,
//! so weights are never copied on the way in.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Cursor;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use memmap2::Mmap;
use zip::CompressionMethod;

use super::ImportError;

/// An opened archive.
pub struct Archive {
    path: PathBuf,
    map: Mmap,
    root: String,
    /// Entry name relative to the root → byte range of its payload in `map`.
    entries: BTreeMap<String, Range<usize>>,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("path", &self.path)
            .field("root", &self.root)
            .finish()
    }
}

impl Archive {
    /// Maps `path` and indexes its entries. Fails on anything that is not a well-formed,
    /// uncompressed archive under a single root folder.
    pub fn open(path: &Path) -> Result<Archive, ImportError> {
        let io = |source| ImportError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            return Err(ImportError::NotAnArchive {
                reason: "the file is empty".into(),
            });
        }
        // SAFETY: the map is read-only; if another process truncates the file while we read it
        // the process may fault, which is the documented limit of memory-mapped input.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (root, entries) = index_entries(&map)?;
        Ok(Archive {
            path: path.to_path_buf(),
            map,
            root,
            entries,
        })
    }

    /// The file this archive was read from.
    pub fn path(&self) -> &Path {
        &self.path
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
        let range = self
            .entries
            .get(rel)
            .ok_or_else(|| ImportError::MissingEntry {
                entry: self.entry_name(rel),
            })?;
        Ok(&self.map[range.clone()])
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

/// Reads the central directory and checks every entry: a safe relative name under the common
/// root, stored (not compressed), and a payload that lies inside the file.
fn index_entries(map: &[u8]) -> Result<(String, BTreeMap<String, Range<usize>>), ImportError> {
    let not_zip = |e: zip::result::ZipError| ImportError::NotAnArchive {
        reason: e.to_string(),
    };
    let mut zip = zip::ZipArchive::new(Cursor::new(map)).map_err(not_zip)?;
    let mut root: Option<String> = None;
    let mut entries = BTreeMap::new();
    for i in 0..zip.len() {
        let file = zip.by_index_raw(i).map_err(not_zip)?;
        let name = file.name().to_string();
        let bad = |reason: String| ImportError::BadEntry {
            entry: name.clone(),
            reason,
        };
        if !is_safe_name(&name) {
            return Err(bad(
                "the name escapes the archive folder (absolute or `..`)".into(),
            ));
        }
        let (first, rel) = name.split_once('/').unwrap_or((name.as_str(), ""));
        let root = root.get_or_insert_with(|| first.to_string());
        if first != root.as_str() {
            return Err(bad(format!(
                "it is outside the archive's root folder `{root}/`"
            )));
        }
        if file.is_dir() || rel.is_empty() {
            continue;
        }
        if file.compression() != CompressionMethod::Stored {
            return Err(bad(format!(
                "it is compressed ({:?}); pt2 archives store entries uncompressed",
                file.compression()
            )));
        }
        let start = file.data_start();
        let size = file.compressed_size();
        let end = start.checked_add(size).filter(|&e| e <= map.len() as u64);
        let Some(end) = end else {
            return Err(bad(format!(
                "its declared size of {size} bytes at offset {start} runs past the end of the {}-byte file",
                map.len()
            )));
        };
        if file.size() != size {
            return Err(bad("its stored and declared sizes differ".into()));
        }
        entries.insert(rel.to_string(), start as usize..end as usize);
    }
    let root = root.ok_or_else(|| ImportError::NotAnArchive {
        reason: "the zip has no entries".into(),
    })?;
    Ok((root, entries))
}

/// A relative path with no `..`, no root and no drive prefix.
fn is_safe_name(name: &str) -> bool {
    !name.contains('\\')
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

#[cfg(test)]
mod tests {
    use super::is_safe_name;

    #[test]
    fn entry_names_must_stay_inside() {
        assert!(is_safe_name("mlp/data/weights/weight_0"));
        assert!(!is_safe_name("mlp/../evil"));
        assert!(!is_safe_name("/etc/passwd"));
        assert!(!is_safe_name("mlp\\..\\evil"));
    }
}
