//! `cargo xtask bench bucket-cost`: what size buckets cost on a TPU by libtpu's cost model,
//! the bucket a real size runs in against a program compiled for exactly that size.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::measuring::{json, measure};

/// A model, the `--buckets` keys of its dynamic dims, and real sizes (one value per key).
type Case = (&'static str, &'static [&'static str], &'static [&'static [i64]]);

/// What buckets cost on a TPU, from libtpu's cost model (deviceless, `tpu:v6e:1x1`): for real
/// sizes in each bucket of two dynamic models (its lowest, a middle one and its edge − 1), the
/// FLOPs and peak memory of the bucket's program against a program compiled for exactly that
/// size (`--buckets SYM=N`). The default bucket choice (`pow2`) is judged by these ratios.
pub(crate) fn bucket_cost_bench(bin: &Path, tmp: &Path) -> Result<()> {
    let cases: [Case; 2] = [
        (
            "llama_tiny_dyn",
            &["input_ids:1"],
            &[&[3], &[5], &[7], &[9], &[12], &[15], &[33], &[48], &[63], &[129], &[200], &[255]],
        ),
        ("moe_dyn", &["input_ids:0", "input_ids:1"], &[&[1, 5], &[3, 5], &[3, 40], &[5, 33], &[7, 63], &[8, 17]]),
    ];
    println!(
        "bucket-cost: libtpu's cost model (tpu:v6e:1x1, deviceless) of each bucket's program against the exact size's"
    );
    println!(
        "{:>16} {:>10} {:>10} {:>12} {:>12} {:>7} {:>11} {:>11} {:>7}",
        "model", "size", "bucket", "bucket GFLOP", "exact GFLOP", "ratio", "bucket MiB", "exact MiB", "ratio"
    );
    for (model, keys, sizes) in cases {
        let pt2 = format!("testdata/models/{model}.pt2");
        let art = tmp.join(format!("{model}-pow2.tpuexe")).display().to_string();
        compile_tpu(bin, &pt2, &art, &[])?;
        let buckets = tpu_costs(bin, &art)?;
        for real in sizes {
            let exact = tmp.join(format!("{model}-exact.tpuexe")).display().to_string();
            let choices: Vec<String> = keys.iter().zip(*real).map(|(k, n)| format!("{k}={n}")).collect();
            compile_tpu(bin, &pt2, &exact, &choices)?;
            let exact_cost = tpu_costs(bin, &exact)?;
            let ((_, exact_at), (ef, em)) = exact_cost.first().context("no executable")?;
            // The bucket that serves the size: the first at least as large in every symbol.
            let (name, (bf, bm)) = buckets
                .iter()
                .find(|((_, at), _)| exact_at.iter().all(|(s, n)| at.get(s).is_some_and(|v| v >= n)))
                .context("no bucket serves the size")?;
            let size = real.iter().map(i64::to_string).collect::<Vec<_>>().join("x");
            let mib = |b: f64| b / (1024.0 * 1024.0);
            println!(
                "{model:>16} {size:>10} {:>10} {:>12.4} {:>12.4} {:>6.2}x {:>11.2} {:>11.2} {:>6.2}x",
                name.0,
                bf / 1e9,
                ef / 1e9,
                bf / ef,
                mib(*bm),
                mib(*em),
                bm / em
            );
        }
    }
    println!("ratio: bucket / exact size; peak: libtpu's peak device memory of the program (weights included)");
    Ok(())
}

/// `compile` for `tpu:v6e:1x1` only, with these `--buckets` choices.
fn compile_tpu(bin: &Path, pt2: &str, out: &str, buckets: &[String]) -> Result<()> {
    let mut args = vec!["compile", pt2, "-o", out, "--target", "tpu:v6e:1x1", "--no-cache", "-q"];
    for b in buckets {
        args.extend(["--buckets", b.as_str()]);
    }
    let m = measure(bin, &args)?;
    if !m.ok {
        bail!("{pt2}: compile {buckets:?} failed:\n{}", m.stderr);
    }
    Ok(())
}

/// Each TPU executable's bucket (name, the value of each symbol), XLA's FLOPs and the peak
/// memory, from the artifact's manifest.
type BucketCost = ((String, BTreeMap<String, i64>), (f64, f64));

fn tpu_costs(bin: &Path, art: &str) -> Result<Vec<BucketCost>> {
    let m = measure(bin, &["inspect", art, "--format", "json"])?;
    let v = json(&m, "inspect")?;
    let manifest = &v["manifest"];
    let mut out = vec![];
    for b in manifest["buckets"].as_array().into_iter().flatten() {
        let name = b["name"].as_str().unwrap_or_default().to_string();
        let values =
            b["bindings"].as_object().into_iter().flatten().filter_map(|(s, v)| Some((s.clone(), v.as_i64()?)));
        let values: BTreeMap<String, i64> = values.collect();
        let exe = manifest["targets"][0]["executables"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["bucket"] == name.as_str())
            .context("a bucket has no TPU executable")?;
        let flops = exe["cost"]["flops"].as_f64().context("no flops in the manifest")?;
        let peak = exe["memory"]["peak_bytes"].as_f64().context("no peak in the manifest")?;
        out.push(((name, values), (flops, peak)));
    }
    Ok(out)
}
