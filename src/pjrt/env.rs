//! The environment the plugins read when they load: what libtpu needs to compile without a
//! TPU, and the XLA flags the command line adds. A leaf of `pjrt`: set before any plugin loads.

use std::ffi::OsStr;

/// The environment libtpu needs to compile without a TPU, set where the variables are unset:
///
/// - `TPU_SKIP_MDS_QUERY=1`: otherwise `PJRT_Plugin_Initialize` asks the cloud metadata server
///   for the host's TPU type and workers, 30 tries per key; measured with libtpu 0.0.52 off
///   Google Cloud, initialization took 640 s instead of 0.03 s.
/// - `ALLOW_MULTIPLE_LIBTPU_LOAD=1`: otherwise initialization takes `/tmp/libtpu_lockfile` for
///   the life of the process, and a second process fails in `PJRT_Plugin_Initialize` with
///   "Internal error when accessing libtpu multi-process lockfile" while the first runs. The
///   lock guards the chips of a TPU host; compiling uses none. (Either process setting it is
///   enough: a process that allows multiple loads does not take the lock.)
/// - `TPU_WORKER_HOSTNAMES=localhost`: only silences an error line libtpu logs otherwise; the
///   worker list matters to multi-host runs, not to compiling.
///
/// Call it early in `main`, before any thread exists: setting the environment races with
/// threads that read it, libtpu's included. [`Plugin::load`](super::Plugin::load) calls it too before it opens a
/// file whose name starts with `libtpu`, which is late but harmless when `main` already did.
/// Variables the user set are kept.
pub fn prepare_libtpu_environment() {
    for (name, value) in [
        ("TPU_SKIP_MDS_QUERY", "1"),
        ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"),
        // Without it libtpu logs an error about unknown worker hosts on every load.
        ("TPU_WORKER_HOSTNAMES", "localhost"),
    ] {
        if std::env::var_os(name).is_none() {
            std::env::set_var(name, value);
        }
    }
}

/// The XLA flag the command line adds to `XLA_FLAGS` (where the user's flags do not set it):
/// XLA:CPU's memory-minimizing schedule instead of its concurrency-optimized one. XLA:CPU
/// computes bf16 dots in f32, converting each bf16 weight first; the concurrency schedule
/// converts every weight up front, so all the f32 copies are alive at once (a 1B-parameter
/// bf16 Llama: 7.3 GB and 10-12 s for one forward of 32 tokens, against 3.6 GB and 3.6 s).
/// The same setting as a compile-option override is ignored by the CPU plugin (0.11.2), and
/// libtpu accepts the flag. Compiles key their executables on `XLA_FLAGS`, so executables
/// made with and without it never stand in for each other.
pub(crate) const CPU_SCHEDULE_FLAG: &str = "--xla_cpu_enable_concurrency_optimized_scheduler=false";

/// Adds `CPU_SCHEDULE_FLAG` to `XLA_FLAGS` unless the user's flags name it. Call it early in
/// `main`, before any thread exists, as [`prepare_libtpu_environment`].
pub fn prepare_xla_environment() {
    let flags = std::env::var("XLA_FLAGS").unwrap_or_default();
    let name = CPU_SCHEDULE_FLAG.split('=').next().unwrap_or_default();
    if !flags.contains(name) {
        let joined = if flags.trim().is_empty() {
            CPU_SCHEDULE_FLAG.to_string()
        } else {
            format!("{flags} {CPU_SCHEDULE_FLAG}")
        };
        std::env::set_var("XLA_FLAGS", joined);
    }
}

/// Whether `file_name` names libtpu (`libtpu.so`, `libtpu-nightly.so`, ...).
pub(super) fn is_libtpu(file_name: Option<&OsStr>) -> bool {
    file_name.is_some_and(|name| name.as_encoded_bytes().starts_with(b"libtpu"))
}
