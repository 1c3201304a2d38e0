//! Shared helpers for snapshot tests across the workspace.

use std::path::PathBuf;

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

/// insta settings that keep every snapshot of `suite` under `<workspace>/snapshots/<suite>/`.
/// Bind them with `let _guard = settings("import").bind_to_scope();`.
pub fn settings(suite: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(workspace_root().join("snapshots").join(suite));
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s
}

/// The line between a filetest's input and its expectation.
pub const EXPECT: &str = "; expect:";

/// A filetest file (cranelift-style, shared by the pass and emitter filetests): what comes
/// before `; expect:` (`; key: value` directives, other `;` comment lines, and the input) and
/// the expected text after it.
pub struct FileTest {
    /// The `; key: value` lines, in order (see [`directive`]; other `;` lines are comments).
    pub directives: Vec<(String, String)>,
    /// Every line before `; expect:` that is not a `;` line.
    pub input: String,
    /// The text after `; expect:`.
    pub expected: String,
}

impl FileTest {
    /// Splits a filetest's text.
    pub fn parse(text: &str) -> Result<FileTest, String> {
        let (head, expected) = text.split_once(EXPECT).ok_or(format!("no `{EXPECT}` line"))?;
        let mut directives = Vec::new();
        let mut input = Vec::new();
        for line in head.lines() {
            match line.strip_prefix(';') {
                None => input.push(line),
                Some(line) => {
                    if let Some((key, value)) = directive(line) {
                        directives.push((key.to_string(), value.to_string()));
                    }
                }
            }
        }
        let expected = expected.trim_start_matches([' ', '\n']).to_string();
        Ok(FileTest { directives, input: input.join("\n") + "\n", expected })
    }
}

/// `key: value` when the text after `;` is a directive: a key of lowercase words joined by
/// `-` (`run`, `pad-multiple`), a colon, a value. Any other `;` line is a comment.
fn directive(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    let key = key.trim();
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase());
    key.split('-').all(word).then(|| (key, value.trim()))
}

/// A runner's refusal of a directive it does not know (a misspelt one must not pass unread).
pub fn unknown_directive(key: &str, known: &[&str]) -> String {
    format!("unknown directive `; {key}:`; this runner reads {}", known.join(", "))
}

/// Every `*.ir` file under `dir` (recursively), sorted.
pub fn filetests_under(dir: &std::path::Path) -> Vec<PathBuf> {
    fn visit(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                visit(&path, out);
            } else if path.extension().is_some_and(|e| e == "ir") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    visit(dir, &mut files);
    files.sort();
    files
}

/// Runs the filetests `files` (shown relative to `root`) whose path contains
/// `$FILETEST_FILTER`: `run` gives each file's actual text, which must equal its expectation.
/// With `INSTA_UPDATE=always` (what `cargo xtask bless` sets) a differing file's expectation is
/// rewritten instead. Returns how many ran and a message per failure.
pub fn run_filetests(
    files: &[PathBuf],
    root: &std::path::Path,
    run: impl Fn(&FileTest) -> Result<String, String>,
) -> (usize, Vec<String>) {
    let bless = std::env::var("INSTA_UPDATE").is_ok_and(|v| v == "always");
    let filter = std::env::var("FILETEST_FILTER").unwrap_or_default();
    let mut ran = 0;
    let mut failures = Vec::new();
    for path in files.iter().filter(|f| f.to_string_lossy().contains(&filter)) {
        ran += 1;
        let shown = path.strip_prefix(root).unwrap_or(path).display().to_string();
        let outcome = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| FileTest::parse(&text).and_then(|t| run(&t).map(|got| (text, t, got))));
        match outcome {
            Err(e) => failures.push(format!("{shown}: {e}")),
            Ok((_, t, got)) if got == t.expected => {}
            Ok((text, _, got)) if bless => {
                let head = &text[..text.find(EXPECT).unwrap_or(text.len())];
                if let Err(e) = std::fs::write(path, format!("{head}{EXPECT}\n{got}")) {
                    failures.push(format!("{shown}: cannot bless: {e}"));
                }
            }
            Ok((_, t, got)) => failures.push(format!("{shown}: got\n{got}\nbut the file expects\n{}", t.expected)),
        }
    }
    (ran, failures)
}

#[cfg(test)]
mod tests {
    use super::FileTest;

    /// `; key: value` with a key of lowercase words is a directive, whatever it says; prose
    /// with a colon is a comment.
    #[test]
    fn directives_are_keys_of_lowercase_words() {
        let text = "; run: dce\n; pad-multiple: 8\n; Why: prose\n; the rows merge: a prefix\n; Run: typo\n\
                    graph t {\n}\n; expect:\nout\n";
        let t = FileTest::parse(text).expect("parses");
        let keys: Vec<&str> = t.directives.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["run", "pad-multiple"]);
        assert_eq!((t.input.as_str(), t.expected.as_str()), ("graph t {\n}\n", "out\n"));
    }
}
