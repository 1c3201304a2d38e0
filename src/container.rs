//! Memory-mapped zip files: the container of both `.pt2` archives and `.tpuexe` artifacts.
//!
//! The central directory is read once; every entry must have a safe relative name, be stored
//! uncompressed, and have its payload inside the file. Payloads are then plain slices of the
//! map, so tensors and executables are never copied on the way in.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Cursor;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use memmap2::Mmap;
use thiserror::Error;
use zip::CompressionMethod;

/// Why a file is not a usable zip container.
#[derive(Debug, Error)]
pub enum ContainerError {
    #[error("cannot read `{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("not a zip container: {reason}")]
    NotZip { reason: String },
    #[error("entry `{entry}`: {reason}")]
    BadEntry { entry: String, reason: String },
}

/// A mapped zip file with its entries indexed by full name.
pub struct MappedZip {
    path: PathBuf,
    map: Mmap,
    entries: BTreeMap<String, Range<usize>>,
}

impl MappedZip {
    /// Maps `path` and checks every entry.
    pub fn open(path: &Path) -> Result<MappedZip, ContainerError> {
        let io = |source| ContainerError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            return Err(ContainerError::NotZip { reason: "the file is empty".into() });
        }
        // SAFETY: the map is read-only; if another process truncates the file while we read it
        // the process may fault, which is the documented limit of memory-mapped input.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let entries = index_entries(&map)?;
        Ok(MappedZip { path: path.to_path_buf(), map, entries })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entries by full name (directories excluded), with their payload ranges.
    pub fn entries(&self) -> &BTreeMap<String, Range<usize>> {
        &self.entries
    }

    /// A payload range of the map.
    pub fn slice(&self, range: Range<usize>) -> &[u8] {
        &self.map[range]
    }

    /// The payload of an entry by full name.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.entries.get(name).map(|r| &self.map[r.clone()])
    }
}

fn index_entries(map: &[u8]) -> Result<BTreeMap<String, Range<usize>>, ContainerError> {
    let not_zip = |e: zip::result::ZipError| ContainerError::NotZip { reason: e.to_string() };
    let mut zip = zip::ZipArchive::new(Cursor::new(map)).map_err(not_zip)?;
    let mut entries = BTreeMap::new();
    for i in 0..zip.len() {
        let file = zip.by_index_raw(i).map_err(not_zip)?;
        let name = file.name().to_string();
        let bad = |reason: String| ContainerError::BadEntry { entry: name.clone(), reason };
        if !is_safe_name(&name) {
            return Err(bad("the name escapes the archive folder (absolute or `..`)".into()));
        }
        if file.is_dir() {
            continue;
        }
        if file.compression() != CompressionMethod::Stored {
            return Err(bad(format!(
                "it is compressed ({:?}); entries must be stored uncompressed",
                file.compression()
            )));
        }
        let start = file.data_start();
        let size = file.compressed_size();
        let Some(end) = start.checked_add(size).filter(|&e| e <= map.len() as u64) else {
            return Err(bad(format!(
                "its declared size of {size} bytes at offset {start} runs past the end of the {}-byte file",
                map.len()
            )));
        };
        if file.size() != size {
            return Err(bad("its stored and declared sizes differ".into()));
        }
        entries.insert(name, start as usize..end as usize);
    }
    Ok(entries)
}

/// A relative path with no `..`, no root and no drive prefix.
fn is_safe_name(name: &str) -> bool {
    !name.contains('\\') && Path::new(name).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
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
