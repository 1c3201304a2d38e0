//! Every test model: IR snapshot, weights bit for bit against the eager `state_dict`, the
//! `inspect` report, and in-place (memory-mapped) weight access.

use std::borrow::Cow;

use torchtpu_passes::ir::{print, DType};
use torchtpu_passes::testing::settings;

#[cfg(feature = "mlir")]
use super::run_cli;
use super::{model_paths, testdata};
use crate::import::import;

#[test]
fn ir_snapshots() {
    let _guard = settings("import").bind_to_scope();
    insta::glob!("../../testdata/models", "*.pt2", |path| {
        let program = import(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        insta::assert_snapshot!("ir", print(&program.graph));
    });
}

#[test]
fn printing_is_deterministic() {
    for path in model_paths() {
        let a = print(&import(&path).expect("imports").graph);
        let b = print(&import(&path).expect("imports").graph);
        assert_eq!(a, b, "{}", path.display());
    }
}

/// The printed IR is a lossless text form: every test model's graph, as imported and after every
/// pass (padding to 128, bf16 compute: derived weights of every recipe), parses back to a graph
/// that verifies and prints the same text.
#[test]
fn printed_ir_parses_back_to_itself() {
    use torchtpu_passes::ir::parse;
    use torchtpu_passes::{verify, PassOptions, Pipeline};

    let round_trip = |what: &str, text: &str| {
        let graph = parse(text).unwrap_or_else(|e| panic!("{what}: {e}"));
        verify(&graph).unwrap_or_else(|e| panic!("{what}: the parsed graph does not verify: {e}"));
        assert_eq!(print(&graph), text, "{what}: printed differently after parsing");
    };
    let options = PassOptions { pad_multiple: Some(128), compute_dtype: Some(DType::BF16), ..PassOptions::default() };
    let mut derived = 0;
    for path in model_paths() {
        let program = import(&path).expect("imports");
        let name = path.display().to_string();
        round_trip(&name, &print(&program.graph));
        let mut sizes: std::collections::BTreeMap<String, i64> =
            program.bindings.iter().filter_map(|(s, b)| Some((s.clone(), b.example?))).collect();
        let computed = torchtpu_passes::specialize::computed_bounds(&program.graph, &sizes).expect("bounds");
        sizes.extend(computed);
        let mut graph = torchtpu_passes::specialize::specialize(&program.graph, &sizes).expect("specializes");
        Pipeline::standard(&options).run(&mut graph, |_, _| {}).expect("the passes run");
        let text = print(&graph);
        derived += text.matches("input.derived").count();
        round_trip(&format!("{name} after the passes"), &text);
    }
    assert!(derived > 20, "only {derived} derived weights were printed and parsed");
}

/// The generator records every tensor of `ep.state_dict` and `ep.constants` (dtype, shape and
/// the sha256 of its contiguous bytes, from eager torch); the archive's weights, decoded through
/// sizes/strides/offset, must reproduce them.
#[test]
fn weights_match_eager_state_dict_bit_for_bit() {
    let mut checked = 0;
    for path in model_paths() {
        let program = import(&path).expect("imports");
        let stem = path.file_stem().expect("file name").to_string_lossy().into_owned();
        // A model with another's weights points to its digests (`state_dict_of`).
        let meta = |name: &str| -> serde_json::Value {
            let text = std::fs::read_to_string(testdata().join("models").join(name).join("meta.json")).expect("meta");
            serde_json::from_str(&text).expect("meta.json")
        };
        let own = meta(&stem);
        let holder = own["state_dict_of"].as_str().map_or_else(|| own.clone(), meta);
        let reference = holder["state_dict"].as_object().unwrap_or_else(|| panic!("{stem}: no state_dict digests"));
        let names: Vec<&str> = reference.keys().map(String::as_str).collect();
        let ours: Vec<&str> = program.weights.keys().map(String::as_str).collect();
        assert_eq!(ours, names, "{stem}: the archive's tensors and the eager state_dict differ");
        for (fqn, expected) in reference {
            let w = &program.weights[fqn];
            assert_eq!(expected["dtype"].as_str(), Some(w.dtype.name()), "{stem}: `{fqn}` dtype");
            let shape: Vec<i64> =
                expected["shape"].as_array().expect("shape").iter().filter_map(|d| d.as_i64()).collect();
            assert_eq!(w.sizes, shape, "{stem}: `{fqn}` shape");
            let bytes = w.contiguous_bytes(&program.archive).expect("decodes");
            let digest = crate::digest::sha256_hex(&bytes);
            assert_eq!(expected["sha256"].as_str(), Some(digest.as_str()), "{stem}: `{fqn}` bytes differ from eager's");
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} tensors checked");
}

/// Contiguous weights are borrowed from the memory map, at 64-byte aligned offsets.
#[test]
fn weights_are_read_in_place() {
    let program = import(&testdata().join("models/mlp.pt2")).expect("imports");
    for w in program.weights.values() {
        let offset = program.archive.data_offset(&w.entry).expect("entry exists");
        assert_eq!(offset % 64, 0, "`{}` payload at offset {offset}", w.fqn);
        let bytes = w.contiguous_bytes(&program.archive).expect("decodes");
        assert!(matches!(bytes, Cow::Borrowed(_)), "`{}` was copied", w.fqn);
    }
}

/// The edge-case model holds a non-contiguous parameter, fp16/bf16 parameters, an int64
/// buffer, a non-persistent buffer, two overlapping views of one storage and a constant.
#[test]
fn edge_case_weights_keep_their_layout() {
    let program = import(&testdata().join("models/edge_cases.pt2")).expect("imports");
    let w = &program.weights;
    let transposed = w.values().find(|w| w.strides.len() == 2 && w.strides[0] < w.strides[1]);
    assert!(transposed.is_some(), "no non-contiguous weight among {:?}", w.keys().collect::<Vec<_>>());
    for dtype in [DType::F16, DType::BF16, DType::I64] {
        assert!(w.values().any(|w| w.dtype == dtype), "no {dtype} weight");
    }
    let a = &w["view_a"];
    let b = &w["view_b"];
    assert_eq!(a.entry, b.entry, "overlapping views share one storage file");
    assert_ne!(a.storage_offset, b.storage_offset);
    assert!(w.values().any(|w| w.source == crate::import::PayloadSource::Constants));
}

#[cfg(feature = "mlir")]
#[test]
fn inspect_json_reports_the_dynamic_symbol_and_bounds() {
    let path = testdata().join("models/llama_tiny_dyn.pt2");
    let (code, out, err) = run_cli(&["inspect", path.to_str().expect("utf-8 path"), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(report["format"], "torchtpu-inspect/1");
    assert_eq!(report["schema_version"], "8.20");
    assert_eq!(report["inputs"][0]["name"], "input_ids");
    assert_eq!(report["inputs"][0]["dtype"], "i64");
    let sym = report["inputs"][0]["dims"][1].as_str().expect("symbolic dim");
    let symbol = &report["symbols"][0];
    assert_eq!(symbol["name"], sym);
    assert_eq!((symbol["min"].as_i64(), symbol["max"].as_i64()), (Some(2), Some(512)));
    assert_eq!((symbol["input"].as_str(), symbol["dim"].as_u64()), (Some("input_ids"), Some(1)));
    assert_eq!(report["outputs"][0]["dims"], serde_json::json!([1, sym, 256]));
    assert_eq!(report["parameters"]["elements"], 180_544);
    assert_eq!(report["ops"]["aten.mm.default"], 15);
    assert_eq!(report["unsupported_ops"], serde_json::json!({}));
}

/// The JSON report has exactly the fields its published schema requires, and every dtype it
/// prints is one the schema lists.
#[cfg(feature = "mlir")]
#[test]
fn inspect_json_follows_its_schema() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schemas/inspect.schema.json")).expect("valid schema");
    let required: Vec<&str> = schema["required"].as_array().expect("list").iter().filter_map(|v| v.as_str()).collect();
    let dtypes = &schema["$defs"]["value"]["properties"]["dtype"]["enum"];
    for path in model_paths() {
        let (code, out, err) = run_cli(&["inspect", path.to_str().expect("utf-8 path"), "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let report: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
        let mut keys: Vec<&str> = report.as_object().expect("object").keys().map(String::as_str).collect();
        let mut want = required.clone();
        keys.sort();
        want.sort();
        assert_eq!(keys, want, "{}", path.display());
        for v in report["inputs"].as_array().into_iter().chain(report["outputs"].as_array()).flatten() {
            assert!(dtypes.as_array().expect("enum").contains(&v["dtype"]), "{v}");
        }
    }
}

#[cfg(feature = "mlir")]
#[test]
fn inspect_reports_every_model() {
    let _guard = settings("inspect").bind_to_scope();
    for path in model_paths() {
        let rel = path.strip_prefix(env!("CARGO_MANIFEST_DIR")).expect("inside the workspace");
        let (code, out, err) = run_cli(&["inspect", path.to_str().expect("utf-8 path")]);
        assert_eq!(code, 0, "{err}");
        let name = rel.file_name().expect("file name").to_string_lossy().into_owned();
        let out = out.replace(path.to_str().expect("utf-8"), &rel.display().to_string());
        insta::assert_snapshot!(name, out);
    }
}

/// Tied weights (GPT-2's `lm_head` and `wte`) are one storage and count once.
#[test]
fn tied_weights_count_once() {
    let path = testdata().join("models/gpt2_tiny.pt2");
    let program = import(&path).expect("imports");
    let w = &program.weights;
    let (head, wte) = (&w["model.lm_head.weight"], &w["model.transformer.wte.weight"]);
    assert_eq!((&head.entry, head.storage_offset), (&wte.entry, wte.storage_offset));
    let report = crate::inspect::report(&program, "gpt2_tiny.pt2");
    let all: i64 = w.values().filter(|w| w.is_param).map(|w| w.numel()).sum();
    assert_eq!(report.parameters.elements, all - head.numel());
}

/// A ZIP64 archive (64-bit sizes and offsets) reads like any other.
#[test]
fn reads_zip64_archives() {
    use std::io::{Read, Write};
    let src = testdata().join("models/mlp.pt2");
    let mut zin = zip::ZipArchive::new(std::fs::File::open(&src).expect("opens")).expect("zip");
    let dir = std::env::temp_dir().join(format!("torchtpu-zip64-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let dst = dir.join("mlp.pt2");
    let mut zout = zip::ZipWriter::new(std::fs::File::create(&dst).expect("creates"));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored).large_file(true);
    for i in 0..zin.len() {
        let mut f = zin.by_index(i).expect("entry");
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).expect("reads");
        zout.start_file(f.name(), opts).expect("starts");
        zout.write_all(&buf).expect("writes");
    }
    zout.finish().expect("finishes");
    let a = import(&src).expect("original imports");
    let b = import(&dst).expect("zip64 copy imports");
    assert_eq!(print(&a.graph), print(&b.graph));
    for (fqn, w) in &a.weights {
        let x = w.contiguous_bytes(&a.archive).expect("decodes");
        let y = b.weights[fqn].contiguous_bytes(&b.archive).expect("decodes");
        assert_eq!(x, y, "{fqn}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
