//! Serving many requests through one session (`run::Batcher`): requests of different lengths
//! sharing a decode step's rows, joining and leaving at random calls, prompts in chunks, a bf16
//! step under the near-tie rule, a mesh artifact, transformers' StaticCache export in waves,
//! and an encoder–decoder model one request after another. Each request's tokens are what it
//! gets alone.

use std::path::Path;

use super::parity::{compile_model, compile_model_with, TempDir};
use super::serving::decode_session;
use super::{run_cli, testdata};
use crate::npy::Array;

/// An encoder–decoder model served through a batcher (as `serve --encoder` does): requests
/// of T5's two prompts, one at a time, each encoded once as it takes the slot, get exactly
/// transformers' `generate` tokens — the same prompt twice too (the caches start again). A
/// request cancelled in its slot releases its states. A prompt the encoder cannot take, or
/// more tokens than the caches hold, is refused at submit; Whisper's encoder of features is
/// refused for requests of ids.
#[test]
fn encoder_decoder_requests_are_served_one_after_another() {
    let tmp = TempDir::new("seq2seq_batcher");
    let (encoder, decoder) = (compile_model("t5_gen_encoder", &tmp.0), compile_model("t5_gen_decoder", &tmp.0));
    let dir = testdata().join("models/t5_gen_decoder");
    let ints = |name: &str| {
        let a = Array::read(&dir.join(name)).expect("an array");
        (0..a.numel() as usize).filter_map(|i| a.get_f64(i)).map(|v| v as i64).collect::<Vec<i64>>()
    };
    let mut session = decode_session(&decoder);
    let mut batcher = crate::run::Batcher::seq2seq(&session, decode_session(&encoder), 0).expect("a seq2seq batcher");
    assert_eq!(batcher.slots(), 1);
    let cases = [("prompt.npy", "tokens.npy"), ("prompt_short.npy", "tokens_short.npy"), ("prompt.npy", "tokens.npy")];
    let request = |prompt: Vec<i64>, n: usize| crate::run::Request {
        prompt,
        max_new_tokens: n,
        stop: Vec::new(),
        sampling: crate::run::Sampling::GREEDY,
        logprobs: None,
        seed: 0,
    };
    let ids: Vec<u64> = cases.iter().map(|(p, _)| batcher.submit(request(ints(p), 12)).expect("fits")).collect();
    let mut done = std::collections::BTreeMap::new();
    while !batcher.is_idle() {
        assert!(batcher.busy() <= 1);
        for f in batcher.step(&mut session).expect("steps").finished {
            done.insert(f.id, f.tokens);
        }
    }
    for (id, (_, tokens)) in ids.iter().zip(cases) {
        assert_eq!(done[id], ints(tokens), "request {id}");
    }
    assert_eq!(session.held_inputs(), 0, "the last request's states left with it");
    // A request cancelled in its slot (its client went away) takes its states with it, and the
    // next one gets its tokens as if it had never been.
    let cancelled = batcher.submit(request(ints("prompt.npy"), 12)).expect("fits");
    batcher.step(&mut session).expect("steps");
    assert_eq!(session.held_inputs(), 1, "the states are held while the request is served");
    assert!(batcher.cancel(&mut session, cancelled));
    assert_eq!(session.held_inputs(), 0, "the cancelled request's states left the devices");
    let next = batcher.submit(request(ints("prompt_short.npy"), 12)).expect("fits");
    let mut tokens = Vec::new();
    while !batcher.is_idle() {
        tokens.extend(batcher.step(&mut session).expect("steps").finished.into_iter().filter(|f| f.id == next));
    }
    assert_eq!(tokens[0].tokens, ints("tokens_short.npy"));
    let err = batcher.submit(request(vec![3; 300], 4)).unwrap_err().to_string();
    assert!(err.contains("300 prompt tokens: the encoder takes 2 to"), "{err}");
    let err = batcher.submit(request(ints("prompt.npy"), 40)).unwrap_err().to_string();
    assert!(err.contains("40 new tokens need as many positions; the decoder's caches hold 32"), "{err}");

    let whisper = compile_model("whisper_gen_encoder", &tmp.0);
    let whisper_decoder = decode_session(&compile_model("whisper_gen_decoder", &tmp.0));
    let refused = crate::run::Batcher::seq2seq(&whisper_decoder, decode_session(&whisper), 1);
    let err = refused.err().expect("refused").to_string();
    assert!(err.contains("not token ids"), "{err}");
}

/// The requests of `model`'s references: each row of `prompts.npy` up to its padding, asking
/// for `n` tokens; and each one's 16 tokens decoded alone by eager.
fn row_requests(model: &str, n: impl Fn(usize) -> usize) -> (Vec<crate::run::Request>, Vec<Vec<i64>>) {
    let dir = testdata().join("models").join(model);
    let ints = |name: &str| {
        let a = Array::read(&dir.join(name)).expect("an array");
        let values: Vec<i64> = (0..a.numel() as usize).filter_map(|i| a.get_f64(i)).map(|v| v as i64).collect();
        let width = *a.shape.last().expect("a dim") as usize;
        values.chunks(width).map(<[i64]>::to_vec).collect::<Vec<_>>()
    };
    let requests = ints("prompts.npy")
        .into_iter()
        .enumerate()
        .map(|(i, row)| crate::run::Request {
            prompt: row.into_iter().take_while(|&t| t >= 0).collect(),
            max_new_tokens: n(i),
            stop: Vec::new(),
            sampling: crate::run::Sampling::GREEDY,
            logprobs: None,
            seed: 0,
        })
        .collect();
    (requests, ints("tokens.npy"))
}

/// Seven requests of 1 to 9 prompt tokens through the four slots of a decode step that takes a
/// position per row: each gets exactly the tokens eager decodes for it alone, in fewer calls
/// than one request at a time would take. The same requests through `decoder_kv` (the same
/// weights, one row, one position for all) go in waves of one and agree. The command line
/// serves a padded prompt file the same way.
#[test]
fn requests_of_different_lengths_share_the_slots() {
    let tmp = TempDir::new("batching");
    let rows = compile_model("decoder_rows", &tmp.0);
    let (requests, eager) = row_requests("decoder_rows", |_| 16);
    let alone: u64 = requests.iter().map(|r| (r.prompt.len() + 15) as u64).sum();
    let served = crate::run::serve_all(&mut decode_session(&rows), requests.clone()).expect("serves");
    assert!(served.continuous && served.slots == 4, "{served:?}");
    for (i, r) in served.requests.iter().enumerate() {
        assert_eq!(r.tokens, eager[i], "request {i}");
    }
    let f = &served.figures;
    assert_eq!(f.new_tokens, 7 * 16);
    assert!(f.calls < alone / 2 && served.occupancy > 0.75, "{f:?}: {} calls alone", alone);

    // The same slots through a prefill program: each prompt goes in one call, beside the
    // others' decoding.
    let prefill = compile_model("decoder_rows_prefill", &tmp.0);
    let chunked = crate::run::serve_all(&mut decode_session(&prefill), requests.clone()).expect("serves");
    for (i, r) in chunked.requests.iter().enumerate() {
        assert_eq!(r.tokens, eager[i], "request {i}, prompts in chunks");
        assert!(r.calls <= 16, "request {i} took {} calls: its prompt went in one", r.calls);
    }
    assert!(chunked.figures.calls < f.calls, "{:?} against {f:?}", chunked.figures);

    // One row and one position for all, a step taking 1 to 64 tokens: waves of one, each
    // prompt in one call.
    let kv = compile_model("decoder_kv", &tmp.0);
    let waves = crate::run::serve_all(&mut decode_session(&kv), requests).expect("serves");
    assert!(!waves.continuous && waves.slots == 1);
    assert_eq!(waves.figures.calls, 7 * 16);
    for (i, r) in waves.requests.iter().enumerate() {
        assert_eq!(r.tokens, eager[i], "request {i} in waves");
    }

    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let prompts = s(&testdata().join("models/decoder_rows/prompts.npy"));
    let out = tmp.0.join("tokens.npy");
    let args = ["generate", &s(&rows), "--prompt", &prompts, "--max-new-tokens", "16", "--out", &s(&out)];
    let (code, text, err) = run_cli(&args);
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("7 requests in 4 slots (joining at any call): 112 new tokens"), "{text}");
    let expected = Array::read(&testdata().join("models/decoder_rows/tokens.npy")).expect("tokens");
    assert!(crate::run::compare(&Array::read(&out).expect("written"), &expected).ok);
    let logits = s(&tmp.0.join("logits.npy"));
    let (code, _, err) = run_cli(&[&args[..], &["--logits-out", &logits]].concat());
    assert_eq!(code, 1);
    assert!(err.contains("`--logits-out` is for one batch of prompts of one length"), "{err}");
    let (code, _, err) = run_cli(&["generate", &s(&rows), "--prompt", &prompts, "--max-new-tokens", "60"]);
    assert_eq!(code, 1);
    assert!(err.contains("6 prompt tokens and 60 new ones need 66 positions; the caches hold 64"), "{err}");
}

/// Over a mesh of CPU devices, the batch split (`dp`), the heads, projections and KV caches
/// (`tp`), or both, the batcher serves the same requests with the same tokens, prompts in
/// chunks.
#[test]
fn a_mesh_artifact_serves_requests_as_one_device_does() {
    let tmp = TempDir::new("batching_mesh");
    let (requests, eager) = row_requests("decoder_rows_prefill", |_| 16);
    for (mesh, devices) in [("dp=2", 2), ("tp=2", 2), ("dp=2,tp=2", 4)] {
        let dir = tmp.0.join(mesh);
        std::fs::create_dir_all(&dir).expect("a folder");
        let artifact = compile_model_with("decoder_rows_prefill", &dir, &super::sharding::request(mesh));
        let mut session = decode_session(&artifact);
        let split = session.manifest().sharding.as_ref().map(|s| s.mesh.iter().map(|a| a.size).product::<i64>());
        assert_eq!(split, Some(devices), "{mesh}: split over {devices} devices");
        let served = crate::run::serve_all(&mut session, requests.clone()).expect("serves");
        assert!(served.continuous && served.slots == 4, "{mesh}: {served:?}");
        for (i, r) in served.requests.iter().enumerate() {
            assert_eq!(r.tokens, eager[i], "{mesh}, request {i}");
        }
    }
}

/// A bf16 step (decoder_rows' weights rounded to bf16, bf16 caches and activations), its
/// prompts in chunks beside the others' decoding: every request's tokens are what eager (a bf16
/// batch-1 copy) decodes for it alone, under the near-tie rule of `first_difference`.
#[test]
fn bf16_requests_share_the_slots_up_to_near_ties() {
    let tmp = TempDir::new("batching_bf16");
    let model = "decoder_rows_bf16";
    let artifact = compile_model(model, &tmp.0);
    let (requests, eager) = row_requests(model, |_| 16);
    let logits = Array::read(&testdata().join("models").join(model).join("logits.npy")).expect("eager's logits");
    let vocab = *logits.shape.last().expect("a dim") as usize;
    let served = crate::run::serve_all(&mut decode_session(&artifact), requests).expect("serves");
    assert!(served.continuous && served.slots == 4, "{served:?}");
    let mut exact = 0;
    for (i, r) in served.requests.iter().enumerate() {
        let step_logits = |k: usize| logits.f32_range((i * 16 + k) * vocab, vocab).expect("a row of logits");
        match first_difference(&r.tokens, &eager[i], step_logits) {
            Ok(None) => exact += 1,
            Ok(Some(k)) => eprintln!("request {i}: a near tie at token {k}, the rest its own"),
            Err(e) => panic!("request {i}: {e}"),
        }
    }
    eprintln!("bf16 batching: {exact} of 7 requests exactly eager's tokens");
}

/// The near-tie rule for bf16 decoding: `ours` equals `eager` up to the first token that
/// differs, and there eager's own logits (`logits(k)`, step `k`) hold the two tokens within
/// `NEAR_TIE` of the larger logit's magnitude (at least 1): 4 units in the last place of bf16's
/// 8 significant bits, where two exact programs may round apart. From that token on, each
/// decoding continues from its own text and nothing more is compared. `Ok(None)`: equal.
fn first_difference(ours: &[i64], eager: &[i64], logits: impl Fn(usize) -> Vec<f32>) -> Result<Option<usize>, String> {
    const NEAR_TIE: f32 = 1.0 / 32.0;
    if ours.len() != eager.len() {
        return Err(format!("{} tokens, eager {}", ours.len(), eager.len()));
    }
    let Some(k) = ours.iter().zip(eager).position(|(a, b)| a != b) else { return Ok(None) };
    let row = logits(k);
    let logit = |t: i64| usize::try_from(t).ok().and_then(|t| row.get(t).copied());
    let (Some(ours_logit), Some(eager_logit)) = (logit(ours[k]), logit(eager[k])) else {
        return Err(format!("token {k}: {} or {} is not an id", ours[k], eager[k]));
    };
    let gap = eager_logit - ours_logit;
    let bound = NEAR_TIE * eager_logit.abs().max(1.0);
    if gap > bound {
        return Err(format!(
            "token {k} is {} where eager chose {} by a logit gap of {gap} (a near tie is within {bound}): {ours:?} against {eager:?}",
            ours[k], eager[k]
        ));
    }
    Ok(Some(k))
}

#[test]
fn the_near_tie_rule_takes_only_near_ties() {
    let logits = |_| vec![2.0, 1.99, 1.5, -4.0];
    assert_eq!(first_difference(&[0, 2, 1], &[0, 2, 1], logits), Ok(None));
    assert_eq!(first_difference(&[0, 1, 3], &[0, 0, 1], logits), Ok(Some(1)));
    assert!(first_difference(&[0, 2], &[0, 0], logits).unwrap_err().contains("a logit gap of 0.5"));
    assert!(first_difference(&[0, 9], &[0, 0], logits).unwrap_err().contains("is not an id"));
    assert!(first_difference(&[0], &[0, 0], logits).is_err());
}

/// Continuous batching with requests arriving at random calls (seeded), asking for 1 to 16
/// tokens, some ending at a stop token, some cancelled (a client gone): every other request
/// gets the beginning of what eager decodes for it alone, up to its stop token, and some wait
/// for a slot. Through a step of one token a call, and through a prefill program (prompts in
/// chunks beside the others' decoding).
#[test]
fn requests_arriving_and_leaving_at_random_calls_equal_solo_runs() {
    let tmp = TempDir::new("continuous");
    for model in ["decoder_rows", "decoder_rows_prefill"] {
        arrive_and_leave_at_random(model, &tmp.0);
    }
}

fn arrive_and_leave_at_random(model: &str, tmp: &Path) {
    let rows = compile_model(model, tmp);
    let mut session = decode_session(&rows);
    let mut state = 0x5eed_u64;
    let mut random = |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for round in 0..3 {
        let mut batcher = crate::run::Batcher::new(&session).expect("a decode step");
        let (requests, eager) = row_requests(model, |_| 16);
        // Three passes over the seven requests, each with its own length and maybe a stop token.
        let mut pending: Vec<(usize, crate::run::Request)> = Vec::new();
        for pass in 0..3 {
            for (i, mut r) in requests.iter().cloned().enumerate() {
                r.max_new_tokens = 1 + random(16) as usize;
                if random(3) == 0 {
                    r.stop = vec![eager[i][random(16) as usize]];
                }
                pending.push((i + 7 * pass, r));
            }
        }
        let mut submitted = std::collections::BTreeMap::new();
        let (mut done, mut waited, mut cancelled) = (Vec::new(), 0, Vec::new());
        while !pending.is_empty() || !batcher.is_idle() {
            for _ in 0..random(3) {
                if !pending.is_empty() {
                    let (i, r) = pending.remove(random(pending.len() as u64) as usize);
                    submitted.insert(batcher.submit(r.clone()).expect("fits"), (i % 7, r));
                }
            }
            // Now and then a client goes away, waiting or in its slot.
            if random(8) == 0 {
                let id = random(submitted.len() as u64);
                if !done.iter().any(|f: &crate::run::Finished| f.id == id) && batcher.cancel(&mut session, id) {
                    cancelled.push(id);
                }
            }
            for f in batcher.step(&mut session).expect("steps").finished {
                waited += f.waited;
                done.push(f);
            }
        }
        assert!(!cancelled.is_empty(), "{model}, round {round}: some requests were cancelled");
        assert_eq!(done.len() + cancelled.len(), 21, "{model}, round {round}: nothing lost");
        assert!(done.iter().all(|f| !cancelled.contains(&f.id)));
        for f in &done {
            let (i, r) = &submitted[&f.id];
            let solo = &eager[*i];
            let end =
                solo.iter().take(r.max_new_tokens).position(|t| r.stop.contains(t)).map_or(r.max_new_tokens, |p| p + 1);
            assert_eq!(f.tokens, solo[..end], "{model}, round {round}, request {} (row {i}, {r:?})", f.id);
        }
        assert!(waited > 0, "{model}: some requests waited for a slot");
    }
}

/// The seven requests of `model` (a step of 4 rows and one position for all rows) served in waves
/// of four, each getting exactly the tokens transformers' `generate` gives it alone; the calls
/// it took.
fn serves_rows_in_waves(model: &str) -> u64 {
    let tmp = TempDir::new(model);
    let artifact = compile_model(model, &tmp.0);
    let (requests, eager) = row_requests(model, |_| 16);
    let served = crate::run::serve_all(&mut decode_session(&artifact), requests).expect("serves");
    assert!(!served.continuous && served.slots == 4, "{model}: {served:?}");
    for (i, r) in served.requests.iter().enumerate() {
        assert_eq!(r.tokens, eager[i], "{model}: request {i}");
    }
    served.figures.calls
}

/// transformers' StaticCache export recipe with a batch of 4 (one position for all rows): the
/// seven requests go in waves of four, prompts of different lengths sharing the calls, one token
/// a call: the longest prompt of each wave (9, then 7 tokens) and its 16 new ones.
#[test]
fn transformers_static_cache_batches_serve_requests_in_waves() {
    assert_eq!(serves_rows_in_waves("hf_static_rows"), (9 + 15) + (7 + 15));
}

/// The program `python -m torchtpu_compile.export` writes (the same recipe, 4 slots, a prefill
/// chunk of 1 to 8 tokens; a Qwen3-MoE whose experts call transformers' own
/// `grouped_mm_fallback`): the same waves, the prompts' first tokens in fewer calls.
#[test]
fn the_export_commands_program_serves_requests_in_waves_with_chunks() {
    assert!(serves_rows_in_waves("hf_export_moe") < (9 + 15) + (7 + 15));
}
