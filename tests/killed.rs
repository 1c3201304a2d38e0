//! A compile killed with SIGKILL at moments spread evenly over its run (reading, lowering,
//! compiling) and as its first cache entry appears must leave the old `-o` file or a whole new
//! one, never a torn one, and a cache that verifies clean and serves no bad entry: the next
//! compile from that cache gives an artifact whose outputs match eager's. Killed while writing
//! the artifact (64 MiB of weights, so that the write lasts), it leaves the old file or the
//! whole new one, and the next writer removes the temporary file it left.
#![cfg(feature = "mlir")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Moments at which a compile is killed, spread over its uninterrupted run.
const KILLS: u32 = 8;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_torchtpu-compile"))
}

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models")
}

fn ok(out: Output, what: &str) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{text}", out.status);
    text
}

/// `bert_meanpool.pt2` compiled for CPU to `out` through the cache at `cache`.
fn compile(out: &Path, cache: &Path) -> Command {
    let mut cmd = bin();
    cmd.arg(models().join("bert_meanpool.pt2")).arg("-o").arg(out).args(["--target", "cpu", "--cache-dir"]).arg(cache);
    cmd
}

/// Runs `artifact` on the model's recorded inputs; its outputs must match eager's.
fn matches_eager(artifact: &Path, dir: &Path) {
    let data = models().join("bert_meanpool");
    let out = bin()
        .arg("run")
        .arg(artifact)
        .arg(data.join("in_0.npy"))
        .arg(data.join("in_1.npy"))
        .arg("--out-dir")
        .arg(dir.join("run"))
        .arg("--reference")
        .arg(&data)
        .output()
        .expect("runs the binary");
    ok(out, &format!("run {}", artifact.display()));
}

fn cache_verifies_clean(cache: &Path, moment: &str) {
    let out = bin().args(["cache", "verify", "--cache-dir"]).arg(cache).output().expect("runs the binary");
    let text = ok(out, &format!("cache verify after a kill {moment}"));
    assert!(text.contains(" 0 damaged"), "after a kill {moment}: {text}");
}

/// When the compile is killed.
enum Moment {
    /// This long after its start.
    After(Duration),
    /// As soon as an entry shows up in its cache.
    CacheEntry,
}

/// Checks `seen` as fast as it can until it holds (true), the child ends or `limit` passes.
fn poll(child: &mut std::process::Child, limit: Duration, seen: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if seen() {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
    }
    false
}

/// True when `dir` or a folder in it holds a file.
fn dir_has_file(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| e.path().is_file() || dir_has_file(&e.path()))
}

fn temporary_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("the folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn a_compile_killed_at_any_moment_leaves_the_old_artifact_or_the_new_one() {
    let dir = std::env::temp_dir().join(format!("killed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder");
    let out = dir.join("model.tpuexe");

    // The old artifact at `-o`: another model's, so that old and new cannot be mistaken.
    let mut old = bin();
    old.arg(models().join("mlp.pt2")).arg("-o").arg(&out).args(["--target", "cpu", "--no-cache"]);
    ok(old.output().expect("runs the binary"), "the old artifact's compile");
    let old_bytes = std::fs::read(&out).expect("the old artifact");

    // An uninterrupted compile, cold, times the run the kills are spread over.
    let start = Instant::now();
    ok(compile(&dir.join("whole.tpuexe"), &dir.join("cache-whole")).output().expect("runs"), "the whole compile");
    let run = start.elapsed();

    let mut moments: Vec<Moment> = (1..=KILLS).map(|k| Moment::After(run * k / (KILLS + 1))).collect();
    moments.push(Moment::CacheEntry);
    for (k, when) in moments.iter().enumerate() {
        let cache = dir.join(format!("cache-{k}"));
        let moment = match when {
            Moment::After(t) => format!("after {t:.1?} of {run:.1?}"),
            Moment::CacheEntry => "as the first cache entry appears".to_string(),
        };
        std::fs::write(&out, &old_bytes).expect("the old artifact back");
        let mut child = compile(&out, &cache).stderr(std::process::Stdio::null()).spawn().expect("starts");
        let caught = match when {
            Moment::After(t) => {
                std::thread::sleep(*t);
                true
            }
            Moment::CacheEntry => poll(&mut child, run * 2, || dir_has_file(&cache.join("v1/entries"))),
        };
        let _ = child.kill(); // SIGKILL; it may have finished already
        let _ = child.wait();
        if !caught {
            eprintln!("killed {moment}: the compile ended first");
        }

        let now = std::fs::read(&out).expect("an artifact at -o after the kill");
        let kept = now == old_bytes;
        if !kept {
            matches_eager(&out, &dir); // a whole new artifact, never a torn one
        }
        let left = temporary_files(&dir);
        eprintln!(
            "killed {moment}: {} at -o, {} temporary file(s)",
            if kept { "the old artifact" } else { "the new one" },
            left.len()
        );
        cache_verifies_clean(&cache, &moment);
        ok(compile(&out, &cache).output().expect("runs"), &format!("the compile after a kill {moment}"));
        matches_eager(&out, &dir);
        assert_eq!(temporary_files(&dir), Vec::<String>::new(), "left after a kill {moment} and a compile");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_compile_killed_while_writing_the_artifact_leaves_the_old_one_or_the_whole_new_one() {
    let dir = std::env::temp_dir().join(format!("killed-writing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a folder");
    let model = dir.join("mlp_64mib.pt2");
    common::scaled_mlp(&model, 4096, 4100);
    let (out, cache) = (dir.join("model.tpuexe"), dir.join("cache"));
    let compile = |to: &Path| {
        let mut cmd = bin();
        cmd.arg(&model).arg("-o").arg(to).args(["--target", "cpu", "--cache-dir"]).arg(&cache);
        cmd
    };
    // The whole artifact, its executable then in the cache: a later compile of the same model
    // writes these very bytes.
    ok(compile(&dir.join("whole.tpuexe")).output().expect("runs"), "the whole compile");
    let whole = std::fs::read(dir.join("whole.tpuexe")).expect("the whole artifact");
    let old = b"an older artifact".to_vec();
    let mut caught = 0;
    for attempt in 0..3 {
        std::fs::write(&out, &old).expect("the old file");
        let mut child = compile(&out).stderr(std::process::Stdio::null()).spawn().expect("starts");
        let writing = poll(&mut child, Duration::from_secs(120), || !temporary_files(&dir).is_empty());
        let _ = child.kill();
        let _ = child.wait();
        let now = std::fs::read(&out).expect("a file at -o");
        assert!(now == old || now == whole, "attempt {attempt}: -o holds {} bytes, neither file", now.len());
        if writing && now == old {
            caught += 1;
            assert_eq!(temporary_files(&dir).len(), 1, "the killed writer's temporary file");
        }
        ok(compile(&out).output().expect("runs"), "the compile after the kill");
        assert_eq!(std::fs::read(&out).expect("the artifact"), whole, "attempt {attempt}");
        assert_eq!(temporary_files(&dir), Vec::<String>::new(), "the next writer removes what the killed one left");
    }
    eprintln!("killed while writing the artifact {caught} of 3 times");
    assert!(caught > 0, "no kill landed while the 64 MiB artifact was being written");
    let _ = std::fs::remove_dir_all(&dir);
}
