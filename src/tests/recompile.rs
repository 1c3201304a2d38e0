//! `recompile`: an artifact's stored programs compiled again without the `.pt2`, and the
//! artifact format's compatibility (a committed artifact of format 1 keeps loading).

use std::path::Path;

use super::parity::TempDir;
use super::{run_cli, testdata};
use crate::artifact::Artifact;

fn cli_ok(args: &[&str]) -> String {
    let (code, out, err) = run_cli(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// Recompiled for the targets it has, an artifact comes back byte for byte (the executables
/// from the cache), also when it replaces itself; the summary names each executable.
#[test]
fn recompile_for_the_same_targets_gives_the_same_artifact() {
    let tmp = TempDir::new("recompile-same");
    let (a, b, cache) = (tmp.0.join("a.tpuexe"), tmp.0.join("b.tpuexe"), tmp.0.join("cache"));
    let model = testdata().join("models/llama_tiny_dyn.pt2");
    let common = ["--cache-dir", path(&cache), "-q"];
    let compile =
        [&["compile", path(&model), "-o", path(&a), "--target", "cpu", "--buckets", "input_ids:1=8,64"][..], &common];
    cli_ok(&compile.concat());
    let json = cli_ok(&[&["recompile", path(&a), "-o", path(&b), "--format", "json"][..], &common].concat());
    let summary: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(summary["targets"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
    cli_ok(&[&["recompile", path(&a), "-o", path(&a)][..], &common].concat());
    assert_eq!(std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"), "replaced in place");
}

/// An artifact compiled for v5e, recompiled for v6e without the archive, equals a fresh compile
/// for v6e byte for byte: the fresh compile finds every executable in the cache under the same
/// key (the same program, options and plugin), and the manifests agree.
#[test]
fn recompiled_for_another_generation_equals_a_fresh_compile() {
    let tmp = TempDir::new("recompile-tpu");
    let (v5e, moved, fresh) = (tmp.0.join("v5e.tpuexe"), tmp.0.join("moved.tpuexe"), tmp.0.join("fresh.tpuexe"));
    let cache = tmp.0.join("cache");
    let model = testdata().join("models/llama_tiny.pt2");
    let common = ["--cache-dir", path(&cache), "-q"];
    cli_ok(&[&["compile", path(&model), "-o", path(&v5e), "--target", "tpu:v5e:1x1"][..], &common].concat());
    cli_ok(&[&["recompile", path(&v5e), "-o", path(&moved), "--target", "tpu:v6e:1x1"][..], &common].concat());
    let json = cli_ok(
        &[&["compile", path(&model), "-o", path(&fresh), "--target", "tpu:v6e:1x1", "--format", "json"][..], &common]
            .concat(),
    );
    let summary: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert!(summary["targets"].as_array().expect("targets").iter().all(|t| t["cache"] == "hit"), "{json}");
    assert_eq!(std::fs::read(&moved).expect("moved"), std::fs::read(&fresh).expect("fresh"));
    let m = Artifact::open(&moved).expect("opens").manifest;
    assert_eq!((m.targets.len(), m.targets[0].target.as_str()), (1, "tpu:v6e:1x1"));
}

/// A program split over a mesh keeps it: recompiling it for another device count is refused,
/// naming both; so is a damaged program.
#[test]
fn recompile_refuses_other_device_counts_and_damaged_programs() {
    let tmp = TempDir::new("recompile-refused");
    let (split, out) = (tmp.0.join("split.tpuexe"), tmp.0.join("out.tpuexe"));
    let model = testdata().join("models/mlp.pt2");
    cli_ok(&["compile", path(&model), "-o", path(&split), "--target", "cpu:2", "--mesh", "tp=2", "--no-cache", "-q"]);
    let (code, _, err) = run_cli(&["recompile", path(&split), "-o", path(&out), "--target", "cpu", "--no-cache"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("split over 2 device(s), but `cpu` has 1"), "{err}");
    assert!(!out.exists(), "nothing written");
    // A flipped byte in a program: the archive's CRC catches it before anything compiles.
    let mut bytes = std::fs::read(&split).expect("read");
    let art = Artifact::open(&split).expect("opens");
    let at = art.zip().range(&art.manifest.buckets[0].program).expect("a program").start + 10;
    drop(art);
    bytes[at] ^= 0x20;
    std::fs::write(&split, bytes).expect("write");
    let (code, _, err) = run_cli(&["recompile", path(&split), "-o", path(&out), "--no-cache"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("programs/main.mlir") && !out.exists(), "{err}");
}

/// The committed artifacts of formats `torchtpu-artifact/1`, `/2` and `/3`
/// (`testdata/artifacts/make.sh`) still open; recompiled for this machine's plugin each runs
/// and equals eager, its weights verified by the digest of its format. Run as it is, each
/// either runs (the same plugin build) or is refused naming `recompile`.
#[test]
fn committed_artifacts_of_every_format_still_load_and_recompile() {
    for format in [1, 2, 3] {
        let committed = testdata().join(format!("artifacts/mlp-format{format}.tpuexe"));
        let art = Artifact::open(&committed).expect("a committed artifact opens");
        assert_eq!(art.manifest.format, format!("torchtpu-artifact/{format}"));
        let tmp = TempDir::new("recompile-committed");
        let (input, reference) = (testdata().join("models/mlp/in_0.npy"), testdata().join("models/mlp"));
        let (code, _, err) = run_cli(&[
            "run",
            path(&committed),
            path(&input),
            "--out-dir",
            path(&tmp.0.join("as-is")),
            "--reference",
            path(&reference),
            "--no-cache",
        ]);
        assert!(code == 0 || err.contains("torchtpu-compile recompile"), "format {format}: {code}: {err}");
        let out = tmp.0.join("mlp.tpuexe");
        cli_ok(&["recompile", path(&committed), "-o", path(&out), "--no-cache", "-q"]);
        let again = Artifact::open(&out).expect("recompiled");
        assert_eq!(
            (&again.manifest.format, &again.manifest.weights.digest),
            (&art.manifest.format, &art.manifest.weights.digest)
        );
        let out_dir = tmp.0.join("out");
        let args = ["run", path(&out), path(&input), "--out-dir", path(&out_dir), "--reference", path(&reference)];
        let report = cli_ok(&args);
        assert!(report.contains("matches the reference"), "format {format}: {report}");
    }
}
