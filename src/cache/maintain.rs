//! `torchtpu-compile cache stats|ls|verify|gc|clear`: reports on the local folder, as text
//! and as JSON.

use std::fmt::Write;
use std::path::Path;
use std::time::SystemTime;

use serde_json::json;

use super::{Listed, LocalCache, Warnings};

/// What a maintenance command prints and whether it found the cache healthy.
pub(crate) struct Report {
    pub text: String,
    pub json: serde_json::Value,
    pub ok: bool,
    /// Problems met on the way (e.g. an unreadable folder).
    pub warnings: Vec<String>,
}

/// The local folder and the sink for its warnings.
fn open(dir: &Path, max_bytes: u64) -> (LocalCache, Warnings) {
    let warnings = Warnings::default();
    (LocalCache::open(dir, max_bytes, warnings.clone()), warnings)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

fn age(t: SystemTime) -> String {
    let s = SystemTime::now().duration_since(t).map(|d| d.as_secs()).unwrap_or(0);
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

pub(crate) fn stats(dir: &Path) -> Report {
    let (cache, warnings) = open(dir, super::DEFAULT_MAX_BYTES);
    let (entries, bytes) = cache.size();
    let s = cache.stats();
    let text = format!(
        "cache {}\nentries: {entries} ({})\nhits: {}, remote hits: {}, compiles: {}, evictions: {}, damaged entries dropped: {}\n",
        cache.root().display(),
        mib(bytes),
        s.hits,
        s.remote_hits,
        s.compiles,
        s.evictions,
        s.dropped
    );
    let json = json!({"dir": cache.root(), "entries": entries, "bytes": bytes, "counters": s});
    Report { text, json, ok: true, warnings: warnings.take() }
}

fn describe(l: &Listed) -> serde_json::Value {
    match &l.header {
        Ok(h) => json!({
            "key": h.key, "bytes": l.bytes, "last_used_unix_ms": l.last_used.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            "parts": h.parts, "compile_ms": h.meta.get("compile_ms"),
        }),
        Err(e) => json!({"path": l.path, "bytes": l.bytes, "damaged": e}),
    }
}

pub(crate) fn ls(dir: &Path) -> Report {
    let (cache, warnings) = open(dir, super::DEFAULT_MAX_BYTES);
    let listed = cache.list();
    let mut text = String::new();
    for l in &listed {
        match &l.header {
            Ok(h) => {
                let _ = writeln!(
                    text,
                    "{}  {:>10}  {:<14}  {:<16} program {}  plugin {}  platform {:?}  compiled in {} ms",
                    &h.key[..16],
                    mib(l.bytes),
                    age(l.last_used),
                    h.parts.target,
                    &h.parts.program_sha256[..12],
                    &h.parts.plugin_sha256[..12.min(h.parts.plugin_sha256.len())],
                    h.parts.platform_version,
                    h.meta.get("compile_ms").and_then(serde_json::Value::as_u64).unwrap_or(0)
                );
            }
            Err(e) => {
                let _ = writeln!(text, "{}  DAMAGED: {e}", l.path.display());
            }
        }
    }
    let _ = writeln!(text, "{} entries", listed.len());
    let json = json!({"entries": listed.iter().map(describe).collect::<Vec<_>>()});
    Report { text, json, ok: true, warnings: warnings.take() }
}

/// Reads every entry in full and checks its checksum; damaged entries are deleted (a compile
/// would have replaced them anyway). Not ok when any was found.
pub(crate) fn verify(dir: &Path) -> Report {
    let (cache, warnings) = open(dir, super::DEFAULT_MAX_BYTES);
    let listed = cache.list();
    let mut damaged = Vec::new();
    for l in &listed {
        if let Err(e) = &l.header {
            let _ = std::fs::remove_file(&l.path);
            damaged.push(json!({"path": l.path, "reason": e}));
        }
    }
    let mut text = format!("{} entries checked, {} damaged", listed.len(), damaged.len());
    for d in &damaged {
        let _ =
            write!(text, "\n  removed {}: {}", d["path"].as_str().unwrap_or(""), d["reason"].as_str().unwrap_or(""));
    }
    text.push('\n');
    let ok = damaged.is_empty();
    Report { text, json: json!({"checked": listed.len(), "damaged": damaged}), ok, warnings: warnings.take() }
}

pub(crate) fn gc(dir: &Path, max_bytes: u64) -> Report {
    let (cache, warnings) = open(dir, max_bytes);
    let evicted = cache.evict(Some(max_bytes));
    let temporaries = cache.remove_stale_temporaries();
    let locks = cache.remove_idle_locks();
    let (entries, bytes) = cache.size();
    let text = format!(
        "evicted {evicted} entries, removed {temporaries} stale temporary files and {locks} idle lock files; {} entries ({}) remain, limit {}\n",
        entries,
        mib(bytes),
        mib(max_bytes)
    );
    let json = json!({
        "evicted": evicted, "temporaries_removed": temporaries, "locks_removed": locks, "entries": entries, "bytes": bytes
    });
    Report { text, json, ok: true, warnings: warnings.take() }
}

pub(crate) fn clear(dir: &Path) -> anyhow::Result<Report> {
    let (cache, warnings) = open(dir, super::DEFAULT_MAX_BYTES);
    let (entries, _) = cache.size();
    cache.clear().map_err(|e| anyhow::anyhow!("cannot clear `{}`: {e}", cache.root().display()))?;
    Ok(Report {
        text: format!("removed {entries} entries from {}\n", cache.root().display()),
        json: json!({"removed": entries}),
        ok: true,
        warnings: warnings.take(),
    })
}
