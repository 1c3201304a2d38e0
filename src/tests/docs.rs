//! The documentation stays true: `docs/cli.md` is the tool's own `--help`, and every path a
//! Markdown file names exists.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `docs/cli.md` is what `cli::reference` renders now; `INSTA_UPDATE=always` (what `cargo
/// xtask bless` sets) rewrites it.
#[test]
fn the_command_line_reference_is_fresh() {
    let path = workspace().join("docs/cli.md");
    let fresh = crate::cli::reference();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == fresh {
        return;
    }
    if std::env::var("INSTA_UPDATE").is_ok_and(|v| v == "always") {
        std::fs::write(&path, fresh).expect("a writable docs/cli.md");
        return;
    }
    panic!("docs/cli.md is stale: run `cargo xtask bless` and review `git diff docs/cli.md`");
}

/// The Markdown files of the repository, outside `target/` and hidden or generated folders.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable folder").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && !["target", "node_modules", "snapshots"].contains(&name.as_str()) {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The top-level entries of the repository a path in backticks may start with.
const ROOTS: &[&str] =
    &["src/", "passes/", "xtask/", "tests/", "testdata/", "docs/", "schemas/", "snapshots/", "python/", "examples/"];

/// The repository paths a Markdown text names: link targets (relative to `dir`) and
/// backticked paths from the repository's root (`src/emit/`, `docs/ops.md`).
fn named_paths(text: &str, dir: &Path, root: &Path) -> Vec<(String, PathBuf)> {
    let mut named = Vec::new();
    for (i, _) in text.match_indices("](") {
        let target = &text[i + 2..];
        let target = &target[..target.find(')').unwrap_or(target.len())];
        let target = target.split('#').next().unwrap_or_default();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            named.push((target.to_string(), dir.join(target)));
        }
    }
    for span in text.split('`').skip(1).step_by(2) {
        let plain = !span.contains(['*', '<', ' ', '{', '…', '|', '$']) && !span.contains("...");
        if plain && ROOTS.iter().any(|r| span.starts_with(r)) {
            named.push((span.to_string(), root.join(span.split(':').next().unwrap_or(span))));
        }
    }
    named
}

#[test]
fn every_path_a_markdown_file_names_exists() {
    let root = workspace();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(files.len() >= 5, "found only {} Markdown files", files.len());
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        let dir = f.parent().expect("in a folder");
        for (shown, path) in named_paths(&text, dir, &root) {
            if !path.exists() {
                missing.push(format!("{}: `{shown}`", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    assert!(missing.is_empty(), "Markdown files name paths that do not exist:\n{}", missing.join("\n"));
}

/// README's support table quotes the Core ATen and other-op counts of `docs/ops.md`, the table
/// the op cases generate (and CI checks).
#[test]
fn the_readme_quotes_the_coverage_table() {
    let ops = std::fs::read_to_string(workspace().join("docs/ops.md")).expect("docs/ops.md");
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let count = |line_end: &str| -> (String, String) {
        let line = ops.lines().find(|l| l.contains(line_end)).unwrap_or_else(|| panic!("no `{line_end}` in ops.md"));
        let mut words = line.split_whitespace();
        let supported = words.next().expect("a count").to_string();
        let of = words.nth(1).expect("a total").to_string();
        (supported, of)
    };
    let (core, total) = count("Core ATen ops supported");
    assert!(
        readme.contains(&format!("works: {core}/{total} match eager")),
        "README's Core ATen count is not {core}/{total}"
    );
    let (other, _) = count("other ops supported");
    assert!(readme.contains(&format!("works: {other} match eager")), "README's other-op count is not {other}");
}

/// README.md stays short (at most 8 KiB: the details live in `docs/`), and ARCHITECTURE.md reads
/// in a window: no line over 120 characters.
#[test]
fn readme_and_architecture_stay_readable() {
    let readme = std::fs::read(workspace().join("README.md")).expect("README.md");
    assert!(readme.len() <= 8192, "README.md is {} bytes, over 8 KiB: move details to docs/", readme.len());
    let arch = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let long: Vec<usize> =
        arch.lines().enumerate().filter(|(_, l)| l.chars().count() > 120).map(|(i, _)| i + 1).collect();
    assert!(long.is_empty(), "ARCHITECTURE.md lines over 120 characters: {long:?}");
}
