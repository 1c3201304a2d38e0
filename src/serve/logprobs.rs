//! Log probabilities in the API's shapes. The completions API's: `tokens` (each token's text),
//! `token_logprobs`, `top_logprobs` (per token, the likeliest tokens' texts and theirs) and
//! `text_offset` (where each token's text starts in the completion's). The chat API's:
//! `content`, per token its text, log probability, UTF-8 bytes and `top_logprobs` alike.
//!
//! A token's text is the tokenizer's for that id alone (special tokens included), or the id in
//! decimal without a tokenizer.

use serde_json::{json, Map, Value};

use super::text::Text;
use crate::run::Logprobs;

/// One generated token's log probabilities, and where its text starts in the completion's
/// (in characters).
pub(super) struct Entry {
    pub token: i64,
    pub logprobs: Logprobs,
    pub offset: usize,
}

/// `entries` in the completions API's shape.
pub(super) fn completion(entries: &[Entry], text: Option<&Text>) -> Value {
    let name = |id: i64| token_text(id, text);
    let tops: Vec<Value> = entries
        .iter()
        .map(|e| Value::Object(e.logprobs.top.iter().map(|&(id, lp)| (name(id), json!(lp))).collect::<Map<_, _>>()))
        .collect();
    json!({
        "tokens": entries.iter().map(|e| name(e.token)).collect::<Vec<_>>(),
        "token_logprobs": entries.iter().map(|e| e.logprobs.token).collect::<Vec<_>>(),
        "top_logprobs": tops,
        "text_offset": entries.iter().map(|e| e.offset).collect::<Vec<_>>(),
    })
}

/// `entries` in the chat API's shape.
pub(super) fn chat(entries: &[Entry], text: Option<&Text>) -> Value {
    let one = |id: i64, lp: f32| {
        let token = token_text(id, text);
        json!({"token": token, "logprob": lp, "bytes": token.as_bytes()})
    };
    let content: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = one(e.token, e.logprobs.token);
            v["top_logprobs"] = e.logprobs.top.iter().map(|&(id, lp)| one(id, lp)).collect();
            v
        })
        .collect();
    json!({ "content": content })
}

fn token_text(id: i64, text: Option<&Text>) -> String {
    text.and_then(|t| t.token_text(id)).unwrap_or_else(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::{chat, completion, Entry};
    use crate::run::Logprobs;
    use serde_json::json;

    #[test]
    fn both_shapes_hold_the_tokens_and_their_alternatives() {
        let entries = [
            Entry { token: 7, logprobs: Logprobs { token: -0.5, top: vec![(7, -0.5), (3, -1.5)] }, offset: 0 },
            Entry { token: 9, logprobs: Logprobs { token: -2.0, top: vec![(1, -0.25), (9, -2.0)] }, offset: 1 },
        ];
        assert_eq!(
            completion(&entries, None),
            json!({
                "tokens": ["7", "9"],
                "token_logprobs": [-0.5, -2.0],
                "top_logprobs": [{"7": -0.5, "3": -1.5}, {"1": -0.25, "9": -2.0}],
                "text_offset": [0, 1],
            })
        );
        let c = chat(&entries, None);
        assert_eq!(c["content"][1]["token"], "9");
        assert_eq!(c["content"][1]["bytes"], json!([57]));
        assert_eq!(c["content"][1]["top_logprobs"][0], json!({"token": "1", "logprob": -0.25, "bytes": [49]}));
    }
}
