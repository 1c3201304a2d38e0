//! One target of a compile: its plugin, its client (CPU) or topology (TPU) and its encoded
//! compile options, made once per compile and shared by every bucket, with the cache protocol
//! in front of XLA.
//!
//! A hit whose plugin file was seen before loads no plugin at all
//! ([`Cache::get_without_plugin`]); the plugin, and then the client or topology, are created
//! on the first miss and reused for every later bucket.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::explain::Origin;
use crate::artifact::{CollectiveInfo, CostInfo, MemoryInfo, PluginInfo, TpuInfo};
use crate::cache::{Cache, Entry, KeyParts, Outcome, PluginMemo};
use crate::pjrt::{Client, CompileOptions, PjrtError, Plugin, Topology};
use crate::setup::{cpu_plugin, tpu_plugin, PluginChoice, LIBTPU_VERSION};
use crate::target::Target;
use crate::Error;

/// A target's compiler for the length of one compile.
pub(crate) struct TargetCompiler {
    target: Target,
    /// `target`'s name, as cache keys and messages give it.
    name: String,
    choice: PluginChoice,
    options: CompileOptions,
    /// `options` encoded once, then the XLA environment ([`xla_environment`]): part of every
    /// cache key.
    options_bytes: Vec<u8>,
    /// The program is split over several partitions (its collectives are counted).
    split: bool,
    /// Created on the first cache miss.
    backend: Mutex<Option<Arc<Backend>>>,
}

/// What compiles for a target: a loaded plugin with a client or a topology description.
enum Backend {
    Cpu { plugin: Plugin, client: Client },
    Tpu { plugin: Plugin, topology: Topology },
}

impl Backend {
    fn plugin(&self) -> &Plugin {
        match self {
            Backend::Cpu { plugin, .. } | Backend::Tpu { plugin, .. } => plugin,
        }
    }

    fn platform(&self) -> (&str, &str) {
        match self {
            Backend::Cpu { client, .. } => (client.platform_name(), client.platform_version()),
            Backend::Tpu { topology, .. } => (topology.platform_name(), topology.platform_version()),
        }
    }
}

/// An executable with what the manifest records about it.
pub(crate) struct Compiled {
    pub bytes: Vec<u8>,
    pub meta: CompiledMeta,
    pub outcome: Outcome,
    pub cache_key: String,
}

/// What the manifest records about an executable; cached with it.
#[derive(Serialize, Deserialize)]
pub(crate) struct CompiledMeta {
    pub compile_ms: u64,
    pub plugin: PluginInfo,
    pub tpu: Option<TpuInfo>,
    pub generated_code_bytes: Option<i64>,
    pub memory: Option<MemoryInfo>,
    #[serde(default)]
    pub cost: Option<CostInfo>,
    #[serde(default)]
    pub collectives: BTreeMap<String, CollectiveInfo>,
    /// What made it (for `cache explain`); absent in entries written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// The environment variables through which XLA and libtpu read settings that change what they
/// compile (`XLA_FLAGS`, `LIBTPU_INIT_ARGS`), as bytes to key executables on: a flag set there
/// must not serve its executables to compiles without it, nor the other way round.
fn xla_environment() -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["XLA_FLAGS", "LIBTPU_INIT_ARGS"] {
        bytes.push(0);
        bytes.extend(name.as_bytes());
        bytes.push(b'=');
        bytes.extend(std::env::var_os(name).unwrap_or_default().as_encoded_bytes());
    }
    bytes
}

impl TargetCompiler {
    /// Chooses `target`'s plugin (`cpu_plugin_flag` is `--plugin`) and encodes its options for
    /// a program split over `partitions` devices (Shardy partitions it when more than one);
    /// loads nothing yet. Without a mesh, a TPU slice gets a replicated single-partition
    /// program that runs on one chip.
    pub(crate) fn new(
        target: &Target,
        cpu_plugin_flag: Option<&std::path::Path>,
        partitions: u32,
    ) -> Result<TargetCompiler, Error> {
        // Split programs carry Shardy's shardings; without the flag off, XLA warns on every
        // compile that it turns its newer `HloShardingV3` off for them.
        let split = || {
            CompileOptions::partitions(partitions)
                .map(|o| o.with_shardy_partitioner(true).with_flag("xla_enable_hlo_sharding_v3", false))
                .map_err(|source| Error::Compile { target: target.to_string(), source })
        };
        let (choice, options) = match target {
            Target::Cpu { .. } if partitions == 1 => (cpu_plugin(cpu_plugin_flag), CompileOptions::cpu()),
            Target::Cpu { .. } => (cpu_plugin(cpu_plugin_flag), split()?.for_cpu()),
            Target::Tpu { .. } if partitions == 1 => (
                tpu_plugin(),
                CompileOptions::partitions(1)
                    .map_err(|source| Error::Compile { target: target.to_string(), source })?,
            ),
            Target::Tpu { .. } => (tpu_plugin(), split()?),
        };
        let mut options_bytes = prost::Message::encode_to_vec(options.proto());
        options_bytes.extend(xla_environment());
        Ok(TargetCompiler {
            target: target.clone(),
            name: target.to_string(),
            choice,
            options,
            options_bytes,
            split: partitions > 1,
            backend: Mutex::new(None),
        })
    }

    /// The cache key parts of `program` (StableHLO text) for this target: the plugin's sha256
    /// and platform version remembered from an earlier load, else read by loading it.
    pub(crate) fn key_parts(&self, program: &[u8], cache: &Cache) -> Result<KeyParts, Error> {
        let memo = match cache.plugin_memo(&self.choice.path, &self.name) {
            Some(memo) => memo,
            None => {
                let backend = self.backend()?;
                let (plugin, (_, version)) = (backend.plugin(), backend.platform());
                PluginMemo { sha256: plugin.sha256().to_string(), platform_version: version.to_string() }
            }
        };
        Ok(KeyParts::new(program, &self.options_bytes, &self.name, &memo.sha256, &memo.platform_version))
    }

    /// The executable of `program` (StableHLO text): from the cache, or compiled by XLA and
    /// stored in the cache with `origin` (what made it, for `cache explain`).
    pub(crate) fn compile(&self, program: &[u8], origin: &Origin, cache: &Cache) -> Result<Compiled, Error> {
        if let Some((entry, outcome)) =
            cache.get_without_plugin(&self.choice.path, &self.name, (program, &self.options_bytes))
        {
            return self.compiled(entry, outcome);
        }
        let backend = self.backend()?;
        let (plugin, (_, platform_version)) = (backend.plugin(), backend.platform());
        let memo = PluginMemo { sha256: plugin.sha256().to_string(), platform_version: platform_version.to_string() };
        cache.remember_plugin(&self.choice.path, &self.name, &memo);
        let parts = KeyParts::new(program, &self.options_bytes, &self.name, plugin.sha256(), platform_version);
        let (entry, outcome) = cache.get_or_compile(&parts, || {
            let (bytes, mut meta) = self.compile_now(&backend, program)?;
            meta.origin = Some(origin.clone());
            let meta = serde_json::to_value(&meta).map_err(|e| Error::Internal(format!("{e}")))?;
            Ok::<_, Error>((bytes, meta))
        })?;
        self.compiled(entry, outcome)
    }

    /// The backend, created on first use.
    fn backend(&self) -> Result<Arc<Backend>, Error> {
        let mut slot = self.backend.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = slot.as_ref() {
            return Ok(Arc::clone(b));
        }
        let plugin = Plugin::load(&self.choice.path).map_err(|e| self.plugin_failed(e))?;
        let backend = match &self.target {
            Target::Cpu { devices } => Backend::Cpu {
                plugin,
                client: plugin.client_with_devices(*devices).map_err(|e| self.plugin_failed(e))?,
            },
            Target::Tpu { generation, topology } => Backend::Tpu {
                plugin,
                topology: plugin.topology(&format!("{generation}:{topology}")).map_err(|e| self.failed(e))?,
            },
        };
        let backend = Arc::new(backend);
        *slot = Some(Arc::clone(&backend));
        Ok(backend)
    }

    fn failed(&self, source: PjrtError) -> Error {
        Error::Compile { target: self.name.clone(), source }
    }

    /// A plugin that cannot be used is an environment problem; anything else, this target's.
    fn plugin_failed(&self, source: PjrtError) -> Error {
        if source.is_plugin_setup() {
            Error::Plugin { source, chosen_by: self.choice.source }
        } else {
            self.failed(source)
        }
    }

    /// XLA's compile, timed, with what the plugin reports about the executable.
    fn compile_now(&self, backend: &Backend, program: &[u8]) -> Result<(Vec<u8>, CompiledMeta), Error> {
        let started = Instant::now();
        let (platform_name, platform_version) = backend.platform();
        match (backend, &self.target) {
            (Backend::Cpu { plugin, client }, _) => {
                let exe = client.compile(program, &self.options).map_err(|e| self.failed(e))?;
                let compile_ms = started.elapsed().as_millis() as u64;
                let stats = exe.memory_stats().map_err(|e| self.failed(e))?;
                let collectives = self.collectives(exe.optimized_program())?;
                let meta = CompiledMeta {
                    compile_ms,
                    plugin: plugin_info(plugin, platform_name, platform_version, None),
                    tpu: None,
                    generated_code_bytes: None,
                    memory: Some(memory_info(&stats)),
                    cost: None,
                    collectives,
                    origin: None,
                };
                Ok((exe.serialize().map_err(|e| self.failed(e))?, meta))
            }
            (Backend::Tpu { plugin, topology }, Target::Tpu { generation, topology: grid }) => {
                let exe = topology.compile(program, &self.options).map_err(|e| self.failed(e))?;
                let compile_ms = started.elapsed().as_millis() as u64;
                let collectives = self.collectives(exe.optimized_program())?;
                let stats = exe.memory_stats().map_err(|e| self.failed(e))?;
                let version = (self.choice.source == "the set-up folder").then_some(LIBTPU_VERSION);
                let meta = CompiledMeta {
                    compile_ms,
                    plugin: plugin_info(plugin, platform_name, platform_version, version),
                    tpu: Some(TpuInfo {
                        generation: generation.clone(),
                        topology: grid.clone(),
                        chips: chip_count(grid),
                        partitions: exe.num_partitions().map_err(|e| self.failed(e))? as u64,
                        hbm_bytes_per_chip: hbm_bytes(generation),
                    }),
                    generated_code_bytes: Some(exe.generated_code_bytes().map_err(|e| self.failed(e))?),
                    memory: Some(memory_info(&stats)),
                    cost: cost_info(&exe),
                    collectives,
                    origin: None,
                };
                Ok((exe.serialize().map_err(|e| self.failed(e))?, meta))
            }
            (Backend::Tpu { .. }, Target::Cpu { .. }) => {
                Err(Error::Internal(format!("a TPU backend for target {}", self.name)))
            }
        }
    }

    /// The collectives of a split program's optimized program (none for one partition).
    fn collectives(
        &self,
        program: Result<(String, Vec<u8>), PjrtError>,
    ) -> Result<BTreeMap<String, CollectiveInfo>, Error> {
        if !self.split {
            return Ok(BTreeMap::new());
        }
        let (format, bytes) = program.map_err(|e| self.failed(e))?;
        super::collectives::count(&format, &bytes)
            .map_err(|e| Error::Unsupported(format!("{}: the optimized program: {e}", self.name)))
    }

    /// The executable and its metadata from a cache entry.
    fn compiled(&self, entry: Entry, outcome: Outcome) -> Result<Compiled, Error> {
        let meta: CompiledMeta = serde_json::from_value(entry.header.meta).map_err(|e| {
            Error::Unsupported(format!("{}: cache entry {} has unreadable metadata: {e}", self.name, entry.header.key))
        })?;
        Ok(Compiled { bytes: entry.payload, meta, outcome, cache_key: entry.header.key })
    }
}

/// What the plugin says one device needs (per partition for a split program).
fn memory_info(stats: &crate::pjrt::MemoryStats) -> MemoryInfo {
    MemoryInfo {
        argument_bytes: stats.argument_size_in_bytes,
        output_bytes: stats.output_size_in_bytes,
        alias_bytes: stats.alias_size_in_bytes,
        temp_bytes: stats.temp_size_in_bytes,
        generated_code_bytes: stats.generated_code_size_in_bytes,
        peak_bytes: stats.peak_memory_in_bytes,
    }
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

/// `flops` and `bytes accessed` from XLA's cost model; `None` when the plugin does not say.
fn cost_info(exe: &crate::pjrt::Executable) -> Option<CostInfo> {
    let properties = exe.cost_analysis().ok()?;
    let figure = |name: &str| properties.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_f64());
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
