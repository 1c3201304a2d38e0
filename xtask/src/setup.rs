//! `cargo xtask setup`: installs what building and testing need, idempotently.
//!
//! - Debian packages for MLIR 22 (melior links it statically) — needs root, like CI;
//! - PJRT plugins, downloaded as wheels with `pip download --no-deps`, checked against pinned
//!   sha256s and unpacked into the set-up folder outside git. The plugin paths must match
//!   `src/setup.rs`, which is where the compiler looks for them.

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// Debian 12 packages for melior over MLIR 22 (see shared notes: each was found missing by a
/// failing link when left out).
const APT_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libmlir-22-dev",
    "libpolly-22-dev",
    "libclang1-22",
    "libclang-common-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "build-essential",
];

/// A PJRT plugin shipped in a Python wheel.
pub struct PluginWheel {
    pub package: &'static str,
    pub version: &'static str,
    pub wheel: &'static str,
    pub sha256: &'static str,
    /// Folder inside the set-up folder the wheel is unpacked into.
    pub dir: &'static str,
    /// The shared object, relative to `dir`.
    pub library: &'static str,
}

pub const PLUGINS: &[PluginWheel] = &[
    PluginWheel {
        package: "lammps-jax-pjrt-cpu",
        version: "0.11.2",
        wheel: "lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl",
        sha256: "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1",
        dir: "plugins/lammps-jax-pjrt-cpu-0.11.2",
        library: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
    },
    // The TPU compiler: compiles for any TPU generation and topology with no TPU attached.
    // The wheel is tagged for CPython 3.11, the interpreter of these machines.
    PluginWheel {
        package: "libtpu",
        version: "0.0.52",
        wheel: "libtpu-0.0.52-cp311-cp311-manylinux_2_31_x86_64.whl",
        sha256: "f5e2e596eaea9357fbb5a6755a7a9007c6ab75bfde4a55191b03eff402971140",
        dir: "plugins/libtpu-0.0.52",
        library: "libtpu/libtpu.so",
    },
];

/// The S3-compatible server the cache tests start on loopback: moto with its S3 extra and
/// Flask, every package pinned (installed with `--no-deps` so nothing floats).
const S3_TEST_SERVER: &[&str] = &[
    "blinker==1.9.0",
    "boto3==1.44.8",
    "botocore==1.44.8",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "cryptography==50.0.2",
    "Flask==3.1.3",
    "flask-cors==6.0.5",
    "idna==3.20",
    "itsdangerous==2.2.0",
    "Jinja2==3.1.6",
    "jmespath==1.1.0",
    "MarkupSafe==3.0.4",
    "moto==5.2.5",
    "py-partiql-parser==0.6.3",
    "pycparser==3.12",
    "python-dateutil==2.9.0.post0",
    "PyYAML==6.0.4",
    "requests==2.34.2",
    "responses==0.26.3",
    "s3transfer==0.19.3",
    "six==1.17.0",
    "urllib3==2.8.0",
    "Werkzeug==3.1.9",
    "xmltodict==1.0.4",
];

/// Folder (inside the set-up folder) of the S3 test server's virtual environment; the tests
/// look for `bin/moto_server` there (`src/setup.rs`).
const S3_TEST_SERVER_DIR: &str = "s3-test-server";

/// What the Python package's tests need: numpy, pytest, maturin (which builds the package
/// into the environment), and Ray with its dependencies (the fleet's local-cluster test),
/// every package pinned.
const PYTHON_TESTS: &[&str] = &[
    "attrs==26.1.0",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "filelock==4.3.2",
    "idna==3.20",
    "iniconfig==2.3.1",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "maturin==1.16.0",
    "msgpack==1.2.4",
    "numpy==2.4.6",
    "packaging==26.4",
    "pluggy==1.7.0",
    "protobuf==7.36.2",
    "pygments==2.21.0",
    "pytest==9.2.0",
    "PyYAML==6.0.4",
    "ray==2.60.0",
    "referencing==0.37.0",
    "requests==2.34.2",
    "rpds-py==2026.9.1",
    "typing_extensions==4.16.0",
    "urllib3==2.8.0",
];

/// Folder (inside the set-up folder) of the Python package's test environment.
pub const PYTHON_TESTS_DIR: &str = "python-tests";

/// The compiler's `src/setup.rs`, compiled into xtask as well, so that the rule for where the
/// set-up folder is (`setup_dir`) is written once.
#[path = "../../src/setup.rs"]
#[allow(dead_code)]
mod compiler_setup;
pub(crate) use compiler_setup::setup_dir;

pub fn setup() -> Result<()> {
    for (tool, args) in [("rustfmt", ["fmt", "--version"]), ("clippy", ["clippy", "--version"])] {
        quiet(&format!("checking {tool}"), "cargo", &args, &[])
            .context("the Rust toolchain needs rustfmt and clippy")?;
    }
    apt_packages()?;
    for p in PLUGINS {
        plugin(p)?;
    }
    venv(S3_TEST_SERVER_DIR, S3_TEST_SERVER, "bin/moto_server")?;
    venv(PYTHON_TESTS_DIR, PYTHON_TESTS, "bin/pytest")?;
    eprintln!("setup: done (set-up folder: {})", setup_dir().display());
    Ok(())
}

/// The virtual environment `dir` (in the set-up folder) with the packages `pins`, installed
/// with `--no-deps` so nothing floats; a stamp with the pin list (and `marker`, a file the
/// environment must have) makes later runs do nothing.
fn venv(dir: &str, pins: &[&str], marker: &str) -> Result<()> {
    let venv = setup_dir().join(dir);
    let stamp = venv.join(".pins");
    let list = pins.join("\n");
    if venv.join(marker).exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == list) {
        eprintln!("setup: {dir} present");
        return Ok(());
    }
    let venv_str = venv.to_str().context("set-up folder path is not UTF-8")?;
    quiet(&format!("creating the {dir} environment"), "python3", &["-m", "venv", venv_str], &[])?;
    let python = venv.join("bin/python");
    let mut args = vec!["-m", "pip", "install", "-q", "--no-deps"];
    args.extend_from_slice(pins);
    let what = format!("installing {} pinned packages into {dir} (pip)", pins.len());
    quiet(&what, python.to_str().context("set-up folder path is not UTF-8")?, &args, &[])?;
    std::fs::write(&stamp, list)?;
    Ok(())
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn apt_packages() -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        eprintln!("setup: MLIR 22 packages present");
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("missing Debian packages {missing:?}; run as root, or: apt-get install -y {}", missing.join(" "));
    }
    quiet("updating Debian's package lists (apt-get update)", "apt-get", &["update", "-qq"], &[])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(&missing);
    let what = format!("installing {} (apt-get)", missing.join(" "));
    quiet(&what, "apt-get", &args, &[("DEBIAN_FRONTEND", "noninteractive".as_ref())])
}

/// One step of the set-up: a line says what it does, and the tool's own output is shown only
/// when it fails (apt's and pip's progress would be thousands of lines on a new user's terminal).
fn quiet(what: &str, program: &str, args: &[&str], envs: &[(&str, &OsStr)]) -> Result<()> {
    eprintln!("setup: {what}");
    let out = Command::new(program)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .current_dir(crate::root())
        .output()
        .with_context(|| format!("cannot start `{program}`"))?;
    if !out.status.success() {
        let mut err = std::io::stderr();
        err.write_all(&out.stdout)?;
        err.write_all(&out.stderr)?;
        bail!("setup: {what} failed: `{program} {}` ({})", args.join(" "), out.status);
    }
    Ok(())
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Downloads (if needed), verifies and unpacks one plugin wheel; a stamp file records the
/// verified wheel so later runs do nothing.
fn plugin(p: &PluginWheel) -> Result<()> {
    let dir = setup_dir().join(p.dir);
    let stamp = dir.join(".verified-sha256");
    if dir.join(p.library).exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == p.sha256) {
        eprintln!("setup: {} {} present", p.package, p.version);
        return Ok(());
    }
    let wheels = setup_dir().join("wheels");
    std::fs::create_dir_all(&wheels)?;
    let wheel = wheels.join(p.wheel);
    if !wheel.exists() || sha256_file(&wheel)? != p.sha256 {
        let spec = format!("{}=={}", p.package, p.version);
        let dest = wheels.to_str().context("set-up folder path is not UTF-8")?;
        let args = ["-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", dest, &spec];
        quiet(&format!("downloading {spec} (pip download)"), "python3", &args, &[])?;
    }
    let actual = sha256_file(&wheel).with_context(|| format!("pip did not produce {}", wheel.display()))?;
    if actual != p.sha256 {
        bail!("{} has sha256 {actual}, expected {}; refusing to use it", wheel.display(), p.sha256);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let (w, d) = (wheel.to_str().context("non-UTF-8 path")?, dir.to_str().context("non-UTF-8 path")?);
    quiet(&format!("unpacking {}", p.wheel), "python3", &["-m", "zipfile", "-e", w, d], &[])?;
    if !dir.join(p.library).exists() {
        bail!("{} does not contain {}", p.wheel, p.library);
    }
    std::fs::write(&stamp, p.sha256)?;
    eprintln!("setup: {} {} installed in {}", p.package, p.version, dir.display());
    Ok(())
}
