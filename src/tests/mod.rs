//! Test suites over the committed test data: IR and StableHLO snapshots, weights and parity of
//! every test model, `inspect` and `check` reports, malformed archives, and tidy rules.

#[cfg(feature = "mlir")]
mod bad_input;
#[cfg(feature = "mlir")]
mod batching;
#[cfg(feature = "mlir")]
mod cache;
mod circles;
#[cfg(feature = "mlir")]
mod docs;
#[cfg(feature = "mlir")]
mod emit_filetests;
#[cfg(feature = "mlir")]
mod lowering;
mod models;
#[cfg(feature = "mlir")]
mod ops;
#[cfg(feature = "mlir")]
mod parity;
#[cfg(feature = "mlir")]
mod passes;
#[cfg(feature = "mlir")]
mod plan;
#[cfg(feature = "mlir")]
mod recompile;
#[cfg(feature = "mlir")]
mod refusals;
#[cfg(feature = "mlir")]
mod serving;
#[cfg(feature = "mlir")]
mod sharding;
#[cfg(feature = "mlir")]
mod symbolic;
mod tidy;
#[cfg(feature = "mlir")]
mod tpu;
#[cfg(feature = "mlir")]
mod weights;

use std::path::{Path, PathBuf};

#[cfg(feature = "mlir")]
use crate::cli;

/// `<workspace>/testdata`.
fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// Every test model archive, sorted.
fn model_paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(testdata().join("models"))
        .expect("testdata/models exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pt2"))
        .collect();
    v.sort();
    assert!(v.len() >= 9, "expected the test models in testdata/models, found {v:?}");
    v
}

#[cfg(feature = "mlir")]
/// What a test model needs besides the defaults to compile: `auto_batch_dyn`'s batch is
/// unbounded (`Dim.AUTO`), so every compile of it lists its sizes (the largest its bound).
const REQUIRED_BUCKETS: &[(&str, &str)] = &[("auto_batch_dyn", "x:0=2,4,8,16")];

#[cfg(feature = "mlir")]
/// [`REQUIRED_BUCKETS`] of the model at `path`, as `--buckets` arguments.
fn required_bucket_args(path: &Path) -> Vec<&'static str> {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    REQUIRED_BUCKETS.iter().filter(|(m, _)| *m == stem).flat_map(|(_, b)| ["--buckets", *b]).collect()
}

#[cfg(feature = "mlir")]
/// [`REQUIRED_BUCKETS`] of the model at `path`, as choices.
fn required_buckets(path: &Path) -> Vec<crate::buckets::Choice> {
    required_bucket_args(path)
        .into_iter()
        .filter(|a| *a != "--buckets")
        .map(|b| crate::buckets::parse_choice(b).expect("a valid choice"))
        .collect()
}

#[cfg(feature = "mlir")]
/// Runs the command line in-process: (exit code, stdout, stderr).
fn run_cli(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = std::iter::once("torchtpu-compile").chain(args.iter().copied()).map(Into::into);
    let code = cli::main_with(argv, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}
