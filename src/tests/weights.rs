//! Where the weights live: `--weights external` artifacts run, reuse their weights file when a
//! compile would write the same bytes, and refuse one that changed (even with its modification
//! time put back), also under `--verify-weights`; an embedded weights entry damaged in place is
//! refused too, though `run` no longer reads it twice; two checkpoints of one architecture
//! share every executable, and an artifact runs another checkpoint's weights without a
//! recompile (a session swaps them; `run --checkpoint`).

use std::path::Path;

use serde_json::Value;

use super::cache::{assert_runs_correctly, compile, compile_args, outcomes, read, s};
use super::parity::TempDir;
use super::{run_cli, testdata};
use crate::artifact::{self, Artifact};

/// `run ART` on mlp's stored inputs with `extra`; (exit code, stderr).
fn run_mlp(art: &Path, out: &Path, extra: &[&str]) -> (u8, String) {
    let input = testdata().join("models/mlp/in_0.npy");
    let mut args = vec!["run", art.to_str().expect("utf-8"), input.to_str().expect("utf-8")];
    args.extend(["--out-dir", out.to_str().expect("utf-8")]);
    args.extend(extra);
    let (code, _, err) = run_cli(&args);
    (code, err)
}

/// Compiles `model` with `--weights external`; the summary's JSON.
fn compile_external(model: &str, art: &Path, cache: &Path) -> Value {
    let args = compile_args(model, art, cache, &["--target", "cpu", "--weights", "external"]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run_cli(&argv);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("json summary")
}

#[test]
fn external_weights_run_are_reused_and_a_changed_file_is_refused() {
    let tmp = TempDir::new("external-weights");
    let (cache, art) = (tmp.0.join("cache"), tmp.0.join("mlp.tpuexe"));
    let summary = compile_external("mlp", &art, &cache);
    let file = tmp.0.join("mlp.weights.safetensors");
    assert_eq!(summary["weights_file"]["path"], s(&file), "{summary}");
    assert_eq!(summary["weights_file"]["reused"], false);
    let a = Artifact::open(&art).expect("opens");
    assert!(a.zip().get(artifact::WEIGHTS).is_none(), "no weights inside the artifact");
    let w = &a.manifest.weights;
    assert!(w.external && w.entry == "mlp.weights.safetensors", "{w:?}");
    let blake3 = crate::digest::WeightsDigest::Blake3(blake3::hash(&read(&file)).to_hex().to_string());
    assert_eq!((w.bytes, &w.digest), (read(&file).len() as u64, &blake3));
    drop(a);
    assert_runs_correctly("mlp", &art, &tmp.0);
    let cache_dir = ["--cache-dir", &s(&cache)];
    let (code, err) = run_mlp(&art, &tmp.0, &[&cache_dir[..], &["--verify-weights"]].concat());
    assert_eq!(code, 0, "{err}");

    // The same compile again leaves the file alone and writes the same artifact.
    let before = (read(&art), std::fs::metadata(&file).and_then(|m| m.modified()).expect("mtime"));
    let summary = compile_external("mlp", &art, &cache);
    assert_eq!(summary["weights_file"]["reused"], true, "{summary}");
    assert_eq!(read(&art), before.0, "the same artifact");
    assert_eq!(std::fs::metadata(&file).and_then(|m| m.modified()).expect("mtime"), before.1, "not rewritten");

    // One byte changed, its modification time put back: the cache's memory of the file is keyed
    // by the change time too, so the weights are hashed and refused, with the flag or without.
    let mut bytes = read(&file);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&file, &bytes).expect("writes");
    std::fs::File::options().write(true).open(&file).and_then(|f| f.set_modified(before.1)).expect("sets the mtime");
    for extra in [&cache_dir[..], &[&cache_dir[..], &["--verify-weights"]].concat(), &["--no-cache"]] {
        let (code, err) = run_mlp(&art, &tmp.0, extra);
        assert_eq!(code, 1, "{extra:?}: {err}");
        assert!(
            err.contains(&format!("weights `{}`", file.display())) && err.contains("changed since the compile"),
            "{err}"
        );
    }
    // Another size is refused before any read; a missing file names where it was looked for.
    bytes.push(0);
    std::fs::write(&file, &bytes).expect("writes");
    let (code, err) = run_mlp(&art, &tmp.0, &cache_dir);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("it has {} bytes, the artifact was compiled with {}", bytes.len(), last + 1)),
        "{err}"
    );
    std::fs::remove_file(&file).expect("removes");
    let (code, err) = run_mlp(&art, &tmp.0, &cache_dir);
    assert_eq!(code, 1);
    assert!(err.contains("No such file") && err.contains("compile --weights external"), "{err}");
    // A compile writes it again; the artifact is the same.
    assert_eq!(compile_external("mlp", &art, &cache)["weights_file"]["reused"], false);
    assert_eq!(read(&art), before.0);
    assert_runs_correctly("mlp", &art, &tmp.0);
}

/// `run` checks an embedded weights entry by its sha256 as it loads it (the container's CRC-32
/// pass skips it, so the weights are read once): one flipped byte is refused, even though the
/// compile left the artifact remembered as verified.
#[test]
fn embedded_weights_damaged_in_place_are_refused() {
    let tmp = TempDir::new("embedded-weights");
    let (cache, art) = (tmp.0.join("cache"), tmp.0.join("mlp.tpuexe"));
    assert_eq!(compile("mlp", &art, &cache, &["--target", "cpu"]).0, ["compiled"]);
    let cache_dir = ["--cache-dir", &s(&cache)];
    assert_eq!(run_mlp(&art, &tmp.0, &cache_dir).0, 0);
    let a = Artifact::open(&art).expect("opens");
    let (start, len) = (a.entry_offsets()[artifact::WEIGHTS], a.weights().expect("embedded").len());
    drop(a);
    // A byte of the header, then one of the last tensor.
    for at in [start + 20, start + len - 3] {
        let mut bytes = read(&art);
        bytes[at] ^= 0x40;
        std::fs::write(&art, &bytes).expect("writes");
        let (code, err) = run_mlp(&art, &tmp.0, &cache_dir);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(&format!("weights `{}`", art.display())) && err.contains("changed since"), "{err}");
        bytes[at] ^= 0x40;
        std::fs::write(&art, &bytes).expect("writes");
        assert_eq!(run_mlp(&art, &tmp.0, &cache_dir).0, 0, "restored");
    }
}

/// A checkpoint of the same architecture (here mlp's archive with every weight halved, as a
/// fine-tune changes values, not shapes) compiles to the same programs: every executable is a
/// cache hit and the artifacts differ only in their weights file and source hash.
#[test]
fn checkpoints_of_one_architecture_share_executables() {
    let tmp = TempDir::new("checkpoints");
    let base = tmp.0.join("base.tpuexe");
    assert_eq!(outcomes(&compile_external("mlp", &base, &tmp.0.join("cache")).to_string()), ["compiled"]);
    let (other, _, out) = compile_halved("mlp", &tmp.0);
    assert_eq!(outcomes(&out), ["hit"], "{out}");
    let (a, b) = (Artifact::open(&base).expect("opens"), Artifact::open(&other).expect("opens"));
    let exe = |art: &Artifact| art.manifest.targets[0].executables[0].sha256.clone();
    assert_eq!(exe(&a), exe(&b));
    assert_ne!(a.manifest.weights.digest, b.manifest.weights.digest);
    assert_ne!(a.manifest.source.blake3, b.manifest.source.blake3);
    let (code, err) = run_mlp(&other, &tmp.0.join("halved-out"), &[]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(read(&tmp.0.join("halved-out/out_0.npy")), read(&testdata().join("models/mlp/out_0.npy")));
}

/// A running session takes another checkpoint's weights without recompiling: decoder_kv's
/// artifact, swapped to decoder_kv_tuned (the same program with other weights, exported by
/// torch), decodes that model's eager tokens, and back to decoder_kv's archive its own. A
/// checkpoint of another program and a weights file with a tensor of another shape are refused
/// before anything changes: the session keeps its weights. A weights file taken is copied, not
/// read in place.
#[test]
fn a_session_swaps_to_another_checkpoint() {
    use crate::run::{decode, Decoding};
    let tmp = TempDir::new("swap");
    let artifact = super::parity::compile_model("decoder_kv", &tmp.0);
    let models = testdata().join("models");
    let eager = |name: &str| crate::npy::Array::read(&models.join(name).join("tokens.npy")).expect("tokens");
    let prompt = crate::npy::Array::read(&models.join("decoder_kv/prompt.npy")).expect("a prompt");
    let decoding = Decoding { prompt, max_new_tokens: 24, temperature: None, seed: 0, keep_logits: false };
    let verification = crate::run::Verification { always_hash: false, cache: None };
    let mut session =
        crate::run::Session::open(&artifact, crate::run::DeviceKind::Cpu, None, &verification).expect("opens");
    let tokens = |session: &mut crate::run::Session| {
        session.reset().expect("resets");
        decode(session, &decoding).expect("decodes").tokens
    };
    let (base, tuned) = (eager("decoder_kv"), eager("decoder_kv_tuned"));
    assert!(!crate::run::compare(&base, &tuned).ok, "the two checkpoints decode differently");
    assert!(crate::run::compare(&tokens(&mut session), &base).ok);
    session.swap_weights(&models.join("decoder_kv_tuned.pt2")).expect("swaps");
    assert!(crate::run::compare(&tokens(&mut session), &tuned).ok, "the tuned checkpoint's eager tokens");

    let other = session.swap_weights(&models.join("hf_static_cache.pt2")).expect_err("another program").to_string();
    assert!(other.contains("is not a checkpoint of this artifact") && other.contains("another program"), "{other}");
    // A weights file with a tensor of another shape: decoder_kv's artifact's own, edited.
    let file = tmp.0.join("reshaped.safetensors");
    let weights = Artifact::open(&artifact).expect("opens");
    reshape_first_weight(weights.zip().get(artifact::WEIGHTS).expect("weights"), &file);
    drop(weights);
    let reshaped = session.swap_weights(&file).expect_err("another shape").to_string();
    assert!(reshaped.contains(&s(&file)) && reshaped.contains("the program takes"), "{reshaped}");
    assert!(crate::run::compare(&tokens(&mut session), &tuned).ok, "still the tuned weights");

    session.swap_weights(&models.join("decoder_kv.pt2")).expect("swaps back");
    assert!(crate::run::compare(&tokens(&mut session), &base).ok);

    // A weights file taken is copied: its owner rewriting it (a training job saving to the
    // same path) changes nothing in the session.
    let own = tmp.0.join("own.safetensors");
    let weights = Artifact::open(&artifact).expect("opens");
    std::fs::write(&own, weights.zip().get(artifact::WEIGHTS).expect("weights")).expect("writes");
    drop(weights);
    session.swap_weights(&own).expect("swaps");
    let mut zeroed = read(&own);
    let header = 8 + u64::from_le_bytes(zeroed[..8].try_into().expect("8 bytes")) as usize;
    zeroed[header..].fill(0);
    std::fs::write(&own, &zeroed).expect("rewrites");
    assert!(crate::run::compare(&tokens(&mut session), &base).ok, "the file's new bytes are not read");
}

/// `run --checkpoint`: cnn's artifact (its BatchNorms folded into the convolutions and its
/// kernels transposed, weights the compiler derives) run with the weights of cnn's archive with
/// every weight halved gives exactly what compiling that archive gives, from the `.pt2` and
/// from the weights file such a compile writes; a file lacking a weight is refused.
#[test]
fn run_takes_another_checkpoint_without_recompiling() {
    let tmp = TempDir::new("run-checkpoint");
    let base = tmp.0.join("base.tpuexe");
    compile_external("cnn", &base, &tmp.0.join("cache"));
    let (other, halved, _) = compile_halved("cnn", &tmp.0);
    let model = s(&halved);
    let input = s(&testdata().join("models/cnn/in_0.npy"));
    let run = |art: &Path, out: &str, extra: &[&str]| {
        let out = tmp.0.join(out);
        let (code, text, err) = run_cli(&[&["run", &s(art), &input, "--out-dir", &s(&out)][..], extra].concat());
        (code, format!("{text}{err}"), out.join("out_0.npy"))
    };
    let (code, text, expected) = run(&other, "expected", &[]);
    assert_eq!(code, 0, "{text}");
    let (_, _, own) = run(&base, "own", &[]);
    assert_ne!(read(&own), read(&expected), "halving the weights changes the outputs");
    let (code, text, got) = run(&base, "from-pt2", &["--checkpoint", &model]);
    assert_eq!((code, read(&got)), (0, read(&expected)), "{text}");
    let file = s(&tmp.0.join("halved.weights.safetensors"));
    let (code, text, got) = run(&base, "from-file", &["--checkpoint", &file]);
    assert_eq!((code, read(&got)), (0, read(&expected)), "{text}");
    // The archive's stored weights alone (a state dict) lack the derived ones.
    let state_dict = tmp.0.join("state_dict.safetensors");
    let stored = crate::import::import(&testdata().join("models/cnn.pt2")).expect("imports").weights;
    keep_stored(&read(&tmp.0.join("base.weights.safetensors")), &stored, &state_dict);
    let (code, text, _) = run(&base, "lacking", &["--checkpoint", &s(&state_dict)]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("it has no `") && text.contains("as a `.pt2` of the same program"), "{text}");
}

/// `model`'s archive with every weight halved (`halved.pt2` in `dir`), compiled with
/// `--weights external` into `halved.tpuexe` through the cache `dir`/cache: the artifact, the
/// archive and the summary.
fn compile_halved(model: &str, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let (halved, art) = (dir.join("halved.pt2"), dir.join("halved.tpuexe"));
    halve_weights(&testdata().join(format!("models/{model}.pt2")), &halved);
    let args = compile_args(model, &art, &dir.join("cache"), &["--target", "cpu", "--weights", "external"]);
    let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let path = s(&halved);
    argv[1] = &path;
    let (code, out, err) = run_cli(&argv);
    assert_eq!(code, 0, "{err}");
    (art, halved, out)
}

/// Writes the safetensors `bytes` to `to` with its first tensor's shape reversed and flattened
/// to one dim too many (same bytes, another shape).
fn reshape_first_weight(bytes: &[u8], to: &Path) {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("safetensors");
    let mut names = st.names();
    names.sort();
    let tensors: Vec<(String, safetensors::tensor::TensorView)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let v = st.tensor(n).expect("a tensor");
            let mut shape = v.shape().to_vec();
            if i == 0 {
                shape.insert(0, 1);
            }
            (n.to_string(), safetensors::tensor::TensorView::new(v.dtype(), shape, v.data()).expect("a view"))
        })
        .collect();
    safetensors::serialize_to_file(tensors, None, to).expect("writes");
}

/// Writes the safetensors `bytes` to `to` with only the tensors the archive stores (`stored`),
/// not those the compiler derived: what a state dict holds.
fn keep_stored<W>(bytes: &[u8], stored: &std::collections::BTreeMap<String, W>, to: &Path) {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("safetensors");
    let kept: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().filter(|(n, _)| stored.contains_key(n)).collect();
    assert!(!kept.is_empty() && kept.len() < st.len(), "cnn has stored and derived weights");
    safetensors::serialize_to_file(kept, None, to).expect("writes");
}

/// Copies the archive at `from` to `to` with every f32 of its weight payloads halved.
fn halve_weights(from: &Path, to: &Path) {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(read(from))).expect("a zip");
    let mut out = zip::ZipWriter::new(std::fs::File::create(to).expect("writable"));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).expect("an entry");
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut data).expect("reads");
        if f.name().contains("/data/weights/weight_") {
            for c in data.chunks_exact_mut(4) {
                let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * 0.5;
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        out.start_file(f.name(), opts).expect("starts");
        std::io::Write::write_all(&mut out, &data).expect("writes");
    }
    out.finish().expect("finishes");
}
