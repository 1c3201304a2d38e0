//! Tidy rules for the whole workspace: module docs, whitespace, snapshot folders.

use std::path::{Path, PathBuf};

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
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

fn workspace() -> PathBuf {
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

/// Each pass lives in the file named after it (`passes/src/<name>.rs`), and every file that
/// implements a pass is registered (or is `bucket_masks`, which the pipeline adds for buckets).
#[test]
fn every_pass_is_registered_in_a_file_of_its_name() {
    let dir = workspace().join("passes/src");
    for p in torchtpu_passes::PASSES {
        assert!(dir.join(format!("{}.rs", p.name)).is_file(), "pass `{}` has no passes/src/{}.rs", p.name, p.name);
    }
    let mut files = Vec::new();
    files_under(&dir, "rs", &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        let stem = f.file_stem().expect("stem").to_string_lossy().into_owned();
        if text.contains("impl Pass for") && stem != "pass" {
            let known = stem == "bucket_masks" || torchtpu_passes::pass_info(&stem).is_some();
            assert!(known, "{} implements a pass that is not in PASSES under its file's name", f.display());
        }
    }
}
