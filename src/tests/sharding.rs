//! Programs split over a device mesh (`--mesh`), run on several CPU devices of the XLA CPU
//! plugin: every split equals PyTorch eager; what cannot be split is refused by name; the
//! command line checks meshes against targets; the manifest records the split.

use torchtpu_passes::ir::Mesh;
use torchtpu_passes::shard::plan::ShardPlan;

use super::parity::{assert_parity_with, case_inputs, compile_model_with, TempDir};
use super::{run_cli, testdata};
use crate::artifact::Artifact;
use crate::compile::{compile, CompileRequest};
use crate::emit::Precision;
use crate::import::import;
use crate::run::{run, RunRequest};
use crate::target::Target;

/// `--buckets` choices, parsed.
fn buckets(choices: &[&str]) -> Vec<crate::buckets::Choice> {
    choices.iter().map(|b| crate::buckets::parse_choice(b).expect("buckets")).collect()
}

/// A CPU compile of `name` for `--mesh mesh` on as many CPU devices.
pub(super) fn request(mesh: &str) -> CompileRequest {
    let mesh = Mesh::parse(mesh).expect("a mesh");
    let mut req = CompileRequest::new(vec![Target::Cpu { devices: mesh.devices() as u32 }], Precision::Default);
    req.pass_options.mesh = Some(mesh);
    req
}

/// The note the `shard` pass left in the first bucket's report.
fn shard_notes(m: &crate::artifact::Manifest) -> String {
    let pass = m.buckets[0].passes.iter().find(|p| p.pass == "shard").expect("the shard pass ran");
    pass.notes.join(", ")
}

#[test]
fn tensor_parallel_llama_matches_eager() {
    let m = assert_parity_with("llama_tiny", &request("tp=2"));
    let notes = shard_notes(&m);
    // Two blocks: Q, K, V, gate and up column-parallel, the output and down projections
    // row-parallel; the embedding and the LM head split along the vocabulary.
    assert!(notes.contains("11 column-parallel matmuls (tp)") && notes.contains("4 row-parallel"), "{notes}");
    // Megatron's collectives: one all-reduce after each block's attention and MLP (2 blocks),
    // one for the vocabulary-parallel embedding; one all-gather, of the logits; none of weights.
    let c = &m.targets[0].executables[0].collectives;
    assert_eq!((c["all-reduce"].count, c["all-gather"].count, c.len()), (5, 1, 2), "{c:?}");
    assert_eq!(c["all-gather"].bytes, 16 * 256 * 4, "the gathered logits");
    let s = m.sharding.expect("the manifest records the split");
    assert_eq!((s.mesh.len(), s.mesh[0].name.as_str(), s.mesh[0].size), (1, "tp", 2));
    let q = &s.weights["model.model.layers.0.self_attn.q_proj.weight"];
    assert_eq!(q, &vec![vec!["tp".to_string()], vec![]], "column-parallel: output features");
    let o = &s.weights["model.model.layers.0.self_attn.o_proj.weight"];
    assert_eq!(o, &vec![vec![], vec!["tp".to_string()]], "row-parallel: input features");
    assert!(!s.weights.contains_key("model.model.norm.weight"), "norm weights stay whole");
}

/// With padding (`--pad-multiple 128`), heads padded to 128 and RoPE's padded halves stay split.
#[test]
fn tensor_parallel_with_padded_heads_matches_eager() {
    let mut req = request("tp=2");
    req.pass_options.pad_multiple = Some(128);
    let m = assert_parity_with("llama_tiny", &req);
    let notes = shard_notes(&m);
    assert!(notes.contains("11 column-parallel matmuls (tp)") && notes.contains("4 row-parallel"), "{notes}");
}

/// GPT-2's fused Q/K/V projection (`c_attn`) is made one matmul per part, so its attention
/// splits too: with 4 heads, along 2 and 4 devices.
#[test]
fn tensor_parallel_gpt2_matches_eager() {
    for mesh in ["tp=2", "tp=4"] {
        let m = assert_parity_with("gpt2_tiny", &request(mesh));
        let notes = shard_notes(&m);
        assert!(notes.contains("2 fused projections") && notes.contains("9 column-parallel"), "{mesh}: {notes}");
        let c = &m.targets[0].executables[0].collectives;
        assert_eq!((c["all-gather"].count, c.len()), (1, 2), "{mesh}: only the logits are gathered: {c:?}");
    }
}

#[test]
fn data_parallel_bert_and_resnet_match_eager() {
    for name in ["bert_meanpool", "resnet_mini"] {
        let m = assert_parity_with(name, &request("dp=2"));
        let s = m.sharding.expect("split");
        assert!(s.inputs.iter().all(|i| i.first() == Some(&vec!["dp".to_string()])), "{name}: {:?}", s.inputs);
        assert!(s.weights.is_empty(), "{name}: weights stay whole along dp");
    }
}

#[test]
fn data_and_tensor_parallel_bert_matches_eager() {
    let m = assert_parity_with("bert_meanpool", &request("dp=2,tp=2"));
    let notes = shard_notes(&m);
    assert!(notes.contains("8 column-parallel") && notes.contains("4 row-parallel"), "{notes}");
}

/// The dynamic Llama split along tp, one sharded program per bucket, run at sizes served by
/// different buckets.
#[test]
fn tensor_parallel_buckets_match_eager() {
    let tmp = TempDir::new("tp-buckets");
    let mut req = request("tp=2");
    req.buckets = buckets(&["input_ids:1=8,64,512"]);
    let art = compile_model_with("llama_tiny_dyn", &tmp.0, &req);
    assert_cases_match("llama_tiny_dyn", &art, &tmp.0);
}

/// Runs `art` on every case of the dynamic test model `name` (`in_0.npy`, `in_0_case1.npy`, …),
/// each compared with eager's outputs; the number of cases.
fn assert_cases_match(name: &str, art: &std::path::Path, tmp: &std::path::Path) -> usize {
    let dir = testdata().join("models").join(name);
    let cases = std::iter::once(String::new())
        .chain((1..).map(|i| format!("_case{i}")))
        .take_while(|case| dir.join(format!("in_0{case}.npy")).exists());
    let mut n = 0;
    for case in cases {
        let inputs = case_inputs(name, &case);
        let reference = tmp.join(format!("ref{case}"));
        std::fs::create_dir_all(&reference).expect("a folder");
        std::fs::copy(dir.join(format!("out_0{case}.npy")), reference.join("out_0.npy")).expect("a reference");
        let report = run(&RunRequest {
            artifact: art.to_path_buf(),
            inputs,
            out_dir: tmp.join(format!("out{case}")),
            plugin: None,
            device: crate::run::DeviceKind::Cpu,
            reference: Some(reference),
            seed: 0,
            verify_weights: false,
            cache_dir: None,
            tolerance: Default::default(),
            state_in: None,
            checkpoint: None,
            state_out: None,
            repeat: 1,
        })
        .unwrap_or_else(|e| panic!("{name} case {case:?}: {e:#}"));
        assert!(report.ok, "{name} case {case:?}: {:?}", report.outputs);
        n += 1;
    }
    n
}

/// Expert parallelism (`ep`): each device stores E/ep experts of every MoE layer. Qwen3-MoE
/// (`moe_tiny`), Mixtral (`moe_dyn`, batch and sequence dynamic), DeepSeek-V3 (`mla_dyn`:
/// MLA, a shared expert) and GPT-OSS (`sink_dyn`: attention sinks, expert biases) equal eager with `ep=2`, alone and with `tp=2`; the expert weights
/// are stored split and never gathered, so the arguments per device fall; MLA's attention
/// splits along `tp`.
#[test]
fn expert_parallel_moes_match_eager() {
    let whole = assert_parity_with("moe_tiny", &request("tp=2"));
    let args =
        |m: &crate::artifact::Manifest| m.targets[0].executables[0].memory.as_ref().expect("figures").argument_bytes;
    for mesh in ["ep=2", "ep=2,tp=2"] {
        let m = assert_parity_with("moe_tiny", &request(mesh));
        let notes = shard_notes(&m);
        assert!(notes.contains("4 expert weights split along the experts (ep)"), "{mesh}: {notes}");
        let s = m.sharding.as_ref().expect("split");
        let gate_up = &s.weights["model.model.layers.0.mlp.experts.gate_up_proj"];
        assert_eq!(gate_up[0], vec!["ep".to_string()], "{mesh}: {gate_up:?}");
        let c = &m.targets[0].executables[0].collectives;
        let gathered = c.get("all-gather").map_or(0, |g| g.bytes);
        assert!(gathered < 64 << 10, "{mesh}: an expert weight (64 KiB) is gathered: {c:?}");
        if mesh == "ep=2,tp=2" {
            // Every matmul tp splits, and the experts halved on top of that.
            assert!(args(&m) + (48 << 10) < args(&whole), "{mesh}: {} vs tp=2 {}", args(&m), args(&whole));
        }
    }
    for name in ["moe_dyn", "mla_dyn", "sink_dyn"] {
        for mesh in ["ep=2", "ep=2,tp=2"] {
            let tmp = TempDir::new(&format!("ep-{name}"));
            let mut req = request(mesh);
            req.buckets = buckets(&["input_ids:0=8", "input_ids:1=64"]);
            let art = compile_model_with(name, &tmp.0, &req);
            assert_eq!(assert_cases_match(name, &art, &tmp.0), 13, "{name} {mesh}");
            if (name, mesh) == ("mla_dyn", "ep=2,tp=2") {
                // MLA as DeepSeek's reference splits it: the up projections of Q and K/V
                // column-parallel (whole heads; the rope part every head shares stays whole),
                // the output projection row-parallel; the low-rank down projections (each
                // followed by a norm over its features) and the router whole.
                let notes = shard_notes(&Artifact::open(&art).expect("opens").manifest);
                let expected = ["5 column-parallel", "2 row-parallel", "3 matmuls left whole", "2 expert weights"];
                assert!(expected.iter().all(|e| notes.contains(e)), "{notes}");
            }
            if (name, mesh) == ("sink_dyn", "ep=2,tp=2") {
                // GPT-OSS: one KV head, so K and V stay whole and the query heads split (the
                // sinks with them); Q and the LM head column-parallel, O row-parallel.
                let notes = shard_notes(&Artifact::open(&art).expect("opens").manifest);
                let expected = ["3 column-parallel", "2 row-parallel", "6 matmuls left whole", "4 expert weights"];
                assert!(expected.iter().all(|e| notes.contains(e)), "{notes}");
            }
        }
    }
}

/// Mamba's causal depthwise convolution between the input and output projections
/// (`causal_conv_dyn`, batch and sequence dynamic): the channels stay split through it, so the
/// block is one column- and one row-parallel matmul with one all-reduce; eager's numbers at 13
/// sizes.
#[test]
fn depthwise_causal_conv_splits_along_tp() {
    let tmp = TempDir::new("tp-conv");
    let mut req = request("tp=2");
    req.buckets = buckets(&["x:0=8", "x:1=64"]);
    let art = compile_model_with("causal_conv_dyn", &tmp.0, &req);
    assert_eq!(assert_cases_match("causal_conv_dyn", &art, &tmp.0), 13);
    let m = Artifact::open(&art).expect("opens").manifest;
    let notes = shard_notes(&m);
    assert!(notes.contains("1 column-parallel") && notes.contains("1 row-parallel"), "{notes}");
    let s = m.sharding.expect("split");
    assert_eq!(s.weights["conv.bias"], vec![vec!["tp".to_string()]], "the filters split with the channels");
    let c = &m.targets[0].executables[0].collectives;
    assert_eq!((c["all-reduce"].count, c.len()), (1, 1), "{c:?}");
}

/// transformers' Mamba (`mamba_dynbatch`, batch dynamic) split as Megatron splits Mamba: the in
/// projection cut into the SSM input and its gate (one fused weight, made two matmuls), both
/// column-parallel with `dt_proj`; the channels stay split through the conv and the selective
/// scan (`A`, `D` and the conv's filters and bias split with them); `x_proj` and `out_proj` contract them
/// (row-parallel). Nothing is left whole; eager's numbers at 6 batch sizes.
#[test]
fn mamba_splits_its_channels_along_tp() {
    let tmp = TempDir::new("tp-mamba");
    let mut req = request("tp=2");
    req.buckets = buckets(&["input_ids:0=8"]);
    let art = compile_model_with("mamba_dynbatch", &tmp.0, &req);
    assert_eq!(assert_cases_match("mamba_dynbatch", &art, &tmp.0), 6);
    let m = Artifact::open(&art).expect("opens").manifest;
    let notes = shard_notes(&m);
    let expected = ["2 fused projections", "7 column-parallel", "4 row-parallel"];
    assert!(expected.iter().all(|e| notes.contains(e)) && !notes.contains("left whole"), "{notes}");
    let s = m.sharding.expect("split");
    for w in ["A_log", "D", "conv1d.bias"] {
        let dims = &s.weights[&format!("model.backbone.layers.0.mixer.{w}")];
        assert_eq!(dims[0], vec!["tp".to_string()], "{w}: {dims:?}");
    }
}

/// Padded to 128, the tiny GPT-2's fused Q/K/V projection (192 features: heads of 16, too
/// small to pad one by one) is padded whole to 256 and sliced back before Q, K and V are cut
/// apart, so its attention cannot split: left whole, and the report says so; still eager's
/// numbers.
#[test]
fn matmuls_left_whole_are_reported() {
    let mut req = request("tp=4");
    req.pass_options.pad_multiple = Some(128);
    let m = assert_parity_with("gpt2_tiny", &req);
    let notes = shard_notes(&m);
    // The Q/K/V and the output projections of both blocks.
    assert!(notes.contains("4 matmuls left whole: their split reaches an op that needs the whole"), "{notes}");
}

/// A decode step's KV caches under `tp`: the K and V projections are column-parallel and each
/// device stores the heads it computes (caches `[B, S, H, D]` split along `H`, aliased to their
/// new values), so a device holds half of them. A session carries them split from call to call
/// and reads them back whole: what one device's session holds after the same calls.
#[test]
fn kv_caches_are_split_along_the_heads_under_tp() {
    let m = assert_parity_with("decoder_rows", &request("tp=2"));
    let notes = shard_notes(&m);
    assert!(notes.contains("9 column-parallel matmuls (tp)") && !notes.contains("left whole"), "{notes}");
    let split = &m.sharding.as_ref().expect("split").weights;
    let caches: Vec<String> = (0..2).flat_map(|b| ["k", "v"].map(|kv| format!("blocks.{b}.attn.{kv}_cache"))).collect();
    let tp = || vec!["tp".to_string()];
    for cache in &caches {
        assert_eq!(split.get(cache), Some(&vec![vec![], vec![], tp(), vec![]]), "{cache}: split along the heads");
    }
    assert_eq!(alias_bytes(&m), 4 * (4 * 64 * 2 * 16 * 4) / 2, "half of each cache per device, updated in place");
    assert_split_session_keeps_one_devices_state("tp=2");
}

/// Under `dp` the KV caches are split along their rows (one sequence each), alone and with
/// `tp` splitting their heads, so each device holds its rows' caches; a session's state after
/// three steps is one device's. transformers' recipe (`hf_static_rows`) passes one
/// `cache_position` for every row: not batched, it stays whole.
#[test]
fn kv_caches_are_split_along_the_rows_under_dp() {
    let caches: Vec<String> = (0..2).flat_map(|b| ["k", "v"].map(|kv| format!("blocks.{b}.attn.{kv}_cache"))).collect();
    let axis = |a: &str| vec![a.to_string()];
    let whole = Vec::new;
    for (mesh, split) in
        [("dp=2", [axis("dp"), whole(), whole(), whole()]), ("dp=2,tp=2", [axis("dp"), whole(), axis("tp"), whole()])]
    {
        let m = assert_parity_with("decoder_rows", &request(mesh));
        let notes = shard_notes(&m);
        assert!(notes.contains("4 updated buffers (KV caches) split along their rows (dp)"), "{mesh}: {notes}");
        let weights = &m.sharding.as_ref().expect("split").weights;
        for cache in &caches {
            assert_eq!(weights.get(cache), Some(&split.to_vec()), "{mesh}: {cache}");
        }
        let devices = Mesh::parse(mesh).expect("a mesh").devices();
        assert_eq!(alias_bytes(&m), 4 * (4 * 64 * 2 * 16 * 4) / devices, "{mesh}: each device its part of each cache");
    }
    assert_split_session_keeps_one_devices_state("dp=2");

    let m = assert_parity_with("hf_static_rows", &request("dp=2"));
    let s = m.sharding.as_ref().expect("split");
    assert_eq!(s.inputs, vec![vec![axis("dp"), whole()], vec![whole()]], "input_ids split, cache_position whole");
    for cache in ["step.key_cache_0", "step.value_cache_0"] {
        assert_eq!(s.weights.get(cache), Some(&vec![axis("dp"), whole(), whole(), whole()]), "{cache}");
    }
    assert!(!s.weights.contains_key("step.cumulative_length_0"), "a scalar buffer stays whole: {:?}", s.weights);
}

/// T5's per-head relative-position bias, an embedding of `[buckets, heads]` added to `Q·Kᵀ`, is
/// split along its columns with the heads: the encoder's Q, K and V are column-parallel and
/// nothing is left whole; in the decoder step only cross-attention's Q and K stay whole (their
/// bias is the encoder's mask, whole along the heads). Both equal eager.
#[test]
fn t5_relative_position_bias_splits_with_the_heads() {
    for (name, whole) in [("t5_gen_encoder", None), ("t5_gen_decoder", Some("2 matmuls left whole"))] {
        let m = assert_parity_with(name, &request("tp=2"));
        let notes = shard_notes(&m);
        assert!(notes.contains("1 embeddings of per-head values split along their columns (tp)"), "{name}: {notes}");
        assert_eq!(whole, notes.split(", ").find(|n| n.contains("left whole")).map(|n| &n[..20]), "{name}: {notes}");
        let weights = &m.sharding.as_ref().expect("split").weights;
        let bias = weights.iter().find(|(w, _)| w.ends_with("relative_attention_bias.weight")).expect("split");
        assert_eq!(bias.1, &vec![vec![], vec!["tp".to_string()]], "{name}: its columns, the heads");
    }
}

/// The bytes of its arguments the first executable updates in place (the caches, per device).
fn alias_bytes(m: &crate::artifact::Manifest) -> i64 {
    m.targets[0].executables[0].memory.as_ref().expect("memory figures").alias_bytes
}

/// Three decode steps of `decoder_rows` split over `mesh` leave the state one device leaves.
fn assert_split_session_keeps_one_devices_state(mesh: &str) {
    let tmp = TempDir::new("split-caches");
    let one_device = CompileRequest::new(vec![Target::Cpu { devices: 1 }], Precision::Default);
    let [one, two] = [("one", one_device), ("two", request(mesh))].map(|(dir, req)| {
        std::fs::create_dir_all(tmp.0.join(dir)).expect("a folder");
        compile_model_with("decoder_rows", &tmp.0.join(dir), &req)
    });
    let ints = |values: Vec<i64>, shape: Vec<i64>| crate::npy::Array {
        dtype: torchtpu_passes::ir::DType::I64,
        shape,
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let labels = [std::path::PathBuf::from("ids"), std::path::PathBuf::from("pos")];
    let states: Vec<Vec<(String, crate::npy::Array)>> = [one, two]
        .iter()
        .map(|artifact| {
            let mut session = super::serving::decode_session(artifact);
            for step in 0..3 {
                let ids = ints((0..4).map(|r| 1 + 7 * r + step).collect(), vec![4, 1]);
                session.call(&[ids, ints(vec![step; 4], vec![4])], &labels, 0).expect("runs");
            }
            session.state().expect("the state")
        })
        .collect();
    assert_eq!(states[0].len(), 4);
    for ((name, a), (other, b)) in states[0].iter().zip(&states[1]) {
        assert_eq!((name, &a.shape), (other, &b.shape));
        let differs = (0..a.numel() as usize).filter(|&i| (a.get_f64(i).unwrap() - b.get_f64(i).unwrap()).abs() > 1e-5);
        assert_eq!(differs.count(), 0, "{mesh}: {name}: the split session's state is one device's");
        assert!((0..a.numel() as usize).any(|i| a.get_f64(i) != Some(0.0)), "{name}: written");
    }
}

/// `fsdp` stores every weight split and gathers it where used (all-gathers, no reductions),
/// alone and with `tp` or `dp`, and leaves updated buffers whole; every result equals eager.
#[test]
fn fully_sharded_weights_match_eager() {
    let m = assert_parity_with("llama_tiny", &request("fsdp=2"));
    assert!(shard_notes(&m).contains("weights split along fsdp, gathered where used"), "{}", shard_notes(&m));
    let s = m.sharding.expect("split");
    let o = &s.weights["model.model.layers.0.self_attn.o_proj.weight"];
    assert_eq!(o, &vec![vec![], vec!["fsdp".to_string()]], "the larger dim of [64, 256]");
    assert_eq!(s.weights.len(), 16, "every weight used (Q/K/V and gate/up fused): {:?}", s.weights.keys());
    let c = &m.targets[0].executables[0].collectives;
    assert!(c.contains_key("all-gather") && !c.contains_key("all-reduce"), "{c:?}");
    let m = assert_parity_with("llama_tiny", &request("tp=2,fsdp=2"));
    let s = m.sharding.expect("split");
    let q = &s.weights["model.model.layers.0.self_attn.q_proj.weight"];
    assert_eq!(q, &vec![vec!["tp".to_string()], vec!["fsdp".to_string()]], "tp's split kept, fsdp on the other dim");
    assert_eq!(m.targets[0].executables[0].collectives["all-reduce"].count, 5, "tp's reductions only");
    assert_parity_with("bert_meanpool", &request("dp=2,fsdp=2"));
    // A decode step's KV caches are state the program updates: they stay whole.
    let m = assert_parity_with("decoder_kv", &request("fsdp=2"));
    assert!(shard_notes(&m).contains("4 updated buffers (state) left whole along fsdp"), "{}", shard_notes(&m));
    let split = m.sharding.expect("split").weights;
    assert!(split.keys().all(|w| !w.contains("cache")), "{:?}", split.keys());
}

/// A mesh combined with the other options: bf16 compute, a precision override and padding to
/// 128 on `tp=2`, through the command line with a cache: within the bf16 tolerance of eager,
/// the override in the split program, and a second compile served by the cache.
#[test]
fn meshes_combine_with_compute_dtype_precision_padding_and_the_cache() {
    let tmp = TempDir::new("mesh-combined");
    let s = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let (model, dir) = (testdata().join("models/llama_tiny.pt2"), testdata().join("models/llama_tiny"));
    let (out, cache) = (tmp.0.join("x.tpuexe"), tmp.0.join("cache"));
    let args = [
        "compile",
        &s(&model),
        "-o",
        &s(&out),
        "--target",
        "cpu:2",
        "--mesh",
        "tp=2",
        "--compute-dtype",
        "bf16",
        "--precision-override",
        "lm_head=highest",
        "--pad-multiple",
        "128",
        "--cache-dir",
        &s(&cache),
        "--format",
        "json",
        "-q",
    ];
    let outcome = |json: &str| {
        let v: serde_json::Value = serde_json::from_str(json).expect("json");
        v["targets"][0]["cache"].as_str().expect("an outcome").to_string()
    };
    let (code, json, err) = run_cli(&args);
    assert_eq!((code, outcome(&json).as_str()), (0, "compiled"), "{err}");
    let art = Artifact::open(&out).expect("artifact");
    let program = String::from_utf8_lossy(art.zip().get("programs/main.mlir").expect("program")).into_owned();
    assert!(program.contains("sdy.mesh") && program.contains("#stablehlo<precision HIGHEST>"), "{program}");
    let notes = shard_notes(&art.manifest);
    assert!(notes.contains("11 column-parallel matmuls (tp)"), "{notes}");
    let out_dir = tmp.0.join("out");
    let (code, _, err) = run_cli(&["run", &s(&out), &s(&dir.join("in_0.npy")), "--out-dir", &s(&out_dir)]);
    assert_eq!(code, 0, "{err}");
    let ours = crate::npy::Array::read(&out_dir.join("out_0.npy")).expect("output");
    let eager = crate::npy::Array::read(&dir.join("out_0.npy")).expect("reference");
    let c = crate::run::compare(&ours, &eager);
    let tolerance = super::passes::BF16_TOLERANCE;
    assert!(c.max_rel_diff <= tolerance && c.max_rel_diff > 1e-6, "bf16 on tp=2: rel diff {}", c.max_rel_diff);
    let (code, json, err) = run_cli(&args);
    assert_eq!((code, outcome(&json).as_str()), (0, "hit"), "{err}");
}

/// `request(mesh)` with the plan file `json`.
fn with_plan(mesh: &str, json: &str) -> CompileRequest {
    let mut req = request(mesh);
    req.pass_options.shard_plan = ShardPlan::from_json(json).expect("a plan");
    req
}

/// A plan file stating `colwise` and `rowwise` where the `auto` plan puts them gives the same
/// split and the same numbers.
#[test]
fn plan_file_stating_the_megatron_split_equals_auto() {
    let plan = r#"{"modules": {
        "model.model.layers.*.self_attn.q_proj": "colwise",
        "model.model.layers.*.self_attn.k_proj": "colwise",
        "model.model.layers.*.self_attn.v_proj": "colwise",
        "model.model.layers.*.self_attn.o_proj": "rowwise",
        "model.model.layers.*.mlp.gate_proj": "colwise",
        "model.model.layers.*.mlp.up_proj": "colwise",
        "model.model.layers.*.mlp.down_proj": "rowwise",
        "model.model.embed_tokens": "vocab"
    }}"#;
    let stated = assert_parity_with("llama_tiny", &with_plan("tp=2", plan));
    let auto = assert_parity_with("llama_tiny", &request("tp=2"));
    assert!(shard_notes(&stated).contains("15 weights the plan file decides"), "{}", shard_notes(&stated));
    assert_eq!(stated.sharding, auto.sharding);
    assert_eq!(stated.targets[0].executables[0].collectives, auto.targets[0].executables[0].collectives);
}

/// `replicate` keeps a module whole (its block's MLP then needs no all-reduce); an input can
/// be kept whole along `dp`.
#[test]
fn plan_file_keeps_modules_and_inputs_whole() {
    let plan = r#"{"modules": {"model.model.layers.1.mlp": "replicate"}, "inputs": {"input_ids": [null, null]}}"#;
    let m = assert_parity_with("llama_tiny", &with_plan("tp=2", plan));
    let notes = shard_notes(&m);
    assert!(notes.contains("9 column-parallel matmuls (tp)") && notes.contains("3 row-parallel"), "{notes}");
    let s = m.sharding.expect("split");
    assert!(!s.weights.keys().any(|w| w.contains("layers.1.mlp")), "{:?}", s.weights.keys());
    assert!(s.weights.contains_key("model.model.layers.0.mlp.up_proj.weight"));
    assert_eq!(m.targets[0].executables[0].collectives["all-reduce"].count, 4, "one all-reduce fewer");
}

/// `sequence` on the norms: they run on the tokens split along `tp`, and the numbers stay
/// eager's.
#[test]
fn plan_file_runs_norms_sequence_parallel() {
    let plan = r#"{"modules": {
        "model.model.layers.*.input_layernorm": "sequence",
        "model.model.layers.*.post_attention_layernorm": "sequence"
    }}"#;
    let m = assert_parity_with("llama_tiny", &with_plan("tp=2", plan));
    let notes = shard_notes(&m);
    assert!(notes.contains("4 module outputs split along the sequence (tp)"), "{notes}");
    assert!(notes.contains("11 column-parallel matmuls (tp)") && notes.contains("4 row-parallel"), "{notes}");
    eprintln!("sequence-parallel collectives: {:?}", m.targets[0].executables[0].collectives);
}

/// What a plan file asks for but cannot be done is refused by name.
#[test]
fn plan_files_that_cannot_be_followed_are_refused() {
    let model = testdata().join("models/llama_tiny.pt2");
    let program = import(&model).expect("imports");
    let tmp = TempDir::new("plan-refused");
    let refused = |mesh: &str, plan: &str| {
        let out = tmp.0.join("x.tpuexe");
        let err = compile(&program, &model, &out, &with_plan(mesh, plan)).expect_err("refused");
        format!("{err:#}")
    };
    let cases = [
        (r#"{"modules": {"model.lm_head": "rowwise"}}"#, "module `model.lm_head` is `rowwise`, but `"),
        (
            r#"{"modules": {"model.model.layers.*.mlp.up_proj": "colwise", "model.model.layers.*.mlp.down_proj": "replicate"}}"#,
            "module `model.model.layers.0.mlp.up_proj` is `colwise`, but `",
        ),
        (
            r#"{"modules": {"layers.*.mlp": "replicate"}}"#,
            "`layers.*.mlp` names no module with weights; module paths look like `model.",
        ),
        (
            r#"{"modules": {"model.model.layers.0.mlp.up_proj": "vocab"}}"#,
            "is `vocab`, which applies to embedding tables",
        ),
        (r#"{"modules": {"model.model.norm": "colwise"}}"#, "is neither a matmul's nor an embedding table"),
        (
            r#"{"modules": {"model.model.layers.0.mlp": "colwise", "model.model.layers.*.mlp": "replicate"}}"#,
            "module `model.model.layers.0.mlp.down_proj` is `colwise`, but `",
        ),
        (
            r#"{"modules": {"model.model.*.0.mlp": "colwise", "model.model.layers.*.mlp": "replicate"}}"#,
            "disagree on module `model.model.layers.0.mlp.",
        ),
        (
            r#"{"modules": {"model.model.layers.0.mlp.up_proj": "sequence"}}"#,
            "which applies to modules between matmuls",
        ),
        (r#"{"modules": {"model.model.nothing": "sequence"}}"#, "`model.model.nothing` (`sequence`) names no module"),
        (r#"{"inputs": {"ids": [null, null]}}"#, "there is no user input `ids`; the inputs are `input_ids`"),
    ];
    for (plan, expected) in cases {
        let msg = refused("tp=2", plan);
        assert!(msg.contains(expected), "{plan}: {msg}");
    }
    // A dim that does not divide: the batch of 1 along `dp`.
    let msg = refused("dp=2", r#"{"inputs": {"input_ids": ["dp", null]}}"#);
    assert!(msg.contains("input `input_ids`: dim 0 (size 1) does not divide into 2 pieces along dp"), "{msg}");
}

#[test]
fn the_command_line_reads_plan_files() {
    let model = testdata().join("models/mlp.pt2");
    let model = model.to_str().expect("utf-8");
    let tmp = TempDir::new("plan-cli");
    let out = tmp.0.join("x.tpuexe");
    let out = out.to_str().expect("utf-8");
    let plan = tmp.0.join("plan.json");
    std::fs::write(&plan, r#"{"modules": {"fc2": "replicate"}}"#).expect("written");
    let plan = plan.to_str().expect("utf-8");
    let (code, _, err) =
        run_cli(&["compile", model, "-o", out, "--target", "cpu:2", "--mesh", "tp=2", "--shard-plan", plan]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--target", "cpu", "--shard-plan", plan]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a plan file (`--shard-plan`) needs a mesh"), "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--shard-plan", "no-such-plan.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot read the plan file `no-such-plan.json`"), "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--shard-plan", model]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a shard plan: it is not UTF-8 text"), "{err}");
    let meta = testdata().join("models/mlp/meta.json");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--shard-plan", meta.to_str().expect("utf-8")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("meta.json` is not a shard plan: unknown field `name`"), "{err}");
}

#[test]
fn heads_that_do_not_divide_are_refused_by_name() {
    let model = testdata().join("models/llama_tiny.pt2");
    let program = import(&model).expect("imports");
    let tmp = TempDir::new("tp4");
    let err = compile(&program, &model, &tmp.0.join("x.tpuexe"), &request("tp=4")).expect_err("refused");
    let msg = format!("{err:#}");
    assert!(msg.contains("into 2 heads, which do not divide along mesh axis `tp` (4 devices)"), "{msg}");
}

#[test]
fn the_command_line_checks_meshes_against_targets() {
    let model = testdata().join("models/mlp.pt2");
    let model = model.to_str().expect("utf-8");
    let tmp = TempDir::new("mesh-cli");
    let out = tmp.0.join("x.tpuexe");
    let out = out.to_str().expect("utf-8");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--mesh", "dp=2,tp=2", "--target", "cpu:2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`--mesh dp=2,tp=2` needs targets of 4 devices, but `cpu:2` has 2"), "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--mesh", "tp=2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("(the default targets)"), "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--target", "cpu:2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("give `--mesh`"), "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--target", "cpu:2", "--mesh", "sp=2"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not `sp`; other axes (sequence parallelism) are not supported yet"), "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--target", "cpu:2", "--mesh", "ep=2"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("splits the experts of mixture-of-experts layers, and this program has none"), "{err}");
    let (code, _, err) = run_cli(&["compile", model, "-o", out, "--target", "cpu:2", "--mesh", "tp=2,tp=1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("named twice"), "{err}");
}

/// `--mesh auto` on 4 and 8 CPU devices for the DeepSeek-V3-style model (MLA and experts) and
/// the Mamba-style causal convolution, both with a dynamic batch and sequence: the chosen mesh
/// gives eager's numbers at all 13 sizes.
#[test]
fn mesh_auto_on_deepseek_and_mamba_style_models_matches_eager() {
    for (name, input) in [("mla_dyn", "input_ids"), ("causal_conv_dyn", "x")] {
        for devices in [4, 8] {
            let program = import(&testdata().join(format!("models/{name}.pt2"))).expect("imports");
            let mut req = CompileRequest::new(vec![Target::Cpu { devices }], Precision::Default);
            req.buckets = buckets(&[&format!("{input}:0=8"), &format!("{input}:1=64")]);
            let (mesh, choice) = crate::plan::choose_mesh(&program, &req).expect("a mesh");
            eprintln!("{name} on cpu:{devices}: {} ({})", choice.chosen, choice.why);
            req.pass_options.mesh = Some(mesh);
            req.mesh_choice = Some(choice);
            let tmp = TempDir::new(&format!("auto-{name}-{devices}"));
            let art = compile_model_with(name, &tmp.0, &req);
            assert_eq!(assert_cases_match(name, &art, &tmp.0), 13, "{name} on cpu:{devices}");
        }
    }
}

/// `--mesh auto` on 4 CPU devices: every mesh of 4 is tried (`tp=4`, `fsdp=4`, `dp=4`,
/// `fsdp=2,tp=2`, `dp=2,tp=2`, and for the MoE `ep=4` and `ep=2,tp=2`), the one chosen splits the program,
/// its results equal eager's, and the manifest lists every mesh tried with the reason for the
/// choice (the tiny Llama and the Qwen3-style MoE: 2 heads do not split 4 ways and a batch of
/// 1 not at all).
#[test]
fn mesh_auto_chooses_a_split_that_matches_eager() {
    for name in ["llama_tiny", "moe_tiny"] {
        let program = import(&testdata().join(format!("models/{name}.pt2"))).expect("imports");
        let mut req = CompileRequest::new(vec![Target::Cpu { devices: 4 }], Precision::Default);
        let (mesh, choice) = crate::plan::choose_mesh(&program, &req).expect("a mesh");
        let tried: Vec<&str> = choice.tried.iter().map(|t| t.mesh.as_str()).collect();
        let mut expected = vec!["tp=4", "fsdp=4", "dp=4", "fsdp=2,tp=2", "dp=2,tp=2"];
        if name == "moe_tiny" {
            expected.extend(["ep=4", "ep=2,tp=2"]);
        }
        assert_eq!(tried, expected, "{name}");
        assert!(choice.tried.iter().any(|t| t.refused.as_deref().is_some_and(|r| r.contains("batch dim"))));
        assert!(choice.why.contains("fewest collective bytes"), "{name}: {}", choice.why);
        req.pass_options.mesh = Some(mesh);
        req.mesh_choice = Some(choice.clone());
        let m = assert_parity_with(name, &req);
        assert_eq!(m.sharding.expect("split").chosen, Some(choice), "{name}");
    }
    // On one device there is nothing to choose; emitting text compiles nothing to choose by.
    let model = testdata().join("models/llama_tiny.pt2");
    let model = model.to_str().expect("utf-8");
    let (code, _, err) = run_cli(&["compile", model, "-o", "/dev/null", "--target", "cpu", "--mesh", "auto"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`--mesh auto` needs targets of one device count above 1"), "{err}");
    let args = ["compile", model, "-o", "/dev/null", "--target", "cpu:4", "--mesh", "auto", "--emit", "stablehlo"];
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`--mesh auto` chooses by compiling each mesh"), "{err}");
}
