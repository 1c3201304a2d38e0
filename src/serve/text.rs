//! Text in and out of `serve`: a Hugging Face `tokenizer.json` (through the `tokenizers`
//! crate) turns a prompt's text into token ids and a completion's ids into text.
//!
//! A completion's text is decoded as a continuation of its prompt: a word's leading space
//! (SentencePiece's `▁`, byte-level BPE's `Ġ`) depends on what comes before it, so the text of
//! the new tokens is `decode(tail + new)` less `decode(tail)`, `tail` the prompt's last
//! [`TAIL`] ids. Streamed, each chunk is what the tokens so far add to that text; a token that
//! ends inside a character (a byte-level token, its text ending in U+FFFD) sends nothing until
//! the character is whole. The chunks of a stream add up to the whole completion's text.

#[cfg(test)]
use std::path::Path;
use std::sync::Arc;

use super::files::ModelFile;
use crate::Error;

/// Prompt ids that a continuation is decoded after.
pub(super) const TAIL: usize = 5;

/// A tokenizer, checked against the model it serves.
pub(super) struct Text {
    tokenizer: tokenizers::Tokenizer,
}

impl Text {
    /// Reads `path` (a `tokenizer.json`) for a model whose logits cover `vocab` ids.
    #[cfg(test)]
    pub(super) fn load(path: &Path, vocab: i64) -> Result<Text, Error> {
        Text::read(&ModelFile::read(path, "the tokenizer")?, vocab)
    }

    /// Reads `file` (a `tokenizer.json`) for a model whose logits cover `vocab` ids: a
    /// tokenizer with more ids than that is another model's.
    pub(super) fn read(file: &ModelFile, vocab: i64) -> Result<Text, Error> {
        let bad = |reason: String| Error::bad_input(format!("the tokenizer `{}`: {reason}", file.shown));
        let tokenizer =
            tokenizers::Tokenizer::from_bytes(&file.bytes).map_err(|e| bad(format!("not a tokenizer.json: {e}")))?;
        let ids = tokenizer.get_vocab_size(true);
        if i64::try_from(ids).map_or(true, |n| n > vocab) {
            return Err(bad(format!("it has {ids} token ids, more than the model's {vocab} logits")));
        }
        Ok(Text { tokenizer })
    }

    /// The ids of `text`, with the special tokens the tokenizer adds (a BOS, say).
    pub(super) fn encode(&self, text: &str) -> Result<Vec<i64>, String> {
        self.encode_with(text, true)
    }

    /// The ids of `text` alone: a chat template's text, which writes its special tokens itself.
    pub(super) fn encode_plain(&self, text: &str) -> Result<Vec<i64>, String> {
        self.encode_with(text, false)
    }

    fn encode_with(&self, text: &str, specials: bool) -> Result<Vec<i64>, String> {
        let encoding = self.tokenizer.encode(text, specials).map_err(|e| format!("cannot tokenize the prompt: {e}"))?;
        Ok(encoding.get_ids().iter().map(|&id| i64::from(id)).collect())
    }

    /// The id of `token` when the vocabulary has it as one token (a chat template's EOS text).
    pub(super) fn token_id(&self, token: &str) -> Option<i64> {
        self.tokenizer.token_to_id(token).map(i64::from)
    }

    /// The text of token `id` alone, special tokens included; `None` for an id the tokenizer
    /// lacks.
    pub(super) fn token_text(&self, id: i64) -> Option<String> {
        let id = u32::try_from(id).ok()?;
        self.tokenizer.id_to_token(id)?;
        self.tokenizer.decode(&[id], false).ok()
    }

    fn decode(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids, true).unwrap_or_default()
    }

    /// A completion's text as its tokens come, after `prompt`.
    pub(super) fn stream(self: &Arc<Self>, prompt: &[i64]) -> Stream {
        let ids: Vec<u32> = prompt[prompt.len().saturating_sub(TAIL)..].iter().map(|&t| id(t)).collect();
        let sent = ids.len();
        Stream { text: self.clone(), ids, from: 0, sent }
    }
}

/// A token id as the tokenizer takes it (the server checks ids against the vocabulary first).
fn id(t: i64) -> u32 {
    u32::try_from(t).unwrap_or(u32::MAX)
}

/// One completion's tokens turned into text as they come.
pub(super) struct Stream {
    text: Arc<Text>,
    /// The ids decoded together: from `from` on, the window's.
    ids: Vec<u32>,
    /// Where the window starts: the text before it is sent.
    from: usize,
    /// Ids whose text is sent.
    sent: usize,
}

impl Stream {
    /// The text `token` adds, possibly none yet.
    pub(super) fn push(&mut self, token: i64) -> String {
        self.ids.push(id(token));
        let (before, now) = self.window();
        if now.len() <= before.len() || now.ends_with('\u{FFFD}') || !now.starts_with(&before) {
            return String::new();
        }
        self.advance(now, before.len())
    }

    /// The text not sent yet, once the completion is done (a character left unfinished
    /// included, as U+FFFD).
    pub(super) fn finish(&mut self) -> String {
        let (before, now) = self.window();
        if now.len() <= before.len() || !now.starts_with(&before) {
            return String::new();
        }
        self.advance(now, before.len())
    }

    /// The window's text without the ids not sent yet, and with them.
    fn window(&self) -> (String, String) {
        (self.text.decode(&self.ids[self.from..self.sent]), self.text.decode(&self.ids[self.from..]))
    }

    /// Sends `now` past `sent_bytes`: the window moves on to the ids it just sent.
    fn advance(&mut self, now: String, sent_bytes: usize) -> String {
        self.from = self.sent;
        self.sent = self.ids.len();
        now[sent_bytes..].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::Text;
    use serde_json::Value;
    use std::sync::Arc;

    fn cases() -> (Arc<Text>, Value) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer");
        let text = Arc::new(Text::load(&dir.join("tokenizer.json"), 64).expect("a tokenizer"));
        let cases = std::fs::read(dir.join("cases.json")).expect("the cases");
        (text, serde_json::from_slice(&cases).expect("json"))
    }

    fn ints(v: &Value) -> Vec<i64> {
        v.as_array().expect("a list").iter().filter_map(Value::as_i64).collect()
    }

    /// Texts tokenize as Hugging Face's Python `tokenizers` does; each decode_rows request's
    /// tokens, streamed one at a time, give the text Python's decode gives as a continuation
    /// of the prompt.
    #[test]
    fn texts_and_continuations_equal_the_python_librarys() {
        let (text, cases) = cases();
        assert_eq!(cases["tail"].as_u64(), Some(super::TAIL as u64));
        for case in cases["encode"].as_array().expect("encode cases") {
            let s = case["text"].as_str().expect("a text");
            assert_eq!(text.encode(s).expect("encodes"), ints(&case["ids"]), "{s:?}");
        }
        for case in cases["continuations"].as_array().expect("continuations") {
            let (prompt, tokens, expected) = (ints(&case["prompt"]), ints(&case["tokens"]), &case["text"]);
            let mut stream = text.stream(&prompt);
            let mut streamed: String = tokens.iter().map(|&t| stream.push(t)).collect();
            streamed.push_str(&stream.finish());
            assert_eq!(Some(streamed.as_str()), expected.as_str(), "{prompt:?} {tokens:?}");
        }
    }

    #[test]
    fn a_tokenizer_larger_than_the_model_is_refused() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer/tokenizer.json");
        let err = Text::load(&path, 32).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("tokenizer.json`: it has 64 token ids, more than the model's 32 logits"), "{err}");
        let err = Text::load(&path.with_file_name("cases.json"), 64).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("not a tokenizer.json"), "{err}");
    }
}
