//! Helpers of the whole-binary tests (each test file includes this module).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use serde_json::Value;

/// The test MLP's archive (`testdata/models/mlp.pt2`) with its input widened from 16 to `k`
/// and its hidden dim from 32 to `h`, so `fc1` is `[h, k]` (the other dims as they are): the
/// sizes and strides in the graph and the weight config scaled, the weights' bytes rewritten.
/// Returns the weights' bytes.
pub fn scaled_mlp(out: &Path, k: i64, h: i64) -> u64 {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/mlp.pt2");
    let mut zip = zip::ZipArchive::new(std::fs::File::open(src).expect("mlp.pt2")).expect("a zip");
    let dims: BTreeMap<i64, i64> = [(16, k), (32, h)].into_iter().collect();
    let sizes: BTreeMap<&str, i64> =
        [("weight_0", h * k), ("weight_1", h), ("weight_2", 8 * h), ("weight_3", 8)].into();
    let mut writer = zip::ZipWriter::new(std::io::BufWriter::new(std::fs::File::create(out).expect("writable")));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .with_alignment(64)
        .large_file(true);
    let mut weight_bytes = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).expect("an entry");
        let name = entry.name().to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).expect("readable");
        writer.start_file(name.as_str(), opts).expect("starts");
        let leaf = name.rsplit('/').next().unwrap_or_default();
        if let Some(&n) = sizes.get(leaf) {
            // f32 values that are not all equal, without holding them: one row at a time.
            let row: Vec<u8> = (0..k.min(n)).flat_map(|j| ((j % 7) as f32 * 0.01).to_le_bytes()).collect();
            let mut left = n;
            while left > 0 {
                let take = left.min(k);
                writer.write_all(&row[..take as usize * 4]).expect("writes");
                left -= take;
            }
            weight_bytes += n as u64 * 4;
        } else if name.ends_with(".json") {
            let mut json: Value = serde_json::from_slice(&bytes).expect("json");
            scale(&mut json, &dims);
            writer.write_all(&serde_json::to_vec(&json).expect("json")).expect("writes");
        } else {
            writer.write_all(&bytes).expect("writes");
        }
    }
    writer.finish().expect("finishes");
    weight_bytes
}

/// Every `{"as_int": n}` of a size or stride with `n` in `dims` becomes `dims[n]`.
fn scale(v: &mut Value, dims: &BTreeMap<i64, i64>) {
    match v {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "sizes" || key == "strides" {
                    for d in value.as_array_mut().into_iter().flatten() {
                        if let Some(n) = d.get("as_int").and_then(Value::as_i64).and_then(|n| dims.get(&n)) {
                            d["as_int"] = Value::from(*n);
                        }
                    }
                } else {
                    scale(value, dims);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| scale(i, dims)),
        _ => {}
    }
}
