//! No import circle between modules, at any depth, in `src/`, `passes/src/` and `xtask/src/`.
//!
//! The layer test (`tidy::modules_import_only_the_layers_below_them`) orders a crate's
//! top-level modules; this one looks inside them too. Each `crate::`, `super::` and `self::`
//! path of a module's code (comments and unit tests left out) is resolved to the
//! deepest module it names; an import from module `a/x` into `a/y` is an edge between the
//! siblings `x` and `y` of `a`, whatever lies below them. A parent that re-exports its children
//! and a child that reads its parent are not edges: only siblings can form a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path in its crate (`["run", "batch"]`); the crate root is empty.
type ModPath = Vec<String>;

/// The code of each module of the crate whose root folder is `root` (where both exist,
/// `lib.rs` is the root, not `main.rs`).
fn modules(root: &Path) -> BTreeMap<ModPath, String> {
    let mut files = Vec::new();
    super::tidy::files_under(root, "rs", &mut files);
    let has_lib = root.join("lib.rs").exists();
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(root).expect("under its root");
        let mut path: ModPath = rel.iter().map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
        match path.last().map(String::as_str) {
            Some("mod") => {
                path.pop();
            }
            Some("main") if path.len() == 1 && has_lib => continue,
            Some("lib" | "main") if path.len() == 1 => path.clear(),
            _ => {}
        }
        let text = std::fs::read_to_string(&f).expect("readable");
        // Inline unit tests may reach anywhere; nothing imports them.
        let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or_default();
        let code: Vec<&str> = code.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
        out.insert(path, code.join("\n"));
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The segments of a path from the start of `text` (`run::batch::Batcher`), stopping where a
/// group or glob begins.
fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    loop {
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            return out;
        }
        out.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(next) => rest = next,
            None => return out,
        }
    }
}

/// The items of a `{…}` group at the start of `text` (nested groups kept whole).
fn group_items(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0usize, 1usize, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    items.push(&text[start..i]);
                    return items;
                }
            }
            ',' if depth == 1 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The module paths `code`, the code of module `own`, names: absolute, not yet cut to a
/// module.
fn named_paths(own: &ModPath, code: &str) -> Vec<ModPath> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("::") {
        // Only where a path starts: `crate`, `super` (repeated) or `self` before its first `::`.
        let before = &code[..i];
        let word_start = before.rfind(|c: char| !is_ident(c)).map_or(0, |p| p + 1);
        let word = &before[word_start..];
        let preceded = before[..word_start].ends_with("::");
        let base: ModPath = match word {
            "crate" if !preceded => vec![],
            "self" if !preceded => own.clone(),
            "super" if !preceded => {
                let mut ups = 1;
                let mut rest = &code[i + 2..];
                while let Some(r) = rest.strip_prefix("super::") {
                    ups += 1;
                    rest = r;
                }
                own[..own.len().saturating_sub(ups)].to_vec()
            }
            _ => continue,
        };
        let mut rest = &code[i + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            rest = r;
        }
        let tails: Vec<ModPath> = if rest.starts_with('{') {
            group_items(rest).into_iter().map(segments).collect()
        } else {
            vec![segments(rest)]
        };
        out.extend(tails.into_iter().map(|t| [base.clone(), t].concat()));
    }
    out
}

/// The deepest module of `known` that `path` lies in.
fn module_of(path: &ModPath, known: &BTreeMap<ModPath, String>) -> ModPath {
    (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains_key(p)).unwrap_or_default()
}

/// The edges between sibling modules of the crate at `root`, each with the module whose code
/// makes it, leaving out the modules in `exempt`.
fn sibling_edges(root: &Path, exempt: &[&str]) -> BTreeMap<(ModPath, ModPath), ModPath> {
    let known = modules(root);
    let mut edges = BTreeMap::new();
    // Test modules may reach anywhere, and nothing imports them.
    for (own, code) in known.iter().filter(|(m, _)| m.last().is_none_or(|l| l != "tests")) {
        for named in named_paths(own, code) {
            let target = module_of(&named, &known);
            let common = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == own.len() || common == target.len() {
                continue; // one holds the other
            }
            let (from, to) = (own[..=common].to_vec(), target[..=common].to_vec());
            if exempt.iter().any(|e| from == [*e] || to == [*e]) {
                continue;
            }
            edges.entry((from, to)).or_insert_with(|| own.clone());
        }
    }
    edges
}

/// A circle of `edges`, as the modules along it, if there is one.
fn a_circle(edges: &BTreeMap<(ModPath, ModPath), ModPath>) -> Option<Vec<ModPath>> {
    let mut next: BTreeMap<&ModPath, Vec<&ModPath>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    // Depth-first, with the path kept: a module met again on it closes a circle.
    fn visit<'a>(
        m: &'a ModPath,
        next: &BTreeMap<&'a ModPath, Vec<&'a ModPath>>,
        path: &mut Vec<&'a ModPath>,
        done: &mut BTreeSet<&'a ModPath>,
    ) -> Option<Vec<ModPath>> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            return Some(path[at..].iter().map(|p| (*p).clone()).chain([m.clone()]).collect());
        }
        if !done.insert(m) {
            return None;
        }
        path.push(m);
        for n in next.get(m).into_iter().flatten() {
            if let Some(circle) = visit(n, next, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    next.keys().find_map(|m| visit(m, &next, &mut Vec::new(), &mut done))
}

/// The circle of the crate at `root`, each step with the module whose code makes it, leaving
/// out the modules in `exempt` and the edges in `allowed` (`("ir::ops", "ir::graph")`).
fn circle_in(root: &str, exempt: &[&str], allowed: &[(&str, &str)]) -> Option<String> {
    let mut edges = sibling_edges(&super::tidy::workspace().join(root), exempt);
    edges.retain(|(from, to), _| !allowed.contains(&(from.join("::").as_str(), to.join("::").as_str())));
    let circle = a_circle(&edges)?;
    let steps: Vec<String> = circle
        .windows(2)
        .map(|w| {
            format!(
                "{} -> {} (in {})",
                w[0].join("::"),
                w[1].join("::"),
                edges[&(w[0].clone(), w[1].clone())].join("::")
            )
        })
        .collect();
    Some(format!("{root}: {}", steps.join(", ")))
}

/// In `src/`, `error` is the façade every stage's error goes through (the layer test exempts
/// it too). In the IR, the one recursive type: a control-flow op holds its regions as graphs
/// (`ir::ops` → `ir::graph`), whose nodes hold ops; a region compares and shows as its printed
/// graph (`ir::ops` → `ir::print`).
#[test]
fn no_modules_import_each_other_in_a_circle() {
    let circles: Vec<String> = [
        circle_in("src", &["error"], &[]),
        circle_in("passes/src", &[], &[("ir::ops", "ir::graph"), ("ir::ops", "ir::print")]),
        circle_in("xtask/src", &[], &[]),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

/// The reader finds the paths a module names, grouped, nested and relative, and the test
/// finds a circle between siblings.
#[test]
fn paths_and_circles_are_found() {
    let own: ModPath = vec!["run".into(), "batch".into()];
    let code = "use super::step::{feed, Step};\nuse crate::{serve::Text, run::{generate, seq2seq::x}};\n\
                let y = super::super::cli::main(); self::inner::f();";
    let named: BTreeSet<String> = named_paths(&own, code).iter().map(|p| p.join("::")).collect();
    let expected = ["run::step", "serve::Text", "run", "cli::main", "run::batch::inner::f"];
    assert!(expected.iter().all(|e| named.contains(*e)), "{named:?}");
    let m = |s: &str| -> ModPath { s.split('/').map(str::to_string).collect() };
    let edges: BTreeMap<(ModPath, ModPath), ModPath> =
        [((m("a"), m("b")), m("a")), ((m("b"), m("c")), m("b")), ((m("c"), m("a")), m("c"))].into();
    assert_eq!(a_circle(&edges), Some(vec![m("a"), m("b"), m("c"), m("a")]));
    let edges: BTreeMap<(ModPath, ModPath), ModPath> = [((m("a"), m("b")), m("a")), ((m("a"), m("c")), m("a"))].into();
    assert_eq!(a_circle(&edges), None);
}
