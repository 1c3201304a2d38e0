//! Malformed archives (`testdata/bad/`, made by `testdata/make_bad.py`): each fails with exit
//! code 1 and a message naming the archive entry, weight, tensor or node — never a panic.

use super::{run_cli, testdata};

/// Archive name → fragments its error message must contain.
const CASES: &[(&str, &[&str])] = &[
    ("not_a_zip", &["not a pt2 archive", "EOCD"]),
    ("truncated", &["not a pt2 archive"]),
    ("missing_model_json", &["archive entry `mlp/models/model.json` is missing"]),
    ("invalid_json", &["archive entry `mlp/models/model.json`: invalid JSON at line 3, column 3"]),
    ("schema_major_9", &["`mlp/models/model.json`", "schema version 9.20 is not supported"]),
    ("missing_weight_file", &["weight `fc1.weight`", "`mlp/data/weights/weight_0`", "missing"]),
    (
        "short_weight",
        &["weight `fc1.weight`", "`mlp/data/weights/weight_0`", "needs 512 elements but the storage holds 250"],
    ),
    ("unknown_dtype", &["weight `fc1.weight`", "unknown dtype number 99"]),
    ("path_traversal", &["archive entry `mlp/../evil`", "escapes the archive folder"]),
    ("size_exceeds_file", &["archive entry `mlp/data/weights/weight_0`", "runs past the end"]),
    ("pickled_weight", &["weight `fc1.weight`", "pickled", "never loads"]),
    ("dangling_input", &["node `relu`", "aten.relu.default", "reads tensor `no_such_tensor`"]),
    ("duplicate_node_name", &["node `permute`", "aten.addmm.default", "another node has the same name"]),
    ("bad_sym_expr", &["tensor `x`", "cannot parse symbolic size `Mul(Integer(2), `"]),
    // The zip container.
    ("empty_file", &["not a pt2 archive", "the file is empty"]),
    ("no_entries", &["not a pt2 archive", "the zip has no entries"]),
    ("duplicate_entry", &["archive entry `mlp/data/weights/weight_0`", "two entries have this name"]),
    ("compressed_entry", &["archive entry `mlp/models/model.json`", "compressed (deflate)"]),
    ("local_header_mismatch", &["entry `mlp/data/weights/weight_0`", "local header names `mlp/data/weights/weight_9`"]),
    (
        "header_points_elsewhere",
        &["entry `mlp/data/weights/weight_0`", "local header names `mlp/data/weights/weight_1`"],
    ),
    ("truncated_before_directory", &["not a pt2 archive", "damaged", "embedded zip"]),
    ("weight_bit_flip", &["archive entry `mlp/data/weights/weight_0`", "do not match their CRC-32", "damaged"]),
    ("overlapping_entries", &["archive entry `mlp/extra/hidden`", "overlap those of entry `mlp/extra/outer`"]),
    ("archive_format_pt3", &["archive entry `mlp/archive_format`", "expected `pt2`, found `pt3`"]),
    ("big_endian", &["archive entry `mlp/byteorder`", "only little-endian"]),
    ("missing_archive_format", &["archive entry `mlp/archive_format` is missing"]),
    // JSON of the wrong structure is not called invalid JSON, and serde's Rust names stay out.
    (
        "model_json_wrong_structure",
        &["`mlp/models/model.json`", "does not follow the export schema", "expected an object"],
    ),
    ("model_json_binary", &["`mlp/models/model.json`: invalid JSON at line 1, column 1"]),
    ("weights_config_invalid_json", &["`mlp/data/weights/model_weights_config.json`: invalid JSON"]),
    ("size_too_large_for_i64", &["does not follow the export schema", "expected an integer that fits in 64 bits"]),
    ("schema_major_string", &["does not follow the export schema", "string \"8\""]),
    // Declared types are checked against the ops' type rules, not believed.
    ("addmm_declared_i64", &["node `addmm` (addmm)", "declared i64[4,32], but its operands give f32[4,32]"]),
    ("relu_declared_f16", &["node `relu` (relu)", "declared f16[4,32], but its operands give f32[4,32]"]),
    ("addmm_declared_wider", &["node `addmm` (addmm)", "declared f32[4,33], but its operands give f32[4,32]"]),
    (
        "permute_declared_unpermuted",
        &["node `permute` (permute)", "declared f32[32,16], but its operands give f32[16,32]"],
    ),
    ("relu_declared_rank3", &["node `relu` (relu)", "declared f32[4,32,1]"]),
    ("node_unknown_dtype", &["node `relu`", "tensor `relu`", "unknown dtype number 99"]),
    ("permute_repeated_dim", &["node `permute` (permute)", "[0, 0] is not a permutation of 2 dims"]),
    // Accepted before although their meaning changed.
    ("range_min_above_max", &["range constraint of symbol `s77`", "minimum 600 is above its maximum 64"]),
    ("range_min_negative", &["range constraint of symbol `s77`", "minimum is -1, but a size cannot be negative"]),
    ("range_min_int64", &["range constraint of symbol `s77`", "minimum is -9223372036854775808"]),
    ("outputs_drop_a_spec", &["graph signature", "the graph returns 0 value(s), but its output specs describe 1"]),
    ("permute_dim_out_of_range", &["node `permute` (permute)", "[1, 5] is not a permutation of 2 dims"]),
    ("addmm_wrong_operand", &["node `addmm` (addmm)", "its operands give f32[32,32]"]),
    ("missing_argument", &["node `addmm`", "missing required argument `mat1`"]),
    ("argument_wrong_kind", &["node `permute`", "argument `dims`: expected a list of ints"]),
    ("output_produced_twice", &["node `permute_1`", "output `permute` is also produced by another node"]),
    ("missing_tensor_values", &["node `relu`", "tensor `relu` in `tensor_values`: no entry"]),
    ("hostile_node_name", &["node `relu\\u{1b}[31m\\nxxx", "… (+99930 more bytes)`", "reads tensor `no_such_tensor`"]),
    // The graph signature.
    ("signature_unknown_weight", &["graph signature", "refers to `nope.weight`, which neither payload config holds"]),
    ("signature_missing_input_spec", &["graph signature: 4 input specs for 5 graph inputs"]),
    ("signature_dangling_output", &["graph signature: output `nope` is produced by no node or input"]),
    ("signature_token_output", &["graph signature: effect-token outputs are not supported"]),
    ("signature_int_user_input", &["graph signature: user inputs of kind `as_int` are not supported"]),
    // Payload configs: checked against the graph and their storage, with checked arithmetic.
    (
        "weight_config_shape",
        &[
            "weight `fc1.weight`",
            "payload config says f32[16, 32] but the graph reads input `p_fc1_weight` as f32[32,16]",
        ],
    ),
    ("weight_config_dtype", &["weight `fc1.weight`", "payload config says f16[32, 16]"]),
    (
        "weight_config_strides",
        &["weight `fc1.weight`", "strides [1, 32] but the graph's `p_fc1_weight` has strides [16, 1]"],
    ),
    ("weight_offset_overflow", &["weight `fc1.weight`", "offset 9223372036854775806", "overflows"]),
    ("weight_stride_overflow", &["weight `fc1.weight`", "strides [4611686018427387904, 1]", "overflows"]),
    ("weight_numel_overflow", &["weight `fc1.weight`", "the product overflows"]),
    ("weight_negative_size", &["weight `fc1.weight`", "negative size"]),
    ("weight_symbolic_size", &["weight `fc1.weight`", "stored tensors must be static"]),
    ("weight_rank_mismatch", &["weight `fc1.weight`", "2 sizes but 1 strides"]),
    ("weight_config_no_meta", &["weight `fc1.weight`", "no tensor_meta"]),
    ("weight_config_wrong_path", &["weight `fc1.weight`", "`mlp/data/weights/weight_99`", "missing"]),
    ("empty_weight", &["weight `fc1.weight`", "needs 512 elements but the storage holds 0"]),
    ("partial_element_weight", &["weight `fc1.weight`", "2047 bytes is not a whole number of 4-byte f32 elements"]),
    // Size expressions: bounded recursion, checked arithmetic, and no megabyte echoes.
    ("size_expr_too_deep", &["tensor `relu`", "calls nested more than 64 deep", "… (+"]),
    ("size_expr_overflow", &["tensor `relu`", "no symbols but no value either"]),
    // The export's guards: each read, none ignored.
    ("guard_outside_grammar", &["guard `L['x'].size()[1] !! 16` of the export", "`!` is not part of the grammar"]),
    (
        "guard_unknown_input",
        &["guard `L['y'].size()[0] == 3`", "reads input `y`, which the program does not take (its inputs: x)"],
    ),
    ("guard_dim_out_of_range", &["guard `L['x'].size()[5] == 3`", "reads dim 5 of input `x`, which has 2"]),
];

#[test]
fn every_malformed_archive_is_refused_with_a_clear_message() {
    let dir = testdata().join("bad");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("testdata/bad exists")
        .filter_map(|e| e.ok()?.path().file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter(|s| s != "README")
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CASES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every archive in testdata/bad has an expected message");

    for (name, fragments) in CASES {
        let path = dir.join(format!("{name}.pt2"));
        let (code, out, err) = run_cli(&["inspect", path.to_str().expect("utf-8 path")]);
        assert_eq!(code, 1, "{name}: exit code, stderr: {err}");
        assert!(out.is_empty(), "{name}: printed a report: {out}");
        assert!(err.starts_with("error: cannot read `"), "{name}: {err}");
        for f in *fragments {
            assert!(err.contains(f), "{name}: message lacks `{f}`:\n{err}");
        }
        assert!(err.len() < 1200, "{name}: a {}-byte message", err.len());
        assert!(!err.chars().any(|c| c.is_control() && c != '\n'), "{name}: control characters in {err:?}");
        assert_said_once(&err);
    }
    assert!(CASES.len() >= 60, "{} kinds of damage", CASES.len());
}

/// A compile checks the weights' bytes while XLA compiles: a damaged payload still fails the
/// compile naming the entry, and leaves no artifact and no weights file behind.
#[test]
fn a_damaged_payload_fails_the_compile_and_writes_nothing() {
    let bad = testdata().join("bad/weight_bit_flip.pt2");
    let dir = std::env::temp_dir().join(format!("torchtpu-bad-payload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let (art, cache) = (dir.join("x.tpuexe"), dir.join("cache"));
    for extra in [&[][..], &["--weights", "external"]] {
        let args = ["compile", bad.to_str().expect("utf-8"), "-o", art.to_str().expect("utf-8"), "--target", "cpu"];
        let (code, _, err) = run_cli(&[&args[..], &["--cache-dir", cache.to_str().expect("utf-8")], extra].concat());
        assert_eq!(code, 1, "{err}");
        for f in ["cannot compile", "archive entry `mlp/data/weights/weight_0`", "do not match their CRC-32"] {
            assert!(err.contains(f), "{extra:?}: message lacks `{f}`:\n{err}");
        }
        let left: Vec<_> =
            std::fs::read_dir(&dir).expect("dir").filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("cache")], "{extra:?}: left behind");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// No part of an error message (between `: `) is repeated: a cause is printed once even when
/// its parent's message quotes it.
fn assert_said_once(err: &str) {
    let parts: Vec<&str> = err.trim().split(": ").filter(|p| p.len() > 12).collect();
    for (i, p) in parts.iter().enumerate() {
        assert!(!parts[i + 1..].contains(p), "`{p}` is said twice in: {err}");
    }
}

#[test]
fn missing_file_and_usage_errors() {
    let (code, _, err) = run_cli(&["inspect", "no/such/model.pt2"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read `no/such/model.pt2`"), "{err}");
    assert_said_once(&err);
    let (code, _, err) = run_cli(&["inspect"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run_cli(&["inspect", "x.pt2", "--format", "yaml"]);
    assert_eq!(code, 2, "{err}");
    let (code, out, _) = run_cli(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("inspect"), "{out}");
}

/// `compile --tokenizer` checks the folder before anything is compiled: a folder without a
/// `tokenizer.json`, a file that is not one, and a form other than an artifact are refused.
#[test]
fn a_wrong_tokenizer_folder_is_refused_before_compiling() {
    let dir = std::env::temp_dir().join(format!("torchtpu-tokenizer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let model = super::testdata().join("models/mlp.pt2").display().to_string();
    let out = dir.join("mlp.tpuexe").display().to_string();
    let shown = dir.display().to_string();
    let compile = |extra: &[&str]| run_cli(&[&["compile", &model, "-o", &out, "--target", "cpu"][..], extra].concat());
    let (code, _, err) = compile(&["--tokenizer", &shown]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("`--tokenizer {shown}`: the folder has no `tokenizer.json`")), "{err}");
    std::fs::write(dir.join("tokenizer.json"), "{").expect("written");
    let (code, _, err) = compile(&["--tokenizer", &shown]);
    assert_eq!(code, 1);
    assert!(err.contains("`tokenizer.json` is not a tokenizer"), "{err}");
    let (code, _, err) = compile(&["--tokenizer", &shown, "--emit", "stablehlo"]);
    assert_eq!(code, 2);
    assert!(err.contains("`--tokenizer` needs `--emit exe`"), "{err}");
    assert!(!dir.join("mlp.tpuexe").exists(), "nothing is written");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that closed its end of the pipe (`inspect … | head`).
struct ClosedPipe;

impl std::io::Write for ClosedPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
}

#[test]
fn a_closed_output_pipe_ends_quietly() {
    let model = testdata().join("models/mlp.pt2");
    let argv = ["torchtpu-compile", "inspect", model.to_str().expect("utf-8 path")].map(Into::into);
    let mut err = Vec::new();
    let code = crate::cli::main_with(argv, &mut ClosedPipe, &mut err);
    assert_eq!((code, String::from_utf8_lossy(&err).as_ref()), (0, ""));
}

/// Inputs the fuzzer (`cargo xtask fuzz`) once crashed on stay refused with a message.
#[test]
fn fuzz_findings_are_refused_cleanly() {
    let dir = testdata().join("fuzz/findings");
    let findings: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect()).unwrap_or_default();
    for path in findings.iter().filter(|p| p.extension().is_some_and(|e| e == "pt2" || e == "tpuexe")) {
        let (code, _, err) = run_cli(&["inspect", path.to_str().expect("utf-8 path")]);
        assert_eq!(code, 1, "{}: {err}", path.display());
        assert!(err.starts_with("error: cannot read `"), "{}: {err}", path.display());
    }
}
