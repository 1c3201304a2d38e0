//! `run`: execute an artifact's CPU executable on `.npy` inputs and write `.npy` outputs.
//!
//! The executable is checked against the manifest's sha256 before the plugin sees it, and the
//! plugin must be the very build that produced it (executables only load correctly into their
//! own build). Inputs are checked by count, dtype and shape against the bucket's signature.
//! With `--reference DIR`, outputs are compared with `DIR`'s files of the same names; with
//! `--state-in DIR` the weights the program updates start from an earlier run's (`state`).
//! The weights go to the device tensor by tensor, verified on the way (`weights`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use thiserror::Error;
use torchtpu_passes::ir::{DType, SymExpr};

use std::collections::BTreeMap;

mod batch;
mod device;
mod generate;
mod placement;
mod seq2seq;
mod session;
mod state;
mod step;
mod weights;

pub use batch::{serve_all, Batcher, Figures, Finished, NewToken, Request, Served, Stepped};
pub use device::DeviceKind;
pub use generate::{batch_of, decode, generate, generate_requests, Decoding, GenerateRequest};
pub use seq2seq::{generate_seq2seq, Seq2Seq};
pub(crate) use session::Called;
pub use session::Session;
pub use step::{Generated, Logprobs, Sampling};
pub use weights::Verification;

use crate::artifact::{Bucket, Manifest, TargetEntry};
use crate::cache::{Cache, CacheConfig};
use crate::npy::{Array, NpyError};
use crate::pjrt::{Buffer, Client, ElementType, PjrtError, Plugin};
use crate::setup::PluginChoice;
use crate::Error;

#[derive(Debug, Error)]
pub enum RunError {
    #[error("this artifact has no CPU executable (targets: {targets}); TPU executables run only on a TPU host with the same libtpu build")]
    NoCpuExecutable { targets: String },
    #[error(
        "the CPU executable was built by plugin `{built_by}` (sha256 {expected}), but `{plugin}` (sha256 {found}) is loaded; \
         executables only load into the plugin build that made them: `torchtpu-compile recompile ARTIFACT -o ARTIFACT` rebuilds them for this one, or pass --plugin with that build"
    )]
    PluginMismatch { built_by: String, expected: String, plugin: String, found: String },
    #[error("{reason}")]
    NoDevice { reason: String },
    #[error("input {index} (`{name}`): dim {dim} is {value}, outside the sizes this artifact serves ({min} to {max})")]
    OutOfRange { index: usize, name: String, dim: usize, value: i64, min: i64, max: i64 },
    #[error("input {index} (`{name}`): dim {dim} is {value}, but the export declares it `{expr}`: {form}")]
    NotDerived { index: usize, name: String, dim: usize, value: i64, expr: String, form: String },
    #[error(
        "the inputs break a condition of the export: `{guard}`{why} ({shapes}); the program was traced where it \
         holds, and `torch.export.load(…).module()` refuses these inputs too"
    )]
    Guard { guard: String, why: String, shapes: String },
    #[error(
        "for these inputs the program computes `{symbol}` = {value}, outside [0, {max}], the range the export \
         recorded for it (a `torch._check` of the model fails, as eager would say)"
    )]
    ComputedSize { symbol: String, value: i64, max: i64 },
    #[error("expected {expected} input(s) ({names}), got {found}")]
    InputCount { expected: usize, names: String, found: usize },
    #[error("input {index} (`{name}`, {file}): expected {expected}, got {found}")]
    InputMismatch { index: usize, name: String, file: String, expected: String, found: String },
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error("running the executable failed: {0}")]
    Execute(PjrtError),
    #[error("the artifact's weights are unreadable: {0}")]
    Weights(String),
    #[error("weights `{path}`: {reason}")]
    WeightsFile { path: String, reason: String },
    #[error("cannot write `{path}`: {reason}")]
    Write { path: String, reason: String },
    #[error("state `{path}`: {reason}")]
    State { path: String, reason: String },
    #[error("checkpoint `{path}`: {reason}")]
    Checkpoint { path: String, reason: String },
    #[error("{0}")]
    Decode(String),
}

impl RunError {
    /// Problems of the machine rather than of the inputs or the artifact (exit code 3).
    pub fn is_environment(&self) -> bool {
        matches!(self, RunError::NoCpuExecutable { .. } | RunError::PluginMismatch { .. } | RunError::NoDevice { .. })
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// The artifact to run.
    pub artifact: PathBuf,
    /// The user inputs, as `.npy` files in the signature's order.
    pub inputs: Vec<PathBuf>,
    /// Where `out_<i>.npy` (and, without `state_out`, the state files) are written.
    pub out_dir: PathBuf,
    /// The device whose executables run (`--device`).
    pub device: DeviceKind,
    /// The plugin (`--plugin`); `None`: the environment's or the set-up folder's.
    pub plugin: Option<PathBuf>,
    /// A folder with `out_<i>.npy` to compare against.
    pub reference: Option<PathBuf>,
    /// The seed of a program with random ops (ignored by others).
    pub seed: u64,
    /// Hash the weights even when the cache remembers them verified (`--verify-weights`).
    pub verify_weights: bool,
    /// The cache folder, where weights verified once are remembered by their file's identity;
    /// `None`: every run hashes them.
    pub cache_dir: Option<PathBuf>,
    /// How close outputs must be to the reference.
    pub tolerance: Tolerance,
    /// Where the updated buffers and parameters start from (`state_<fqn>.npy`, as an earlier
    /// run wrote them); `None`: the values frozen in the artifact.
    pub state_in: Option<PathBuf>,
    /// Another checkpoint of the program whose weights run instead of the artifact's (see
    /// [`Session::swap_weights`]).
    pub checkpoint: Option<PathBuf>,
    /// Where their new values are written; `None`: `out_dir`.
    pub state_out: Option<PathBuf>,
    /// Calls on the same inputs, each from the state the last one left (at least 1); the
    /// report's time is their median and the outputs the last call's.
    pub repeat: usize,
}

/// What `run` did.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// The bucket that ran.
    pub bucket: String,
    /// Opening the artifact and putting the weights on the device.
    pub load_ms: f64,
    /// The call (the median of `--repeat`'s calls).
    pub run_ms: f64,
    /// Each output written, with its comparison when there is a reference.
    pub outputs: Vec<OutputReport>,
    /// False when a comparison with `--reference` failed.
    pub ok: bool,
}

#[derive(Debug, Serialize)]
pub struct OutputReport {
    pub path: String,
    pub dtype: String,
    pub dims: Vec<i64>,
    pub comparison: Option<Comparison>,
}

/// Agreement with a reference output.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub max_abs_diff: f64,
    /// Max abs diff divided by max(1, max |reference|).
    pub max_rel_diff: f64,
    /// The tolerance applied: element by element, |out - reference| <= atol + rtol * |reference|.
    pub atol: f64,
    pub rtol: f64,
    /// Elements outside the tolerance (or, for integers and bools, unequal), of `elements`.
    pub outside: u64,
    pub elements: u64,
    pub ok: bool,
    pub note: Option<String>,
}

/// `--atol` / `--rtol`: the tolerance a user sets; where neither is set, each dtype's default
/// ([`tolerance`]) applies.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tolerance {
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
}

/// Float outputs match when their max abs diff is at most this times the reference's scale.
pub(crate) const FLOAT_TOLERANCE: f64 = 1e-4;

/// The default tolerance of outputs of `dtype`, as a fraction of the reference's scale
/// (max(1, max |reference|)): [`FLOAT_TOLERANCE`] for f32 and f64; for the 16-bit floats what
/// rounding through a deep network allows. bf16 keeps 8 significant bits (each rounding is off
/// by up to 2^-9, 0.2%) and f16 11 (0.02%); a program that rounds in other places than eager
/// (fused or reordered reductions, another matmul blocking) drifts by a few percent over many
/// layers: eager and its own exported graph differ by 2.6% of the logits' scale on a 16-layer
/// bf16 Llama-3.2-1B. So 5e-2 for bf16 and 5e-3 for f16, about 13 units of their rounding.
pub(crate) fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 5e-2,
        DType::F16 => 5e-3,
        _ => FLOAT_TOLERANCE,
    }
}

/// Runs the artifact's CPU executable once, in a [`Session`].
pub fn run(req: &RunRequest) -> Result<RunReport, Error> {
    let started = Instant::now();
    let cache =
        req.cache_dir.as_ref().map(|dir| Cache::open(&CacheConfig { dir: Some(dir.clone()), ..CacheConfig::off() }));
    let verification = weights::Verification { always_hash: req.verify_weights, cache: cache.as_ref() };
    // The inputs are checked before the weights are read: a wrong one fails fast.
    let art = crate::artifact::Artifact::open_but_weights(&req.artifact)?;
    let inputs = read_inputs(&req.inputs, &art.manifest)?;
    session::bucket_for_inputs(&art.manifest, &inputs.iter().collect::<Vec<_>>(), &req.inputs)?;
    let mut session = match &req.checkpoint {
        Some(checkpoint) => Session::with_checkpoint(art, req.device, req.plugin.as_deref(), checkpoint)?,
        None => Session::with(art, req.device, req.plugin.as_deref(), &verification)?,
    };
    if let Some(dir) = &req.state_in {
        session.load_state(dir)?;
    }
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut called = session.call(&inputs, &req.inputs, req.seed)?;
    let mut times = vec![called.run_ms];
    for _ in 1..req.repeat {
        called = session.call(&inputs, &req.inputs, req.seed)?;
        times.push(called.run_ms);
    }
    times.sort_by(f64::total_cmp);
    called.run_ms = times[times.len() / 2];
    write_outputs(req, &session, called, load_ms)
}

/// The value of every symbol, read from the inputs' dims (solved for, where the dim is derived:
/// `8*s`), within the symbols' ranges.
fn real_sizes(m: &Manifest, shapes: &[&[i64]], paths: &[PathBuf]) -> Result<BTreeMap<String, i64>, Error> {
    let mut out = BTreeMap::new();
    for s in &m.signature.symbols {
        let (Some(shape), Some(sig)) = (shapes.get(s.input), m.signature.inputs.get(s.input)) else { continue };
        let value = shape.get(s.dim).copied().ok_or_else(|| RunError::InputMismatch {
            index: s.input,
            name: sig.name.clone(),
            file: paths.get(s.input).map_or_else(String::new, |p| p.display().to_string()),
            expected: format!("{} dims", sig.dims.len()),
            found: format!("shape {shape:?}"),
        })?;
        let bare = SymExpr::sym(&s.name);
        let expr = sig.sym_dims.get(s.dim).unwrap_or(&bare);
        // A size 0 is not served: the buckets start at 1.
        let (min, max) = (s.min.unwrap_or(1).max(1), s.max.unwrap_or(i64::MAX));
        let at = |v: i64| expr.eval(&BTreeMap::from([(s.name.clone(), v)])).unwrap_or(v);
        let out_of_range = || RunError::OutOfRange {
            index: s.input,
            name: sig.name.clone(),
            dim: s.dim,
            value,
            min: at(min),
            max: if max == i64::MAX { max } else { at(max) },
        };
        let symbol = expr.solve_linear(value).ok_or_else(|| match expr.linear() {
            Some((_, a, b)) if value >= at(min) && value <= at(max) => RunError::NotDerived {
                index: s.input,
                name: sig.name.clone(),
                dim: s.dim,
                value,
                expr: expr.to_string(),
                form: match b {
                    0 => format!("a multiple of {a}"),
                    b => format!("a multiple of {a}, plus {b}"),
                },
            },
            _ => out_of_range(),
        })?;
        if symbol < min || symbol > max {
            return Err(out_of_range().into());
        }
        out.insert(s.name.clone(), symbol);
    }
    Ok(out)
}

/// Refuses inputs of these shapes (in the signature's order) that break one of the export's
/// guards, naming it; `real` are the symbols' values they give.
fn check_guards(m: &Manifest, shapes: &[&[i64]], real: Option<&BTreeMap<String, i64>>) -> Result<(), Error> {
    if m.signature.guards.is_empty() {
        return Ok(());
    }
    let none = BTreeMap::new();
    let named = m.signature.inputs.iter().zip(shapes).map(|(sig, &shape)| (sig.name.as_str(), shape));
    let env = crate::guards::Env { shapes: named.collect(), symbols: real.unwrap_or(&none) };
    for guard in &m.signature.guards {
        let why = match guard.holds(&env) {
            Ok(true) => continue,
            Ok(false) => String::new(),
            Err(reason) => format!(" cannot be decided ({reason})"),
        };
        let shapes: Vec<String> = env.shapes.iter().map(|(name, shape)| format!("`{name}`: {shape:?}")).collect();
        return Err(RunError::Guard { guard: guard.text().to_string(), why, shapes: shapes.join(", ") }.into());
    }
    Ok(())
}

/// Why a call with inputs of these shapes would be refused for breaking a guard of the export,
/// if it would: what a batcher asks before it picks the sizes of its calls. Shapes that are
/// refused for another reason (a size outside every bucket) are not its business.
pub(super) fn broken_guard(m: &Manifest, shapes: &[&[i64]]) -> Option<String> {
    if m.signature.guards.is_empty() {
        return None;
    }
    let real = real_sizes(m, shapes, &[]).ok()?;
    check_guards(m, shapes, Some(&real)).err().map(|e| e.to_string())
}

/// The input and output dims at the real sizes, from the signature's symbolic dims.
fn real_dims(v: &crate::artifact::SignatureValue, real: &BTreeMap<String, i64>) -> Option<Vec<i64>> {
    v.sym_dims.iter().map(|e| e.eval(real)).collect()
}

/// The bucket that runs the real sizes `real`: the smallest (by the product of its sizes of the
/// symbols in `real`, the inputs' dims) that holds every one; `None` when none does.
pub(crate) fn bucket_for<'m>(m: &'m Manifest, real: &BTreeMap<String, i64>) -> Option<&'m Bucket> {
    let holds = |b: &&Bucket| real.iter().all(|(s, v)| b.bindings.get(s).is_some_and(|bv| bv >= v));
    let volume =
        |b: &&Bucket| real.keys().filter_map(|s| b.bindings.get(s)).fold(1i64, |acc, &v| acc.saturating_mul(v));
    m.buckets.iter().filter(holds).min_by_key(volume)
}

/// The smallest bucket holding every real size, after checking every input's shape at those
/// sizes.
fn smallest_bucket<'m>(
    m: &'m Manifest,
    real: &BTreeMap<String, i64>,
    inputs: &[&Array],
    paths: &[PathBuf],
) -> Result<&'m Bucket, Error> {
    for (index, (a, sig)) in inputs.iter().zip(&m.signature.inputs).enumerate() {
        let want = real_dims(sig, real).unwrap_or_default();
        if a.shape != want {
            return Err(RunError::InputMismatch {
                index,
                name: sig.name.clone(),
                file: paths[index].display().to_string(),
                expected: format!("shape {want:?} (its dynamic dims set by the other inputs)"),
                found: format!("shape {:?}", a.shape),
            }
            .into());
        }
    }
    bucket_for(m, real).ok_or_else(|| {
        let s = &m.signature.symbols[0];
        let largest = m.buckets.iter().filter_map(|b| b.bindings.get(&s.name)).max().copied().unwrap_or_default();
        RunError::OutOfRange {
            index: s.input,
            name: m.signature.inputs[s.input].name.clone(),
            dim: s.dim,
            value: real.get(&s.name).copied().unwrap_or_default(),
            min: s.min.unwrap_or(1).max(1),
            max: largest,
        }
        .into()
    })
}

/// Every output of the graph in its order: the call's, and the updated weights' new values,
/// which the session kept on the devices.
fn all_outputs(session: &Session, called: Called) -> Result<Vec<Array>, Error> {
    let m = session.manifest();
    let mut all: Vec<Option<Array>> = m.signature.outputs.iter().map(|_| None).collect();
    for (&j, a) in session.returned_outputs().iter().zip(called.outputs) {
        all[j] = Some(a);
    }
    let mut state: BTreeMap<String, Array> = session.state()?.into_iter().collect();
    for (fqn, j, _) in state::updated(m) {
        if all[j].is_none() {
            all[j] = state.remove(&fqn);
        }
    }
    all.into_iter()
        .enumerate()
        .map(|(j, a)| a.ok_or_else(|| RunError::Weights(format!("output {j} was not returned")).into()))
        .collect()
}

fn write_outputs(req: &RunRequest, session: &Session, called: Called, load_ms: f64) -> Result<RunReport, Error> {
    let m = session.manifest();
    let (bucket, run_ms) = (called.bucket.clone(), called.run_ms);
    let arrays = all_outputs(session, called)?;
    let state_dir = req.state_out.as_ref().unwrap_or(&req.out_dir);
    for dir in [&req.out_dir, state_dir] {
        std::fs::create_dir_all(dir)
            .map_err(|e| RunError::Write { path: dir.display().to_string(), reason: e.to_string() })?;
    }
    let mut outputs = Vec::new();
    let mut ok = true;
    let files = crate::artifact::output_files(&m.signature.outputs);
    for ((arr, sig), file) in arrays.into_iter().zip(&m.signature.outputs).zip(&files) {
        let path = if file.starts_with("state_") { state_dir.join(file) } else { req.out_dir.join(file) };
        arr.write(&path)?;
        // Every output is compared with the reference's file of the same name; updated state
        // only where the reference folder has it.
        let comparison = match &req.reference {
            Some(dir) if file.starts_with("out_") || dir.join(file).exists() => {
                Some(compare_with(&arr, &Array::read(&dir.join(file))?, req.tolerance))
            }
            _ => None,
        };
        ok &= comparison.as_ref().is_none_or(|c| c.ok);
        outputs.push(OutputReport {
            path: path.display().to_string(),
            dtype: sig.dtype.clone(),
            dims: arr.shape.clone(),
            comparison,
        });
    }
    Ok(RunReport { bucket, load_ms, run_ms, outputs, ok })
}

/// A client of `devices` CPU devices on the plugin that built `target`'s executables, refusing
/// any other build.
fn client_for(target: &TargetEntry, choice: PluginChoice, devices: usize) -> Result<Client, Error> {
    let plugin = Plugin::load(&choice.path).map_err(|e| Error::plugin(e, choice.source))?;
    if plugin.sha256() != target.plugin.sha256 {
        return Err(RunError::PluginMismatch {
            built_by: target.plugin.file.clone(),
            expected: target.plugin.sha256.clone(),
            plugin: plugin.path().display().to_string(),
            found: plugin.sha256().to_string(),
        }
        .into());
    }
    let devices = u32::try_from(devices).map_err(|_| RunError::Weights(format!("a mesh of {devices} devices")))?;
    plugin.client_with_devices(devices).map_err(|e| Error::plugin(e, choice.source))
}

/// The dtype a `.npy`-style name (`f32`, `bf16`, `i64`, …) names.
pub fn parse_dtype(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| d.name() == name)
}

fn element_type(d: DType) -> Option<ElementType> {
    Some(match d {
        DType::Bool => ElementType::Pred,
        DType::I8 => ElementType::S8,
        DType::I16 => ElementType::S16,
        DType::I32 => ElementType::S32,
        DType::I64 => ElementType::S64,
        DType::U8 => ElementType::U8,
        DType::U16 => ElementType::U16,
        DType::U32 => ElementType::U32,
        DType::U64 => ElementType::U64,
        DType::F16 => ElementType::F16,
        DType::BF16 => ElementType::Bf16,
        DType::F32 => ElementType::F32,
        DType::F64 => ElementType::F64,
        DType::C64 => ElementType::C64,
        DType::C128 => ElementType::C128,
        DType::F8E4M3FN => ElementType::F8E4M3FN,
        DType::F8E5M2 => ElementType::F8E5M2,
        DType::F8E4M3FNUZ => ElementType::F8E4M3FNUZ,
        DType::F8E5M2FNUZ => ElementType::F8E5M2FNUZ,
        DType::F8E8M0FNU => ElementType::F8E8M0FNU,
        DType::C32 => return None,
    })
}

/// The Threefry key of `seed`: `[seed, 0]`.
fn seed_key(seed: u64) -> Array {
    let data = [seed.to_le_bytes(), 0u64.to_le_bytes()].concat();
    Array { dtype: DType::U64, shape: vec![2], data }
}

fn to_device(client: &Client, device: usize, dtype: DType, bytes: &[u8], dims: &[i64]) -> Result<Buffer, Error> {
    let ty =
        element_type(dtype).ok_or_else(|| Error::Unsupported(format!("dtype {dtype} cannot be passed to PJRT")))?;
    Ok(client.buffer_from_host_on(device, bytes, ty, dims).map_err(RunError::Execute)?)
}

/// `cpu` or `cpu:N`.
fn is_cpu(target: &str) -> bool {
    target == "cpu" || target.starts_with("cpu:")
}

fn read_inputs(paths: &[PathBuf], m: &crate::artifact::Manifest) -> Result<Vec<Array>, Error> {
    check_count(m, paths.len())?;
    let arrays = paths.iter().map(|p| Array::read(p)).collect::<Result<Vec<_>, _>>()?;
    conform_inputs(m, arrays, paths)
}

/// The user inputs `arrays` (named by `labels` in messages) as the program takes them, after
/// checking their count and dtypes: float32 stands for bfloat16 and is narrowed.
pub fn conform_inputs(m: &Manifest, arrays: Vec<Array>, labels: &[PathBuf]) -> Result<Vec<Array>, Error> {
    check_count(m, arrays.len())?;
    let mut out = Vec::with_capacity(arrays.len());
    for (index, a) in arrays.into_iter().enumerate() {
        let a = match (a.dtype, input_dtype(m, index)?) {
            (DType::F32, DType::BF16) => a.f32_to_bf16().unwrap_or(a),
            _ => a,
        };
        check_dtype(m, index, &a, &labels[index])?;
        out.push(a);
    }
    Ok(out)
}

/// Refuses a call with another number of inputs than the program's.
fn check_count(m: &Manifest, found: usize) -> Result<(), Error> {
    let sig = &m.signature.inputs;
    if found != sig.len() {
        let names: Vec<&str> = sig.iter().map(|v| v.name.as_str()).collect();
        return Err(RunError::InputCount { expected: sig.len(), names: names.join(", "), found }.into());
    }
    Ok(())
}

fn input_dtype(m: &Manifest, index: usize) -> Result<DType, Error> {
    let s = &m.signature.inputs[index];
    Ok(parse_dtype(&s.dtype).ok_or_else(|| RunError::Weights(format!("unknown input dtype {}", s.dtype)))?)
}

/// Refuses input `index` (`a`, named `label`) unless it has the program's dtype.
fn check_dtype(m: &Manifest, index: usize, a: &Array, label: &Path) -> Result<(), Error> {
    let want = input_dtype(m, index)?;
    if a.dtype != want {
        return Err(RunError::InputMismatch {
            index,
            name: m.signature.inputs[index].name.clone(),
            file: label.display().to_string(),
            expected: format!("dtype {want}"),
            found: format!("dtype {}", a.dtype),
        }
        .into());
    }
    Ok(())
}

/// The bucket whose input shapes match the inputs exactly (one bucket per artifact today).
fn pick_bucket<'m>(
    buckets: &'m [Bucket],
    inputs: &[&Array],
    paths: &[PathBuf],
    m: &crate::artifact::Manifest,
) -> Result<&'m Bucket, Error> {
    if let Some(b) = buckets.iter().find(|b| b.input_dims.iter().zip(inputs).all(|(d, a)| *d == a.shape)) {
        return Ok(b);
    }
    let b = buckets.first().ok_or_else(|| RunError::Weights("the artifact has no bucket".into()))?;
    let (index, (a, want)) = inputs
        .iter()
        .zip(&b.input_dims)
        .enumerate()
        .find(|(_, (a, d))| a.shape != **d)
        .ok_or_else(|| RunError::Weights("no bucket matches the inputs".into()))?;
    Err(RunError::InputMismatch {
        index,
        name: m.signature.inputs[index].name.clone(),
        file: paths[index].display().to_string(),
        expected: format!("shape {want:?} (the sizes this artifact was compiled for)"),
        found: format!("shape {:?}", a.shape),
    }
    .into())
}

/// `compare_with` at each dtype's default tolerance.
pub fn compare(out: &Array, reference: &Array) -> Comparison {
    compare_with(out, reference, Tolerance::default())
}

/// Complex values compare as their real and imaginary parts. Integers and bools must match
/// exactly; floats element by element within `atol + rtol * |reference|`, with NaN and
/// infinities in the same places. By default `rtol` is 0 and `atol` the dtype's [`tolerance`]
/// times the reference's scale; a user's `--atol`/`--rtol` replace both (the one not given is 0).
pub(crate) fn compare_with(out: &Array, reference: &Array, tol: Tolerance) -> Comparison {
    if let (Some(out), Some(reference)) = (out.complex_parts(), reference.complex_parts()) {
        return compare_with(&out, &reference, tol);
    }
    let elements = out.numel().max(0) as u64;
    if out.shape != reference.shape {
        let note = format!("shape {:?} vs reference {:?}", out.shape, reference.shape);
        let inf = f64::INFINITY;
        return Comparison {
            max_abs_diff: inf,
            max_rel_diff: inf,
            atol: 0.0,
            rtol: 0.0,
            outside: elements,
            elements,
            ok: false,
            note: Some(note),
        };
    }
    let exact = !out.dtype.is_float() && !reference.dtype.is_float();
    let pairs = || (0..elements as usize).filter_map(|i| Some((out.get_f64(i)?, reference.get_f64(i)?)));
    let scale = pairs().map(|(_, r)| r).filter(|r| r.is_finite()).fold(0f64, |m, r| m.max(r.abs()));
    let (atol, rtol) = match (exact, tol.atol, tol.rtol) {
        (true, ..) => (0.0, 0.0),
        (false, None, None) => (tolerance(out.dtype) * scale.max(1.0), 0.0),
        (false, atol, rtol) => (atol.unwrap_or(0.0), rtol.unwrap_or(0.0)),
    };
    let (mut max_abs, mut outside, mut nonfinite_mismatch) = (0f64, 0u64, 0usize);
    for (a, r) in pairs() {
        if r.is_finite() {
            let diff = if a.is_nan() { f64::INFINITY } else { (a - r).abs() };
            max_abs = max_abs.max(diff);
            outside += u64::from(diff > atol + rtol * r.abs());
        } else if !(a == r || (a.is_nan() && r.is_nan())) {
            nonfinite_mismatch += 1;
            outside += 1;
        }
    }
    let note = (nonfinite_mismatch > 0).then(|| format!("{nonfinite_mismatch} NaN/inf positions differ"));
    let max_rel = max_abs / scale.max(1.0);
    Comparison { max_abs_diff: max_abs, max_rel_diff: max_rel, atol, rtol, outside, elements, ok: outside == 0, note }
}
