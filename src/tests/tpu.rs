//! TPU executables through libtpu, with no TPU attached: every test model for two
//! generations, a multi-chip slice, determinism and concurrency across fresh processes, and
//! `run` on an artifact with no CPU executable.
//!
//! These tests need libtpu from `cargo xtask setup`; without it they fail and say so.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::parity::TempDir;
use super::{model_paths, run_cli, testdata};
use crate::artifact::Artifact;
use crate::buckets::{Choice, Sizes};
use crate::compile::{compile, CompileRequest};
use crate::emit::Precision;
use crate::import::import;
use crate::target::Target;
use torchtpu_passes::ir::Mesh;

fn tpu(generation: &str, topology: &str) -> Target {
    Target::Tpu { generation: generation.into(), topology: topology.into() }
}

fn compile_for(model: &Path, out: &Path, targets: Vec<Target>) -> Artifact {
    compile_with(model, out, CompileRequest::new(targets, Precision::Default))
        .unwrap_or_else(|e| panic!("{}: {e}\n(libtpu comes from `cargo xtask setup`)", model.display()))
}

/// Compiles `model` with `req`, one bucket per dynamic dim at its largest size (it keeps the
/// libtpu compiles few).
fn compile_with(model: &Path, out: &Path, mut req: CompileRequest) -> Result<Artifact, String> {
    let mut program = import(model).map_err(|e| format!("{}: {e}", model.display()))?;
    crate::buckets::bound_symbols(&mut program, &super::required_buckets(model)).map_err(|e| e.to_string())?;
    req.buckets = program
        .graph
        .symbols()
        .iter()
        .filter(|(s, _)| program.bindings.contains_key(*s))
        .filter_map(|(s, b)| Some(Choice { key: s.clone(), sizes: Sizes::List(vec![b.max?]) }))
        .collect();
    compile(&program, model, out, &req).map_err(|e| format!("{e:#}"))?;
    Ok(Artifact::open(out).expect("artifact opens"))
}

/// Every test model compiles for v5e and v6e; the manifest records a non-empty executable, the
/// platform version, the generated code size and the memory statistics.
#[test]
fn every_model_compiles_for_two_tpu_generations() {
    let tmp = TempDir::new("tpu-all");
    for model in model_paths() {
        let name = model.file_stem().expect("stem").to_string_lossy().into_owned();
        let out = tmp.0.join(format!("{name}.tpuexe"));
        let art = compile_for(&model, &out, vec![tpu("v5e", "1x1"), tpu("v6e", "1x1")]);
        for (t, hint) in art.manifest.targets.iter().zip(["v5 lite", "v6 lite"]) {
            assert!(t.plugin.platform_version.contains(hint), "{name} {}: {}", t.target, t.plugin.platform_version);
            assert_eq!(t.plugin.platform_name, "tpu");
            let e = &t.executables[0];
            assert!(e.bytes > 1000, "{name} {}: executable of {} bytes", t.target, e.bytes);
            art.verified(&e.entry, &e.sha256).expect("checksum matches");
            assert!(e.generated_code_bytes.is_some_and(|b| b > 0), "{name} {}", t.target);
            let mem = e.memory.as_ref().expect("memory stats");
            assert!(mem.argument_bytes > 0 && mem.output_bytes > 0, "{name} {}: {mem:?}", t.target);
            assert!(mem.peak_bytes >= mem.argument_bytes + mem.output_bytes - mem.alias_bytes, "{name}: {mem:?}");
            let tpu = t.tpu.as_ref().expect("slice");
            assert_eq!((tpu.chips, tpu.partitions), (1, 1));
            let cost = e.cost.as_ref().expect("XLA's cost model");
            assert!(cost.flops >= 0.0 && cost.bytes_accessed > 0.0, "{name} {}: {cost:?}", t.target);
        }
    }
}

/// `--grouped-mm ragged` lowers the MoE's `_grouped_mm` to `chlo.ragged_dot` with i32 group
/// sizes (the only kind libtpu takes), which compiles for TPU, is recorded in the manifest and
/// shown by `inspect`; the dense default has no ragged dot, and `ragged` with a CPU target
/// (XLA:CPU has no ragged dot) is a usage error.
#[test]
fn grouped_mm_ragged_compiles_for_tpu_only() {
    let tmp = TempDir::new("tpu-ragged");
    let model = testdata().join("models/moe_tiny.pt2");
    let model = model.to_str().expect("utf-8");
    let path = |name: &str| tmp.0.join(name).to_string_lossy().into_owned();
    let v6e = ["--target", "tpu:v6e:1x1"];
    let emit = |form: &str, out: &str| {
        let (code, _, err) =
            run_cli(&[&["compile", model, "-o", out, "--emit", "stablehlo", "--grouped-mm", form][..], &v6e].concat());
        assert_eq!(code, 0, "{form}: {err}");
        std::fs::read_to_string(out).expect("stablehlo")
    };
    let ragged = emit("ragged", &path("ragged.mlir"));
    assert_eq!(ragged.matches("\"chlo.ragged_dot\"").count(), 4, "two layers, gate_up and down");
    assert!(ragged.contains("tensor<4xi32>) -> tensor<32x64xf32>"), "i32 group sizes");
    assert!(!emit("dense", &path("dense.mlir")).contains("ragged_dot"));

    let exe = path("ragged.tpuexe");
    let (code, _, err) =
        run_cli(&[&["compile", model, "-o", &exe, "--grouped-mm", "ragged", "--no-cache", "-q"][..], &v6e].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        Artifact::open(Path::new(&exe)).expect("artifact").manifest.options.grouped_mm.as_deref(),
        Some("ragged")
    );
    let (code, text, err) = run_cli(&["inspect", &exe]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("grouped matmuls: ragged"), "{text}");

    let (code, _, err) = run_cli(&["compile", model, "-o", &path("x.tpuexe"), "--grouped-mm", "ragged"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`--grouped-mm ragged` needs every target to be a TPU, and `cpu` is one here"), "{err}");
}

/// A 2x2 slice with no sharding annotations: a replicated single-partition program for one
/// chip, and the manifest says so.
#[test]
fn multi_chip_slice_compiles_one_partition() {
    let tmp = TempDir::new("tpu-2x2");
    let out = tmp.0.join("cnn.tpuexe");
    let art = compile_for(&testdata().join("models/cnn.pt2"), &out, vec![tpu("v5e", "2x2")]);
    let slice = art.manifest.targets[0].tpu.as_ref().expect("slice");
    assert_eq!((slice.chips, slice.partitions), (4, 1));
    assert_eq!(art.manifest.targets[0].executables[0].entry, "executables/tpu-v5e-2x2/main.pjrt");
    let (code, text, err) = run_cli(&["inspect", out.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("slice of 4 chip(s); the program spans 1 (a replicated single-partition program"), "{text}");
    assert!(text.contains("fits in 16.0 GiB of HBM per chip"), "{text}");
    assert!(!text.contains("warning"), "{text}");
    // The same executable's figures on a chip of 64 KiB: `inspect` warns, naming it.
    let mut small = art;
    small.manifest.targets[0].tpu.as_mut().expect("slice").hbm_bytes_per_chip = Some(64 << 10);
    let text = crate::inspect::render_artifact(&small);
    assert!(text.contains("does NOT fit in 64.0 KiB"), "{text}");
    let warning = "warning: `tpu:v5e:2x2`, bucket `main`: a peak of ";
    assert!(text.contains(warning) && text.contains("exceeds the chip's 64.0 KiB of HBM; it will not load"), "{text}");
}

#[test]
fn run_without_a_cpu_executable_is_an_environment_error() {
    let tmp = TempDir::new("tpu-run");
    let out = tmp.0.join("mlp.tpuexe");
    compile_for(&testdata().join("models/mlp.pt2"), &out, vec![tpu("v6e", "1x1")]);
    let input = testdata().join("models/mlp/in_0.npy");
    let (code, _, err) = run_cli(&["run", out.to_str().expect("utf-8"), input.to_str().expect("utf-8")]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no CPU executable (targets: tpu:v6e:1x1)"), "{err}");
}

#[test]
fn malformed_targets_are_usage_errors_listing_valid_forms() {
    for bad in ["tpu:v9:1x1", "tpu:v5e:2", "gpu"] {
        let (code, _, err) = run_cli(&["compile", "m.pt2", "-o", "m.tpuexe", "--target", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(
            err.contains("valid targets: `cpu`, `cpu:N` (N CPU devices, 1 to 64), or `tpu:<generation>:<topology>`"),
            "{bad}: {err}"
        );
    }
}

const CHILD_OUT: &str = "TORCHTPU_TEST_CHILD_OUT";

/// Not a test of its own: the body of the child processes below. It compiles when
/// `TORCHTPU_TEST_CHILD_OUT` names an output file and does nothing otherwise.
#[test]
fn child_compiles_for_tpu() {
    let Some(out) = std::env::var_os(CHILD_OUT) else {
        return;
    };
    compile_for(&testdata().join("models/cnn.pt2"), Path::new(&out), vec![tpu("v5e", "1x1")]);
}

/// Two fresh processes compile the same model for TPU at the same time: both succeed (libtpu's
/// per-host lock does not stop them) and their executables are byte-identical.
#[test]
fn concurrent_fresh_processes_give_identical_tpu_executables() {
    let tmp = TempDir::new("tpu-procs");
    let exe = std::env::current_exe().expect("test binary");
    let outs: Vec<PathBuf> = (0..2).map(|i| tmp.0.join(format!("cnn-{i}.tpuexe"))).collect();
    // Both children run at once, one thread waiting on each.
    let handles: Vec<_> = outs
        .iter()
        .map(|out| {
            let (exe, out) = (exe.clone(), out.clone());
            std::thread::spawn(move || {
                let _ = std::fs::remove_file(&out);
                Command::new(exe)
                    .args(["tests::tpu::child_compiles_for_tpu", "--exact", "--test-threads=1"])
                    .env(CHILD_OUT, &out)
                    .output()
                    .expect("spawns")
            })
        })
        .collect();
    for h in handles {
        let o = h.join().expect("thread");
        assert!(
            o.status.success(),
            "child failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let exes: Vec<Vec<u8>> = outs
        .iter()
        .map(|p| {
            let art = Artifact::open(p).expect("child wrote an artifact");
            let e = &art.manifest.targets[0].executables[0];
            art.verified(&e.entry, &e.sha256).expect("intact").to_vec()
        })
        .collect();
    assert!(!exes[0].is_empty());
    assert!(exes[0] == exes[1], "the two processes produced different TPU executables");
}

/// The ops beyond Core ATen (quantization in exact arithmetic, the decompositions) compile for
/// TPU too: each op case that exported compiles for v6e.
#[test]
fn beyond_core_op_cases_compile_for_tpu() {
    let tmp = TempDir::new("tpu-extra-ops");
    let text = std::fs::read_to_string(testdata().join("ops/cases.json")).expect("cases.json");
    let cases: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).expect("valid cases.json");
    let extra: Vec<&String> = cases
        .iter()
        .filter(|(_, c)| c["extra"].as_bool() == Some(true) && c["status"].as_str() == Some("ok"))
        .map(|(op, _)| op)
        .collect();
    assert!(extra.len() >= 30, "only {} ops beyond Core ATen", extra.len());
    for op in extra {
        let model = testdata().join(format!("ops/{op}.pt2"));
        let program = import(&model).unwrap_or_else(|e| panic!("{op}: {e}"));
        let mut req = CompileRequest::new(vec![tpu("v6e", "1x1")], Precision::Default);
        req.buckets = crate::buckets::at_example_sizes(&program);
        let out = tmp.0.join(format!("{op}.tpuexe"));
        if let Err(e) = compile(&program, &model, &out, &req) {
            panic!("{op} for TPU: {e:#}");
        }
    }
}

/// Programs split over a mesh compile for every chip of v5e, v5p and v6e slices (one partition
/// per chip, Shardy), with per-chip memory that falls as the mesh splits the weights, and the
/// collectives the plan implies, and KV caches split along their heads; a mesh the heads do not
/// divide is refused by name.
#[test]
fn split_programs_compile_for_slices() {
    let tmp = TempDir::new("tpu-mesh");
    let split_padded = |name: &str, target: Target, mesh: &str, pad: Option<i64>| {
        let out = tmp.0.join(format!("{name}-{}.tpuexe", target.dir_name()));
        let mut req = CompileRequest::new(vec![target], Precision::Default);
        req.pass_options.mesh = Some(torchtpu_passes::ir::Mesh::parse(mesh).expect("a mesh"));
        req.pass_options.pad_multiple = pad;
        compile_with(&testdata().join(format!("models/{name}.pt2")), &out, req)
    };
    let split = |name: &str, target: Target, mesh: &str| split_padded(name, target, mesh, None);
    let one_chip = |name: &str, pad: Option<i64>| {
        let model = testdata().join(format!("models/{name}.pt2"));
        let mut req = CompileRequest::new(vec![tpu("v5e", "1x1")], Precision::Default);
        req.pass_options.pad_multiple = pad;
        let a = compile_with(&model, &tmp.0.join(format!("{name}-one.tpuexe")), req).expect("compiles");
        a.manifest.targets[0].executables[0].memory.as_ref().expect("memory").argument_bytes
    };
    // GPT-2's 4 heads split 4 ways; BERT's batch of 2 and 4 heads fill a 2x4 slice.
    let cases = [
        ("gpt2_tiny", tpu("v5e", "2x2"), "tp=4"),
        ("gpt2_tiny", tpu("v5p", "2x2x1"), "tp=4"),
        ("bert_meanpool", tpu("v6e", "2x4"), "dp=2,tp=4"),
    ];
    for (model, target, mesh) in cases {
        let name = format!("{model} on {target} ({mesh})");
        let m = split(model, target, mesh).unwrap_or_else(|e| panic!("{name}: {e}")).manifest;
        let t = &m.targets[0];
        let slice = t.tpu.as_ref().expect("a slice");
        assert_eq!(slice.partitions, slice.chips, "{name}: one partition per chip");
        let e = &t.executables[0];
        let per_chip = e.memory.as_ref().expect("memory").argument_bytes;
        let whole = one_chip(model, None);
        assert!(per_chip < whole, "{name}: {per_chip} bytes of arguments per chip, {whole} on one chip");
        let all_reduces = e.collectives.get("all-reduce").map_or(0, |c| c.count);
        assert!(all_reduces >= 2, "{name}: the MLPs' row-parallel matmuls reduce: {:?}", e.collectives);
    }
    // fsdp=4 stores a quarter of every weight per chip and gathers it where used. (Padded to
    // 128: a quarter of the tiny Llama's 64-wide dims would be padded back by the TPU's tiles.)
    let pad = Some(128);
    let m = split_padded("llama_tiny", tpu("v5e", "2x2"), "fsdp=4", pad).unwrap_or_else(|e| panic!("fsdp=4: {e}"));
    let e = &m.manifest.targets[0].executables[0];
    let (per_chip, whole) = (e.memory.as_ref().expect("memory").argument_bytes, one_chip("llama_tiny", pad));
    assert!(per_chip * 3 < whole, "fsdp=4: {per_chip} bytes of arguments per chip, {whole} on one chip");
    assert!(e.collectives.contains_key("all-gather"), "fsdp=4: {:?}", e.collectives);
    // A decode step's KV caches split along their heads (`[1, H, S, D]`): each chip updates its
    // half in place, and the caches' bytes per chip halve with them.
    let m = split("whisper_gen_decoder", tpu("v6e", "1x2"), "tp=2").unwrap_or_else(|e| panic!("caches: {e}")).manifest;
    let cache = &m.sharding.as_ref().expect("split").weights["key_cache_0"];
    assert_eq!(cache, &vec![vec![], vec!["tp".to_string()], vec![], vec![]], "split along the heads");
    let aliased =
        |m: &crate::artifact::Manifest| m.targets[0].executables[0].memory.as_ref().expect("memory").alias_bytes;
    let model = testdata().join("models/whisper_gen_decoder.pt2");
    let whole = aliased(&compile_for(&model, &tmp.0.join("whisper-one.tpuexe"), vec![tpu("v6e", "1x1")]).manifest);
    assert!(aliased(&m) * 10 < whole * 6, "{} cache bytes updated in place per chip, {whole} on one chip", aliased(&m));
    let Err(err) = split("gpt2_tiny", tpu("v6e", "2x4"), "tp=8") else { panic!("4 heads split 8 ways") };
    assert!(err.contains("into 4 heads, which do not divide along mesh axis `tp` (8 devices)"), "{err}");
}

/// `fsdp` gathers each weight once the activation it multiplies exists, so a chip holds about
/// one layer's weights whole at a time, not all of them: an 8-layer MLP of 4 MiB weights split
/// over 4 chips peaks at less than two layers' weights above its arguments and result
/// (libtpu's figures: 6.3 MB; 19.9 MB when XLA may gather every weight at the start).
#[test]
fn fsdp_holds_one_layer_gathered_at_a_time() {
    const LAYERS: usize = 8;
    const WIDTH: i64 = 1024;
    const ROWS: i64 = 512;
    let layer_bytes = WIDTH * WIDTH * 4;
    let mut text = String::from("graph layers {\n");
    for i in 0..LAYERS {
        text += &format!("  %{i} = input.param \"layer{i}.weight\" : f32[{WIDTH},{WIDTH}]  # w{i}\n");
    }
    text += &format!("  %{LAYERS} = input.user #0 : f32[{ROWS},{WIDTH}]  # x\n");
    let mut last = LAYERS;
    for i in 0..LAYERS {
        let n = LAYERS + 1 + 3 * i;
        text += &format!("  %{n} = permute(%{i}) {{dims=[1, 0]}} : f32[{WIDTH},{WIDTH}]  # t{i}\n");
        text += &format!("  %{} = mm(%{last}, %{n}) : f32[{ROWS},{WIDTH}]  # h{i}\n", n + 1);
        text += &format!("  %{} = relu(%{}) : f32[{ROWS},{WIDTH}]  # a{i}\n", n + 2, n + 1);
        last = n + 2;
    }
    text += &format!("  return user[0] = %{last}\n}}\n");
    let mut graph = torchtpu_passes::ir::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let options =
        torchtpu_passes::PassOptions { mesh: Some(Mesh::parse("fsdp=4").expect("a mesh")), ..Default::default() };
    let shard = torchtpu_passes::Pipeline::only(&["shard".to_string()], &options).expect("the shard pass");
    shard.run(&mut graph, |_, _| {}).unwrap_or_else(|e| panic!("{e}"));
    let emitted = crate::emit::emit(&graph, &crate::emit::EmitOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let memory = crate::compile::memory_of(&emitted.text, &tpu("v5e", "2x2"), 4)
        .unwrap_or_else(|e| panic!("{e}\n(libtpu comes from `cargo xtask setup`)"));
    let input_bytes = ROWS * WIDTH * 4;
    assert_eq!(memory.argument_bytes, LAYERS as i64 * layer_bytes / 4 + input_bytes, "a quarter of each weight");
    let held = memory.peak_bytes - memory.argument_bytes - memory.output_bytes;
    assert!(
        held < 2 * layer_bytes,
        "{held} bytes held beyond the arguments and result; a layer's weight is {layer_bytes}"
    );
}
