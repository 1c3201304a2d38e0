//! `cargo xtask bench --large` and `cargo xtask bench --peers`.
//!
//! `--large`: first where a cold compile's time goes (`cold_compile`), then real-size models
//! generated with real torch into the set-up folder (GPT-2 124M in f32 and a Llama-3.2-1B-shaped
//! model in bf16): lowering against `inspect`, cold and cached
//! compiles against `cp` of the archive, peak RSS against the memory bounds (compile: 10% of
//! the weights + 300 MB; run: the weights + 300 MB), artifact write throughput, and `run`. Then
//! a Llama-3.1-8B-shaped archive whose 16 GB of weights are holes: the compile bound at a size
//! this machine could not otherwise hold.
//!
//! `--peers`: per model of `../shared/peers` (or `$TORCHTPU_PEERS_DIR`), our program (compiled
//! for CPU, passes on) against the StableHLO torchax and torch-mlir emit for the same archive,
//! all compiled by the same CPU plugin with the same options and timed in one process
//! (`examples/time_programs.rs`), as ratios; then our TPU program against torchax's, both
//! compiled for v6e by the same libtpu: libtpu's estimated time, FLOPs, bytes and peak HBM.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::measuring::{bench_model, figure, measure, median, Measured};
use crate::{path_str, root, run};

const MIB: f64 = 1024.0 * 1024.0;

/// Runs `cmd` `n` times (after `before` each time); the median seconds and the largest peak RSS.
fn repeat(n: usize, mut before: impl FnMut(), cmd: &Path, args: &[&str]) -> Result<(f64, f64)> {
    let (mut secs, mut rss) = (Vec::new(), 0f64);
    for _ in 0..n {
        before();
        let m = measure(cmd, args)?;
        if !m.ok {
            bail!("{} {} failed:\n{}", cmd.display(), args.join(" "), m.stderr);
        }
        secs.push(m.secs);
        rss = rss.max(m.max_rss_mib);
    }
    Ok((median(secs), rss))
}

pub fn large(bin: &Path, tmp: &Path) -> Result<()> {
    crate::cold_compile::cold_compiles(bin, tmp)?;
    println!("large models: medians of 3 runs of the release binary; cp and the cache hits write fresh files");
    for model in ["gpt2_124m", "llama_1b_bf16"] {
        let pt2 = bench_model(model)?;
        let pt2 = path_str(&pt2)?;
        let reference = pt2.trim_end_matches(".pt2").to_string();
        let weights = std::fs::metadata(pt2)?.len() as f64;
        let compile_bound = weights / 10.0 / MIB + 300e6 / MIB;
        println!("{model}: {:.0} MiB archive", weights / MIB);

        let mlir = tmp.join(format!("{model}.mlir"));
        let lower_args = ["compile", pt2, "-o", path_str(&mlir)?, "--emit", "stablehlo", "--target", "cpu", "-q"];
        let (lower, lower_rss) = repeat(3, || {}, bin, &lower_args)?;
        let (inspect, inspect_rss) = repeat(3, || {}, bin, &["inspect", pt2, "--format", "json"])?;
        println!(
            "  lower to StableHLO {:.2} s, {lower_rss:.0} MiB; inspect {:.2} s, {inspect_rss:.0} MiB ({:.2}x)",
            lower,
            inspect,
            lower / inspect
        );

        let copy = tmp.join("copy.pt2");
        let (cp, _) = repeat(3, || drop(std::fs::remove_file(&copy)), Path::new("cp"), &[pt2, path_str(&copy)?])?;
        let _ = std::fs::remove_file(&copy);

        let cache = tmp.join("large-cache");
        let _ = std::fs::remove_dir_all(&cache);
        let art = tmp.join(format!("{model}.tpuexe"));
        let (art_s, cache_s) = (path_str(&art)?.to_string(), path_str(&cache)?.to_string());
        let compile = |target: &'static str| -> Vec<String> {
            let v = ["compile", pt2, "-o", &art_s, "--target", target, "--cache-dir", &cache_s, "-q"];
            v.into_iter().map(String::from).collect()
        };
        let cpu = compile("cpu");
        let cpu: Vec<&str> = cpu.iter().map(String::as_str).collect();
        let cold = measure(bin, &cpu)?;
        ok(&cold, "cold compile")?;
        let (hit, hit_rss) = repeat(3, || drop(std::fs::remove_file(&art)), bin, &cpu)?;
        let art_bytes = std::fs::metadata(&art)?.len() as f64;
        println!(
            "  compile --target cpu: cold {:.2} s, {:.0} MiB; cache hit {hit:.2} s, {hit_rss:.0} MiB; cp {cp:.2} s \
             (hit / cp {:.2}); bound {compile_bound:.0} MiB: {}",
            cold.secs,
            cold.max_rss_mib,
            hit / cp,
            verdict(cold.max_rss_mib.max(hit_rss) <= compile_bound)
        );
        println!("  artifact {:.0} MiB, written by a cache hit at {:.0} MiB/s", art_bytes / MIB, art_bytes / MIB / hit);

        let input = format!("{reference}/in_0.npy");
        let out = tmp.join(format!("{model}-out"));
        let run_args =
            ["run", &art_s, &input, "--out-dir", path_str(&out)?, "--reference", &reference, "--format", "json"];
        let runs = measure(bin, &[&run_args[..], &["--cache-dir", &cache_s]].concat())?;
        let report: Value = serde_json::from_str(&runs.stdout).with_context(|| format!("run: {}", runs.stderr))?;
        let rel = report["outputs"][0]["comparison"]["max_rel_diff"].as_f64().unwrap_or(f64::NAN);
        let run_bound = art_bytes / MIB + 300e6 / MIB;
        println!(
            "  run (32 tokens): {:.2} s, {:.0} MiB (bound {run_bound:.0} MiB: {}); max rel diff to eager {rel:.2e} ({})",
            runs.secs,
            runs.max_rss_mib,
            verdict(runs.max_rss_mib <= run_bound),
            if report["ok"].as_bool() == Some(true) { "within tolerance" } else { "OVER tolerance" }
        );

        let ext = tmp.join(format!("{model}-ext.tpuexe"));
        let ext_args = ["compile", pt2, "-o", path_str(&ext)?, "--target", "cpu", "--cache-dir", &cache_s, "-q"];
        let ext_run = measure(bin, &[&ext_args[..], &["--weights", "external"]].concat())?;
        ok(&ext_run, "compile --weights external")?;
        println!("  --weights external (executables cached): {:.2} s, {:.0} MiB", ext_run.secs, ext_run.max_rss_mib);

        let tpu = compile("tpu:v6e:1x1");
        let tpu: Vec<&str> = tpu.iter().map(String::as_str).collect();
        let tpu_cold = measure(bin, &tpu)?;
        ok(&tpu_cold, "compile for tpu:v6e:1x1")?;
        println!(
            "  compile --target tpu:v6e:1x1, cold: {:.2} s, {:.0} MiB (bound {compile_bound:.0} MiB: {})",
            tpu_cold.secs,
            tpu_cold.max_rss_mib,
            verdict(tpu_cold.max_rss_mib <= compile_bound)
        );
        for p in [&art, &ext, &tmp.join(format!("{model}-ext.weights.safetensors"))] {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir_all(&cache);
    }
    sparse_8b(bin, tmp)?;
    println!("cold: empty cache; cache hit: every executable cached, the artifact written anew; run: plugin load, weights, one forward");
    Ok(())
}

/// The memory bound at a size this machine could not otherwise hold: a Llama-3.1-8B-shaped
/// bf16 archive whose 16 GB of weights are holes (zeros written by seek), compiled cold and as
/// cache hits, its artifact sparse too (holes are copied as holes).
fn sparse_8b(bin: &Path, tmp: &Path) -> Result<()> {
    let pt2 = bench_model("llama_8b_sparse")?;
    let pt2 = path_str(&pt2)?;
    let weights = std::fs::metadata(pt2)?.len() as f64;
    let compile_bound = weights / 10.0 / MIB + 300e6 / MIB;
    println!(
        "llama_8b_sparse: {:.0} MiB archive, {:.0} MiB of it on disk",
        weights / MIB,
        allocated(Path::new(pt2))? / MIB
    );
    let cache = tmp.join("large-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let art = tmp.join("llama_8b_sparse.tpuexe");
    let (art_s, cache_s) = (path_str(&art)?.to_string(), path_str(&cache)?.to_string());
    let cpu = ["compile", pt2, "-o", &art_s, "--target", "cpu", "--cache-dir", &cache_s, "-q"];
    let cold = measure(bin, &cpu)?;
    ok(&cold, "cold compile")?;
    let copy = tmp.join("copy.pt2");
    let (cp, _) = repeat(3, || drop(std::fs::remove_file(&copy)), Path::new("cp"), &[pt2, path_str(&copy)?])?;
    let _ = std::fs::remove_file(&copy);
    let (hit, hit_rss) = repeat(3, || drop(std::fs::remove_file(&art)), bin, &cpu)?;
    // `cp` of a sparse file copies its holes as holes: no yardstick for the artifact's time.
    println!(
        "  compile --target cpu: cold {:.2} s, {:.0} MiB; cache hit {hit:.2} s, {hit_rss:.0} MiB (cp of the \
         sparse archive {cp:.2} s); bound {compile_bound:.0} MiB: {}",
        cold.secs,
        cold.max_rss_mib,
        verdict(cold.max_rss_mib.max(hit_rss) <= compile_bound)
    );
    let art_bytes = std::fs::metadata(&art)?.len() as f64;
    println!("  artifact {:.0} MiB, {:.0} MiB of it on disk", art_bytes / MIB, allocated(&art)? / MIB);
    let ext = tmp.join("llama_8b_sparse-ext.tpuexe");
    let ext_args = ["compile", pt2, "-o", path_str(&ext)?, "--target", "cpu", "--cache-dir", &cache_s, "-q"];
    let ext_run = measure(bin, &[&ext_args[..], &["--weights", "external"]].concat())?;
    ok(&ext_run, "compile --weights external")?;
    println!(
        "  --weights external (executables cached): {:.2} s, {:.0} MiB (bound {compile_bound:.0} MiB: {})",
        ext_run.secs,
        ext_run.max_rss_mib,
        verdict(ext_run.max_rss_mib <= compile_bound)
    );
    for p in [&art, &ext, &tmp.join("llama_8b_sparse-ext.weights.safetensors")] {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}

/// Bytes a file takes on disk (its holes take none).
fn allocated(path: &Path) -> Result<f64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.blocks() as f64 * 512.0)
}

fn ok(m: &Measured, what: &str) -> Result<()> {
    if m.ok {
        Ok(())
    } else {
        bail!("{what} failed:\n{}", m.stderr)
    }
}

fn verdict(within: bool) -> &'static str {
    if within {
        "within"
    } else {
        "OVER"
    }
}

/// The peers' folder.
fn peers_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("TORCHTPU_PEERS_DIR").map_or_else(|| root().join("../shared/peers"), PathBuf::from);
    if !dir.join("programs").is_dir() {
        bail!("no peer programs in `{}` (set TORCHTPU_PEERS_DIR)", dir.display());
    }
    Ok(dir)
}

pub fn peers(bin: &Path, tmp: &Path) -> Result<()> {
    let dir = peers_dir()?;
    run("cargo", &["build", "--release", "-q", "--example", "time_programs"], &[])?;
    let timer = root().join("target/release/examples/time_programs");
    let mut jobs = Vec::new();
    let models = ["mlp", "cnn", "resnet18", "llama_tiny", "gpt2_tiny"];
    for model in models {
        let pt2 = dir.join(format!("models/{model}.pt2"));
        let refs = dir.join(format!("models/{model}"));
        let (input, reference) = (refs.join("in_0.npy"), refs.join("out_0.npy"));
        let art = tmp.join(format!("peer-{model}.tpuexe"));
        let m =
            measure(bin, &["compile", path_str(&pt2)?, "-o", path_str(&art)?, "--target", "cpu", "--no-cache", "-q"])?;
        ok(&m, &format!("{model}: compile"))?;
        jobs.push(
            json!({"name": format!("{model}/ours"), "artifact": art, "args": [{"npy": input}], "reference": reference}),
        );
        for (name, constants) in [("constants", json!(true)), ("nontrivial", json!("nontrivial"))] {
            let job = json!({"name": format!("{model}/{name}"), "artifact": art, "constants": constants, "args": [{"npy": input}], "reference": reference});
            jobs.push(job);
        }
        let programs = dir.join("programs");
        let torchax = programs.join(format!("{model}.torchax.mlir"));
        if torchax.exists() {
            let meta: Value =
                serde_json::from_slice(&std::fs::read(programs.join(format!("{model}.torchax.meta.json")))?)?;
            let weights = programs.join(format!("{model}.torchax.weights.npz"));
            let n = meta["n_weight_args"].as_u64().unwrap_or(0) as usize;
            let narrow = meta["in_avals"].as_array().and_then(|a| a.get(n)).and_then(Value::as_str).unwrap_or("");
            let mut args: Vec<Value> = (0..n).map(|i| json!({"npz": weights, "key": format!("arr_{i}")})).collect();
            args.push(if narrow.starts_with("int32") {
                json!({"npy": input, "as": "i32"})
            } else {
                json!({"npy": input})
            });
            let kept: Vec<Value> = meta["kept_var_idx"]
                .as_array()
                .context("kept_var_idx")?
                .iter()
                .filter_map(|i| args.get(i.as_u64()? as usize).cloned())
                .collect();
            jobs.push(
                json!({"name": format!("{model}/torchax"), "mlir": torchax, "args": kept, "reference": reference}),
            );
        }
        let torch_mlir = programs.join(format!("{model}.torch_mlir.mlir"));
        if torch_mlir.exists() {
            jobs.push(json!({"name": format!("{model}/torch-mlir"), "mlir": torch_mlir, "args": [{"npy": input}], "reference": reference}));
        }
    }
    let jobs_file = tmp.join("peer-jobs.json");
    std::fs::write(&jobs_file, serde_json::to_vec_pretty(&jobs)?)?;
    let m = measure(&timer, &[path_str(&jobs_file)?, "--reps", "400"])?;
    ok(&m, "time_programs")?;
    let lines: Vec<Value> = m.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let find = |name: String| lines.iter().find(|l| l["name"] == name.as_str());
    println!("peers: median per call on the CPU plugin (XLA:CPU), arguments on the device, 400 calls each, a model's programs in turn 5 calls at a time, one process");
    println!("  as constants: our program with its weights inlined as constants, as torch-mlir emits them;");
    println!("  (nontrivial): the same with every all-0 or all-1 weight + 0.01 (an untrained model's biases and");
    println!("  norm weights), which XLA can then no longer fold away; its numbers differ from eager by design.");
    println!("  like for like: ours / torchax (weights as arguments), as constants / torch-mlir (weights inlined)");
    println!(
        "{:<11} {:>10} {:>10} {:>13} {:>10} {:>10} {:>9} {:>12}  agree with eager",
        "model", "ours", "torchax", "as constants", "(nontriv.)", "torch-mlir", "ours/best", "like for like"
    );
    for model in models {
        let cell = |tool: &str| find(format!("{model}/{tool}")).and_then(|l| l["median_us"].as_f64());
        let agree = ["ours", "torchax", "constants", "torch-mlir"]
            .iter()
            .filter_map(|t| {
                find(format!("{model}/{t}")).map(|l| format!("{t} {}", if l["ok"] == true { "yes" } else { "NO" }))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let best = [cell("torchax"), cell("torch-mlir")].into_iter().flatten().fold(f64::INFINITY, f64::min);
        let show = |v: Option<f64>| {
            v.map_or(
                "-".to_string(),
                |us| if us >= 1000.0 { format!("{:.2} ms", us / 1e3) } else { format!("{us:.1} µs") },
            )
        };
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b.is_finite() => format!("{:.2}", a / b),
            _ => "-".to_string(),
        };
        let like =
            format!("{} / {}", ratio(cell("ours"), cell("torchax")), ratio(cell("constants"), cell("torch-mlir")));
        println!(
            "{model:<11} {:>10} {:>10} {:>13} {:>10} {:>10} {:>9} {:>12}  {agree}",
            show(cell("ours")),
            show(cell("torchax")),
            show(cell("constants")),
            show(cell("nontrivial")),
            show(cell("torch-mlir")),
            ratio(cell("ours"), Some(best)),
            like
        );
    }
    for l in lines.iter().filter(|l| l.get("error").is_some()) {
        println!("  {}: {}", l["name"], l["error"]);
    }
    peer_figures(bin, tmp, &dir, &timer, &models)
}

/// The TPU whose figures `--peers` compares.
const PEER_GENERATION: &str = "v6e";
const PEER_TOPOLOGY: &str = "v6e:1x1";

/// libtpu's figures for our TPU programs (compiled with `--target tpu:v6e:1x1`, as by default and
/// with `--pad-multiple 128`) and torchax's program of each peer model, then of the 1B-shaped bf16
/// Llama (ours only: no torchax program of it here), all compiled again by the same libtpu with
/// the same options in one process: FLOPs, bytes accessed, peak HBM, and the time they take at
/// the chip's peak (the larger of compute and memory; `schemas/tpu-chips.json`), as ratios to
/// torchax's.
fn peer_figures(bin: &Path, tmp: &Path, dir: &Path, timer: &Path, models: &[&str]) -> Result<()> {
    let mut jobs = Vec::new();
    let mut rows = Vec::new();
    let llama_1b = bench_model("llama_1b_bf16")?;
    let archives = models.iter().map(|m| ((*m).to_string(), dir.join(format!("models/{m}.pt2"))));
    for (model, pt2) in archives.chain([("llama_1b_bf16".to_string(), llama_1b)]) {
        for (program, pad) in [("ours", "0"), ("ours, pad 128", "128")] {
            let art = tmp.join(format!("peer-{model}-tpu-pad{pad}.tpuexe"));
            let target = format!("tpu:{PEER_TOPOLOGY}");
            let (pt2, out) = (path_str(&pt2)?, path_str(&art)?);
            let args = ["compile", pt2, "-o", out, "--target", &target, "--pad-multiple", pad, "--no-cache", "-q"];
            ok(&measure(bin, &args)?, &format!("{model}: compile for {target}"))?;
            jobs.push(json!({"name": format!("{model}/{program}"), "artifact": art}));
            rows.push((model.clone(), program));
        }
        let torchax = dir.join(format!("programs/{model}.torchax.mlir"));
        if torchax.exists() {
            jobs.push(json!({"name": format!("{model}/torchax"), "mlir": torchax}));
            rows.push((model.clone(), "torchax"));
        }
    }
    let jobs_file = tmp.join("peer-figure-jobs.json");
    std::fs::write(&jobs_file, serde_json::to_vec_pretty(&jobs)?)?;
    let m = measure(timer, &[path_str(&jobs_file)?, "--figures", PEER_TOPOLOGY])?;
    ok(&m, "time_programs --figures")?;
    let lines: Vec<Value> = m.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let chips: Value = serde_json::from_slice(&std::fs::read(root().join("schemas/tpu-chips.json"))?)?;
    let chip = &chips["chips"][PEER_GENERATION];
    let (peak_flops, bandwidth) = (figure(&chip["bf16_tflops"]) * 1e12, figure(&chip["hbm_gb_per_s"]) * 1e9);
    let figures = |name: &str| -> Option<[f64; 4]> {
        let l = lines.iter().find(|l| l["name"] == name && l.get("error").is_none())?;
        let (flops, bytes) = (l["flops"].as_f64()?, l["bytes_accessed"].as_f64()?);
        Some([(flops / peak_flops).max(bytes / bandwidth), flops, bytes, l["peak_bytes"].as_f64()?])
    };
    println!();
    println!("peers on libtpu ({PEER_TOPOLOGY}, deviceless): each program compiled by the same libtpu with the same options;");
    println!("  time: libtpu's FLOPs and bytes accessed at the chip's peak (the larger of compute and memory);");
    println!("  ours: `--target tpu:{PEER_TOPOLOGY}`, and with `--pad-multiple 128`");
    println!(
        "{:<14} {:<14} {:>10} {:>10} {:>12} {:>10}   ÷ torchax: time, FLOPs, bytes, peak",
        "model", "program", "time", "FLOPs", "bytes", "peak HBM"
    );
    for (model, program) in &rows {
        let Some(f) = figures(&format!("{model}/{program}")) else { continue };
        let ratios = match figures(&format!("{model}/torchax")) {
            Some(t) if *program != "torchax" => {
                f.iter().zip(t).map(|(a, b)| format!("{:.2}", a / b)).collect::<Vec<_>>().join("  ")
            }
            _ => String::new(),
        };
        println!(
            "{model:<14} {program:<14} {:>10} {:>10} {:>12} {:>10}   {ratios}",
            seconds(f[0]),
            scaled(f[1], ""),
            scaled(f[2], "B"),
            scaled(f[3], "B")
        );
    }
    for l in lines.iter().filter(|l| l.get("error").is_some()) {
        println!("  {}: {}", l["name"], l["error"]);
    }
    Ok(())
}

/// `1.23 ms`, `45.6 µs`.
fn seconds(s: f64) -> String {
    match s {
        s if s >= 1.0 => format!("{s:.2} s"),
        s if s >= 1e-3 => format!("{:.2} ms", s * 1e3),
        s => format!("{:.2} µs", s * 1e6),
    }
}

/// `6.0 M`, `90.2 GB`: a count with its decimal prefix.
fn scaled(v: f64, unit: &str) -> String {
    let (value, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(scale, _)| v >= *scale)
        .map_or((v, ""), |(scale, p)| (v / scale, p));
    format!("{value:.1} {prefix}{unit}")
}
