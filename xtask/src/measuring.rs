//! What every bench measures with: a process's wall and CPU time and peak memory
//! ([`measure`]), its JSON output, the median of runs, and the bench-only models generated into
//! the set-up folder. Below `measure` (the tasks) and the benches of their own files.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{root, run};

/// One finished process: wall time, CPU time, peak resident memory, exit status, stdout.
pub(crate) struct Measured {
    pub secs: f64,
    /// User and system CPU time of the process, all its threads (not the kernel's own
    /// threads, such as those that write dirty pages back to disk).
    pub cpu_secs: f64,
    pub max_rss_mib: f64,
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `bin args…` and measures it with `wait4` (peak RSS of exactly that child).
pub(crate) fn measure(bin: &Path, args: &[&str]) -> Result<Measured> {
    use std::io::Read;
    let start = Instant::now();
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child.stdout.take().context("stdout")?.read_to_string(&mut stdout)?;
    child.stderr.take().context("stderr")?.read_to_string(&mut stderr)?;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for the child we spawned and reap here.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: `pid` is our un-reaped child; the pointers are valid for the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if r != pid {
        bail!("wait4 failed for {}", bin.display());
    }
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Measured {
        secs: start.elapsed().as_secs_f64(),
        cpu_secs: secs(usage.ru_utime) + secs(usage.ru_stime),
        max_rss_mib: usage.ru_maxrss as f64 / 1024.0,
        ok,
        stdout,
        stderr,
    })
}

/// The JSON `m` printed, once it succeeded (`what` names it in the error).
pub(crate) fn json(m: &Measured, what: &str) -> Result<Value> {
    if !m.ok {
        bail!("{what} failed:\n{}", m.stderr);
    }
    serde_json::from_str(&m.stdout).with_context(|| format!("{what}: not JSON"))
}

/// The median of `v` (the upper one of an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A benchmark-only model of testdata/gen.py's `BENCH_MODELS`, generated into the set-up
/// folder on first use (it needs the generator's torch venv).
pub(crate) fn bench_model(name: &str) -> Result<PathBuf> {
    let path = crate::setup::setup_dir().join(format!("bench/{name}.pt2"));
    if !path.exists() {
        let python = crate::testdata_python()?;
        let out = path.parent().context("bench folder")?;
        run(crate::path_str(&python)?, &["testdata/gen.py", "--out", crate::path_str(out)?, name], &[])?;
    }
    Ok(path)
}

/// A number of a JSON report, or NaN where it is missing (printed as `NaN`, never a made-up 0).
pub(crate) fn figure(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}
