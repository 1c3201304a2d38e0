//! A compile whose output and cache sit on a full disk: a small tmpfs mounted for the test in a
//! user and mount namespace of its own (`unshare -rm`, no privilege needed), at sizes that run
//! out of space at different moments (the first cache entry, the executables, the weights).
//! Each must fail with a message naming the file being written and the space it needs, leave
//! no `-o` file and no temporary file, and leave a cache that verifies clean; with room enough
//! the same compile succeeds.
#![cfg(feature = "mlir")]

use std::path::Path;
use std::process::Command;

/// What happened in the namespace: the compile's exit status and stderr, the folder's entries
/// after it, and `cache verify`'s exit status and output.
struct Outcome {
    status: i32,
    stderr: String,
    entries: Vec<String>,
    verify_status: i32,
    verify: String,
}

/// Compiles `bert_meanpool.pt2` for CPU onto a tmpfs of `size` (`mount -o size=`), with the
/// cache on the same file system, then lists the folder and verifies the cache.
fn compile_on_tmpfs(size: &str) -> Outcome {
    let bin = env!("CARGO_BIN_EXE_torchtpu-compile");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/bert_meanpool.pt2");
    let dir = std::env::temp_dir().join(format!("full-disk-{size}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let script = format!(
        r#"set -u
mount -t tmpfs -o size={size} none "$D" || exit 90
"$BIN" "$MODEL" -o "$D/out.tpuexe" --target cpu --cache-dir "$D/cache" 2>"$D/stderr"
echo "status=$?"
echo "stderr=$(tr '\n' ' ' < "$D/stderr")"
rm "$D/stderr"
echo "entries=$(ls -A "$D" | tr '\n' ' ')"
"$BIN" cache verify --cache-dir "$D/cache" >"$D/verify" 2>&1
echo "verify_status=$?"
echo "verify=$(tr '\n' ' ' < "$D/verify")""#
    );
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .env("D", &dir)
        .env("BIN", bin)
        .env("MODEL", &model)
        .output()
        .expect("runs unshare (util-linux)");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "a tmpfs of {size} in a namespace of its own ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("`{key}=` in:\n{stdout}"))
            .trim()
            .to_string()
    };
    let number = |key: &str| field(key).parse::<i32>().unwrap_or_else(|e| panic!("{key}: {e}"));
    Outcome {
        status: number("status"),
        stderr: field("stderr"),
        entries: field("entries").split_whitespace().map(str::to_string).collect(),
        verify_status: number("verify_status"),
        verify: field("verify"),
    }
}

#[test]
fn a_full_disk_fails_cleanly_at_every_moment() {
    // 64 KiB: the first cache entry does not fit; 600 KiB: the executables do, the weights do
    // not; 1200 KiB: the cache takes the space the artifact needed.
    for size in ["64k", "600k", "1200k"] {
        let o = compile_on_tmpfs(size);
        let why = format!("tmpfs of {size}: {}", o.stderr);
        assert_eq!(o.status, 1, "{why}");
        assert!(o.stderr.contains("cannot write `") && o.stderr.contains("out.tpuexe`"), "names the output: {why}");
        assert!(o.stderr.contains("No space left on device"), "{why}");
        assert!(o.stderr.contains("it needs ") && o.stderr.contains(" free"), "says the space needed: {why}");
        assert!(!o.stderr.contains("cannot read"), "blames no input: {why}");
        assert_eq!(o.entries, ["cache"], "no -o file and no temporary file: {why}");
        assert_eq!(o.verify_status, 0, "the cache verifies clean ({size}): {}", o.verify);
        assert!(o.verify.contains(" 0 damaged"), "{size}: {}", o.verify);
    }
    let o = compile_on_tmpfs("16m");
    assert_eq!(o.status, 0, "with room enough: {}", o.stderr);
    assert_eq!(o.entries, ["cache", "out.tpuexe"], "{}", o.stderr);
    assert!(o.verify.contains(" 0 damaged"), "{}", o.verify);
}
