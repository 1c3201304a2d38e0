//! Times StableHLO programs on the CPU plugin, each compiled with the same options in one
//! process and run on the same inputs: how `cargo xtask bench --peers` measures our programs
//! against the ones torchax and torch-mlir emit for the same archives.
//!
//! ```text
//! time_programs JOBS.json [--reps N]
//! ```
//!
//! `JOBS.json` is a list of `{"name", "mlir", "args": [ARG…], "reference"}` (or with
//! `"artifact": PATH` instead of `"mlir"`: the artifact's program, its weights before `args`)
//! where an `ARG` is
//! `{"npy": PATH}` (optionally `"as": "i32"` to narrow an int64 input), `{"npz": PATH, "key":
//! K}` or `{"safetensors": PATH, "tensor": NAME}`. Each program's first output is compared
//! with the `.npy` at `reference`. Every program is compiled first, then timed in interleaved
//! rounds; prints one JSON object per job: the median time per call (execute and wait, with
//! the arguments already on the device) and the comparison.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use torchtpu_compile::npy::Array;
use torchtpu_compile::pjrt::{Buffer, Client, CompileOptions, ElementType, Plugin};
use torchtpu_compile::run::compare;
use torchtpu_passes::ir::DType;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs_path = args.first().context("usage: time_programs JOBS.json [--reps N]")?;
    let reps: usize = match args.iter().position(|a| a == "--reps") {
        Some(i) => args.get(i + 1).context("--reps N")?.parse()?,
        None => 200,
    };
    let jobs: Vec<Value> = serde_json::from_slice(&std::fs::read(jobs_path)?)?;
    let plugin = Plugin::load(&torchtpu_compile::setup::cpu_plugin(None).path)?;
    let client = plugin.client()?;
    let mut ready = Vec::new();
    for job in &jobs {
        let name = job["name"].as_str().unwrap_or("?").to_string();
        match prepare(&client, job) {
            Ok(p) => ready.push((name, p, Vec::new())),
            Err(e) => println!("{}", json!({"name": name, "error": format!("{e:#}")})),
        }
    }
    // Interleaved rounds, so that a slower stretch of a shared machine falls on every program.
    const ROUNDS: usize = 10;
    for _ in 0..ROUNDS {
        for (_, p, times) in &mut ready {
            let refs: Vec<&Buffer> = p.buffers.iter().collect();
            for _ in 0..reps.div_ceil(ROUNDS) {
                let started = Instant::now();
                drop(p.exe.execute(&refs)?);
                times.push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    for (name, p, mut times) in ready {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!("{}", json!({"name": name, "median_us": median, "max_rel_diff": p.check.0, "ok": p.check.1}));
    }
    Ok(())
}

/// A compiled program with its arguments on the device and its first result checked.
struct Prepared {
    exe: torchtpu_compile::pjrt::LoadedExecutable,
    buffers: Vec<Buffer>,
    check: (f64, bool),
}

fn prepare(client: &Client, job: &Value) -> Result<Prepared> {
    let (text, mut arrays) = match job["artifact"].as_str() {
        Some(path) => artifact_program(Path::new(path))?,
        None => (std::fs::read(job["mlir"].as_str().context("mlir")?)?, Vec::new()),
    };
    let exe = client.compile(&text, &CompileOptions::single_device())?;
    for a in job["args"].as_array().context("args")? {
        arrays.push(argument(a)?);
    }
    let buffers = arrays.iter().map(|a| to_device(client, a)).collect::<Result<Vec<Buffer>>>()?;
    let refs: Vec<&Buffer> = buffers.iter().collect();
    let first = exe.execute(&refs)?;
    let out = &first[0];
    let dtype = match out.element_type()? {
        ElementType::F32 => DType::F32,
        ElementType::Bf16 => DType::BF16,
        t => bail!("first output of type {t}"),
    };
    let got = Array { dtype, shape: out.dims()?, data: out.to_host()? };
    let reference = Array::read(Path::new(job["reference"].as_str().context("reference")?))?;
    let c = compare(&got, &reference);
    drop(first);
    Ok(Prepared { exe, buffers, check: (c.max_rel_diff, c.ok) })
}

/// An artifact's (first) program and its weights in the order it takes them.
fn artifact_program(path: &Path) -> Result<(Vec<u8>, Vec<Array>)> {
    let art = torchtpu_compile::artifact::Artifact::open(path)?;
    let m = &art.manifest;
    let bucket = m.buckets.first().context("a bucket")?;
    let text = art.zip().get(&bucket.program).context("the program")?.to_vec();
    let st = safetensors::SafeTensors::deserialize(art.weights()?)?;
    let mut weights = Vec::new();
    for name in &m.weights.order {
        let t = st.tensor(name)?;
        let dtype = torchtpu_compile::artifact::dtype_of_safetensors(t.dtype()).context("dtype")?;
        let shape = t.shape().iter().map(|&d| d as i64).collect();
        weights.push(Array { dtype, shape, data: t.data().to_vec() });
    }
    Ok((text, weights))
}

/// One argument, read as its job says.
fn argument(spec: &Value) -> Result<Array> {
    if let Some(p) = spec["npy"].as_str() {
        let a = Array::read(Path::new(p))?;
        return match spec["as"].as_str() {
            Some("i32") => narrow_i64(&a),
            _ => Ok(a),
        };
    }
    if let Some(p) = spec["npz"].as_str() {
        let key = spec["key"].as_str().context("npz key")?;
        let mut zip = zip::ZipArchive::new(std::fs::File::open(p)?)?;
        let mut entry = zip.by_name(&format!("{key}.npy"))?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes)?;
        return Array::parse(&bytes).map_err(anyhow::Error::msg);
    }
    if let Some(p) = spec["safetensors"].as_str() {
        let name = spec["tensor"].as_str().context("tensor")?;
        let bytes = std::fs::read(p)?;
        let st = safetensors::SafeTensors::deserialize(&bytes)?;
        let t = st.tensor(name)?;
        let dtype = torchtpu_compile::artifact::dtype_of_safetensors(t.dtype()).context("dtype")?;
        let shape = t.shape().iter().map(|&d| d as i64).collect();
        return Ok(Array { dtype, shape, data: t.data().to_vec() });
    }
    bail!("an argument is npy, npz or safetensors: {spec}")
}

fn narrow_i64(a: &Array) -> Result<Array> {
    if a.dtype != DType::I64 {
        bail!("`as: i32` narrows int64 inputs, not {}", a.dtype);
    }
    let data =
        a.data.chunks_exact(8).flat_map(|c| (i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as i32).to_le_bytes());
    Ok(Array { dtype: DType::I32, shape: a.shape.clone(), data: data.collect() })
}

fn to_device(client: &Client, a: &Array) -> Result<Buffer> {
    let ty = match a.dtype {
        DType::F32 => ElementType::F32,
        DType::BF16 => ElementType::Bf16,
        DType::I64 => ElementType::S64,
        DType::I32 => ElementType::S32,
        DType::Bool => ElementType::Pred,
        d => bail!("argument of dtype {d}"),
    };
    Ok(client.buffer_from_host(&a.data, ty, &a.shape)?)
}
