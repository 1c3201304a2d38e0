//! End to end on CPU: every test model compiled through the XLA CPU plugin and run on its
//! stored inputs must reproduce PyTorch eager's outputs; and `run` refuses what it must.
//!
//! These tests need the plugin that `cargo xtask setup` downloads; without it they fail and
//! say so (they never skip).

use std::path::{Path, PathBuf};

use super::{model_paths, run_cli, testdata};
use crate::artifact::{self, Artifact, PaddedContraction, PaddedDim};
use crate::compile::{compile, CompileRequest};
use crate::emit::Precision;
use crate::import::import;
use crate::npy::Array;
use crate::run::{run, DeviceKind, RunRequest, Session, Verification};
use crate::target::Target;

/// A fresh folder under the system temp dir, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("torchtpu-test-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn request() -> CompileRequest {
    CompileRequest::new(vec![Target::cpu()], Precision::Default)
}

/// Compiles a test model for CPU into `dir/<name>.tpuexe`.
pub(super) fn compile_model(name: &str, dir: &Path) -> PathBuf {
    compile_model_with(name, dir, &request())
}

/// Compiles a test model with `req`, and the buckets it needs ([`super::required_buckets`])
/// where `req` names none.
pub(super) fn compile_model_with(name: &str, dir: &Path, req: &CompileRequest) -> PathBuf {
    let model = testdata().join(format!("models/{name}.pt2"));
    let mut program = import(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
    let out = dir.join(format!("{name}.tpuexe"));
    let mut req = req.clone();
    if req.buckets.is_empty() {
        req.buckets = super::required_buckets(&model);
    }
    crate::buckets::bound_symbols(&mut program, &req.buckets).unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Err(e) = compile(&program, &model, &out, &req) {
        panic!("{name}: {e:#}\n(the XLA CPU plugin comes from `cargo xtask setup`)");
    }
    out
}

/// The stored inputs of a case: `in_<i>.npy` (case "") or `in_<i>_case<k>.npy`.
pub(super) fn case_inputs(name: &str, case: &str) -> Vec<PathBuf> {
    let dir = testdata().join("models").join(name);
    (0..).map(|i| dir.join(format!("in_{i}{case}.npy"))).take_while(|p| p.exists()).collect()
}

/// The models whose reference cases must be many, and run in at least 4 buckets: the dynamic ones,
/// compiled with the default `pow2` buckets, equal PyTorch eager at every reference size: min, max,
/// each bucket boundary b and b+1, odd sizes; the model with two dynamic dims (batch and seq) at
/// seven pairs; `x[:, -1]` reads the last real position; a CNN with a dynamic batch (convolutions,
/// BatchNorm, pooling, flatten, linear) at six batch sizes. Architectures with a dynamic batch and
/// sequence, at 1, every bucket edge and edge − 1: a Mixtral-style MoE and a DeepSeek-V3-style MLA
/// and MoE (the router's `[batch·seq]` tokens), a Bloom-style ALiBi model (a bias repeated `batch`
/// times, a symbolic count), a Swin classifier in a dynamic batch (window partitions as
/// `as_strided` with symbolic sizes), a GPT-OSS-style model (attention sinks concatenated after the
/// padded scores), a single-head Llama and T5's encoder and decoder at batch 1 (views with size-1
/// dims), a Mamba-style causal convolution, a CNN padding its images with `constant_pad_nd`, FNet's
/// Fourier token mixing along the dynamic sequence (a DFT of the real length), Meta-style attention
/// with complex rotary embeddings, sizes as operands of tensor arithmetic, a JetMoE-style MoE whose
/// pieces of sorted tokens have sizes from data, HiggsAudio's dual FFN (`out[mask] = f(h[mask])`:
/// rows counted by data written back through the mask), and an encoder at up to 32,768 tokens (its
/// large buckets' attention blocked by `--attention auto`), torchvision's `nms` over a dynamic
/// count of boxes (the padded ones sorted last) and `torch.unique` with its inverse and counts over
/// a dynamic length, and sizes through Python's `min` and `max` (`torch.sym_min`, `torch.sym_max`)
/// on both sides of their bounds.
const EVERY_SIZE: &[(&str, usize)] = &[
    ("llama_tiny_dyn", 18),
    ("bert_meanpool", 15),
    ("bert_meanpool_2d", 7),
    ("last_token", 6),
    ("cnn_dynbatch", 6),
    ("moe_dyn", 13),
    ("fnet_dyn", 13),
    ("mla_dyn", 13),
    ("alibi_dyn", 13),
    ("swin_dyn", 7),
    ("sink_dyn", 13),
    ("llama_1head_dyn", 13),
    ("t5_encoder_dyn", 13),
    ("t5_decoder_dyn", 13),
    ("causal_conv_dyn", 13),
    ("mamba_dynbatch", 6),
    ("pad_cnn_dyn", 7),
    ("rope_complex_dyn", 13),
    ("sym_scalars", 7),
    ("cond_size_dyn", 7),
    ("scan_rnn_dyn", 5),
    ("moe_gather_dyn", 7),
    ("moe_split_counts_dyn", 13),
    ("dual_ffn_dyn", 13),
    ("long_context_dyn", 5),
    ("nms_dyn", 7),
    ("unique_dyn", 7),
    ("size_minmax_dyn", 12),
    ("window_pad_dyn", 9),
    ("rows_at_sizes_dyn", 8),
];

/// Control flow on data, at one size, whose cases take each path (`cond_data`: both branches;
/// `while_rnn`: 6, 0 and all 10 steps): at least this many cases.
const EVERY_PATH: &[(&str, usize)] = &[("cond_data", 3), ("while_rnn", 3)];

/// Compiles `name` once with the default request and runs every reference case on it (the
/// sizes of a dynamic model, the paths of control flow), each equal to PyTorch eager's.
fn assert_parity(name: &str) {
    let tmp = TempDir::new(name);
    let artifact = compile_model(name, &tmp.0);
    let cases = case_suffixes(name);
    let used: std::collections::BTreeSet<String> =
        cases.iter().map(|case| run_case(name, &artifact, case, &tmp.0)).collect();
    if let Some(&(_, min)) = EVERY_SIZE.iter().chain(EVERY_PATH).find(|(n, _)| *n == name) {
        assert!(cases.len() >= min, "{name}: {} cases", cases.len());
    }
    if EVERY_SIZE.iter().any(|(n, _)| *n == name) {
        assert!(used.len() >= 4, "{name}: the cases ran in buckets {used:?}");
    }
    assert_excluded_cases_refused(name, &artifact);
}

/// A CPU session on `artifact`.
pub(super) fn open_session(artifact: &Path) -> Session {
    let verification = Verification { always_hash: false, cache: None };
    Session::open(artifact, DeviceKind::Cpu, None, &verification).expect("opens")
}

/// Every input the export's guards exclude (`in_*_excluded<k>.npy`, which the loaded module
/// refuses) is refused by a session with the guard's reason: never served.
fn assert_excluded_cases_refused(name: &str, artifact: &Path) {
    let dir = testdata().join("models").join(name);
    let mut session = None;
    for k in 0.. {
        let inputs: Vec<PathBuf> =
            (0..).map(|i| dir.join(format!("in_{i}_excluded{k}.npy"))).take_while(|p| p.exists()).collect();
        if inputs.is_empty() {
            break;
        }
        let arrays: Vec<Array> = inputs.iter().map(|p| Array::read(p).expect("npy")).collect();
        let session = session.get_or_insert_with(|| open_session(artifact));
        match session.call(&arrays, &inputs, 0) {
            Ok(_) => panic!("{name}: excluded case {k} ran"),
            Err(e) => assert!(e.to_string().contains("break a condition of the export"), "{name}: excluded {k}: {e}"),
        }
    }
}

/// Compiles with `req`, checks the outputs and returns the manifest.
pub(super) fn assert_parity_with(name: &str, req: &CompileRequest) -> artifact::Manifest {
    let tmp = TempDir::new(name);
    let artifact = compile_model_with(name, &tmp.0, req);
    let reference = testdata().join("models").join(name);
    let req = RunRequest {
        artifact,
        inputs: case_inputs(name, ""),
        out_dir: tmp.0.join("out"),
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
    };
    let report = run(&req).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    assert_outputs_equal(name, &report);
    assert!(report.ok);
    Artifact::open(&req.artifact).expect("opens").manifest
}

/// Every output of `report` equals its reference; updated state is compared where the
/// reference has it (a training step's statistics), every other output always.
fn assert_outputs_equal(label: &str, report: &crate::run::RunReport) {
    assert!(!report.outputs.is_empty());
    for o in &report.outputs {
        let Some(c) = &o.comparison else {
            assert!(o.path.contains("/state_"), "{label}: {} not compared", o.path);
            continue;
        };
        assert!(c.ok, "{label} {}: max abs diff {} (rel {}) {:?}", o.path, c.max_abs_diff, c.max_rel_diff, c.note);
    }
}

macro_rules! parity_tests {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { assert_parity(stringify!($name)); })*
        const PARITY_MODELS: &[&str] = &[$(stringify!($name)),*];
    };
}

parity_tests!(
    mlp,
    cnn,
    resnet_mini,
    llama_tiny,
    llama_tiny_dyn,
    gpt2_tiny,
    bert_meanpool,
    bert_meanpool_2d,
    last_token,
    multi_out,
    edge_cases,
    train_mlp,
    train_cnn,
    train_attention,
    mobilenet_v2_tiny,
    effnet_block,
    cnn_dynbatch,
    moe_tiny,
    size_outputs,
    size_floats,
    llama_bf16,
    cnn_bf16,
    decoder_kv,
    decoder_kv_tuned,
    decoder_rows,
    decoder_rows_prefill,
    decoder_rows_bf16,
    whisper_gen_encoder,
    whisper_gen_decoder,
    hf_static_cache,
    hf_static_rows,
    hf_export_moe,
    moe_dyn,
    fnet_dyn,
    mla_dyn,
    alibi_dyn,
    swin_dyn,
    sink_dyn,
    llama_1head_dyn,
    t5_encoder_dyn,
    t5_decoder_dyn,
    t5_gen_encoder,
    t5_gen_decoder,
    causal_conv_dyn,
    mamba_dynbatch,
    pad_cnn_dyn,
    logmel,
    rope_complex,
    rope_complex_dyn,
    sym_scalars,
    cond_data,
    cond_size_dyn,
    while_rnn,
    scan_rnn,
    scan_rnn_dyn,
    checked_item,
    nonzero_gather,
    item_slice,
    repeat_counts,
    pad_counts,
    moe_gather,
    moe_gather_dyn,
    moe_split_counts,
    moe_split_counts_dyn,
    dual_ffn_dyn,
    long_context_dyn,
    nms_dyn,
    unique_dyn,
    guarded_dyn,
    auto_batch_dyn,
    derived_cnn_dyn,
    unet_derived_dyn,
    gpt2_past_dyn,
    cross_attention_3dyn,
    t5_recipe_encoder,
    t5_recipe_decoder,
    grid_sample_dyn,
    positions_after_past_dyn,
    rows_of_count,
    size_minmax_dyn,
    window_pad_dyn,
    pool_sides_dyn,
    resize_sides_dyn,
    resize_table_dyn,
    rows_at_sizes_dyn
);

#[test]
fn every_test_model_has_a_parity_test() {
    let mut on_disk: Vec<String> =
        model_paths().iter().map(|p| p.file_stem().expect("stem").to_string_lossy().into_owned()).collect();
    on_disk.sort();
    let mut listed: Vec<String> = PARITY_MODELS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// The test models with feature dims between 64 and 128 (or above 128, not multiples): those
/// `--pad-multiple 128` pads.
const WIDE: &[&str] = &[
    "resnet_mini",
    "llama_tiny",
    "llama_tiny_dyn",
    "gpt2_tiny",
    "bert_meanpool",
    "bert_meanpool_2d",
    "mobilenet_v2_tiny",
    "effnet_block",
    "moe_tiny",
    "llama_bf16",
    "decoder_kv",
    "decoder_kv_tuned",
    "decoder_rows",
    "decoder_rows_prefill",
    "decoder_rows_bf16",
    "hf_static_cache",
    "hf_static_rows",
    "hf_export_moe",
    "moe_dyn",
    "alibi_dyn",
    "swin_dyn",
    "t5_decoder_dyn",
    "t5_encoder_dyn",
    "t5_gen_decoder",
    "t5_gen_encoder",
    "t5_recipe_decoder",
    "t5_recipe_encoder",
    "whisper_gen_decoder",
    "whisper_gen_encoder",
    "llama_1head_dyn",
    "mamba_dynbatch",
    "rope_complex",
    "rope_complex_dyn",
    "long_context_dyn",
];

/// `--target cpu --pad-multiple 128`: the wide test models ([`WIDE`]) have contractions padded
/// and still equal PyTorch, and four narrow ones too; every other model (dims under 64:
/// padding would more than double them) is lowered without XLA, and the pass leaves it alone.
/// (Compiling and running every model took 7 minutes of each CI run.)
#[test]
fn wide_models_match_with_padding_forced_on() {
    let mut req = request();
    req.pass_options.pad_multiple = Some(128);
    for name in WIDE.iter().chain(&["mlp", "cnn", "multi_out", "cnn_dynbatch"]) {
        let manifest = assert_parity_with(name, &req);
        assert_eq!(manifest.options.pad_multiple, Some(128));
        let pad = manifest.buckets[0].passes.iter().find(|p| p.pass == "pad").expect("pad ran");
        assert_eq!(!pad.padded.is_empty(), WIDE.contains(name), "{name}: {pad:?}");
        if name.starts_with("llama_tiny") {
            // Head dim 64 → 128: the fused Q/K/V projection pads its 8 heads one by one, and
            // Q·Kᵀ contracts the padded head dim (one per layer).
            let is = |d: &PaddedDim, role: &str, sizes: (i64, i64, Option<i64>)| {
                d.role == role && (d.size, d.padded, d.blocks) == sizes
            };
            let dims = || pad.padded.iter().flat_map(|c| c.dims.iter().map(move |d| (c, d)));
            assert_eq!(dims().filter(|(_, d)| is(d, "n", (512, 1024, Some(8)))).count(), 2, "{name}: {pad:?}");
            let head_dim =
                |(c, d): &(&PaddedContraction, &PaddedDim)| c.node.contains("bmm") && is(d, "k", (64, 128, None));
            assert_eq!(dims().filter(head_dim).count(), 2, "{name}: {pad:?}");
        }
        if *name == "gpt2_tiny" {
            // Its layer norms keep the padded hidden size: the only slices are the Q/K/V
            // projection's before it is split into heads of 16 (one per layer).
            assert!(pad.notes.iter().any(|n| n == "2 slices back to true sizes"), "{name}: {:?}", pad.notes);
        }
    }
    let mut options = crate::driver::LowerOptions::default();
    options.pass_options.pad_multiple = Some(128);
    for name in PARITY_MODELS.iter().filter(|n| !WIDE.contains(n)) {
        let program = import(&testdata().join(format!("models/{name}.pt2"))).expect("imports");
        let bindings = crate::driver::example_bindings(&program).expect("example sizes");
        let lowered = crate::driver::lower(&program, bindings, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let pad = lowered.passes.iter().find(|p| p.pass == "pad").expect("pad ran");
        assert!(pad.padded.is_empty(), "{name}: {pad:?}");
    }
}

/// `--attention blocked` with blocks of 4 keys (a loop of 3 to 16 blocks): the models with
/// attention equal eager as with the naive form — f32 and bf16, causal and padding masks,
/// grouped KV heads, a decode step over a KV cache, an MoE —, and the dynamic ones at every
/// size, their bucket masks cut into blocks with the keys (and gpt-fast's mask, gathered from
/// a `[max_seq, max_seq]` buffer, gathered per block).
#[test]
fn attention_models_match_eager_blocked() {
    let mut req = request();
    req.attention = (crate::emit::Attention::Blocked, Some(4));
    for name in ["llama_tiny", "gpt2_tiny", "bert_meanpool", "llama_bf16", "decoder_kv", "hf_static_cache", "moe_tiny"]
    {
        let manifest = assert_parity_with(name, &req);
        assert_eq!(manifest.options.attention.as_deref(), Some("blocked:4"), "{name}");
    }
    let dynamic = [
        "llama_tiny_dyn",
        "bert_meanpool_2d",
        "llama_1head_dyn",
        "t5_decoder_dyn",
        "mla_dyn",
        "alibi_dyn",
        "sink_dyn",
        // A causal mask gathered from a buffer by positions (per block at 16 tokens).
        "decoder_rows_prefill",
    ];
    for name in dynamic {
        let tmp = TempDir::new(name);
        let artifact = compile_model_with(name, &tmp.0, &req);
        for case in &case_suffixes(name) {
            run_case(name, &artifact, case, &tmp.0);
        }
    }
}

/// `--attention blocked` names each attention it leaves naive, and why: a training step's,
/// whose probabilities the backward reads; its numbers are still eager's. An attention it
/// blocks gets no word.
#[test]
fn blocked_attention_names_what_stays_naive() {
    let tmp = TempDir::new("naive-attention");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let compile = |name: &str| {
        let (model, out) = (testdata().join(format!("models/{name}.pt2")), tmp.0.join(format!("{name}.tpuexe")));
        let args = ["compile", &s(&model), "-o", &s(&out), "--target", "cpu", "--attention", "blocked", "--no-cache"];
        let (code, _, err) = run_cli(&[&args[..], &["--attention-block", "4", "-q"]].concat());
        assert_eq!(code, 0, "{err}");
        err
    };
    let err = compile("train_attention");
    let expected = "warning: attention at node `_softmax` stays naive: its probabilities are also read outside it \
                    (a training graph's backward keeps them): the backward of attention is not blocked";
    assert!(err.contains(expected), "{err}");
    assert_eq!(compile("llama_tiny"), "");
    let mut req = request();
    req.attention = (crate::emit::Attention::Blocked, Some(4));
    assert_parity_with("train_attention", &req);
}

/// The reference cases of a model: "" (base), "_case1", … while they exist.
pub(super) fn case_suffixes(name: &str) -> Vec<String> {
    let dir = testdata().join("models").join(name);
    (0..)
        .map(|k| if k == 0 { String::new() } else { format!("_case{k}") })
        .take_while(|c| dir.join(format!("out_0{c}.npy")).exists())
        .collect()
}

/// Runs `artifact` on one reference case and returns the bucket it ran in; panics unless every
/// output equals PyTorch eager's at that size.
pub(super) fn run_case(name: &str, artifact: &Path, case: &str, tmp: &Path) -> String {
    let dir = testdata().join("models").join(name);
    let reference = tmp.join(format!("ref{case}"));
    std::fs::create_dir_all(&reference).expect("ref dir");
    for i in 0.. {
        let src = dir.join(format!("out_{i}{case}.npy"));
        if !src.exists() {
            break;
        }
        std::fs::copy(&src, reference.join(format!("out_{i}.npy"))).expect("copy reference");
    }
    let req = RunRequest {
        artifact: artifact.to_path_buf(),
        inputs: case_inputs(name, case),
        out_dir: tmp.join("out"),
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
    };
    let report = run(&req).unwrap_or_else(|e| panic!("{name}{case}: {e:#}"));
    assert_outputs_equal(&format!("{name}{case}"), &report);
    report.bucket
}

/// `seq ∈ [2, 512]` with `pow2`: 9 executables per target; 1,000 random sizes each map to the
/// smallest power of two holding them (what `run` executes — it has no way to compile), and
/// sizes out of the range are refused with the range.
#[test]
fn pow2_buckets_serve_every_size_in_the_range() {
    let tmp = TempDir::new("pow2");
    let artifact = compile_model("llama_tiny_dyn", &tmp.0);
    let art = Artifact::open(&artifact).expect("opens");
    let m = &art.manifest;
    assert_eq!(m.targets[0].executables.len(), 9);
    let symbol = m.signature.symbols[0].name.clone();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..1000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let size = 2 + (state % 511) as i64;
        let real = std::collections::BTreeMap::from([(symbol.clone(), size)]);
        let b = crate::run::bucket_for(m, &real).unwrap_or_else(|| panic!("no bucket for {size}"));
        let want = (size as u64).next_power_of_two() as i64;
        assert_eq!(b.bindings[&symbol], want, "size {size}");
        assert!(m.targets[0].executables.iter().any(|e| e.bucket == b.name));
    }
    let art_path = artifact.to_str().expect("utf-8");
    let out = tmp.0.to_str().expect("utf-8");
    let long = tmp.0.join("long.npy");
    Array { dtype: torchtpu_passes::ir::DType::I64, shape: vec![1, 513], data: vec![0; 513 * 8] }
        .write(&long)
        .expect("writes");
    let (code, _, err) = run_cli(&["run", art_path, long.to_str().expect("utf-8"), "--out-dir", out]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("input 0 (`input_ids`): dim 1 is 513, outside the sizes this artifact serves (2 to 512)"),
        "{err}"
    );
}

/// A bucketed program padded to MXU tiles too (`--pad-multiple 128`): still exact.
#[test]
fn buckets_and_padding_together_stay_exact() {
    let tmp = TempDir::new("bucket-pad");
    let mut req = request();
    req.pass_options.pad_multiple = Some(128);
    req.buckets = vec![crate::buckets::parse_choice("input_ids:1=8,64").expect("parses")];
    let artifact = compile_model_with("llama_tiny_dyn", &tmp.0, &req);
    let manifest = Artifact::open(&artifact).expect("opens").manifest;
    assert!(manifest.buckets.iter().all(|b| b.passes.iter().any(|p| !p.padded.is_empty())), "padded");
    // Cases of 5, 37, 8, 9 and 64 tokens.
    for case in ["_case1", "_case2", "_case7", "_case8", "_case12"] {
        run_case("llama_tiny_dyn", &artifact, case, &tmp.0);
    }
}

/// Buckets compile on several threads; the artifact is the same as with one: compiled on 2
/// threads into a fresh cache, then on 1 thread from that cache, the two files are identical
/// (XLA's executables differ run to run, so the cache is what pins the bytes).
#[test]
fn parallel_bucket_compiles_write_the_same_artifact() {
    let tmp = TempDir::new("jobs");
    let mut req = request();
    req.cache = crate::cache::CacheConfig { dir: Some(tmp.0.join("cache")), ..crate::cache::CacheConfig::off() };
    req.buckets = vec![crate::buckets::parse_choice("input_ids:1=4,16,64").expect("parses")];
    let mut arts = Vec::new();
    for jobs in [2, 1] {
        req.jobs = jobs;
        let dir = tmp.0.join(format!("j{jobs}"));
        std::fs::create_dir_all(&dir).expect("dir");
        arts.push(std::fs::read(compile_model_with("llama_tiny_dyn", &dir, &req)).expect("artifact"));
    }
    assert!(arts[0] == arts[1], "the artifacts differ");
}

/// `--buckets` by input and dim, explicit sizes: the sizes above the largest bucket are refused.
#[test]
fn explicit_buckets_by_input_dim() {
    let tmp = TempDir::new("explicit");
    let mut req = request();
    req.buckets = vec![crate::buckets::parse_choice("input_ids:1=8,40").expect("parses")];
    let artifact = compile_model_with("llama_tiny_dyn", &tmp.0, &req);
    let m = Artifact::open(&artifact).expect("opens").manifest;
    let names: Vec<&str> = m.buckets.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(run_case("llama_tiny_dyn", &artifact, "_case2", &tmp.0), m.buckets[1].name, "37 runs in 40");
    let input = case_inputs("llama_tiny_dyn", "_case3"); // 128 > 40
    let (code, _, err) = run_cli(&["run", artifact.to_str().expect("utf-8"), input[0].to_str().expect("utf-8")]);
    assert_eq!(code, 1);
    assert!(err.contains("outside the sizes this artifact serves (2 to 40)"), "{err}");
}

/// A bare `--buckets pow2` or `auto:K` applies to every dynamic dim, and a choice naming a dim
/// overrides it there; through the command line, as the README writes it.
#[test]
fn bare_buckets_apply_to_every_dynamic_dim() {
    let tmp = TempDir::new("bare-buckets");
    let compile_with = |model: &str, buckets: &[&str]| {
        let out = tmp.0.join(format!("{model}.tpuexe"));
        let pt2 = testdata().join(format!("models/{model}.pt2"));
        let mut args = vec!["compile", pt2.to_str().expect("utf-8"), "-o", out.to_str().expect("utf-8")];
        args.extend(["--target", "cpu", "--no-cache", "-q"]);
        args.extend(buckets.iter().flat_map(|b| ["--buckets", b]));
        let (code, _, err) = run_cli(&args);
        let names = (code == 0).then(|| {
            let m = Artifact::open(&out).expect("opens").manifest;
            m.buckets.iter().map(|b| b.name.clone()).collect::<Vec<_>>()
        });
        (code, names.unwrap_or_default(), err)
    };
    // seq from 2 to 64: 2, 4, …, 64.
    let (code, names, err) = compile_with("last_token", &["pow2"]);
    assert_eq!((code, names.len()), (0, 6), "{names:?} {err}");
    // batch 1–8 × seq 2–64, two sizes each; then the batch fixed to one size.
    let (code, names, err) = compile_with("bert_meanpool_2d", &["auto:2"]);
    assert_eq!((code, names.len()), (0, 4), "{names:?} {err}");
    let (code, names, err) = compile_with("bert_meanpool_2d", &["auto:2", "input_ids:0=8"]);
    assert_eq!((code, names.len()), (0, 2), "{names:?} {err}");
    let (code, _, err) = compile_with("mlp", &["pow2"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--buckets pow2: the program has no dynamic dims"), "{err}");
    let (code, _, err) = compile_with("last_token", &["16,64"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("or a bare pow2 or auto:K for every dynamic dim"), "{err}");
}

/// bf16 outputs are held to bf16's tolerance: the tiny bf16 Llama passes `--reference` by
/// default, a reference with one element moved by a tenth of its scale fails, the report gives
/// the figures, and `--atol`/`--rtol` replace the default.
#[test]
fn bf16_outputs_are_compared_at_bf16_tolerance() {
    let tmp = TempDir::new("bf16-reference");
    let artifact = compile_model("llama_bf16", &tmp.0);
    let dir = testdata().join("models/llama_bf16");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let run_against = |reference: &Path, extra: &[&str]| {
        let (art, input, out) = (s(&artifact), s(&dir.join("in_0.npy")), s(&tmp.0.join("out")));
        let mut args = vec!["run", &art, &input, "--out-dir", &out];
        let reference = s(reference);
        args.extend(["--reference", &reference]);
        args.extend(extra);
        run_cli(&args)
    };
    let (code, text, err) = run_against(&dir, &[]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        text.contains("matches the reference (max abs diff") && text.contains("; 0 of 1536 elements (0.00%)"),
        "{text}"
    );
    // One element moved by a tenth of the scale: out of bf16's 5e-2.
    let mut reference = Array::read(&dir.join("out_0.npy")).expect("reference");
    let scale = (0..1536).filter_map(|i| reference.get_f64(i)).fold(1f64, |m, v| m.max(v.abs()));
    let first = f32::from_le_bytes(reference.data[..4].try_into().expect("4 bytes"));
    reference.data[..4].copy_from_slice(&(first + 0.1 * scale as f32).to_le_bytes());
    let perturbed = tmp.0.join("perturbed");
    std::fs::create_dir_all(&perturbed).expect("a folder");
    reference.write(&perturbed.join("out_0.npy")).expect("written");
    let (code, text, _) = run_against(&perturbed, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("DIFFERS from the reference") && text.contains("; 1 of 1536 elements (0.07%) off by more than"),
        "{text}"
    );
    // A user's tolerance replaces the default, both ways.
    let (code, text, _) = run_against(&perturbed, &["--atol", &format!("{}", 0.2 * scale)]);
    assert_eq!(code, 0, "{text}");
    let (code, text, _) = run_against(&dir, &["--atol", "0", "--rtol", "1e-6"]);
    assert_eq!(code, 1, "bf16 arithmetic is not eager's to 1e-6: {text}");
    assert!(text.contains("·|ref|"), "{text}");
    let (code, _, err) = run_against(&dir, &["--rtol=-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`-1` is not a tolerance"), "{err}");
}

/// The artifact layout (README.md, "The artifact"): stored, 64-byte aligned entries; `inspect`
/// reads it.
#[test]
fn artifact_layout_and_inspect() {
    let tmp = TempDir::new("layout");
    let artifact = compile_model("multi_out", &tmp.0);
    let art = Artifact::open(&artifact).expect("opens");
    let names: Vec<String> = art.entry_offsets().into_keys().collect();
    assert_eq!(names, ["executables/cpu/main.pjrt", "manifest.json", "programs/main.mlir", "weights.safetensors"]);
    for (name, offset) in art.entry_offsets() {
        assert_eq!(offset % 64, 0, "{name} at {offset}");
    }
    let m = &art.manifest;
    assert_eq!(m.signature.outputs.iter().map(|o| o.dtype.as_str()).collect::<Vec<_>>(), ["f32", "i64", "bool", "i64"]);
    assert_eq!(m.targets[0].target, "cpu");
    assert!(m.targets[0].plugin.platform_name.to_lowercase().contains("cpu"), "{:?}", m.targets[0].plugin);
    let (code, out, err) = run_cli(&["inspect", artifact.to_str().expect("utf-8"), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["kind"], "artifact");
    assert_eq!(report["manifest"]["weights"]["order"].as_array().map(Vec::len), Some(2));
}

/// `--emit mlirbc` writes MLIR bytecode that XLA compiles like the text; `--dump-dir` writes
/// the IR after each stage, the StableHLO and the compile log.
#[test]
fn bytecode_and_dump_dir() {
    let tmp = TempDir::new("emit");
    let model = testdata().join("models/mlp.pt2");
    let model = model.to_str().expect("utf-8");
    let bc = tmp.0.join("mlp.mlirbc");
    let (code, _, err) = run_cli(&["compile", model, "-o", bc.to_str().expect("utf-8"), "--emit", "mlirbc"]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&bc).expect("written");
    assert_eq!(&bytes[..4], b"ML\xefR", "MLIR bytecode magic");
    let plugin = crate::pjrt::Plugin::load(&crate::setup::cpu_plugin(None).path).expect("plugin (cargo xtask setup)");
    let client = plugin.client().expect("client");
    client.compile(&bytes, &crate::pjrt::CompileOptions::cpu()).expect("XLA compiles the bytecode");

    let dump = tmp.0.join("dump");
    let art = tmp.0.join("mlp.tpuexe");
    let (code, _, err) = run_cli(&[
        "compile",
        model,
        "-o",
        art.to_str().expect("utf-8"),
        "--dump-dir",
        dump.to_str().expect("utf-8"),
        "-q",
        "--no-cache",
    ]);
    assert_eq!(code, 0, "{err}");
    let stages = [
        "00.import.ir",
        "01.specialize.ir",
        "02.canonicalize.ir",
        "03.fold_constants.ir",
        "04.fold_batch_norm.ir",
        "05.cse.ir",
        "06.grouped_attention.ir",
        "07.safe_softmax.ir",
        "08.fuse_matmuls.ir",
        "09.pad.ir",
        "10.compute_dtype.ir",
        "11.weight_layout.ir",
        "12.shard.ir",
        "13.dce.ir",
        "14.precision.ir",
    ];
    for f in stages.iter().chain(&["main.mlir", "compile.log"]) {
        let text = std::fs::read_to_string(dump.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(!text.is_empty(), "{f} is empty");
    }
    // Padding is off by default, with a TPU among the targets too.
    let manifest = Artifact::open(&art).expect("opens").manifest;
    assert_eq!(manifest.options.pad_multiple, None);
    let log = std::fs::read_to_string(dump.join("compile.log")).expect("log");
    assert!(log.contains("cpu main: compiled (cache off) in ") && log.contains("tpu:v6e:1x1 main: compiled"), "{log}");
}

/// An `item()` used as a size outside the range the export recorded for it (`torch._check(k <=
/// 8)` in `item_slice`) is refused by `run`, naming the symbol and the range, as eager raises.
#[test]
fn item_outside_its_checked_range_is_refused() {
    let tmp = TempDir::new("item_range");
    let artifact = compile_model("item_slice", &tmp.0);
    let x = case_inputs("item_slice", "").remove(0);
    let art = artifact.to_str().expect("utf-8");
    let out = tmp.0.join("out");
    for k in [9i64, -1] {
        let n = tmp.0.join("n.npy");
        let value = Array { dtype: torchtpu_passes::ir::DType::I64, shape: vec![], data: k.to_le_bytes().to_vec() };
        value.write(&n).expect("n.npy");
        let args = ["run", art, x.to_str().expect("utf-8"), n.to_str().expect("utf-8"), "--out-dir"];
        let (code, _, err) = run_cli(&[&args[..], &[out.to_str().expect("utf-8")]].concat());
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(&format!("computes `u0` = {k}, outside [0, 8]")), "{err}");
    }
}
