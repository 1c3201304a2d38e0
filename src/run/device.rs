//! Which devices a session runs on: the CPU plugin's (the default, on any machine), or a TPU
//! host's chips through libtpu (`--device tpu`). A machine without TPU chips is told so before
//! libtpu is loaded, which would otherwise search for them and fail deep inside the plugin.

use std::path::Path;

use super::{is_cpu, RunError};
use crate::artifact::Manifest;
use crate::setup::{cpu_plugin, tpu_plugin, PluginChoice};
use crate::Error;

/// The kind of device a session runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceKind {
    /// The XLA CPU plugin: runs anywhere, for checking numbers.
    #[default]
    Cpu,
    /// The TPU chips of this host, through libtpu.
    Tpu,
}

impl DeviceKind {
    /// The index of the target among the manifest's whose executables run on this kind.
    pub(super) fn target(self, m: &Manifest) -> Result<usize, Error> {
        let targets = || m.targets.iter().map(|t| t.target.as_str()).collect::<Vec<_>>().join(", ");
        match self {
            DeviceKind::Cpu => m
                .targets
                .iter()
                .position(|t| is_cpu(&t.target))
                .ok_or_else(|| RunError::NoCpuExecutable { targets: targets() }.into()),
            DeviceKind::Tpu => {
                tpu_chips()?;
                m.targets.iter().position(|t| t.target.starts_with("tpu:")).ok_or_else(|| {
                    RunError::NoDevice {
                        reason: format!("this artifact has no TPU executable (targets: {})", targets()),
                    }
                    .into()
                })
            }
        }
    }

    /// The plugin that runs this kind: `flag`, else the usual choice.
    pub(super) fn plugin(self, flag: Option<&Path>) -> PluginChoice {
        match (self, flag) {
            (DeviceKind::Cpu, _) => cpu_plugin(flag),
            (DeviceKind::Tpu, Some(p)) => PluginChoice { path: p.to_path_buf(), source: "--plugin" },
            (DeviceKind::Tpu, None) => tpu_plugin(),
        }
    }
}

/// Refuses a machine with no TPU chip: TPU VMs show theirs as `/dev/accel*` (v4, v5e) or
/// `/dev/vfio/<n>` (v5p, v6e).
fn tpu_chips() -> Result<(), Error> {
    let has = |dir: &str, keep: fn(&str) -> bool| {
        std::fs::read_dir(dir)
            .map(|entries| entries.flatten().any(|e| e.file_name().to_str().is_some_and(keep)))
            .unwrap_or(false)
    };
    if has("/dev", |n| n.starts_with("accel")) || has("/dev/vfio", |n| n.bytes().all(|b| b.is_ascii_digit())) {
        return Ok(());
    }
    let reason = "this machine has no TPU (no /dev/accel* nor /dev/vfio/<n> device): run on a TPU VM, or use \
                  --device cpu with an artifact that has a CPU executable"
        .to_string();
    Err(RunError::NoDevice { reason }.into())
}
