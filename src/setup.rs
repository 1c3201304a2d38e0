//! Where `cargo xtask setup` puts what the compiler loads at run time, and how a plugin is chosen.
//!
//! Set-up downloads plugin wheels into a cache folder outside git:
//! `$TORCHTPU_SETUP_DIR`, else `$XDG_CACHE_HOME/torchtpu-compile`, else
//! `~/.cache/torchtpu-compile` (else `.cache/torchtpu-compile` in the working folder). xtask
//! compiles this file too (`setup_dir`); the plugin paths below must match its wheels.

use std::path::{Path, PathBuf};

/// The XLA CPU plugin inside the set-up folder.
pub(crate) const CPU_PLUGIN: &str = "plugins/lammps-jax-pjrt-cpu-0.11.2/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so";
/// Environment variable naming the CPU plugin to use instead of the set-up one.
pub(crate) const CPU_PLUGIN_ENV: &str = "TORCHTPU_PJRT_PLUGIN";

/// The set-up folder.
pub(crate) fn setup_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TORCHTPU_SETUP_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("torchtpu-compile")
}

/// libtpu, the TPU compiler, inside the set-up folder.
pub(crate) const TPU_PLUGIN: &str = "plugins/libtpu-0.0.52/libtpu/libtpu.so";
/// The libtpu version set-up installs.
pub(crate) const LIBTPU_VERSION: &str = "0.0.52";

/// The S3-compatible server (moto) that `cargo xtask setup` installs for the cache tests.
#[cfg(test)]
pub(crate) fn s3_test_server() -> PathBuf {
    setup_dir().join("s3-test-server/bin/moto_server")
}
/// Environment variable naming the libtpu to use instead of the set-up one.
pub(crate) const TPU_PLUGIN_ENV: &str = "TORCHTPU_LIBTPU";

/// A chosen plugin path and how it was chosen (for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginChoice {
    pub path: PathBuf,
    pub source: &'static str,
}

/// The CPU plugin: `--plugin`, then `$TORCHTPU_PJRT_PLUGIN`, then the set-up folder.
pub fn cpu_plugin(flag: Option<&Path>) -> PluginChoice {
    if let Some(p) = flag {
        return PluginChoice { path: p.to_path_buf(), source: "--plugin" };
    }
    if let Some(p) = std::env::var_os(CPU_PLUGIN_ENV).filter(|p| !p.is_empty()) {
        return PluginChoice { path: PathBuf::from(p), source: "$TORCHTPU_PJRT_PLUGIN" };
    }
    PluginChoice { path: setup_dir().join(CPU_PLUGIN), source: "the set-up folder" }
}

/// libtpu: `$TORCHTPU_LIBTPU`, then the set-up folder.
pub fn tpu_plugin() -> PluginChoice {
    if let Some(p) = std::env::var_os(TPU_PLUGIN_ENV).filter(|p| !p.is_empty()) {
        return PluginChoice { path: PathBuf::from(p), source: "$TORCHTPU_LIBTPU" };
    }
    PluginChoice { path: setup_dir().join(TPU_PLUGIN), source: "the set-up folder" }
}

/// What to tell a user whose plugin is missing or unloadable.
pub(crate) const PLUGIN_HINT: &str =
    "run `cargo xtask setup` to download the XLA CPU plugin and libtpu, or point at a plugin \
     with `--plugin PATH` / TORCHTPU_PJRT_PLUGIN (CPU) or TORCHTPU_LIBTPU (TPU)";
