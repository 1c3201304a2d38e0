//! Requests as the API writes them: a completion's or a chat's body read into a [`Request`]
//! for the batcher, with its stream flag and stop strings, in the API's words where it is
//! wrong. A field given as `null` is as if absent; fields that ask for nothing (`top_p` 1, a
//! penalty of 0, …: what several clients send by default) are taken.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::chat::Chat;
use super::text::Text;
use crate::run::{Request, Sampling};

/// What reading a request needs of the server.
pub(super) struct Reader<'a> {
    /// The name the API gives the model.
    pub model: &'a str,
    /// The tokenizer, when the server has one.
    pub text: Option<&'a Text>,
    /// The model's end-of-sequence ids: every request stops at them unless it asks
    /// `ignore_eos`.
    pub eos: &'a [i64],
}

/// A parsed completion request.
pub(super) struct Completion {
    pub request: Request,
    pub stream: bool,
    /// Strings that end the completion's text (cut before them).
    pub stops: Vec<String>,
    /// Streamed: a last chunk with no choices and the usage (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Choices: completions of the same prompt, each with its own seed.
    pub n: usize,
}

/// The fields both endpoints take (`options` reads them).
const SHARED_FIELDS: [&str; 19] = [
    "model",
    "max_tokens",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stream",
    "stream_options",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "n",
    "user",
    "logprobs",
    "response_format",
];

/// The fields only `/v1/completions` takes.
const COMPLETION_FIELDS: [&str; 3] = ["prompt", "echo", "best_of"];

/// The fields only `/v1/chat/completions` takes.
const CHAT_FIELDS: [&str; 3] = ["messages", "max_completion_tokens", "top_logprobs"];

/// Parses a completion request's body, in the API's words where it is wrong; a text prompt
/// goes through `text`, when the server has a tokenizer.
pub(super) fn parse(body: &[u8], reader: &Reader) -> Result<Completion, String> {
    let v = request_object(body, reader.model, &COMPLETION_FIELDS)?;
    let o = v.as_object().ok_or("the body is not a JSON object")?;
    let prompt = match o.get("prompt") {
        None => return Err("`prompt` is missing: give token ids, a list of integers".into()),
        Some(Value::String(s)) => match reader.text {
            Some(text) => text.encode(s)?,
            None => {
                let message = "`prompt` is text, which needs a tokenizer this server does not have (`serve \
                               --tokenizer`): give token ids";
                return Err(message.into());
            }
        },
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => match (reader.text, a[0].as_str()) {
            (Some(text), Some(s)) => text.encode(s)?,
            _ => return Err("`prompt` is text, which needs a tokenizer this server does not have".into()),
        },
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_array() => ids(&a[0], "prompt")?,
        Some(p) => ids(p, "prompt")?,
    };
    let logprobs = match get(o, "logprobs") {
        None | Some(Value::Bool(false)) => None,
        Some(v) => Some(top_count(v, "logprobs")?),
    };
    options(o, prompt, reader, logprobs)
}

/// The most choices a request may ask for.
const MAX_CHOICES: u64 = 16;

/// The most likeliest tokens a request may ask the log probabilities of.
const MAX_TOP_LOGPROBS: u64 = 20;

/// `v` as a count of likeliest tokens (`field` names it).
fn top_count(v: &Value, field: &str) -> Result<usize, String> {
    v.as_u64()
        .filter(|&k| k <= MAX_TOP_LOGPROBS)
        .map(|k| k as usize)
        .ok_or(format!("`{field}` must be a whole number from 0 to {MAX_TOP_LOGPROBS}, not {v}"))
}

/// A field that is not `null`.
fn get<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

/// A field, whether its value asks for nothing, and why another value is refused.
type Neutral = (&'static str, fn(&Value) -> bool, &'static str);

/// The fields clients send with a value that asks for nothing (what several send by default),
/// with the values that do and why they are refused: `echo` false asks for nothing; …
const NEUTRAL: [Neutral; 3] = [
    ("echo", |v| matches!(v, Value::Bool(false)), "`echo` (the prompt in the answer) is not supported: give false"),
    ("best_of", |v| v.as_u64() == Some(1), "`best_of` must be 1: no candidates beyond the `n` choices"),
    (
        "response_format",
        |v| v.get("type").and_then(Value::as_str) == Some("text"),
        "only `response_format` {\"type\": \"text\"} is supported (no JSON modes)",
    ),
];

/// Parses a chat request: its `messages` through the chat template, then tokenized.
pub(super) fn parse_chat(body: &[u8], reader: &Reader, text: &Text, chat: &Chat) -> Result<Completion, String> {
    let mut v = request_object(body, reader.model, &CHAT_FIELDS)?;
    let o = v.as_object_mut().ok_or("the body is not a JSON object")?;
    let messages = o.get("messages").ok_or("`messages` is missing: give the conversation")?;
    let prompt = text.encode_plain(&chat.render(messages)?)?;
    // The newer name of the same limit.
    if let Some(limit) = o.remove("max_completion_tokens") {
        o.insert("max_tokens".into(), limit);
    }
    let top = get(o, "top_logprobs").map(|v| top_count(v, "top_logprobs")).transpose()?;
    let logprobs = match get(o, "logprobs") {
        None | Some(Value::Bool(false)) if top.is_some_and(|k| k > 0) => {
            return Err("`top_logprobs` needs `\"logprobs\": true`".into());
        }
        None | Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(top.unwrap_or(0)),
        Some(v) => return Err(format!("`logprobs` must be true or false, not {v}")),
    };
    options(o, prompt, reader, logprobs)
}

/// A request's body: a JSON object of the shared fields and the endpoint's `own` only, for
/// `model` if it names one.
fn request_object(body: &[u8], model: &str, own: &[&str]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let o = v.as_object().ok_or("the body is not a JSON object")?;
    let known = |k: &str| own.contains(&k) || SHARED_FIELDS.contains(&k);
    if let Some(k) = o.keys().find(|k| !known(k)) {
        let fields = [own, &SHARED_FIELDS[..]].concat().join(", ");
        return Err(format!("unknown field `{k}`; the fields are {fields}"));
    }
    if let Some(m) = o.get("model").filter(|m| m.as_str() != Some(model)) {
        return Err(format!("model {m} is not served here; this server serves \"{model}\""));
    }
    Ok(v)
}

/// The options of a request for `prompt`. A field given as `null` is as if absent.
fn options(
    o: &Map<String, Value>,
    prompt: Vec<i64>,
    reader: &Reader,
    logprobs: Option<usize>,
) -> Result<Completion, String> {
    static SEEDS: AtomicU64 = AtomicU64::new(0);
    let get = |name: &str| get(o, name);
    for (name, asks_nothing, why) in NEUTRAL {
        if let Some(v) = get(name).filter(|v| !asks_nothing(v)) {
            return Err(format!("`{name}`: {v}: {why}"));
        }
    }
    let integer = |name: &str, default: u64| match get(name) {
        None => Ok(default),
        Some(v) => v.as_u64().ok_or(format!("`{name}` must be a non-negative integer, not {v}")),
    };
    let max_new_tokens =
        match get("max_tokens") {
            None => 16,
            Some(v) => v.as_u64().filter(|&n| n >= 1).and_then(|n| usize::try_from(n).ok()).ok_or(format!(
                "`max_tokens` must be a positive integer (the tokens to generate, at least 1), not {v}"
            ))?,
        };
    let n = integer("n", 1)?;
    if !(1..=MAX_CHOICES).contains(&n) {
        return Err(format!("`n` must be from 1 to {MAX_CHOICES}, not {n}"));
    }
    let number = |name: &str, default: f64, within: std::ops::RangeInclusive<f64>, what: &str| match get(name) {
        None => Ok(default),
        Some(v) => v.as_f64().filter(|x| within.contains(x)).ok_or(format!("`{name}` must be {what}, not {v}")),
    };
    let temperature = number("temperature", 1.0, 0.0..=100.0, "a number from 0 to 100")?;
    let top_p = number("top_p", 1.0, f64::MIN_POSITIVE..=1.0, "a number above 0, at most 1")?;
    let min_p = number("min_p", 0.0, 0.0..=1.0, "a number from 0 to 1")?;
    let repetition_penalty =
        number("repetition_penalty", 1.0, f64::MIN_POSITIVE..=10.0, "a number above 0, at most 10")?;
    let presence_penalty = number("presence_penalty", 0.0, -2.0..=2.0, "a number from -2 to 2")?;
    let frequency_penalty = number("frequency_penalty", 0.0, -2.0..=2.0, "a number from -2 to 2")?;
    // vLLM's -1 and OpenAI-style clients' 0 both mean every token.
    let top_k = match get("top_k") {
        None => 0,
        Some(v) => v
            .as_i64()
            .filter(|&k| k >= -1)
            .map(|k| usize::try_from(k).unwrap_or(0))
            .ok_or(format!("`top_k` must be a whole number of tokens (0 or -1: all), not {v}"))?,
    };
    let seed = integer("seed", SEEDS.fetch_add(1, Ordering::Relaxed))?;
    let stream = match get("stream") {
        None => false,
        Some(v) => v.as_bool().ok_or(format!("`stream` must be true or false, not {v}"))?,
    };
    let mut stop = match o.get("stop_token_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => ids(v, "stop_token_ids")?,
    };
    let ignore_eos = match get("ignore_eos") {
        None => false,
        Some(v) => v.as_bool().ok_or(format!("`ignore_eos` must be true or false, not {v}"))?,
    };
    for &id in reader.eos.iter().filter(|_| !ignore_eos) {
        if !stop.contains(&id) {
            stop.push(id);
        }
    }
    if let Some(u) = get("user").filter(|u| !u.is_string()) {
        return Err(format!("`user` must be a string, not {u}"));
    }
    let stops = stop_strings(o.get("stop"), reader.text.is_some())?;
    let include_usage = match get("stream_options") {
        None => false,
        Some(Value::Object(options)) => match options.iter().find(|(k, _)| k.as_str() != "include_usage") {
            Some((k, _)) => return Err(format!("`stream_options.{k}` is not supported; give `include_usage`")),
            None => match options.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(v) => {
                    v.as_bool().ok_or(format!("`stream_options.include_usage` must be true or false, not {v}"))?
                }
            },
        },
        Some(v) => return Err(format!("`stream_options` must be an object, not {v}")),
    };
    let sampling =
        Sampling { temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty };
    let request = Request { prompt, max_new_tokens, stop, sampling, logprobs, seed };
    Ok(Completion { request, stream, stops, include_usage, n: n as usize })
}

/// `stop`: a string or a list of up to 4, none empty; they are matched in the completion's
/// text, so they need a tokenizer.
fn stop_strings(v: Option<&Value>, tokenizer: bool) -> Result<Vec<String>, String> {
    let bad = || "`stop` must be a string or a list of up to 4 non-empty strings".to_string();
    let stops: Vec<String> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 4 => {
            a.iter().map(|s| s.as_str().map(str::to_string).ok_or_else(bad)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad()),
    };
    if stops.iter().any(String::is_empty) {
        return Err(bad());
    }
    if !stops.is_empty() && !tokenizer {
        return Err("`stop` strings are matched in the text, which needs a tokenizer this server does not have \
                    (`serve --tokenizer`): give `stop_token_ids`"
            .into());
    }
    Ok(stops)
}

/// A list of token ids.
fn ids(v: &Value, name: &str) -> Result<Vec<i64>, String> {
    let bad = || format!("`{name}` must be a list of token ids (integers)");
    v.as_array().ok_or_else(bad)?.iter().map(|t| t.as_i64().ok_or_else(bad)).collect()
}

#[cfg(test)]
mod tests {
    use super::{parse, Reader, Sampling, Text};

    const PLAIN: Reader = Reader { model: "m", text: None, eos: &[] };

    #[test]
    fn requests_are_read_and_wrong_ones_named() {
        let c = parse(br#"{"prompt": [5, 9], "max_tokens": 3, "temperature": 0, "stream": true}"#, &PLAIN).unwrap();
        assert_eq!((c.request.prompt, c.request.max_new_tokens, c.stream), (vec![5, 9], 3, true));
        let c = parse(br#"{"model": "m", "prompt": [[7]], "stop_token_ids": [2]}"#, &PLAIN).unwrap();
        assert_eq!((c.request.prompt, c.request.stop, c.request.max_new_tokens), (vec![7], vec![2], 16));
        // The model's EOS ids stop every request but one that asks `ignore_eos`.
        let eos = Reader { eos: &[2, 3], ..PLAIN };
        let c = parse(br#"{"prompt": [7], "stop_token_ids": [2]}"#, &eos).unwrap();
        assert_eq!(c.request.stop, vec![2, 3]);
        let c = parse(br#"{"prompt": [7], "ignore_eos": true}"#, &eos).unwrap();
        assert_eq!(c.request.stop, Vec::<i64>::new());
        // What clients send by default asks for nothing: taken, and `null` is as if absent.
        let defaults = br#"{"prompt": [7], "top_p": 1.0, "presence_penalty": 0, "frequency_penalty": 0.0,
            "logprobs": null, "n": 1, "echo": false, "best_of": 1, "stream_options": {"include_usage": false},
            "response_format": {"type": "text"}, "temperature": null, "max_tokens": null, "seed": null,
            "stream": null, "user": null, "stop": null}"#;
        let c = parse(defaults, &PLAIN).unwrap();
        assert_eq!((c.request.max_new_tokens, c.request.sampling, c.stream), (16, Sampling::at(1.0), false));
        let c = parse(
            br#"{"prompt": [7], "top_p": 0.9, "top_k": 40, "min_p": 0.05, "temperature": 0.7,
                "repetition_penalty": 1.1, "presence_penalty": -0.5, "frequency_penalty": 0.25}"#,
            &PLAIN,
        );
        let expected = Sampling {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            repetition_penalty: 1.1,
            presence_penalty: -0.5,
            frequency_penalty: 0.25,
        };
        assert_eq!(c.unwrap().request.sampling, expected);
        assert_eq!(parse(br#"{"prompt": [7], "top_k": -1}"#, &PLAIN).unwrap().request.sampling.top_k, 0);
        assert_eq!(parse(br#"{"prompt": [7], "logprobs": 3}"#, &PLAIN).unwrap().request.logprobs, Some(3));
        assert_eq!(parse(br#"{"prompt": [7], "logprobs": 0}"#, &PLAIN).unwrap().request.logprobs, Some(0));
        let c = parse(br#"{"prompt": [7], "stream": true, "stream_options": {"include_usage": true}}"#, &PLAIN);
        assert!(c.unwrap().include_usage);
        for (body, message) in [
            (&br#"{"prompt": [1], "echo": true}"#[..], "`echo`: true: `echo` (the prompt in the answer) is not"),
            (br#"{"prompt": [1], "logit_bias": {}}"#, "unknown field `logit_bias`"),
            (br#"{"prompt": [1], "top_p": 0}"#, "`top_p` must be a number above 0, at most 1, not 0"),
            (br#"{"prompt": [1], "min_p": 2}"#, "`min_p` must be a number from 0 to 1, not 2"),
            (br#"{"prompt": [1], "top_k": -2}"#, "`top_k` must be a whole number of tokens (0 or -1: all), not -2"),
            (br#"{"prompt": [1], "presence_penalty": 3}"#, "`presence_penalty` must be a number from -2 to 2, not 3"),
            (br#"{"prompt": [1], "repetition_penalty": 0}"#, "`repetition_penalty` must be a number above 0"),
            (br#"{"prompt": [1], "logprobs": 21}"#, "`logprobs` must be a whole number from 0 to 20, not 21"),
            (
                br#"{"prompt": [1], "stream_options": {"continuous": true}}"#,
                "`stream_options.continuous` is not supported",
            ),
            (br#"{"prompt": [1], "response_format": {"type": "json_object"}}"#, "no JSON modes"),
            (br#"{"prompt": [1], "max_tokens": 0}"#, "`max_tokens` must be a positive integer"),
            (br#"{"prompt": "hello"}"#, "needs a tokenizer"),
            (br#"{"prompt": [1.5]}"#, "`prompt` must be a list of token ids"),
            (
                br#"{"prompt": [1], "max_tokens": -1}"#,
                "`max_tokens` must be a positive integer (the tokens to generate, at least 1), not -1",
            ),
            (br#"{"prompt": [1], "model": "other"}"#, "model \"other\" is not served here"),
            (br#"{"prompt": [1], "n": 0}"#, "`n` must be from 1 to 16, not 0"),
            (br#"{"prompt": [1], "n": 17}"#, "`n` must be from 1 to 16, not 17"),
            (br#"{"prompt": [1], "ignore_eos": 1}"#, "`ignore_eos` must be true or false, not 1"),
            (br#"{"max_tokens": 2}"#, "`prompt` is missing"),
            (br#"[1, 2]"#, "not a JSON object"),
            (br#"{"prompt": [1]"#, "the body is not JSON"),
            (br#"{"prompt": [1], "stop": "x"}"#, "`stop` strings are matched in the text, which needs a tokenizer"),
        ] {
            let got = parse(body, &PLAIN).err().unwrap_or_default();
            assert!(got.contains(message), "{}: {got}", String::from_utf8_lossy(body));
        }
        // With a tokenizer, a text prompt (alone or in a list of one) is its ids.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer/tokenizer.json");
        let text = Text::load(&path, 64).expect("a tokenizer");
        let ids = text.encode("the lazy dog").expect("encodes");
        for body in [&br#"{"prompt": "the lazy dog"}"#[..], br#"{"prompt": ["the lazy dog"]}"#] {
            assert_eq!(parse(body, &Reader { text: Some(&text), ..PLAIN }).expect("parses").request.prompt, ids);
        }
        let c =
            parse(br#"{"prompt": "a", "stop": ["x", "yz"]}"#, &Reader { text: Some(&text), ..PLAIN }).expect("parses");
        assert_eq!(c.stops, ["x", "yz"]);
        for body in [&br#"{"prompt": "a", "stop": ""}"#[..], br#"{"prompt": "a", "stop": ["a","b","c","d","e"]}"#] {
            let got = parse(body, &Reader { text: Some(&text), ..PLAIN }).err().unwrap_or_default();
            assert!(got.contains("a string or a list of up to 4 non-empty strings"), "{got}");
        }
    }
}
