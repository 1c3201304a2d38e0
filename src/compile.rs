//! `compile`: lower a program, compile it for every target through PJRT, and pack the artifact.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use safetensors::tensor::{Dtype, View};
use serde::{Deserialize, Serialize};
use torchtpu_passes::ir::{DType, Dim, Graph, InputKind, Op, TensorType};

use crate::artifact::{
    self, Bucket, CompilerInfo, Executable, Manifest, OptionsInfo, PluginInfo, Signature, SignatureValue,
};
use crate::artifact::{safetensors_dtype, SourceInfo, SymbolInfo, TargetEntry, WeightsInfo, ARTIFACT_FORMAT};
use torchtpu_passes::bucket_masks::BucketSpec;
use torchtpu_passes::PassOptions;

use crate::artifact::{CostInfo, MemoryInfo, PassInfo, TpuInfo};
use crate::cache::{Cache, CacheConfig, Entry, KeyParts, Outcome, PluginMemo};
use crate::driver::{self, LowerOptions, Lowered};
use crate::emit::{EmitOptions, GroupedMm, Precision};
use crate::import::Program;
use crate::pjrt::{AttributeValue, CompileOptions, Plugin};
use crate::setup::{cpu_plugin, tpu_plugin, LIBTPU_VERSION};
use crate::target::Target;
use crate::Error;

/// What to compile and how.
#[derive(Clone, Debug)]
pub struct CompileRequest {
    pub targets: Vec<Target>,
    pub precision: Precision,
    /// How `_grouped_mm` is lowered (`--grouped-mm`).
    pub grouped_mm: GroupedMm,
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
    pub pass_options: PassOptions,
    /// Bucket sizes per symbol (`--buckets`); symbols not named get `pow2`.
    pub buckets: Vec<crate::buckets::Choice>,
    /// How many buckets compile at once (`--jobs`).
    pub jobs: usize,
}

impl CompileRequest {
    /// A quiet request for `targets` at `precision`: the default plugins, every pass, no cache
    /// and no dumps.
    pub fn new(targets: Vec<Target>, precision: Precision) -> CompileRequest {
        let pass_options = PassOptions { pad_multiple: default_pad_multiple(&targets), ..PassOptions::default() };
        CompileRequest {
            targets,
            precision,
            grouped_mm: GroupedMm::Dense,
            plugin: None,
            dump_dir: None,
            progress: false,
            cache: CacheConfig::off(),
            passes: LowerOptions::default().passes,
            pass_options,
            buckets: Vec::new(),
            jobs: default_jobs(),
        }
    }
}

/// The `pad` pass's default multiple: 128 (the TPU matrix unit's width) when a target is a
/// TPU, off otherwise. The command line's `--pad-multiple` overrides it.
pub fn default_pad_multiple(targets: &[Target]) -> Option<i64> {
    targets.iter().any(|t| matches!(t, Target::Tpu { .. })).then_some(128)
}

/// One compile thread per core (XLA's own compile threads share them).
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// What `compile` did, for the summary line and `--format json`.
#[derive(Debug, Serialize)]
pub struct CompileSummary {
    pub output: String,
    pub artifact_bytes: u64,
    pub buckets: Vec<String>,
    pub targets: Vec<TargetSummary>,
    /// Cache problems that did not stop the compile (e.g. an unwritable folder).
    pub warnings: Vec<String>,
    /// What each graph pass did.
    pub passes: Vec<PassInfo>,
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
/// bucket (one `main` bucket for a static program), each compiled for every target. Buckets
/// are lowered and compiled on `req.jobs` threads; the artifact does not depend on how many.
pub fn compile(program: &Program, model: &Path, out: &Path, req: &CompileRequest) -> Result<CompileSummary, Error> {
    let planned = crate::buckets::plan(program, &req.buckets)?;
    let bar = progress_bar(req.progress, planned.len() * req.targets.len());
    let cache = Cache::open(&req.cache);
    let first = planned.first().map(|p| p.name.as_str());
    let work = BucketWork { program, req, cache: &cache, bar: &bar, dump_each: planned.len() > 1, first };
    let outputs = in_parallel(&planned, req.jobs, |p| work.run(p));
    cache.trim();
    let outputs = outputs?;
    bar.finish_and_clear();
    let mut log = Vec::new();
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    let mut target_entries: Vec<TargetEntry> = Vec::new();
    let mut summaries = Vec::new();
    let mut buckets = Vec::new();
    let (mut weights, mut order): (Vec<u8>, Option<Vec<String>>) = (Vec::new(), None);
    for (p, o) in planned.iter().zip(outputs) {
        if order.get_or_insert_with(|| o.weight_order.clone()) != &o.weight_order {
            return Err(Error::Unsupported(format!(
                "internal: bucket {} takes other weights than the first bucket",
                p.name
            )));
        }
        weights = o.weights.unwrap_or(weights);
        for (t, compiled) in o.targets.into_iter().enumerate() {
            if target_entries.len() <= t {
                target_entries.push(TargetEntry {
                    target: compiled.summary.target.clone(),
                    plugin: compiled.plugin,
                    tpu: compiled.tpu,
                    executables: Vec::new(),
                });
            }
            target_entries[t].executables.push(compiled.executable);
            summaries.push(compiled.summary);
            entries.push(compiled.entry);
        }
        log.extend(o.log);
        buckets.push(o.bucket);
        entries.push(o.program);
    }
    if let Some(dir) = &req.dump_dir {
        write_file(&dir.join("compile.log"), (log.join("\n") + "\n").as_bytes())?;
    }
    let first_passes = buckets.first().map(|b| b.passes.clone()).unwrap_or_default();
    let order = order.unwrap_or_default();
    let manifest = Manifest {
        format: ARTIFACT_FORMAT.to_string(),
        compiler: CompilerInfo { name: env!("CARGO_PKG_NAME").into(), version: env!("CARGO_PKG_VERSION").into() },
        source: source_info(program, model)?,
        signature: signature(program),
        options: OptionsInfo {
            precision: req.precision.name().into(),
            passes: first_passes.iter().map(|r| r.pass.clone()).filter(|p| p != "bucket_masks").collect(),
            compute_dtype: req.pass_options.compute_dtype.map(|d| d.to_string()),
            pad_multiple: req.pass_options.pad_multiple,
            grouped_mm: (req.grouped_mm != GroupedMm::Dense).then(|| req.grouped_mm.name().to_string()),
        },
        weights: WeightsInfo {
            entry: artifact::WEIGHTS.into(),
            order,
            bytes: weights.len() as u64,
            sha256: artifact::sha256_hex(&weights),
        },
        buckets,
        targets: target_entries,
    };
    let mut all = vec![(artifact::WEIGHTS.to_string(), weights)];
    all.extend(entries);
    artifact::write(out, &manifest, &all)?;
    let artifact_bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    Ok(CompileSummary {
        output: out.display().to_string(),
        artifact_bytes,
        buckets: manifest.buckets.iter().map(|b| b.name.clone()).collect(),
        targets: summaries,
        warnings: cache.take_warnings(),
        passes: first_passes,
    })
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
                .unwrap_or_else(|| Err(Error::Unsupported("internal: a compile thread stopped".into())))
        })
        .collect()
}

/// What every bucket's compile shares.
struct BucketWork<'a> {
    program: &'a Program,
    req: &'a CompileRequest,
    cache: &'a Cache,
    bar: &'a ProgressBar,
    /// Dumps go to one subfolder per bucket.
    dump_each: bool,
    /// The first bucket, whose weights go into the artifact (all buckets take the same).
    first: Option<&'a str>,
}

/// One bucket lowered and compiled for every target.
struct BucketOutput {
    bucket: Bucket,
    /// `programs/<bucket>.mlir` and its text.
    program: (String, Vec<u8>),
    /// The weight arguments (safetensors), for the first bucket only.
    weights: Option<Vec<u8>>,
    /// The names of the weight arguments, in the order the program takes them.
    weight_order: Vec<String>,
    targets: Vec<TargetOutput>,
    log: Vec<String>,
}

/// One executable of a bucket, with what the manifest and the summary say about it.
struct TargetOutput {
    summary: TargetSummary,
    executable: Executable,
    plugin: PluginInfo,
    tpu: Option<TpuInfo>,
    entry: (String, Vec<u8>),
}

impl BucketWork<'_> {
    fn run(&self, p: &crate::buckets::Planned) -> Result<BucketOutput, Error> {
        let (program, req) = (self.program, self.req);
        let lowered = lower_bucket(program, p, req)?;
        if let Some(dir) = &req.dump_dir {
            dump(&if self.dump_each { dir.join(&p.name) } else { dir.clone() }, program, &lowered)?;
        }
        // Derived weights are computed and serialized once, not per bucket.
        let first = self.first == Some(p.name.as_str());
        let weights = if first { Some(weights_safetensors(program, &lowered.graph)?) } else { None };
        let mut targets = Vec::new();
        let mut log = Vec::new();
        for target in &req.targets {
            self.bar.set_message(format!("{target} [{}]", p.name));
            let started = Instant::now();
            let (compiled, outcome, key) = compile_target(target, &lowered, req, self.cache)?;
            let ms = started.elapsed().as_millis() as u64;
            let meta = compiled.meta;
            log.push(format!(
                "{target} {}: {} in {ms} ms (XLA compile {} ms), {} bytes, cache key {key}",
                p.name,
                outcome.describe(),
                meta.compile_ms,
                compiled.bytes.len()
            ));
            let entry = format!("executables/{}/{}.pjrt", target.dir_name(), p.name);
            targets.push(TargetOutput {
                summary: TargetSummary {
                    target: target.to_string(),
                    bucket: p.name.clone(),
                    cache: outcome,
                    ms,
                    compile_ms: meta.compile_ms,
                    executable_bytes: compiled.bytes.len() as u64,
                    cache_key: key.clone(),
                },
                executable: Executable {
                    bucket: p.name.clone(),
                    entry: entry.clone(),
                    sha256: artifact::sha256_hex(&compiled.bytes),
                    bytes: compiled.bytes.len() as u64,
                    compile_ms: meta.compile_ms,
                    cache_key: Some(key),
                    generated_code_bytes: meta.generated_code_bytes,
                    memory: meta.memory,
                    cost: meta.cost,
                },
                plugin: meta.plugin,
                tpu: meta.tpu,
                entry: (entry, compiled.bytes),
            });
            self.bar.inc(1);
        }
        let program_entry = format!("programs/{}.mlir", p.name);
        Ok(BucketOutput {
            bucket: bucket(p, &program_entry, &lowered)?,
            program: (program_entry, lowered.module.text.into_bytes()),
            weights,
            weight_order: weight_order(&lowered.graph),
            targets,
            log,
        })
    }
}

/// Lowers the program at one bucket's sizes; a bucket of a dynamic program also gets the
/// masks that keep its results exact at every real size it serves.
fn lower_bucket(program: &Program, p: &crate::buckets::Planned, req: &CompileRequest) -> Result<Lowered, Error> {
    let mut pass_options = req.pass_options.clone();
    let values = if p.values.is_empty() {
        driver::example_bindings(program).map_err(driver::LowerError::from)?
    } else {
        let bounds = program.graph.symbols().clone();
        pass_options.bucket = Some(BucketSpec { values: p.values.clone(), bounds });
        p.values.clone()
    };
    let opts = LowerOptions {
        emit: EmitOptions { precision: req.precision, grouped_mm: req.grouped_mm },
        passes: req.passes.clone(),
        pass_options,
        keep_stages: req.dump_dir.is_some(),
    };
    Ok(driver::lower(program, values, &opts)?)
}

/// One target's executable and what the manifest records about it.
struct CompiledTarget {
    bytes: Vec<u8>,
    meta: CompiledMeta,
}

/// What the manifest records about an executable; cached with it.
#[derive(Serialize, Deserialize)]
struct CompiledMeta {
    compile_ms: u64,
    plugin: PluginInfo,
    tpu: Option<TpuInfo>,
    generated_code_bytes: Option<i64>,
    memory: Option<MemoryInfo>,
    #[serde(default)]
    cost: Option<CostInfo>,
}

/// Looks `parts` up in the cache, compiling with `compile_now` on a miss.
fn cached(
    cache: &Cache,
    target: &Target,
    parts: &KeyParts,
    compile_now: impl FnOnce() -> Result<CompiledTarget, Error>,
) -> Result<(CompiledTarget, Outcome, String), Error> {
    let (entry, outcome) = cache.get_or_compile(parts, || {
        let c = compile_now()?;
        let meta = serde_json::to_value(&c.meta).map_err(|e| Error::Unsupported(format!("internal: {e}")))?;
        Ok::<_, Error>((c.bytes, meta))
    })?;
    from_entry(target, entry, outcome)
}

fn from_entry(target: &Target, entry: Entry, outcome: Outcome) -> Result<(CompiledTarget, Outcome, String), Error> {
    let meta: CompiledMeta = serde_json::from_value(entry.header.meta).map_err(|e| {
        Error::Unsupported(format!("{target}: cache entry {} has unreadable metadata: {e}", entry.header.key))
    })?;
    Ok((CompiledTarget { bytes: entry.payload, meta }, outcome, entry.header.key))
}

fn plugin_info(plugin: &Plugin, platform_name: &str, platform_version: &str, version: Option<&str>) -> PluginInfo {
    let api = plugin.api_version();
    PluginInfo {
        file: plugin.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        version: version.map(str::to_string),
        sha256: plugin.sha256().to_string(),
        platform_name: platform_name.to_string(),
        platform_version: platform_version.to_string(),
        api_version: format!("{}.{}", api.major, api.minor),
    }
}

/// The executable for one target: from the cache, or compiled by the target's plugin.
fn compile_target(
    target: &Target,
    lowered: &Lowered,
    req: &CompileRequest,
    cache: &Cache,
) -> Result<(CompiledTarget, Outcome, String), Error> {
    let failed = |source| Error::Compile { target: target.to_string(), source };
    let program = lowered.module.text.as_bytes();
    let name = target.to_string();
    let (choice, options) = match target {
        Target::Cpu => (cpu_plugin(req.plugin.as_deref()), CompileOptions::single_device()),
        // No sharding annotations yet: one partition, i.e. a replicated program that runs on one
        // chip of the slice.
        Target::Tpu { .. } => (tpu_plugin(), CompileOptions::partitions(1).map_err(failed)?),
    };
    let options_bytes = prost::Message::encode_to_vec(options.proto());
    // A hit for a plugin file seen before needs no plugin load.
    if let Some((entry, outcome)) = cache.get_without_plugin(&choice.path, &name, (program, &options_bytes)) {
        return from_entry(target, entry, outcome);
    }
    let plugin = Plugin::load(&choice.path).map_err(|e| Error::plugin(e, choice.source))?;
    let key_parts = |platform_version: &str| {
        let memo = PluginMemo { sha256: plugin.sha256().to_string(), platform_version: platform_version.to_string() };
        cache.remember_plugin(&choice.path, &name, &memo);
        KeyParts::new(program, &options_bytes, &name, plugin.sha256(), platform_version)
    };
    match target {
        Target::Cpu => {
            let client = plugin.client().map_err(|e| Error::plugin(e, choice.source))?;
            cached(cache, target, &key_parts(client.platform_version()), || {
                let started = Instant::now();
                let exe = client.compile(program, &options).map_err(failed)?;
                let compile_ms = started.elapsed().as_millis() as u64;
                Ok(CompiledTarget {
                    bytes: exe.serialize().map_err(failed)?,
                    meta: CompiledMeta {
                        compile_ms,
                        plugin: plugin_info(&plugin, client.platform_name(), client.platform_version(), None),
                        tpu: None,
                        generated_code_bytes: None,
                        memory: None,
                        cost: None,
                    },
                })
            })
        }
        Target::Tpu { generation, topology } => {
            let topo = plugin.topology(&format!("{generation}:{topology}")).map_err(failed)?;
            cached(cache, target, &key_parts(topo.platform_version()), || {
                compile_tpu(&plugin, &topo, (generation, topology), program, &options, choice.source)
            })
        }
    }
}

/// A deviceless TPU compile with libtpu.
fn compile_tpu(
    plugin: &Plugin,
    topo: &crate::pjrt::Topology,
    (generation, topology): (&str, &str),
    program: &[u8],
    options: &CompileOptions,
    source: &str,
) -> Result<CompiledTarget, Error> {
    let failed = |e| Error::Compile { target: format!("tpu:{generation}:{topology}"), source: e };
    let started = Instant::now();
    let exe = topo.compile(program, options).map_err(failed)?;
    let compile_ms = started.elapsed().as_millis() as u64;
    let stats = exe.memory_stats().map_err(failed)?;
    let version = (source == "the set-up folder").then_some(LIBTPU_VERSION);
    let meta = CompiledMeta {
        compile_ms,
        plugin: plugin_info(plugin, topo.platform_name(), topo.platform_version(), version),
        tpu: Some(TpuInfo {
            generation: generation.to_string(),
            topology: topology.to_string(),
            chips: chip_count(topology),
            partitions: exe.num_partitions().map_err(failed)? as u64,
            hbm_bytes_per_chip: hbm_bytes(generation),
        }),
        generated_code_bytes: Some(exe.generated_code_bytes().map_err(failed)?),
        memory: Some(MemoryInfo {
            argument_bytes: stats.argument_size_in_bytes,
            output_bytes: stats.output_size_in_bytes,
            alias_bytes: stats.alias_size_in_bytes,
            temp_bytes: stats.temp_size_in_bytes,
            generated_code_bytes: stats.generated_code_size_in_bytes,
            peak_bytes: stats.peak_memory_in_bytes,
        }),
        cost: cost_info(&exe),
    };
    Ok(CompiledTarget { bytes: exe.serialize().map_err(failed)?, meta })
}

/// `flops` and `bytes accessed` from XLA's cost model; `None` when the plugin does not say.
fn cost_info(exe: &crate::pjrt::Executable) -> Option<CostInfo> {
    let properties = exe.cost_analysis().ok()?;
    let figure = |name: &str| {
        properties.iter().find(|(n, _)| n == name).and_then(|(_, v)| match v {
            AttributeValue::Float(f) => Some(f64::from(*f)),
            AttributeValue::Int64(i) => Some(*i as f64),
            _ => None,
        })
    };
    Some(CostInfo { flops: figure("flops")?, bytes_accessed: figure("bytes accessed")? })
}

/// `2x2x1` → 4.
fn chip_count(topology: &str) -> u64 {
    topology.split('x').filter_map(|p| p.parse::<u64>().ok()).product()
}

/// HBM of one chip, by generation (public TPU system specifications).
fn hbm_bytes(generation: &str) -> Option<u64> {
    const GIB: u64 = 1 << 30;
    Some(match generation {
        "v2" => 16 * GIB,
        "v3" | "v4" | "v6e" => 32 * GIB,
        "v5e" => 16 * GIB,
        "v5p" => 95 * GIB,
        "tpu7x" => 192 * GIB,
        _ => return None,
    })
}

/// One step per (bucket, target); drawn only on a terminal, hidden with `-q`.
fn progress_bar(show: bool, steps: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps as u64);
    if let Ok(style) = ProgressStyle::with_template("{spinner} compiling {msg} [{pos}/{len}] {elapsed}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
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

fn source_info(program: &Program, model: &Path) -> Result<SourceInfo, Error> {
    let bytes =
        std::fs::read(model).map_err(|e| Error::Io { path: model.display().to_string(), reason: e.to_string() })?;
    Ok(SourceInfo {
        file: model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        sha256: artifact::sha256_hex(&bytes),
        torch_version: program.info.torch_version.clone(),
        schema_version: format!("{}.{}", program.info.schema_version.0, program.info.schema_version.1),
    })
}

fn signature(program: &Program) -> Signature {
    let report = crate::inspect::report(program, "");
    let g = &program.graph;
    let dynamic = !g.symbols().is_empty();
    let exprs = |ty: &TensorType| if dynamic { ty.dims.iter().map(Dim::to_expr).collect() } else { Vec::new() };
    let input_types: Vec<&TensorType> = g
        .graph_inputs()
        .iter()
        .map(|&id| g.node(id))
        .filter(|n| matches!(n.op, Op::Input(InputKind::User { .. })))
        .map(|n| &n.outputs[0])
        .collect();
    let output_types: Vec<&TensorType> = g.outputs().iter().map(|o| g.value_type(o.value)).collect();
    let value = |(v, ty): (&crate::inspect::ValueInfo, &&TensorType)| SignatureValue {
        name: v.name.clone(),
        dtype: v.dtype.clone(),
        dims: v.dims.clone(),
        kind: v.kind.clone(),
        sym_dims: exprs(ty),
    };
    let symbols = program
        .graph
        .symbols()
        .iter()
        .filter_map(|(name, b)| {
            let binding = program.bindings.get(name)?;
            Some(SymbolInfo { name: name.clone(), min: b.min, max: b.max, input: binding.input, dim: binding.dim })
        })
        .collect();
    let rng_seed =
        program.graph.graph_inputs().iter().any(|&id| program.graph.node(id).op == Op::Input(InputKind::RngSeed));
    Signature {
        inputs: report.inputs.iter().zip(&input_types).map(value).collect(),
        outputs: report.outputs.iter().zip(&output_types).map(value).collect(),
        symbols,
        rng_seed,
    }
}

/// Static user input and output shapes of the bucket, what it serves and what the passes did.
fn bucket(p: &crate::buckets::Planned, entry: &str, lowered: &Lowered) -> Result<Bucket, Error> {
    let g = &lowered.graph;
    let dims =
        |ty: &torchtpu_passes::ir::TensorType| -> Vec<i64> { ty.dims.iter().filter_map(|d| d.as_static()).collect() };
    let input_dims = g
        .graph_inputs()
        .iter()
        .map(|&id| g.node(id))
        .filter(|n| matches!(n.op, Op::Input(InputKind::User { .. })))
        .map(|n| dims(&n.outputs[0]))
        .collect();
    let output_dims = g.outputs().iter().map(|o| dims(g.value_type(o.value))).collect();
    let sizes = g
        .graph_inputs()
        .iter()
        .filter_map(|&id| match &g.node(id).op {
            Op::Input(InputKind::Size { symbol }) => Some(symbol.clone()),
            _ => None,
        })
        .collect();
    Ok(Bucket {
        name: p.name.clone(),
        bindings: lowered.bindings.clone(),
        sizes,
        serves: p.serves.iter().map(|(s, &(lo, hi))| (s.clone(), [lo, hi])).collect(),
        padding_waste: p.padding_waste,
        program: entry.to_string(),
        program_sha256: artifact::sha256_hex(lowered.module.text.as_bytes()),
        input_dims,
        output_dims,
        passes: lowered
            .passes
            .iter()
            .map(|r| PassInfo {
                pass: r.pass.clone(),
                nodes_before: r.nodes_before,
                nodes_after: r.nodes_after,
                notes: r.notes.clone(),
                padded: r.padded.clone(),
            })
            .collect(),
    })
}

/// A weight as a safetensors view over the archive's bytes.
struct WeightView<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Cow<'a, [u8]>,
}

impl View for &WeightView<'_> {
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

/// The names of `graph`'s weight arguments (stored and derived), in calling order.
fn weight_order(graph: &Graph) -> Vec<String> {
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

/// The weight arguments of the lowered graph as safetensors keyed by fully qualified name:
/// stored weights straight from the archive, derived ones computed here.
fn weights_safetensors(program: &Program, graph: &Graph) -> Result<Vec<u8>, Error> {
    let mut views = BTreeMap::new();
    for &id in graph.graph_inputs() {
        let Op::Input(kind) = &graph.node(id).op else {
            continue;
        };
        let (name, view) = match kind {
            InputKind::Derived { fqn, recipe } => {
                let ty = &graph.node(id).outputs[0];
                let values = crate::derive::compute(program, recipe)?;
                let shape = ty.dims.iter().filter_map(|d| d.as_static()).map(|d| d as usize).collect();
                let (dtype, data) = match ty.dtype {
                    DType::BF16 => {
                        (Dtype::BF16, values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect())
                    }
                    DType::F32 => (Dtype::F32, values.iter().flat_map(|v| v.to_le_bytes()).collect()),
                    d => return Err(Error::Unsupported(format!("derived weight `{fqn}` of dtype {d}"))),
                };
                (fqn.clone(), WeightView { dtype, shape, data: Cow::Owned(data) })
            }
            k => {
                let Some(fqn) = k.weight_fqn() else { continue };
                let w = &program.weights[fqn];
                let dtype = safetensors_dtype(w.dtype).ok_or_else(|| {
                    Error::Unsupported(format!("weight `{fqn}` has dtype {}, which the artifact cannot store", w.dtype))
                })?;
                let data = w.contiguous_bytes(&program.archive)?;
                (fqn.to_string(), WeightView { dtype, shape: w.sizes.iter().map(|&s| s as usize).collect(), data })
            }
        };
        views.insert(name, view);
    }
    safetensors::serialize(views.iter().map(|(k, v)| (k.as_str(), v)), None)
        .map_err(|e| Error::Unsupported(format!("cannot serialize the weights: {e}")))
}

#[cfg(test)]
mod tests {
    use super::CompileRequest;
    use crate::emit::Precision;
    use crate::target::Target;

    /// Library callers get the command line's pass defaults: padding to 128 when a target is a
    /// TPU, none for CPU alone.
    #[test]
    fn requests_pad_for_tpu_targets_as_the_command_line_does() {
        let tpu = Target::Tpu { generation: "v6e".into(), topology: "1x1".into() };
        let both = CompileRequest::new(vec![tpu, Target::Cpu], Precision::Default);
        assert_eq!(both.pass_options.pad_multiple, Some(128));
        let cpu = CompileRequest::new(vec![Target::Cpu], Precision::Default);
        assert_eq!(cpu.pass_options.pad_multiple, None);
    }
}
