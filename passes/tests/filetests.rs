//! Pass filetests: every `passes/tests/<pass>/*.ir` file is a graph, the passes to run on it and
//! the graph they must leave, in the IR's printed form (cranelift-style filetests).
//!
//! ```text
//! ; run: cse                      the passes, in pipeline order (`PASSES`)
//! ; pad-multiple: 128             options: pad-multiple, compute-dtype, precision-override, mesh
//! ; bucket: s0=16                 with `bucket_masks` in `run`: specialize at these sizes first
//! graph t {                       the input, verified before the passes run
//!   …
//! }
//! ; expect:
//! graph t {                       the printed graph after the passes
//!   …
//! }
//! ```
//!
//! `; expect: error` followed by `; <message>` lines expects the passes to fail with that
//! message instead. Run with `INSTA_UPDATE=always` (what `cargo xtask bless` sets) to rewrite
//! the expected part of every file from what the passes now produce; review with `git diff`.
//! `FILETEST_FILTER=cse/` runs only the files whose path contains that text.

use std::collections::BTreeMap;
use std::path::Path;

use torchtpu_passes::ir::{parse, print, Bounds, DType, Precision};
use torchtpu_passes::specialize::specialize;
use torchtpu_passes::testing::{filetests_under, run_filetests, unknown_directive, FileTest};
use torchtpu_passes::{verify, PassOptions, Pipeline};

/// What a pass filetest runs: its passes, their options and its bucket.
struct Run {
    passes: Vec<String>,
    options: PassOptions,
    /// `; bucket:` sizes (only with `bucket_masks`).
    bucket: Option<BTreeMap<String, i64>>,
}

const DIRECTIVES: [&str; 6] = ["run", "pad-multiple", "compute-dtype", "precision-override", "bucket", "mesh"];

fn read_directives(test: &FileTest) -> Result<Run, String> {
    let mut run = Run { passes: Vec::new(), options: PassOptions::default(), bucket: None };
    for (key, value) in &test.directives {
        let value = value.as_str();
        match key.as_str() {
            "run" => run.passes = value.split(',').map(|p| p.trim().to_string()).collect(),
            "pad-multiple" => run.options.pad_multiple = Some(value.parse().map_err(|e| format!("pad-multiple: {e}"))?),
            "compute-dtype" => run.options.compute_dtype = Some(dtype(value)?),
            "precision-override" => {
                let (pattern, level) = value.split_once('=').ok_or("precision-override: PATTERN=LEVEL")?;
                let level = Precision::parse(level).ok_or(format!("unknown precision `{level}`"))?;
                run.options.precision_overrides.push((pattern.to_string(), level));
            }
            "bucket" => run.bucket = Some(sizes(value)?),
            "mesh" => run.options.mesh = Some(torchtpu_passes::ir::Mesh::parse(value)?),
            other => return Err(unknown_directive(other, &DIRECTIVES)),
        }
    }
    if run.passes.is_empty() {
        return Err("no `; run:` line".into());
    }
    Ok(run)
}

fn dtype(name: &str) -> Result<DType, String> {
    DType::parse(name).ok_or(format!("unknown dtype `{name}`"))
}

/// `s0=16, s1=4`.
fn sizes(text: &str) -> Result<BTreeMap<String, i64>, String> {
    text.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').ok_or(format!("bucket: `{kv}` is not SYM=N"))?;
            Ok((k.trim().to_string(), v.trim().parse().map_err(|e| format!("bucket: {e}"))?))
        })
        .collect()
}

/// The text the passes leave: the printed graph, or `error` and the message as `;` lines.
fn run(test: &FileTest) -> Result<String, String> {
    let run = read_directives(test)?;
    let mut graph = parse(&test.input).map_err(|e| format!("input: {e}"))?;
    verify(&graph).map_err(|e| format!("input does not verify: {e}"))?;
    let mut options = run.options;
    let mut names = run.passes;
    let masks = names.iter().position(|p| p == "bucket_masks");
    match (masks, &run.bucket) {
        (Some(i), Some(values)) => {
            names.remove(i);
            let bounds: BTreeMap<String, Bounds> = graph.symbols().clone();
            graph = specialize(&graph, values).map_err(|e| format!("specialize: {e}"))?;
            options.bucket = Some(torchtpu_passes::bucket_masks::BucketSpec { values: values.clone(), bounds });
        }
        (None, None) => {}
        _ => return Err("`bucket_masks` in `; run:` and a `; bucket:` line go together".into()),
    }
    let pipeline = Pipeline::only(&names, &options)?.for_bucket(&options);
    Ok(match pipeline.run(&mut graph, |_, _| {}) {
        Ok(_) => print(&graph),
        Err(e) => format!("error\n; {e}\n"),
    })
}

#[test]
fn every_filetest_gives_its_expected_graph() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = filetests_under(&root.join("tests"));
    let (ran, failures) = run_filetests(&files, root, run);
    assert!(ran > 0, "no filetests found");
    assert!(failures.is_empty(), "{} of {ran} filetests failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// A misspelt directive fails its file instead of being read as a comment.
#[test]
fn an_unknown_directive_is_an_error() {
    let test = FileTest::parse("; run: dce\n; pad-multiples: 8\ngraph t {\n}\n; expect:\n").expect("a filetest");
    let err = read_directives(&test).err().unwrap_or_default();
    assert!(err.starts_with("unknown directive `; pad-multiples:`; this runner reads run, pad-multiple"), "{err}");
}
