//! Digests as the project writes them: lowercase hex, sha256 (manifests, cache keys, memos).
//! A leaf: it imports nothing of the crate.

use sha2::{Digest, Sha256};

/// Hex sha256 of bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Bytes as lowercase hex (how digests are written everywhere: manifests, cache keys, memos).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
