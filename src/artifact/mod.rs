//! The `.tpuexe` artifact: a zip of stored, 64-byte-aligned entries (README.md, "The artifact").
//!
//! - `manifest.json`: what was compiled, how, for which targets, with checksums;
//! - `weights.safetensors`: the tensors the programs take as their leading arguments;
//! - `programs/<bucket>.mlir`: the StableHLO of each bucket;
//! - `executables/<target>/<bucket>.pjrt`: serialized PJRT executables;
//! - `serving/<file>`: the tokenizer, chat template and generation config `serve` reads
//!   (`compile --tokenizer DIR`; see [`serving`]).
//!
//! Entries are stored uncompressed and aligned so that weights and executables can be used
//! straight from a memory map. Writes go to a temporary file that is renamed into place, so
//! readers see the old artifact or the new one. They are not flushed to the disk (as a linker's
//! output is not; that would cost a wait proportional to the weights on every compile): after
//! a power cut a torn artifact is refused by its CRC-32s and sha256s, never run.

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::container::write::{FileSink, Sink, ZipOut};
use crate::container::{ContainerError, MappedFile, MappedZip};
use crate::digest::{sha256_hex, Hasher, WeightsDigest};
use safetensors::tensor::Dtype;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use torchtpu_passes::ir::DType;

mod serving;
mod sharding;
mod signature;
pub(crate) use serving::ServingFile;
pub(crate) use serving::{entries as serving_entries, read_folder as read_serving_folder};
pub(crate) use sharding::{MeshAxisInfo, MeshChoice, MeshTried, ShardingInfo};
pub use signature::output_files;
pub(crate) use signature::{describe_output, dims_json};
pub(crate) use signature::{Signature, SignatureValue, SymbolInfo};

/// Identifies the artifact layout; bumped when the meaning of a field changes.
pub(crate) const ARTIFACT_FORMAT: &str = "torchtpu-artifact/3";
/// The formats this compiler reads: 1 (weights and source digested with sha256), 2 (the
/// weights with BLAKE3) and 3 (the source too, and the export's guards, which a reader of 2
/// would ignore: it is refused by one).
const READ_FORMATS: [&str; 3] = ["torchtpu-artifact/1", "torchtpu-artifact/2", ARTIFACT_FORMAT];
/// The manifest entry.
pub(crate) const MANIFEST: &str = "manifest.json";
/// The weights entry.
pub(crate) const WEIGHTS: &str = "weights.safetensors";

#[derive(Debug, Error)]
pub enum ArtifactError {
    #[error(transparent)]
    Container(#[from] ContainerError),
    #[error("`{path}` is not a torchtpu-compile artifact: {reason}")]
    NotAnArtifact { path: String, reason: String },
    #[error("artifact entry `{entry}` is corrupt: {reason}")]
    Corrupt { entry: String, reason: String },
    #[error("cannot write `{path}`: {reason}")]
    Write { path: String, reason: String },
}

/// The manifest: everything needed to use the artifact without the source model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `torchtpu-artifact/1`: the manifest's layout version.
    pub format: String,
    /// The compiler that wrote the artifact.
    pub compiler: CompilerInfo,
    /// The archive it was compiled from.
    pub source: SourceInfo,
    /// The user inputs and outputs, with symbolic dims and their bounds.
    pub signature: Signature,
    /// The options that shaped the programs.
    pub options: OptionsInfo,
    /// Where the weights are and in which order the programs take them.
    pub weights: WeightsInfo,
    /// How the programs are split over a device mesh (`--mesh`); absent: one device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<ShardingInfo>,
    /// One program per size bucket (one, `main`, for a static program).
    pub buckets: Vec<Bucket>,
    /// Per target, the plugin and one executable per bucket.
    pub targets: Vec<TargetEntry>,
    /// The files `serve` reads beside the model (`compile --tokenizer DIR`); absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serving: Vec<ServingFile>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompilerInfo {
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// File name of the `.pt2` (no folder).
    pub file: String,
    /// The file's BLAKE3 (format 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// The file's sha256 (formats 1 and 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub torch_version: Option<String>,
    pub schema_version: String,
}

impl SourceInfo {
    /// The digest the manifest records of the source, with its algorithm (`blake3` or
    /// `sha256`).
    pub fn digest(&self) -> Option<(&'static str, &str)> {
        match (&self.blake3, &self.sha256) {
            (Some(b), None) => Some(("blake3", b)),
            (None, Some(s)) => Some(("sha256", s)),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptionsInfo {
    pub precision: String,
    /// Graph passes run, in order.
    pub passes: Vec<String>,
    /// `--compute-dtype` (absent: f32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_dtype: Option<String>,
    /// `--pad-multiple` (absent: no padding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_multiple: Option<i64>,
    /// `--grouped-mm` (absent: dense).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grouped_mm: Option<String>,
    /// `--attention` and its block, `blocked:512` (absent: auto with the default block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeightsInfo {
    /// The entry that holds the weights (`weights.safetensors`), or with `external` the name of
    /// the file beside the artifact that does.
    pub entry: String,
    /// The weights are a file beside the artifact (`--weights external`), not an entry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    /// Names of the weight arguments in the order the programs take them.
    pub order: Vec<String>,
    pub bytes: u64,
    /// Their digest: `"blake3": "…"` (format 2), `"sha256": "…"` (format 1).
    #[serde(flatten)]
    pub digest: WeightsDigest,
}

/// One compiled size: symbol values and its StableHLO.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub name: String,
    pub bindings: BTreeMap<String, i64>,
    /// Symbols whose real values the program takes as `i64` inputs after all others (a bucket
    /// of a dynamic program); empty for a program of one exact size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
    /// Sizes the data decides (`nonzero`'s count) that outputs are cut to: the program returns
    /// their real values as `i64` results after all others, in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub computed: Vec<String>,
    /// Per symbol, the real sizes `[lo, hi]` this bucket serves.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub serves: BTreeMap<String, [i64; 2]>,
    /// Expected fraction of padding over the sizes it serves, taken uniform.
    #[serde(default)]
    pub padding_waste: f64,
    pub program: String,
    pub program_sha256: String,
    /// Static shapes of the user inputs in this bucket.
    pub input_dims: Vec<Vec<i64>>,
    /// Static shapes of the user outputs in this bucket.
    pub output_dims: Vec<Vec<i64>>,
    /// What each graph pass did to this bucket's graph, in order.
    #[serde(default)]
    pub passes: Vec<PassRecord>,
}

/// One pass's effect on one bucket, as the manifest records it (from the pass's `PassReport`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassRecord {
    pub pass: String,
    pub nodes_before: usize,
    pub nodes_after: usize,
    /// What changed, one line per kind of rewrite.
    pub notes: Vec<String>,
    /// The contractions `pad` widened: each padded dim and the extra FLOPs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub padded: Vec<PaddedContraction>,
}

/// One contraction the `pad` pass widened, as the manifest records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaddedContraction {
    /// The node.
    pub node: String,
    /// Each widened dim.
    pub dims: Vec<PaddedDim>,
    /// Multiply-adds ×2 added by the padding.
    pub extra_flops: u64,
}

/// One widened dim of a contraction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaddedDim {
    /// `k` (contracting), `n` (output features), `c_in`, `c_out` or `embed`.
    pub role: String,
    /// True size.
    pub size: i64,
    /// Size after padding.
    pub padded: i64,
    /// Heads padded one by one; absent for a dim padded at its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PluginInfo {
    /// The plugin file name.
    pub file: String,
    /// The plugin's package version (e.g. libtpu `0.0.52`), when known.
    pub version: Option<String>,
    pub sha256: String,
    pub platform_name: String,
    pub platform_version: String,
    pub api_version: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Executable {
    pub bucket: String,
    pub entry: String,
    pub sha256: String,
    pub bytes: u64,
    /// How long XLA took to compile it (when it was compiled, possibly by an earlier run).
    pub compile_ms: u64,
    /// The compile-cache key of the executable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// Size of the generated machine code (TPU targets).
    pub generated_code_bytes: Option<i64>,
    /// Device memory the program needs, per device.
    pub memory: Option<MemoryInfo>,
    /// XLA's cost model of the program (TPU targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostInfo>,
    /// The collectives in the optimized program of a split program (one device's), per kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub collectives: BTreeMap<String, CollectiveInfo>,
}

/// The collectives of one kind (`all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`,
/// `collective-permute`) in an optimized program: how many, and the bytes of their results.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveInfo {
    pub count: u64,
    pub bytes: u64,
}

/// What XLA's cost model says one run of a program does (`PJRT_Executable_GetCostAnalysis`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostInfo {
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes read and written in device memory.
    pub bytes_accessed: f64,
}

/// Device memory of a compiled program, in bytes (`PJRT_Executable_GetCompiledMemoryStats`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryInfo {
    pub argument_bytes: i64,
    pub output_bytes: i64,
    /// Argument bytes reused for outputs.
    pub alias_bytes: i64,
    pub temp_bytes: i64,
    pub generated_code_bytes: i64,
    pub peak_bytes: i64,
}

/// The TPU slice a target compiles for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TpuInfo {
    pub generation: String,
    pub topology: String,
    /// Chips in the slice.
    pub chips: u64,
    /// Chips one replica of the program spans: 1 for a replicated single-partition program (no
    /// `--mesh`), else every chip of the slice.
    pub partitions: u64,
    pub hbm_bytes_per_chip: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetEntry {
    /// `cpu` or `tpu:<gen>:<topology>`.
    pub target: String,
    pub plugin: PluginInfo,
    /// The slice, for TPU targets.
    pub tpu: Option<TpuInfo>,
    pub executables: Vec<Executable>,
}

impl TargetEntry {
    /// One line for each executable whose peak device memory exceeds a chip's HBM: it would
    /// fail to load on that slice.
    pub fn hbm_overflows(&self) -> Vec<String> {
        let Some(hbm) = self.tpu.as_ref().and_then(|t| t.hbm_bytes_per_chip) else { return Vec::new() };
        let over = |e: &&Executable| e.memory.as_ref().is_some_and(|m| m.peak_bytes.max(0) as u64 > hbm);
        self.executables
            .iter()
            .filter(over)
            .map(|e| {
                let peak = e.memory.as_ref().map_or(0, |m| m.peak_bytes.max(0) as u64);
                format!(
                    "`{}`, bucket `{}`: a peak of {} of device memory per chip exceeds the chip's {} of HBM; \
                     it will not load (split it over more chips with `--mesh`)",
                    self.target,
                    e.bucket,
                    crate::display::human_bytes(peak),
                    crate::display::human_bytes(hbm)
                )
            })
            .collect()
    }
}

/// The safetensors dtype of an IR dtype, if the format has one.
pub(crate) fn safetensors_dtype(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::I8 => Dtype::I8,
        DType::I16 => Dtype::I16,
        DType::U16 => Dtype::U16,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
        DType::I64 => Dtype::I64,
        DType::U64 => Dtype::U64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F8E4M3FN => Dtype::F8_E4M3,
        DType::F8E5M2 => Dtype::F8_E5M2,
        DType::F8E8M0FNU => Dtype::F8_E8M0,
        _ => return None,
    })
}

/// The IR dtype of a safetensors dtype.
pub fn dtype_of_safetensors(d: Dtype) -> Option<DType> {
    DType::ALL.into_iter().find(|&x| safetensors_dtype(x) == Some(d))
}

/// Writes a streamed entry's bytes into the artifact; the error is a message.
pub(crate) type WriteEntry<'a> = Box<dyn FnOnce(&mut dyn Sink) -> Result<(), String> + 'a>;

/// An entry's payload: bytes in memory, or written by a function straight into the artifact
/// (the weights, which are never held whole in memory).
pub(crate) enum Payload<'a> {
    /// The bytes.
    Bytes(Vec<u8>),
    /// `len` bytes that `write` writes, whose digest is computed on the way unless known.
    Stream { len: u64, digest: Option<WeightsDigest>, write: WriteEntry<'a> },
}

impl Payload<'_> {
    /// The entry's length in bytes.
    fn len(&self) -> u64 {
        match self {
            Payload::Bytes(b) => b.len() as u64,
            Payload::Stream { len, .. } => *len,
        }
    }
}

/// What was written for a streamed entry: its length and digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Streamed {
    pub bytes: u64,
    pub digest: WeightsDigest,
}

/// Writes an artifact atomically (a temporary file renamed): `entries` in order, then the
/// manifest, which `manifest` makes from what the streamed entries turned out to be. All are
/// stored and 64-byte aligned.
pub(crate) fn write(
    path: &Path,
    entries: Vec<(String, Payload<'_>)>,
    manifest: impl FnOnce(&BTreeMap<String, Streamed>) -> Manifest,
) -> Result<(), ArtifactError> {
    write_then(path, entries, || Ok((Vec::new(), manifest)))
}

/// What [`write_then`] writes after its first entries: more entries, and how to make the
/// manifest from what the streamed entries turned out to be.
pub(crate) type Rest<'a, M> = Result<(Vec<(String, Payload<'a>)>, M), String>;

/// [`write`] in two parts: `first` is written, and only then is `rest` asked for the other
/// entries and the manifest, so that what `rest` waits for (executables XLA is compiling) is
/// made while `first` (the weights) is written. An error of `rest` removes the partial file.
pub(crate) fn write_then<'a, M: FnOnce(&BTreeMap<String, Streamed>) -> Manifest>(
    path: &Path,
    first: Vec<(String, Payload<'a>)>,
    rest: impl FnOnce() -> Rest<'a, M>,
) -> Result<(), ArtifactError> {
    let planned = std::cell::Cell::new(first.iter().map(|(_, p)| p.len()).sum::<u64>());
    atomically(path, &planned, |file| {
        let mut zip = ZipOut::new(file);
        let mut streamed = BTreeMap::new();
        write_entries(&mut zip, first, &mut streamed)?;
        let (more, manifest) = rest()?;
        planned.set(planned.get() + more.iter().map(|(_, p)| p.len()).sum::<u64>());
        write_entries(&mut zip, more, &mut streamed)?;
        let manifest_json = serde_json::to_vec_pretty(&manifest(&streamed)).map_err(|e| e.to_string())?;
        zip.entry(MANIFEST, manifest_json.len() as u64, |w| w.write_all(&manifest_json).map_err(|e| e.to_string()))?;
        zip.finish().map(drop).map_err(|e| e.to_string())
    })
}

/// Appends `entries` to `zip`, recording the length and digest of each streamed one.
fn write_entries(
    zip: &mut ZipOut,
    entries: Vec<(String, Payload<'_>)>,
    streamed: &mut BTreeMap<String, Streamed>,
) -> Result<(), String> {
    for (name, payload) in entries {
        match payload {
            Payload::Bytes(bytes) => {
                zip.entry(&name, bytes.len() as u64, |w| w.write_all(&bytes).map_err(|e| e.to_string()))?;
            }
            Payload::Stream { len, digest, write } => {
                let mut done = None;
                zip.entry(&name, len, |w| {
                    done = Some(hashed(w, digest, write).map_err(|e| format!("`{name}`: {e}"))?);
                    Ok(())
                })?;
                if let Some(digest) = done {
                    streamed.insert(name, Streamed { bytes: len, digest });
                }
            }
        }
    }
    Ok(())
}

/// Writes the file at `path` atomically (a temporary file renamed) with the `len` bytes that
/// `write` writes, hashing them on the way: an external weights file.
pub(crate) fn write_streamed_file(path: &Path, len: u64, write: WriteEntry<'_>) -> Result<Streamed, ArtifactError> {
    let mut done = None;
    atomically(path, &std::cell::Cell::new(len), |file| {
        let mut sink = CountingSink { inner: FileSink(std::io::BufWriter::with_capacity(1 << 20, file)), bytes: 0 };
        let digest = hashed(&mut sink, None, write)?;
        if sink.bytes != len {
            return Err(format!("{} bytes written, {len} planned", sink.bytes));
        }
        sink.inner.0.into_inner().map_err(|e| e.to_string())?;
        done = Some(Streamed { bytes: len, digest });
        Ok(())
    })?;
    done.ok_or_else(|| ArtifactError::Write { path: path.display().to_string(), reason: "nothing was written".into() })
}

/// Creates a temporary file beside `path`, lets `fill` write it (about `planned` bytes) and
/// renames it to `path`; on failure the temporary file is removed, and the message says when
/// the file system lacks the space. Readers see the old file or the new one. The file is not
/// synced (see the module doc).
fn atomically(
    path: &Path,
    planned: &std::cell::Cell<u64>,
    fill: impl FnOnce(std::fs::File) -> Result<(), String>,
) -> Result<(), ArtifactError> {
    let tmp = temp_path(path);
    remove_stale_temps(path);
    let result = std::fs::File::create(&tmp)
        .map_err(|e| e.to_string())
        .and_then(fill)
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| e.to_string()));
    result.map_err(|reason| {
        let _ = std::fs::remove_file(&tmp);
        ArtifactError::Write {
            path: path.display().to_string(),
            reason: format!("{reason}{}", space_note(path, planned.get())),
        }
    })
}

/// `; it needs 1.2 MiB, the file system of `out` has 600.0 KiB free` when the file system of
/// `path` has less free than `needed` (measured after the failed write was removed).
fn space_note(path: &Path, needed: u64) -> String {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match free_bytes(dir) {
        Some(free) if free < needed => format!(
            "; it needs {}, the file system of `{}` has {} free",
            crate::display::human_bytes(needed),
            dir.display(),
            crate::display::human_bytes(free)
        ),
        _ => String::new(),
    }
}

/// Bytes an unprivileged writer may still use on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call; `st` is plain data the call
    // fills in, read only when it succeeds.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0;
    ok.then(|| st.f_bavail.saturating_mul(st.f_frsize))
}

/// Runs `write` into `out`, hashing what it writes (BLAKE3) unless its digest is `known`; the
/// digest.
fn hashed(out: &mut dyn Sink, known: Option<WeightsDigest>, write: WriteEntry<'_>) -> Result<WeightsDigest, String> {
    if let Some(digest) = known {
        write(out)?;
        return Ok(digest);
    }
    let mut sink = HashingSink { inner: out, hasher: Hasher::blake3() };
    write(&mut sink)?;
    Ok(sink.hasher.finish())
}

/// Where the external weights go: beside the artifact at `artifact`, named after it
/// (`model.tpuexe` → `model.weights.safetensors`).
pub(crate) fn external_weights_path(artifact: &Path) -> PathBuf {
    artifact.with_extension("weights.safetensors")
}

/// A sink that hashes what passes through it.
struct HashingSink<'a> {
    inner: &'a mut dyn Sink,
    hasher: Hasher,
}

impl Write for HashingSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl Sink for HashingSink<'_> {
    fn copy_range(&mut self, src: &MappedFile, range: Range<usize>, crc: Option<u32>) -> std::io::Result<()> {
        src.for_each_chunk(range.clone(), |chunk| {
            self.hasher.update(chunk);
            Ok(())
        })?;
        self.inner.copy_range(src, range, crc)
    }
}

/// A sink that counts what passes through it.
struct CountingSink<S: Sink> {
    inner: S,
    bytes: u64,
}

impl<S: Sink> Write for CountingSink<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<S: Sink> Sink for CountingSink<S> {
    fn copy_range(&mut self, src: &MappedFile, range: Range<usize>, crc: Option<u32>) -> std::io::Result<()> {
        self.bytes += range.len() as u64;
        self.inner.copy_range(src, range, crc)
    }
}

fn temp_path(path: &Path) -> PathBuf {
    path.with_file_name(format!(".{}.{}.tmp", file_name(path), std::process::id()))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| "artifact".into(), |n| n.to_string_lossy().into_owned())
}

/// Removes the temporary files of `path` left by writers that were killed: those whose process
/// no longer exists (a live writer's file, another compile's, is left alone).
fn remove_stale_temps(path: &Path) {
    let prefix = format!(".{}.", file_name(path));
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tmp")).and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|pid| pid > 0 && !process_exists(pid)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// True unless no process has this id (`kill(pid, 0)` failing with `ESRCH`).
fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// An opened artifact.
pub struct Artifact {
    zip: MappedZip,
    /// What the artifact holds, as read from its `manifest.json`.
    pub manifest: Manifest,
}

impl Artifact {
    /// True when the zip at `zip` looks like an artifact (has a top-level manifest).
    pub fn is_artifact(zip: &MappedZip) -> bool {
        zip.get(MANIFEST).is_some()
    }

    /// Opens the artifact, checks every entry against its CRC-32 and reads the manifest.
    pub fn open(path: &Path) -> Result<Artifact, ArtifactError> {
        let art = Artifact::open_unverified(path)?;
        art.zip.verify(|_| true)?;
        Ok(art)
    }

    /// Opens the artifact and checks every entry but the weights, which the caller verifies as
    /// it reads them (against the manifest's sha256): what `run` does, so that it reads the
    /// weights once.
    pub fn open_but_weights(path: &Path) -> Result<Artifact, ArtifactError> {
        let art = Artifact::open_unverified(path)?;
        let weights = &art.manifest.weights;
        art.zip.verify(|name| weights.external || name != weights.entry)?;
        Ok(art)
    }

    /// The manifest read and checked; no payload read.
    fn open_unverified(path: &Path) -> Result<Artifact, ArtifactError> {
        let zip = MappedZip::open(path)?;
        let not = |reason: String| ArtifactError::NotAnArtifact { path: path.display().to_string(), reason };
        let bytes = zip.get(MANIFEST).ok_or_else(|| not(format!("it has no `{MANIFEST}`")))?;
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| not(format!("invalid `{MANIFEST}`: {e}")))?;
        let Some(format) = READ_FORMATS.iter().position(|f| *f == manifest.format) else {
            let reads = READ_FORMATS.map(|f| format!("`{f}`")).join(", ");
            return Err(not(format!("format `{}` (this compiler reads {reads})", manifest.format)));
        };
        // Format 1 digests the weights with sha256, later ones with BLAKE3; the source is
        // digested with sha256 up to format 2 and with BLAKE3 from 3.
        if matches!(manifest.weights.digest, WeightsDigest::Sha256(_)) != (format == 0) {
            let algorithm = manifest.weights.digest.algorithm();
            return Err(not(format!("format `{}` with a {algorithm} digest of its weights", manifest.format)));
        }
        let source = &manifest.source;
        if (source.blake3.is_some(), source.sha256.is_some()) != (format >= 2, format < 2) {
            let digest = source.digest().map_or("no digest", |(algorithm, _)| algorithm);
            return Err(not(format!("format `{}` with {digest} of its source recorded", manifest.format)));
        }
        Ok(Artifact { zip, manifest })
    }

    /// The artifact's path.
    pub fn path(&self) -> &Path {
        self.zip.path()
    }

    /// An entry's bytes, checked against the checksum the manifest records for it.
    pub fn verified(&self, entry: &str, sha256: &str) -> Result<&[u8], ArtifactError> {
        let bytes = self.zip.get(entry).ok_or_else(|| ArtifactError::Corrupt {
            entry: entry.to_string(),
            reason: "the entry is missing".into(),
        })?;
        let actual = sha256_hex(bytes);
        if actual != sha256 {
            return Err(ArtifactError::Corrupt {
                entry: entry.to_string(),
                reason: format!("its sha256 is {actual}, the manifest records {sha256}; rebuild the artifact"),
            });
        }
        Ok(bytes)
    }

    /// The mapped zip.
    pub fn zip(&self) -> &MappedZip {
        &self.zip
    }

    /// The external weights file this artifact reads (`--weights external`), beside it; `None`
    /// when the weights are an entry. The manifest's name must be a plain file name.
    pub fn external_weights(&self) -> Result<Option<PathBuf>, ArtifactError> {
        let w = &self.manifest.weights;
        if !w.external {
            return Ok(None);
        }
        let plain = Path::new(&w.entry).file_name().is_some_and(|n| n == w.entry.as_str());
        if !plain {
            return Err(ArtifactError::NotAnArtifact {
                path: self.path().display().to_string(),
                reason: format!("its weights file `{}` is not a plain file name", crate::display::shown(&w.entry)),
            });
        }
        Ok(Some(self.path().parent().unwrap_or(Path::new(".")).join(&w.entry)))
    }

    /// The weights entry, borrowed from the map (an embedded one).
    pub fn weights(&self) -> Result<&[u8], ArtifactError> {
        self.zip.get(&self.manifest.weights.entry).ok_or_else(|| ArtifactError::Corrupt {
            entry: self.manifest.weights.entry.clone(),
            reason: "the entry is missing".into(),
        })
    }

    /// Offsets of every entry, for alignment checks.
    pub fn entry_offsets(&self) -> BTreeMap<String, usize> {
        self.zip.entries().iter().map(|(n, r)| (n.clone(), r.start)).collect()
    }
}
