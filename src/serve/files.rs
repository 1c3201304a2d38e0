//! The files `serve` reads for the model — tokenizer, chat template, generation config — each
//! the one named on its command line, else the one the artifact stores (`compile --tokenizer
//! DIR`, see `artifact::serving`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ServeOptions;
use crate::artifact::Artifact;
use crate::Error;

/// One file's bytes, and how messages name it (its path, or the artifact's entry).
pub(super) struct ModelFile {
    pub shown: String,
    pub bytes: Vec<u8>,
}

impl ModelFile {
    /// The file at `path`; `what` names it in an error (`the tokenizer`).
    pub(super) fn read(path: &Path, what: &str) -> Result<ModelFile, Error> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::bad_input(format!("{what} `{}`: cannot read it: {e}", path.display())))?;
        Ok(ModelFile { shown: path.display().to_string(), bytes })
    }

    /// The text, or an error in the words of `what`.
    pub(super) fn text(&self, what: &str) -> Result<&str, Error> {
        std::str::from_utf8(&self.bytes)
            .map_err(|_| Error::bad_input(format!("{what} `{}`: it is not UTF-8 text", self.shown)))
    }

    fn stored(art: &Artifact, name: &str) -> Result<Option<ModelFile>, Error> {
        let shown = || format!("{}:serving/{name}", art.path().display());
        Ok(art.serving_file(name)?.map(|bytes| ModelFile { shown: shown(), bytes: bytes.to_vec() }))
    }
}

/// The files a server uses; each may be missing.
pub(super) struct ModelFiles {
    pub tokenizer: Option<ModelFile>,
    /// A `.jinja` template or a `tokenizer_config.json` that holds one.
    pub chat_template: Option<ModelFile>,
    /// Where the BOS and EOS tokens of a `.jinja` template come from: the stored
    /// `tokenizer_config.json`, as transformers keeps them apart since it writes the template
    /// to its own file.
    pub chat_tokens: Option<ModelFile>,
    pub generation_config: Option<ModelFile>,
}

/// Each file named in `opts`, else stored in `art`. A generation config not named is the one
/// beside a tokenizer named (a Hugging Face model folder keeps them together), else the one
/// stored.
pub(super) fn model_files(opts: &ServeOptions, art: &Artifact) -> Result<ModelFiles, Error> {
    let named = |path: &Option<PathBuf>, what: &str| path.as_deref().map(|p| ModelFile::read(p, what)).transpose();
    let stored = |name: &str| ModelFile::stored(art, name);
    let tokenizer =
        named(&opts.tokenizer, "the tokenizer")?.map_or_else(|| stored("tokenizer.json"), |f| Ok(Some(f)))?;
    let (chat_template, chat_tokens) = match named(&opts.chat_template, "the chat template")? {
        Some(file) => (Some(file), None),
        None => match (stored("chat_template.jinja")?, stored("tokenizer_config.json")?) {
            (Some(jinja), config) => (Some(jinja), config),
            (None, Some(config)) if has_chat_template(&config) => (Some(config), None),
            (None, _) => (None, None),
        },
    };
    let beside = opts.tokenizer.as_ref().map(|t| t.with_file_name("generation_config.json")).filter(|p| p.is_file());
    let generation_config = match named(&opts.generation_config, "the generation config")? {
        Some(file) => Some(file),
        None => match beside {
            Some(path) => Some(ModelFile::read(&path, "the generation config")?),
            None => stored("generation_config.json")?,
        },
    };
    Ok(ModelFiles { tokenizer, chat_template, chat_tokens, generation_config })
}

/// A `tokenizer_config.json` with a `chat_template` (a base model's has none).
fn has_chat_template(config: &ModelFile) -> bool {
    serde_json::from_slice::<Value>(&config.bytes).is_ok_and(|v| v.get("chat_template").is_some())
}
