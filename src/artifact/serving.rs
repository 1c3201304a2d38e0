//! The files a server reads beside the model — its tokenizer, chat template and generation
//! config — stored in the artifact at compile time (`compile --tokenizer DIR`), so that
//! `serve model.tpuexe` needs nothing beside it. Each is an entry `serving/<name>` with its
//! sha256 in the manifest; files named on `serve`'s command line override them one by one.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Artifact, ArtifactError, Payload};
use crate::digest::sha256_hex;
use crate::Error;

/// The files taken from a model folder, in this order; the first must be there.
pub(crate) const FILES: [&str; 4] =
    ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"];

/// The largest file taken (a real `tokenizer.json` is a few MiB; Gemma's is 33 MiB).
const MAX_BYTES: u64 = 256 << 20;

/// One stored file, as the manifest records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServingFile {
    /// Its name in the model folder (`tokenizer.json`).
    pub name: String,
    /// The artifact entry that holds it.
    pub entry: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The files of [`FILES`] found in `dir` (a model folder, or the `tokenizer.json` in one), with
/// their bytes; `tokenizer.json` must be one of them and be a tokenizer, and the JSON files
/// must be JSON, so that a wrong folder fails the compile and not the first request.
pub(crate) fn read_folder(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let dir = if dir.is_file() { dir.parent().unwrap_or(Path::new(".")) } else { dir };
    let bad = |reason: String| Error::bad_input(format!("`--tokenizer {}`: {reason}", dir.display()));
    let mut found = Vec::new();
    for name in FILES {
        let path = dir.join(name);
        let size = match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => m.len(),
            _ if name == FILES[0] => return Err(bad(format!("the folder has no `{name}`"))),
            _ => continue,
        };
        if size > MAX_BYTES {
            return Err(bad(format!("`{name}` is {size} bytes, more than the {MAX_BYTES} taken")));
        }
        let bytes = std::fs::read(&path).map_err(|e| bad(format!("cannot read `{name}`: {e}")))?;
        check(name, &bytes).map_err(|reason| bad(format!("`{name}` {reason}")))?;
        found.push((name.to_string(), bytes));
    }
    Ok(found)
}

/// A tokenizer that the `tokenizers` crate reads; JSON where the name says so.
fn check(name: &str, bytes: &[u8]) -> Result<(), String> {
    if name == FILES[0] {
        tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| format!("is not a tokenizer: {e}"))?;
    } else if name.ends_with(".json") {
        serde_json::from_slice::<serde_json::Value>(bytes).map_err(|e| format!("is not JSON: {e}"))?;
    } else {
        std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_string())?;
    }
    Ok(())
}

/// The artifact entries of `files` and what the manifest records of them.
pub(crate) fn entries<'a>(files: &[(String, Vec<u8>)]) -> (Vec<(String, Payload<'a>)>, Vec<ServingFile>) {
    files
        .iter()
        .map(|(name, bytes)| {
            let entry = format!("serving/{name}");
            let record = ServingFile {
                name: name.clone(),
                entry: entry.clone(),
                bytes: bytes.len() as u64,
                sha256: sha256_hex(bytes),
            };
            ((entry, Payload::Bytes(bytes.clone())), record)
        })
        .unzip()
}

impl Artifact {
    /// The stored file `name` (`tokenizer.json`), checked against its sha256; `None` when the
    /// artifact has none.
    pub fn serving_file(&self, name: &str) -> Result<Option<&[u8]>, ArtifactError> {
        let Some(f) = self.manifest.serving.iter().find(|f| f.name == name) else { return Ok(None) };
        self.verified(&f.entry, &f.sha256).map(Some)
    }

    /// The stored files' entries, as they are, to carry into an artifact rebuilt from this one.
    pub(crate) fn serving_entries(&self) -> Result<Vec<(String, Payload<'static>)>, ArtifactError> {
        let copy =
            |f: &ServingFile| Ok((f.entry.clone(), Payload::Bytes(self.verified(&f.entry, &f.sha256)?.to_vec())));
        self.manifest.serving.iter().map(copy).collect()
    }
}
