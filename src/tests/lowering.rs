//! StableHLO of every test model (snapshots, determinism) and the `check` command.

use torchtpu_passes::testing::settings;

use super::{model_paths, run_cli, testdata};
use crate::driver::{example_bindings, lower, LowerOptions};
use crate::import::import;

fn stablehlo(path: &std::path::Path) -> String {
    let program = import(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let bindings = example_bindings(&program).expect("example sizes");
    lower(&program, bindings, &LowerOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .module
        .text
}

#[test]
fn stablehlo_snapshots() {
    let _guard = settings("mlir").bind_to_scope();
    insta::glob!("../../testdata/models", "*.pt2", |path| {
        insta::assert_snapshot!("module", stablehlo(path));
    });
}

/// The tiny Llama with no passes, then with every pass and padding to 128 (`--pad-multiple
/// 128`): one fused Q/K/V matmul per layer, its 8 heads of 64 padded to 128 one by
/// one, the hidden size padded 64 → 128 from the embedding to the last norm, the mean of each
/// RMSNorm dividing by 64, and each attention one `torchtpu.sdpa` composite (`bmm` on the two
/// shared K/V heads, mask add, safe softmax, `bmm`) on 128-wide heads.
#[test]
fn llama_before_and_after_passes() {
    let _guard = settings("mlir").bind_to_scope();
    let path = testdata().join("models/llama_tiny.pt2");
    let program = import(&path).expect("imports");
    let lower_with = |opts: &LowerOptions| {
        let bindings = example_bindings(&program).expect("example sizes");
        lower(&program, bindings, opts).expect("lowers").module.text
    };
    let before = lower_with(&LowerOptions { passes: Vec::new(), ..LowerOptions::default() });
    let mut padded = LowerOptions::default();
    padded.pass_options.pad_multiple = Some(128);
    let after = lower_with(&padded);
    assert!(after.contains("tensor<256x128xf32>") && !before.contains("tensor<256x128xf32>"), "{after}");
    assert!(after.contains("(tensor<2x32x128xf32>, tensor<2x128x16xf32>) -> tensor<2x32x16xf32>"), "Q·Kᵀ at 128");
    insta::assert_snapshot!("llama_tiny_before_passes", before);
    insta::assert_snapshot!("llama_tiny_after_passes_pad128", after);
}

#[test]
fn stablehlo_is_deterministic() {
    for path in model_paths() {
        assert_eq!(stablehlo(&path), stablehlo(&path), "{}", path.display());
    }
}

#[test]
fn locations_carry_node_names_and_source_lines() {
    let text = stablehlo(&testdata().join("models/mlp.pt2"));
    assert!(text.contains("loc(\"addmm_1\"(#loc"), "{text}");
    assert!(text.contains("loc(\"testdata/gen.py\":"), "the innermost frame in model code: {text}");
}

#[test]
fn check_passes_on_every_test_model() {
    for path in model_paths() {
        let mut args = vec!["check", path.to_str().expect("utf-8 path")];
        args.extend(super::required_bucket_args(&path));
        let (code, out, err) = run_cli(&args);
        assert_eq!(code, 0, "{}: {out}{err}", path.display());
        assert!(out.contains("ok, all"), "{out}");
    }
}

/// Reversing a dynamic dim has no exact form in a size bucket (the padding would come first):
/// `check` and `compile` refuse it, naming the node, the op and the source line.
#[test]
fn ops_that_padding_would_change_are_refused() {
    let path = testdata().join("check/flip_seq.pt2");
    let p = path.to_str().expect("utf-8 path");
    let (code, out, err) = run_cli(&["check", p]);
    assert_eq!(code, 1, "{out}{err}");
    // A refusal of the size buckets is the program's problem, not an op's.
    assert!(out.contains("flip_seq.pt2: the program cannot be lowered:"), "{out}");
    let (code2, _, err2) = run_cli(&["compile", p, "-o", "unused.tpuexe", "--target", "cpu", "--no-cache"]);
    assert_eq!(code2, 1, "{err2}");
    for text in [&out, &err2] {
        for want in
            ["node `flip`", "aten.flip.default", "testdata/gen.py\", line", "no padding-safe form along a dynamic dim"]
        {
            assert!(text.contains(want), "missing `{want}` in:\n{text}");
        }
    }
    assert!(!std::path::Path::new("unused.tpuexe").exists());
}

/// `as_strided` of a stepped slice reads storage the slice skips, which the program does not
/// have: the import refuses it, naming the node, the operand and its layout.
#[test]
fn as_strided_of_a_view_with_gaps_is_refused() {
    let path = testdata().join("check/as_strided_gaps.pt2");
    let (code, out, err) = run_cli(&["check", path.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1, "{out}{err}");
    for want in [
        "node `as_strided` (torch.ops.aten.as_strided.default)",
        "reads the storage under `slice_1`, a view with gaps or repeats (sizes [3, 2], strides [4, 2]",
        "testdata/gen.py\", line",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
}

/// A Python float computed from data (`x.sum().item() / 2`) is returned as a 0-d f32, as
/// floats computed from sizes are (`size_floats`): here 6.0 for twelve ones.
#[test]
fn a_float_output_from_data_is_returned() {
    let tmp = super::parity::TempDir::new("item_float");
    let path = testdata().join("check/item_float.pt2");
    let art = tmp.0.join("item_float.tpuexe");
    let x = tmp.0.join("x.npy");
    let ones = 1.0f32.to_le_bytes().repeat(12);
    crate::npy::Array { dtype: torchtpu_passes::ir::DType::F32, shape: vec![3, 4], data: ones }.write(&x).expect("x");
    let [path, art, x, out] = [&path, &art, &x, &tmp.0.join("out")].map(|p| p.to_str().expect("utf-8").to_string());
    let (code, _, err) = run_cli(&["compile", &path, "-o", &art, "--target", "cpu"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_cli(&["run", &art, &x, "--out-dir", &out]);
    assert_eq!(code, 0, "{err}");
    let half = crate::npy::Array::read(std::path::Path::new(&out).join("out_1.npy").as_path()).expect("out_1");
    assert_eq!(
        (half.dtype, half.shape.as_slice(), half.data.as_slice()),
        (torchtpu_passes::ir::DType::F32, &[][..], &6.0f32.to_le_bytes()[..])
    );
}

/// A real export with a custom op that no compiler can know (`testlib.scale_rows`) between
/// ATen ops: `check` names it with its node and source line and exits 1.
#[test]
fn check_lists_every_unsupported_op() {
    let path = testdata().join("check/unsupported_ops.pt2");
    let (code, out, err) = run_cli(&["check", path.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1, "{out}{err}");
    for want in ["testlib.scale_rows.default", "nodes: scale_rows", "testdata/gen.py\", line"] {
        assert!(out.contains(want), "missing `{want}` in:\n{out}");
    }
    let (code, out, _) = run_cli(&["check", path.to_str().expect("utf-8 path"), "--format", "json"]);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["format"], "torchtpu-check/1");
    assert_eq!(report["ok"], false);
    let targets: Vec<&str> =
        report["problems"].as_array().expect("list").iter().filter_map(|p| p["target"].as_str()).collect();
    assert_eq!(targets, ["testlib.scale_rows.default"]);
}

/// A program saved as `torch.export.export` writes it, without `run_decompositions()`: `check`
/// and `compile` name its op outside Core ATen (`linear`) and say how to decompose it; its
/// `reshape` (sizes named `shape`) is read.
#[test]
fn an_undecomposed_program_gets_the_decomposition_hint() {
    let path = testdata().join("check/undecomposed.pt2");
    let path = path.to_str().expect("utf-8 path");
    let (code, out, err) = run_cli(&["check", path, "--format", "json"]);
    assert_eq!(code, 1, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let targets: Vec<&str> =
        report["problems"].as_array().expect("list").iter().filter_map(|p| p["target"].as_str()).collect();
    assert_eq!(targets, ["aten.linear.default"]);
    let hint = "`aten.linear.default` is not Core ATen: the program seems saved without decomposing it; \
                `torch.export.save(ep.run_decompositions(), path)` writes the Core ATen ops this compiler lowers";
    assert_eq!(report["hint"], hint);
    let (code, out, _) = run_cli(&["check", path]);
    assert_eq!(code, 1);
    assert!(out.ends_with(&format!("hint: {hint}\n")), "{out}");
    let mlir = std::env::temp_dir().join(format!("torchtpu-undecomposed-{}.mlir", std::process::id()));
    let (code, _, err) = run_cli(&["compile", path, "-o", mlir.to_str().expect("utf-8"), "--emit", "stablehlo"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("\nhint: {hint}")), "{err}");
}

#[test]
fn compile_refuses_unsupported_ops_naming_them() {
    let path = testdata().join("check/unsupported_ops.pt2");
    let out = std::env::temp_dir().join(format!("torchtpu-unsupported-{}.mlir", std::process::id()));
    let (code, _, err) =
        run_cli(&["compile", path.to_str().expect("utf-8"), "-o", out.to_str().expect("utf-8"), "--emit", "stablehlo"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("node `scale_rows` (torch.ops.testlib.scale_rows.default)"), "{err}");
    assert!(!out.exists());
}
