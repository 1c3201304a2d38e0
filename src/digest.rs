//! Digests as the project writes them: lowercase hex. sha256 for manifests' small entries, cache
//! keys and memos; a weights file's digest ([`WeightsDigest`]) is BLAKE3 since artifact format 2.
//! A leaf: it imports nothing of the crate.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Hex sha256 of bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Bytes as lowercase hex (how digests are written everywhere: manifests, cache keys, memos).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest a manifest gives of its weights, named by its algorithm as the manifest's key
/// (`"blake3": "…"`): sha256 in artifact format 1, BLAKE3 (about 4× faster than sha256 on one
/// core, so that hashing gigabytes of weights keeps up with writing and loading them) since
/// format 2.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightsDigest {
    /// Hex sha256 (artifact format 1).
    Sha256(String),
    /// Hex BLAKE3 (format 2).
    Blake3(String),
}

impl WeightsDigest {
    /// The hex digest.
    pub fn hex(&self) -> &str {
        match self {
            WeightsDigest::Sha256(h) | WeightsDigest::Blake3(h) => h,
        }
    }

    /// The algorithm's name.
    pub fn algorithm(&self) -> &'static str {
        match self {
            WeightsDigest::Sha256(_) => "sha256",
            WeightsDigest::Blake3(_) => "BLAKE3",
        }
    }

    /// A hasher of the same algorithm.
    pub(crate) fn hasher(&self) -> Hasher {
        match self {
            WeightsDigest::Sha256(_) => Hasher::Sha256(Sha256::new()),
            WeightsDigest::Blake3(_) => Hasher::blake3(),
        }
    }

    /// As a digest memo stores it: the hex of a sha256 (as memos always held), `blake3:` and
    /// the hex of a BLAKE3.
    pub(crate) fn memo_text(&self) -> String {
        match self {
            WeightsDigest::Sha256(h) => h.clone(),
            WeightsDigest::Blake3(h) => format!("blake3:{h}"),
        }
    }

    /// Read back from [`WeightsDigest::memo_text`]; `None` for anything else.
    pub(crate) fn from_memo_text(text: &str) -> Option<WeightsDigest> {
        let is_hex = |h: &str| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit());
        match text.strip_prefix("blake3:") {
            Some(h) => is_hex(h).then(|| WeightsDigest::Blake3(h.to_string())),
            None => is_hex(text).then(|| WeightsDigest::Sha256(text.to_string())),
        }
    }
}

impl std::fmt::Display for WeightsDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.algorithm(), self.hex())
    }
}

/// A running [`WeightsDigest`].
pub(crate) enum Hasher {
    Sha256(Sha256),
    Blake3(Box<blake3::Hasher>),
}

impl Hasher {
    /// What new weights are hashed with.
    pub(crate) fn blake3() -> Hasher {
        Hasher::Blake3(Box::new(blake3::Hasher::new()))
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Blake3(h) => {
                h.update(bytes);
            }
        }
    }

    pub(crate) fn finish(self) -> WeightsDigest {
        match self {
            Hasher::Sha256(h) => WeightsDigest::Sha256(hex(&h.finalize())),
            Hasher::Blake3(h) => WeightsDigest::Blake3(h.finalize().to_hex().to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BLAKE3's published vector for the empty input, and the memo text read back.
    #[test]
    fn blake3_of_nothing_and_memo_text_round_trip() {
        let d = Hasher::blake3().finish();
        assert_eq!(d.hex(), "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
        assert_eq!(WeightsDigest::from_memo_text(&d.memo_text()), Some(d.clone()));
        let s = WeightsDigest::Sha256(sha256_hex(b""));
        assert_eq!(WeightsDigest::from_memo_text(&s.memo_text()), Some(s));
        assert_eq!(WeightsDigest::from_memo_text("blake3:xyz"), None);
    }
}
