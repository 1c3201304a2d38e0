//! The command line compiles CPU executables with XLA:CPU's memory-minimizing schedule (added to
//! `XLA_FLAGS`), and `XLA_FLAGS` is part of every cache key: executables compiled under other
//! XLA flags never stand in for each other. Runs the binary, as users do.
#![cfg(feature = "mlir")]

use std::path::Path;
use std::process::Command;

/// Compiles the test MLP for CPU into a fresh cache folder's `cache` under `XLA_FLAGS` =
/// `flags` (unset for `None`); the cache outcome the summary reports (`compiled`, `hit`).
fn compile(dir: &Path, flags: Option<&str>) -> String {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/mlp.pt2");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_torchtpu-compile"));
    cmd.arg(&model).arg("-o").arg(dir.join("mlp.tpuexe")).args(["--target", "cpu", "--format", "json"]);
    cmd.arg("--cache-dir").arg(dir.join("cache"));
    match flags {
        Some(f) => cmd.env("XLA_FLAGS", f),
        None => cmd.env_remove("XLA_FLAGS"),
    };
    let out = cmd.output().expect("runs the binary");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON summary");
    summary["targets"][0]["cache"].as_str().expect("a cache outcome").to_string()
}

#[test]
fn xla_flags_are_part_of_the_cache_key() {
    let dir = std::env::temp_dir().join(format!("xla-environment-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder");
    assert_eq!(compile(&dir, None), "compiled");
    assert_eq!(compile(&dir, None), "hit");
    // Another flag: another key. The binary still adds its schedule flag to the user's.
    assert_eq!(compile(&dir, Some("--xla_cpu_enable_fast_math=false")), "compiled");
    assert_eq!(compile(&dir, Some("--xla_cpu_enable_fast_math=false")), "hit");
    // The user's own schedule flag is kept as given (and keys its executables).
    assert_eq!(compile(&dir, Some("--xla_cpu_enable_concurrency_optimized_scheduler=true")), "compiled");
    assert_eq!(compile(&dir, None), "hit");
    let _ = std::fs::remove_dir_all(&dir);
}
