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
use std::path::{Path, PathBuf};

use torchtpu_passes::ir::{parse, print, Bounds, DType, Precision};
use torchtpu_passes::specialize::specialize;
use torchtpu_passes::{verify, PassOptions, Pipeline};

const EXPECT: &str = "; expect:";

/// One filetest, read from its file.
struct FileTest {
    passes: Vec<String>,
    options: PassOptions,
    /// `; bucket:` sizes (only with `bucket_masks`).
    bucket: Option<BTreeMap<String, i64>>,
    input: String,
    expected: String,
}

fn parse_file(text: &str) -> Result<FileTest, String> {
    let (head, expected) = text.split_once(EXPECT).ok_or(format!("no `{EXPECT}` line"))?;
    let mut test = FileTest {
        passes: Vec::new(),
        options: PassOptions::default(),
        bucket: None,
        input: String::new(),
        expected: expected.trim_start_matches([' ', '\n']).to_string(),
    };
    let mut input = Vec::new();
    for line in head.lines() {
        let Some(directive) = line.strip_prefix(';') else {
            input.push(line);
            continue;
        };
        let Some((key, value)) = directive.split_once(':') else { continue };
        let value = value.trim();
        match key.trim() {
            "run" => test.passes = value.split(',').map(|p| p.trim().to_string()).collect(),
            "pad-multiple" => {
                test.options.pad_multiple = Some(value.parse().map_err(|e| format!("pad-multiple: {e}"))?)
            }
            "compute-dtype" => test.options.compute_dtype = Some(dtype(value)?),
            "precision-override" => {
                let (pattern, level) = value.split_once('=').ok_or("precision-override: PATTERN=LEVEL")?;
                let level = Precision::parse(level).ok_or(format!("unknown precision `{level}`"))?;
                test.options.precision_overrides.push((pattern.to_string(), level));
            }
            "bucket" => test.bucket = Some(sizes(value)?),
            "mesh" => test.options.mesh = Some(torchtpu_passes::ir::Mesh::parse(value)?),
            _ => {} // a comment
        }
    }
    if test.passes.is_empty() {
        return Err("no `; run:` line".into());
    }
    test.input = input.join("\n") + "\n";
    Ok(test)
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
    let mut graph = parse(&test.input).map_err(|e| format!("input: {e}"))?;
    verify(&graph).map_err(|e| format!("input does not verify: {e}"))?;
    let mut options = test.options.clone();
    let mut names = test.passes.clone();
    let masks = names.iter().position(|p| p == "bucket_masks");
    match (masks, &test.bucket) {
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

fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(&root).expect("passes/tests").flatten() {
        if dir.path().is_dir() {
            for f in std::fs::read_dir(dir.path()).expect("a filetest folder").flatten() {
                if f.path().extension().is_some_and(|e| e == "ir") {
                    files.push(f.path());
                }
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_filetest_gives_its_expected_graph() {
    let bless = std::env::var("INSTA_UPDATE").is_ok_and(|v| v == "always");
    let filter = std::env::var("FILETEST_FILTER").unwrap_or_default();
    let mut failures = Vec::new();
    let all: Vec<PathBuf> = files().into_iter().filter(|f| f.to_string_lossy().contains(&filter)).collect();
    assert!(!all.is_empty(), "no filetests found");
    for path in &all {
        let shown = path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(path).display().to_string();
        let text = std::fs::read_to_string(path).expect("a readable filetest");
        let outcome = parse_file(&text).and_then(|t| run(&t).map(|got| (t, got)));
        match outcome {
            Err(e) => failures.push(format!("{shown}: {e}")),
            Ok((t, got)) if got != t.expected => {
                if bless {
                    let head = &text[..text.find(EXPECT).unwrap_or(text.len())];
                    std::fs::write(path, format!("{head}{EXPECT}\n{got}")).expect("a writable filetest");
                } else {
                    failures.push(format!("{shown}: the passes give\n{got}\nbut the file expects\n{}", t.expected));
                }
            }
            Ok(_) => {}
        }
    }
    assert!(failures.is_empty(), "{} of {} filetests failed:\n\n{}", failures.len(), all.len(), failures.join("\n\n"));
}
