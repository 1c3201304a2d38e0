//! Memory-mapped zip files: the container of both `.pt2` archives and `.tpuexe` artifacts.
//!
//! The central directory is read once; every entry must have a safe relative name that no
//! other entry has, be stored uncompressed, have a local header that agrees with its directory
//! record, have its payload inside the file without overlapping another entry, and match the
//! CRC-32 its record gives (a flipped bit in a weight changes the program, so it is refused,
//! not compiled). Payloads are then plain slices of the map, so tensors and executables are
//! never copied on the way in.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Cursor;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use crate::digest::WeightsDigest;
use memmap2::{Mmap, UncheckedAdvice};

pub(crate) mod write;
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

/// A read-only memory map of a whole file, read in chunks whose pages are handed back.
pub struct MappedFile {
    path: PathBuf,
    file: File,
    map: Mmap,
}

/// How much of a mapped file a pass over it reads before handing the pages back
/// ([`MappedFile::for_each_chunk`]).
const CHUNK: usize = 16 << 20;

/// `range` in consecutive chunks of at most [`CHUNK`] bytes.
fn chunks(range: Range<usize>) -> impl Iterator<Item = Range<usize>> {
    let end = range.end;
    range.step_by(CHUNK).map(move |at| at..at.saturating_add(CHUNK).min(end))
}

/// The buffer of [`MappedFile::copy_to`].
const COPY_BUFFER: usize = 4 << 20;

impl MappedFile {
    /// Maps `path` (an empty file maps to no bytes).
    pub fn open(path: &Path) -> Result<MappedFile, ContainerError> {
        let io = |source| ContainerError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; if another process truncates the file while we read it
        // the process may fault, which is the documented limit of memory-mapped input.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(MappedFile { path: path.to_path_buf(), file, map })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub fn raw_file(&self) -> &File {
        &self.file
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// `f` over the bytes of `range` in chunks, each handed back after `f` saw it
    /// ([`MappedFile::release`]): a pass over gigabytes of weights keeps a chunk resident, not
    /// the file.
    pub fn for_each_chunk(
        &self,
        range: Range<usize>,
        mut f: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        for chunk in chunks(range) {
            f(&self.map[chunk.clone()])?;
            self.release(chunk);
        }
        Ok(())
    }

    /// Writes the bytes of `range` to `out`, read with `pread` into a small buffer rather than
    /// through the map: a copy of gigabytes then faults no page into this process.
    pub fn copy_to(&self, range: Range<usize>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; COPY_BUFFER.min(range.len())];
        let mut at = range.start;
        while at < range.end {
            let n = (range.end - at).min(buf.len());
            self.file.read_exact_at(&mut buf[..n], at as u64)?;
            out.write_all(&buf[..n])?;
            at += n;
        }
        Ok(())
    }

    /// Drops the pages of `range` from this process's resident memory. They stay in the page
    /// cache, and a later read maps them again.
    pub fn release(&self, range: Range<usize>) {
        if range.is_empty() || range.end > self.map.len() {
            return;
        }
        // SAFETY: the map is read-only and backed by the file, so a page dropped here reads back
        // the same bytes when it is touched again; no memory is freed under a live reference.
        let _ = unsafe { self.map.unchecked_advise_range(UncheckedAdvice::DontNeed, range.start, range.len()) };
    }

    /// The digest of `range` by the algorithm of `like`, read in chunks it hands back.
    pub fn digest_like(&self, range: Range<usize>, like: &WeightsDigest) -> WeightsDigest {
        let mut hasher = like.hasher();
        let _ = self.for_each_chunk(range, |chunk| {
            hasher.update(chunk);
            Ok(())
        });
        hasher.finish()
    }
}

/// A mapped zip file with its entries indexed by full name.
pub struct MappedZip {
    file: MappedFile,
    entries: BTreeMap<String, Range<usize>>,
    /// Each entry's CRC-32 as its directory record gives it, for [`MappedZip::verify`].
    crcs: BTreeMap<String, u32>,
}

impl MappedZip {
    /// Maps `path`, checks every entry's structure and every byte against its CRC-32: what
    /// readers of archives and artifacts use. The pass reads the file once, in chunks it
    /// hands back, so that memory stays flat whatever the file's size.
    pub fn open_verified(path: &Path) -> Result<MappedZip, ContainerError> {
        MappedZip::open_verified_reporting(path, &|_| {})
    }

    /// [`MappedZip::open_verified`], telling `progress` how many bytes each step checked.
    pub fn open_verified_reporting(path: &Path, progress: &dyn Fn(u64)) -> Result<MappedZip, ContainerError> {
        let zip = MappedZip::open(path)?;
        zip.verify_reporting(|_| true, progress)?;
        Ok(zip)
    }

    /// Checks the bytes of the entries `which` selects against their CRC-32s.
    pub fn verify(&self, which: impl Fn(&str) -> bool) -> Result<(), ContainerError> {
        self.verify_reporting(which, &|_| {})
    }

    /// [`MappedZip::verify`], telling `progress` how many bytes each step checked.
    pub fn verify_reporting(&self, which: impl Fn(&str) -> bool, progress: &dyn Fn(u64)) -> Result<(), ContainerError> {
        let entries = self.entries_in_order(which);
        let read: Vec<Range<usize>> = entries.iter().flat_map(|(_, r)| chunks((*r).clone())).collect();
        self.check_crcs(self.crcs_of(entries, read, progress))
    }

    /// The entries `which` selects, in the order of their bytes in the file (they do not
    /// overlap: [`MappedZip::open`] checks it).
    fn entries_in_order(&self, which: impl Fn(&str) -> bool) -> Vec<(&String, &Range<usize>)> {
        let mut entries: Vec<(&String, &Range<usize>)> = self.entries.iter().filter(|(n, _)| which(n)).collect();
        entries.sort_by_key(|(_, r)| r.start);
        entries
    }

    /// The CRC-32 of each of `entries` (in file order), from the chunks of the file `read`
    /// gives, in order and covering them; each chunk is handed back ([`MappedFile::release`])
    /// and its length told to `progress` once seen.
    fn crcs_of<'z>(
        &self,
        entries: Vec<(&'z String, &Range<usize>)>,
        read: impl IntoIterator<Item = Range<usize>>,
        progress: &dyn Fn(u64),
    ) -> Vec<(&'z String, u32)> {
        let mut crcs = vec![crc32fast::Hasher::new(); entries.len()];
        let mut first = 0;
        for chunk in read {
            while first < entries.len() && entries[first].1.end <= chunk.start {
                first += 1;
            }
            let overlapping = entries.iter().enumerate().skip(first).take_while(|(_, (_, r))| r.start < chunk.end);
            for (i, (_, r)) in overlapping {
                let (s, e) = (r.start.max(chunk.start), r.end.min(chunk.end));
                if s < e {
                    crcs[i].update(&self.file.map[s..e]);
                }
            }
            progress(chunk.len() as u64);
            self.file.release(chunk);
        }
        entries.into_iter().map(|(name, _)| name).zip(crcs.into_iter().map(crc32fast::Hasher::finalize)).collect()
    }

    /// Each CRC-32 against its entry's in the directory; the first that differs is the error.
    fn check_crcs(&self, crcs: Vec<(&String, u32)>) -> Result<(), ContainerError> {
        for (name, crc) in crcs {
            let expected = self.crcs[name.as_str()];
            if crc != expected {
                return Err(ContainerError::BadEntry {
                    entry: crate::display::shown(name),
                    reason: format!(
                        "its bytes do not match their CRC-32 ({crc:08x}, the directory says {expected:08x}): the file is damaged"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The whole file's BLAKE3, and every entry checked against its CRC-32 on the way: one read
    /// of the file for both. BLAKE3 hashes each chunk as a tree over all cores (rayon), so the
    /// digest of a large archive takes a fraction of a serial hash's time; another thread checks
    /// the CRC-32s of each chunk it has passed and hands the chunk back
    /// ([`MappedFile::release`]): a few chunks are resident at a time.
    pub fn blake3_verifying(&self) -> Result<String, ContainerError> {
        let (passed, read) = std::sync::mpsc::sync_channel::<Range<usize>>(2);
        let (hash, crcs) = std::thread::scope(|s| {
            let crcs = s.spawn(move || self.crcs_of(self.entries_in_order(|_| true), read, &|_| {}));
            let mut hash = blake3::Hasher::new();
            for chunk in chunks(0..self.file.map.len()) {
                hash.update_rayon(&self.file.map[chunk.clone()]);
                if passed.send(chunk).is_err() {
                    break; // the checker is gone: its join below says why
                }
            }
            drop(passed);
            (hash, crcs.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        });
        self.check_crcs(crcs)?;
        Ok(hash.finalize().to_hex().to_string())
    }

    /// Maps `path` and checks every entry's structure, without reading the payloads (enough to
    /// tell what kind of file it is).
    pub fn open(path: &Path) -> Result<MappedZip, ContainerError> {
        let file = MappedFile::open(path)?;
        if file.bytes().is_empty() {
            return Err(ContainerError::NotZip { reason: "the file is empty".into() });
        }
        let (entries, crcs) = index_entries(file.bytes())?;
        Ok(MappedZip { file, entries, crcs })
    }

    /// The mapped file.
    pub fn file(&self) -> &MappedFile {
        &self.file
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Entries by full name (directories excluded), with their payload ranges.
    pub fn entries(&self) -> &BTreeMap<String, Range<usize>> {
        &self.entries
    }

    /// See [`MappedFile::for_each_chunk`].
    pub fn for_each_chunk(
        &self,
        range: Range<usize>,
        f: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        self.file.for_each_chunk(range, f)
    }

    /// See [`MappedFile::copy_to`].
    pub fn copy_to(&self, range: Range<usize>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.file.copy_to(range, out)
    }

    /// See [`MappedFile::release`].
    pub fn release(&self, range: Range<usize>) {
        self.file.release(range);
    }

    /// The file's length.
    pub fn file_len(&self) -> usize {
        self.file.map.len()
    }

    /// A payload range of the map.
    pub fn slice(&self, range: Range<usize>) -> &[u8] {
        &self.file.map[range]
    }

    /// The payload of an entry by full name.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.entries.get(name).map(|r| &self.file.map[r.clone()])
    }

    /// The CRC-32 of an entry's payload as the directory gives it (checked by `open_verified`).
    pub fn crc(&self, name: &str) -> Option<u32> {
        self.crcs.get(name).copied()
    }

    /// The range of an entry's payload in the map.
    pub fn range(&self, name: &str) -> Option<Range<usize>> {
        self.entries.get(name).cloned()
    }
}

/// Entries by name: payload ranges and CRC-32s.
type Index = (BTreeMap<String, Range<usize>>, BTreeMap<String, u32>);

fn index_entries(map: &[u8]) -> Result<Index, ContainerError> {
    let not_zip = |e: zip::result::ZipError| ContainerError::NotZip { reason: e.to_string() };
    let mut zip = zip::ZipArchive::new(Cursor::new(map)).map_err(not_zip)?;
    if zip.offset() != 0 {
        return Err(ContainerError::NotZip {
            reason: format!(
                "the file is damaged: its last directory describes a zip that starts {} bytes in \
                 (a truncated file ending in an embedded zip?)",
                zip.offset()
            ),
        });
    }
    let directory = zip.central_directory_start();
    check_unique_names(map, directory, zip.len())?;
    let (mut entries, mut crcs) = (BTreeMap::new(), BTreeMap::new());
    let mut extents = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let file = zip.by_index_raw(i).map_err(not_zip)?;
        let name = file.name().to_string();
        let bad = |reason: String| ContainerError::BadEntry { entry: crate::display::shown(&name), reason };
        if !is_safe_name(&name) {
            return Err(bad("the name escapes the archive folder (absolute or `..`)".into()));
        }
        if file.compression() != CompressionMethod::Stored {
            return Err(bad(format!(
                "it is compressed ({}); entries must be stored uncompressed",
                compression_name(local_method(map, file.header_start()))
            )));
        }
        check_local_header(map, file.header_start(), file.name_raw()).map_err(bad)?;
        let start = file.data_start();
        let size = file.compressed_size();
        let Some(end) = start.checked_add(size).filter(|&e| e <= directory) else {
            return Err(bad(format!(
                "its declared size of {size} bytes at offset {start} runs past the end of the entries \
                 ({directory} bytes; the file has {})",
                map.len()
            )));
        };
        if file.size() != size {
            return Err(bad("its stored and declared sizes differ".into()));
        }
        extents.push((file.header_start(), end, name.clone()));
        if !file.is_dir() {
            crcs.insert(name.clone(), file.crc32());
            entries.insert(name, start as usize..end as usize);
        }
    }
    check_no_overlap(extents)?;
    Ok((entries, crcs))
}

/// The zip reader keeps the last of several entries with one name; walking the central
/// directory's records finds them all, so a repeated name is refused instead.
fn check_unique_names(map: &[u8], directory: u64, indexed: usize) -> Result<(), ContainerError> {
    const RECORD: u32 = 0x0201_4b50;
    let mut at = usize::try_from(directory).unwrap_or(usize::MAX);
    let mut seen = std::collections::BTreeSet::new();
    while let Some(fixed) = map.get(at..at.saturating_add(46)) {
        if u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]) != RECORD {
            break;
        }
        let field = |o: usize| usize::from(u16::from_le_bytes([fixed[o], fixed[o + 1]]));
        let name_end = at + 46 + field(28);
        let Some(name) = map.get(at + 46..name_end) else { break };
        if !seen.insert(name) {
            return Err(ContainerError::BadEntry {
                entry: crate::display::shown(&String::from_utf8_lossy(name)),
                reason: "two entries have this name".into(),
            });
        }
        at = name_end + field(30) + field(32);
    }
    if seen.len() != indexed {
        return Err(ContainerError::NotZip {
            reason: format!("the directory holds {} records but {indexed} entries were read", seen.len()),
        });
    }
    Ok(())
}

/// The local header before an entry's data must be one and name the same entry.
fn check_local_header(map: &[u8], at: u64, central_name: &[u8]) -> Result<(), String> {
    const LOCAL: u32 = 0x0403_4b50;
    let at = usize::try_from(at).map_err(|_| "its local header lies past the end of the file".to_string())?;
    let fixed = map.get(at..at.saturating_add(30)).ok_or("its local header lies past the end of the file")?;
    if u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]) != LOCAL {
        return Err(format!("no local header at offset {at}, where its directory record points"));
    }
    let name_len = usize::from(u16::from_le_bytes([fixed[26], fixed[27]]));
    let local_name = map.get(at + 30..at + 30 + name_len).ok_or("its local header runs past the end of the file")?;
    if local_name != central_name {
        return Err(format!(
            "its local header names `{}`; the directory and local headers disagree",
            crate::display::shown(&String::from_utf8_lossy(local_name))
        ));
    }
    if u16::from_le_bytes([fixed[8], fixed[9]]) != 0 {
        return Err(format!(
            "its local header says {}, its directory record says stored",
            compression_name(Some(u16::from_le_bytes([fixed[8], fixed[9]])))
        ));
    }
    Ok(())
}

/// No entry's header or data may lie inside another's (a zip bomb's trick, or damage).
fn check_no_overlap(mut extents: Vec<(u64, u64, String)>) -> Result<(), ContainerError> {
    extents.sort();
    for pair in extents.windows(2) {
        let ((_, end, first), (start, _, second)) = (&pair[0], &pair[1]);
        if start < end {
            return Err(ContainerError::BadEntry {
                entry: crate::display::shown(second),
                reason: format!("its bytes overlap those of entry `{}`", crate::display::shown(first)),
            });
        }
    }
    Ok(())
}

/// The compression method code in the local header at `at`, if there is one.
fn local_method(map: &[u8], at: u64) -> Option<u16> {
    let at = usize::try_from(at).ok()?;
    map.get(at + 8..at + 10).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// A zip compression method as a person would name it.
fn compression_name(code: Option<u16>) -> String {
    match code {
        Some(8) => "deflate".into(),
        Some(9) => "deflate64".into(),
        Some(12) => "bzip2".into(),
        Some(14) => "lzma".into(),
        Some(93) => "zstd".into(),
        Some(95) => "xz".into(),
        Some(c) => format!("zip method {c}"),
        None => "an unknown method".into(),
    }
}

/// A relative path with no `..`, no root and no drive prefix.
fn is_safe_name(name: &str) -> bool {
    !name.contains('\\') && Path::new(name).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

#[cfg(test)]
mod tests {
    use super::{is_safe_name, MappedZip, CHUNK};
    use crate::container::write::ZipOut;
    use std::io::Write;

    /// Entries that span chunks and share them are each checked whole, by `open_verified` and
    /// by `blake3_verifying` (whose BLAKE3 is the file's): a byte flipped past the first chunk
    /// is caught in the entry that holds it.
    #[test]
    fn crcs_are_checked_across_chunks() {
        let dir = std::env::temp_dir().join(format!("torchtpu-chunks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("chunks.zip");
        let big: Vec<u8> = (0..CHUNK + 4096).map(|i| (i * 7 % 251) as u8).collect();
        let mut zip = ZipOut::new(std::fs::File::create(&path).expect("creates"));
        for (name, bytes) in [("a", &b"first"[..]), ("big", &big[..]), ("c", &b"after the chunk"[..])] {
            let write = |w: &mut crate::container::write::EntrySink<'_>| w.write_all(bytes).map_err(|e| e.to_string());
            zip.entry(name, bytes.len() as u64, write).expect("writes");
        }
        zip.finish().expect("finishes");
        MappedZip::open_verified(&path).expect("intact");
        let digest = MappedZip::open(&path).expect("opens").blake3_verifying().expect("intact");
        assert_eq!(digest, blake3::hash(&std::fs::read(&path).expect("reads")).to_hex().to_string());
        for (entry, at) in [("big", CHUNK + 100), ("c", CHUNK + 4096 + 200)] {
            let mut bytes = std::fs::read(&path).expect("reads");
            bytes[at] ^= 1;
            let damaged = dir.join(format!("damaged-{entry}.zip"));
            std::fs::write(&damaged, &bytes).expect("writes");
            let err = MappedZip::open(&damaged).expect("opens").blake3_verifying().expect_err("damaged").to_string();
            assert!(err.contains(&format!("`{entry}`")) && err.contains("CRC-32"), "{err}");
            let err = MappedZip::open_verified(&damaged).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(&format!("`{entry}`")) && err.contains("CRC-32"), "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn entry_names_must_stay_inside() {
        assert!(is_safe_name("mlp/data/weights/weight_0"));
        assert!(!is_safe_name("mlp/../evil"));
        assert!(!is_safe_name("/etc/passwd"));
        assert!(!is_safe_name("mlp\\..\\evil"));
    }
}
