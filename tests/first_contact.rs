//! What a new user sees on stderr, from the binary itself: a default compile (TPU and CPU)
//! prints nothing of libtpu's own log lines, `-v` lets them through and adds the per-phase
//! table, and `--format json` carries the phases. Runs the binary, as users do: plugins write
//! to the process's descriptor 2, which only a child process shows.
#![cfg(feature = "mlir")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// libtpu's two lines on an ordinary host without a TPU.
const LIBTPU_LINES: [&str; 2] = ["Failed to find host bounds", "hugepage_text"];

fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("first-contact-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder");
    dir
}

/// `torchtpu-compile mlp.pt2 -o DIR/mlp.tpuexe --no-cache` plus `extra`.
fn compile(dir: &Path, extra: &[&str]) -> Output {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/mlp.pt2");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_torchtpu-compile"));
    cmd.arg(&model).arg("-o").arg(dir.join("mlp.tpuexe")).arg("--no-cache").args(extra);
    let out = cmd.output().expect("runs the binary");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn a_default_compile_prints_nothing_of_libtpu_and_verbose_shows_it() {
    let dir = folder("quiet");
    let stderr = String::from_utf8_lossy(&compile(&dir, &[]).stderr).into_owned();
    for line in LIBTPU_LINES {
        assert!(!stderr.contains(line), "`{line}` on stderr:\n{stderr}");
    }
    assert!(stderr.contains("tpu:v6e:1x1 [main]: compiled") && stderr.contains("cpu [main]: compiled"), "{stderr}");
    let stderr = String::from_utf8_lossy(&compile(&dir, &["-v"]).stderr).into_owned();
    assert!(LIBTPU_LINES.iter().any(|l| stderr.contains(l)), "-v lets libtpu's lines through:\n{stderr}");
    for phase in ["phase        time", "\nread ", "\nlower ", "\ncompile ", "\nwrite ", "\ntotal "] {
        assert!(stderr.contains(phase), "`{phase}` in the -v table:\n{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_summaries_carry_the_phases() {
    let dir = folder("phases");
    let out = compile(&dir, &["--target", "cpu", "--format", "json"]);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON summary");
    let phases: Vec<&str> =
        summary["phases"].as_array().expect("phases").iter().filter_map(|p| p["phase"].as_str()).collect();
    assert_eq!(phases, ["read", "lower", "compile", "write"]);
    assert!(summary["phases"][3]["bytes"].as_u64().is_some_and(|b| b > 0), "{}", summary["phases"]);
    let _ = std::fs::remove_dir_all(&dir);
}
