//! `plan`: its fit column against libtpu's own figures for the same compile, the estimate's
//! arithmetic from the chip table, refusals in the compiler's words, and a chip table of one's
//! own. Needs libtpu from `cargo xtask setup`.

use std::path::Path;

use serde_json::Value;

use super::parity::TempDir;
use super::{run_cli, testdata};

/// The plan of the tiny Llama on one v5e chip and a v6e 2x2 slice, as JSON.
fn plan_json(extra: &[&str]) -> Value {
    let model = testdata().join("models/llama_tiny.pt2");
    let model = model.to_str().expect("utf-8");
    let args = ["plan", model, "--slices", "tpu:v5e:1x1,tpu:v6e:2x2", "--format", "json", "--no-cache", "-q"];
    let (code, text, err) = run_cli(&[&args[..], extra].concat());
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&text).expect("json")
}

/// Each compiled row's peak and HBM are libtpu's for that slice and mesh (an artifact compiled
/// with the same options reports the same), `fits` is `peak <= HBM`, and the estimate is
/// `max(FLOPs / peak rate, bytes / HBM bandwidth) + collective bytes / ICI bandwidth` with the
/// bundled table's figures, priced at chips × price per chip-hour.
#[test]
fn plan_fits_as_libtpu_says_and_its_estimate_adds_up() {
    let report = plan_json(&[]);
    let table: Value =
        serde_json::from_str(include_str!("../../schemas/tpu-chips.json")).expect("the bundled chip table");
    let candidates = report["candidates"].as_array().expect("candidates");
    // One chip, then the 2x2 slice along tp, fsdp, dp, fsdp×tp and dp×tp.
    let rows: Vec<(&str, Option<&str>)> =
        candidates.iter().map(|c| (c["slice"].as_str().expect("slice"), c["mesh"].as_str())).collect();
    assert_eq!(
        rows,
        [
            ("tpu:v5e:1x1", None),
            ("tpu:v6e:2x2", Some("tp=4")),
            ("tpu:v6e:2x2", Some("fsdp=4")),
            ("tpu:v6e:2x2", Some("dp=4")),
            ("tpu:v6e:2x2", Some("fsdp=2,tp=2")),
            ("tpu:v6e:2x2", Some("dp=2,tp=2"))
        ]
    );
    // 2 heads do not split 4 ways; a batch of 1 neither: said in the shard pass's words.
    assert!(candidates[1]["refused"].as_str().is_some_and(|r| r.contains("do not divide along mesh axis `tp`")));
    for dp in [3, 5] {
        assert!(candidates[dp]["refused"].as_str().is_some_and(|r| r.contains("batch dim")), "{}", candidates[dp]);
    }
    let tokens = report["tokens_per_call"].as_f64().expect("token ids [1, 16]");
    assert_eq!(tokens, 16.0);
    let mut compiled = 0;
    for c in candidates {
        let Some(f) = c.get("compiled") else { continue };
        compiled += 1;
        let figure = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k}: {f}"));
        assert_eq!(f["fits"].as_bool(), Some(figure("peak_bytes") <= figure("hbm_bytes")));
        let generation = c["slice"].as_str().expect("slice").split(':').nth(1).expect("generation");
        let chip = &table["chips"][generation];
        let rate = |k: &str| chip[k].as_f64().expect("a figure");
        let e = &f["estimate"];
        let compute = figure("flops") / (rate("bf16_tflops") * 1e12);
        let memory = figure("bytes_accessed") / (rate("hbm_gb_per_s") * 1e9);
        let collective = figure("collective_bytes") / (rate("ici_gb_per_s") * 1e9);
        let call = compute.max(memory) + collective;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-12);
        assert!(close(e["call_s"].as_f64().expect("call_s"), call), "{e} against {call}");
        let hour = c["chips"].as_f64().expect("chips") * rate("usd_per_chip_hour");
        assert!(close(e["usd_per_hour"].as_f64().expect("price"), hour));
        let per_mtok = hour / 3600.0 * call / tokens * 1e6;
        assert!(close(e["usd_per_million_tokens"].as_f64().expect("per Mtok"), per_mtok));
    }
    assert_eq!(compiled, 3);
    // The same compile as an artifact: libtpu's peak and HBM, as plan reports them.
    let tmp = TempDir::new("plan");
    let out = tmp.0.join("llama.tpuexe");
    let model = testdata().join("models/llama_tiny.pt2");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let args = ["compile", &s(&model), "-o", &s(&out), "--target", "tpu:v6e:2x2", "--mesh", "fsdp=2,tp=2"];
    let (code, _, err) = run_cli(&[&args[..], &["--no-cache", "-q"]].concat());
    assert_eq!(code, 0, "{err}");
    let (code, text, err) = run_cli(&["inspect", &s(&out), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let inspected: Value = serde_json::from_str(&text).expect("json");
    let target = &inspected["manifest"]["targets"][0];
    let f = &candidates[4]["compiled"];
    assert_eq!(f["hbm_bytes"], target["tpu"]["hbm_bytes_per_chip"]);
    assert_eq!(f["peak_bytes"], target["executables"][0]["memory"]["peak_bytes"]);
}

/// `--prices FILE` replaces the bundled table; a file that is no chip table is a usage error
/// that says what is wrong.
#[test]
fn plan_takes_a_chip_table_of_ones_own() {
    let tmp = TempDir::new("plan-prices");
    let mut table: Value =
        serde_json::from_str(include_str!("../../schemas/tpu-chips.json")).expect("the bundled chip table");
    table["chips"]["v5e"]["usd_per_chip_hour"] = Value::from(100.0);
    let file = tmp.0.join("chips.json");
    std::fs::write(&file, table.to_string()).expect("written");
    let report = plan_json(&["--prices", file.to_str().expect("utf-8")]);
    assert_eq!(report["candidates"][0]["compiled"]["estimate"]["usd_per_hour"].as_f64(), Some(100.0));
    table["chips"]["v5e"]["hbm_gb_per_s"] = Value::from(-1.0);
    std::fs::write(&file, table.to_string()).expect("written");
    let model = testdata().join("models/llama_tiny.pt2");
    let args = ["plan", model.to_str().expect("utf-8"), "--prices", file.to_str().expect("utf-8")];
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`v5e` needs positive, finite figures"), "{err}");
}

/// `--mesh auto` for a v5e 2x2 slice: among the meshes that fit, the one with the shortest
/// call estimated from libtpu's cost model, said on stderr with `-v` (every mesh tried) and
/// recorded in the manifest.
#[test]
fn mesh_auto_on_a_tpu_slice_takes_the_shortest_estimated_call() {
    let tmp = TempDir::new("mesh-auto-tpu");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let (model, out) = (testdata().join("models/llama_tiny.pt2"), tmp.0.join("llama.tpuexe"));
    let args = ["compile", &s(&model), "-o", &s(&out), "--target", "tpu:v5e:2x2", "--mesh", "auto", "-v"];
    let (code, _, said) = run_cli(&[&args[..], &["--no-cache"]].concat());
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("mesh tp=4: refused") && said.contains("mesh fsdp=4: peak"), "{said}");
    let (code, text, err) = run_cli(&["inspect", &s(&out), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let inspected: Value = serde_json::from_str(&text).expect("json");
    let choice = &inspected["manifest"]["sharding"]["chosen"];
    let estimates: Vec<(String, f64)> = choice["tried"]
        .as_array()
        .expect("tried")
        .iter()
        .filter_map(|t| Some((t["mesh"].as_str()?.to_string(), t["estimated_call_s"].as_f64()?)))
        .collect();
    assert_eq!(estimates.len(), 2, "{choice}");
    let fastest = estimates.iter().min_by(|a, b| a.1.total_cmp(&b.1)).expect("one");
    assert_eq!(choice["chosen"].as_str(), Some(fastest.0.as_str()));
    assert!(said.contains(&format!("mesh auto: {} (the shortest estimated call", fastest.0)), "{said}");
    let mesh = &inspected["manifest"]["sharding"]["mesh"];
    let written: Vec<String> = mesh
        .as_array()
        .expect("axes")
        .iter()
        .map(|a| format!("{}={}", a["name"].as_str().unwrap_or("?"), a["size"]))
        .collect();
    assert_eq!(written.join(","), fastest.0);
}
