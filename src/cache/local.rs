//! The local tier: one file per entry under `<dir>/v1/entries/<2 hex>/<key>`, written to a
//! temporary file in the same folder and renamed into place, with a per-key lock file
//! (`flock`, released by the kernel even when a process is killed; `gc` removes idle ones)
//! so that concurrent processes compile a key once. The modification time of an entry is its
//! last use, which least-recently-used eviction reads.
//!
//! Every failure of the cache folder (read-only, full disk) degrades to compiling without
//! caching, with one warning; a damaged entry is deleted and recompiled, never served.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::entry::{Entry, Header};
use super::Warnings;
use crate::digest::WeightsDigest;

/// The on-disk layout version: a new layout lives beside the old one.
const LAYOUT: &str = "v1";

/// Counters kept across runs in `<dir>/v1/stats.json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stats {
    /// Executables served from the local folder.
    pub hits: u64,
    /// Executables fetched from the remote tier.
    pub remote_hits: u64,
    /// Executables compiled because no tier had them.
    pub compiles: u64,
    /// Entries removed to stay under the size bound.
    pub evictions: u64,
    /// Damaged entries found and deleted.
    pub dropped: u64,
}

impl Stats {
    fn add(&mut self, d: &Stats) {
        self.hits += d.hits;
        self.remote_hits += d.remote_hits;
        self.compiles += d.compiles;
        self.evictions += d.evictions;
        self.dropped += d.dropped;
    }
}

/// One entry as `cache ls` sees it.
#[derive(Debug)]
pub(crate) struct Listed {
    pub path: PathBuf,
    pub bytes: u64,
    pub last_used: SystemTime,
    /// The header, or why it cannot be read.
    pub header: Result<Header, String>,
}

/// An exclusive lock on a file, held until dropped.
pub(crate) struct FileLock(#[allow(dead_code)] File);

impl FileLock {
    /// Waits for the lock.
    fn acquire(path: &Path) -> io::Result<FileLock> {
        let f = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
        f.lock()?;
        Ok(FileLock(f))
    }

    /// The lock if nobody holds it.
    fn try_acquire(path: &Path) -> io::Result<Option<FileLock>> {
        let f = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
        match f.try_lock() {
            Ok(()) => Ok(Some(FileLock(f))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// The local cache folder.
pub(crate) struct LocalCache {
    root: PathBuf,
    max_bytes: u64,
    /// Set after the first failed write; later writes are skipped without more warnings.
    writes_off: AtomicBool,
    /// False when the folder could not be created: nothing is read or written.
    usable: bool,
    /// Counter changes of this process, flushed by [`LocalCache::flush_stats`].
    pending: Mutex<Stats>,
    warnings: Warnings,
}

impl LocalCache {
    /// Opens (creating) the cache under `dir`; a folder that cannot be created leaves a cache
    /// that misses and never writes.
    pub(crate) fn open(dir: &Path, max_bytes: u64, warnings: Warnings) -> LocalCache {
        let mut cache = LocalCache {
            root: dir.join(LAYOUT),
            max_bytes,
            writes_off: AtomicBool::new(false),
            usable: true,
            pending: Mutex::new(Stats::default()),
            warnings,
        };
        for sub in ["entries", "locks"] {
            if let Err(e) = fs::create_dir_all(cache.root.join(sub)) {
                cache.degrade(&format!("cannot create `{}`: {e}", cache.root.join(sub).display()));
                cache.usable = false;
            }
        }
        cache
    }

    /// The folder that holds this layout.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    fn degrade(&self, why: &str) {
        if !self.writes_off.swap(true, Ordering::Relaxed) {
            self.warnings.push(format!("compile cache: {why}; compiling without caching"));
        }
    }

    fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    pub(crate) fn count_remote_hit(&self) {
        self.count(|s| s.remote_hits += 1);
    }

    pub(crate) fn count_compile(&self) {
        self.count(|s| s.compiles += 1);
    }

    fn entry_path(&self, key: &str) -> PathBuf {
        self.root.join("entries").join(&key[..2.min(key.len())]).join(key)
    }

    /// The verified entry for `key`, marked as just used; a damaged one is deleted.
    pub(crate) fn get(&self, key: &str) -> Option<Entry> {
        if !self.usable {
            return None;
        }
        let path = self.entry_path(key);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.warnings.push(format!("compile cache: cannot read `{}`: {e}", path.display()));
                return None;
            }
        };
        match Entry::decode(&bytes, Some(key)) {
            Ok(entry) => {
                touch(&path);
                self.count(|s| s.hits += 1);
                Some(entry)
            }
            Err(why) => {
                let shown = path.display();
                self.warnings.push(format!("compile cache: dropping damaged entry `{shown}` ({why}); recompiling"));
                let _ = fs::remove_file(&path);
                self.count(|s| s.dropped += 1);
                None
            }
        }
    }

    /// Waits for the lock of `key`; `None` when the lock file cannot be made (then two
    /// processes may both compile, which is only wasted work).
    pub(crate) fn lock(&self, key: &str) -> Option<FileLock> {
        if self.writes_off.load(Ordering::Relaxed) {
            return None;
        }
        FileLock::acquire(&self.root.join("locks").join(format!("{key}.lock"))).ok()
    }

    /// Stores `entry` atomically (temporary file + rename).
    pub(crate) fn put(&self, entry: &Entry) {
        if self.writes_off.load(Ordering::Relaxed) {
            return;
        }
        let path = self.entry_path(&entry.header.key);
        if let Err(e) = write_atomically(&path, &entry.encode(), pause_mid_write()) {
            self.degrade(&format!("cannot write `{}`: {e}", path.display()));
        }
    }

    /// Every file under `entries/`: (path, size, last modification, whether it is a
    /// temporary file — a write in progress or left by a killed process).
    fn files(&self) -> Vec<(PathBuf, u64, SystemTime, bool)> {
        let mut out = Vec::new();
        for shard in fs::read_dir(self.root.join("entries")).into_iter().flatten().flatten() {
            for f in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
                let Ok(meta) = f.metadata() else { continue };
                let temporary = f.file_name().to_string_lossy().starts_with('.');
                out.push((f.path(), meta.len(), meta.modified().unwrap_or(UNIX_EPOCH), temporary));
            }
        }
        out.sort();
        out
    }

    /// Number of entries and their bytes, without reading them.
    pub(crate) fn size(&self) -> (usize, u64) {
        let entries: Vec<u64> = self.files().into_iter().filter(|f| !f.3).map(|f| f.1).collect();
        (entries.len(), entries.iter().sum())
    }

    /// Every entry with its size, last use and header (each entry is read and verified).
    pub(crate) fn list(&self) -> Vec<Listed> {
        self.files()
            .into_iter()
            .filter(|f| !f.3)
            .map(|(path, bytes, last_used, _)| {
                let header =
                    fs::read(&path).map_err(|e| e.to_string()).and_then(|b| Entry::decode(&b, None).map(|e| e.header));
                Listed { path, bytes, last_used, header }
            })
            .collect()
    }

    /// Removes least-recently-used entries until the folder holds at most `max_bytes`; skips
    /// when another process is already evicting. Readers are never blocked: an entry being
    /// read stays readable through its open file after removal. Returns the entries removed.
    pub(crate) fn evict(&self, max_bytes: Option<u64>) -> u64 {
        let max = max_bytes.unwrap_or(self.max_bytes);
        let Ok(Some(_gc)) = FileLock::try_acquire(&self.root.join("gc.lock")) else {
            return 0;
        };
        let files = self.files();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        let mut entries: Vec<(SystemTime, u64, PathBuf)> =
            files.into_iter().filter(|f| !f.3).map(|(path, bytes, used, _)| (used, bytes, path)).collect();
        entries.sort();
        let mut removed = 0;
        for (_, bytes, path) in entries {
            if total <= max {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= bytes;
                removed += 1;
            }
        }
        self.count(|s| s.evictions += removed);
        removed
    }

    /// Deletes temporary files older than an hour (left by killed writers).
    pub(crate) fn remove_stale_temporaries(&self) -> u64 {
        let hour_ago = SystemTime::now() - std::time::Duration::from_secs(3600);
        let stale = self.files().into_iter().filter(|f| f.3 && f.2 < hour_ago);
        stale.filter(|f| fs::remove_file(&f.0).is_ok()).count() as u64
    }

    /// Deletes the per-key lock files nobody holds (one is left behind by every compile). A
    /// process that opened a file just before it goes may then lock a fresh one beside a
    /// waiter on the old one: at worst a key is compiled twice, never served damaged.
    pub(crate) fn remove_idle_locks(&self) -> u64 {
        let mut removed = 0;
        for f in fs::read_dir(self.root.join("locks")).into_iter().flatten().flatten() {
            if let Ok(Some(_held)) = FileLock::try_acquire(&f.path()) {
                if fs::remove_file(f.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Removes every entry, lock and counter of this layout.
    pub(crate) fn clear(&self) -> io::Result<()> {
        match fs::remove_dir_all(&self.root) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The persisted counters.
    pub(crate) fn stats(&self) -> Stats {
        fs::read(self.root.join("stats.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// Adds this process's counter changes to the persisted ones (under a lock).
    pub(crate) fn flush_stats(&self) {
        let delta = std::mem::take(&mut *self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        if delta == Stats::default() || self.writes_off.load(Ordering::Relaxed) {
            return;
        }
        let Ok(_lock) = FileLock::acquire(&self.root.join("stats.lock")) else { return };
        let mut stats = self.stats();
        stats.add(&delta);
        if let Ok(bytes) = serde_json::to_vec_pretty(&stats) {
            let _ = write_atomically(&self.root.join("stats.json"), &bytes, false);
        }
    }
}

impl Drop for LocalCache {
    fn drop(&mut self) {
        self.flush_stats();
    }
}

/// What a plugin file reported, remembered by the file's identity so that a cache hit needs
/// no plugin load (loading libtpu and hashing its 450 MB take most of a hit's time otherwise).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginMemo {
    pub sha256: String,
    pub platform_version: String,
}

/// A file's identity: path, device, inode, size, modification and change times (as git's
/// index does). Replacing or rewriting the file changes it.
fn file_identity(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = fs::canonicalize(path).ok()?;
    let m = fs::metadata(&path).ok()?;
    Some(format!(
        "{}\0{}:{}:{}:{}.{}:{}.{}",
        path.display(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

impl LocalCache {
    fn memo_path(&self, plugin: &Path, target: &str) -> Option<PathBuf> {
        let id = file_identity(plugin)?;
        let name = crate::digest::sha256_hex(format!("{id}\0{target}").as_bytes());
        Some(self.root.join("plugins").join(format!("{name}.json")))
    }

    /// What `plugin` reported for `target` when it was last loaded, if the file is unchanged.
    pub(crate) fn plugin_memo(&self, plugin: &Path, target: &str) -> Option<PluginMemo> {
        if !self.usable {
            return None;
        }
        serde_json::from_slice(&fs::read(self.memo_path(plugin, target)?).ok()?).ok()
    }

    /// Remembers what `plugin` reported for `target`.
    pub(crate) fn remember_plugin(&self, plugin: &Path, target: &str, memo: &PluginMemo) {
        if self.writes_off.load(Ordering::Relaxed) {
            return;
        }
        if let (Some(path), Ok(bytes)) = (self.memo_path(plugin, target), serde_json::to_vec(memo)) {
            let _ = write_atomically(&path, &bytes, false);
        }
    }
}

impl LocalCache {
    fn digest_path(&self, key: &str) -> PathBuf {
        self.root.join("digests").join(format!("{}.txt", crate::digest::sha256_hex(key.as_bytes())))
    }

    /// The digest remembered for `key`, if any.
    pub(crate) fn digest(&self, key: &str) -> Option<WeightsDigest> {
        if !self.usable {
            return None;
        }
        let text = fs::read_to_string(self.digest_path(key)).ok()?;
        WeightsDigest::from_memo_text(text.trim())
    }

    /// Remembers `digest` for `key`.
    pub(crate) fn remember_digest(&self, key: &str, digest: &WeightsDigest) {
        if !self.writes_off.load(Ordering::Relaxed) {
            let _ = write_atomically(&self.digest_path(key), digest.memo_text().as_bytes(), false);
        }
    }
}

/// The key of a file's content digest: its identity (see [`file_identity`]).
pub(crate) fn file_digest_key(path: &Path) -> Option<String> {
    file_identity(path).map(|id| format!("file\0{id}"))
}

/// The key of the digest of entry `entry` of the file at `path` (a weights entry verified once,
/// by `compile` or `run`): the file's identity and the entry's name.
pub(crate) fn entry_digest_key(path: &Path, entry: &str) -> Option<String> {
    file_digest_key(path).map(|k| format!("{k}\0{entry}"))
}

/// Marks a file as just used (its modification time), for LRU eviction.
fn touch(path: &Path) {
    if let Ok(f) = OpenOptions::new().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Fault injection for the kill-while-writing test: `TORCHTPU_CACHE_FAULT=pause-mid-write`
/// makes entry writes stop for a minute halfway.
fn pause_mid_write() -> bool {
    std::env::var("TORCHTPU_CACHE_FAULT").is_ok_and(|v| v == "pause-mid-write")
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`: readers see
/// the old file or the whole new one, never a part. With `pause_midway` it writes half,
/// flushes and sleeps a minute first.
fn write_atomically(path: &Path, bytes: &[u8], pause_midway: bool) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::other("no parent folder"))?;
    fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let tmp = dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
    let written = (|| {
        let mut f = File::create(&tmp)?;
        let half = if pause_midway { bytes.len() / 2 } else { bytes.len() };
        f.write_all(&bytes[..half])?;
        if pause_midway {
            f.flush()?;
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        f.write_all(&bytes[half..])?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}
