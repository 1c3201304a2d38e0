//! Emitter filetests (cranelift's `test compile`): every `tests/emit/**/*.ir` file is a graph in
//! the IR's printed form and the StableHLO the emitter makes of it, with no plugin involved.
//!
//! ```text
//! ; Why this case exists (any `;` line that is not a directive is a comment).
//! ; precision: highest             options: precision (default, high, highest),
//! ; grouped-mm: ragged                          grouped-mm (dense, ragged)
//! graph t {                         the input: parsed, verified, emitted
//!   …
//! }
//! ; expect:
//! "builtin.module"() ({ …          the generic-form StableHLO text
//! ```
//!
//! `; expect: error` followed by `; <message>` lines expects the input to be refused instead:
//! by the parser, the verifier (`tests/emit/verify/`: what a wrong graph gets) or the emitter.
//! `INSTA_UPDATE=always` (what `cargo xtask bless` sets) rewrites the expected part of every
//! file from what the emitter now produces; review with `git diff`. `FILETEST_FILTER=mm`
//! runs only the files whose path contains that text. Every `Op` variant has at least one
//! file (`every_op_variant_has_an_emitter_filetest`); a new op gets one from its op case with
//! `cargo run --example emit_filetest_inputs`.
//!
//! The same graphs, which hold every `Op` variant, feed `every_pass_takes_every_op`: each pass
//! alone on each of them must neither panic nor break the graph.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use torchtpu_passes::ir::{parse, Op, Precision};
use torchtpu_passes::testing::{filetests_under, run_filetests, unknown_directive, FileTest};
use torchtpu_passes::verify;

use crate::emit::{emit, Attention, EmitOptions, GroupedMm};

/// `<workspace>/tests/emit`.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("emit")
}

fn files() -> Vec<PathBuf> {
    filetests_under(&root())
}

const DIRECTIVES: [&str; 4] = ["precision", "grouped-mm", "attention", "attention-block"];

/// The emitter's options from a filetest's directives.
fn options(test: &FileTest) -> Result<EmitOptions, String> {
    let mut options = EmitOptions::default();
    for (key, value) in &test.directives {
        match key.as_str() {
            "precision" => options.precision = Precision::parse(value).ok_or(format!("unknown precision `{value}`"))?,
            "grouped-mm" => {
                options.grouped_mm = match value.as_str() {
                    "dense" => GroupedMm::Dense,
                    "ragged" => GroupedMm::Ragged,
                    other => return Err(format!("unknown grouped-mm `{other}`")),
                }
            }
            "attention" => {
                options.attention = match value.as_str() {
                    "auto" => Attention::Auto,
                    "naive" => Attention::Naive,
                    "blocked" => Attention::Blocked,
                    other => return Err(format!("unknown attention `{other}`")),
                }
            }
            "attention-block" => {
                options.attention_block = Some(value.parse().map_err(|_| format!("bad attention-block `{value}`"))?)
            }
            other => return Err(unknown_directive(other, &DIRECTIVES)),
        }
    }
    Ok(options)
}

/// What the emitter makes of the input: the module's text, or `error` and the message as `;`
/// lines.
fn run(test: &FileTest) -> Result<String, String> {
    let options = options(test)?;
    let refused =
        |e: String| format!("error\n{}\n", e.lines().map(|l| format!("; {l}")).collect::<Vec<_>>().join("\n"));
    let graph = match parse(&test.input) {
        Ok(g) => g,
        Err(e) => return Ok(refused(format!("parse: {e}"))),
    };
    if let Err(e) = verify(&graph) {
        return Ok(refused(format!("verify: {e}")));
    }
    Ok(match emit(&graph, &options) {
        Ok(emitted) => emitted.text,
        Err(e) => refused(format!("emit: {e}")),
    })
}

#[test]
fn every_emitter_filetest_gives_its_expected_stablehlo() {
    let (ran, failures) = run_filetests(&files(), Path::new(env!("CARGO_MANIFEST_DIR")), run);
    assert!(ran > 0, "no emitter filetests under tests/emit/");
    assert!(failures.is_empty(), "{} of {ran} emitter filetests differ:\n{}", failures.len(), failures.join("\n"));
}

/// The `Op` variant of every node of every filetest that parses.
fn variants_with_filetests() -> BTreeSet<&'static str> {
    let mut seen = BTreeSet::new();
    for path in files() {
        let text = std::fs::read_to_string(&path).expect("a readable filetest");
        let Ok(test) = FileTest::parse(&text) else { continue };
        let Ok(graph) = parse(&test.input) else { continue };
        for id in graph.node_ids() {
            seen.insert(graph.node(id).op.variant());
        }
    }
    seen
}

#[test]
fn every_op_variant_has_an_emitter_filetest() {
    let covered = variants_with_filetests();
    let missing: Vec<&str> = Op::VARIANTS.iter().copied().filter(|v| !covered.contains(v)).collect();
    assert!(missing.is_empty(), "`Op` variants with no emitter filetest in tests/emit/: {missing:?}");
}

#[test]
fn verifier_filetests_expect_errors() {
    let files = filetests_under(&root().join("verify"));
    assert!(files.len() >= 3, "tests/emit/verify/ has {} filetests, not 3", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a readable filetest");
        let test = FileTest::parse(&text).expect("a filetest");
        assert!(test.expected.starts_with("error\n"), "{} must expect an error", f.display());
    }
}

/// Every registered pass, run alone on the graph of every emitter filetest that verifies (so on
/// every `Op` variant), with and without padding: no pass panics or leaves a graph the
/// verifier rejects; refusing a graph is allowed. This is the class of the `fuse_matmuls` panic
/// on a node without outputs: a pass relies only on what the verifier guarantees.
#[test]
fn every_pass_takes_every_op() {
    use torchtpu_passes::{PassError, PassOptions, Pipeline, PASSES};
    let graphs: Vec<(PathBuf, torchtpu_passes::ir::Graph)> = files()
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            let graph = parse(&FileTest::parse(&text).ok()?.input).ok()?;
            verify(&graph).is_ok().then_some((path, graph))
        })
        .collect();
    assert!(graphs.len() > 100, "only {} filetest graphs verify", graphs.len());
    let padded = PassOptions { pad_multiple: Some(128), ..PassOptions::default() };
    let mut broken = Vec::new();
    for options in [PassOptions::default(), padded] {
        for pass in PASSES {
            let pipeline = Pipeline::only(&[pass.name.to_string()], &options).expect("a registered pass");
            for (path, graph) in &graphs {
                let mut graph = graph.clone();
                if let Err(e @ PassError::BrokeInvariant { .. }) = pipeline.run(&mut graph, |_, _| {}) {
                    broken.push(format!("{}: {e}", path.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "passes broke graphs:\n{}", broken.join("\n"));
}
