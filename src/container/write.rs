//! Writing zip containers: stored entries whose data starts 64-byte aligned, with fixed
//! timestamps (the same input gives the same bytes), zip64 records only where sizes or offsets
//! need them. An entry's bytes are written through a [`Sink`], which can also append a range of
//! a mapped file copied inside the kernel (`copy_file_range`): a cache hit then copies the
//! stored weights from the archive into the artifact as `cp` would, without passing them
//! through this process.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use super::MappedFile;

/// Where an entry's data starts, relative to the file.
pub(crate) const ALIGN: u64 = 64;
/// The zip32 limit: sizes and offsets at or above it go to zip64 extra fields.
const ZIP32_MAX: u64 = 0xFFFF_FFFF;
/// 1980-01-01, the earliest DOS date, for every entry.
const DOS_DATE: u16 = (1 << 5) | 1;
/// The extra field that pads a local header so that the data is aligned (zipalign's id).
const PADDING_ID: u16 = 0xD935;

/// A destination for bytes that can also take a range of a mapped file by a kernel copy.
pub trait Sink: Write {
    /// Appends the bytes of `src` in `range`; `crc` is their CRC-32 when the caller knows it
    /// (a whole entry of a verified archive), so that they need not be read.
    fn copy_range(&mut self, src: &MappedFile, range: Range<usize>, crc: Option<u32>) -> io::Result<()>;
}

/// One entry as the central directory records it.
struct Record {
    name: String,
    header_at: u64,
    len: u64,
    crc: u32,
}

/// A zip file being written, entry by entry.
pub(crate) struct ZipOut {
    out: BufWriter<File>,
    at: u64,
    records: Vec<Record>,
}

impl ZipOut {
    /// Starts a zip at the beginning of `file`.
    pub(crate) fn new(file: File) -> ZipOut {
        ZipOut { out: BufWriter::with_capacity(1 << 20, file), at: 0, records: Vec::new() }
    }

    /// Writes the entry `name` of exactly `len` bytes, which `write` writes.
    pub(crate) fn entry(
        &mut self,
        name: &str,
        len: u64,
        write: impl FnOnce(&mut EntrySink<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let header_at = self.at;
        let local = local_header(name, len, header_at);
        self.out.write_all(&local).map_err(|e| e.to_string())?;
        self.at += local.len() as u64;
        let mut sink = EntrySink { out: &mut self.out, crc: crc32fast::Hasher::new(), written: 0 };
        write(&mut sink)?;
        let (written, crc) = (sink.written, sink.crc.finalize());
        if written != len {
            return Err(format!("`{name}`: {written} bytes written, {len} planned"));
        }
        self.at += len;
        // The CRC-32 goes into the local header once the data is known.
        self.out.flush().map_err(|e| e.to_string())?;
        self.out.get_ref().write_all_at(&crc.to_le_bytes(), header_at + 14).map_err(|e| e.to_string())?;
        self.records.push(Record { name: name.to_string(), header_at, len, crc });
        Ok(())
    }

    /// Writes the central directory and the end records; the file is complete (not synced).
    pub(crate) fn finish(mut self) -> io::Result<File> {
        let directory_at = self.at;
        let mut directory = Vec::new();
        for r in &self.records {
            directory.extend(central_record(r));
        }
        let entries = self.records.len() as u64;
        let size = directory.len() as u64;
        let zip64 = entries >= 0xFFFF || size >= ZIP32_MAX || directory_at >= ZIP32_MAX;
        if zip64 {
            let end64_at = directory_at + size;
            directory.extend(0x0606_4b50u32.to_le_bytes());
            directory.extend(44u64.to_le_bytes());
            directory.extend([45, 0, 45, 0]); // made by, needed: 4.5
            directory.extend([0; 8]); // this disk, the directory's disk
            directory.extend(entries.to_le_bytes());
            directory.extend(entries.to_le_bytes());
            directory.extend(size.to_le_bytes());
            directory.extend(directory_at.to_le_bytes());
            directory.extend(0x0706_4b50u32.to_le_bytes());
            directory.extend(0u32.to_le_bytes());
            directory.extend(end64_at.to_le_bytes());
            directory.extend(1u32.to_le_bytes());
        }
        directory.extend(0x0605_4b50u32.to_le_bytes());
        directory.extend([0; 4]); // disks
        let count = entries.min(0xFFFF) as u16;
        directory.extend(count.to_le_bytes());
        directory.extend(count.to_le_bytes());
        directory.extend((size.min(ZIP32_MAX) as u32).to_le_bytes());
        directory.extend((directory_at.min(ZIP32_MAX) as u32).to_le_bytes());
        directory.extend([0; 2]); // comment
        self.out.write_all(&directory)?;
        self.out.into_inner().map_err(io::IntoInnerError::into_error)
    }
}

/// The local header of an entry whose header starts at `at`, padded so that its data starts at
/// a multiple of [`ALIGN`]. The CRC-32 is left 0, to be filled in after the data.
fn local_header(name: &str, len: u64, at: u64) -> Vec<u8> {
    let large = len >= ZIP32_MAX;
    let mut extra = Vec::new();
    if large {
        extra.extend(1u16.to_le_bytes());
        extra.extend(16u16.to_le_bytes());
        extra.extend(len.to_le_bytes());
        extra.extend(len.to_le_bytes());
    }
    let unpadded = at + 30 + name.len() as u64 + extra.len() as u64;
    let mut pad = (ALIGN - unpadded % ALIGN) % ALIGN;
    if pad > 0 && pad < 4 {
        pad += ALIGN; // an extra field needs its 4-byte id and size
    }
    if pad > 0 {
        extra.extend(PADDING_ID.to_le_bytes());
        extra.extend(((pad - 4) as u16).to_le_bytes());
        extra.resize(extra.len() + pad as usize - 4, 0);
    }
    let size32 = if large { ZIP32_MAX as u32 } else { len as u32 };
    let mut h = Vec::with_capacity(30 + name.len() + extra.len());
    h.extend(0x0403_4b50u32.to_le_bytes());
    h.extend(if large { 45u16 } else { 20u16 }.to_le_bytes());
    h.extend(0x0800u16.to_le_bytes()); // UTF-8 names
    h.extend(0u16.to_le_bytes()); // stored
    h.extend(0u16.to_le_bytes()); // time
    h.extend(DOS_DATE.to_le_bytes());
    h.extend(0u32.to_le_bytes()); // CRC-32, filled in later
    h.extend(size32.to_le_bytes());
    h.extend(size32.to_le_bytes());
    h.extend((name.len() as u16).to_le_bytes());
    h.extend((extra.len() as u16).to_le_bytes());
    h.extend(name.as_bytes());
    h.extend(extra);
    h
}

/// The central directory record of an entry.
fn central_record(r: &Record) -> Vec<u8> {
    let (large, far) = (r.len >= ZIP32_MAX, r.header_at >= ZIP32_MAX);
    let mut extra = Vec::new();
    if large || far {
        let fields = [large.then_some(r.len), large.then_some(r.len), far.then_some(r.header_at)];
        let values: Vec<u64> = fields.into_iter().flatten().collect();
        extra.extend(1u16.to_le_bytes());
        extra.extend(((values.len() * 8) as u16).to_le_bytes());
        values.iter().for_each(|v| extra.extend(v.to_le_bytes()));
    }
    let size32 = if large { ZIP32_MAX as u32 } else { r.len as u32 };
    let needed = if large || far { 45u16 } else { 20u16 };
    let mut c = Vec::with_capacity(46 + r.name.len() + extra.len());
    c.extend(0x0201_4b50u32.to_le_bytes());
    c.extend((0x0300 | needed).to_le_bytes()); // made by: unix
    c.extend(needed.to_le_bytes());
    c.extend(0x0800u16.to_le_bytes());
    c.extend(0u16.to_le_bytes());
    c.extend(0u16.to_le_bytes());
    c.extend(DOS_DATE.to_le_bytes());
    c.extend(r.crc.to_le_bytes());
    c.extend(size32.to_le_bytes());
    c.extend(size32.to_le_bytes());
    c.extend((r.name.len() as u16).to_le_bytes());
    c.extend((extra.len() as u16).to_le_bytes());
    c.extend([0; 6]); // comment length, disk, internal attributes
    c.extend((0o100644u32 << 16).to_le_bytes()); // a regular file, rw-r--r--
    c.extend((if far { ZIP32_MAX as u32 } else { r.header_at as u32 }).to_le_bytes());
    c.extend(r.name.as_bytes());
    c.extend(extra);
    c
}

/// The bytes of one entry: counted and summed (CRC-32) on their way into the zip.
pub(crate) struct EntrySink<'a> {
    out: &'a mut BufWriter<File>,
    crc: crc32fast::Hasher,
    written: u64,
}

impl Write for EntrySink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Sink for EntrySink<'_> {
    fn copy_range(&mut self, src: &MappedFile, range: Range<usize>, crc: Option<u32>) -> io::Result<()> {
        let len = range.len() as u64;
        match crc {
            Some(crc) => self.crc.combine(&crc32fast::Hasher::new_with_initial_len(crc, len)),
            None => src.for_each_chunk(range.clone(), |chunk| {
                self.crc.update(chunk);
                Ok(())
            })?,
        }
        self.out.flush()?;
        kernel_copy(src, range, self.out.get_mut())?;
        self.written += len;
        Ok(())
    }
}

/// A plain file as a [`Sink`] (an external weights file).
pub(crate) struct FileSink(pub BufWriter<File>);

impl Write for FileSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl Sink for FileSink {
    fn copy_range(&mut self, src: &MappedFile, range: Range<usize>, _crc: Option<u32>) -> io::Result<()> {
        self.0.flush()?;
        kernel_copy(src, range, self.0.get_mut())
    }
}

/// Bytes in memory as a [`Sink`] (a range is copied from the map).
impl Sink for Vec<u8> {
    fn copy_range(&mut self, src: &MappedFile, range: Range<usize>, _crc: Option<u32>) -> io::Result<()> {
        self.extend_from_slice(&src.bytes()[range]);
        Ok(())
    }
}

/// Appends `range` of `src` to `dst` at its position: `copy_file_range`, which moves the bytes
/// inside the kernel, or where the system cannot (another file system, an old kernel), a
/// buffered copy. Holes of a sparse source (`SEEK_HOLE`) stay holes: `dst` is seeked over them,
/// as `cp` does, so that a sparse archive gives a sparse artifact.
fn kernel_copy(src: &MappedFile, range: Range<usize>, dst: &mut File) -> io::Result<()> {
    let mut at = range.start;
    while at < range.end {
        let (data, hole) = next_data(src.raw_file(), at, range.end);
        if data > at {
            skip(dst, data - at)?;
        }
        if data < hole {
            copy_data(src, data..hole, dst)?;
        }
        at = hole;
    }
    Ok(())
}

/// The next run of data in `file` from `at` (before `end`): `(start, end)`, `start == end`
/// when the rest is a hole. A file system that cannot tell says it is all data.
fn next_data(file: &File, at: usize, end: usize) -> (usize, usize) {
    let fd = file.as_raw_fd();
    let seek = |whence| {
        // SAFETY: `fd` is an open file of this process; lseek only moves its offset, which no
        // reader of the map depends on (reads go through the map or at explicit offsets).
        let r = unsafe { libc::lseek(fd, at as libc::off_t, whence) };
        usize::try_from(r).ok()
    };
    match seek(libc::SEEK_DATA) {
        Some(data) if data >= end => (end, end),
        Some(data) => (data.max(at), seek(libc::SEEK_HOLE).map_or(end, |hole| hole.clamp(data.max(at), end))),
        // ENXIO: no data from `at` on. Anything else: no hole information, copy it all.
        None if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) => (end, end),
        None => (at, end),
    }
}

/// Moves `dst`'s position `len` bytes on, leaving a hole, and makes the file at least that long
/// (a hole at its end is part of its length).
fn skip(dst: &mut File, len: usize) -> io::Result<()> {
    use std::io::Seek;
    let pos = dst.seek(io::SeekFrom::Current(len as i64))?;
    if dst.metadata()?.len() < pos {
        dst.set_len(pos)?;
    }
    Ok(())
}

/// `copy_file_range` of `range` (data, not holes) to `dst`'s position.
fn copy_data(src: &MappedFile, range: Range<usize>, dst: &mut File) -> io::Result<()> {
    let mut from = range.start as libc::loff_t;
    let end = range.end as libc::loff_t;
    while from < end {
        let left = (end - from) as usize;
        // SAFETY: both descriptors are open files of this process; `from` outlives the call and
        // the kernel writes at `dst`'s own position, which it advances.
        let n = unsafe {
            libc::copy_file_range(src.raw_file().as_raw_fd(), &mut from, dst.as_raw_fd(), std::ptr::null_mut(), left, 0)
        };
        match n {
            n if n > 0 => {}
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the source ended early")),
            _ => {
                let e = io::Error::last_os_error();
                let unsupported = matches!(
                    e.raw_os_error(),
                    Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL | libc::EPERM)
                );
                if !unsupported {
                    return Err(e);
                }
                return src.copy_to(from as usize..range.end, dst);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::{local_header, Sink, ZipOut, ALIGN};
    use crate::container::{MappedFile, MappedZip};

    /// Entries written plainly and by kernel copy, with and without a known CRC-32, read back
    /// by the zip crate and the verifying reader, each aligned.
    #[test]
    fn written_zips_read_back_aligned_and_verified() {
        let dir = std::env::temp_dir().join(format!("zipout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let src_path = dir.join("src.bin");
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&src_path, &payload).expect("writes");
        let src = MappedFile::open(&src_path).expect("maps");
        let path = dir.join("out.zip");
        let mut zip = ZipOut::new(std::fs::File::create(&path).expect("creates"));
        zip.entry("a.txt", 5, |w| w.write_all(b"hello").map_err(|e| e.to_string())).expect("a");
        zip.entry("b/copied", 200_003, |w| {
            w.write_all(&payload[..3]).map_err(|e| e.to_string())?;
            w.copy_range(&src, 3..100_000, None).map_err(|e| e.to_string())?;
            let crc = crc32fast::hash(&payload[100_000..200_003]);
            w.copy_range(&src, 100_000..200_003, Some(crc)).map_err(|e| e.to_string())
        })
        .expect("b");
        let short = zip.entry("c", 4, |w| w.write_all(b"abc").map_err(|e| e.to_string()));
        assert!(short.expect_err("refused").contains("3 bytes written, 4 planned"));
        drop(zip);
        let mut zip = ZipOut::new(std::fs::File::create(&path).expect("creates"));
        zip.entry("a.txt", 5, |w| w.write_all(b"hello").map_err(|e| e.to_string())).expect("a");
        zip.entry("b/copied", 200_000, |w| w.copy_range(&src, 0..200_000, None).map_err(|e| e.to_string())).expect("b");
        zip.finish().expect("finishes");
        let read = MappedZip::open_verified(&path).expect("reads and verifies");
        assert_eq!(read.get("a.txt"), Some(&b"hello"[..]));
        assert_eq!(read.get("b/copied"), Some(&payload[..200_000]));
        assert!(read.entries().values().all(|r| (r.start as u64).is_multiple_of(ALIGN)), "{:?}", read.entries());
        let mut z = zip::ZipArchive::new(std::fs::File::open(&path).expect("opens")).expect("the zip crate reads it");
        assert_eq!(z.by_name("a.txt").expect("a").crc32(), crc32fast::hash(b"hello"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A sparse source copies to a sparse destination with the same bytes: holes (at the start
    /// of the range, between data and at the end) are seeked over, not written.
    #[test]
    fn holes_stay_holes() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let dir = std::env::temp_dir().join(format!("zipout-holes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let (src_path, dst_path) = (dir.join("sparse.bin"), dir.join("copy.bin"));
        let src_file = std::fs::File::create(&src_path).expect("creates");
        let len = 8 << 20;
        src_file.set_len(len).expect("a hole of 8 MiB");
        let data: Vec<u8> = (0..65_536u32).map(|i| (i % 251) as u8 + 1).collect();
        for at in [1u64 << 20, 5 << 20] {
            src_file.write_all_at(&data, at).expect("data");
        }
        drop(src_file);
        let src = MappedFile::open(&src_path).expect("maps");
        let mut out = super::FileSink(std::io::BufWriter::new(std::fs::File::create(&dst_path).expect("creates")));
        out.write_all(b"head").expect("writes");
        out.copy_range(&src, 4096..len as usize, None).expect("copies");
        out.flush().expect("flushes");
        drop(out);
        let copied = std::fs::read(&dst_path).expect("reads");
        assert_eq!(&copied[..4], b"head");
        assert_eq!(&copied[4..], &src.bytes()[4096..], "the same bytes, holes reading as zeros");
        let allocated = |p: &std::path::Path| std::fs::metadata(p).expect("stat").blocks() * 512;
        if allocated(&src_path) < len / 2 {
            // The file system keeps holes (it did for the source): so must the copy.
            assert!(allocated(&dst_path) < len / 2, "{} bytes allocated for the copy", allocated(&dst_path));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Headers of entries past 4 GiB carry zip64 sizes and stay aligned.
    #[test]
    fn large_entries_get_zip64_headers() {
        for at in [0u64, 100, 5 << 30] {
            let h = local_header("weights.safetensors", 6 << 30, at);
            assert_eq!((at + h.len() as u64) % ALIGN, 0);
            assert_eq!(&h[18..26], &[0xFF; 8], "sizes in the zip64 field");
            assert_eq!(u16::from_le_bytes([h[30 + 19], h[30 + 20]]), 1, "the zip64 field comes first");
        }
    }
}
