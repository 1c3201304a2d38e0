//! Shapes as the export reasons about them: its guards honoured (a size it excludes is refused
//! by `run` and a `Session`, never served), dims it left unbounded bounded by `--buckets` or
//! `--max` (and refused by `check` as by `compile` without either), derived dims (`8*s`) bound
//! by solving for their symbol, and the default buckets of a program with three dynamic dims
//! kept under the budget, all equal to eager at every reference size.

use super::parity::{
    case_inputs, case_suffixes, compile_model, compile_model_with, open_session, request, run_case, TempDir,
};
use super::{run_cli, testdata};
use crate::artifact::Artifact;
use crate::npy::Array;

/// `x * 2 if x.shape[1] == 16 else x + 1`, exported at 8: the graph is `x + 1`, and the guard
/// `L['x'].size()[1] != 16` says where it holds. Every other size equals eager (15 and 17
/// included); 16, where eager takes the other branch, is refused by `run` and a `Session` with
/// the guard's text, as `torch.export.load(…).module()` refuses it, and the session goes on.
#[test]
fn a_size_the_guards_exclude_is_refused_never_served() {
    const GUARD: &str = "L['x'].size()[1] != 16";
    let tmp = TempDir::new("guarded");
    let artifact = compile_model("guarded_dyn", &tmp.0);
    let cases = case_suffixes("guarded_dyn");
    assert!(cases.len() >= 12, "{cases:?}");
    for case in &cases {
        run_case("guarded_dyn", &artifact, case, &tmp.0);
    }
    let excluded = testdata().join("models/guarded_dyn/in_0_excluded0.npy");
    let out = tmp.0.join("out");
    let (code, stdout, err) = run_cli(&["run", path(&artifact), path(&excluded), "--out-dir", path(&out)]);
    assert_eq!(code, 1, "{stdout}{err}");
    assert!(err.contains(&format!("break a condition of the export: `{GUARD}` (`x`: [3, 16])")), "{err}");

    let mut session = open_session(&artifact);
    let Err(refused) = session.call(&[Array::read(&excluded).expect("npy")], std::slice::from_ref(&excluded), 0) else {
        panic!("a size the guard excludes ran")
    };
    assert_eq!(refused.kind(), "input", "{refused}");
    assert!(refused.to_string().contains(GUARD), "{refused}");
    let fifteen = case_inputs("guarded_dyn", "_case5");
    let inputs: Vec<Array> = fifteen.iter().map(|p| Array::read(p).expect("npy")).collect();
    assert_eq!(inputs[0].shape, [3, 15]);
    session.call(&inputs, &fifteen, 0).expect("the next call in range runs");

    let m = Artifact::open(&artifact).expect("opens").manifest;
    let guards: Vec<&str> = m.signature.guards.iter().map(crate::Guard::text).collect();
    assert_eq!(guards, [GUARD]);
    for inspected in [&artifact, &testdata().join("models/guarded_dyn.pt2")] {
        let (code, stdout, _) = run_cli(&["inspect", path(inspected)]);
        assert_eq!(code, 0);
        assert!(
            stdout.contains(&format!("guards (every call's inputs must meet each; others are refused):\n  {GUARD}\n"))
        );
    }
}

/// A batch the export left unbounded (`Dim.AUTO`: `[2, int_oo]`): `compile` and `check` both
/// refuse it by default naming both ways to bound it; `--buckets` bounds it at its largest size
/// (every case up to it equals eager, a larger batch is refused with the range), and so does
/// `--max`; a `--max` above a bound the export gives is refused.
#[test]
fn an_unbounded_dim_takes_its_bound_from_buckets_or_max() {
    let model = testdata().join("models/auto_batch_dyn.pt2");
    let tmp = TempDir::new("unbounded");
    let out = tmp.0.join("a.tpuexe");
    let why = "has no upper bound (the export left it unbounded: `Dim.AUTO`, or a `Dim` without max): bound it \
               with `--max s77=N`, or list its sizes with `--buckets s77=N,N,…`";
    let (code, _, err) = run_cli(&["compile", path(&model), "-o", path(&out), "--target", "cpu"]);
    assert_eq!(code, 1);
    assert!(err.contains(why), "{err}");
    let (code, stdout, _) = run_cli(&["check", path(&model)]);
    assert_eq!(code, 1);
    assert!(stdout.contains(why), "check says what compile says: {stdout}");
    let (code, stdout, err) = run_cli(&["check", path(&model), "--max", "s77=32"]);
    assert_eq!(code, 0, "{stdout}{err}");

    let artifact = compile_model("auto_batch_dyn", &tmp.0);
    let m = Artifact::open(&artifact).expect("opens").manifest;
    assert_eq!((m.signature.symbols[0].min, m.signature.symbols[0].max), (Some(2), Some(16)));
    for case in &case_suffixes("auto_batch_dyn") {
        run_case("auto_batch_dyn", &artifact, case, &tmp.0);
    }
    let big = tmp.0.join("x17.npy");
    Array { dtype: torchtpu_passes::ir::DType::F32, shape: vec![17, 16], data: vec![0; 17 * 16 * 4] }
        .write(&big)
        .expect("writes");
    let (code, _, err) = run_cli(&["run", path(&artifact), path(&big), "--out-dir", path(&tmp.0.join("o"))]);
    assert_eq!(code, 1);
    assert!(err.contains("dim 0 is 17, outside the sizes this artifact serves (2 to 16)"), "{err}");

    let mut req = request();
    req.buckets = vec![crate::buckets::parse_max("x:0=8").expect("parses")];
    let bounded = compile_model_with("auto_batch_dyn", &tmp.0, &req);
    let m = Artifact::open(&bounded).expect("opens").manifest;
    let sizes: Vec<i64> = m.buckets.iter().map(|b| b.bindings["s77"]).collect();
    assert_eq!((sizes, m.signature.symbols[0].max), (vec![2, 4, 8], Some(8)));

    let bounded_model = testdata().join("models/guarded_dyn.pt2");
    let (code, _, err) =
        run_cli(&["compile", path(&bounded_model), "-o", path(&out), "--target", "cpu", "--max", "x:1=65"]);
    assert_eq!(code, 1);
    assert!(err.contains("--max s27=65: the export bounds `s27` at 64; larger sizes were not traced"), "{err}");
}

/// A CNN exported with `H = 8*Dim("kh", 2..8)` and `W = 8*Dim("kw", 2..8)`: the input's dims
/// are `8*s`, and each symbol is bound by solving for it. Every case equals eager; a side that
/// is no multiple of 8 and one past 64 are refused, naming the dim and its declared form.
#[test]
fn derived_dims_bind_their_symbols_by_solving() {
    let tmp = TempDir::new("derived");
    let artifact = compile_model("derived_cnn_dyn", &tmp.0);
    let m = Artifact::open(&artifact).expect("opens").manifest;
    assert_eq!(m.buckets.len(), 9, "kh and kw in powers of two: 2, 4, 8 each");
    assert_eq!(serde_json::json!(m.signature.inputs[0].dims), serde_json::json!([2, 3, "8*s52", "8*s11"]));
    let mut used = std::collections::BTreeSet::new();
    for case in &case_suffixes("derived_cnn_dyn") {
        used.insert(run_case("derived_cnn_dyn", &artifact, case, &tmp.0));
    }
    assert!(used.len() >= 6, "{used:?}");
    for (shape, message) in [
        ([2, 3, 20, 32], "dim 2 is 20, but the export declares it `8*s52`: a multiple of 8"),
        ([2, 3, 32, 72], "dim 3 is 72, outside the sizes this artifact serves (16 to 64)"),
    ] {
        let x = tmp.0.join("x.npy");
        let bytes = shape.iter().product::<i64>() as usize * 4;
        Array { dtype: torchtpu_passes::ir::DType::F32, shape: shape.to_vec(), data: vec![0; bytes] }
            .write(&x)
            .expect("writes");
        let (code, _, err) = run_cli(&["run", path(&artifact), path(&x), "--out-dir", path(&tmp.0.join("o"))]);
        assert_eq!(code, 1);
        assert!(err.contains(message), "{err}");
    }
}

/// Three dynamic dims (batch, target and source lengths of a cross-attention): powers of two
/// would make 196 buckets; by default the compile keeps 64, says which in a note (as `check`
/// does), and every case equals eager.
#[test]
fn three_dynamic_dims_compile_by_default_within_the_budget() {
    let model = testdata().join("models/cross_attention_3dyn.pt2");
    let (code, stdout, _) = run_cli(&["check", path(&model)]);
    assert_eq!(code, 0, "{stdout}");
    let note = "powers of two for every dynamic dim would make 196 buckets (7 for s27 × 7 for s56 × 4 for s77), \
                more than the 64 a compile makes by default; chose 64";
    assert!(stdout.contains(note), "{stdout}");
    let tmp = TempDir::new("three-dims");
    let out = tmp.0.join("x.tpuexe");
    let (code, _, err) = run_cli(&["compile", path(&model), "-o", path(&out), "--target", "cpu"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("note: {note}")), "{err}");
    assert_eq!(Artifact::open(&out).expect("opens").manifest.buckets.len(), 64);
    for case in &case_suffixes("cross_attention_3dyn") {
        run_case("cross_attention_3dyn", &out, case, &tmp.0);
    }
}

/// T5's encoder and decoder step exported by transformers' own recipe, whose dims have no
/// minimum (`[0, 32]`): in the bucket of size 1 a view that splits the heads off
/// (`[1, s, 32] → [1, s, 2, 16]`) was refused as a regrouping, the size 0 the masks compared at
/// making every size equal. Buckets serve sizes from 1; every case (1, each edge and edge − 1)
/// equals eager, and a size 0 is refused.
#[test]
fn transformers_seq2seq_recipe_at_every_size() {
    for (name, cases) in [("t5_recipe_encoder", 11), ("t5_recipe_decoder", 7)] {
        let tmp = TempDir::new(name);
        let artifact = compile_model(name, &tmp.0);
        let all = case_suffixes(name);
        assert_eq!(all.len(), cases, "{name}");
        for case in &all {
            run_case(name, &artifact, case, &tmp.0);
        }
        let m = Artifact::open(&artifact).expect("opens").manifest;
        assert_eq!(m.buckets.first().map(|b| b.serves.values().next().copied()), Some(Some([1, 1])), "{name}");
    }
    let tmp = TempDir::new("t5-empty");
    let artifact = compile_model("t5_recipe_encoder", &tmp.0);
    let empty = tmp.0.join("empty.npy");
    Array { dtype: torchtpu_passes::ir::DType::I64, shape: vec![1, 0], data: vec![] }.write(&empty).expect("writes");
    let (code, _, err) = run_cli(&["run", path(&artifact), path(&empty), "--out-dir", path(&tmp.0.join("o"))]);
    assert_eq!(code, 1);
    assert!(err.contains("dim 1 is 0, outside the sizes this artifact serves (1 to 32)"), "{err}");
}

/// Forms that were refused: `grid_sample` along a dynamic batch (position by position along
/// the batch and the grid's points), an `arange` whose start is a symbolic size (the positions
/// after a past: counted from 0, the real size added), and a view of a count from data merged
/// with the dim after it (`[u0, 16, 64] → [16*u0, 64]`, compared where the count is not 0).
/// Each equals eager at every case: sizes across the buckets, and counts of 0, 1, 4 and 8.
#[test]
fn sampling_positions_and_counts_from_data_at_every_size() {
    for (name, cases) in [("grid_sample_dyn", 7), ("positions_after_past_dyn", 7), ("rows_of_count", 4)] {
        let tmp = TempDir::new(name);
        let artifact = compile_model(name, &tmp.0);
        let all = case_suffixes(name);
        assert_eq!(all.len(), cases, "{name}");
        let mut used = std::collections::BTreeSet::new();
        for case in &all {
            used.insert(run_case(name, &artifact, case, &tmp.0));
        }
        assert!(name == "rows_of_count" || used.len() >= 3, "{name}: {used:?}");
    }
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}
