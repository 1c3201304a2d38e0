//! Where the weights live: `--weights external` artifacts run, reuse their weights file when a
//! compile would write the same bytes, and refuse one that changed (even with its modification
//! time put back), also under `--verify-weights`; an embedded weights entry damaged in place is
//! refused too, though `run` no longer reads it twice; and two checkpoints of one architecture
//! share every executable.

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
    assert_eq!((w.bytes, w.sha256.clone()), (read(&file).len() as u64, crate::digest::sha256_hex(&read(&file))));
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
    let cache = tmp.0.join("cache");
    let tuned = tmp.0.join("tuned.pt2");
    halve_weights(&testdata().join("models/mlp.pt2"), &tuned);
    let (base, other) = (tmp.0.join("base.tpuexe"), tmp.0.join("tuned.tpuexe"));
    assert_eq!(outcomes(&compile_external("mlp", &base, &cache).to_string()), ["compiled"]);
    let args = compile_args("mlp", &other, &cache, &["--target", "cpu", "--weights", "external"]);
    let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let model = s(&tuned);
    argv[1] = &model;
    let (code, out, err) = run_cli(&argv);
    assert_eq!(code, 0, "{err}");
    assert_eq!(outcomes(&out), ["hit"], "{out}");
    let (a, b) = (Artifact::open(&base).expect("opens"), Artifact::open(&other).expect("opens"));
    let exe = |art: &Artifact| art.manifest.targets[0].executables[0].sha256.clone();
    assert_eq!(exe(&a), exe(&b));
    assert_ne!(a.manifest.weights.sha256, b.manifest.weights.sha256);
    assert_ne!(a.manifest.source.sha256, b.manifest.source.sha256);
    let (code, err) = run_mlp(&other, &tmp.0.join("tuned-out"), &[]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(read(&tmp.0.join("tuned-out/out_0.npy")), read(&testdata().join("models/mlp/out_0.npy")));
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
