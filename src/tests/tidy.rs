//! Tidy rules for the whole workspace: module docs, whitespace, snapshot folders.

use std::path::{Path, PathBuf};

pub(super) fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

pub(super) fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_rust_file_starts_with_a_module_doc_and_has_no_trailing_whitespace() {
    let mut files = Vec::new();
    for dir in ["src", "passes/src", "xtask/src"] {
        files_under(&workspace().join(dir), "rs", &mut files);
    }
    assert!(files.len() > 20, "found only {} Rust files", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        assert!(text.starts_with("//!"), "{} must start with a `//!` module doc", f.display());
        for (i, line) in text.lines().enumerate() {
            assert!(line.trim_end() == line, "{}:{} has trailing whitespace", f.display(), i + 1);
        }
    }
}

/// The design contract lives outside the repository: code and docs in it cite what is in it
/// (README.md, ARCHITECTURE.md, `--help`), never a design file a reader cannot open.
#[test]
fn nothing_cites_a_design_file_the_repository_lacks() {
    let mut files = Vec::new();
    for dir in ["src", "passes", "xtask", "docs", "testdata"] {
        for ext in ["rs", "md", "py"] {
            files_under(&workspace().join(dir), ext, &mut files);
        }
    }
    files.extend(["README.md", "ARCHITECTURE.md"].map(|f| workspace().join(f)));
    let name = ["DESIGN", ".md"].concat(); // not written whole, so this file passes its own rule
    let citing: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains(&name)))
        .map(|f| f.display().to_string())
        .collect();
    assert!(citing.is_empty(), "{name} is not in the repository; these cite it: {citing:?}");
}

/// Snapshot folders are the suites the tests use; a stray folder is a renamed or dead suite.
#[test]
fn snapshot_folders_match_suites() {
    let mut dirs: Vec<String> = std::fs::read_dir(workspace().join("snapshots"))
        .expect("snapshots/ exists")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs, ["import", "inspect", "mlir"]);
}

/// The source file of a pass: `passes/src/<name>.rs`, or `passes/src/<name>/mod.rs` for a pass
/// split into several files.
fn pass_file(name: &str) -> Option<PathBuf> {
    let dir = workspace().join("passes/src");
    [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")].into_iter().find(|f| f.is_file())
}

/// Every registered pass, and `bucket_masks`, which the pipeline adds for size buckets.
fn all_passes() -> impl Iterator<Item = &'static str> {
    torchtpu_passes::PASSES.iter().map(|p| p.name).chain(["bucket_masks"])
}

/// Each pass lives in the file named after it, and every file that implements a pass is
/// registered (or is `bucket_masks`).
#[test]
fn every_pass_is_registered_in_a_file_of_its_name() {
    for name in all_passes() {
        assert!(pass_file(name).is_some(), "pass `{name}` has no passes/src/{name}.rs or passes/src/{name}/mod.rs");
    }
    let mut files = Vec::new();
    files_under(&workspace().join("passes/src"), "rs", &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        let stem = f.file_stem().expect("stem").to_string_lossy().into_owned();
        let module = if stem == "mod" {
            f.parent().and_then(Path::file_name).expect("a folder").to_string_lossy().into_owned()
        } else {
            stem
        };
        if text.contains("impl Pass for") && !["pass", "pipeline"].contains(&module.as_str()) {
            assert!(
                all_passes().any(|p| p == module),
                "{} implements a pass that is not in PASSES under its file's name",
                f.display()
            );
        }
    }
}

/// Every pass has at least three filetests (`passes/tests/<pass>/*.ir`), and the example in its
/// module doc is one of them, included from the file, so that it cannot drift from what the
/// pass does.
#[test]
fn every_pass_has_filetests_and_its_doc_example_is_one() {
    for name in all_passes() {
        let dir = workspace().join("passes/tests").join(name);
        let mut tests = Vec::new();
        files_under(&dir, "ir", &mut tests);
        assert!(tests.len() >= 3, "pass `{name}` has {} filetests in passes/tests/{name}/, not 3", tests.len());
        let source = std::fs::read_to_string(pass_file(name).expect("the pass's file")).expect("readable");
        let cited = format!("tests/{name}/");
        let included = source.lines().any(|l| l.starts_with("#![doc = include_str!(") && l.contains(&cited));
        assert!(included, "the module doc of `{name}` must include one of its filetests (`#![doc = include_str!(\"…/{cited}….ir\")]`)");
    }
}

/// No source file is longer than a reader can hold: split files past this by role.
const MAX_LINES: usize = 800;

#[test]
fn no_source_file_is_over_the_size_limit() {
    let mut files = Vec::new();
    for dir in ["src", "passes/src", "passes/tests", "xtask/src"] {
        files_under(&workspace().join(dir), "rs", &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with(workspace().join("src/proto"))) // generated by prost
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).expect("readable").lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}

/// ARCHITECTURE.md's code map names every module: each entry of `src/`, `passes/src/` and
/// `xtask/src/` and each file of their folders appears in it as a backticked path, and every
/// backticked path it gives exists.
#[test]
fn the_code_map_names_every_module_and_only_modules_that_exist() {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let cited: Vec<&str> = text.split('`').skip(1).step_by(2).collect();
    let mut missing = Vec::new();
    for root in ["src", "passes/src", "xtask/src"] {
        let mut files = Vec::new();
        files_under(&workspace().join(root), "rs", &mut files);
        for f in files {
            let rel = f.strip_prefix(workspace()).expect("in the workspace").to_string_lossy().into_owned();
            let name = f.file_name().expect("a name").to_string_lossy();
            if matches!(&*name, "lib.rs" | "main.rs" | "mod.rs") || rel.starts_with("src/tests/") {
                continue;
            }
            let folder = rel.rsplit_once('/').map_or("", |(d, _)| d);
            // A file is named by its path, or by its name where its folder is named
            // (`src/emit/`: … `pool` …).
            let by_path = cited.contains(&rel.as_str());
            let by_name = cited.iter().any(|c| c.trim_end_matches('/') == folder)
                && cited.iter().any(|c| *c == name || *c == name.trim_end_matches(".rs"));
            if !(by_path || by_name) {
                missing.push(rel);
            }
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md does not name: {missing:?}");
    let stale: Vec<&&str> = cited
        .iter()
        .filter(|c| {
            let path = c.trim_end_matches('/');
            ["src/", "passes/", "xtask/", "tests/", "testdata/", "docs/", "schemas/"].iter().any(|r| c.starts_with(r))
                && !c.contains(['*', '<', ' '])
                && !workspace().join(path).exists()
        })
        .collect();
    assert!(stale.is_empty(), "ARCHITECTURE.md names paths that do not exist: {stale:?}");
}

/// The top-level modules of a crate in the order ARCHITECTURE.md's **Layers** paragraph that
/// starts with `opening` gives, bottom up (its backticked names).
fn stated_layers(opening: &str) -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let para = text.split("\n\n").find(|p| p.starts_with(opening)).unwrap_or_else(|| panic!("a `{opening}` paragraph"));
    let order = para.split_once("Bottom up:").expect("`Bottom up:` before the list").1;
    let order = &order[..order.find('.').unwrap_or(order.len())];
    order.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The modules of the crate that `code` names: `crate::x` paths and `use crate::{x, …}` groups,
/// doc comments and comments left out.
fn crate_modules_named(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    for line in code.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let rest = &line[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                named.extend(group.split(',').map(|m| m.trim().split("::").next().unwrap_or("").to_string()));
            } else {
                named.push(rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect());
            }
        }
    }
    named
}

/// The imports of the crate rooted at `root` (`src`, `passes/src`) that go against the order of
/// `layers`, which must place every top-level module but those in `exempt`. Test modules may
/// reach anywhere; multi-line `use crate::{…}` groups are read whole.
fn imports_against(root: &str, layers: &[String], exempt: &[&str]) -> Vec<String> {
    let rank = |m: &str| layers.iter().position(|l| l == m);
    let is_exempt = |m: &str| ["lib", "main", "tests"].contains(&m) || exempt.contains(&m);
    let mut top_level: Vec<String> = std::fs::read_dir(workspace().join(root))
        .expect("a crate root")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|m| !is_exempt(m))
        .collect();
    top_level.sort();
    let unplaced: Vec<&String> = top_level.iter().filter(|m| rank(m).is_none()).collect();
    assert!(unplaced.is_empty(), "ARCHITECTURE.md's layers of {root}/ do not place: {unplaced:?}");
    let mut files = Vec::new();
    files_under(&workspace().join(root), "rs", &mut files);
    let mut upward = Vec::new();
    for f in files {
        let rel = f.strip_prefix(workspace().join(root)).expect("under the root").to_string_lossy().into_owned();
        let module = rel.split('/').next().unwrap_or_default().trim_end_matches(".rs").to_string();
        let name = f.file_name().expect("a name").to_string_lossy().into_owned();
        if is_exempt(&module) || name.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("readable");
        // A file's inline unit tests may reach anywhere.
        let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or_default();
        let code = code.replace(",\n", ", ").replace("{\n", "{");
        let own = rank(&module).expect("placed above");
        for named in crate_modules_named(&code) {
            if rank(&named).is_some_and(|r| r >= own) && named != module {
                upward.push(format!("{root}/{rel} ({module}) imports `{named}`"));
            }
        }
    }
    upward.sort();
    upward.dedup();
    upward
}

/// The crates' modules form layers: each imports only the modules below it in the order
/// ARCHITECTURE.md states, so neither module graph has a circle. In `src/`, `error` is the
/// façade every stage's error goes through (it names them all and every stage returns it) and
/// is exempt.
#[test]
fn modules_import_only_the_layers_below_them() {
    let mut upward = imports_against("src", &stated_layers("**Layers.** The modules of `src/`"), &["error"]);
    upward.extend(imports_against("passes/src", &stated_layers("**Layers.** The modules of `passes/src/`"), &[]));
    assert!(upward.is_empty(), "imports against the layer order of ARCHITECTURE.md:\n{}", upward.join("\n"));
}

/// An op's import is in its family's tables (`src/import/ops/`): the builder names no FX target
/// and compares none, it matches the `Special` the family gives.
#[test]
fn the_import_builder_names_no_target() {
    let mut files = Vec::new();
    files_under(&workspace().join("src/import/build"), "rs", &mut files);
    assert!(files.len() >= 5, "found only {} files in src/import/build", files.len());
    let prefixes = ["\"torch.", "\"aten.", "\"_operator.", "\"higher_order.", "\"prims."];
    let mut named = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        for (i, line) in text.lines().enumerate() {
            if prefixes.iter().any(|p| line.contains(p)) || line.contains(".target ==") || line.contains(".target !=") {
                named.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(named.is_empty(), "the import builder names FX targets:\n{}", named.join("\n"));
}
