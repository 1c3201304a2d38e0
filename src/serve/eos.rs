//! The model's end-of-sequence ids, at which every request stops unless it asks `ignore_eos`
//! (as vLLM does): the `eos_token_id` of its `generation_config.json` (one given, else the one
//! beside the tokenizer, where a Hugging Face model folder keeps it), and the EOS token of its
//! chat template's `tokenizer_config.json` (the end of the assistant's turn).

use serde_json::Value;

use super::chat::Chat;
use super::files::ModelFile;
use super::text::Text;
use crate::Error;

/// Where the EOS ids come from.
pub(super) struct Sources<'a> {
    /// The model's `generation_config.json` (see `files::model_files`).
    pub config: Option<&'a ModelFile>,
    pub text: Option<&'a Text>,
    pub chat: Option<&'a Chat>,
    /// The ids the model's logits cover.
    pub vocab: i64,
}

/// The EOS ids, sorted, each once.
pub(super) fn eos_ids(from: &Sources) -> Result<Vec<i64>, Error> {
    let mut ids = match from.config {
        Some(file) => from_config(file, from.vocab)?,
        None => Vec::new(),
    };
    if let (Some(chat), Some(text)) = (from.chat, from.text) {
        if !chat.eos().is_empty() {
            let id = text.token_id(chat.eos()).ok_or_else(|| {
                Error::bad_input(format!(
                    "the chat template's EOS token `{}` is not one token of the tokenizer: it cannot end an answer",
                    chat.eos()
                ))
            })?;
            ids.push(id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// `eos_token_id` of the config `file`: absent or `null` (none), an id, or a list of ids.
fn from_config(file: &ModelFile, vocab: i64) -> Result<Vec<i64>, Error> {
    let bad = |reason: String| Error::bad_input(format!("the generation config `{}`: {reason}", file.shown));
    let config: Value = serde_json::from_slice(&file.bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let ids: Vec<&Value> = match config.get("eos_token_id") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.iter().collect(),
        Some(one) => vec![one],
    };
    ids.into_iter()
        .map(|v| {
            v.as_i64()
                .filter(|id| (0..vocab).contains(id))
                .ok_or_else(|| bad(format!("`eos_token_id` {v} is not a token id of the model (0 to {})", vocab - 1)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{eos_ids, Sources};
    use crate::serve::chat::Chat;
    use crate::serve::files::ModelFile;
    use crate::serve::text::Text;

    fn folder() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer")
    }

    /// The ids come from the generation config (one id or a list) and from the chat template's
    /// EOS token; wrong ones are named with their file.
    #[test]
    fn eos_ids_come_from_the_generation_config_and_the_chat_template() {
        let text = Text::load(&folder().join("tokenizer.json"), 64).expect("a tokenizer");
        let chat = Chat::load(&folder().join("tokenizer_config.json")).expect("a template");
        let file = |name: &str, body: &str| ModelFile { shown: name.into(), bytes: body.as_bytes().to_vec() };
        let with = |body: &str, chat: Option<&Chat>| {
            let config = file("generation_config.json", body);
            let from = Sources { config: Some(&config), text: Some(&text), chat, vocab: 64 };
            eos_ids(&from).map_err(|e| e.to_string())
        };
        assert_eq!(with(r#"{"eos_token_id": 7}"#, None), Ok(vec![7]));
        assert_eq!(with(r#"{"eos_token_id": [9, 7, 9]}"#, None), Ok(vec![7, 9]));
        assert_eq!(with(r#"{"bos_token_id": 1}"#, None), Ok(vec![]));
        let end = text.token_id("▁do").expect("the template's EOS is a token");
        assert_eq!(with(r#"{"eos_token_id": null}"#, Some(&chat)), Ok(vec![end]));
        // A template whose EOS text the tokenizer has no one token for could never stop.
        let other = file("tokenizer_config.json", r#"{"chat_template": "{{ bos_token }}", "eos_token": "dog"}"#);
        let err = with("{}", Some(&Chat::read(&other, None).expect("a template"))).expect_err("not a token");
        assert!(err.contains("the chat template's EOS token `dog` is not one token of the tokenizer"), "{err}");
        for (body, words) in [
            (r#"{"eos_token_id": 64}"#, "`eos_token_id` 64 is not a token id of the model (0 to 63)"),
            (r#"{"eos_token_id": ["x"]}"#, "`eos_token_id` \"x\" is not a token id"),
            ("{", "generation_config.json`: not JSON"),
        ] {
            let err = with(body, None).expect_err(body);
            assert!(err.contains(words), "{body}: {err}");
        }
    }
}
