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
    ("bad_sym_expr", &["tensor `input_ids`", "cannot parse symbolic size `Mul(Integer(2), `"]),
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
        assert_said_once(&err);
    }
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
