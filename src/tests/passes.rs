//! The pass pipeline from the command line: reports in the summary and the manifest, switches
//! (`--passes`, `--no-<pass>`), equal numbers with and without passes, and precision overrides
//! that reach the StableHLO and the TPU executable.

use serde_json::Value;

use super::parity::TempDir;
use super::{run_cli, testdata};
use crate::artifact::Artifact;

fn s(p: &std::path::Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

/// Compiles llama_tiny for CPU with `extra` flags; returns (summary JSON, stderr of a -v run).
fn compile(out: &std::path::Path, extra: &[&str]) -> Value {
    let model = s(&testdata().join("models/llama_tiny.pt2"));
    let mut args = vec!["compile", &model, "-o", out.to_str().expect("utf-8"), "--no-cache", "--format", "json"];
    args.extend(extra);
    let (code, stdout, err) = run_cli(&args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&stdout).expect("json summary")
}

/// The StableHLO of `model` with `extra` flags, written to `out`.
fn emit_stablehlo(model: &str, out: &std::path::Path, extra: &[&str]) -> String {
    let mut args = vec!["compile", model, "-o", out.to_str().expect("utf-8"), "--emit", "stablehlo"];
    args.extend(extra);
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 0, "{err}");
    std::fs::read_to_string(out).expect("written")
}

fn pass_names(summary: &Value) -> Vec<String> {
    summary["passes"].as_array().expect("passes").iter().filter_map(|p| p["pass"].as_str()).map(String::from).collect()
}

/// The pipeline, in order (written out so that a reordering shows up here).
const EVERY_PASS: [&str; 14] = [
    "canonicalize",
    "fold_constants",
    "fold_batch_norm",
    "cse",
    "grouped_attention",
    "safe_softmax",
    "fuse_matmuls",
    "pad",
    "compute_dtype",
    "weight_layout",
    "shard",
    "dce",
    "precision",
    "sdpa",
];

#[test]
fn passes_are_reported_switchable_and_keep_the_numbers() {
    let tmp = TempDir::new("passes");
    let all = tmp.0.join("all.tpuexe");
    let summary = compile(&all, &["--target", "cpu"]);
    assert_eq!(pass_names(&summary), EVERY_PASS);
    let cse = &summary["passes"][3];
    assert!(cse["nodes_after"].as_u64() < cse["nodes_before"].as_u64(), "cse merges nodes in llama_tiny: {cse}");
    let manifest = Artifact::open(&all).expect("artifact").manifest;
    assert_eq!(manifest.options.passes, EVERY_PASS);
    assert_eq!(manifest.buckets[0].passes.len(), EVERY_PASS.len());
    assert_eq!(manifest.options.pad_multiple, None, "padding is off by default");

    let none = tmp.0.join("none.tpuexe");
    assert!(pass_names(&compile(&none, &["--target", "cpu", "--passes", "none"])).is_empty());
    assert!(Artifact::open(&none).expect("artifact").manifest.options.passes.is_empty());
    let some = compile(&tmp.0.join("some.tpuexe"), &["--target", "cpu", "--passes", "dce,canonicalize", "--no-dce"]);
    assert_eq!(pass_names(&some), ["canonicalize"]);

    // Both artifacts reproduce PyTorch.
    let dir = testdata().join("models/llama_tiny");
    for (name, art) in [("all", &all), ("none", &none)] {
        let out = s(&tmp.0.join(format!("out-{name}")));
        let args = ["run", &s(art), &s(&dir.join("in_0.npy")), "--out-dir", &out, "--reference", &s(&dir)];
        let (code, stdout, err) = run_cli(&args);
        assert_eq!(code, 0, "{name}: {stdout}{err}");
    }

    let (code, _, err) = run_cli(&["compile", "m.pt2", "-o", "x", "--passes", "fusion"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown pass `fusion`"), "{err}");

    let model = s(&testdata().join("models/llama_tiny.pt2"));
    let args = ["compile", &model, "-o", &s(&tmp.0.join("v.tpuexe")), "--target", "cpu", "--no-cache", "-v"];
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("pass cse: ") && err.contains("nodes merged"), "{err}");
}

#[test]
fn precision_overrides_reach_stablehlo_and_tpu_executables() {
    let tmp = TempDir::new("precision");
    let model = s(&testdata().join("models/llama_tiny.pt2"));
    let emit = |name: &str, extra: &[&str]| emit_stablehlo(&model, &tmp.0.join(name), extra);
    let count = |text: &str, level: &str| text.matches(&format!("#stablehlo<precision {level}>, ")).count();
    let plain = emit("plain.mlir", &[]);
    let overridden = emit("lm_head.mlir", &["--precision-override", "lm_head=highest"]);
    let dots = count(&plain, "DEFAULT");
    assert!(dots > 1 && count(&plain, "HIGHEST") == 0);
    assert_eq!(count(&overridden, "HIGHEST"), 1, "only the lm_head matmul");
    assert_eq!(count(&overridden, "DEFAULT"), dots - 1);
    let highest = emit("highest.mlir", &["--precision", "highest"]);
    assert_eq!(count(&highest, "HIGHEST"), dots);
    // The override is ignored when the pass is off.
    assert_eq!(emit("off.mlir", &["--precision-override", "lm_head=highest", "--no-precision"]), plain);

    let tpu = |name: &str, extra: &[&str]| {
        let out = tmp.0.join(name);
        compile(&out, &[&["--target", "tpu:v6e:1x1"][..], extra].concat());
        let art = Artifact::open(&out).expect("artifact");
        art.manifest.targets[0].executables[0].sha256.clone()
    };
    let default = tpu("default.tpuexe", &[]);
    assert_ne!(default, tpu("highest.tpuexe", &["--precision", "highest"]), "highest is another TPU program");
    assert_ne!(default, tpu("override.tpuexe", &["--precision-override", "lm_head=highest"]));

    let (code, _, err) = run_cli(&["compile", &model, "-o", "x", "--precision-override", "lm_head"]);
    assert_eq!(code, 2);
    assert!(err.contains("expected PATTERN=LEVEL"), "{err}");
}

/// The mini ResNet's 12 eval-mode BatchNorms fold into its convolutions: the artifact stores
/// the folded weights instead of the BatchNorm statistics (the numbers are checked by the
/// parity test, which runs every pass).
#[test]
fn batch_norms_fold_into_convolution_weights() {
    let tmp = TempDir::new("fold");
    let out = tmp.0.join("resnet.tpuexe");
    let model = s(&testdata().join("models/resnet_mini.pt2"));
    let (code, _, err) = run_cli(&["compile", &model, "-o", &s(&out), "--target", "cpu", "--no-cache", "-q"]);
    assert_eq!(code, 0, "{err}");
    let m = Artifact::open(&out).expect("artifact").manifest;
    let fold = m.buckets[0].passes.iter().find(|p| p.pass == "fold_batch_norm").expect("ran");
    assert_eq!(fold.notes, ["12 batch norms folded into the preceding convolution"]);
    let folded = m.weights.order.iter().filter(|w| w.contains("@folded:")).count();
    assert_eq!(folded, 24, "a weight and a bias per fold: {:?}", m.weights.order);
    assert!(!m.weights.order.iter().any(|w| w.contains("running_mean")), "{:?}", m.weights.order);
}

/// The tiny Llama's Q/K/V projections and its gate/up projections fuse: per layer one matmul
/// for attention inputs and one for the MLP's, on stacked weights (the numbers are checked by
/// the parity test, which runs every pass).
#[test]
fn attention_and_mlp_projections_fuse() {
    let tmp = TempDir::new("fuse");
    let model = s(&testdata().join("models/llama_tiny.pt2"));
    let emit = |name: &str, extra: &[&str]| emit_stablehlo(&model, &tmp.0.join(name), extra);
    let dots = |text: &str| text.matches("stablehlo.dot_general").count();
    let (fused, unfused) = (emit("fused.mlir", &[]), emit("unfused.mlir", &["--no-fuse-matmuls"]));
    // 2 layers: Q, K, V → 1 and gate, up → 1 saves 3 matmuls per layer.
    assert_eq!(dots(&unfused) - dots(&fused), 6, "{} vs {}", dots(&unfused), dots(&fused));
    assert!(
        fused.contains("tensor<512x64xf32>"),
        "the stacked Q/K/V weight is an argument: 256 + 128 + 128 rows (4 + 2 + 2 heads of 64) by 64 columns (the \
         hidden size)"
    );

    let out = tmp.0.join("llama.tpuexe");
    let (code, _, err) = run_cli(&["compile", &model, "-o", &s(&out), "--target", "cpu", "--no-cache", "-q"]);
    assert_eq!(code, 0, "{err}");
    let m = Artifact::open(&out).expect("artifact").manifest;
    let fuse = m.buckets[0].passes.iter().find(|p| p.pass == "fuse_matmuls").expect("ran");
    assert_eq!(fuse.notes, ["10 matmuls fused into wider ones on stacked weights"]);
    assert_eq!(m.weights.order.iter().filter(|w| w.starts_with("fused:")).count(), 4, "{:?}", m.weights.order);
}

/// Models exported in bf16 (as real checkpoints ship) get the rewrites f32 ones get: the bf16
/// Llama's Q/K/V and gate/up projections fuse on bf16 stacked weights, the bf16 CNN's two
/// BatchNorms fold into bf16 convolution weights; the parity tests check their numbers with
/// every pass on, with and without padding.
#[test]
fn bf16_models_get_the_same_rewrites() {
    let tmp = TempDir::new("bf16-rewrites");
    let manifest = |model: &str| {
        let out = tmp.0.join(format!("{model}.tpuexe"));
        let path = s(&testdata().join(format!("models/{model}.pt2")));
        let (code, _, err) = run_cli(&["compile", &path, "-o", &s(&out), "--target", "cpu", "--no-cache", "-q"]);
        assert_eq!(code, 0, "{model}: {err}");
        Artifact::open(&out).expect("artifact").manifest
    };
    let notes = |m: &crate::artifact::Manifest, pass: &str| {
        m.buckets[0].passes.iter().find(|p| p.pass == pass).expect("ran").notes.clone()
    };
    let llama = manifest("llama_bf16");
    assert_eq!(notes(&llama, "fuse_matmuls"), ["5 matmuls fused into wider ones on stacked weights"]);
    let cnn = manifest("cnn_bf16");
    assert_eq!(notes(&cnn, "fold_batch_norm"), ["2 batch norms folded into the preceding convolution"]);
    for m in [&llama, &cnn] {
        let art = Artifact::open(&tmp.0.join(format!("{}.tpuexe", m.source.file.trim_end_matches(".pt2"))));
        let art = art.expect("artifact");
        let st = safetensors::SafeTensors::deserialize(art.weights().expect("embedded")).expect("safetensors");
        let derived: Vec<_> =
            m.weights.order.iter().filter(|w| w.starts_with("fused:") || w.contains("@folded:")).collect();
        assert!(!derived.is_empty(), "{:?}", m.weights.order);
        for w in derived {
            assert_eq!(st.tensor(w).expect("stored").dtype(), safetensors::Dtype::BF16, "{w}");
        }
    }
}

/// Each attention of the tiny Llama (2 layers) is one `stablehlo.composite "torchtpu.sdpa"`
/// whose decomposition holds `Q·Kᵀ`, the mask add, one safe softmax and `P·V`; `--no-sdpa`
/// emits the same ops inline. XLA inlines the composite: the parity tests run it.
#[test]
fn attention_is_one_sdpa_composite() {
    let tmp = TempDir::new("sdpa");
    let model = s(&testdata().join("models/llama_tiny.pt2"));
    let emit = |name: &str, extra: &[&str]| emit_stablehlo(&model, &tmp.0.join(name), extra);
    let (with, without) = (emit("with.mlir", &[]), emit("without.mlir", &["--no-sdpa"]));
    let count = |text: &str, what: &str| text.matches(what).count();
    assert_eq!(count(&with, "\"stablehlo.composite\""), 2, "{with}");
    assert_eq!(count(&with, "name = \"torchtpu.sdpa\""), 2);
    assert_eq!(count(&without, "\"stablehlo.composite\""), 0);
    for layer in 0..2 {
        let symbol = format!("sym_name = \"torchtpu.sdpa.{layer}\", sym_visibility = \"private\"");
        let at = with.find(&symbol).unwrap_or_else(|| panic!("{symbol} in {with}"));
        let body = &with[at..];
        let body = &body[..body[1..].find("\"func.func\"").map_or(body.len(), |e| e + 1)];
        assert_eq!(count(body, "stablehlo.dot_general"), 2, "{body}");
        assert_eq!(count(body, "stablehlo.exponential"), 1, "{body}");
        assert_eq!(count(body, "\"stablehlo.select\""), 1, "the safe softmax's row guard: {body}");
    }
    // The same ops, moved: as many matmuls and exponentials in all.
    for op in ["stablehlo.dot_general", "stablehlo.exponential"] {
        assert_eq!(count(&with, op), count(&without, op), "{op}");
    }
    // Blocked: each decomposition is one loop over the keys (16, in blocks of 4); `auto` keeps
    // these small attentions naive.
    let blocked = emit("blocked.mlir", &["--attention", "blocked", "--attention-block", "4"]);
    assert_eq!(count(&blocked, "\"stablehlo.while\""), 2, "{blocked}");
    // K sliced as the projection laid it out, `[1, kv heads, keys, head dim]`, never copied
    // whole into Kᵀ's layout; the causal mask cut along the keys,
    // once to check whether the block can be skipped (a `stablehlo.if` per loop) and once for
    // the update.
    assert_eq!(count(&blocked, "slice_sizes = array<i64: 1, 2, 4, 64>"), 2, "{blocked}");
    assert_eq!(count(&blocked, "slice_sizes = array<i64: 1, 1, 16, 4>"), 4, "{blocked}");
    assert_eq!(count(&blocked, "\"stablehlo.if\""), 2, "{blocked}");
    assert_eq!(count(&with, "\"stablehlo.while\""), 0);
}

/// Stated tolerance of `--compute-dtype bf16` against f32 PyTorch: bf16 keeps 8 significant
/// bits (relative rounding 2⁻⁹ ≈ 2e-3 per operand); the test models stay within 1% of the
/// output's scale (measured: at most 2.3e-3).
pub(super) const BF16_TOLERANCE: f64 = 1e-2;

/// Mixed precision: weights of contractions stored in bf16 (the artifact's weights shrink),
/// outputs within the bf16 tolerance of eager f32, and libtpu compiles it.
#[test]
fn bf16_compute_dtype_stays_within_tolerance() {
    let tmp = TempDir::new("bf16");
    for model in ["llama_tiny", "resnet_mini", "mlp"] {
        let pt2 = s(&testdata().join(format!("models/{model}.pt2")));
        let compile = |name: &str, extra: &[&str]| {
            let out = tmp.0.join(format!("{model}-{name}.tpuexe"));
            let mut args =
                vec!["compile", &pt2, "-o", out.to_str().expect("utf-8"), "--target", "cpu", "--no-cache", "-q"];
            args.extend(extra);
            let (code, _, err) = run_cli(&args);
            assert_eq!(code, 0, "{model}: {err}");
            out
        };
        let (f32_art, bf16_art) = (compile("f32", &[]), compile("bf16", &["--compute-dtype", "bf16"]));
        let weights = |p: &std::path::Path| Artifact::open(p).expect("artifact").manifest.weights.bytes;
        assert!(weights(&bf16_art) < weights(&f32_art) * 3 / 4, "{model}: weights shrink");
        let dir = testdata().join("models").join(model);
        let out = tmp.0.join(format!("{model}-out"));
        let args = ["run", &s(&bf16_art), &s(&dir.join("in_0.npy")), "--out-dir", &s(&out)];
        let (code, stdout, err) = run_cli(&args);
        assert_eq!(code, 0, "{model}: {stdout}{err}");
        let ours = crate::npy::Array::read(&out.join("out_0.npy")).expect("output");
        let eager = crate::npy::Array::read(&dir.join("out_0.npy")).expect("reference");
        let c = crate::run::compare(&ours, &eager);
        assert!(c.max_rel_diff <= BF16_TOLERANCE, "{model}: rel diff {} > {BF16_TOLERANCE}", c.max_rel_diff);
        assert!(c.max_rel_diff > 1e-6, "{model}: bf16 arithmetic should show ({})", c.max_rel_diff);
    }
    let model = s(&testdata().join("models/llama_tiny.pt2"));
    let tpu = tmp.0.join("tpu.tpuexe");
    let args =
        ["compile", &model, "-o", &s(&tpu), "--target", "tpu:v6e:1x1", "--compute-dtype", "bf16", "--no-cache", "-q"];
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 0, "{err}");
}
