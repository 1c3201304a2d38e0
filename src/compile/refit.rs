//! [`refit`]: the weights of another checkpoint of an artifact's program — a `.pt2` of the
//! same model with other values (fine-tuned, another unmerged adapter) — written as the
//! artifact's weights file would be, so that a session can take them without recompiling.
//!
//! The archive is lowered again with the options the manifest records, bucket by bucket, and
//! each program must be the artifact's, source locations aside (a re-export from another
//! script moves them): then every weight plays the same part in the artifact's executables, and
//! the derived ones (fused projections, padded heads, folded BatchNorms) are computed from the
//! new values by the same recipes. Options the manifest does not record (`--precision`
//! overrides, `--shard-plan`) make the programs differ, and the refit is refused, never wrong.

use std::collections::BTreeMap;
use std::path::Path;

use torchtpu_passes::ir::{DType, Precision};

use super::weights::{weight_order, WeightsEntry};
use super::{lower_bucket, CompileRequest};
use crate::artifact::{self, Artifact, Bucket, Manifest};
use crate::buckets::Planned;
use crate::emit::{Attention, GroupedMm};
use crate::import::Program;
use crate::Error;

/// Writes to `out` the weights of `program` (another checkpoint, read from `model`) for the
/// programs of `art`, after checking that `program` lowers to them.
pub(crate) fn refit(program: &Program, model: &Path, art: &Artifact, out: &Path) -> Result<(), Error> {
    let m = &art.manifest;
    let refused =
        |why: String| Error::Unsupported(format!("`{}` is not a checkpoint of this artifact: {why}", model.display()));
    let mut req = request(m).map_err(|e| refused(format!("the manifest's options do not parse ({e})")))?;
    // Bounds of the dims this checkpoint's program has (a static export of the same weights has
    // none).
    req.buckets.retain(|c| program.bindings.contains_key(&c.key));
    let mut first = None;
    for bucket in &m.buckets {
        let lowered = lower_bucket(program, &planned(bucket), &req).map_err(|e| {
            refused(format!("it does not lower at the sizes of the artifact's bucket `{}` ({e})", bucket.name))
        })?;
        let ours = art.verified(&bucket.program, &bucket.program_sha256)?;
        let theirs = lowered.lowered.module.text.as_bytes();
        if without_locations(ours) != without_locations(theirs) {
            return Err(refused(format!(
                "it lowers to another program than the artifact's bucket `{}` (another architecture or size, \
                 or the artifact was compiled with options its manifest does not record: `--precision` \
                 overrides, `--shard-plan`)",
                bucket.name
            )));
        }
        first.get_or_insert(lowered);
    }
    let first = first.ok_or_else(|| Error::Internal("an artifact without buckets".into()))?;
    let order = weight_order(&first.lowered.graph);
    if order != m.weights.order {
        let differs = order.iter().zip(&m.weights.order).find(|(a, b)| a != b);
        let (a, b) = differs.map_or(("(fewer)", "(more)"), |(a, b)| (a.as_str(), b.as_str()));
        return Err(refused(format!("its weights are named otherwise: `{a}` where the artifact has `{b}`")));
    }
    // Damaged bytes are refused before they are written out as weights.
    program.archive.blake3_verifying()?;
    let weights = WeightsEntry::plan(program, &first.lowered.graph)?;
    let len = weights.byte_len();
    let write = |sink: &mut dyn crate::container::write::Sink| weights.write(sink).map_err(|e| e.to_string());
    artifact::write_streamed_file(out, len, Box::new(write))?;
    Ok(())
}

/// A compile request with the options that shaped `m`'s programs.
fn request(m: &Manifest) -> Result<CompileRequest, String> {
    let o = &m.options;
    let precision = Precision::parse(&o.precision).ok_or_else(|| format!("precision `{}`", o.precision))?;
    let mut req = CompileRequest::new(Vec::new(), precision);
    // `bucket_masks`, left out of the list, runs for every bucket of a dynamic program.
    req.passes = o.passes.clone();
    req.pass_options.pad_multiple = o.pad_multiple;
    req.pass_options.compute_dtype = match &o.compute_dtype {
        Some(d) => Some(DType::parse(d).ok_or_else(|| format!("compute dtype `{d}`"))?),
        None => None,
    };
    req.pass_options.mesh = m.sharding.as_ref().map(|s| s.mesh()).transpose()?;
    req.grouped_mm = match o.grouped_mm.as_deref() {
        None | Some("dense") => GroupedMm::Dense,
        Some("ragged") => GroupedMm::Ragged,
        Some(other) => return Err(format!("grouped-mm `{other}`")),
    };
    req.attention = attention(o.attention.as_deref())?;
    // The bounds the artifact was compiled with (a dim the export left unbounded took its own).
    req.buckets = m
        .signature
        .symbols
        .iter()
        .filter_map(|s| {
            Some(crate::buckets::Choice { key: s.name.clone(), sizes: crate::buckets::Sizes::UpTo(s.max?) })
        })
        .collect();
    Ok(req)
}

/// `--attention` as the manifest writes it: absent, `MODE` or `MODE:BLOCK`.
fn attention(text: Option<&str>) -> Result<(Attention, Option<i64>), String> {
    let Some(text) = text else { return Ok((Attention::Auto, None)) };
    let (mode, block) = match text.split_once(':') {
        Some((mode, block)) => (mode, Some(block.parse::<i64>().map_err(|_| format!("attention `{text}`"))?)),
        None => (text, None),
    };
    let mode = [Attention::Auto, Attention::Naive, Attention::Blocked]
        .into_iter()
        .find(|a| a.name() == mode)
        .ok_or_else(|| format!("attention `{text}`"))?;
    Ok((mode, block))
}

/// The bucket as the compile planned it: no sizes for a program of one size, else the values
/// of the symbols it serves.
fn planned(b: &Bucket) -> Planned {
    let values: BTreeMap<String, i64> =
        b.bindings.iter().filter(|(s, _)| b.serves.contains_key(*s)).map(|(s, &v)| (s.clone(), v)).collect();
    let serves = b.serves.iter().map(|(s, [lo, hi])| (s.clone(), (*lo, *hi))).collect();
    Planned { name: b.name.clone(), values, serves, padding_waste: b.padding_waste }
}

/// A printed module without its source locations: the `#loc` definitions and every
/// ` loc(...)` after an operation or an argument.
fn without_locations(text: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(text);
    let mut out = String::with_capacity(text.len());
    for line in text.lines().filter(|l| !l.starts_with("#loc")) {
        let mut rest = line;
        while let Some(at) = rest.find(" loc(") {
            out.push_str(&rest[..at]);
            rest = skip_parenthesized(&rest[at + 4..]);
        }
        out.push_str(rest);
        out.push('\n');
    }
    out.into_bytes()
}

/// What follows the parenthesized group `s` starts with (balanced, quotes respected).
fn skip_parenthesized(s: &str) -> &str {
    let (mut depth, mut quoted, mut escaped) = (0usize, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

#[cfg(test)]
mod tests {
    use super::without_locations;

    #[test]
    fn locations_are_left_out_and_nothing_else() {
        let a = "#loc1 = loc(\"a.py\":3:0)\n%0 = stablehlo.add %a, %b : tensor<2xf32> loc(\"add\"(#loc1))\n";
        let b = "#loc7 = loc(\"b (1).py\":9:0)\n%0 = stablehlo.add %a, %b : tensor<2xf32> loc(#loc7)\n";
        assert_eq!(without_locations(a.as_bytes()), without_locations(b.as_bytes()));
        let c = "%0 = stablehlo.subtract %a, %b : tensor<2xf32> loc(#loc7)\n";
        assert_ne!(without_locations(a.as_bytes()), without_locations(c.as_bytes()));
        let args = "func.func @main(%arg0: tensor<2xf32> loc(\"x\"), %arg1: tensor<2xf32> loc(unknown)) {";
        assert_eq!(
            String::from_utf8(without_locations(args.as_bytes())).unwrap(),
            "func.func @main(%arg0: tensor<2xf32>, %arg1: tensor<2xf32>) {\n"
        );
    }
}
