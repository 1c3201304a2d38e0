//! Writes the input of an emitter filetest (`tests/emit/<case>.ir`) for every op case of
//! `testdata/ops/` that brings an op no filetest has yet: the case's archive imported and
//! printed (a dynamic one specialized at its symbols' lower bounds, or 2 where that is allowed), with an empty expectation
//! for `cargo xtask bless` to fill.
//!
//! ```text
//! cargo run --example emit_filetest_inputs        then: cargo xtask bless; git diff tests/emit
//! ```
//!
//! Cases are visited smallest graph first and a case is written only when one of its ops (by printed
//! name: `exp`, `reduce_sum`, `convolution`, …) appears in no filetest yet, so running it again
//! writes nothing new. Cases that do not lower (refused at import, or holding an
//! `Op::Unsupported(Unsupported)`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use torchtpu_compile::import;
use torchtpu_passes::ir::{parse, print, Graph, Op};
use torchtpu_passes::specialize::specialize;

fn main() -> Result<()> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = workspace.join("tests").join("emit");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut covered = covered_ops(&dir)?;
    let mut cases: Vec<PathBuf> =
        std::fs::read_dir(workspace.join("testdata/ops"))?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    cases.retain(|p| p.extension().is_some_and(|e| e == "pt2"));
    cases.sort();
    // The smallest graphs first, so that each op's filetest is as short as its cases allow.
    let mut graphs = Vec::new();
    for case in cases {
        // A case refused at import (an op that does not lower) has nothing to emit.
        let Ok(program) = import(&case) else { continue };
        let graph = static_graph(&program.graph)?;
        graphs.push((print(&graph).len(), case, graph));
    }
    graphs.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut written = 0;
    for (_, case, graph) in graphs {
        let ops = op_names(&graph);
        if ops.iter().any(|o| o.starts_with("unsupported")) || ops.is_subset(&covered) {
            continue;
        }
        let name = case.file_stem().context("a case name")?.to_string_lossy().into_owned();
        let stem = name.trim_start_matches('_').replace('.', "_");
        let text = format!(
            "; From the op case `{name}` (testdata/ops/, made by testdata/gen_ops.py).\n{}; expect:\n",
            print(&graph)
        );
        std::fs::write(dir.join(format!("{stem}.ir")), text)?;
        covered.extend(ops);
        written += 1;
    }
    println!("wrote {written} filetest input(s) to {}", dir.display());
    Ok(())
}

/// The graph with every symbol at its lower bound (the emitter takes static graphs).
fn static_graph(graph: &Graph) -> Result<Graph> {
    if graph.symbols().is_empty() {
        return Ok(graph.clone());
    }
    let sizes: BTreeMap<String, i64> = graph
        .symbols()
        .iter()
        .map(|(s, b)| (s.clone(), b.min.unwrap_or(2).max(2).min(b.max.unwrap_or(i64::MAX))))
        .collect();
    Ok(specialize(graph, &sizes)?)
}

/// The printed names of a graph's ops, leaving out its inputs.
fn op_names(graph: &Graph) -> BTreeSet<String> {
    graph.node_ids().map(|id| &graph.node(id).op).filter(|op| !matches!(op, Op::Input(_))).map(Op::name).collect()
}

/// The ops the filetests under `dir` already have.
fn covered_ops(dir: &Path) -> Result<BTreeSet<String>> {
    let mut covered = BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "ir") {
            let text = std::fs::read_to_string(&path)?;
            let input: String = text
                .split("; expect:")
                .next()
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.starts_with(';'))
                .map(|l| format!("{l}\n"))
                .collect();
            if let Ok(graph) = parse(&input) {
                covered.extend(op_names(&graph));
            }
        }
    }
    Ok(covered)
}
