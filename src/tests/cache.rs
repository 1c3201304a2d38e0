//! The compile cache against real compiles: a repeated compile is a hit with a byte-identical
//! artifact and every key part misses; eight processes compile a key once; sixteen compile
//! while `cache gc` evicts everything over and over, and all succeed; a writer killed
//! mid-write and a damaged entry are recompiled with correct results; a folder that cannot be
//! written degrades to compiling; the S3 tier serves a second machine from a real
//! S3-compatible server (moto, installed by `cargo xtask setup`) started on loopback, never
//! serves the damaged objects it is fed, and a tier that never answers costs one timeout.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::parity::TempDir;
use super::{run_cli, testdata};

/// Set in a child test process: a JSON object `{"args": [...], "result": "<path>"}`.
const CHILD: &str = "TORCHTPU_TEST_CACHE_CHILD";

/// In a child process, runs the command line given in `TORCHTPU_TEST_CACHE_CHILD` and writes
/// its exit code and output to the result file; does nothing otherwise.
#[test]
fn child_runs_the_command_line() {
    let Some(spec) = std::env::var_os(CHILD) else {
        return;
    };
    let spec: Value = serde_json::from_str(&spec.to_string_lossy()).expect("child spec");
    let args: Vec<&str> = spec["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
    let (code, out, err) = run_cli(&args);
    let result = serde_json::json!({"code": code, "stdout": out, "stderr": err});
    std::fs::write(spec["result"].as_str().expect("result path"), result.to_string()).expect("writes the result");
}

/// A command line running in a child process.
struct ChildCli {
    child: Child,
    result: PathBuf,
}

impl ChildCli {
    fn spawn(args: &[String], result: PathBuf, env: &[(&str, String)]) -> ChildCli {
        let spec = serde_json::json!({"args": args, "result": result});
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["tests::cache::child_runs_the_command_line", "--exact", "--test-threads=1"])
            .env(CHILD, spec.to_string())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawns a child");
        ChildCli { child, result }
    }

    /// (exit code, stdout, stderr) once the child is done.
    fn wait(mut self) -> (u8, String, String) {
        let status = self.child.wait().expect("child exits");
        assert!(status.success(), "the child test process failed: {status}");
        let r: Value = serde_json::from_slice(&std::fs::read(&self.result).expect("child result")).expect("json");
        let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        (r["code"].as_u64().unwrap_or(99) as u8, text("stdout"), text("stderr"))
    }
}

pub(super) fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

/// `compile MODEL -o OUT --cache-dir CACHE --format json -q` plus `extra`.
pub(super) fn compile_args(model: &str, out: &Path, cache: &Path, extra: &[&str]) -> Vec<String> {
    let model = testdata().join(format!("models/{model}.pt2"));
    let mut args: Vec<String> =
        ["compile", &s(&model), "-o", &s(out), "--cache-dir", &s(cache), "--format", "json", "-q"]
            .map(String::from)
            .into();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Compiles in-process; returns each target's cache outcome and the stderr.
pub(super) fn compile(model: &str, out: &Path, cache: &Path, extra: &[&str]) -> (Vec<String>, String) {
    let args = compile_args(model, out, cache, extra);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run_cli(&argv);
    assert_eq!(code, 0, "compile failed: {stderr}");
    (outcomes(&stdout), stderr)
}

pub(super) fn outcomes(summary: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(summary).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {summary}"));
    v["targets"].as_array().expect("targets").iter().map(|t| t["cache"].as_str().unwrap_or("?").to_string()).collect()
}

/// Each executable of a JSON summary as `target bucket outcome`.
fn executables(summary: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(summary).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {summary}"));
    let field = |t: &Value, name: &str| t[name].as_str().unwrap_or("?").to_string();
    let targets = v["targets"].as_array().expect("targets").iter();
    targets.map(|t| format!("{} {} {}", field(t, "target"), field(t, "bucket"), field(t, "cache"))).collect()
}

fn counters(cache: &Path) -> Value {
    let (code, out, err) = run_cli(&["cache", "stats", "--cache-dir", &s(cache), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(&out).expect("json")["counters"].clone()
}

pub(super) fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The outputs of `art` on the model's stored inputs match PyTorch.
pub(super) fn assert_runs_correctly(model: &str, art: &Path, tmp: &Path) {
    let dir = testdata().join("models").join(model);
    let mut args = vec!["run".to_string(), s(art)];
    args.extend((0..).map(|i| dir.join(format!("in_{i}.npy"))).take_while(|p| p.exists()).map(|p| s(&p)));
    args.extend(["--out-dir".into(), s(&tmp.join(format!("{model}-out"))), "--reference".into(), s(&dir)]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run_cli(&argv);
    assert_eq!(code, 0, "{model}: {out}{err}");
}

#[test]
fn repeated_compile_is_a_hit_and_every_key_part_misses() {
    let tmp = TempDir::new("cache-hit");
    let cache = tmp.0.join("cache");
    let art = |name: &str| tmp.0.join(format!("{name}.tpuexe"));
    assert_eq!(compile("mlp", &art("a"), &cache, &["--target", "cpu"]).0, ["compiled"]);
    assert_eq!(compile("mlp", &art("b"), &cache, &["--target", "cpu"]).0, ["hit"]);
    assert_eq!(read(&art("a")), read(&art("b")), "a hit gives a byte-identical artifact");
    assert_runs_correctly("mlp", &art("b"), &tmp.0);

    // Each key part on its own misses: precision (the program), target, plugin file.
    assert_eq!(compile("mlp", &art("c"), &cache, &["--target", "cpu", "--precision", "highest"]).0, ["compiled"]);
    assert_eq!(compile("mlp", &art("d"), &cache, &["--target", "tpu:v5e:1x1"]).0, ["compiled"]);
    assert_eq!(compile("mlp", &art("e"), &cache, &["--target", "tpu:v5e:1x1"]).0, ["hit"]);
    assert_eq!(read(&art("d")), read(&art("e")));
    let plugin = crate::setup::cpu_plugin(None).path;
    let changed = tmp.0.join("plugin-copy.so");
    let mut bytes = read(&plugin);
    bytes.push(0); // same code, another file: another sha256
    std::fs::write(&changed, bytes).expect("writes the plugin copy");
    let with_copy = ["--target", "cpu", "--plugin", &s(&changed)];
    let (o, _) = compile("mlp", &art("f"), &cache, &with_copy);
    assert_eq!(o, ["compiled"], "another plugin build never gets a cached executable");
    assert_eq!(compile("mlp", &art("f"), &cache, &with_copy).0, ["hit"]);
    // Replaced under the same path (a hit needs no plugin load while the file is unchanged: it
    // must notice). A fresh process, as this one keeps the old file loaded.
    let mut bytes = read(&changed);
    bytes.push(0);
    let replacement = tmp.0.join("plugin-copy.new");
    std::fs::write(&replacement, bytes).expect("writes the new plugin");
    std::fs::rename(&replacement, &changed).expect("replaces the plugin");
    let args = compile_args("mlp", &art("f"), &cache, &with_copy);
    let (code, stdout, stderr) = ChildCli::spawn(&args, tmp.0.join("replaced.json"), &[]).wait();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(outcomes(&stdout), ["compiled"]);

    let c = counters(&cache);
    assert_eq!((c["hits"].as_u64(), c["compiles"].as_u64()), (Some(3), Some(5)), "{c}");
    let (code, out, _) = run_cli(&["cache", "ls", "--cache-dir", &s(&cache), "--format", "json"]);
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed["entries"].as_array().map(Vec::len), Some(5), "{listed}");

    // --no-cache neither reads nor writes.
    assert_eq!(compile("mlp", &art("g"), &cache, &["--target", "cpu", "--no-cache"]).0, ["uncached"]);
    assert_eq!(counters(&cache)["compiles"].as_u64(), Some(5));
}

/// `cache explain` keys a compile as `compile` would: a hit, or for a miss the nearest entries
/// with what differs, in words (the options that shaped the program, the target, the plugin
/// build); exit 1 when anything would miss.
#[test]
fn cache_explain_names_what_differs() {
    let tmp = TempDir::new("cache-explain");
    let cache = tmp.0.join("cache");
    assert_eq!(compile("mlp", &tmp.0.join("a.tpuexe"), &cache, &["--target", "cpu"]).0, ["compiled"]);
    let (dir, model) = (s(&cache), s(&testdata().join("models/mlp.pt2")));
    let explain = |more: &[&str]| {
        let mut args = vec!["cache", "explain", "--cache-dir", &dir, &model];
        args.extend(more);
        run_cli(&args)
    };
    let (code, out, err) = explain(&["--target", "cpu"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("cpu [main]: hit"), "{out}");
    let (code, out, _) =
        explain(&["--target", "cpu", "--precision", "highest", "--compute-dtype", "bf16", "--pad-multiple", "128"]);
    assert_eq!(code, 1);
    assert!(out.contains("cpu [main]: miss") && out.contains("the program (StableHLO)"), "{out}");
    assert!(
        out.contains("precision: `default`, now `highest`")
            && out.contains("compute_dtype: `(none)`, now `bf16`")
            && out.contains("pad_multiple: `(none)`, now `128`"),
        "{out}"
    );
    let (code, out, _) = explain(&["--target", "tpu:v5e:1x1"]);
    assert_eq!(code, 1);
    assert!(out.contains("target: `cpu`, now `tpu:v5e:1x1`") && out.contains("plugin build"), "{out}");
    let (code, _, err) = explain(&["--target", "cpu", "--mesh", "auto"]);
    assert_eq!(code, 2, "{err}");
}

/// A compile spread over hosts: each compiles its buckets into the (shared) cache with
/// `--cache-only --only-bucket`, writing no artifact; then `compile` assembles the artifact from
/// cache hits alone, and it equals eager. Unknown buckets and `--only-bucket` without
/// `--cache-only` are refused.
#[test]
fn buckets_compiled_into_the_cache_apart_assemble_into_an_artifact() {
    let tmp = TempDir::new("cache-only");
    let (dir, model) = (s(&tmp.0.join("cache")), s(&testdata().join("models/llama_tiny_dyn.pt2")));
    let common = ["--target", "cpu", "--buckets", "input_ids:1=8,64", "--cache-dir", &dir];
    for bucket in ["s70-8", "s70-64"] {
        let (code, _, err) =
            run_cli(&[&["compile", &model, "--cache-only", "--only-bucket", bucket][..], &common].concat());
        assert_eq!(code, 0, "{err}");
        assert!(err.contains(&format!("cpu [{bucket}]: compiled")) && err.contains("compiled into the cache"), "{err}");
    }
    let art = tmp.0.join("assembled.tpuexe");
    let (code, out, err) = run_cli(&[&["compile", &model, "-o", &s(&art), "--format", "json"][..], &common].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(outcomes(&out), ["hit", "hit"], "{out}");
    assert_runs_correctly("llama_tiny_dyn", &art, &tmp.0);

    // A bucket the local folder holds is put into a remote tier that lacks it, so that another
    // host (here: an empty local folder) assembles from the tier.
    std::fs::create_dir_all(tmp.0.join("remote")).expect("mkdir");
    let remote = format!("file://{}", s(&tmp.0.join("remote")));
    let share = ["compile", &model, "--cache-only", "--only-bucket", "s70-8", "--remote-cache", &remote];
    let (code, _, err) = run_cli(&[&share[..], &common].concat());
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("cpu [s70-8]: cache hit"), "{err}");
    let other = s(&tmp.0.join("other-host"));
    let other_host =
        ["--target", "cpu", "--buckets", "input_ids:1=8,64", "--cache-dir", &other, "--remote-cache", &remote];
    let art2 = s(&tmp.0.join("other-host.tpuexe"));
    let (code, out, err) = run_cli(&[&["compile", &model, "-o", &art2, "--format", "json"][..], &other_host].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(executables(&out), ["cpu s70-8 remote-hit", "cpu s70-64 compiled"], "{out}");
    let (code, _, err) =
        run_cli(&[&["compile", &model, "--cache-only", "--only-bucket", "s70-9"][..], &common].concat());
    assert_eq!(code, 1);
    assert!(err.contains("no bucket `s70-9`; the buckets are s70-8, s70-64"), "{err}");
    let (code, _, err) = run_cli(&["compile", &model, "-o", &s(&art), "--only-bucket", "s70-8"]);
    assert_eq!(code, 2, "{err}");
}

/// `--only-target` compiles one target's executable of the program that all the `--target`s
/// shape (the TPU target pads it): the one the whole artifact then holds.
#[test]
fn a_target_compiled_into_the_cache_alone_is_the_artifacts() {
    let tmp = TempDir::new("cache-only-target");
    let (dir, model) = (s(&tmp.0.join("cache")), s(&testdata().join("models/llama_tiny_dyn.pt2")));
    let both = ["--target", "cpu", "--target", "tpu:v6e:1x1", "--buckets", "input_ids:1=8,64", "--cache-dir", &dir];
    let share = ["compile", &model, "--cache-only", "--only-bucket", "s70-8", "--only-target", "cpu"];
    let (code, _, err) = run_cli(&[&share[..], &both].concat());
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("cpu [s70-8]: compiled") && !err.contains("tpu:v6e:1x1 ["), "{err}");
    let art = s(&tmp.0.join("both.tpuexe"));
    let (code, out, err) = run_cli(&[&["compile", &model, "-o", &art, "--format", "json"][..], &both].concat());
    assert_eq!(code, 0, "{err}");
    let held: Vec<String> = executables(&out).into_iter().filter(|e| e.ends_with(" hit")).collect();
    assert_eq!(held, ["cpu s70-8 hit"], "{out}");
    let (code, _, err) = run_cli(&[&share[..5], &["--only-target", "tpu:v5e:1x1"], &both].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`--only-target tpu:v5e:1x1` is not among the targets (cpu, tpu:v6e:1x1)"), "{err}");
}

#[test]
fn eight_processes_compile_a_key_once() {
    let tmp = TempDir::new("cache-eight");
    let cache = tmp.0.join("cache");
    let children: Vec<(ChildCli, PathBuf)> = (0..8)
        .map(|i| {
            let out = tmp.0.join(format!("llama-{i}.tpuexe"));
            let args = compile_args("llama_tiny", &out, &cache, &["--target", "cpu"]);
            (ChildCli::spawn(&args, tmp.0.join(format!("result-{i}.json")), &[]), out)
        })
        .collect();
    let mut compiled = 0;
    let mut artifacts = Vec::new();
    for (child, out) in children {
        let (code, stdout, stderr) = child.wait();
        assert_eq!(code, 0, "{stderr}");
        let o = outcomes(&stdout);
        assert!(o == ["compiled"] || o == ["hit"], "{o:?}");
        compiled += usize::from(o == ["compiled"]);
        artifacts.push(read(&out));
    }
    assert_eq!(compiled, 1, "exactly one process compiles the key");
    assert!(artifacts.iter().all(|a| *a == artifacts[0]), "all 8 artifacts are identical");
    let c = counters(&cache);
    assert_eq!((c["compiles"].as_u64(), c["hits"].as_u64()), (Some(1), Some(7)), "{c}");
}

/// Sixteen processes compile two models (two targets each) into one cache while `cache gc`
/// evicts it down to 1 KiB over and over: every compile succeeds with a whole artifact whose
/// outputs match eager's (no entry served half evicted), and the cache verifies clean.
#[test]
fn sixteen_processes_compile_while_gc_evicts() {
    let tmp = TempDir::new("cache-gc-race");
    let cache = tmp.0.join("cache");
    let children: Vec<(ChildCli, PathBuf, &str)> = (0..16)
        .map(|i| {
            let model = if i % 2 == 0 { "mlp" } else { "cnn" };
            let out = tmp.0.join(format!("{model}-{i}.tpuexe"));
            let args = compile_args(model, &out, &cache, &["--target", "cpu", "--target", "tpu:v5e:1x1"]);
            (ChildCli::spawn(&args, tmp.0.join(format!("result-{i}.json")), &[]), out, model)
        })
        .collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc = {
        let (cache, done) = (s(&cache), std::sync::Arc::clone(&done));
        std::thread::spawn(move || {
            let mut runs = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let (code, _, err) = run_cli(&["cache", "gc", "--max-size", "1K", "--cache-dir", &cache]);
                assert_eq!(code, 0, "cache gc: {err}");
                runs += 1;
            }
            runs
        })
    };
    let mut results = Vec::new();
    for (child, out, model) in children {
        let (code, _, stderr) = child.wait();
        results.push((code, stderr, out, model));
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let gc_runs = gc.join().expect("the gc loop");
    for (code, stderr, out, model) in &results {
        assert_eq!(*code, 0, "{}: {stderr}", out.display());
        assert_runs_correctly(model, out, &tmp.0);
    }
    assert!(gc_runs > 0, "gc ran while they compiled");
    let (code, out, err) = run_cli(&["cache", "verify", "--cache-dir", &s(&cache)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" 0 damaged"), "{out}");
}

/// Polls until `f` holds or `limit` passes.
fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn temporaries(cache: &Path) -> Vec<PathBuf> {
    let entries = cache.join("v1/entries");
    std::fs::read_dir(entries)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|shard| std::fs::read_dir(shard.path()).into_iter().flatten().flatten())
        .map(|f| f.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".tmp")))
        .collect()
}

#[test]
fn killed_writer_and_damaged_entry_are_recompiled() {
    let tmp = TempDir::new("cache-faults");
    let cache = tmp.0.join("cache");
    // An entry for cnn, then one byte of it flipped.
    let cnn = tmp.0.join("cnn.tpuexe");
    let args = compile_args("cnn", &cnn, &cache, &["--target", "cpu"]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, err) = run_cli(&argv);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).expect("json");
    let key = summary["targets"][0]["cache_key"].as_str().expect("key").to_string();
    let entry = cache.join("v1/entries").join(&key[..2]).join(&key);
    let mut bytes = read(&entry);
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&entry, bytes).expect("damages the entry");

    // A process killed (SIGKILL) while writing mlp's entry.
    let mlp = tmp.0.join("mlp.tpuexe");
    let args = compile_args("mlp", &mlp, &cache, &["--target", "cpu"]);
    let mut child =
        ChildCli::spawn(&args, tmp.0.join("killed.json"), &[("TORCHTPU_CACHE_FAULT", "pause-mid-write".into())]);
    let writing = wait_for(Duration::from_secs(120), || !temporaries(&cache).is_empty());
    child.child.kill().expect("kills the writer");
    let _ = child.child.wait();
    assert!(writing, "the writer never started writing");
    assert!(!mlp.exists(), "the killed process wrote no artifact");

    let (o, stderr) = compile("mlp", &mlp, &cache, &["--target", "cpu"]);
    assert_eq!(o, ["compiled"], "the half-written entry is not served");
    assert_runs_correctly("mlp", &mlp, &tmp.0);
    let (o, stderr2) = compile("cnn", &cnn, &cache, &["--target", "cpu"]);
    assert_eq!(o, ["compiled"], "the damaged entry is not served");
    assert!(stderr2.contains("dropping damaged entry") && stderr2.contains("checksum"), "{stderr}{stderr2}");
    assert_runs_correctly("cnn", &cnn, &tmp.0);
    assert_eq!(compile("cnn", &tmp.0.join("cnn2.tpuexe"), &cache, &["--target", "cpu"]).0, ["hit"]);

    let (code, out, _) = run_cli(&["cache", "verify", "--cache-dir", &s(&cache)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 entries checked, 0 damaged"), "{out}");
    assert_eq!(counters(&cache)["dropped"].as_u64(), Some(1));
}

#[test]
fn unwritable_folder_degrades_to_compiling_with_one_warning() {
    let tmp = TempDir::new("cache-ro");
    let file = tmp.0.join("not-a-folder");
    std::fs::write(&file, b"x").expect("writes a file");
    let (o, stderr) = compile("mlp", &tmp.0.join("a.tpuexe"), &file.join("cache"), &["--target", "cpu"]);
    assert_eq!(o, ["compiled"]);
    assert_eq!(stderr.matches("warning: compile cache").count(), 1, "{stderr}");
}

#[test]
fn eviction_keeps_the_folder_under_its_bound() {
    let tmp = TempDir::new("cache-evict");
    let cache = tmp.0.join("cache");
    for model in ["mlp", "cnn", "multi_out"] {
        compile(model, &tmp.0.join(format!("{model}.tpuexe")), &cache, &["--target", "cpu"]);
        std::thread::sleep(Duration::from_millis(20)); // distinct last-use times
    }
    // A hit makes mlp's entry the most recently used; a bound just above its size keeps only it.
    assert_eq!(compile("mlp", &tmp.0.join("mlp2.tpuexe"), &cache, &["--target", "cpu"]).0, ["hit"]);
    let entries = listed(&cache);
    assert_eq!(entries.len(), 3);
    let newest = entries.iter().max_by_key(|e| e["last_used_unix_ms"].as_u64()).expect("entries");
    let (newest_key, bound) = (newest["key"].clone(), newest["bytes"].as_u64().unwrap_or(0) + 1);
    let (code, out, err) = run_cli(&["cache", "gc", "--cache-dir", &s(&cache), "--max-size", &bound.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("and 3 idle lock files"), "one lock file per compiled key, none held: {out}");
    let left = listed(&cache);
    assert_eq!(left.len(), 1, "{out}");
    assert_eq!(left[0]["key"], newest_key, "the most recently used entry survives");
    assert_eq!(compile("mlp", &tmp.0.join("mlp3.tpuexe"), &cache, &["--target", "cpu"]).0, ["hit"]);
    assert_eq!(counters(&cache)["evictions"].as_u64(), Some(2));
    // A compile under a small --cache-max-size evicts on its own.
    let small = ["--target", "cpu", "--cache-max-size", &bound.to_string()];
    assert_eq!(compile("cnn", &tmp.0.join("cnn2.tpuexe"), &cache, &small).0, ["compiled"]);
    let total: u64 = listed(&cache).iter().map(|e| e["bytes"].as_u64().unwrap_or(0)).sum();
    assert!(total <= bound, "{total} bytes left, bound {bound}");
}

fn listed(cache: &Path) -> Vec<Value> {
    let (code, out, err) = run_cli(&["cache", "ls", "--cache-dir", &s(cache), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(&out).expect("json")["entries"].as_array().cloned().unwrap_or_default()
}

/// A moto S3 server on a free loopback port, stopped on drop.
struct S3Server {
    child: Child,
    port: u16,
}

impl S3Server {
    fn start() -> S3Server {
        let exe = crate::setup::s3_test_server();
        assert!(exe.exists(), "no S3 test server at {}: run `cargo xtask setup`", exe.display());
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let child = Command::new(&exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starts moto_server");
        let server = S3Server { child, port };
        let up = wait_for(Duration::from_secs(60), || TcpStream::connect(("127.0.0.1", port)).is_ok());
        assert!(up, "moto_server did not start on port {port}");
        server
    }

    /// Creates a bucket (moto does not check signatures).
    fn create_bucket(&self, name: &str) {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).expect("connects");
        let req = format!(
            "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        );
        c.write_all(req.as_bytes()).expect("sends");
        let mut reply = String::new();
        let _ = c.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200"), "{reply}");
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", self.port)),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn remote_tier_serves_a_second_machine() {
    let tmp = TempDir::new("cache-remote");
    let server = S3Server::start();
    server.create_bucket("torchtpu");
    let env = server.env();
    let remote = ["--remote-cache", "s3://torchtpu/team/cache", "--target", "cpu", "--target", "tpu:v5e:1x1"];
    let machine = |name: &str, cache: &str, env: &[(&str, String)]| {
        let out = tmp.0.join(format!("{name}.tpuexe"));
        let args = compile_args("mlp", &out, &tmp.0.join(cache), &remote);
        let (code, stdout, stderr) = ChildCli::spawn(&args, tmp.0.join(format!("{name}.json")), env).wait();
        assert_eq!(code, 0, "{name}: {stderr}");
        (outcomes(&stdout), read(&out), stderr)
    };
    let (a, art_a, _) = machine("a", "cache-1", &env);
    assert_eq!(a, ["compiled", "compiled"], "machine A compiles and uploads");
    let (b, art_b, stderr) = machine("b", "cache-2", &env);
    assert_eq!(b, ["remote-hit", "remote-hit"], "machine B compiles nothing: {stderr}");
    assert_eq!(art_a, art_b);
    let (b2, ..) = machine("b-again", "cache-2", &env);
    assert_eq!(b2, ["hit", "hit"], "the remote hit was stored locally");

    // A server that is gone: a warning, then a local compile.
    let closed = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port").port();
    let mut gone = env.clone();
    gone.retain(|(k, _)| *k != "AWS_ENDPOINT_URL");
    gone.push(("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{closed}")));
    let (c, _, stderr) = machine("c", "cache-3", &gone);
    assert_eq!(c, ["compiled", "compiled"]);
    assert!(stderr.contains("warning: remote cache"), "{stderr}");
}

impl S3Server {
    /// Stores `body` as the object `key` of `bucket`, through a signed client as any writer.
    fn put_object(&self, bucket: &str, key: &str, body: &[u8]) {
        use object_store::ObjectStore;
        let store = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(format!("http://127.0.0.1:{}", self.port))
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("testing")
            .with_secret_access_key("testing")
            .build()
            .expect("a client");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let path = object_store::path::Path::from(key);
        runtime.block_on(store.put(&path, body.to_vec().into())).expect("stores the object");
    }
}

/// The entries of a local cache folder: (key, encoded entry).
fn local_entries(cache: &Path) -> Vec<(String, Vec<u8>)> {
    let root = cache.join("v1/entries");
    let mut out = Vec::new();
    for shard in std::fs::read_dir(&root).expect("entries").flatten() {
        for e in std::fs::read_dir(shard.path()).expect("a shard").flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') {
                out.push((name, read(&e.path())));
            }
        }
    }
    out.sort();
    out
}

/// The remote tier answering with damaged objects — one truncated, one another key's — is a
/// miss with a warning for each, never served nor stored locally: the compile still succeeds.
#[test]
fn damaged_remote_objects_are_never_served() {
    let tmp = TempDir::new("cache-remote-damaged");
    let server = S3Server::start();
    server.create_bucket("torchtpu");
    let env = server.env();
    let remote = ["--remote-cache", "s3://torchtpu/team/cache", "--target", "cpu", "--target", "tpu:v5e:1x1"];
    let machine = |name: &str| {
        let (out, cache) = (tmp.0.join(format!("{name}.tpuexe")), tmp.0.join(format!("cache-{name}")));
        let args = compile_args("mlp", &out, &cache, &remote);
        let (code, stdout, stderr) = ChildCli::spawn(&args, tmp.0.join(format!("{name}.json")), &env).wait();
        assert_eq!(code, 0, "{name}: {stderr}");
        (outcomes(&stdout), stderr, out, cache)
    };
    let (a, _, _, cache_a) = machine("a");
    assert_eq!(a, ["compiled", "compiled"]);
    let entries = local_entries(&cache_a);
    assert_eq!(entries.len(), 2, "one entry per target");
    let (first, second) = (&entries[0], &entries[1]);
    server.put_object("torchtpu", &format!("team/cache/v1/{}", first.0), &first.1[..first.1.len() / 2]);
    server.put_object("torchtpu", &format!("team/cache/v1/{}", second.0), &first.1);

    let (b, stderr, out, cache_b) = machine("b");
    assert_eq!(b, ["compiled", "compiled"], "no damaged object served: {stderr}");
    assert_eq!(stderr.matches("ignoring damaged object").count(), 2, "a warning for each: {stderr}");
    assert_runs_correctly("mlp", &out, &tmp.0);
    let (code, verify, err) = run_cli(&["cache", "verify", "--cache-dir", &s(&cache_b)]);
    assert_eq!(code, 0, "{verify}{err}");
    assert!(verify.contains(" 0 damaged"), "{verify}");
}

/// A remote tier that takes connections and never answers: the first read times out after
/// the stated bound (`TORCHTPU_REMOTE_TIMEOUT`), the tier is not asked again, and one warning
/// says so; the compile succeeds locally.
#[test]
fn a_remote_tier_that_never_answers_costs_one_timeout() {
    let tmp = TempDir::new("cache-remote-silent");
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("an address").port();
    // Accepts and holds every connection, reading nothing, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let env = vec![
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("TORCHTPU_REMOTE_TIMEOUT", "2".into()),
    ];
    let remote = ["--remote-cache", "s3://torchtpu/cache", "--target", "cpu", "--target", "tpu:v5e:1x1"];
    let out = tmp.0.join("m.tpuexe");
    let args = compile_args("mlp", &out, &tmp.0.join("cache"), &remote);
    let start = Instant::now();
    let (code, stdout, stderr) = ChildCli::spawn(&args, tmp.0.join("m.json"), &env).wait();
    let took = start.elapsed();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(outcomes(&stdout), ["compiled", "compiled"]);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("remote cache")).collect();
    assert_eq!(warnings.len(), 1, "one warning: {stderr}");
    assert!(warnings[0].contains("timed out after 2s") && warnings[0].contains("not using it"), "{stderr}");
    // Two lookups and two uploads would take four timeouts; one is taken (and the compiles).
    assert!(took < Duration::from_secs(60), "the silent tier held the compile {took:?}");
}
