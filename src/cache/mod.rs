//! The compile cache: content-addressed executables, so that a repeated compile is a file read.
//!
//! A key ([`KeyParts::key`]) is a sha256 over the cache format, the exact StableHLO, the
//! serialized compile options, the target and the plugin's sha256 and platform version: an
//! executable is never served to another plugin build. Lookups go local folder → remote tier
//! (read-through) → compile, and a compile is written to both (write-back). Between the local
//! miss and the compile, a per-key lock makes concurrent processes compile a key once; the
//! others wait and read it. Every tier problem (read-only or full folder, unreachable
//! server) degrades to compiling, with a warning; a damaged entry is never served.

mod entry;
mod key;
mod local;
pub(crate) mod maintain;
pub(crate) mod remote;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::digest::WeightsDigest;
use serde::Serialize;

pub(crate) use entry::Entry;
pub(crate) use key::KeyParts;
pub(crate) use local::{entry_digest_key, file_digest_key, Listed, LocalCache, PluginMemo};
pub(crate) use remote::Remote;

/// Default size bound of the local folder: 10 GiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 10 << 30;

/// Warnings collected while the cache works, for the caller to print (stderr, or the JSON
/// summary): the cache never writes to the terminal itself.
#[derive(Clone, Debug, Default)]
pub(crate) struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn push(&self, message: String) {
        self.list().push(message);
    }

    /// The warnings so far, leaving none.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.list())
    }
}

/// The default folder: `$TORCHTPU_CACHE_DIR`, else `$XDG_CACHE_HOME/torchtpu-compile`, else
/// `~/.cache/torchtpu-compile` (entries live in its `v1/` subfolder).
pub fn default_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("TORCHTPU_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("torchtpu-compile")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/torchtpu-compile")))
}

/// Where and how to cache.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The local folder; `None` turns caching off (`--no-cache`).
    pub dir: Option<PathBuf>,
    /// Size bound of the local folder.
    pub max_bytes: u64,
    /// `s3://bucket/prefix`, `gs://…` or `file://…`.
    pub remote: Option<String>,
    /// A local hit is also put into the remote tier when the tier lacks it: a compile into the
    /// cache (`--cache-only`) then leaves every executable it was asked for in the shared tier.
    pub publish_hits: bool,
}

impl CacheConfig {
    /// No caching at all.
    pub fn off() -> CacheConfig {
        CacheConfig { dir: None, max_bytes: DEFAULT_MAX_BYTES, remote: None, publish_hits: false }
    }
}

/// Where an executable came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Read from the local folder.
    Hit,
    /// Fetched from the remote tier.
    RemoteHit,
    /// Compiled (and stored).
    Compiled,
    /// Compiled with caching off.
    Uncached,
}

impl Outcome {
    pub fn describe(self) -> &'static str {
        match self {
            Outcome::Hit => "cache hit",
            Outcome::RemoteHit => "remote cache hit",
            Outcome::Compiled => "compiled",
            Outcome::Uncached => "compiled (cache off)",
        }
    }
}

/// The tiers of one compile run.
pub struct Cache {
    local: Option<LocalCache>,
    remote: Option<Remote>,
    publish_hits: bool,
    warnings: Warnings,
    /// Entries were added to the local folder since it was opened (see [`Cache::trim`]).
    grown: std::sync::atomic::AtomicBool,
}

impl Cache {
    /// Opens the tiers; a remote URL that cannot be used is a warning, not an error.
    pub fn open(cfg: &CacheConfig) -> Cache {
        let warnings = Warnings::default();
        let local = cfg.dir.as_ref().map(|d| LocalCache::open(d, cfg.max_bytes, warnings.clone()));
        let remote = match (&local, &cfg.remote) {
            (Some(_), Some(url)) => match Remote::open(url, warnings.clone()) {
                Ok(r) => Some(r),
                Err(e) => {
                    warnings.push(format!("remote cache `{url}`: {e}; using the local cache only"));
                    None
                }
            },
            (None, Some(_)) => {
                warnings.push("--remote-cache needs the local cache, which is off; not using it".into());
                None
            }
            _ => None,
        };
        Cache { local, remote, publish_hits: cfg.publish_hits, warnings, grown: Default::default() }
    }

    /// Every readable entry of the local folder: its key parts and what its compile recorded.
    pub fn entries(&self) -> Vec<(KeyParts, serde_json::Value)> {
        let Some(local) = &self.local else { return Vec::new() };
        local.list().into_iter().filter_map(|l| l.header.ok()).map(|h| (h.parts, h.meta)).collect()
    }

    /// What `plugin` reported for `target` when it was last loaded, if the file is unchanged.
    pub fn plugin_memo(&self, plugin: &Path, target: &str) -> Option<PluginMemo> {
        self.local.as_ref()?.plugin_memo(plugin, target)
    }

    /// The warnings so far (each said once), leaving none.
    pub fn take_warnings(&self) -> Vec<String> {
        let mut w = self.warnings.take();
        w.dedup();
        w
    }

    /// The executable for (`program`, `options`, `target`) without loading the plugin: possible
    /// when this plugin file (unchanged) was loaded before, so that its sha256 and platform
    /// version are known, and a tier holds the key. `None` means: load the plugin and call
    /// [`Cache::get_or_compile`].
    pub fn get_without_plugin(
        &self,
        plugin: &Path,
        target: &str,
        (program, options): (&[u8], &[u8]),
    ) -> Option<(Entry, Outcome)> {
        let local = self.local.as_ref()?;
        let memo = local.plugin_memo(plugin, target)?;
        let parts = KeyParts::new(program, options, target, &memo.sha256, &memo.platform_version);
        let key = parts.key();
        if let Some(e) = local.get(&key) {
            return Some(self.local_hit(e));
        }
        self.fetch_remote(local, &key).map(|e| (e, Outcome::RemoteHit))
    }

    /// A local hit, put into the remote tier first when it should be published there.
    fn local_hit(&self, entry: Entry) -> (Entry, Outcome) {
        if let (true, Some(r)) = (self.publish_hits, &self.remote) {
            r.put_if_absent(&entry);
        }
        (entry, Outcome::Hit)
    }

    /// The entry from the remote tier, stored locally on the way.
    fn fetch_remote(&self, local: &LocalCache, key: &str) -> Option<Entry> {
        let e = self.remote.as_ref()?.get(key)?;
        self.put_local(local, &e);
        local.count_remote_hit();
        Some(e)
    }

    /// True when the file at `path` was read whole and hashed by an earlier compile and has not
    /// changed since (same identity): its bytes need no second check.
    pub fn remembers_file(&self, path: &Path) -> bool {
        self.remembered_file_digest(path).is_some()
    }

    /// The BLAKE3 of the file at `path` when an earlier compile hashed it and it has not changed
    /// since (same identity: path, inode, size, times, as for plugins). A sha256 remembered by
    /// an older compiler is not it.
    pub fn remembered_file_digest(&self, path: &Path) -> Option<String> {
        match self.known_digest(&local::file_digest_key(path)?)? {
            WeightsDigest::Blake3(hex) => Some(hex),
            WeightsDigest::Sha256(_) => None,
        }
    }

    /// Remembers the BLAKE3 `digest` for the file at `path` as it is now.
    pub fn remember_file_digest(&self, path: &Path, digest: &str) {
        if let Some(key) = local::file_digest_key(path) {
            self.remember_digest(&key, &WeightsDigest::Blake3(digest.to_string()));
        }
    }

    /// The digest remembered for content that `key` determines (a file's identity, or for a
    /// weight entry the source's sha256, the compiler's version and the entry's plan).
    pub(crate) fn known_digest(&self, key: &str) -> Option<WeightsDigest> {
        self.local.as_ref()?.digest(key)
    }

    /// Remembers `digest` for `key` (see [`Cache::known_digest`]).
    pub(crate) fn remember_digest(&self, key: &str, digest: &WeightsDigest) {
        if let Some(l) = &self.local {
            l.remember_digest(key, digest);
        }
    }

    /// Records what a loaded plugin reported, for [`Cache::get_without_plugin`].
    pub fn remember_plugin(&self, plugin: &Path, target: &str, memo: &PluginMemo) {
        if let Some(local) = &self.local {
            local.remember_plugin(plugin, target, memo);
        }
    }

    /// The executable and its metadata for `parts`, from the first tier that has it, else
    /// from `compile` (then stored in every tier).
    pub fn get_or_compile<E>(
        &self,
        parts: &KeyParts,
        compile: impl FnOnce() -> Result<(Vec<u8>, serde_json::Value), E>,
    ) -> Result<(Entry, Outcome), E> {
        let Some(local) = &self.local else {
            let (payload, meta) = compile()?;
            return Ok((Entry::new(parts.clone(), meta, payload), Outcome::Uncached));
        };
        let key = parts.key();
        if let Some(e) = local.get(&key) {
            return Ok(self.local_hit(e));
        }
        let lock = local.lock(&key);
        // Another process may have compiled it while this one waited for the lock.
        if let Some(e) = local.get(&key) {
            return Ok(self.local_hit(e));
        }
        if let Some(e) = self.fetch_remote(local, &key) {
            return Ok((e, Outcome::RemoteHit));
        }
        let (payload, meta) = compile()?;
        local.count_compile();
        let entry = Entry::new(parts.clone(), meta, payload);
        self.put_local(local, &entry);
        drop(lock);
        if let Some(r) = &self.remote {
            r.put(&entry);
        }
        Ok((entry, Outcome::Compiled))
    }

    fn put_local(&self, local: &LocalCache, entry: &Entry) {
        local.put(entry);
        self.grown.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Evicts least-recently-used entries beyond the size bound, once the executables of a
    /// compile are stored (one walk of the folder per compile, not per executable); nothing
    /// to do when every executable was a hit.
    pub fn trim(&self) {
        if let (Some(local), true) = (&self.local, self.grown.load(std::sync::atomic::Ordering::Relaxed)) {
            local.evict(None);
        }
    }
}
