//! Programs with state, served: updated buffers written as `state_<fqn>.npy` and carried
//! from run to run (`--state-in`/`--state-out`), a session keeping them on the device across
//! calls, `generate`'s decode loop against eager's greedy decoding, and a session called
//! 10,000 times with a flat resident set.

use std::path::{Path, PathBuf};

use super::parity::{case_inputs, compile_model, compile_model_with, request, TempDir};
use super::{run_cli, testdata};
use crate::npy::Array;
use torchtpu_passes::ir::DType;

/// A training step's updated BatchNorm statistics are written as `state_<fqn>.npy` and its
/// loss and gradients as `out_<j>.npy`, each compared with the reference's file of that name;
/// `inspect` lists which output goes to which file.
#[test]
fn updated_buffers_are_state_files_and_user_outputs_come_first() {
    let tmp = TempDir::new("state-files");
    let artifact = compile_model("train_cnn", &tmp.0);
    let dir = testdata().join("models/train_cnn");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let out = tmp.0.join("out");
    let (art, ins) = (s(&artifact), [s(&dir.join("in_0.npy")), s(&dir.join("in_1.npy"))]);
    let args = ["run", &art, &ins[0], &ins[1], "--out-dir", &s(&out), "--reference", &s(&dir)];
    let (code, text, err) = run_cli(&args);
    assert_eq!(code, 0, "{text}{err}");
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .expect("outputs")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let state = ["state_bn.num_batches_tracked.npy", "state_bn.running_mean.npy", "state_bn.running_var.npy"];
    let expected: Vec<String> = (0..7).map(|j| format!("out_{j}.npy")).chain(state.map(String::from)).collect();
    assert_eq!(files, expected);
    assert_eq!(text.matches("matches the reference").count(), 10, "every output compared: {text}");
    let (code, text, err) = run_cli(&["inspect", &art]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("  out_0.npy: div f32[]  (loss)"), "{text}");
    assert!(
        text.contains("  state_bn.running_mean.npy: getitem_3 f32[8]  (buffer_mutation bn.running_mean)"),
        "{text}"
    );
}

/// `--state-out` then `--state-in`: a training step's BatchNorm statistics carried into a
/// second step. `num_batches_tracked` goes 0, 1, 2 and the running mean follows
/// `m2 = 0.9 m1 + 0.1 b` for the same batch's mean `b`; without `--state-in` a step starts
/// again from the artifact's statistics; `--repeat 3` makes three calls, each from the state
/// the last left (`--repeat 0` is a usage error). Missing or misshapen state is refused by name.
#[test]
fn state_carries_from_one_run_to_the_next() {
    let tmp = TempDir::new("state-in");
    let artifact = compile_model("train_cnn", &tmp.0);
    let dir = testdata().join("models/train_cnn");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let step_with = |name: &str, state_in: Option<&Path>, extra: &[&str]| {
        let (art, out, state) = (s(&artifact), s(&tmp.0.join(format!("out-{name}"))), s(&tmp.0.join(name)));
        let ins = [s(&dir.join("in_0.npy")), s(&dir.join("in_1.npy"))];
        let mut args = vec!["run", &art, &ins[0], &ins[1], "--out-dir", &out, "--state-out", &state];
        let given = state_in.map(s);
        if let Some(g) = &given {
            args.extend(["--state-in", g]);
        }
        args.extend_from_slice(extra);
        run_cli(&args)
    };
    let step = |name: &str, state_in: Option<&Path>| step_with(name, state_in, &[]);
    let read = |name: &str, file: &str| {
        let a = Array::read(&tmp.0.join(name).join(file)).expect("state written");
        (0..a.numel() as usize).filter_map(|i| a.get_f64(i)).collect::<Vec<f64>>()
    };
    let (code, _, err) = step("s1", None);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = step("s2", Some(&tmp.0.join("s1")));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = step("again", None);
    assert_eq!(code, 0, "{err}");
    let tracked = "state_bn.num_batches_tracked.npy";
    assert_eq!((read("s1", tracked), read("s2", tracked), read("again", tracked)), (vec![1.0], vec![2.0], vec![1.0]));
    let (code, _, err) = step_with("repeated", None, &["--repeat", "3"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read("repeated", tracked), vec![3.0]);
    assert_eq!(step_with("never", None, &["--repeat", "0"]).0, 2);
    // The artifact's statistics: the archive's buffer.
    let program = crate::import::import(&testdata().join("models/train_cnn.pt2")).expect("imports");
    let stored = &program.weights["bn.running_mean"];
    let m0: Vec<f64> = stored
        .contiguous_bytes(&program.archive)
        .expect("decodes")
        .chunks(4)
        .map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4 bytes"))))
        .collect();
    let (m1, m2) = (read("s1", "state_bn.running_mean.npy"), read("s2", "state_bn.running_mean.npy"));
    for ((m0, m1), m2) in m0.iter().zip(&m1).zip(&m2) {
        let batch_mean = (m1 - 0.9 * m0) / 0.1;
        assert!((m2 - (0.9 * m1 + 0.1 * batch_mean)).abs() < 1e-5, "{m0} {m1} {m2}");
    }
    // A missing file, and one of another shape.
    std::fs::remove_file(tmp.0.join("s2").join(tracked)).expect("removed");
    let (code, _, err) = step("s3", Some(&tmp.0.join("s2")));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("state_bn.num_batches_tracked.npy"), "{err}");
    std::fs::copy(tmp.0.join("s1").join("state_bn.running_var.npy"), tmp.0.join("s1").join(tracked)).expect("copied");
    let (code, _, err) = step("s3", Some(&tmp.0.join("s1")));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`bn.num_batches_tracked` is i64, the value given is f32"), "{err}");
}

/// A session keeps the updated BatchNorm statistics on the device from call to call (the
/// steps count 1, 2, 3), gives each call's outputs, and `reset` starts again from the artifact's.
#[test]
fn a_session_carries_state_across_calls_and_resets() {
    let tmp = TempDir::new("session");
    let artifact = compile_model("train_cnn", &tmp.0);
    let dir = testdata().join("models/train_cnn");
    let labels = [dir.join("in_0.npy"), dir.join("in_1.npy")];
    let inputs: Vec<Array> = labels.iter().map(|p| Array::read(p).expect("input")).collect();
    let verification = crate::run::Verification { always_hash: true, cache: None };
    let mut session =
        crate::run::Session::open(&artifact, crate::run::DeviceKind::Cpu, None, &verification).expect("opens");
    let files = crate::artifact::output_files(&session.manifest().signature.outputs);
    // The updated statistics stay on the device: a call returns the loss and gradients only.
    let returned: Vec<&str> = session.returned_outputs().iter().map(|&j| files[j].as_str()).collect();
    assert!(returned.iter().all(|f| f.starts_with("out_")) && returned.len() == 7, "{returned:?}");
    let tracked = |s: &crate::run::Session| {
        let state = s.state().expect("the state");
        state.iter().find(|(n, _)| n == "bn.num_batches_tracked").expect("tracked").1.get_f64(0)
    };
    let mut steps = Vec::new();
    for _ in 0..3 {
        session.call(&inputs, &labels, 0).expect("runs");
        steps.push(tracked(&session));
    }
    assert_eq!(steps, [Some(1.0), Some(2.0), Some(3.0)]);
    session.reset().expect("resets");
    let first = session.call(&inputs, &labels, 0).expect("runs");
    assert_eq!(tracked(&session), Some(1.0));
    // The first step's loss and gradients are eager's.
    let loss = Array::read(&dir.join("out_0.npy")).expect("reference");
    let loss_at = returned.iter().position(|f| *f == "out_0.npy").expect("the loss");
    assert!(crate::run::compare(&first.outputs[loss_at], &loss).ok);
}

/// `generate` on the gpt-fast-style decoder: the prompt fed token by token, then 24 greedy
/// tokens, exactly eager's, with their logits within tolerance. The same loop with the caches
/// reset before every call (no state carried) gives other tokens. Limits are refused.
#[test]
fn generate_reproduces_eager_decoding() {
    let tmp = TempDir::new("generate");
    let artifact = compile_model("decoder_kv", &tmp.0);
    let dir = testdata().join("models/decoder_kv");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let (art, prompt) = (s(&artifact), s(&dir.join("prompt.npy")));
    let (tokens, logits) = (tmp.0.join("tokens.npy"), tmp.0.join("logits.npy"));
    let args = ["generate", &art, "--prompt", &prompt, "--max-new-tokens", "24", "--out", &s(&tokens)];
    let (code, text, err) = run_cli(&[&args[..], &["--logits-out", &s(&logits)]].concat());
    assert_eq!(code, 0, "{text}{err}");
    // The step takes 1 to 64 tokens (compiled with buckets): the prompt goes in one call.
    assert!(text.contains("6 prompt tokens") && text.contains("(1 call)"), "{text}");
    assert!(text.contains("24 new tokens") && text.contains("tokens/s"), "{text}");
    let read = |p: &Path| Array::read(p).expect("an array");
    let eager_tokens = read(&dir.join("tokens.npy"));
    assert!(crate::run::compare(&read(&tokens), &eager_tokens).ok, "the tokens differ from eager's");
    assert!(crate::run::compare(&read(&logits), &read(&dir.join("logits.npy"))).ok, "the logits differ");
    // Without state carried across calls: the caches start from zeros at every step.
    let mut session = decode_session(&artifact);
    let labels = [PathBuf::from("ids"), PathBuf::from("pos")];
    let ids: Vec<i64> = (0..6).filter_map(|i| read(&dir.join("prompt.npy")).get_f64(i)).map(|v| v as i64).collect();
    let (mut next, mut stateless) = (ids[0], Vec::new());
    for p in 0..29 {
        session.reset().expect("resets");
        let called = session.call(&[int_array(next, vec![1, 1]), int_array(p, vec![1])], &labels, 0).expect("runs");
        let logits = called.outputs.last().expect("the logits");
        let row: Vec<f64> = (0..64).filter_map(|i| logits.get_f64(i)).collect();
        let argmax = (0..64).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as i64;
        next = if (p as usize) + 1 < ids.len() { ids[p as usize + 1] } else { argmax };
        if p as usize + 1 >= ids.len() {
            stateless.push(argmax);
        }
    }
    let eager: Vec<i64> = (0..24).filter_map(|i| eager_tokens.get_f64(i)).map(|v| v as i64).collect();
    assert_ne!(stateless, eager, "without the caches carried, decoding must differ");
    // The caches hold 64 positions; a float prompt; a program that is no decode step.
    refused(
        &["generate", &art, "--prompt", &prompt, "--max-new-tokens", "60"],
        1,
        "6 prompt tokens and 60 new ones need 66 positions; the caches hold 64",
    );
    let floats = s(&dir.join("logits.npy"));
    refused(
        &["generate", &art, "--prompt", &floats, "--max-new-tokens", "2"],
        1,
        "token ids must be integers, not f32",
    );
    let mlp = compile_model("mlp", &tmp.0);
    refused(
        &["generate", &s(&mlp), "--prompt", &prompt, "--max-new-tokens", "2"],
        1,
        "not a decode step `generate` knows",
    );
}

/// The decoder's four KV caches are aliased to their new values in the program, so each call
/// donates them and XLA updates them in place; copying them instead (`--no-donate`) decodes
/// the same tokens. A session reads its state back whole.
#[test]
fn caches_are_updated_in_place_and_read_back() {
    let tmp = TempDir::new("donation");
    let artifact = compile_model("decoder_kv", &tmp.0);
    let art = crate::artifact::Artifact::open_but_weights(&artifact).expect("opens");
    let programs: Vec<&String> = art.zip().entries().keys().filter(|e| e.starts_with("programs/")).collect();
    assert!(!programs.is_empty());
    for entry in programs {
        let program = String::from_utf8_lossy(art.zip().get(entry).expect("the program"));
        for j in 0..4 {
            assert!(program.contains(&format!("{{tf.aliasing_output = {j} : i32}}")), "{entry}: cache {j}");
        }
    }
    drop(art);
    let dir = testdata().join("models/decoder_kv");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let (art, prompt) = (s(&artifact), s(&dir.join("prompt.npy")));
    let tokens = |extra: &[&str]| {
        let args = ["generate", &art, "--prompt", &prompt, "--max-new-tokens", "24"];
        let (code, text, err) = run_cli(&[&args[..], extra].concat());
        assert_eq!(code, 0, "{text}{err}");
        text.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(tokens(&[]), tokens(&["--no-donate"]));
    // After one step at position 0 the caches hold that position only.
    let mut session = decode_session(&artifact);
    let labels = [PathBuf::from("ids"), PathBuf::from("pos")];
    session.call(&[int_array(5, vec![1, 1]), int_array(0, vec![1])], &labels, 0).expect("runs");
    let state = session.state().expect("the state");
    assert_eq!(state.len(), 4);
    for (name, cache) in &state {
        assert_eq!(cache.shape, [1, 2, 64, 16], "{name}");
        let row = |p: usize| (0..2 * 16).map(move |i| cache.get_f64((i / 16) * 64 * 16 + p * 16 + i % 16));
        assert!(row(0).any(|v| v != Some(0.0)), "{name}: position 0 written");
        assert!(row(1).all(|v| v == Some(0.0)), "{name}: position 1 untouched");
    }
}

/// `--device tpu` on a machine without TPU chips is an environment problem (exit 3) told
/// before libtpu is loaded; the CPU is the default device.
#[test]
fn the_tpu_device_needs_tpu_chips() {
    let any = |dir: &str, keep: fn(&str) -> bool| {
        std::fs::read_dir(dir).map(|d| d.flatten().any(|e| keep(&e.file_name().to_string_lossy()))).unwrap_or(false)
    };
    let has_tpu = any("/dev", |n| n.starts_with("accel")) || any("/dev/vfio", |n| n.parse::<u32>().is_ok());
    assert!(!has_tpu, "this test is written for machines without a TPU");
    let tmp = TempDir::new("device");
    let artifact = compile_model("mlp", &tmp.0);
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let input = s(&testdata().join("models/mlp/in_0.npy"));
    let out = s(&tmp.0.join("out"));
    refused(&["run", &s(&artifact), &input, "--device", "tpu", "--out-dir", &out], 3, "this machine has no TPU");
    let (code, text, err) = run_cli(&["run", &s(&artifact), &input, "--device", "cpu", "--out-dir", &out]);
    assert_eq!(code, 0, "{text}{err}");
}

/// transformers' own export recipe for a `StaticCache` decoder (`input_ids`, `cache_position`,
/// per-layer caches and length counters as non-persistent buffers): `generate` decodes exactly
/// the tokens of transformers' greedy `generate` and their logits within tolerance.
#[test]
fn generate_follows_transformers_static_cache_export() {
    let tmp = TempDir::new("hf-static-cache");
    let artifact = compile_model("hf_static_cache", &tmp.0);
    let dir = testdata().join("models/hf_static_cache");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let (tokens, logits) = (tmp.0.join("tokens.npy"), tmp.0.join("logits.npy"));
    let (art, prompt) = (s(&artifact), s(&dir.join("prompt.npy")));
    let args = ["generate", &art, "--prompt", &prompt, "--max-new-tokens", "24", "--out", &s(&tokens)];
    let (code, text, err) = run_cli(&[&args[..], &["--logits-out", &s(&logits)]].concat());
    assert_eq!(code, 0, "{text}{err}");
    let read = |p: &Path| Array::read(p).expect("an array");
    // A static [1, 1] step: the prompt goes one token per call.
    assert!(text.contains("6 prompt tokens") && text.contains("(6 calls)"), "{text}");
    assert!(crate::run::compare(&read(&tokens), &read(&dir.join("tokens.npy"))).ok, "tokens differ: {text}");
    assert!(crate::run::compare(&read(&logits), &read(&dir.join("logits.npy"))).ok, "the logits differ");
}

/// Blocked attention reads no block of a decode step's caches past its position: NaN written
/// into transformers' static caches (48 positions) from position 16 on changes no logit of the
/// step at position 5 with blocks of 8 keys (the causal mask leaves positions 0 to 5, so blocks
/// 2 to 5 are skipped), while the naive form, which reads every position, gives NaN logits.
#[test]
fn a_blocked_decode_step_skips_the_cache_past_its_position() {
    let tmp = TempDir::new("skip-blocks");
    let logits_at_5 = |form: crate::emit::Attention, poisoned: bool| {
        let dir = tmp.0.join(form.name());
        std::fs::create_dir_all(&dir).expect("a folder");
        let mut req = request();
        req.attention = (form, Some(8));
        let artifact = dir.join("hf_static_cache.tpuexe");
        let artifact = if artifact.exists() { artifact } else { compile_model_with("hf_static_cache", &dir, &req) };
        let mut session = decode_session(&artifact);
        let labels = [PathBuf::from("ids"), PathBuf::from("pos")];
        let mut step = |token: i64, p: i64| {
            let called = session.call(&[int_array(token, vec![1, 1]), int_array(p, vec![1])], &labels, 0);
            called.expect("runs").outputs.pop().expect("the logits")
        };
        for (p, token) in [5, 9, 3, 17, 42].into_iter().enumerate() {
            step(token, p as i64);
        }
        if poisoned {
            let mut poisoned_caches = 0;
            for (name, mut cache) in session.state().expect("the state") {
                if cache.shape != [1, 1, 48, 16] {
                    continue;
                }
                for chunk in cache.data.chunks_exact_mut(4).skip(16 * 16) {
                    chunk.copy_from_slice(&f32::NAN.to_le_bytes());
                }
                session.set_state(&name, cache).expect("takes the caches");
                poisoned_caches += 1;
            }
            assert_eq!(poisoned_caches, 2, "a key and a value cache");
        }
        let called = session.call(&[int_array(8, vec![1, 1]), int_array(5, vec![1])], &labels, 0);
        called.expect("runs").outputs.pop().expect("the logits")
    };
    let nans = |a: &Array| (0..128).filter(|&i| a.get_f64(i).is_some_and(f64::is_nan)).count();
    let blocked = logits_at_5(crate::emit::Attention::Blocked, false);
    let naive = logits_at_5(crate::emit::Attention::Naive, false);
    assert!(crate::run::compare(&blocked, &naive).ok, "blocked and naive attention differ");
    assert_eq!(nans(&blocked), 0);
    assert_eq!(logits_at_5(crate::emit::Attention::Blocked, true).data, blocked.data, "a skipped block was read");
    assert_eq!(nans(&logits_at_5(crate::emit::Attention::Naive, true)), 128, "the naive form reads every position");
}

/// The command line refuses `args` with exit `code` and a message containing `message`.
fn refused(args: &[&str], code: u8, message: &str) {
    let (found, _, err) = run_cli(args);
    assert_eq!(found, code, "{err}");
    assert!(err.contains(message), "{err}");
}

/// A session on the decode step at `artifact`, for the CPU, weights not re-hashed.
pub(super) fn decode_session(artifact: &Path) -> crate::run::Session {
    let verification = crate::run::Verification { always_hash: false, cache: None };
    crate::run::Session::open(artifact, crate::run::DeviceKind::Cpu, None, &verification).expect("opens")
}

/// An `i64` array of `shape` holding the one value `v` (a token id, a position).
fn int_array(v: i64, shape: Vec<i64>) -> Array {
    Array { dtype: torchtpu_passes::ir::DType::I64, shape, data: v.to_le_bytes().to_vec() }
}

/// Set in the soak's child process: a JSON object `{"artifact": …, "calls": N, "result": …}`.
const SOAK: &str = "TORCHTPU_TEST_SOAK_CHILD";

/// The resident set of this process, in KiB (`VmRSS` of `/proc/self/status`).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number of KiB")
}

/// In the soak's child: the decode step called `calls` times, its caches carried and donated
/// from call to call, reset every 100 calls and read back every 10; writes the resident set
/// after each tenth of the calls. Does nothing in an ordinary test run.
#[test]
fn soak_child() {
    let Some(spec) = std::env::var_os(SOAK) else {
        return;
    };
    let spec: serde_json::Value = serde_json::from_str(&spec.to_string_lossy()).expect("the soak's spec");
    let artifact = PathBuf::from(spec["artifact"].as_str().expect("artifact"));
    let calls = spec["calls"].as_u64().expect("calls");
    let mut session = decode_session(&artifact);
    let labels = [PathBuf::from("ids"), PathBuf::from("pos")];
    let mut rss = Vec::new();
    for i in 0..calls {
        if i % 100 == 0 {
            session.reset().expect("resets");
        }
        let position = (i % 100) as i64; // the caches hold 64 positions; the step wraps
        session.call(&[int_array(7, vec![1, 1]), int_array(position % 64, vec![1])], &labels, 0).expect("runs");
        if i % 10 == 0 {
            assert!(!session.state().expect("the state").is_empty());
        }
        if (i + 1) % (calls / 10).max(1) == 0 {
            rss.push(rss_kib());
        }
    }
    let result = serde_json::json!({ "rss_kib": rss });
    std::fs::write(spec["result"].as_str().expect("result path"), result.to_string()).expect("writes the result");
}

/// A session called 10,000 times (the decode step of `decoder_kv`, with its caches carried and
/// donated, reset every 100 calls and read back every 10) keeps a flat resident set: after
/// the first 1,000 calls it grows by less than 16 MiB, measured in a child process.
#[test]
fn a_session_called_ten_thousand_times_keeps_a_flat_rss() {
    let tmp = TempDir::new("soak");
    let artifact = compile_model("decoder_kv", &tmp.0);
    let result = tmp.0.join("soak.json");
    let spec = serde_json::json!({ "artifact": artifact, "calls": 10_000, "result": result });
    let status = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["tests::serving::soak_child", "--exact", "--test-threads=1"])
        .env(SOAK, spec.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("runs the child");
    assert!(status.success(), "the soak's child failed: {status}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&result).expect("the result")).expect("json");
    let rss: Vec<u64> = r["rss_kib"].as_array().expect("rss").iter().filter_map(serde_json::Value::as_u64).collect();
    assert_eq!(rss.len(), 10, "{rss:?}");
    let growth = rss[9].saturating_sub(rss[0]);
    eprintln!("soak: resident set after each 1,000 calls (KiB): {rss:?}; growth {growth} KiB");
    assert!(growth < 16 * 1024, "the resident set grew by {growth} KiB over 9,000 calls: {rss:?}");
}

/// An input the session holds on the devices (`hold_input`) stands for the one a call gives:
/// BERT's attention mask held, each call giving only its token ids (and an empty array for
/// the mask), returns what the calls giving both return, at two lengths in two buckets; a
/// held input of the wrong dtype or index is refused, and one of another length than the ids
/// is refused by the call as a given input would be.
#[test]
fn a_held_input_stands_for_the_given_one() {
    let tmp = TempDir::new("held_input");
    let artifact = compile_model("bert_meanpool", &tmp.0);
    let mut session = decode_session(&artifact);
    let labels = [PathBuf::from("ids"), PathBuf::from("mask")];
    let empty = || Array { dtype: DType::I64, shape: vec![], data: vec![] };
    let inputs = |case: &str| -> [Array; 2] {
        let arrays: Vec<Array> =
            case_inputs("bert_meanpool", case).iter().map(|p| Array::read(p).expect("an input")).collect();
        arrays.try_into().expect("two inputs")
    };
    for case in ["", "_case3"] {
        let [ids, mask] = inputs(case);
        let given = session.call(&[ids.clone(), mask.clone()], &labels, 0).expect("runs").outputs;
        session.hold_input(1, mask).expect("held");
        let held = session.call(&[ids, empty()], &labels, 0).expect("runs with the mask held");
        assert_eq!(held.outputs.len(), given.len());
        for (a, b) in held.outputs.iter().zip(&given) {
            assert_eq!(a.data, b.data, "case {case:?}: the held mask gives other outputs");
        }
        session.release_inputs();
    }
    let [ids, mask] = inputs("");
    let err = session.hold_input(2, mask.clone()).unwrap_err().to_string();
    assert!(err.contains("there is no input 2 to hold"), "{err}");
    let floats = Array { dtype: DType::F32, shape: mask.shape.clone(), data: vec![0; mask.data.len() * 2] };
    let err = session.hold_input(1, floats).unwrap_err().to_string();
    assert!(err.contains("dtype"), "{err}");
    let [longer, _] = inputs("_case3");
    assert_ne!(longer.shape, ids.shape);
    session.hold_input(1, mask).expect("held");
    let err = session.call(&[longer, empty()], &labels, 0).err().expect("refused").to_string();
    assert!(err.contains("mask"), "{err}");
}

/// An encoder–decoder model as transformers' seq2seq export recipe writes it (a T5 encoder, and
/// a decoder step with static self-attention caches over the encoder's states of dynamic
/// length): the encoder once, then the decoder per token, gives exactly transformers' greedy
/// `generate` of the whole model, for a prompt of a bucket's size and one its bucket pads. A
/// Whisper, its encoder taking log-mel features, gives the greedy tokens of the whole eager
/// model. `generate` without `--encoder` says what is missing.
#[test]
fn encoder_decoder_generation_equals_transformers_generate() {
    let tmp = TempDir::new("seq2seq");
    let (encoder, decoder) = (compile_model("t5_gen_encoder", &tmp.0), compile_model("t5_gen_decoder", &tmp.0));
    let dir = testdata().join("models/t5_gen_decoder");
    let (mut enc, mut dec) = (decode_session(&encoder), decode_session(&decoder));
    for suffix in ["", "_short"] {
        let read = |name: &str| Array::read(&dir.join(format!("{name}{suffix}.npy"))).expect("an array");
        let req = crate::run::Seq2Seq {
            prompt: read("prompt"),
            start_token: 0,
            max_new_tokens: 12,
            eos: None,
            temperature: None,
            seed: 0,
            keep_logits: suffix.is_empty(),
        };
        let done = crate::run::generate_seq2seq(&mut enc, &mut dec, &req).expect("generates");
        assert!(crate::run::compare(&done.tokens, &read("tokens")).ok, "prompt{suffix}");
        // Greedy: each kept row of logits has its token as the largest value.
        let Some(logits) = done.logits else {
            assert!(!req.keep_logits, "the logits were asked for");
            continue;
        };
        let vocab = *logits.shape.last().expect("a vocab dim") as usize;
        assert_eq!(logits.shape, [1, 12, vocab as i64]);
        for k in 0..12 {
            let row = logits.f32_range(k * vocab, vocab).expect("a row");
            let best = row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
            assert_eq!(done.tokens.get_f64(k), Some(best as f64), "token {k}");
        }
    }
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let prompt = s(&dir.join("prompt.npy"));
    let args = ["generate", &s(&decoder), "--prompt", &prompt, "--max-new-tokens", "12"];
    let (code, text, err) = run_cli(&[&args[..], &["--encoder", &s(&encoder)]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(text.starts_with("tokens: 65 16 15 16"), "{text}");
    // Whisper: the encoder takes log-mel features, the decoder starts at its own token.
    let (encoder, decoder) =
        (compile_model("whisper_gen_encoder", &tmp.0), compile_model("whisper_gen_decoder", &tmp.0));
    let dir = testdata().join("models/whisper_gen_decoder");
    let read = |name: &str| Array::read(&dir.join(name)).expect("an array");
    let req = crate::run::Seq2Seq {
        prompt: read("features.npy"),
        start_token: 1,
        max_new_tokens: 12,
        eos: None,
        temperature: None,
        seed: 0,
        keep_logits: false,
    };
    let done = crate::run::generate_seq2seq(&mut decode_session(&encoder), &mut decode_session(&decoder), &req)
        .expect("generates");
    assert!(crate::run::compare(&done.tokens, &read("tokens.npy")).ok, "{:?}", done.tokens);
    let features = s(&dir.join("features.npy"));
    let whisper = ["generate", &s(&decoder), "--prompt", &features, "--max-new-tokens", "12", "--start-token", "1"];
    let (code, text, err) = run_cli(&[&whisper[..], &["--encoder", &s(&encoder)]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(text.starts_with("tokens: 7 7 7 7 61 37 122"), "{text}");
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 1);
    assert!(err.contains("give the encoder's artifact with `--encoder`"), "{err}");
    let (code, _, err) = run_cli(&[&args[..4], &["--max-new-tokens", "40", "--encoder", &s(&encoder)]].concat());
    assert_eq!(code, 1);
    assert!(err.contains("40 new tokens need as many positions; the decoder's caches hold 32"), "{err}");
}
