//! Chat: `POST /v1/chat/completions` turns a conversation into a prompt through the model's
//! chat template (Hugging Face's Jinja templates, rendered by `minijinja` with Python's string
//! methods), as `transformers`' `apply_chat_template(messages, add_generation_prompt=True)`
//! does; the text is then tokenized without adding special tokens (the template writes them).
//!
//! The template comes from a `.jinja` file, or from a `tokenizer_config.json` (its
//! `chat_template`, a string or a list of named ones of which `default` is taken, and its
//! `bos_token` and `eos_token`, which templates read).

#[cfg(test)]
use std::path::Path;

use minijinja::{Environment, ErrorKind, Value as Jinja};
use serde_json::Value;

use super::files::ModelFile;
use crate::Error;

/// A chat template, ready to render.
pub(super) struct Chat {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

impl Chat {
    /// Reads the template at `path` (a `.jinja` file or a `tokenizer_config.json`).
    #[cfg(test)]
    pub(super) fn load(path: &Path) -> Result<Chat, Error> {
        Chat::read(&ModelFile::read(path, "the chat template")?, None)
    }

    /// Reads the template `file`: a `tokenizer_config.json` (the template and its BOS and EOS
    /// tokens), or a `.jinja` file whose tokens come from the `tokenizer_config.json` `tokens`,
    /// if given.
    pub(super) fn read(file: &ModelFile, tokens: Option<&ModelFile>) -> Result<Chat, Error> {
        let what = "the chat template";
        let bad = |reason: String| Error::bad_input(format!("{what} `{}`: {reason}", file.shown));
        let text = file.text(what)?;
        let (source, bos, eos) = match serde_json::from_str::<Value>(text) {
            Ok(config) if config.is_object() => from_config(&config).map_err(bad)?,
            _ => {
                let config = match tokens {
                    Some(t) => serde_json::from_slice::<Value>(&t.bytes)
                        .map_err(|e| Error::bad_input(format!("{what}'s tokens `{}`: not JSON: {e}", t.shown)))?,
                    None => Value::Null,
                };
                (text.to_string(), special_token(&config, "bos_token"), special_token(&config, "eos_token"))
            }
        };
        // As `transformers` sets up Jinja for chat templates.
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<Jinja, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned("chat", source).map_err(|e| bad(format!("not a Jinja template: {e}")))?;
        Ok(Chat { env, bos, eos })
    }

    /// The template's EOS text (`eos_token` of a `tokenizer_config.json`; empty for a `.jinja`
    /// file): the end of the assistant's turn.
    pub(super) fn eos(&self) -> &str {
        &self.eos
    }

    /// The prompt text of `messages` (OpenAI's: a list of `{"role", "content"}` with text
    /// content), ending where the assistant's answer begins.
    pub(super) fn render(&self, messages: &Value) -> Result<String, String> {
        let list = messages.as_array().filter(|l| !l.is_empty()).ok_or("`messages` must be a non-empty list")?;
        for (i, m) in list.iter().enumerate() {
            let fields = m.as_object().ok_or(format!("`messages[{i}]` must be an object"))?;
            if !fields.get("role").is_some_and(Value::is_string) || !fields.get("content").is_some_and(Value::is_string)
            {
                return Err(format!("`messages[{i}]` must have a string `role` and a string `content`"));
            }
            if let Some(k) = fields.keys().find(|k| !["role", "content", "name"].contains(&k.as_str())) {
                return Err(format!("`messages[{i}]` has the field `{k}`, which this server does not take"));
            }
        }
        let template = self.env.get_template("chat").map_err(|e| e.to_string())?;
        let context = minijinja::context! {
            messages => Jinja::from_serialize(messages),
            add_generation_prompt => true,
            bos_token => &self.bos,
            eos_token => &self.eos,
        };
        template.render(context).map_err(|e| match e.kind() {
            ErrorKind::InvalidOperation => {
                format!("the chat template refuses these messages: {}", e.detail().unwrap_or(""))
            }
            _ => format!("the chat template failed on these messages: {e}"),
        })
    }
}

/// The template and the BOS and EOS text of a `tokenizer_config.json`.
fn from_config(config: &Value) -> Result<(String, String, String), String> {
    let source = match config.get("chat_template") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Value::as_str))
            .ok_or("its `chat_template` list has no template named `default`")?
            .to_string(),
        _ => return Err("it has no `chat_template`".into()),
    };
    Ok((source, special_token(config, "bos_token"), special_token(config, "eos_token")))
}

/// A special token of a `tokenizer_config.json`: its text, or an object with its `content`.
fn special_token(config: &Value, name: &str) -> String {
    match config.get(name) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.get("content").and_then(Value::as_str).unwrap_or_default().to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::Chat;
    use serde_json::{json, Value};

    fn folder() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer")
    }

    /// The conversations of `testdata/tokenizer/cases.json`, rendered as `transformers`'
    /// `apply_chat_template` rendered them, from the `.jinja` file and from a
    /// `tokenizer_config.json` holding the same template and a BOS token.
    #[test]
    fn conversations_render_as_transformers_renders_them() {
        let cases: Value =
            serde_json::from_str(&std::fs::read_to_string(folder().join("cases.json")).unwrap()).unwrap();
        let chats = cases["chat"].as_array().expect("chat cases");
        assert!(chats.len() >= 3);
        // The config's template writes its BOS token, `the`; the file alone has none.
        for (source, expected) in [("chat_template.jinja", "text"), ("tokenizer_config.json", "text_config")] {
            let chat = Chat::load(&folder().join(source)).expect("a template");
            for case in chats {
                let text = chat.render(&case["messages"]).expect("renders");
                assert_eq!(text, case[expected].as_str().expect("a text"), "{source}: {}", case["messages"]);
            }
        }
    }

    #[test]
    fn messages_the_template_or_the_api_refuses_are_named() {
        let chat = Chat::load(&folder().join("chat_template.jinja")).expect("a template");
        for (messages, expected) in [
            (json!([]), "`messages` must be a non-empty list"),
            (json!([{"role": "user"}]), "`messages[0]` must have a string `role` and a string `content`"),
            (json!([{"role": "user", "content": "hi", "tool_calls": []}]), "has the field `tool_calls`"),
            (
                json!([{"role": "robot", "content": "hi"}]),
                "the chat template refuses these messages: unknown role robot",
            ),
        ] {
            let err = chat.render(&messages).unwrap_err();
            assert!(err.contains(expected), "{messages}: {err}");
        }
        let err = Chat::load(&folder().join("cases.json")).err().expect("no template there").to_string();
        assert!(err.contains("it has no `chat_template`"), "{err}");
    }
}
