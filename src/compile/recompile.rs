//! [`recompile`]: an artifact's executables rebuilt from the StableHLO programs it stores, for
//! other targets or another plugin build (a new libtpu), without the `.pt2`.
//!
//! The programs are taken as they are (each checked against the sha256 its bucket records), so
//! everything the passes decided stays: buckets, padding, precision, the mesh. The weights
//! entry is copied unchanged (inside the kernel where it can be); the manifest is the old one
//! with the new targets. A program split over a mesh of N devices needs targets of N devices,
//! as at compile time.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::explain::Origin;
use super::{compile_programs, progress, CompileSummary, HowToCompile};
use crate::artifact::{self, Artifact, Payload, ShardingInfo, TargetEntry};
use crate::cache::{Cache, CacheConfig};
use crate::target::Target;
use crate::Error;

/// What to recompile an artifact for.
pub struct RecompileRequest {
    /// Empty: the artifact's own targets (a new plugin build for the same slices).
    pub targets: Vec<Target>,
    /// `--plugin` (the CPU plugin).
    pub plugin: Option<PathBuf>,
    /// The compile cache.
    pub cache: CacheConfig,
    /// How many executables compile at once.
    pub jobs: usize,
    /// Show a progress bar on a terminal.
    pub progress: bool,
}

/// Rebuilds the executables of the artifact at `from` for `req`'s targets into a new artifact
/// at `out` (which may be `from`: it is replaced atomically).
pub fn recompile(from: &Path, out: &Path, req: &RecompileRequest) -> Result<CompileSummary, Error> {
    let art = Artifact::open(from)?;
    let m = &art.manifest;
    let targets = if req.targets.is_empty() { own_targets(m)? } else { req.targets.clone() };
    let partitions = m.sharding.as_ref().map_or(1, |s| s.mesh.iter().map(|a| a.size).product::<i64>()) as u32;
    check_devices(&targets, partitions)?;
    let mut programs = Vec::new();
    for b in &m.buckets {
        programs.push((b.name.as_str(), art.verified(&b.program, &b.program_sha256)?));
    }
    let cache = Cache::open(&req.cache);
    let started = Instant::now();
    let origin = Origin::new(&m.options, m.sharding.as_ref().map(ShardingInfo::mesh_flag));
    let how = HowToCompile { targets: &targets, plugin: req.plugin.as_deref(), partitions, jobs: req.jobs, origin };
    let executables = compile_programs(&programs, &how, req.progress, &cache)?;
    let mut phases = vec![progress::Phase::since("compile", started, None)];
    let mut summaries = Vec::new();
    let stored = m.buckets.iter().zip(&programs).map(|(b, (_, text))| (b.program.clone(), text.to_vec()));
    let (mut entries, entries_of_targets) =
        super::executable_entries(stored, targets.len(), executables, &mut summaries)?;
    let started = Instant::now();
    let weights_bytes = carry_weights(&art, out, &mut entries)?;
    entries.extend(art.serving_entries()?);
    let mut warnings: Vec<String> = entries_of_targets.iter().flat_map(TargetEntry::hbm_overflows).collect();
    let mut manifest = m.clone();
    manifest.compiler.version = env!("CARGO_PKG_VERSION").into();
    manifest.targets = entries_of_targets;
    artifact::write(out, entries, |_| manifest)?;
    phases.push(progress::Phase::since("write", started, Some(weights_bytes)));
    warnings.extend(cache.take_warnings());
    Ok(CompileSummary {
        output: out.display().to_string(),
        artifact_bytes: std::fs::metadata(out).map(|f| f.len()).unwrap_or(0),
        buckets: m.buckets.iter().map(|b| b.name.clone()).collect(),
        targets: summaries,
        notes: Vec::new(),
        warnings,
        passes: m.buckets.first().map(|b| b.passes.clone()).unwrap_or_default(),
        weights_file: None,
        phases,
    })
}

/// The artifact's targets, parsed back from the manifest.
fn own_targets(m: &artifact::Manifest) -> Result<Vec<Target>, Error> {
    m.targets
        .iter()
        .map(|t| {
            t.target
                .parse::<Target>()
                .map_err(|e| Error::Unsupported(format!("the artifact's target `{}`: {e}", t.target)))
        })
        .collect()
}

/// Every target has the devices the programs are split over (one for a program not split,
/// which a TPU slice of any size runs on one chip).
fn check_devices(targets: &[Target], partitions: u32) -> Result<(), Error> {
    let wrong = |t: &&Target| match t {
        Target::Tpu { .. } if partitions == 1 => false,
        t => t.devices() != u64::from(partitions),
    };
    match targets.iter().find(wrong) {
        Some(t) => Err(Error::Unsupported(format!(
            "the artifact's programs are split over {partitions} device(s), but `{t}` has {}; recompile for \
             targets of {partitions} (the mesh is part of the programs: compile the `.pt2` for another mesh)",
            t.devices()
        ))),
        None => Ok(()),
    }
}

/// Puts the weights entry first, copied from the old artifact as it is; an external weights
/// file is copied beside `out` when `out` is elsewhere. The bytes written.
fn carry_weights<'a>(art: &'a Artifact, out: &Path, entries: &mut Vec<(String, Payload<'a>)>) -> Result<u64, Error> {
    let w = &art.manifest.weights;
    if let Some(from) = art.external_weights()? {
        let to = out.parent().unwrap_or(Path::new(".")).join(&w.entry);
        let same = from.canonicalize().ok().zip(to.canonicalize().ok()).is_some_and(|(a, b)| a == b);
        if same {
            return Ok(0);
        }
        std::fs::copy(&from, &to).map_err(|e| {
            Error::Unsupported(format!("cannot copy the weights `{}` to `{}`: {e}", from.display(), to.display()))
        })?;
        return Ok(w.bytes);
    }
    let range = art.zip().range(&w.entry).ok_or_else(|| {
        Error::from(artifact::ArtifactError::Corrupt { entry: w.entry.clone(), reason: "the entry is missing".into() })
    })?;
    let crc = art.zip().crc(&w.entry);
    let write: artifact::WriteEntry<'a> =
        Box::new(move |sink| sink.copy_range(art.zip().file(), range, crc).map_err(|e| e.to_string()));
    let len = w.bytes;
    entries.insert(0, (w.entry.clone(), Payload::Stream { len, digest: Some(w.digest.clone()), write }));
    Ok(len)
}
