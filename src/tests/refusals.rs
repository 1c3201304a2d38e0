//! What `run` refuses, in its own words: wrong inputs, a corrupted executable, an executable of
//! another plugin build, a missing plugin.

use super::parity::{compile_model, TempDir};
use super::{run_cli, testdata};
use crate::artifact::{self, Artifact};

#[test]
fn run_refuses_wrong_inputs_with_clear_messages() {
    let tmp = TempDir::new("inputs");
    let artifact = compile_model("mlp", &tmp.0);
    let art = artifact.to_str().expect("utf-8");
    let out = tmp.0.to_str().expect("utf-8");
    let (code, _, err) = run_cli(&["run", art, "--out-dir", out]);
    assert_eq!(code, 1);
    assert!(err.contains("expected 1 input(s) (x), got 0"), "{err}");

    let ids = testdata().join("models/llama_tiny/in_0.npy");
    let (code, _, err) = run_cli(&["run", art, ids.to_str().expect("utf-8"), "--out-dir", out]);
    assert_eq!(code, 1);
    assert!(err.contains("input 0 (`x`") && err.contains("expected dtype f32, got dtype i64"), "{err}");

    let wrong_shape = testdata().join("models/multi_out/in_0.npy");
    let (code, _, err) = run_cli(&["run", art, wrong_shape.to_str().expect("utf-8"), "--out-dir", out]);
    assert_eq!(code, 1);
    assert!(err.contains("expected shape [4, 16]") && err.contains("got shape [3, 5]"), "{err}");

    let (code, _, err) = run_cli(&["run", art, "nope.npy", "--out-dir", out]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read `nope.npy`"), "{err}");

    let x = testdata().join("models/mlp/in_0.npy");
    let (code, _, err) = run_cli(&["run", art, x.to_str().expect("utf-8"), "--out-dir", out, "--state-in", out]);
    assert_eq!(code, 1);
    assert!(err.contains("this program updates no buffer or parameter"), "{err}");
}

/// One flipped byte in the serialized executable: `run` reports the corrupt entry before the
/// plugin ever sees it (the plugin can crash on corrupt executables), by its CRC-32 and, when
/// that is forged too, by the manifest's sha256.
#[test]
fn corrupted_executable_is_refused_not_run() {
    let tmp = TempDir::new("corrupt");
    let artifact = compile_model("mlp", &tmp.0);
    let art = Artifact::open(&artifact).expect("opens");
    let entry = art.manifest.targets[0].executables[0].entry.clone();
    let offset = art.entry_offsets()[&entry];
    drop(art);
    let mut bytes = std::fs::read(&artifact).expect("reads");
    bytes[offset + 100] ^= 0xff;
    std::fs::write(&artifact, &bytes).expect("writes");
    let input = testdata().join("models/mlp/in_0.npy");
    let run = || {
        let out_dir = tmp.0.to_str().expect("utf-8");
        run_cli(&["run", artifact.to_str().expect("utf-8"), input.to_str().expect("utf-8"), "--out-dir", out_dir])
    };
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    // The container's CRC-32 catches the flipped byte before the manifest's sha256 would.
    assert!(err.contains("entry `executables/cpu/main.pjrt`: its bytes do not match their CRC-32"), "{err}");
    // With the CRC-32 forged to match, the manifest's sha256 still refuses it.
    let (record, data) = {
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(&bytes)).expect("a zip");
        let file = zip.by_name(&entry).expect("the executable");
        (file.central_header_start() as usize, file.data_start() as usize..(file.data_start() + file.size()) as usize)
    };
    let crc = crc32fast::hash(&bytes[data]);
    bytes[record + 16..record + 20].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&artifact, &bytes).expect("writes");
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("artifact entry `executables/cpu/main.pjrt` is corrupt: its sha256 is"), "{err}");
}

/// An executable made by another plugin build is refused (exit 3), never loaded.
#[test]
fn executable_from_another_plugin_build_is_refused() {
    let tmp = TempDir::new("mismatch");
    let artifact = compile_model("mlp", &tmp.0);
    let art = Artifact::open(&artifact).expect("opens");
    let mut manifest = art.manifest.clone();
    manifest.targets[0].plugin.sha256 = "0".repeat(64);
    let entries = entries_but_manifest(&art);
    drop(art);
    let other = tmp.0.join("other.tpuexe");
    let entries = entries.into_iter().map(|(n, b)| (n, artifact::Payload::Bytes(b))).collect();
    artifact::write(&other, entries, |_| manifest.clone()).expect("writes");
    let input = testdata().join("models/mlp/in_0.npy");
    let (code, _, err) = run_cli(&[
        "run",
        other.to_str().expect("utf-8"),
        input.to_str().expect("utf-8"),
        "--out-dir",
        tmp.0.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("executables only load into the plugin build that made them"), "{err}");
}

/// A manifest of an unknown format, or whose digests are not its format's (format 1: sha256 of
/// the weights and the source, format 2: BLAKE3 of the weights, format 3: BLAKE3 of both), is
/// refused as not an artifact, naming what it is.
#[test]
fn artifact_formats_and_their_weights_digests_are_checked() {
    let tmp = TempDir::new("formats");
    let artifact = compile_model("mlp", &tmp.0);
    let art = Artifact::open(&artifact).expect("opens");
    assert_eq!(art.manifest.format, "torchtpu-artifact/3");
    assert!(art.manifest.source.blake3.as_ref().is_some_and(|d| d.len() == 64) && art.manifest.source.sha256.is_none());
    assert!(matches!(art.manifest.weights.digest, crate::digest::WeightsDigest::Blake3(_)));
    let entries = entries_but_manifest(&art);
    let manifest = art.manifest.clone();
    drop(art);
    let refusal = |edit: &dyn Fn(&mut artifact::Manifest)| {
        let mut m = manifest.clone();
        edit(&mut m);
        let other = tmp.0.join("other.tpuexe");
        let entries = entries.iter().map(|(n, b)| (n.clone(), artifact::Payload::Bytes(b.clone()))).collect();
        artifact::write(&other, entries, |_| m.clone()).expect("writes");
        Artifact::open(&other).err().map(|e| e.to_string()).unwrap_or_default()
    };
    let err = refusal(&|m| m.format = "torchtpu-artifact/9".into());
    assert!(
        err.contains(
            "format `torchtpu-artifact/9` (this compiler reads `torchtpu-artifact/1`, `torchtpu-artifact/2`, \
             `torchtpu-artifact/3`)"
        ),
        "{err}"
    );
    let err = refusal(&|m| m.weights.digest = crate::digest::WeightsDigest::Sha256(m.weights.digest.hex().into()));
    assert!(err.contains("format `torchtpu-artifact/3` with a sha256 digest of its weights"), "{err}");
    let err = refusal(&|m| (m.source.sha256, m.source.blake3) = (m.source.blake3.take(), None));
    assert!(err.contains("format `torchtpu-artifact/3` with sha256 of its source recorded"), "{err}");
    let err = refusal(&|m| m.format = "torchtpu-artifact/2".into());
    assert!(err.contains("format `torchtpu-artifact/2` with blake3 of its source recorded"), "{err}");
    assert_eq!(refusal(&|_| {}), "", "the artifact as written opens");
}

/// Every entry of `art` but its manifest, read and verified, to write again with another one.
fn entries_but_manifest(art: &Artifact) -> Vec<(String, Vec<u8>)> {
    let names = art.entry_offsets().into_keys().filter(|n| n != artifact::MANIFEST);
    names
        .map(|n| {
            let bytes = read_entry(art, &n);
            (n, bytes)
        })
        .collect()
}

fn read_entry(art: &Artifact, name: &str) -> Vec<u8> {
    let m = &art.manifest;
    if name == m.weights.entry {
        return art.weights().expect("weights").to_vec();
    }
    let sha = m.targets.iter().flat_map(|t| &t.executables).find(|e| e.entry == name).map(|e| e.sha256.clone());
    let sha = sha.or_else(|| m.buckets.iter().find(|b| b.program == name).map(|b| b.program_sha256.clone()));
    art.verified(name, &sha.expect("known entry")).expect("intact").to_vec()
}

#[test]
fn missing_plugin_is_an_environment_error() {
    let tmp = TempDir::new("noplugin");
    let model = testdata().join("models/mlp.pt2");
    let out = tmp.0.join("mlp.tpuexe");
    let args = [
        "compile",
        model.to_str().expect("utf-8"),
        "-o",
        out.to_str().expect("utf-8"),
        "--plugin",
        "/nonexistent/plugin.so",
        "--no-cache",
    ];
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no PJRT plugin at `/nonexistent/plugin.so`") && err.contains("cargo xtask setup"), "{err}");
    assert!(!out.exists());
}
