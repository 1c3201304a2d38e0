//! The remote tier: the same self-checking entries as the local folder, as objects
//! `<prefix>/v1/<key>` in S3-compatible storage (`s3://bucket/prefix`), Google Cloud Storage
//! (`gs://bucket/prefix`) or a shared folder (`file:///path`), through `object_store`.
//!
//! Credentials and endpoints come from the standard environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`,
//! `GOOGLE_APPLICATION_CREDENTIALS`, …). Every failure or timeout is a warning and a miss:
//! the compile goes on locally. A tier that fails to answer (down, refusing, timing out) is
//! not asked again by this process: one warning, and no compile waits on it more than once. An
//! object that comes back damaged (truncated, or another key's) is a miss with a warning,
//! never served. One read or write may take `TORCHTPU_REMOTE_TIMEOUT` seconds (60 unless set),
//! retries included.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload};

use super::entry::Entry;
use super::Warnings;

/// How long one remote read or write may take, retries included, before it counts as failed,
/// unless `TORCHTPU_REMOTE_TIMEOUT` (seconds) says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The bound on one remote read or write.
fn timeout() -> Duration {
    let secs = std::env::var("TORCHTPU_REMOTE_TIMEOUT").ok().and_then(|v| v.trim().parse::<f64>().ok());
    secs.filter(|s| s.is_finite() && *s > 0.0).map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
}

/// A remote cache location.
pub(crate) struct Remote {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    runtime: tokio::runtime::Runtime,
    warnings: Warnings,
    timeout: Duration,
    /// Set by the first failure to answer: the tier is not asked again.
    down: AtomicBool,
}

/// `s3://bucket/a/b` → (`s3`, `bucket`, `a/b`).
fn split_url(url: &str) -> Result<(&str, &str, &str), String> {
    let (scheme, rest) = url.split_once("://").ok_or("expected `s3://bucket/prefix`, `gs://…` or `file:///path`")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    Ok((scheme, bucket, prefix.trim_matches('/')))
}

impl Remote {
    /// Connects lazily: nothing is sent until the first lookup.
    pub(crate) fn open(url: &str, warnings: Warnings) -> Result<Remote, String> {
        let (scheme, bucket, prefix) = split_url(url)?;
        let store: Arc<dyn ObjectStore> = match scheme {
            "s3" => {
                // A plain-http endpoint (a server on the local network) must be allowed explicitly.
                let endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT"));
                let plain_http = endpoint.is_ok_and(|e| e.starts_with("http://"));
                Arc::new(
                    object_store::aws::AmazonS3Builder::from_env()
                        .with_bucket_name(bucket)
                        .with_allow_http(plain_http)
                        .with_retry(retries())
                        .build()
                        .map_err(|e| e.to_string())?,
                )
            }
            "gs" => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retries())
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            "file" => {
                // `file:///abs/path`: the "bucket" is empty and the prefix is the path.
                let root = format!(
                    "/{}",
                    [bucket, prefix].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join("/")
                );
                std::fs::create_dir_all(&root).map_err(|e| format!("cannot create `{root}`: {e}"))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&root).map_err(|e| e.to_string())?;
                return Remote::new(url, Arc::new(fs), String::new(), warnings);
            }
            other => return Err(format!("unsupported scheme `{other}://` (use s3://, gs:// or file://)")),
        };
        Remote::new(url, store, prefix.to_string(), warnings)
    }

    fn new(url: &str, store: Arc<dyn ObjectStore>, prefix: String, warnings: Warnings) -> Result<Remote, String> {
        let (runtime, timeout) = (runtime()?, timeout());
        Ok(Remote { url: url.to_string(), store, prefix, runtime, warnings, timeout, down: AtomicBool::new(false) })
    }

    /// Warns that the tier failed to answer, once: it is not asked again by this process.
    fn failed(&self, what: String) {
        if !self.down.swap(true, Ordering::SeqCst) {
            self.warnings.push(format!("remote cache `{}`: {what}; not using it for the rest of this run", self.url));
        }
    }

    fn object(&self, key: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(format!("v1/{key}"))
        } else {
            ObjectPath::from(format!("{}/v1/{key}", self.prefix))
        }
    }

    /// The verified entry for `key`; `None` on a miss, an error or a damaged object.
    pub(crate) fn get(&self, key: &str) -> Option<Entry> {
        if self.down.load(Ordering::SeqCst) {
            return None;
        }
        let path = self.object(key);
        let fetched = self.runtime.block_on(async {
            tokio::time::timeout(self.timeout, async { self.store.get(&path).await?.bytes().await }).await
        });
        let bytes = match fetched {
            Ok(Ok(b)) => b,
            Ok(Err(object_store::Error::NotFound { .. })) => return None,
            Ok(Err(e)) => {
                self.failed(format!("cannot read {key}: {e}"));
                return None;
            }
            Err(_) => {
                self.failed(format!("reading {key} timed out after {:?}", self.timeout));
                return None;
            }
        };
        match Entry::decode(&bytes, Some(key)) {
            Ok(e) => Some(e),
            Err(why) => {
                self.warnings.push(format!("remote cache `{}`: ignoring damaged object {key} ({why})", self.url));
                None
            }
        }
    }

    /// Uploads `entry` unless the tier holds its key already.
    pub(crate) fn put_if_absent(&self, entry: &Entry) {
        if self.down.load(Ordering::SeqCst) {
            return;
        }
        let path = self.object(&entry.header.key);
        let head = self.runtime.block_on(async { tokio::time::timeout(self.timeout, self.store.head(&path)).await });
        match head {
            Ok(Ok(_)) => {}
            Ok(Err(object_store::Error::NotFound { .. })) => self.put(entry),
            Ok(Err(e)) => self.failed(format!("cannot look up {}: {e}", entry.header.key)),
            Err(_) => self.failed(format!("looking up {} timed out after {:?}", entry.header.key, self.timeout)),
        }
    }

    /// Uploads `entry` (an overwrite is harmless: equal keys hold equal programs).
    pub(crate) fn put(&self, entry: &Entry) {
        if self.down.load(Ordering::SeqCst) {
            return;
        }
        let path = self.object(&entry.header.key);
        let payload = PutPayload::from(entry.encode());
        let put =
            self.runtime.block_on(async { tokio::time::timeout(self.timeout, self.store.put(&path, payload)).await });
        match put {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.failed(format!("cannot upload {}: {e}", entry.header.key)),
            Err(_) => self.failed(format!("uploading {} timed out after {:?}", entry.header.key, self.timeout)),
        }
    }
}

/// Two quick retries: a cache that is down must not hold up the compile for minutes.
fn retries() -> object_store::RetryConfig {
    object_store::RetryConfig { max_retries: 2, retry_timeout: Duration::from_secs(10), ..Default::default() }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("cannot start I/O: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{split_url, Remote};
    use crate::cache::{Entry, KeyParts, Warnings};

    /// The `file://` tier: an entry goes up and comes back verified; a damaged object is a
    /// miss with a warning, never served.
    #[test]
    fn file_tier_round_trips_and_rejects_damage() {
        let dir = std::env::temp_dir().join(format!("torchtpu-remote-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let warnings = Warnings::default();
        let remote = Remote::open(&format!("file://{}", dir.display()), warnings.clone()).expect("opens");
        let parts = KeyParts::new(b"m", b"o", "cpu", "p", "v");
        let key = parts.key();
        assert!(remote.get(&key).is_none(), "empty tier");
        remote.put(&Entry::new(parts, serde_json::json!({}), b"exe".to_vec()));
        assert_eq!(remote.get(&key).expect("stored").payload, b"exe");
        let object = dir.join("v1").join(&key);
        let mut bytes = std::fs::read(&object).expect("object file");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&object, bytes).expect("damages it");
        assert!(remote.get(&key).is_none());
        assert!(warnings.take().iter().any(|w| w.contains("ignoring damaged object")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn urls_split_into_scheme_bucket_prefix() {
        assert_eq!(split_url("s3://b/p/q/").expect("valid"), ("s3", "b", "p/q"));
        assert_eq!(split_url("gs://b").expect("valid"), ("gs", "b", ""));
        assert_eq!(split_url("file:///tmp/x").expect("valid"), ("file", "", "tmp/x"));
        assert!(split_url("bucket").is_err());
    }
}
