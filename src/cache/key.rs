//! Cache keys: a sha256 over everything that decides the executable's bytes.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::digest::sha256_hex;

/// Version of the key derivation and of the entry layout; bumping it misses every old entry.
pub(crate) const CACHE_FORMAT: &str = "torchtpu-cache/1";

/// What a key is made of, kept in each entry so that `cache ls` can say why two keys differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyParts {
    pub format: String,
    /// sha256 of the exact StableHLO text handed to the compiler.
    pub program_sha256: String,
    /// sha256 of the serialized `xla.CompileOptionsProto` and of the XLA environment variables
    /// in effect (`XLA_FLAGS`, `LIBTPU_INIT_ARGS`).
    pub options_sha256: String,
    /// `cpu` or `tpu:<generation>:<topology>`.
    pub target: String,
    /// sha256 of the plugin file: executables never cross plugin builds.
    pub plugin_sha256: String,
    /// The compiler's platform version as the plugin reports it.
    pub platform_version: String,
}

impl KeyParts {
    pub fn new(program: &[u8], options: &[u8], target: &str, plugin_sha256: &str, platform_version: &str) -> Self {
        KeyParts {
            format: CACHE_FORMAT.to_string(),
            program_sha256: sha256_hex(program),
            options_sha256: sha256_hex(options),
            target: target.to_string(),
            plugin_sha256: plugin_sha256.to_string(),
            platform_version: platform_version.to_string(),
        }
    }

    /// The key: sha256 over the parts, each length-prefixed so that no two part lists collide.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            &self.format,
            &self.program_sha256,
            &self.options_sha256,
            &self.target,
            &self.plugin_sha256,
            &self.platform_version,
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        format!("{:x}", h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::KeyParts;

    #[test]
    fn every_part_changes_the_key() {
        let base = KeyParts::new(b"module", b"\x1a\x04", "cpu", "abc", "v1");
        let variants = [
            KeyParts::new(b"module ", b"\x1a\x04", "cpu", "abc", "v1"),
            KeyParts::new(b"module", b"\x1a\x05", "cpu", "abc", "v1"),
            KeyParts::new(b"module", b"\x1a\x04", "tpu:v6e:1x1", "abc", "v1"),
            KeyParts::new(b"module", b"\x1a\x04", "cpu", "abd", "v1"),
            KeyParts::new(b"module", b"\x1a\x04", "cpu", "abc", "v2"),
        ];
        for v in &variants {
            assert_ne!(v.key(), base.key(), "{v:?}");
        }
        assert_eq!(base.key(), KeyParts::new(b"module", b"\x1a\x04", "cpu", "abc", "v1").key());
        assert_eq!(base.key().len(), 64);
    }
}
