//! `compile`: lower a program, compile it for every target through PJRT, and pack the artifact.
//!
//! [`compile`] is the pipeline; `target` holds one target's compiler and the cache protocol,
//! `manifest` the artifact's description, `weights` its weight entry, `refit` the weights of
//! another checkpoint of an artifact's program.

mod collectives;
mod explain;
mod manifest;
pub(crate) mod progress;
mod recompile;
mod refit;
mod target;
mod weights;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use torchtpu_passes::bucket_masks::BucketSpec;
use torchtpu_passes::PassOptions;

pub(crate) use explain::explain_cache;
pub use recompile::{recompile, RecompileRequest};
pub(crate) use refit::refit;
pub(crate) use target::TargetCompiler;
use weights::WeightsEntry;

use crate::artifact::{
    self, Bucket, Executable, PassRecord, Payload, PluginInfo, Streamed, TargetEntry, TpuInfo, WeightsInfo,
};
use crate::cache::{Cache, CacheConfig, Outcome};
use crate::digest::WeightsDigest;
use crate::driver::{self, LowerOptions, Lowered};
use crate::emit::{Attention, EmitOptions, GroupedMm, Precision};
use crate::import::{ImportError, Program};
use crate::target::Target;
use crate::Error;

/// What to compile and how.
#[derive(Clone, Debug)]
pub struct CompileRequest {
    /// The targets to compile for (`--target`), each getting an executable per bucket.
    pub targets: Vec<Target>,
    /// Precision of every contraction (`--precision`).
    pub precision: Precision,
    /// How `_grouped_mm` is lowered (`--grouped-mm`).
    pub grouped_mm: GroupedMm,
    /// How attention is lowered (`--attention`) and its keys per block (`--attention-block`).
    pub attention: (Attention, Option<i64>),
    /// The CPU plugin (`--plugin`); `None` uses `$TORCHTPU_PJRT_PLUGIN` or the set-up folder.
    pub plugin: Option<PathBuf>,
    /// Where to write the IR, the StableHLO and a compile log (`--dump-dir`).
    pub dump_dir: Option<PathBuf>,
    /// Show a progress bar on a terminal.
    pub progress: bool,
    /// The compile cache.
    pub cache: CacheConfig,
    /// The graph passes to run (names; all by default) and their settings.
    pub passes: Vec<String>,
    /// Settings of the passes (padding, compute dtype, mesh, overrides).
    pub pass_options: PassOptions,
    /// Bucket sizes per symbol (`--buckets`); symbols not named get `pow2`.
    pub buckets: Vec<crate::buckets::Choice>,
    /// How many buckets compile at once (`--jobs`).
    pub jobs: usize,
    /// The weights go to a file beside the artifact, not into it (`--weights external`).
    pub external_weights: bool,
    /// How `--mesh auto` chose the mesh in `pass_options`, for the manifest.
    pub mesh_choice: Option<artifact::MeshChoice>,
    /// The files `serve` reads beside the model, by name, to store in the artifact
    /// (`--tokenizer DIR`: see `artifact::read_serving_folder`).
    pub serving_files: Vec<(String, Vec<u8>)>,
}

impl CompileRequest {
    /// A quiet request for `targets` at `precision`: the default plugins, every pass, no cache
    /// and no dumps.
    pub fn new(targets: Vec<Target>, precision: Precision) -> CompileRequest {
        CompileRequest {
            targets,
            precision,
            grouped_mm: GroupedMm::Dense,
            attention: (Attention::Auto, None),
            plugin: None,
            dump_dir: None,
            progress: false,
            cache: CacheConfig::off(),
            passes: LowerOptions::default().passes,
            pass_options: PassOptions::default(),
            buckets: Vec::new(),
            jobs: default_jobs(),
            external_weights: false,
            mesh_choice: None,
            serving_files: Vec::new(),
        }
    }
}

/// One compile thread per core (XLA's own compile threads share them).
pub(crate) fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// What `compile` did, for the summary line and `--format json`.
#[derive(Debug, Serialize)]
pub struct CompileSummary {
    /// The artifact written.
    pub output: String,
    /// Its size.
    pub artifact_bytes: u64,
    /// The buckets compiled, by name.
    pub buckets: Vec<String>,
    /// Per target, how each executable was had (cache hit or compiled) and how long it took.
    pub targets: Vec<TargetSummary>,
    /// What the compile chose for the user that they may want to choose otherwise: the
    /// buckets of a program with many dynamic dims.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What did not stop the compile but should be heard: cache problems (e.g. an unwritable
    /// folder), executables that need more memory than a chip has.
    pub warnings: Vec<String>,
    /// What each graph pass did.
    pub passes: Vec<PassRecord>,
    /// The external weights file (`--weights external`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights_file: Option<WeightsFileSummary>,
    /// How long each phase took (`lower`, `compile`, `write`; the command line adds `read`).
    pub phases: Vec<progress::Phase>,
}

/// The weights file beside an artifact compiled with `--weights external`.
#[derive(Debug, Serialize)]
pub struct WeightsFileSummary {
    pub path: String,
    pub bytes: u64,
    /// It held the same bytes already and was left as it was.
    pub reused: bool,
}

#[derive(Debug, Serialize)]
pub struct TargetSummary {
    pub target: String,
    pub bucket: String,
    /// Where the executable came from.
    pub cache: Outcome,
    /// How long this step took (a cache read, or the compile and the cache write).
    pub ms: u64,
    /// How long XLA took when the executable was compiled (possibly by an earlier run).
    pub compile_ms: u64,
    pub executable_bytes: u64,
    pub cache_key: String,
}

/// Compiles `program` (read from `model`) into the artifact `out`: one program per size
/// bucket (one `main` bucket for a static program), each compiled for every target.
///
/// The stages, in order: every bucket is lowered (specialized, transformed by the passes and
/// emitted as StableHLO); the buckets are checked to take the same weights; each bucket is
/// compiled for each target through that target's `TargetCompiler` (the cache first); the
/// artifact is written. Lowering and compiling run on `req.jobs` threads and keep their results
/// in order, so the artifact does not depend on the thread count.
pub fn compile(program: &Program, model: &Path, out: &Path, req: &CompileRequest) -> Result<CompileSummary, Error> {
    let started = Instant::now();
    let plan = crate::buckets::plan(program, &req.buckets)?;
    let buckets = in_parallel(&plan.buckets, req.jobs, |p| lower_bucket(program, p, req))?;
    let mut phases = vec![progress::Phase::since("lower", started, None)];
    if let Some(dir) = &req.dump_dir {
        for b in &buckets {
            dump(&if buckets.len() > 1 { dir.join(&b.planned.name) } else { dir.clone() }, program, &b.lowered)?;
        }
    }
    let order = same_weights(&buckets)?;
    let cache = Cache::open(&req.cache);
    let first = buckets.first().ok_or_else(|| Error::Internal("no bucket to compile".into()))?;
    let weights = WeightsEntry::plan(program, &first.lowered.graph)?;
    let bytes = weights.byte_len();
    // XLA compiles on its own thread while this one writes the weights: the artifact's layout
    // puts the weights first and needs nothing of the executables. An archive not hashed before
    // is hashed, and its entries checked against their CRC-32s, on a third thread; only the
    // manifest, written last, needs that done.
    let started = Instant::now();
    let (mut summary, compiled_in) = std::thread::scope(|s| {
        let compiling = s.spawn(|| {
            let started = Instant::now();
            compile_all(&buckets, req, &cache).map(|c| (c, started.elapsed()))
        });
        let source = match cache.remembered_file_digest(program.archive.path()) {
            Some(digest) => SourceDigest::Known(digest),
            None => SourceDigest::Hashing(s.spawn(|| program.archive.blake3_verifying())),
        };
        let compiled_in = std::cell::Cell::new(std::time::Duration::ZERO);
        let compiled = || {
            let (compiled, took) = compiling.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
            compiled_in.set(took);
            if let Some(dir) = &req.dump_dir {
                let log: Vec<&str> = compiled.executables.iter().map(|e| e.log.as_str()).collect();
                write_file(&dir.join("compile.log"), (log.join("\n") + "\n").as_bytes())?;
            }
            Ok(compiled)
        };
        let written = Written { buckets: &buckets, source, weights, order };
        write_artifact(program, model, out, req, written, compiled, &cache).map(|s| (s, compiled_in.get()))
    })?;
    // XLA's time, then what writing added after it (all of the write when every executable was
    // a cache hit).
    let both = started.elapsed().as_millis() as u64;
    let compile_ms = compiled_in.as_millis() as u64;
    phases.push(progress::Phase { phase: "compile", ms: compile_ms, bytes: None, alongside: false });
    let reused = summary.weights_file.as_ref().is_some_and(|w| w.reused);
    let all_hits = summary.targets.iter().all(|t| matches!(t.cache, Outcome::Hit | Outcome::RemoteHit));
    let (ms, bytes) = (both.saturating_sub(compile_ms), (!reused).then_some(bytes));
    phases.push(progress::Phase { phase: "write", ms, bytes, alongside: !all_hits });
    summary.phases = phases;
    summary.notes.extend(plan.note);
    summary.warnings.extend(cache.take_warnings());
    summary.warnings.extend(naive_attentions(&buckets));
    Ok(summary)
}

/// The share of a compile one host does (`--only-bucket`, `--only-target`): empty means all.
#[derive(Clone, Copy, Debug, Default)]
pub struct Only<'a> {
    pub buckets: &'a [String],
    pub targets: &'a [Target],
}

/// Compiles `program`'s buckets and targets named in `only` into the cache, writing no
/// artifact: one host's share of a compile spread over several (a fleet sharing the remote
/// tier), after which `compile` assembles the artifact from cache hits. The programs are those
/// of all `req`'s targets, so that each executable is the one the whole artifact holds.
pub fn compile_to_cache(program: &Program, req: &CompileRequest, only: Only<'_>) -> Result<CompileSummary, Error> {
    if req.cache.dir.is_none() {
        return Err(Error::Unsupported("compiling into the cache needs the cache: it is off (`--no-cache`)".into()));
    }
    let plan = crate::buckets::plan(program, &req.buckets)?;
    let names: Vec<&str> = plan.buckets.iter().map(|p| p.name.as_str()).collect();
    if let Some(unknown) = only.buckets.iter().find(|o| !names.contains(&o.as_str())) {
        return Err(Error::Unsupported(format!("no bucket `{unknown}`; the buckets are {}", names.join(", "))));
    }
    let chosen: Vec<_> =
        plan.buckets.into_iter().filter(|p| only.buckets.is_empty() || only.buckets.contains(&p.name)).collect();
    let started = Instant::now();
    let buckets = in_parallel(&chosen, req.jobs, |p| lower_bucket(program, p, req))?;
    let mut phases = vec![progress::Phase::since("lower", started, None)];
    // What this host's share finds in its own folder must reach the tier the others share.
    let cache = Cache::open(&CacheConfig { publish_hits: true, ..req.cache.clone() });
    let started = Instant::now();
    let targets = req.targets.iter().filter(|t| only.targets.is_empty() || only.targets.contains(t)).cloned().collect();
    let compiled = compile_all(&buckets, &CompileRequest { targets, ..req.clone() }, &cache)?;
    phases.push(progress::Phase::since("compile", started, None));
    Ok(CompileSummary {
        output: String::new(),
        artifact_bytes: 0,
        buckets: buckets.iter().map(|b| b.planned.name.clone()).collect(),
        targets: compiled.executables.into_iter().map(|e| e.summary).collect(),
        notes: plan.note.into_iter().collect(),
        warnings: cache.take_warnings(),
        passes: Vec::new(),
        weights_file: None,
        phases,
    })
}

/// Device memory of StableHLO `text` compiled for `target` over `partitions` devices, with no
/// cache: what tests of a lowering's memory read.
#[cfg(test)]
pub(crate) fn memory_of(text: &str, target: &Target, partitions: u32) -> Result<artifact::MemoryInfo, Error> {
    let compiler = TargetCompiler::new(target, None, partitions)?;
    let cache = Cache::open(&CacheConfig { dir: None, max_bytes: 0, remote: None, publish_hits: false });
    let compiled = compiler.compile(text.as_bytes(), &explain::Origin::default(), &cache)?;
    compiled.meta.memory.ok_or_else(|| Error::Unsupported(format!("no memory figures for {target}")))
}

/// Lowers and compiles `program` for `req`'s targets without writing an artifact: each
/// target's entry as a manifest would hold it (per bucket: device memory, XLA's cost model, the
/// collectives). What `plan` reads.
pub(crate) fn compile_for_figures(program: &Program, req: &CompileRequest) -> Result<Vec<TargetEntry>, Error> {
    let planned = crate::buckets::plan(program, &req.buckets)?.buckets;
    let buckets = in_parallel(&planned, req.jobs, |p| lower_bucket(program, p, req))?;
    same_weights(&buckets)?;
    let cache = Cache::open(&req.cache);
    let compiled = compile_all(&buckets, req, &cache)?;
    let mut targets: Vec<TargetEntry> = Vec::new();
    for (i, e) in compiled.executables.into_iter().enumerate() {
        let t = i % req.targets.len();
        if targets.len() == t {
            targets.push(TargetEntry { target: e.summary.target, plugin: e.plugin, tpu: e.tpu, executables: vec![] });
        }
        targets[t].executables.push(e.executable);
    }
    Ok(targets)
}

/// The attentions `--attention blocked` could not block, each once with the buckets it is in.
fn naive_attentions(buckets: &[LoweredBucket]) -> Vec<String> {
    let mut by_line: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for b in buckets {
        for line in &b.lowered.naive_attentions {
            by_line.entry(line).or_default().push(&b.planned.name);
        }
    }
    by_line
        .into_iter()
        .map(|(line, names)| match names.len() {
            n if n == buckets.len() => line.to_string(),
            n if n <= 4 => format!("{line} (buckets {})", names.join(", ")),
            n => format!("{line} (buckets {} and {} more)", names[..3].join(", "), n - 3),
        })
        .collect()
}

/// One bucket at its sizes, lowered.
pub(crate) struct LoweredBucket {
    planned: crate::buckets::Planned,
    lowered: Lowered,
}

impl LoweredBucket {
    fn program_entry(&self) -> String {
        format!("programs/{}.mlir", self.planned.name)
    }
}

/// Lowers the program at one bucket's sizes; a bucket of a dynamic program also gets the
/// masks that keep its results exact at every real size it serves.
fn lower_bucket(program: &Program, p: &crate::buckets::Planned, req: &CompileRequest) -> Result<LoweredBucket, Error> {
    let mut pass_options = req.pass_options.clone();
    let values = if p.values.is_empty() {
        driver::example_bindings(program).map_err(driver::LowerError::from)?
    } else {
        let values = driver::with_computed_sizes(program, p.values.clone()).map_err(driver::LowerError::from)?;
        let bounds = crate::buckets::bounds(program, &req.buckets)?;
        pass_options.bucket = Some(BucketSpec { values: values.clone(), bounds });
        values
    };
    let opts = LowerOptions {
        emit: EmitOptions {
            precision: req.precision,
            grouped_mm: req.grouped_mm,
            attention: req.attention.0,
            attention_block: req.attention.1,
        },
        passes: req.passes.clone(),
        pass_options,
        keep_stages: req.dump_dir.is_some(),
    };
    Ok(LoweredBucket { planned: p.clone(), lowered: driver::lower(program, values, &opts)? })
}

/// The weight arguments every bucket takes, in order; the artifact stores one set for all, so
/// buckets that differ are refused before any XLA compile.
fn same_weights(buckets: &[LoweredBucket]) -> Result<Vec<String>, Error> {
    let mut orders = buckets.iter().map(|b| (b, weights::weight_order(&b.lowered.graph)));
    let Some((_, first)) = orders.next() else { return Ok(Vec::new()) };
    for (b, order) in orders {
        if order != first {
            return Err(Error::Internal(format!(
                "bucket {} takes other weights than the first bucket",
                b.planned.name
            )));
        }
    }
    Ok(first)
}

/// Every bucket's executable for every target.
struct CompiledAll {
    /// In (bucket, target) order.
    executables: Vec<TargetOutput>,
}

/// What the artifact holds besides the executables: the lowered buckets, the weights and the
/// source's sha256 (known, or being computed).
struct Written<'a, 'scope> {
    buckets: &'a [LoweredBucket],
    source: SourceDigest<'scope>,
    weights: WeightsEntry<'a>,
    /// The weight arguments' names, in calling order.
    order: Vec<String>,
}

/// One executable of a bucket, with what the manifest and the summary say about it.
struct TargetOutput {
    summary: TargetSummary,
    executable: Executable,
    plugin: PluginInfo,
    tpu: Option<TpuInfo>,
    bytes: Vec<u8>,
    /// Its line of `--dump-dir`'s `compile.log`.
    log: String,
}

/// Compiles each bucket for each target: one [`TargetCompiler`] per target, shared by the
/// buckets, so a target's plugin, client or topology and options are made once.
fn compile_all(buckets: &[LoweredBucket], req: &CompileRequest, cache: &Cache) -> Result<CompiledAll, Error> {
    let partitions = req.pass_options.mesh.as_ref().map_or(1, |m| m.devices() as u32);
    let programs: Vec<(&str, &[u8])> =
        buckets.iter().map(|b| (b.planned.name.as_str(), b.lowered.module.text.as_bytes())).collect();
    let origin = explain::Origin::of_request(req);
    let how = HowToCompile { targets: &req.targets, plugin: req.plugin.as_deref(), partitions, jobs: req.jobs, origin };
    let executables = compile_programs(&programs, &how, req.progress, cache)?;
    Ok(CompiledAll { executables })
}

/// The targets to compile programs for, and how.
struct HowToCompile<'a> {
    targets: &'a [Target],
    /// `--plugin` (the CPU plugin).
    plugin: Option<&'a Path>,
    /// Devices each program is split over (1: not split).
    partitions: u32,
    /// Compiles at once.
    jobs: usize,
    /// What shaped the programs, recorded in the cache entries.
    origin: explain::Origin,
}

/// Compiles each program (a bucket's name and StableHLO text) for each target, in (program,
/// target) order, on `jobs` threads, through the cache.
fn compile_programs(
    programs: &[(&str, &[u8])],
    how: &HowToCompile<'_>,
    progress: bool,
    cache: &Cache,
) -> Result<Vec<TargetOutput>, Error> {
    let compilers = how
        .targets
        .iter()
        .map(|t| progress::journal(&format!("load {t}"), || TargetCompiler::new(t, how.plugin, how.partitions)))
        .collect::<Result<Vec<_>, _>>()?;
    let steps: Vec<(&str, &[u8], &Target, &TargetCompiler)> = programs
        .iter()
        .flat_map(|&(name, text)| how.targets.iter().zip(&compilers).map(move |(t, c)| (name, text, t, c)))
        .collect();
    let bar = progress::steps_bar(progress, steps.len());
    let executables = in_parallel(&steps, how.jobs, |&(bucket, text, target, compiler)| {
        let what = format!("{target} [{bucket}]");
        bar.set_message(what.clone());
        let done = progress::journal(&format!("compile {what}"), || {
            compile_one(bucket, text, target, compiler, &how.origin, cache)
        });
        bar.inc(1);
        done
    });
    cache.trim();
    let executables = executables?;
    bar.finish_and_clear();
    Ok(executables)
}

fn compile_one(
    bucket: &str,
    program: &[u8],
    target: &Target,
    compiler: &TargetCompiler,
    origin: &explain::Origin,
    cache: &Cache,
) -> Result<TargetOutput, Error> {
    let started = Instant::now();
    let c = compiler.compile(program, origin, cache)?;
    let ms = started.elapsed().as_millis() as u64;
    let bytes = c.bytes.len() as u64;
    let log = format!(
        "{target} {bucket}: {} in {ms} ms (XLA compile {} ms), {bytes} bytes, cache key {}",
        c.outcome.describe(),
        c.meta.compile_ms,
        c.cache_key
    );
    let entry = format!("executables/{}/{bucket}.pjrt", target.dir_name());
    Ok(TargetOutput {
        summary: TargetSummary {
            target: target.to_string(),
            bucket: bucket.to_string(),
            cache: c.outcome,
            ms,
            compile_ms: c.meta.compile_ms,
            executable_bytes: bytes,
            cache_key: c.cache_key.clone(),
        },
        executable: Executable {
            bucket: bucket.to_string(),
            entry,
            sha256: crate::digest::sha256_hex(&c.bytes),
            bytes,
            compile_ms: c.meta.compile_ms,
            cache_key: Some(c.cache_key),
            generated_code_bytes: c.meta.generated_code_bytes,
            memory: c.meta.memory,
            cost: c.meta.cost,
            collectives: c.meta.collectives,
        },
        plugin: c.meta.plugin,
        tpu: c.meta.tpu,
        bytes: c.bytes,
        log,
    })
}

/// The archive's BLAKE3: remembered from an earlier compile, or being computed (with every
/// entry checked against its CRC-32).
enum SourceDigest<'scope> {
    Known(String),
    Hashing(std::thread::ScopedJoinHandle<'scope, Result<String, ImportError>>),
}

impl SourceDigest<'_> {
    fn known(&self) -> Option<&str> {
        match self {
            SourceDigest::Known(digest) => Some(digest),
            SourceDigest::Hashing(_) => None,
        }
    }

    /// The digest, once computed; an entry that fails its CRC-32 is the error.
    fn get(self) -> Result<String, Error> {
        match self {
            SourceDigest::Known(digest) => Ok(digest),
            SourceDigest::Hashing(h) => Ok(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?),
        }
    }
}

/// Writes the artifact: the weights (streamed), then per bucket its executables and its
/// program, then the manifest. The executables are asked for (`compiled`) only once the weights
/// are written, so that XLA compiles them meanwhile.
fn write_artifact(
    program: &Program,
    model: &Path,
    out: &Path,
    req: &CompileRequest,
    written: Written<'_, '_>,
    compiled: impl FnOnce() -> Result<CompiledAll, Error>,
    cache: &Cache,
) -> Result<CompileSummary, Error> {
    let Written { buckets, source, weights, order } = written;
    // Declared first so that they outlive the entries whose weights stream reports into them.
    let failure = std::cell::RefCell::new(None);
    let bar = progress::bytes_bar(req.progress, weights.byte_len(), "writing weights".into());
    // The weights first, streamed from the archive; a failure to read them is kept to report
    // as is, one to write them is the writer's (it names the file).
    let write_weights = |w: &mut dyn crate::container::write::Sink| {
        let done = weights.write(&mut progress::Counted { inner: w, bar: &bar }).map_err(|e| {
            let reason = e.to_string();
            if !matches!(e, Error::Import(ImportError::Write { .. })) {
                *failure.borrow_mut() = Some(e);
            }
            reason
        });
        bar.finish_and_clear();
        done
    };
    // A weights file beside the artifact is in place once written: the archive is checked first.
    let source = match (req.external_weights, source) {
        (true, s) => SourceDigest::Known(s.get()?),
        (false, s) => s,
    };
    // Their digest is remembered from an earlier compile of the same archive, else computed.
    let known = source.known().and_then(|s| cache.known_digest(&weights.content_key(s)));
    let source_known = source.known().is_some();
    let info = |entry: String, external: bool, w: Streamed| WeightsInfo {
        entry,
        external,
        order: order.clone(),
        bytes: w.bytes,
        digest: w.digest,
    };
    let mut first: Vec<(String, Payload<'_>)> = Vec::new();
    let mut weights_file = None;
    let mut external = None;
    if req.external_weights {
        let path = artifact::external_weights_path(out);
        let (w, reused) = match reusable(&path, weights.byte_len(), known.as_ref(), cache) {
            Some(w) => (w, true),
            None => match artifact::write_streamed_file(&path, weights.byte_len(), Box::new(write_weights)) {
                Ok(w) => (w, false),
                Err(e) => return Err(failure.borrow_mut().take().unwrap_or_else(|| e.into())),
            },
        };
        if let Some(k) = crate::cache::file_digest_key(&path) {
            cache.remember_digest(&k, &w.digest);
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        weights_file = Some(WeightsFileSummary { path: path.display().to_string(), bytes: w.bytes, reused });
        external = Some(info(name, true, w));
    } else {
        let stream = Payload::Stream { len: weights.byte_len(), digest: known.clone(), write: Box::new(write_weights) };
        first.push((artifact::WEIGHTS.to_string(), stream));
    }
    // After the weights: the executables, once XLA has them, and the manifest.
    let mut summaries = Vec::new();
    let mut warnings = Vec::new();
    let mut weights_digest = None;
    let mut source_digest = None;
    let bucket_entries: Vec<Bucket> = buckets.iter().map(|b| manifest::bucket(b, &b.program_entry())).collect();
    let names = bucket_entries.iter().map(|b| b.name.clone()).collect();
    let passes = bucket_entries.first().map(|b| b.passes.clone()).unwrap_or_default();
    let rest = || {
        let failed = |e: Error| {
            let reason = e.to_string();
            *failure.borrow_mut() = Some(e);
            reason
        };
        // The archive checked (its payloads, by its CRC-32s) before anything made from it is kept.
        let source = source.get().map_err(failed)?;
        let compiled = compiled().map_err(failed)?;
        let programs = buckets.iter().map(|b| (b.program_entry(), b.lowered.module.text.clone().into_bytes()));
        let (mut entries, targets) =
            executable_entries(programs, req.targets.len(), compiled.executables, &mut summaries).map_err(failed)?;
        let (serving_entries, serving) = artifact::serving_entries(&req.serving_files);
        entries.extend(serving_entries);
        warnings.extend(targets.iter().flat_map(TargetEntry::hbm_overflows));
        let manifest = |streamed: &std::collections::BTreeMap<String, Streamed>| {
            let w = external.unwrap_or_else(|| {
                let missing = || Streamed { bytes: 0, digest: WeightsDigest::Blake3(String::new()) };
                info(artifact::WEIGHTS.into(), false, streamed.get(artifact::WEIGHTS).cloned().unwrap_or_else(missing))
            });
            weights_digest = Some(w.digest.clone());
            source_digest = Some(source.clone());
            let mut m = manifest::build(program, model, req, bucket_entries, targets, source, w);
            m.sharding = buckets.first().and_then(|b| manifest::sharding(&b.lowered.graph));
            m.serving = serving;
            if let Some(s) = &mut m.sharding {
                s.chosen = req.mesh_choice.clone();
            }
            m
        };
        Ok((entries, manifest))
    };
    let written = artifact::write_then(out, first, rest);
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    written?;
    if let (Some(digest), Some(source)) = (weights_digest, source_digest) {
        if !source_known {
            cache.remember_file_digest(program.archive.path(), &source);
        }
        if known.is_none() {
            cache.remember_digest(&weights.content_key(&source), &digest);
        }
        // `run` then finds the embedded weights verified (an external file was remembered above).
        if let (false, Some(k)) = (req.external_weights, crate::cache::entry_digest_key(out, artifact::WEIGHTS)) {
            cache.remember_digest(&k, &digest);
        }
    }
    Ok(CompileSummary {
        output: out.display().to_string(),
        artifact_bytes: std::fs::metadata(out).map(|m| m.len()).unwrap_or(0),
        buckets: names,
        targets: summaries,
        notes: Vec::new(),
        warnings,
        passes,
        weights_file,
        phases: Vec::new(),
    })
}

/// Named artifact entries, in order.
type Entries<'a> = Vec<(String, Payload<'a>)>;

/// Per bucket its executables (one per target, in (bucket, target) order as compiled), then its
/// program (`programs`: each bucket's program entry and StableHLO text), as entries; the
/// targets' manifest entries; each executable's summary into `summaries`. How `compile` and
/// `recompile` lay an artifact out.
fn executable_entries<'a>(
    programs: impl IntoIterator<Item = (String, Vec<u8>)>,
    targets: usize,
    executables: Vec<TargetOutput>,
    summaries: &mut Vec<TargetSummary>,
) -> Result<(Entries<'a>, Vec<TargetEntry>), Error> {
    let mut entries = Vec::new();
    let mut entries_of_targets: Vec<TargetEntry> = Vec::new();
    let mut executables = executables.into_iter();
    for (program_entry, text) in programs {
        for t in 0..targets {
            let e =
                executables.next().ok_or_else(|| Error::Internal(format!("`{program_entry}` lacks executables")))?;
            if entries_of_targets.len() <= t {
                let target = e.summary.target.clone();
                entries_of_targets.push(TargetEntry { target, plugin: e.plugin, tpu: e.tpu, executables: Vec::new() });
            }
            entries.push((e.executable.entry.clone(), Payload::Bytes(e.bytes)));
            entries_of_targets[t].executables.push(e.executable);
            summaries.push(e.summary);
        }
        entries.push((program_entry, Payload::Bytes(text)));
    }
    Ok((entries, entries_of_targets))
}

/// The external weights file at `path` as it is, when it holds the `len` bytes whose digest
/// is `known` (its own digest remembered by its identity, else read): a compile then leaves it
/// alone. `None` when it must be written.
fn reusable(path: &Path, len: u64, known: Option<&WeightsDigest>, cache: &Cache) -> Option<Streamed> {
    let known = known?;
    if std::fs::metadata(path).ok()?.len() != len {
        return None;
    }
    let key = crate::cache::file_digest_key(path);
    let remembered = key.as_deref().and_then(|k| cache.known_digest(k));
    // Mapped and read only when its digest is not remembered.
    let digest = match remembered {
        Some(d) if d.algorithm() == known.algorithm() => d,
        _ => crate::container::MappedFile::open(path).map(|f| f.digest_like(0..f.bytes().len(), known)).ok()?,
    };
    (digest == *known).then_some(Streamed { bytes: len, digest })
}

/// `f` over `items` on up to `jobs` threads; the results in the order of `items`, or the
/// first error in that order.
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> Result<R, Error> + Sync,
) -> Result<Vec<R>, Error> {
    let jobs = jobs.clamp(1, items.len().max(1));
    if jobs == 1 {
        return items.iter().map(&f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<R, Error>>>> = items.iter().map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let result = f(item);
                *slots[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .unwrap_or_else(|| Err(Error::Internal("a compile thread stopped".into())))
        })
        .collect()
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|e| Error::Io { path: path.display().to_string(), reason: e.to_string() })
}

/// `--dump-dir`: the IR after each stage, the final StableHLO (the compile log is added later).
fn dump(dir: &Path, program: &Program, lowered: &Lowered) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io { path: dir.display().to_string(), reason: e.to_string() })?;
    write_file(&dir.join("00.import.ir"), torchtpu_passes::ir::print(&program.graph).as_bytes())?;
    for (i, (stage, ir)) in lowered.stages.iter().enumerate() {
        write_file(&dir.join(format!("{:02}.{stage}.ir", i + 1)), ir.as_bytes())?;
    }
    write_file(&dir.join("main.mlir"), lowered.module.text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::CompileRequest;
    use crate::emit::Precision;
    use crate::target::Target;

    /// Library callers get the command line's pass defaults: no padding, for TPU targets too.
    #[test]
    fn requests_do_not_pad_by_default_as_the_command_line_does() {
        let tpu = Target::Tpu { generation: "v6e".into(), topology: "1x1".into() };
        let both = CompileRequest::new(vec![tpu, Target::cpu()], Precision::Default);
        assert_eq!(both.pass_options.pad_multiple, None);
    }
}
