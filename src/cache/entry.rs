//! The bytes of one cache entry: a magic, a JSON header (key, key parts, payload length and
//! sha256, what the manifest records about the executable) and the serialized executable.
//! Entries are self-checking: a reader verifies the key, the length and the checksum before it
//! hands out a byte.

use serde::{Deserialize, Serialize};

use super::key::KeyParts;
use crate::digest::sha256_hex;

const MAGIC: &[u8; 8] = b"TTPUCE01";

/// The header of an entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    pub key: String,
    pub parts: KeyParts,
    pub payload_bytes: u64,
    pub payload_sha256: String,
    /// What the compile recorded about the executable (compile time, plugin, memory stats).
    pub meta: serde_json::Value,
}

/// A verified entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub header: Header,
    pub payload: Vec<u8>,
}

impl Entry {
    pub fn new(parts: KeyParts, meta: serde_json::Value, payload: Vec<u8>) -> Entry {
        let header = Header {
            key: parts.key(),
            parts,
            payload_bytes: payload.len() as u64,
            payload_sha256: sha256_hex(&payload),
            meta,
        };
        Entry { header, payload }
    }

    pub fn encode(&self) -> Vec<u8> {
        let header = serde_json::to_vec(&self.header).unwrap_or_default();
        let mut out = Vec::with_capacity(MAGIC.len() + 8 + header.len() + self.payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.payload);
        out
    }

    /// Parses and verifies `bytes`; `key`, when given, must be the entry's key.
    pub fn decode(bytes: &[u8], key: Option<&str>) -> Result<Entry, String> {
        let rest = bytes.strip_prefix(MAGIC).ok_or("not a cache entry (bad magic)")?;
        let (len, rest) = rest.split_first_chunk::<8>().ok_or("truncated header")?;
        let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| "header length overflows")?;
        if rest.len() < len {
            return Err("truncated header".into());
        }
        let (header, payload) = rest.split_at(len);
        let header: Header = serde_json::from_slice(header).map_err(|e| format!("unreadable header: {e}"))?;
        if let Some(k) = key.filter(|k| *k != header.key) {
            return Err(format!("holds key {} where {k} was expected", header.key));
        }
        if header.parts.key() != header.key {
            return Err("its key does not match its key parts".into());
        }
        if payload.len() as u64 != header.payload_bytes {
            return Err(format!("payload has {} bytes, header says {}", payload.len(), header.payload_bytes));
        }
        if sha256_hex(payload) != header.payload_sha256 {
            return Err("payload checksum mismatch".into());
        }
        Ok(Entry { header, payload: payload.to_vec() })
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, KeyParts};

    #[test]
    fn round_trips_and_rejects_damage() {
        let parts = KeyParts::new(b"m", b"o", "cpu", "p", "v");
        let e = Entry::new(parts.clone(), serde_json::json!({"compile_ms": 5}), b"executable".to_vec());
        let bytes = e.encode();
        let back = Entry::decode(&bytes, Some(&parts.key())).expect("decodes");
        assert_eq!(back.payload, b"executable");
        assert_eq!(back.header.meta["compile_ms"], 5);
        assert!(Entry::decode(&bytes[..bytes.len() - 1], None).unwrap_err().contains("payload has"));
        let mut flipped = bytes.clone();
        *flipped.last_mut().expect("nonempty") ^= 1;
        assert!(Entry::decode(&flipped, None).unwrap_err().contains("checksum"));
        assert!(Entry::decode(&bytes, Some("other")).unwrap_err().contains("where other was expected"));
        assert!(Entry::decode(b"garbage", None).is_err());
        assert!(Entry::decode(&bytes[..12], None).is_err());
    }
}
