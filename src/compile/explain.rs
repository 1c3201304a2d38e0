//! `cache explain`: why a compile would miss the cache. Each (bucket, target) of the compile
//! is lowered and keyed as `compile` would key it; a key the cache holds is a hit, and for a
//! miss the nearest entries (the most key parts in common) are named with the parts that
//! differ, in words: the program (and, from what the entry recorded of its making, the options
//! that shaped it), the compile options and XLA's environment variables, the target, the
//! plugin build.
//!
//! What shaped an entry's program is recorded in its metadata ([`Origin`]) when it is
//! compiled; entries written before that say only which hash differs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{in_parallel, lower_bucket, manifest, CompileRequest, TargetCompiler};
use crate::artifact::OptionsInfo;
use crate::cache::{Cache, KeyParts};
use crate::import::Program;
use crate::Error;

/// What made an executable, kept in its cache entry to explain misses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Origin {
    /// The options that shaped the program (`precision`, `passes`, `mesh`, …), as text.
    pub shaping: BTreeMap<String, String>,
    /// `XLA_FLAGS` and `LIBTPU_INIT_ARGS` as the compile saw them.
    pub environment: BTreeMap<String, String>,
}

impl Origin {
    /// The origin of programs shaped by `options` over `mesh`, compiled in this process's
    /// environment.
    pub(crate) fn new(options: &OptionsInfo, mesh: Option<String>) -> Origin {
        let mut shaping = BTreeMap::new();
        if let Ok(serde_json::Value::Object(map)) = serde_json::to_value(options) {
            for (k, v) in map {
                shaping.insert(k, v.as_str().map_or_else(|| v.to_string(), str::to_string));
            }
        }
        shaping.insert("mesh".into(), mesh.unwrap_or_else(|| "none".into()));
        let environment = ["XLA_FLAGS", "LIBTPU_INIT_ARGS"]
            .iter()
            .map(|n| (n.to_string(), std::env::var(n).unwrap_or_default()))
            .collect();
        Origin { shaping, environment }
    }

    /// The origin of `req`'s programs.
    pub(crate) fn of_request(req: &CompileRequest) -> Origin {
        let mesh = req.pass_options.mesh.as_ref().map(torchtpu_passes::ir::Mesh::flag_text);
        Origin::new(&manifest::options_info(req, req.passes.clone()), mesh)
    }
}

/// One executable a compile would need: a hit, or a miss with the nearest entries.
#[derive(Debug, Serialize)]
pub(crate) struct Explained {
    pub(crate) target: String,
    pub(crate) bucket: String,
    pub(crate) key: String,
    /// The cache holds the key.
    pub(crate) hit: bool,
    /// For a miss: the entries with the most key parts in common, each with what differs.
    pub(crate) nearest: Vec<Nearest>,
}

/// A cache entry near a missed key.
#[derive(Debug, Serialize)]
pub(crate) struct Nearest {
    pub(crate) key: String,
    pub(crate) target: String,
    /// What differs, in words.
    pub(crate) differs: Vec<String>,
}

/// How many entries a miss lists.
const NEAREST: usize = 3;

/// Every (bucket, target) of compiling `program` for `req`, looked up in `req`'s cache.
pub(crate) fn explain_cache(program: &Program, req: &CompileRequest) -> Result<Vec<Explained>, Error> {
    let planned = crate::buckets::plan(program, &req.buckets)?.buckets;
    let buckets = in_parallel(&planned, req.jobs, |p| lower_bucket(program, p, req))?;
    let cache = Cache::open(&req.cache);
    let entries: Vec<(KeyParts, Option<Origin>)> = cache
        .entries()
        .into_iter()
        .map(|(parts, meta)| (parts, meta.get("origin").and_then(|o| serde_json::from_value(o.clone()).ok())))
        .collect();
    let partitions = req.pass_options.mesh.as_ref().map_or(1, |m| m.devices() as u32);
    let ours = Origin::of_request(req);
    let mut out = Vec::new();
    for t in &req.targets {
        let compiler = TargetCompiler::new(t, req.plugin.as_deref(), partitions)?;
        for b in &buckets {
            let parts = compiler.key_parts(b.lowered.module.text.as_bytes(), &cache)?;
            let key = parts.key();
            let hit = entries.iter().any(|(p, _)| p.key() == key);
            let nearest = if hit { Vec::new() } else { nearest(&parts, &ours, &entries) };
            out.push(Explained { target: t.to_string(), bucket: b.planned.name.clone(), key, hit, nearest });
        }
    }
    Ok(out)
}

/// The entries sharing the most key parts with `parts`, with what differs.
fn nearest(parts: &KeyParts, ours: &Origin, entries: &[(KeyParts, Option<Origin>)]) -> Vec<Nearest> {
    let mut scored: Vec<(usize, &KeyParts, Option<&Origin>)> =
        entries.iter().map(|(p, o)| (differences(parts, p).len(), p, o.as_ref())).collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.target.cmp(&b.1.target)));
    scored
        .into_iter()
        .take(NEAREST)
        .map(|(_, p, origin)| {
            let mut differs = differences(parts, p);
            if let Some(o) = origin {
                differs.extend(changed("", &o.shaping, &ours.shaping));
                differs.extend(changed("environment ", &o.environment, &ours.environment));
            }
            Nearest { key: p.key(), target: p.target.clone(), differs }
        })
        .collect()
}

/// The key parts of `entry` that differ from `ours`, in words.
fn differences(ours: &KeyParts, entry: &KeyParts) -> Vec<String> {
    let mut out = Vec::new();
    if ours.format != entry.format {
        out.push(format!("cache format: `{}`, now `{}`", entry.format, ours.format));
    }
    if ours.target != entry.target {
        out.push(format!("target: `{}`, now `{}`", entry.target, ours.target));
    }
    if ours.program_sha256 != entry.program_sha256 {
        out.push("the program (StableHLO): the archive or the options that shape it differ".into());
    }
    if ours.options_sha256 != entry.options_sha256 {
        out.push("XLA's compile options or environment (XLA_FLAGS, LIBTPU_INIT_ARGS)".into());
    }
    if ours.plugin_sha256 != entry.plugin_sha256 {
        out.push(format!("plugin build: sha256 {}, now {}", short(&entry.plugin_sha256), short(&ours.plugin_sha256)));
    }
    if ours.platform_version != entry.platform_version {
        out.push(format!("platform version: `{}`, now `{}`", entry.platform_version, ours.platform_version));
    }
    out
}

/// `what: was, now is` for every key whose value differs between `then` and `now`.
fn changed(what: &str, then: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    let none = String::from("(none)");
    let keys: std::collections::BTreeSet<&String> = then.keys().chain(now.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (then.get(k).unwrap_or(&none), now.get(k).unwrap_or(&none));
            (a != b).then(|| format!("{what}{k}: `{a}`, now `{b}`"))
        })
        .collect()
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}
