//! The remote tier: the same self-checking entries as the local folder, as objects
//! `<prefix>/v1/<key>` in S3-compatible storage (`s3://bucket/prefix`), Google Cloud Storage
//! (`gs://bucket/prefix`) or a shared folder (`file:///path`), through `object_store`.
//!
//! Credentials and endpoints come from the standard environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`,
//! `GOOGLE_APPLICATION_CREDENTIALS`, …). Every failure or timeout is a warning and a miss:
//! the compile goes on locally.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload};

use super::entry::Entry;
use super::Warnings;

/// How long one remote read or write may take before it counts as failed.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A remote cache location.
pub(crate) struct Remote {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    runtime: tokio::runtime::Runtime,
    warnings: Warnings,
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
                return Ok(Remote {
                    url: url.to_string(),
                    store: Arc::new(fs),
                    prefix: String::new(),
                    runtime: runtime()?,
                    warnings,
                });
            }
            other => return Err(format!("unsupported scheme `{other}://` (use s3://, gs:// or file://)")),
        };
        Ok(Remote { url: url.to_string(), store, prefix: prefix.to_string(), runtime: runtime()?, warnings })
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
        let path = self.object(key);
        let fetched = self.runtime.block_on(async {
            tokio::time::timeout(TIMEOUT, async { self.store.get(&path).await?.bytes().await }).await
        });
        let bytes = match fetched {
            Ok(Ok(b)) => b,
            Ok(Err(object_store::Error::NotFound { .. })) => return None,
            Ok(Err(e)) => {
                self.warnings.push(format!("remote cache `{}`: cannot read {key}: {e}", self.url));
                return None;
            }
            Err(_) => {
                self.warnings.push(format!("remote cache `{}`: reading {key} timed out after {TIMEOUT:?}", self.url));
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

    /// Uploads `entry` (an overwrite is harmless: equal keys hold equal programs).
    pub(crate) fn put(&self, entry: &Entry) {
        let path = self.object(&entry.header.key);
        let payload = PutPayload::from(entry.encode());
        let put = self.runtime.block_on(async { tokio::time::timeout(TIMEOUT, self.store.put(&path, payload)).await });
        match put {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                self.warnings.push(format!("remote cache `{}`: cannot upload {}: {e}", self.url, entry.header.key))
            }
            Err(_) => self.warnings.push(format!("remote cache `{}`: upload timed out after {TIMEOUT:?}", self.url)),
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
