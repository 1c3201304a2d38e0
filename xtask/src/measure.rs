//! `cargo xtask parity` and `cargo xtask bench`: run the release binary over every test model
//! and print tables (figures are ratios within one run; these machines are shared and noisy).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::measuring::{bench_model, figure, json, measure, median};
use crate::{root, run};

/// The release binary, built; `$TORCHTPU_BENCH_BINARY` names another one to measure instead.
fn release_binary() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TORCHTPU_BENCH_BINARY") {
        return Ok(PathBuf::from(bin));
    }
    run("cargo", &["build", "--release", "-q", "-p", "torchtpu-compile"], &[])?;
    Ok(root().join("target/release/torchtpu-compile"))
}

fn models() -> Result<Vec<String>> {
    let mut v: Vec<String> = std::fs::read_dir(root().join("testdata/models"))?
        .flatten()
        .filter_map(|e| e.path().file_name()?.to_str()?.strip_suffix(".pt2").map(str::to_string))
        .collect();
    v.sort();
    Ok(v)
}

fn inputs(model: &str) -> Vec<String> {
    let dir = root().join("testdata/models").join(model);
    (0..).map(|i| dir.join(format!("in_{i}.npy"))).take_while(|p| p.exists()).map(|p| p.display().to_string()).collect()
}

/// Compile + run one model against its references: (ops, compile ms, run ms, abs, rel, ok).
fn parity_row(bin: &Path, model: &str, tmp: &Path) -> Result<(u64, u64, f64, f64, f64, bool)> {
    let pt2 = format!("testdata/models/{model}.pt2");
    let inspect = json(&measure(bin, &["inspect", &pt2, "--format", "json"])?, "inspect")?;
    let art = tmp.join(format!("{model}.tpuexe")).display().to_string();
    let compiled =
        json(&measure(bin, &["compile", &pt2, "-o", &art, "--format", "json", "-q", "--no-cache"])?, "compile")?;
    let out_dir = tmp.join(model).display().to_string();
    let reference = format!("testdata/models/{model}");
    let mut args = vec!["run".to_string(), art];
    args.extend(inputs(model));
    args.extend(["--out-dir".into(), out_dir, "--reference".into(), reference, "--format".into(), "json".into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let m = measure(bin, &argv)?;
    let report: Value = serde_json::from_str(&m.stdout).with_context(|| format!("run: {}", m.stderr))?;
    let cmps: Vec<&Value> = report["outputs"].as_array().into_iter().flatten().map(|o| &o["comparison"]).collect();
    let max = |k: &str| cmps.iter().filter_map(|c| c[k].as_f64()).fold(0.0, f64::max);
    Ok((
        inspect["nodes"].as_u64().unwrap_or(0),
        compiled["targets"][0]["compile_ms"].as_u64().unwrap_or(0),
        report["run_ms"].as_f64().unwrap_or(f64::NAN),
        max("max_abs_diff"),
        max("max_rel_diff"),
        m.ok && report["ok"] == true,
    ))
}

pub fn parity() -> Result<()> {
    let bin = release_binary()?;
    let tmp = root().join("target/xtask-parity");
    std::fs::create_dir_all(&tmp)?;
    println!(
        "{:<16} {:>5} {:>11} {:>8} {:>11} {:>11}  result",
        "model", "ops", "compile ms", "run ms", "max abs", "max rel"
    );
    let (mut passed, mut failed) = (0, 0);
    for model in models()? {
        match parity_row(&bin, &model, &tmp) {
            Ok((ops, compile_ms, run_ms, abs, rel, ok)) => {
                let note = if model.ends_with("_dyn") { "  (example size only; bucketing comes later)" } else { "" };
                println!(
                    "{model:<16} {ops:>5} {compile_ms:>11} {run_ms:>8.2} {abs:>11.3e} {rel:>11.3e}  {}{note}",
                    if ok { "pass" } else { "FAIL" }
                );
                if ok {
                    passed += 1
                } else {
                    failed += 1
                }
            }
            Err(e) => {
                println!("{model:<16} FAIL: {e:#}");
                failed += 1;
            }
        }
    }
    println!("parity: {passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} model(s) differ from PyTorch");
    }
    println!("\nCore ATen op cases (every sample against eager; a failure names the op, sample and error):");
    let mut args = crate::OP_CASES_TEST.to_vec();
    args.push("--nocapture");
    run("cargo", &args, &[("TORCHTPU_PRINT_OPS", std::ffi::OsStr::new("1"))])?;
    let table = std::fs::read_to_string(root().join("docs/ops.md"))?;
    println!("{}", table.lines().last().unwrap_or_default());
    Ok(())
}

/// A benchmark section: it runs the release binary, writing under the scratch folder.
type Section = fn(bin: &Path, tmp: &Path) -> Result<()>;

/// The benchmark sections after the per-model table, by name.
const SECTIONS: [(&str, Section); 12] = [
    ("passes", passes_bench),
    ("bucketing", bucket_bench),
    ("bucket-cost", crate::bucket_cost::bucket_cost_bench),
    ("cache", cache_bench),
    ("grouped-mm", grouped_mm_bench),
    ("avg-pool", avg_pool_bench),
    ("tensor-parallel", tensor_parallel_bench),
    ("donation", donation_bench),
    ("serve", crate::serve_bench::serve_bench),
    ("long-context", crate::long_context::long_context_bench),
    ("fleet", fleet_bench),
    ("cold-compile", crate::cold_compile::cold_compiles),
];

/// Every figure, or only the `sections` named (`models` is the per-model table); `--large` and
/// `--peers` run only when asked.
pub fn bench(sections: &[String], large: bool, peers: bool) -> Result<()> {
    let known: Vec<&str> = ["models"].into_iter().chain(SECTIONS.iter().map(|(n, _)| *n)).collect();
    if let Some(unknown) = sections.iter().find(|s| !known.contains(&s.as_str())) {
        bail!("unknown bench section `{unknown}` (sections: {})", known.join(", "));
    }
    let wanted = |name: &str| (sections.is_empty() && !large && !peers) || sections.iter().any(|s| s == name);
    let bin = release_binary()?;
    let tmp = root().join("target/xtask-bench");
    std::fs::create_dir_all(&tmp)?;
    if large {
        crate::large::large(&bin, &tmp)?;
    }
    if peers {
        crate::large::peers(&bin, &tmp)?;
    }
    if wanted("models") {
        model_table(&bin, &tmp)?;
    }
    for (name, section) in SECTIONS {
        if wanted(name) {
            println!();
            section(&bin, &tmp)?;
        }
    }
    Ok(())
}

/// Per test model: emit time against the floor, peak memory, XLA compile and run times.
fn model_table(bin: &Path, tmp: &Path) -> Result<()> {
    const REPEAT: usize = 5;
    println!("each figure: median of {REPEAT} runs of the release binary; ratios are within this run");
    println!(
        "{:<16} {:>10} {:>10} {:>7} {:>9} {:>11} {:>8} {:>10}",
        "model", "emit ms", "floor ms", "ratio", "peak MiB", "compile ms", "run ms", "exe KiB"
    );
    for model in models()? {
        let pt2 = format!("testdata/models/{model}.pt2");
        let mlir = tmp.join(format!("{model}.mlir")).display().to_string();
        let (mut emit, mut floor, mut rss) = (Vec::new(), Vec::new(), 0f64);
        for _ in 0..REPEAT {
            let m = measure(bin, &["compile", &pt2, "-o", &mlir, "--emit", "stablehlo", "-q"])?;
            if !m.ok {
                bail!("{model}: --emit stablehlo failed:\n{}", m.stderr);
            }
            emit.push(m.secs * 1e3);
            rss = rss.max(m.max_rss_mib);
            floor.push(measure(bin, &["inspect", &pt2, "--format", "json"])?.secs * 1e3);
        }
        let (e, f) = (median(emit), median(floor));
        let art = tmp.join(format!("{model}.tpuexe")).display().to_string();
        let compiled =
            json(&measure(bin, &["compile", &pt2, "-o", &art, "--format", "json", "-q", "--no-cache"])?, "compile")?;
        let (_, _, run_ms, ..) = parity_row(bin, &model, tmp)?;
        println!(
            "{model:<16} {e:>10.1} {f:>10.1} {:>7.2} {rss:>9.1} {:>11} {run_ms:>8.2} {:>10.1}",
            e / f,
            compiled["targets"][0]["compile_ms"].as_u64().unwrap_or(0),
            compiled["targets"][0]["executable_bytes"].as_f64().unwrap_or(0.0) / 1024.0,
        );
    }
    println!("emit: whole process of `compile --emit stablehlo`; floor: `inspect` (open the archive, parse its JSON, build the IR)");
    println!("compile: XLA CPU compile inside `compile`; run: execute + copy back inside `run` (plugin load excluded)");
    Ok(())
}

/// Compile time of an average pool whose divisor varies at the borders
/// (`count_include_pad=False`) over f32[32,384,25,25], and its CPU result against eager.
fn avg_pool_bench(bin: &Path, tmp: &Path) -> Result<()> {
    let pt2 = bench_model("avgpool_wide")?;
    let pt2 = crate::path_str(&pt2)?;
    let reference = pt2.trim_end_matches(".pt2");
    for target in ["cpu", "tpu:v6e:1x1"] {
        let art = tmp.join("avgpool_wide.tpuexe").display().to_string();
        let m = measure(bin, &["compile", pt2, "-o", &art, "--target", target, "--no-cache", "-q"])?;
        if !m.ok {
            bail!("avgpool_wide: compile for {target} failed:\n{}", m.stderr);
        }
        let checked = if target == "cpu" {
            let input = format!("{reference}/in_0.npy");
            let out = tmp.join("avgpool-out").display().to_string();
            let r = measure(bin, &["run", &art, &input, "--out-dir", &out, "--reference", reference])?;
            if !r.ok {
                bail!("avgpool_wide: run differs from eager:\n{}", r.stderr);
            }
            "; matches eager"
        } else {
            ""
        };
        println!(
            "avg_pool2d count_include_pad=False over f32[32,384,25,25], {target}: compile {:.2} s{checked}",
            m.secs
        );
    }
    println!("compile: whole process of `compile --no-cache` for that target (the archive holds a 30 MB sample input)");
    Ok(())
}

/// A decode loop over KV caches of 4096 positions (`decoder_kv_4096`, 64 MiB of caches) with
/// the caches donated to each step (updated in place) against copied (`generate --no-donate`):
/// time per step, and peak memory after 10 and 100 steps (flat: nothing grows per step). The
/// greedy tokens are checked against eager's first.
fn donation_bench(bin: &Path, tmp: &Path) -> Result<()> {
    const REPEAT: usize = 3;
    let pt2 = bench_model("decoder_kv_4096")?;
    let reference = pt2.with_extension("");
    let art = tmp.join("decoder_kv_4096.tpuexe").display().to_string();
    let m = measure(bin, &["compile", crate::path_str(&pt2)?, "-o", &art, "--target", "cpu", "-q", "--no-cache"])?;
    if !m.ok {
        bail!("decoder_kv_4096: compile failed:\n{}", m.stderr);
    }
    let prompt = reference.join("prompt.npy").display().to_string();
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(reference.join("meta.json"))?)?;
    let eager: Vec<String> = meta["decode"]["tokens"][0]
        .as_array()
        .context("meta.json: decode tokens")?
        .iter()
        .map(|t| t.to_string())
        .collect();
    let checked = measure(bin, &["generate", &art, "--prompt", &prompt, "--max-new-tokens", "24"])?;
    let ours = checked.stdout.lines().find_map(|l| l.strip_prefix("tokens: ")).unwrap_or_default();
    if ours.split(' ').map(str::to_string).collect::<Vec<_>>() != eager {
        bail!("decoder_kv_4096: greedy tokens differ from eager's:\n  ours  {ours}\n  eager {}", eager.join(" "));
    }
    println!(
        "decode steps over KV caches of 4096 positions (64 MiB), CPU; median of {REPEAT} runs; greedy tokens = eager's"
    );
    println!("{:<10} {:>6} {:>12} {:>10} {:>10}", "caches", "steps", "ms / step", "tokens/s", "peak MiB");
    let mut per_step = [0.0; 2];
    for (k, (mode, extra)) in [("donated", None), ("copied", Some("--no-donate"))].into_iter().enumerate() {
        for steps in ["10", "100"] {
            let mut args = vec!["generate", &art, "--prompt", &prompt, "--max-new-tokens", steps, "--format", "json"];
            args.extend(extra);
            let (mut ms, mut rss) = (Vec::new(), 0f64);
            for _ in 0..REPEAT {
                let run = measure(bin, &args)?;
                let done = json(&run, "generate")?;
                let decoded = done["new_tokens"].as_f64().unwrap_or(1.0) - 1.0;
                ms.push(done["decode_ms"].as_f64().unwrap_or(0.0) / decoded.max(1.0));
                rss = rss.max(run.max_rss_mib);
            }
            let ms = median(ms);
            if steps == "100" {
                per_step[k] = ms;
            }
            println!("{mode:<10} {steps:>6} {ms:>12.3} {:>10.1} {rss:>10.1}", 1e3 / ms);
        }
    }
    println!("donation: a decode step takes {:.2}x less time with the caches donated", per_step[1] / per_step[0]);
    println!(
        "ms / step: decode calls after the prompt's; peak: the whole `generate` process (weights, caches, plugin)"
    );
    Ok(())
}

/// The 1B-parameter bf16 Llama and GPT-2 124M compiled for TPU v5e slices of 1, 2, 4 and 8
/// chips with `--mesh tp=N`, then `fsdp=4` and `tp=2,fsdp=4` on v5e, `tp=4,fsdp=2` on a v6e
/// 2x4 and `tp=4` on a v5p 2x2x1: per-chip argument and peak memory, compile time and
/// collectives, from the manifest; a mesh the model's heads do not divide prints the refusal.
fn tensor_parallel_bench(bin: &Path, tmp: &Path) -> Result<()> {
    println!("models split over TPU slices with --mesh (figures per chip, from the manifest)");
    println!(
        "{:<14} {:<11} {:<9} {:>14} {:>10} {:>11} {:>12} {:>11}",
        "model", "mesh", "slice", "arguments MiB", "peak MiB", "compile s", "all-reduces", "all-gathers"
    );
    let meshes = [
        ("tp=1", "v5e:1x1"),
        ("tp=2", "v5e:1x2"),
        ("tp=4", "v5e:2x2"),
        ("tp=8", "v5e:2x4"),
        ("fsdp=4", "v5e:2x2"),
        ("tp=2,fsdp=4", "v5e:2x4"),
        ("tp=4,fsdp=2", "v6e:2x4"),
        ("tp=4", "v5p:2x2x1"),
    ];
    tensor_parallel_rows(bin, tmp, "llama_1b_bf16", &meshes, &[])?;
    // GPT-2's vocabulary (50257 rows) splits along `tp` once padded to 128 (else it stays whole).
    tensor_parallel_rows(bin, tmp, "gpt2_124m", &meshes, &["--pad-multiple", "128"])?;
    // A decode step's KV caches (8 rows of 256 positions) split along the rows by `dp`.
    let decode = [("tp=1", "v5e:1x1"), ("dp=2", "v5e:1x2"), ("tp=2", "v5e:1x2"), ("dp=2,tp=2", "v5e:2x2")];
    tensor_parallel_rows(bin, tmp, "decoder_rows_1b", &decode, &[])?;
    let _ = std::fs::remove_file(tmp.join("tp.tpuexe"));
    let _ = std::fs::remove_file(tmp.join("tp.weights.safetensors"));
    Ok(())
}

fn tensor_parallel_rows(bin: &Path, tmp: &Path, model: &str, meshes: &[(&str, &str)], extra: &[&str]) -> Result<()> {
    let pt2 = bench_model(model)?;
    let pt2 = crate::path_str(&pt2)?;
    const MIB: f64 = 1024.0 * 1024.0;
    let art = tmp.join("tp.tpuexe").display().to_string();
    let mut first = None;
    for &(mesh, topology) in meshes {
        let target = format!("tpu:{topology}");
        let mut args = vec!["compile", pt2, "-o", &art, "--target", &target, "--no-cache", "-q"];
        args.extend(["--weights", "external"]);
        args.extend(extra);
        if mesh != "tp=1" {
            args.extend(["--mesh", mesh]);
        }
        let m = measure(bin, &args)?;
        if !m.ok {
            // A refusal (heads that do not divide) is a figure too; anything else is a failure.
            let refused = m.stderr.lines().find(|l| l.contains("do not divide"));
            let Some(line) = refused else { bail!("{model} {mesh}: compile failed:\n{}", m.stderr) };
            println!("{model:<14} {mesh:<11} {topology:<9} refused: {}", line.trim());
            continue;
        }
        let manifest = json(&measure(bin, &["inspect", &art, "--format", "json"])?, "inspect")?["manifest"].clone();
        let e = &manifest["targets"][0]["executables"][0];
        let args_mib = figure(&e["memory"]["argument_bytes"]) / MIB;
        let count = |kind: &str| e["collectives"][kind]["count"].as_u64().unwrap_or(0);
        println!(
            "{model:<14} {mesh:<11} {topology:<9} {args_mib:>14.1} {:>10.1} {:>11.2} {:>12} {:>11}{}",
            figure(&e["memory"]["peak_bytes"]) / MIB,
            figure(&e["compile_ms"]) / 1e3,
            count("all-reduce"),
            count("all-gather"),
            first.map_or(String::new(), |one: f64| format!("   (arguments {:.2}x of one chip)", args_mib / one))
        );
        first.get_or_insert(args_mib);
    }
    Ok(())
}

/// The two lowerings of `_grouped_mm` on TPU v6e, from the manifest: device memory, code size
/// and XLA's cost model, for moe_tiny and for `moe_wide` (64 experts, top-8, 2048 rows per
/// grouped matmul; generated into the set-up folder by testdata/gen.py on first use).
fn grouped_mm_bench(bin: &Path, tmp: &Path) -> Result<()> {
    let wide = bench_model("moe_wide")?;
    println!("grouped matmul forms on tpu:v6e:1x1 (figures from the manifest; ratios ragged / dense)");
    println!(
        "{:<10} {:<7} {:>10} {:>10} {:>9} {:>9} {:>10} {:>13}",
        "model", "form", "peak MiB", "temp MiB", "code KiB", "exe KiB", "GFLOP", "accessed MiB"
    );
    const MIB: f64 = 1024.0 * 1024.0;
    for (model, pt2) in [("moe_tiny", root().join("testdata/models/moe_tiny.pt2")), ("moe_wide", wide)] {
        let mut rows = Vec::new();
        for form in ["dense", "ragged"] {
            let art = tmp.join(format!("{model}-{form}.tpuexe")).display().to_string();
            let pt2 = crate::path_str(&pt2)?;
            let args =
                ["compile", pt2, "-o", &art, "--target", "tpu:v6e:1x1", "--grouped-mm", form, "--no-cache", "-q"];
            if !measure(bin, &args)?.ok {
                bail!("{model}: compile with --grouped-mm {form} failed");
            }
            let manifest = json(&measure(bin, &["inspect", &art, "--format", "json"])?, "inspect")?["manifest"].clone();
            let e = manifest["targets"][0]["executables"][0].clone();
            let row = [
                figure(&e["memory"]["peak_bytes"]) / MIB,
                figure(&e["memory"]["temp_bytes"]) / MIB,
                figure(&e["generated_code_bytes"]) / 1024.0,
                figure(&e["bytes"]) / 1024.0,
                figure(&e["cost"]["flops"]) / 1e9,
                figure(&e["cost"]["bytes_accessed"]) / MIB,
            ];
            println!(
                "{model:<10} {form:<7} {:>10.1} {:>10.1} {:>9.0} {:>9.0} {:>10.3} {:>13.1}",
                row[0], row[1], row[2], row[3], row[4], row[5]
            );
            rows.push(row);
        }
        let ratio: Vec<String> = rows[1].iter().zip(&rows[0]).map(|(r, d)| format!("{:.2}x", r / d)).collect();
        println!(
            "{model:<10} {:<7} {:>10} {:>10} {:>9} {:>9} {:>10} {:>13}",
            "ratio", ratio[0], ratio[1], ratio[2], ratio[3], ratio[4], ratio[5]
        );
    }
    println!(
        "GFLOP and accessed: XLA's cost model per run (it counts a ragged dot's FLOPs as if every row met every group)"
    );
    Ok(())
}

/// Median `run_ms` of `REPEAT` runs of `art` on `inputs`.
fn median_run(bin: &Path, art: &str, inputs: &[String], out: &Path) -> Result<f64> {
    const REPEAT: usize = 5;
    let mut runs = Vec::new();
    for _ in 0..REPEAT {
        let mut args = vec!["run".to_string(), art.to_string()];
        args.extend(inputs.iter().cloned());
        args.extend(["--out-dir".into(), out.display().to_string(), "--format".into(), "json".into()]);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        runs.push(json(&measure(bin, &argv)?, "run")?["run_ms"].as_f64().unwrap_or(f64::NAN));
    }
    Ok(median(runs))
}

/// Bucketing of the dynamic tiny Llama (seq in [2, 512], pow2): the compile of every bucket
/// for CPU and TPU v6e, the artifact's size, and the CPU run time at a few sizes against an
/// artifact compiled for exactly that size (`--buckets input_ids:1=N`).
fn bucket_bench(bin: &Path, tmp: &Path) -> Result<()> {
    let model = "llama_tiny_dyn";
    let pt2 = format!("testdata/models/{model}.pt2");
    let art = tmp.join("dyn-pow2.tpuexe").display().to_string();
    let args = [
        "compile",
        &pt2,
        "-o",
        &art,
        "--target",
        "cpu",
        "--target",
        "tpu:v6e:1x1",
        "--no-cache",
        "--format",
        "json",
        "-q",
    ];
    let m = measure(bin, &args)?;
    let summary = json(&m, "compile")?;
    let one_thread = measure(bin, &[&args[..], &["-j", "1"]].concat())?;
    if !one_thread.ok {
        bail!("{model}: compile -j 1 failed:\n{}", one_thread.stderr);
    }
    let buckets = summary["buckets"].as_array().map_or(0, Vec::len);
    let executables = summary["targets"].as_array().map_or(0, Vec::len);
    let mib = summary["artifact_bytes"].as_f64().unwrap_or(0.0) / (1024.0 * 1024.0);
    println!(
        "bucketing: {model} (seq in [2, 512], pow2): {buckets} buckets, {executables} executables (cpu + tpu:v6e:1x1), \
         artifact {mib:.1} MiB; compile of all (whole process, no cache): {:.1} s on one thread per core, \
         {:.1} s with -j 1 ({:.2}x)",
        m.secs,
        one_thread.secs,
        one_thread.secs / m.secs
    );
    baseline_compile(bin, &args)?;
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("testdata/models").join(model).join("meta.json"))?)?;
    println!("{:>6} {:>8} {:>14} {:>14} {:>7}", "seq", "bucket", "bucket run ms", "exact run ms", "ratio");
    for (k, case) in meta["cases"].as_array().into_iter().flatten().enumerate() {
        let seq = case["inputs"][0]["shape"][1].as_i64().unwrap_or(0);
        if ![5, 37, 65, 257].contains(&seq) {
            continue;
        }
        let suffix = if k == 0 { String::new() } else { format!("_case{k}") };
        let input = root().join(format!("testdata/models/{model}/in_0{suffix}.npy")).display().to_string();
        let exact = tmp.join(format!("dyn-exact-{seq}.tpuexe")).display().to_string();
        let choice = format!("input_ids:1={seq}");
        let args = ["compile", &pt2, "-o", &exact, "--target", "cpu", "--buckets", &choice, "--no-cache", "-q"];
        if !measure(bin, &args)?.ok {
            bail!("{model}: exact-size compile at {seq} failed");
        }
        let out = tmp.join("dyn-out");
        let bucketed = median_run(bin, &art, std::slice::from_ref(&input), &out)?;
        let exact_ms = median_run(bin, &exact, std::slice::from_ref(&input), &out)?;
        let bucket = (seq as u64).next_power_of_two();
        println!("{seq:>6} {bucket:>8} {bucketed:>14.2} {exact_ms:>14.2} {:>6.2}x", bucketed / exact_ms);
    }
    println!("run ms: execute + copy back inside `run`, median of 5; ratio: bucket / exact size");
    Ok(())
}

/// With `$BENCH_BASELINE` naming another build of the binary (e.g. the last release): the same
/// compile by both, interleaved, median of 5 each, so that a change's effect is measured in one
/// run on one machine.
fn baseline_compile(bin: &Path, args: &[&str]) -> Result<()> {
    let Some(baseline) = std::env::var_os("BENCH_BASELINE").map(PathBuf::from) else { return Ok(()) };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        for (b, into) in [(bin, &mut ours), (baseline.as_path(), &mut theirs)] {
            let m = measure(b, args)?;
            if !m.ok {
                bail!("{}: compile failed:\n{}", b.display(), m.stderr);
            }
            into.push(m.secs);
        }
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "  against {}: {theirs:.2} s, this build {ours:.2} s ({:.2}x), median of 5 each, interleaved",
        baseline.display(),
        theirs / ours
    );
    Ok(())
}

/// Node counts, CPU run time and TPU code size and peak memory: every pass (as by default),
/// every pass with padding to 128, and no pass.
fn passes_bench(bin: &Path, tmp: &Path) -> Result<()> {
    const CONFIGS: [(&str, &[&str]); 3] =
        [("all", &[]), ("all, pad 128", &["--pad-multiple", "128"]), ("none", &["--passes", "none"])];
    println!("graph passes (cpu run: median of 5 `run`s; TPU v6e figures from the manifest; ratios vs none)");
    println!(
        "{:<12} {:<12} {:>9} {:>11} {:>7} {:>13} {:>13} {:>7}",
        "model", "passes", "nodes", "cpu run ms", "ratio", "tpu code KiB", "tpu peak KiB", "ratio"
    );
    for model in ["llama_tiny", "resnet_mini"] {
        let pt2 = format!("testdata/models/{model}.pt2");
        let mut rows = Vec::new();
        for (i, (label, extra)) in CONFIGS.iter().enumerate() {
            let art = tmp.join(format!("{model}-passes{i}.tpuexe")).display().to_string();
            let mut args = vec!["compile", &pt2, "-o", &art, "--target", "cpu", "--target", "tpu:v6e:1x1"];
            args.extend(["--no-cache", "--format", "json", "-q"]);
            args.extend(extra.iter());
            let summary = json(&measure(bin, &args)?, "compile")?;
            let reports = summary["passes"].as_array().cloned().unwrap_or_default();
            let nodes = reports.last().and_then(|r| r["nodes_after"].as_u64());
            let manifest = json(&measure(bin, &["inspect", &art, "--format", "json"])?, "inspect")?["manifest"].clone();
            let tpu =
                manifest["targets"].as_array().into_iter().flatten().find(|t| t["target"] == "tpu:v6e:1x1").cloned();
            let tpu = tpu.map(|t| t["executables"][0].clone()).unwrap_or_default();
            let run_ms = median_run(bin, &art, &inputs(model), &tmp.join(format!("{model}-passes{i}-out")))?;
            let nodes = nodes.map_or_else(|| "-".to_string(), |n| n.to_string());
            let code = tpu["generated_code_bytes"].as_f64().unwrap_or(0.0) / 1024.0;
            let peak = tpu["memory"]["peak_bytes"].as_f64().unwrap_or(0.0) / 1024.0;
            rows.push((*label, nodes, run_ms, code, peak));
        }
        let (base_run, base_peak) = (rows[2].2, rows[2].4);
        for (label, nodes, run, code, peak) in rows {
            println!(
                "{model:<12} {label:<12} {nodes:>9} {run:>11.2} {:>6.2}x {code:>13.0} {peak:>13.0} {:>6.2}x",
                run / base_run,
                peak / base_peak
            );
        }
    }
    println!("nodes: after the last pass, as emitted (none: no pass reports a count)");
    Ok(())
}

/// A moto S3 server on a free loopback port (installed by `cargo xtask setup`), with a bucket;
/// killed on drop.
struct S3Server(std::process::Child, u16);

impl S3Server {
    fn start(bucket: &str) -> Result<S3Server> {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        let exe = crate::setup::setup_dir().join("s3-test-server/bin/moto_server");
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(&exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {} (run `cargo xtask setup`)", exe.display()))?;
        let server = S3Server(child, port);
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if start.elapsed().as_secs() > 60 {
                bail!("moto_server did not start");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let mut c = TcpStream::connect(("127.0.0.1", port))?;
        write!(
            c,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut reply = String::new();
        c.read_to_string(&mut reply)?;
        if !reply.contains(" 200 ") {
            bail!("cannot create the bucket: {reply}");
        }
        Ok(server)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fleet (`torchtpu_compile.fleet`) on a local Ray cluster of 1 and 2 worker nodes: the
/// dynamic tiny Llama's 9 buckets for CPU and TPU from empty caches, against one machine's
/// compile (`xtask/fleet_bench.py`, run in the Python test environment with the package built as
/// CI builds it).
fn fleet_bench(_bin: &Path, tmp: &Path) -> Result<()> {
    let server = S3Server::start("bench")?;
    let endpoint = format!("http://127.0.0.1:{}", server.1);
    let (python, mut envs) = crate::python_env()?;
    for (k, v) in [("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"), ("AWS_REGION", "us-east-1")] {
        envs.push((k.into(), v.into()));
    }
    envs.push(("AWS_ENDPOINT_URL".into(), endpoint.into()));
    let work = tmp.join("fleet-bench");
    let _ = std::fs::remove_dir_all(&work);
    println!(
        "fleet: llama_tiny_dyn, 9 buckets x (cpu, tpu:v6e:1x1), empty caches, a local Ray cluster on this machine"
    );
    let status = Command::new(python)
        .args(["xtask/fleet_bench.py", "testdata/models/llama_tiny_dyn.pt2"])
        .arg(&work)
        .envs(envs)
        .current_dir(root())
        .status()
        .context("cannot start the fleet bench")?;
    if !status.success() {
        bail!("the fleet bench failed");
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// Cold compile, local hit and remote hit of the tiny Llama per target, as whole-process times
/// (plugin load included), medians of 3.
fn cache_bench(bin: &Path, tmp: &Path) -> Result<()> {
    const REPEAT: usize = 3;
    let server = S3Server::start("bench")?;
    let env = [
        ("AWS_ACCESS_KEY_ID", "bench".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "bench".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", server.1)),
    ];
    for (k, v) in &env {
        std::env::set_var(k, v); // read by the measured child processes
    }
    println!("compile cache, llama_tiny (whole process, median of {REPEAT}; a fresh cache folder per cold run)");
    println!(
        "{:<14} {:>9} {:>9} {:>10} {:>11} {:>13}",
        "target", "cold ms", "hit ms", "remote ms", "cold/hit", "cold/remote"
    );
    let pt2 = "testdata/models/llama_tiny.pt2";
    let dir = tmp.join("cache-bench");
    let _ = std::fs::remove_dir_all(&dir);
    for target in ["cpu", "tpu:v6e:1x1"] {
        let (mut cold, mut hit, mut remote) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..REPEAT {
            let run = |cache: &str, url: &str| -> Result<(f64, String)> {
                let art = dir.join("out.tpuexe").display().to_string();
                let cache = dir.join(format!("{target}-{i}-{cache}")).display().to_string();
                let mut args = vec![
                    "compile",
                    pt2,
                    "-o",
                    &art,
                    "--target",
                    target,
                    "--cache-dir",
                    &cache,
                    "--format",
                    "json",
                    "-q",
                ];
                args.extend(["--remote-cache", url]);
                let m = measure(bin, &args)?;
                let v = json(&m, "compile")?;
                Ok((m.secs * 1e3, v["targets"][0]["cache"].as_str().unwrap_or("?").to_string()))
            };
            let url = format!("s3://bench/run-{i}");
            let (ms, how) = run("a", &url)?;
            check_outcome(&how, "compiled")?;
            cold.push(ms);
            let (ms, how) = run("a", &url)?;
            check_outcome(&how, "hit")?;
            hit.push(ms);
            let (ms, how) = run("b", &url)?;
            check_outcome(&how, "remote-hit")?;
            remote.push(ms);
        }
        let (c, h, r) = (median(cold), median(hit), median(remote));
        println!("{target:<14} {c:>9.0} {h:>9.0} {r:>10.0} {:>10.1}x {:>12.1}x", c / h, c / r);
    }
    println!("cold: compile into an empty local cache (uploads to the S3 server); hit: the same again; remote: another empty local cache, same server");
    Ok(())
}

fn check_outcome(found: &str, expected: &str) -> Result<()> {
    if found != expected {
        bail!("expected a {expected}, the compile reported {found}");
    }
    Ok(())
}
