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
