//! The command line (the library's boundary with users): parsing, output and exit codes.
//!
//! `main.rs` only forwards the process arguments here; tests call [`main_with`] directly with
//! captured output streams, so every message and exit code is tested without spawning processes.

mod commands;
mod mesh;
mod pass_flags;
mod plan;
mod recompile;
mod serve;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::cache::{self, CacheConfig};
use crate::emit::{Attention, EmitOptions, GroupedMm, Precision};
use crate::run::DeviceKind;
use crate::target::Target;
use crate::Error;
use mesh::{parse_mesh, parse_shard_plan, MeshArg, ShardPlanArg};
use pass_flags::PassFlags;
use torchtpu_passes::ir::DType;
use torchtpu_passes::shard::plan::ShardPlan;
use torchtpu_passes::PassOptions;

/// Ahead-of-time compiler from PyTorch `torch.export` archives (.pt2) to TPU executables.
///
/// `torchtpu-compile MODEL.pt2 -o MODEL.tpuexe` is short for `torchtpu-compile compile …`.
///
/// Exit codes: 0 success, 1 the model cannot be read or compiled (the message names the
/// archive entry, node and op), 2 usage error, 3 environment problem (e.g. a missing plugin).
#[derive(Parser)]
#[command(name = "torchtpu-compile", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile an exported program into an artifact (.tpuexe), or emit its StableHLO or IR.
    ///
    /// Example: torchtpu-compile compile model.pt2 -o model.tpuexe --target cpu
    ///
    /// Example: torchtpu-compile compile model.pt2 -o model.mlir --emit stablehlo
    Compile(CompileArgs),
    /// Run an artifact's CPU executable on `.npy` inputs and write `out_<i>.npy` files (and
    /// `state_<fqn>.npy` for the buffers the program updates).
    ///
    /// Example: torchtpu-compile run model.tpuexe in_0.npy --out-dir out/
    Run(RunArgs),
    /// Generate tokens with a decode-step export (token ids [B, 1] and a position in, logits
    /// out, KV caches as buffers it updates): the prompt is fed one token per call (in chunks
    /// when the step takes [B, T] ids, T dynamic), then each call's logits choose the next
    /// token; the caches stay on the device between calls.
    ///
    /// Example: torchtpu-compile generate decoder.tpuexe --prompt prompt.npy --max-new-tokens 24
    Generate(GenerateArgs),
    /// Serve a decode-step artifact over HTTP: an OpenAI-compatible `POST /v1/completions`
    /// (`prompt` as token ids, or text with `--tokenizer`; `max_tokens`, `temperature`, `top_k`,
    /// `top_p`, `min_p`, the penalties, `seed`, `logprobs`, `stop`, `stop_token_ids`,
    /// `ignore_eos`, `stream` as server-sent events), `POST /v1/chat/completions`
    /// (with `--tokenizer` and `--chat-template`), `GET /health`, `GET /metrics` (Prometheus)
    /// and `GET /v1/models`. Concurrent requests share the step's rows (continuous batching); the
    /// executables and weights are loaded before it listens, nothing is compiled. Ctrl-C or
    /// SIGTERM stops taking requests and lets those in flight finish.
    ///
    /// Example: torchtpu-compile serve decoder.tpuexe --port 8000
    Serve(serve::ServeArgs),
    /// Check that every op of a program lowers to StableHLO, without compiling; lists all
    /// unsupported ops at once and exits 1 if there is any.
    Check {
        /// The archive written by `torch.export.save`.
        model: PathBuf,
        /// `text` for people, `json` for CI (layout in README).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// The buckets `compile` would make, checked the same way.
        #[command(flatten)]
        sizes: SizeFlags,
    },
    /// Look after the compile cache: `stats` (entries, bytes, hit/compile/eviction counters),
    /// `ls` (every entry with its key parts), `verify` (check every checksum, drop damaged
    /// entries), `gc` (evict least-recently-used entries down to --max-size, remove leftovers
    /// of killed writers), `clear` (remove everything), `explain MODEL.pt2 [COMPILE OPTIONS]`
    /// (why that compile would miss: for each executable, what differs from the nearest entries).
    ///
    /// Example: torchtpu-compile cache stats
    ///
    /// Example: torchtpu-compile cache explain model.pt2 --target tpu:v6e:1x1 --precision highest
    Cache(CacheArgs),
    /// Find the TPU slices and meshes a program fits, with estimates of a call's time and price:
    /// every candidate compiled deviceless through libtpu (no TPU needed), its peak memory per
    /// chip against the chip's HBM, XLA's cost model, the collectives, and from them a roofline
    /// estimate and the price per hour and per million tokens. Estimates, not measurements.
    ///
    /// Example: torchtpu-compile plan model.pt2 --slices tpu:v5e:2x4,tpu:v6e:2x2
    Plan(plan::PlanArgs),
    /// Compile an artifact's stored StableHLO programs again, without the `.pt2`: for other
    /// targets, or for the plugin this machine has (a new libtpu). The weights are carried over
    /// unchanged; buckets, padding, precision and the mesh stay as compiled.
    ///
    /// Example: torchtpu-compile recompile model.tpuexe -o model-v6e.tpuexe --target tpu:v6e:1x1
    Recompile(recompile::RecompileArgs),
    /// Describe an exported program (.pt2: signature with symbolic dims and bounds, weights, op
    /// histogram, versions) or an artifact (.tpuexe: manifest, targets, buckets, executables).
    ///
    /// Example: torchtpu-compile inspect model.pt2 --format json
    Inspect {
        /// A `.pt2` archive or a `.tpuexe` artifact (recognized by content, not by extension).
        model: PathBuf,
        /// `text` for people, `json` for scripts (stable layout, see README).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(Args)]
struct CacheArgs {
    action: CacheAction,
    /// The cache folder; default `$TORCHTPU_CACHE_DIR`, else `$XDG_CACHE_HOME/torchtpu-compile`,
    /// else `~/.cache/torchtpu-compile`.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// For `gc`: the size to evict down to (e.g. `500M`, `10G`; default 10G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_size: Option<u64>,
    /// `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// For `explain`: the model and the options a compile would be given.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "MODEL.pt2 [COMPILE OPTIONS]")]
    compile: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CacheAction {
    /// Why a compile would miss: `cache explain MODEL.pt2 [the options of compile]` keys each
    /// executable as `compile` would and names, for a miss, what differs from the nearest
    /// entries (program and the options that shaped it, XLA options and flags, target, plugin
    /// build); exit 1 when any would miss.
    Explain,
    Stats,
    Ls,
    Verify,
    Gc,
    Clear,
}

/// `default`, `high` or `highest`.
fn parse_precision(s: &str) -> Result<Precision, String> {
    Precision::parse(s).ok_or_else(|| format!("`{s}` is not a precision (default, high, highest)"))
}

/// The value of `--compute-dtype`: `None` for f32 (off).
#[derive(Clone, Copy, Debug)]
struct ComputeDtypeArg(Option<DType>);

/// `bf16` (mixed precision) or `f32` (off).
fn parse_compute_dtype(s: &str) -> Result<ComputeDtypeArg, String> {
    match s {
        "bf16" => Ok(ComputeDtypeArg(Some(DType::BF16))),
        "f32" => Ok(ComputeDtypeArg(None)),
        _ => Err(format!("`{s}`: the compute dtype is bf16 or f32")),
    }
}

/// `PATTERN=LEVEL`.
fn parse_override(s: &str) -> Result<(String, Precision), String> {
    let (pattern, level) =
        s.split_once('=').ok_or_else(|| format!("`{s}`: expected PATTERN=LEVEL, e.g. lm_head=highest"))?;
    if pattern.is_empty() {
        return Err(format!("`{s}`: the pattern is empty"));
    }
    Ok((pattern.to_string(), parse_precision(level)?))
}

/// Flags shared by the commands that compile.
#[derive(Args)]
struct CacheFlags {
    /// The compile cache folder; default `$TORCHTPU_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/torchtpu-compile`, else `~/.cache/torchtpu-compile`.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile everything, neither reading nor writing the cache.
    #[arg(long)]
    no_cache: bool,
    /// Size bound of the cache folder; least-recently-used entries are evicted beyond it.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "10G")]
    cache_max_size: u64,
    /// A shared cache tier: `s3://bucket/prefix` (credentials and endpoint from the AWS_*
    /// environment variables), `gs://bucket/prefix` or `file:///path`. Read on a local miss,
    /// written after a compile; errors fall back to compiling.
    #[arg(long, value_name = "URL")]
    remote_cache: Option<String>,
}

impl CacheFlags {
    fn config(&self) -> CacheConfig {
        let dir = if self.no_cache { None } else { self.cache_dir.clone().or_else(cache::default_dir) };
        CacheConfig { dir, max_bytes: self.cache_max_size, remote: self.remote_cache.clone(), publish_hits: false }
    }
}

/// `123`, `10K`, `500M`, `10G`, `1T` (binary units; a trailing `B` or `iB` is allowed).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("iB").trim_end_matches(['B', 'b']);
    let (num, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len()));
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("`{s}`: expected a size such as 500M or 10G")),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("`{s}`: expected a size such as 500M or 10G"))?;
    if n.is_nan() || n < 0.0 {
        return Err(format!("`{s}`: a size cannot be negative"));
    }
    Ok((n * (1u64 << shift) as f64) as u64)
}

#[derive(Args)]
struct GenerateArgs {
    /// An artifact (.tpuexe) of a decode step, with a CPU executable.
    artifact: PathBuf,
    /// The prompt's token ids, `.npy` of shape [T] or [B, T], integers. Given once with as
    /// many rows as the step's batch, the rows decode together; otherwise (several files, more
    /// or fewer rows, rows of different lengths padded with negative ids, or `--eos`) each row is
    /// a request of its own, and the requests share the batch's slots: continuously when the
    /// step takes a position per row, else in waves.
    #[arg(long, value_name = "PROMPT.npy", required = true)]
    prompt: Vec<PathBuf>,
    /// How many tokens to generate after the prompt.
    #[arg(long, value_name = "N")]
    max_new_tokens: usize,
    /// Write the generated tokens (only those) as `.npy`, [B, N] i64.
    #[arg(long, value_name = "TOKENS.npy")]
    out: Option<PathBuf>,
    /// Write the logits that chose each generated token as `.npy`, [B, N, V] f32.
    #[arg(long, value_name = "LOGITS.npy")]
    logits_out: Option<PathBuf>,
    /// End a request when it generates this token id (the id is kept).
    #[arg(long, value_name = "ID")]
    eos: Option<i64>,
    /// The encoder's artifact of an encoder–decoder model (transformers' seq2seq export
    /// recipe: T5, BART, Whisper): it runs once on the prompt, then ARTIFACT, the decoder step,
    /// runs once per new token over its states.
    #[arg(long, value_name = "ENCODER.tpuexe")]
    encoder: Option<PathBuf>,
    /// With `--encoder`: the decoder's first token (T5's and BART's is 0).
    #[arg(long, value_name = "ID", default_value_t = 0, requires = "encoder")]
    start_token: i64,
    /// Sample from softmax(logits / T) instead of taking the most likely token (0: greedy).
    #[arg(long, value_name = "T", value_parser = parse_tolerance)]
    temperature: Option<f64>,
    /// Seed of the sampling: the same seed gives the same tokens.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where to run: this machine's CPU, or its TPU chips (exit 3 where it has none).
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    device: DeviceKind,
    /// The PJRT plugin; default for the CPU `$TORCHTPU_PJRT_PLUGIN`, for a TPU
    /// `$TORCHTPU_LIBTPU`, then the `cargo xtask setup` folder.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Copy the caches on every step instead of updating them in place (for measuring what
    /// donating them saves).
    #[arg(long)]
    no_donate: bool,
    /// Run with the weights of another checkpoint of the same program instead of the
    /// artifact's, without recompiling: a `.pt2` of the same model with other values
    /// (fine-tuned, another adapter; it must lower to the artifact's programs, and the weights
    /// the compiler derives are computed from it) or a `.safetensors` holding every weight of
    /// the artifact by name, dtype and shape.
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// Summary format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Args)]
struct RunArgs {
    /// The artifact written by `compile`.
    artifact: PathBuf,
    /// One `.npy` file per user input, in the graph's user-input order (float32 is accepted
    /// for bfloat16 inputs).
    inputs: Vec<PathBuf>,
    /// Where to write `out_0.npy`, `out_1.npy`, … (bf16 outputs are widened to float32).
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
    /// Where to run: this machine's CPU, or its TPU chips (exit 3 where it has none).
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    device: DeviceKind,
    /// The PJRT plugin; default for the CPU `$TORCHTPU_PJRT_PLUGIN`, for a TPU
    /// `$TORCHTPU_LIBTPU`, then the `cargo xtask setup` folder.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Compare the outputs with `DIR/out_<i>.npy` and report the max abs and relative diffs and
    /// how many elements are out of tolerance; exit 1 on a mismatch. Floats must be within a
    /// fraction of the reference's scale (max(1, max |ref|)): 1e-4 for f32, 5e-2 for bf16 and
    /// 5e-3 for f16 (the drift of rounding in other places than eager through a deep network);
    /// integers and bools exactly.
    #[arg(long, value_name = "DIR")]
    reference: Option<PathBuf>,
    /// Absolute tolerance for `--reference`: each element within ATOL + RTOL·|ref| (replaces
    /// the default; RTOL is then 0 unless given).
    #[arg(long, value_name = "ATOL", value_parser = parse_tolerance, requires = "reference")]
    atol: Option<f64>,
    /// Relative tolerance for `--reference`: each element within ATOL + RTOL·|ref| (replaces the
    /// default; ATOL is then 0 unless given).
    #[arg(long, value_name = "RTOL", value_parser = parse_tolerance, requires = "reference")]
    rtol: Option<f64>,
    /// Start the buffers and parameters the program updates (a KV cache, BatchNorm statistics)
    /// from DIR's `state_<fqn>.npy` files, as an earlier `run` wrote them, instead of the values
    /// in the artifact: run step after step with `--state-in` the last step's `--state-out`.
    #[arg(long, value_name = "DIR")]
    state_in: Option<PathBuf>,
    /// Write the updated buffers and parameters (`state_<fqn>.npy`) to DIR instead of
    /// `--out-dir`.
    #[arg(long, value_name = "DIR")]
    state_out: Option<PathBuf>,
    /// Run with the weights of another checkpoint of the same program instead of the
    /// artifact's, without recompiling: a `.pt2` of the same model with other values
    /// (fine-tuned, another adapter; it must lower to the artifact's programs, and the weights
    /// the compiler derives are computed from it) or a `.safetensors` holding every weight of
    /// the artifact by name, dtype and shape.
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// Seed of the random ops (`rand`, `randn`, `randperm`, dropout), if the program has any:
    /// the same seed gives the same numbers.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Call the program N times on the same inputs, each call from the state the last one left
    /// (as a session carries a KV cache), and report the median time of a call: for timing a
    /// step without the first call's warm-up. The outputs written are the last call's.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    repeat: u16,
    /// Hash the weights against the artifact's digest even when this file was verified before.
    /// Without it they are hashed on their way to the device unless the cache folder remembers
    /// the file (by path, inode, size, modification and change times) as verified; a weights
    /// file of another size is always refused.
    #[arg(long)]
    verify_weights: bool,
    /// Where verified weights are remembered; default the compile cache folder.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Remember nothing: hash the weights on every run.
    #[arg(long)]
    no_cache: bool,
    /// Summary format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Args)]
struct CompileArgs {
    /// The archive written by `torch.export.save` (recognized by content, not by extension).
    model: PathBuf,
    /// Where to write the result.
    #[arg(short, long, required_unless_present = "cache_only")]
    output: Option<PathBuf>,
    /// Compile the executables into the cache (local and `--remote-cache`; a local hit is put
    /// into the remote tier when the tier lacks it) and write nothing else: one host's share of
    /// a compile spread over several, which share the remote tier; a `compile` without it then
    /// assembles the artifact from cache hits (`torchtpu_compile.fleet` does this on Ray).
    #[arg(long, conflicts_with = "output")]
    cache_only: bool,
    /// With `--cache-only`: only this bucket (names as `inspect` and the summary give them,
    /// e.g. `s70-64`); repeat for several.
    #[arg(long = "only-bucket", value_name = "NAME")]
    only_buckets: Vec<String>,
    /// With `--cache-only`: only this one of the `--target`s; repeat for several. The program is
    /// still the one every `--target` shapes (padding, attention), so the executable is the
    /// one the artifact for all of them holds.
    #[arg(long = "only-target", value_name = "T", value_parser = parse_target)]
    only_targets: Vec<Target>,
    /// What to write: an executable artifact, StableHLO text, MLIR bytecode, or the IR.
    #[arg(long, value_enum, default_value_t = Emit::Exe)]
    emit: Emit,
    /// Where executables will run: `cpu`, `cpu:N` (N CPU devices, for a program split over a
    /// mesh of N), or `tpu:<generation>:<topology>` with a generation among v2, v3, v4, v5e,
    /// v5p, v6e, tpu7x (e.g. `tpu:v6e:1x1`, `tpu:v5e:2x2`, `tpu:v5p:2x2x1`); repeat for several.
    /// Default: `tpu:v6e:1x1` and `cpu`.
    #[arg(long = "target", value_name = "T", value_parser = parse_target)]
    targets: Vec<Target>,
    /// Split the program over a mesh of devices, e.g. `tp=4` or `dp=2,tp=2`: `dp` splits the
    /// user inputs' batch, `tp` the transformer blocks (Megatron tensor parallelism: whole heads
    /// per device, one all-reduce after each block's attention and MLP), `fsdp` stores every
    /// weight split and gathers it where used, `ep` stores the experts of MoE layers split (E/ep
    /// per device). The product of the sizes must be every target's device count (`cpu:4`,
    /// `tpu:v5e:2x2`). `auto` compiles every mesh of that count (`tp`, `fsdp`, `dp`, `fsdp×tp`, `dp×tp`,
    /// and `ep`, `ep×tp` with experts, as `plan` does) and keeps the one with the shortest call
    /// estimated from XLA's cost model among those that fit every chip's HBM (without a TPU
    /// target: the fewest collective bytes); the manifest and `-v` list every mesh tried.
    #[arg(long, value_name = "AXIS=N,...|auto", value_parser = parse_mesh)]
    mesh: Option<MeshArg>,
    /// How tensors map onto the mesh: `auto` (found from the graph's structure; the default),
    /// or a JSON plan file in the words of PyTorch's `parallelize_module` that overrides it per
    /// module and per input, e.g. `{"modules": {"model.layers.*.mlp": "replicate",
    /// "model.layers.*.self_attn.q_proj": "colwise"}, "inputs": {"input_ids": ["dp", null]}}`
    /// (styles: colwise, rowwise, replicate, vocab; `*` matches within one path component).
    #[arg(long, value_name = "auto|FILE", default_value = "auto", value_parser = parse_shard_plan)]
    shard_plan: ShardPlanArg,
    /// Precision of matmuls and convolutions (on TPU: one bf16 pass, three, or full f32).
    #[arg(long, value_name = "LEVEL", value_parser = parse_precision, default_value = "default")]
    precision: Precision,
    /// Another precision (default, high, highest) for the matmuls and convolutions whose node
    /// name or module path contains PATTERN, e.g. `lm_head=highest`; repeatable, the last
    /// match wins.
    #[arg(long, value_name = "PATTERN=LEVEL", value_parser = parse_override)]
    precision_override: Vec<(String, Precision)>,
    /// Mixed precision: `bf16` feeds every f32 matmul and convolution bf16 operands (their
    /// weights stored in bf16) and accumulates in f32; norms, softmax and reductions stay f32.
    /// Default `f32` (off).
    #[arg(long, value_name = "DTYPE", value_parser = parse_compute_dtype, default_value = "f32")]
    compute_dtype: ComputeDtypeArg,
    /// Widen the feature dims of matmuls, convolutions and embeddings (output features,
    /// channels, and contracting dims along chains of layers) to multiples of N, with zeros in
    /// the weights; results stay exactly PyTorch's (reductions use the true sizes, outputs are
    /// sliced back). Default: off (0). libtpu's own figures show the zeros only add work and
    /// HBM (the 1B Llama on v6e: 14% more weight bytes, 22% more bytes accessed); XLA tiles
    /// small dims itself. It applies to every target of the compile: they share one program.
    #[arg(long, value_name = "N")]
    pad_multiple: Option<u32>,
    /// How mixture-of-experts layers' `_grouped_mm` is lowered: `dense` (the default: every
    /// token times every expert's weight, masked to its own experts; the same program runs and
    /// is checked on CPU) or `ragged` (one `chlo.ragged_dot`: each token meets only its
    /// experts' weights; TPU targets only, as XLA:CPU has no ragged dot, so its numbers cannot
    /// be checked on this host). It applies to every target of the compile: they share one
    /// program.
    #[arg(long, value_name = "FORM", value_enum)]
    grouped_mm: Option<GroupedMmArg>,
    /// How attention is lowered: `naive` (the scores `[queries, keys]` whole, then the softmax:
    /// memory grows with the square of the sequence), `blocked` (a loop over blocks of keys with
    /// an online softmax: memory grows with the block; the same numbers up to rounding; a block
    /// every key of which is masked is skipped) or `auto` (the default: blocked where the scores
    /// would take 64 MiB or more, e.g. 4 heads of 2,048 × 2,048 positions, and where a mask lets
    /// blocks be skipped over 8 blocks or more, e.g. a decode step over a cache of 4,096
    /// positions, whose cost then follows the filled positions).
    #[arg(long, value_name = "FORM", value_enum, default_value = "auto")]
    attention: AttentionArg,
    /// Keys per block of blocked attention (the largest divisor of the keys up to N). Default
    /// 512.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..=1 << 20))]
    attention_block: Option<i64>,
    #[command(flatten)]
    sizes: SizeFlags,
    /// How many buckets to lower and compile at once. Default: the number of cores.
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// Where the artifact's weights go: `embed` (the default: inside the artifact, one file to
    /// ship) or `external` (`OUT` with the extension `.weights.safetensors`, beside it: no
    /// copy in the artifact, reused as is when a compile would write the same bytes, and shared
    /// by every bucket and target; `run` refuses it if it changed). With `--emit exe` only.
    #[arg(long, value_enum, default_value_t = WeightsArg::Embed)]
    weights: WeightsArg,
    /// The CPU PJRT plugin; default `$TORCHTPU_PJRT_PLUGIN`, then the `cargo xtask setup` folder.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// The model's Hugging Face folder (or the `tokenizer.json` in it): its `tokenizer.json`,
    /// and its `tokenizer_config.json` (the chat template, BOS and EOS), `chat_template.jinja`
    /// and `generation_config.json` (EOS ids) where it has them, are stored in the artifact,
    /// so that `serve` takes text and chats with nothing beside the artifact. With `--emit exe`.
    #[arg(long, value_name = "DIR", conflicts_with = "cache_only")]
    tokenizer: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheFlags,
    #[command(flatten)]
    passes: PassFlags,
    /// Write the IR after each stage, the StableHLO and the compile log into DIR.
    #[arg(long, value_name = "DIR")]
    dump_dir: Option<PathBuf>,
    /// Summary format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// No progress or summary on stderr.
    #[arg(short, long)]
    quiet: bool,
    /// Also say what each graph pass did and how long each phase took (read, lower, compile,
    /// write), and let through what the plugins print while they load (libtpu's log lines,
    /// otherwise kept back unless loading fails).
    #[arg(short, long)]
    verbose: bool,
}

impl CompileArgs {
    fn targets_or_default(&self) -> Vec<Target> {
        if self.targets.is_empty() {
            default_targets()
        } else {
            self.targets.clone()
        }
    }

    /// The passes' settings.
    fn pass_options(&self) -> PassOptions {
        let pad = self.pad_multiple.map(i64::from);
        PassOptions {
            precision_overrides: self.precision_override.clone(),
            compute_dtype: self.compute_dtype.0,
            pad_multiple: pad.filter(|&m| m > 1),
            bucket: None,
            mesh: match &self.mesh {
                Some(MeshArg::Given(mesh)) => Some(mesh.clone()),
                Some(MeshArg::Auto) | None => None,
            },
            shard_plan: match &self.shard_plan {
                ShardPlanArg::Auto => ShardPlan::default(),
                ShardPlanArg::File(plan) => (**plan).clone(),
            },
        }
    }

    /// Every target has as many devices as the mesh; a target of several CPU devices needs one.
    fn check_devices(&self, targets: &[Target]) -> Result<(), clap::Error> {
        let error = |msg: String| Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg);
        match &self.mesh {
            // The chooser checks the targets.
            Some(MeshArg::Auto) => Ok(()),
            Some(MeshArg::Given(mesh)) => {
                let devices = mesh.devices() as u64;
                let wrong: Vec<String> = targets
                    .iter()
                    .filter(|t| t.devices() != devices)
                    .map(|t| format!("`{t}` has {}", t.devices()))
                    .collect();
                if wrong.is_empty() {
                    return Ok(());
                }
                let defaulted = if self.targets.is_empty() { " (the default targets)" } else { "" };
                Err(error(format!(
                    "`--mesh {}` needs targets of {devices} devices, but {}{defaulted}: give targets such as \
                     `--target cpu:{devices}`",
                    mesh.flag_text(),
                    wrong.join(", ")
                )))
            }
            None if matches!(self.shard_plan, ShardPlanArg::File(_)) => {
                Err(error("a plan file (`--shard-plan`) needs a mesh to split over: give `--mesh`".into()))
            }
            None => match targets.iter().find(|t| matches!(t, Target::Cpu { devices } if *devices > 1)) {
                Some(t) => Err(error(format!(
                    "`{t}` has {} devices: give `--mesh` to split the program over them (e.g. `--mesh dp={}`)",
                    t.devices(),
                    t.devices()
                ))),
                None => Ok(()),
            },
        }
    }

    /// The emitter's settings; `--grouped-mm ragged` needs TPU targets only.
    fn emit_options(&self, targets: &[Target]) -> Result<EmitOptions, clap::Error> {
        let all_tpu = targets.iter().all(|t| matches!(t, Target::Tpu { .. }));
        let grouped_mm = match self.grouped_mm {
            None | Some(GroupedMmArg::Dense) => GroupedMm::Dense,
            Some(GroupedMmArg::Ragged) if !all_tpu => {
                return Err(Cli::command().error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "`--grouped-mm ragged` needs every target to be a TPU, and `cpu` is one here \
                     (XLA:CPU has no ragged dot; without `--target`, the targets are `tpu:v6e:1x1` and `cpu`)",
                ))
            }
            Some(GroupedMmArg::Ragged) => GroupedMm::Ragged,
        };
        let attention = match self.attention {
            AttentionArg::Auto => Attention::Auto,
            AttentionArg::Naive => Attention::Naive,
            AttentionArg::Blocked => Attention::Blocked,
        };
        Ok(EmitOptions { precision: self.precision, grouped_mm, attention, attention_block: self.attention_block })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WeightsArg {
    Embed,
    External,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AttentionArg {
    Auto,
    Naive,
    Blocked,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GroupedMmArg {
    Ragged,
    Dense,
}

/// `tpu:v6e:1x1` plus `cpu`, the default `--target` list.
fn default_targets() -> Vec<Target> {
    vec![Target::Tpu { generation: "v6e".into(), topology: "1x1".into() }, Target::cpu()]
}

fn parse_target(s: &str) -> Result<Target, String> {
    s.parse()
}

/// A tolerance: a finite number, 0 or more.
fn parse_tolerance(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!("`{s}` is not a tolerance: give a finite number ≥ 0, such as 1e-3")),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Emit {
    Exe,
    Stablehlo,
    Mlirbc,
    Ir,
}

/// The sizes a dynamic program is compiled for: its buckets, and the bounds of dims the export
/// left unbounded.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct SizeFlags {
    /// Size buckets of a dynamic dim, named as in the archive (`s53`) or by user input and dim
    /// (`input_ids:1`): `SYM=16,64,512` (those sizes), `SYM=pow2` (powers of two covering the
    /// range, its maximum included) or `SYM=auto:K` (K sizes with the least expected padding for
    /// sizes uniform in the range); a bare `pow2` or `auto:K` applies to every dynamic dim (one
    /// naming a dim overrides it for that dim). One executable per bucket (the cross product over
    /// dims, at most 64) and target; `run` serves every real size in the range from the smallest
    /// bucket that holds it, with exact results. Default: powers of two for every dim, fewer per
    /// dim (said in a note) where their cross product would pass 64. Repeatable.
    #[arg(long = "buckets", value_name = "[SYM=]SIZES", value_parser = crate::buckets::parse_choice)]
    buckets: Vec<crate::buckets::Choice>,
    /// The largest size of a dynamic dim (`SYM=N` or `INPUT:DIM=N`): needed for a dim the export
    /// left unbounded (`Dim.AUTO`, or a `Dim` without max) unless `--buckets` lists its sizes;
    /// narrows a dim the export bounds. Larger inputs are refused at run time. Repeatable.
    #[arg(long = "max", value_name = "SYM=N", value_parser = crate::buckets::parse_max)]
    max: Vec<crate::buckets::Choice>,
}

impl SizeFlags {
    /// The buckets and bounds, as one list of choices.
    pub(crate) fn choices(&self) -> Vec<crate::buckets::Choice> {
        self.buckets.iter().chain(&self.max).cloned().collect()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

const SUBCOMMANDS: &[&str] =
    &["compile", "check", "inspect", "run", "generate", "serve", "cache", "plan", "recompile", "help"];

/// `torchtpu-compile model.pt2 -o x` means `torchtpu-compile compile model.pt2 -o x`.
fn with_default_subcommand(args: Vec<OsString>) -> Vec<OsString> {
    match args.get(1).and_then(|a| a.to_str()) {
        Some(first) if !first.starts_with('-') && !SUBCOMMANDS.contains(&first) => {
            let mut v = args;
            v.insert(1, "compile".into());
            v
        }
        _ => args,
    }
}

/// The error and its causes, `: `-separated, each said once: a cause whose text its parent's
/// message already includes is left out, and one that starts with its parent's message
/// replaces it (`cannot read `m.pt2`` over `cannot read `m.pt2`: No such file …`).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    let mut last = 0;
    for cause in e.chain() {
        let msg = cause.to_string();
        if text.contains(&msg) {
            continue;
        }
        if !msg.starts_with(&text[last..]) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            last = text.len();
        }
        text.truncate(last);
        text.push_str(&msg);
    }
    text
}

/// The command-line reference, `docs/cli.md`: the tool's and every command's `--help` as clap
/// renders it, so the reference cannot drift from the tool (a test compares the file with this).
pub fn reference() -> String {
    let mut cli = Cli::command();
    cli.build();
    let mut out = String::from(
        "# Command line\n\nEvery command's `--help`, generated from the tool itself (`cargo xtask bless` \
         rewrites this file; a test fails when it is stale). How the commands behave beyond their \
         options is in [usage.md](usage.md).\n",
    );
    append_help(&mut cli, 2, &mut out);
    out
}

/// The long flags (`--target`, …) of the subcommand `command`, in `--help`'s order; empty for
/// an unknown one.
pub fn flags(command: &str) -> Vec<String> {
    let cli = Cli::command();
    let Some(sub) = cli.find_subcommand(command) else { return Vec::new() };
    sub.get_arguments().filter_map(|a| a.get_long()).map(|l| format!("--{l}")).collect()
}

/// `cmd`'s long help under a heading of `level`, then each of its subcommands'.
fn append_help(cmd: &mut clap::Command, level: usize, out: &mut String) {
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name()).to_string();
    let help = cmd.render_long_help().to_string();
    out.push_str(&format!("\n{} `{name}`\n\n```text\n{}\n```\n", "#".repeat(level), help.trim_end()));
    for sub in cmd.get_subcommands_mut().filter(|s| s.get_name() != "help") {
        append_help(sub, level + 1, out);
    }
}

/// Runs the command line with `args` (including the program name); returns the exit code.
pub fn main_with(args: impl IntoIterator<Item = OsString>, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let cli = match Cli::try_parse_from(with_default_subcommand(args.into_iter().collect())) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" that exit 0 and print to stdout.
            let stream: &mut dyn Write = if e.use_stderr() { err } else { out };
            let _ = write!(stream, "{}", e.render());
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    report(run(cli, out, err), err)
}

/// Runs the command line with `args` as [`main_with`] does, but gives its failure back instead
/// of printing it: a usage error as a `clap::Error`, else the tool's error with its causes.
pub fn execute(
    args: impl IntoIterator<Item = OsString>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let cli = Cli::try_parse_from(with_default_subcommand(args.into_iter().collect()))?;
    run(cli, out, err)
}

/// The exit code of a command's result, its failure written to `err`.
fn report(result: anyhow::Result<u8>, err: &mut dyn Write) -> u8 {
    match result {
        Ok(code) => code,
        // `inspect … | head`: the reader has what it wanted; end quietly, as `cat` does.
        Err(e) if is_broken_pipe(&e) => 0,
        // A conflict between options that clap alone cannot see: a usage error, exit 2.
        Err(e) => match e.downcast::<clap::Error>() {
            Ok(usage) => {
                let _ = write!(err, "{}", usage.render());
                2
            }
            Err(e) => {
                let _ = writeln!(err, "error: {}", error_chain(&e));
                e.downcast_ref::<Error>().map_or(1, Error::exit_code)
            }
        },
    }
}

/// True when the error is a write to a closed pipe.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    match cli.command {
        Command::Inspect { model, format } => commands::inspect(&model, format, out).map(|()| 0),
        Command::Check { model, format, sizes } => commands::check(&model, format, &sizes.choices(), out),
        Command::Compile(args) => commands::compile(&args, out, err).map(|()| 0),
        Command::Run(args) => commands::run(&args, out),
        Command::Generate(args) => commands::generate(&args, out),
        Command::Serve(args) => serve::serve_artifact(&args, out),
        Command::Cache(args) => commands::cache(&args, out, err),
        Command::Plan(args) => plan::plan(&args, out, err).map(|()| 0),
        Command::Recompile(args) => recompile::recompile_artifact(&args, out, err).map(|()| 0),
    }
}
