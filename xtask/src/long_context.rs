//! `cargo xtask bench long-context`: what blocked attention buys at long sequences — libtpu's
//! figures per prompt length, naive against blocked, for a Llama-3.2-1B-shaped model (bf16) and
//! for a gpt-fast-style one whose causal mask is a `[max_seq, max_seq]` buffer indexed by the
//! positions; the CPU time per token of the two forms on the small `long_context_dyn`; and the
//! CPU time of a decode step over a cache of 32,768 positions at several filled lengths.

use std::path::Path;

use anyhow::{bail, Result};

use crate::measuring::{bench_model, figure, json, measure, Measured};
use crate::{path_str, root};

/// Prompt lengths (each compiled as its own bucket, so that one that does not fit leaves the
/// others' figures).
const LENGTHS: [i64; 4] = [1024, 8192, 16384, 32768];

/// Lengths of the CPU timing on the small model.
const CPU_LENGTHS: [i64; 3] = [1024, 4096, 16384];

/// Positions of the decode step timed over the 32,768-position cache.
const DECODE_POSITIONS: [i64; 4] = [1023, 4095, 16383, 32767];

pub(crate) fn long_context_bench(bin: &Path, tmp: &Path) -> Result<()> {
    let title = "long-context: Llama-3.2-1B-shaped (bf16, 16 layers, 32 heads) prefill, libtpu's figures per length";
    tpu_table(bin, tmp, ("llama_1b_long", title), &["tpu:v5e:1x1", "tpu:v6e:1x1"], &LENGTHS)?;
    println!("(blocks of 512 keys; the outputs hold the logits of every position: 2 bytes × 128,256 per token;");
    println!(" XLA's cost model counts a loop's body once: blocked FLOPs and bytes count one block per attention)");
    let title = "\ngpt-fast-style prefill (f32, 1 layer, 4 heads of 64; the causal mask a 1 GiB bool buffer \
                 [32768, 32768] indexed by the positions), libtpu's figures per length";
    tpu_table(bin, tmp, ("gpt_fast_long", title), &["tpu:v6e:1x1"], &LENGTHS[1..])?;
    println!("(the arguments hold the mask buffer: 1 GiB; blocked, each block slices its keys' columns of it)");
    cpu_table(bin, tmp)?;
    decode_table(bin, tmp)
}

/// A bench model's prefill per length, target and form: peak device memory and its
/// temporaries, whether it fits the chip's HBM, XLA's FLOPs and the compile time; a length
/// libtpu refuses (out of HBM at compile time) says so.
fn tpu_table(bin: &Path, tmp: &Path, (name, title): (&str, &str), targets: &[&str], lengths: &[i64]) -> Result<()> {
    let model = bench_model(name)?;
    let model = path_str(&model)?;
    println!("{title}");
    println!(
        "{:<12} {:>7} {:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "target", "tokens", "form", "peak GiB", "temp GiB", "HBM GiB", "TFLOP", "GiB read", "compile s"
    );
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    for &target in targets {
        for &len in lengths {
            for form in ["naive", "blocked"] {
                let art = tmp.join(format!("{name}.tpuexe")).display().to_string();
                let buckets = format!("input_ids:1={len}");
                let m = compile(bin, (model, &art), target, (&buckets, form), &["--weights", "external"])?;
                if !m.ok {
                    // libtpu's words: "the total memory required for HLO temporaries (…) exceeds …".
                    let why = m.stderr.find("memory required").map_or("the compile failed", |at| &m.stderr[at..]);
                    let why = why.lines().next().unwrap_or_default().chars().take(100).collect::<String>();
                    println!("{target:<12} {len:>7} {form:<8} refused by libtpu: {why}");
                    continue;
                }
                let manifest =
                    json(&measure(bin, &["inspect", &art, "--format", "json"])?, "inspect")?["manifest"].clone();
                let target_info = &manifest["targets"][0];
                let e = &target_info["executables"][0];
                println!(
                    "{target:<12} {len:>7} {form:<8} {:>9.2} {:>9.2} {:>9.1} {:>9.2} {:>9.1} {:>10.1}",
                    figure(&e["memory"]["peak_bytes"]) / GIB,
                    figure(&e["memory"]["temp_bytes"]) / GIB,
                    figure(&target_info["tpu"]["hbm_bytes_per_chip"]) / GIB,
                    figure(&e["cost"]["flops"]) / 1e12,
                    figure(&e["cost"]["bytes_accessed"]) / GIB,
                    figure(&e["compile_ms"]) / 1e3,
                );
            }
        }
    }
    Ok(())
}

/// CPU time per token of `long_context_dyn` (bidirectional attention, 2 heads of 16) at a few
/// lengths, naive against blocked, in one run: the ratio is the figure.
fn cpu_table(bin: &Path, tmp: &Path) -> Result<()> {
    let model = root().join("testdata/models/long_context_dyn.pt2");
    let model = path_str(&model)?;
    let lengths = CPU_LENGTHS.map(|l| l.to_string()).join(",");
    let buckets = format!("input_ids:1={lengths}");
    println!("\nlong-context on CPU: long_context_dyn, µs per token (median of 3 runs), naive against blocked");
    println!("{:>7} {:>10} {:>10} {:>8}", "tokens", "naive", "blocked", "ratio");
    let mut per_token = Vec::new();
    for form in ["naive", "blocked"] {
        let art = tmp.join(format!("long-{form}.tpuexe")).display().to_string();
        if !compile(bin, (model, &art), "cpu", (&buckets, form), &[])?.ok {
            bail!("long_context_dyn: compile with --attention {form} failed");
        }
        let mut row = Vec::new();
        for len in CPU_LENGTHS {
            let input = tmp.join(format!("ids-{len}.npy"));
            write_ids(&input, len)?;
            let input = input.display().to_string();
            let out = tmp.join("long-out").display().to_string();
            let mut runs = Vec::new();
            for _ in 0..3 {
                let r = measure(bin, &["run", &art, &input, "--out-dir", &out, "--format", "json"])?;
                runs.push(json(&r, "run")?["run_ms"].as_f64().unwrap_or(f64::NAN));
            }
            row.push(crate::measuring::median(runs) * 1e3 / len as f64);
        }
        per_token.push(row);
    }
    for (i, len) in CPU_LENGTHS.iter().enumerate() {
        let (naive, blocked) = (per_token[0][i], per_token[1][i]);
        println!("{len:>7} {naive:>10.2} {blocked:>10.2} {:>7.2}x", blocked / naive);
    }
    Ok(())
}

/// A decode step of `hf_static_cache_32k` (transformers' static-cache export, caches of 32,768
/// positions) at a few positions, naive against blocked: the median of 7 calls each (`run
/// --repeat`), in one run. Blocked, a step skips the blocks past its position.
fn decode_table(bin: &Path, tmp: &Path) -> Result<()> {
    let model = bench_model("hf_static_cache_32k")?;
    let model = path_str(&model)?;
    println!("\ndecode on CPU: hf_static_cache_32k (2 layers, caches of 32,768 positions), ms per step (median of 7)");
    println!("{:>9} {:>10} {:>10} {:>8}", "position", "naive", "blocked", "ratio");
    let ids = tmp.join("decode-ids.npy");
    write_ints(&ids, &[1, 1], &[5])?;
    let mut per_form = Vec::new();
    for form in ["naive", "blocked"] {
        let art = tmp.join(format!("decode-{form}.tpuexe")).display().to_string();
        let args = ["compile", model, "-o", &art, "--target", "cpu", "--attention", form, "--no-cache", "-q"];
        if !measure(bin, &args)?.ok {
            bail!("hf_static_cache_32k: compile with --attention {form} failed");
        }
        let mut row = Vec::new();
        for pos in DECODE_POSITIONS {
            let position = tmp.join(format!("decode-pos-{pos}.npy"));
            write_ints(&position, &[1], &[pos])?;
            let (ids, position) = (ids.display().to_string(), position.display().to_string());
            let out = tmp.join("decode-out").display().to_string();
            let r =
                measure(bin, &["run", &art, &ids, &position, "--out-dir", &out, "--repeat", "7", "--format", "json"])?;
            row.push(json(&r, "run")?["run_ms"].as_f64().unwrap_or(f64::NAN));
        }
        per_form.push(row);
    }
    for (i, pos) in DECODE_POSITIONS.iter().enumerate() {
        let (naive, blocked) = (per_form[0][i], per_form[1][i]);
        println!("{pos:>9} {naive:>10.2} {blocked:>10.2} {:>7.2}x", blocked / naive);
    }
    Ok(())
}

/// `compile MODEL -o ART --target TARGET --buckets BUCKETS --attention FORM EXTRA… --no-cache -q`.
fn compile(
    bin: &Path,
    (model, art): (&str, &str),
    target: &str,
    (buckets, form): (&str, &str),
    extra: &[&str],
) -> Result<Measured> {
    let mut args = vec!["compile", model, "-o", art, "--target", target, "--buckets", buckets, "--attention", form];
    args.extend_from_slice(extra);
    args.extend(["--no-cache", "-q"]);
    measure(bin, &args)
}

/// Token ids `0, 1, …` modulo the vocabulary (128), `i64[1, len]`, as `.npy`.
fn write_ids(path: &Path, len: i64) -> Result<()> {
    let ids: Vec<i64> = (0..len).map(|i| i % 128).collect();
    write_ints(path, &[1, len], &ids)
}

/// `values` as an `i64` array of `shape`, as `.npy`.
fn write_ints(path: &Path, shape: &[i64], values: &[i64]) -> Result<()> {
    let dims = shape.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    let dims = if shape.len() == 1 { format!("{dims},") } else { dims };
    let mut header = format!("{{'descr': '<i8', 'fortran_order': False, 'shape': ({dims}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for v in values {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(path, bytes)?;
    Ok(())
}
