//! Times StableHLO programs on the CPU plugin, each compiled with the same options in one
//! process and run on the same inputs: how `cargo xtask bench --peers` measures our programs
//! against the ones torchax and torch-mlir emit for the same archives.
//!
//! ```text
//! time_programs JOBS.json [--reps N]
//! ```
//!
//! `JOBS.json` is a list of `{"name", "mlir", "args": [ARG…], "reference"}` (or with
//! `"artifact": PATH` instead of `"mlir"`: the artifact's program, its weights before `args`;
//! with `"constants": true` as well, the weights inlined as constants instead; with
//! `"constants": "nontrivial"`, inlined with every f32 weight that is all zeros or all ones
//! shifted by 0.01, so that XLA cannot fold an untrained model's zero biases and unit norm
//! weights away, which also makes its numbers differ from the reference)
//! where an `ARG` is
//! `{"npy": PATH}` (optionally `"as": "i32"` to narrow an int64 input), `{"npz": PATH, "key":
//! K}` or `{"safetensors": PATH, "tensor": NAME}`. Each program's first output is compared
//! with the `.npy` at `reference`. Every program is compiled first, then the programs of each
//! model (the job names' part before `/`) are timed together in interleaved rounds; prints one
//! JSON object per job: the median time per call (execute and wait, with the arguments already
//! on the device) and the comparison.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use torchtpu_compile::internal::{compare, Buffer, Client, CompileOptions, ElementType, Plugin};
use torchtpu_compile::Array;
use torchtpu_passes::ir::DType;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs_path = args.first().context("usage: time_programs JOBS.json [--reps N | --figures TOPOLOGY]")?;
    let reps: usize = match args.iter().position(|a| a == "--reps") {
        Some(i) => args.get(i + 1).context("--reps N")?.parse()?,
        None => 200,
    };
    let jobs: Vec<Value> = serde_json::from_slice(&std::fs::read(jobs_path)?)?;
    if let Some(i) = args.iter().position(|a| a == "--figures") {
        return figures(&jobs, args.get(i + 1).context("--figures TOPOLOGY")?);
    }
    // The XLA:CPU settings the compiler's command line uses, for every program alike.
    torchtpu_compile::internal::prepare_xla_environment();
    let plugin = Plugin::load(&torchtpu_compile::internal::cpu_plugin(None).path)?;
    let client = plugin.client()?;
    let mut ready = Vec::new();
    for job in &jobs {
        let name = job["name"].as_str().unwrap_or("?").to_string();
        match prepare(&client, job) {
            Ok(p) => ready.push((name, p, Vec::new())),
            Err(e) => println!("{}", json!({"name": name, "error": format!("{e:#}")})),
        }
    }
    // The programs of one model (the name before `/`) are timed together in short rounds, a
    // few calls of each in turn, so that a slower stretch of a shared machine falls on each of
    // them alike.
    const CALLS_PER_ROUND: usize = 5;
    let model = |name: &str| name.split('/').next().unwrap_or_default().to_string();
    let mut start = 0;
    while start < ready.len() {
        let end = start + ready[start..].iter().take_while(|r| model(&r.0) == model(&ready[start].0)).count();
        for _ in 0..reps.div_ceil(CALLS_PER_ROUND) {
            for (_, p, times) in &mut ready[start..end] {
                let refs: Vec<&Buffer> = p.buffers.iter().collect();
                for _ in 0..CALLS_PER_ROUND {
                    let started = Instant::now();
                    drop(p.exe.execute(&refs)?);
                    times.push(started.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        start = end;
    }
    for (name, p, mut times) in ready {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!("{}", json!({"name": name, "median_us": median, "max_rel_diff": p.check.0, "ok": p.check.1}));
    }
    Ok(())
}

/// `--figures`: each job's program compiled by libtpu for `topology` (deviceless, one chip, the
/// same options for every program); prints what libtpu's cost model and memory plan say of it.
fn figures(jobs: &[Value], topology: &str) -> Result<()> {
    torchtpu_compile::internal::prepare_libtpu_environment();
    let plugin = Plugin::load(&torchtpu_compile::internal::tpu_plugin().path)?;
    let slice = plugin.topology(topology)?;
    let options = CompileOptions::partitions(1)?;
    for job in jobs {
        let name = job["name"].as_str().unwrap_or("?");
        let started = Instant::now();
        let text = match job["artifact"].as_str() {
            Some(path) => {
                torchtpu_compile::Artifact::open(Path::new(path)).map_err(Into::into).and_then(|a| artifact_text(&a))
            }
            None => program(job).map(|(text, _)| text),
        };
        let compiled = text.and_then(|text| Ok(slice.compile(&text, &options)?));
        let line = match compiled {
            Ok(exe) => {
                let compile_s = started.elapsed().as_secs_f64();
                let cost = exe.cost_analysis()?;
                let figure = |key: &str| cost.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.as_f64());
                let memory = exe.memory_stats()?;

                json!({
                    "name": name,
                    "flops": figure("flops"),
                    "bytes_accessed": figure("bytes accessed"),
                    "optimal_seconds": figure("optimal_seconds"),
                    "peak_bytes": memory.peak_memory_in_bytes,
                    "temp_bytes": memory.temp_size_in_bytes,
                    "argument_bytes": memory.argument_size_in_bytes,
                    "compile_s": compile_s,
                })
            }
            Err(e) => json!({"name": name, "error": format!("{e:#}")}),
        };
        println!("{line}");
    }
    Ok(())
}

/// A compiled program with its arguments on the device and its first result checked.
struct Prepared {
    exe: torchtpu_compile::internal::LoadedExecutable,
    buffers: Vec<Buffer>,
    check: (f64, bool),
}

fn prepare(client: &Client, job: &Value) -> Result<Prepared> {
    let (text, mut arrays) = program(job)?;
    let exe = client.compile(&text, &CompileOptions::cpu())?;
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

/// A job's program text, with the weights it takes first (an artifact's) or none.
fn program(job: &Value) -> Result<(Vec<u8>, Vec<Array>)> {
    Ok(match job["artifact"].as_str() {
        Some(path) if job["constants"] == true || job["constants"] == "nontrivial" => {
            let (text, mut weights) = artifact_program(Path::new(path))?;
            if job["constants"] == "nontrivial" {
                weights.iter_mut().for_each(shift_if_trivial);
            }
            (with_weights_as_constants(std::str::from_utf8(&text)?, &weights)?.into_bytes(), Vec::new())
        }
        Some(path) => artifact_program(Path::new(path))?,
        None => (std::fs::read(job["mlir"].as_str().context("mlir")?)?, Vec::new()),
    })
}

/// An artifact's (first) program.
fn artifact_text(art: &torchtpu_compile::Artifact) -> Result<Vec<u8>> {
    let bucket = art.manifest.buckets.first().context("a bucket")?;
    Ok(art.zip().get(&bucket.program).context("the program")?.to_vec())
}

/// An artifact's (first) program and its weights in the order it takes them.
fn artifact_program(path: &Path) -> Result<(Vec<u8>, Vec<Array>)> {
    let art = torchtpu_compile::Artifact::open(path)?;
    let m = &art.manifest;
    let text = artifact_text(&art)?;
    let st = safetensors::SafeTensors::deserialize(art.weights()?)?;
    let mut weights = Vec::new();
    for name in &m.weights.order {
        let t = st.tensor(name)?;
        let dtype = torchtpu_compile::internal::dtype_of_safetensors(t.dtype()).context("dtype")?;
        let shape = t.shape().iter().map(|&d| d as i64).collect();
        weights.push(Array { dtype, shape, data: t.data().to_vec() });
    }
    Ok((text, weights))
}

/// The same program with its weights as `stablehlo.constant`s, as torch-mlir emits them: our
/// `@main` becomes a private `@inner`, and a new `@main` taking only the user inputs calls it
/// with the constants. Measures what XLA gains from knowing the weights' values (zero biases
/// folded away, weight layouts and packing done at compile time) apart from the program.
fn with_weights_as_constants(text: &str, weights: &[Array]) -> Result<String> {
    let at = text.find("sym_name = \"main\"").context("no `@main` in the program")?;
    let head = &text[..at];
    let start = head.rfind("function_type = (").context("no function type")? + "function_type = (".len();
    let (args, results) = head[start..].split_once(") -> ").context("no result types")?;
    let results = results.trim_end().trim_end_matches(',');
    let arg_types = split_types(args);
    let result_types = split_types(results.trim_start_matches('(').trim_end_matches(')'));
    let user_types = arg_types.get(weights.len()..).context("fewer arguments than weights")?;
    let mut main = String::new();
    let params: Vec<String> = user_types.iter().enumerate().map(|(i, t)| format!("%u{i}: {t}")).collect();
    main += &format!("func.func @main({}) -> ({}) {{\n", params.join(", "), result_types.join(", "));
    let mut operands = Vec::new();
    for (i, (w, ty)) in weights.iter().zip(&arg_types).enumerate() {
        let hex: String = w.data.iter().map(|b| format!("{b:02X}")).collect();
        main += &format!("  %w{i} = stablehlo.constant dense<\"0x{hex}\"> : {ty}\n");
        operands.push(format!("%w{i}"));
    }
    operands.extend((0..user_types.len()).map(|i| format!("%u{i}")));
    let n = result_types.len();
    main += &format!(
        "  %r:{n} = func.call @inner({}) : ({}) -> ({})\n",
        operands.join(", "),
        arg_types.join(", "),
        result_types.join(", ")
    );
    let returned: Vec<String> = (0..n).map(|i| format!("%r#{i}")).collect();
    main += &format!("  return {} : {}\n}}\n", returned.join(", "), result_types.join(", "));
    let renamed = text.replacen("sym_name = \"main\"", "sym_name = \"inner\", sym_visibility = \"private\"", 1);
    let end = renamed.rfind("})").context("no end of module")?;
    Ok(format!("{}{main}{}", &renamed[..end], &renamed[end..]))
}

/// An f32 weight of all zeros or all ones (an untrained bias or norm weight) plus 0.01.
fn shift_if_trivial(w: &mut Array) {
    if w.dtype != DType::F32 {
        return;
    }
    let values: Vec<f32> = w.data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if values.iter().all(|&v| v == 0.0) || values.iter().all(|&v| v == 1.0) {
        w.data = values.iter().flat_map(|&v| (v + 0.01).to_le_bytes()).collect();
    }
}

/// `tensor<2x3xf32>, tensor<f32>` → its types (types hold no commas outside `<…>`).
fn split_types(list: &str) -> Vec<String> {
    let (mut out, mut depth, mut cur) = (Vec::new(), 0i32, String::new());
    for c in list.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
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
        let dtype = torchtpu_compile::internal::dtype_of_safetensors(t.dtype()).context("dtype")?;
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
