//! A crash inside XLA names what the compile was on. libtpu 0.0.52 (the version set-up pins)
//! segfaults in its fusion on a (value, index) reduce whose index nobody reads, which is what
//! GPT-OSS's attention sinks (`max(…).values`, the `sink_dyn` test model) lower to, in some
//! buckets (4 sequences of 2 tokens is one), unless `dce` narrows it to a plain maximum. With
//! `--no-dce` the crash is still there: the process dies of the signal, says which target and
//! bucket it was compiling, and leaves no artifact. With `dce` (the default) the same archive
//! compiles. When a newer libtpu no longer crashes, the first test fails and says so: it then
//! needs another program that crashes the plugin.
#![cfg(feature = "mlir")]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh scratch folder for test `name`.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plugin-crash-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn compile_sink_dyn(out: &Path, extra: &[&str]) -> std::process::Output {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/sink_dyn.pt2");
    Command::new(env!("CARGO_BIN_EXE_torchtpu-compile"))
        .arg("compile")
        .arg(model)
        .arg("-o")
        .arg(out)
        .args(["--target", "tpu:v6e:1x1", "--no-cache", "-q"])
        // One bucket (4 sequences of 2 tokens) whose program libtpu crashes on.
        .args(["--buckets", "s70=2", "--buckets", "s72=4"])
        .args(extra)
        .output()
        .expect("the compiler starts")
}

#[test]
fn a_segfault_in_libtpu_names_the_target_and_bucket() {
    let dir = scratch("no-dce");
    let out = dir.join("sink.tpuexe");
    let done = compile_sink_dyn(&out, &["--no-dce"]);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(
        done.status.signal(),
        Some(libc::SIGSEGV),
        "libtpu no longer crashes on this program ({}): the test needs another one\n{stderr}",
        done.status
    );
    assert!(stderr.contains("an XLA plugin crashed this process (SIGSEGV)"), "{stderr}");
    assert!(
        stderr.contains("It was on:\n  compile tpu:v6e:1x1 [s70-2.s72-4]\n"),
        "names the target and bucket: {stderr}"
    );
    assert!(!out.exists(), "no artifact is left");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attention_sinks_compile_for_tpu() {
    let dir = scratch("dce");
    let out = dir.join("sink.tpuexe");
    let done = compile_sink_dyn(&out, &[]);
    assert!(done.status.success(), "{}\n{}", done.status, String::from_utf8_lossy(&done.stderr));
    assert!(out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
