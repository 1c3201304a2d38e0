//! Compilation targets: `cpu`, `cpu:N` (N CPU devices) or `tpu:<generation>:<topology>`.

use std::fmt;
use std::str::FromStr;

/// Where an executable runs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// The XLA CPU plugin: executables that run here, for verification, on `devices` CPU
    /// devices (`cpu:N`; a program split over a mesh of that many devices).
    Cpu {
        /// CPU devices (1 unless a mesh splits the program).
        devices: u32,
    },
    /// A TPU slice, compiled through libtpu.
    Tpu {
        /// `v5e`, `v5p`, `v6e`, `tpu7x`, …
        generation: String,
        /// The slice's chips, `AxB` or `AxBxC`.
        topology: String,
    },
}

/// TPU generations libtpu accepts in topology names.
pub(crate) const TPU_GENERATIONS: &[&str] = &["v2", "v3", "v4", "v5e", "v5p", "v6e", "tpu7x"];

const VALID_FORMS: &str = "valid targets: `cpu`, `cpu:N` (N CPU devices, 1 to 64), or `tpu:<generation>:<topology>` \
     with a generation among v2, v3, v4, v5e, v5p, v6e, tpu7x and a topology like 1x1, 2x2 or 2x2x1 (e.g. \
     `tpu:v6e:1x1`, `tpu:v5p:2x2x1`)";

/// The most CPU devices a `cpu:N` target may have.
pub(crate) const MAX_CPU_DEVICES: u32 = 64;

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Target, String> {
        if s == "cpu" {
            return Ok(Target::cpu());
        }
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            ["cpu", n] => match n.parse::<u32>() {
                Ok(devices @ 1..=MAX_CPU_DEVICES) => Ok(Target::Cpu { devices }),
                _ => Err(format!("`{s}`: the number of CPU devices must be 1 to {MAX_CPU_DEVICES}; {VALID_FORMS}")),
            },
            ["tpu", generation, topology] if TPU_GENERATIONS.contains(generation) && valid_topology(topology) => {
                Ok(Target::Tpu { generation: generation.to_string(), topology: topology.to_string() })
            }
            ["tpu", generation, _] if !TPU_GENERATIONS.contains(generation) => {
                Err(format!("unknown TPU generation `{generation}`; {VALID_FORMS}"))
            }
            ["tpu", _, topology] => Err(format!("malformed topology `{topology}`; {VALID_FORMS}")),
            _ => Err(format!("unknown target `{s}`; {VALID_FORMS}")),
        }
    }
}

/// `AxB` or `AxBxC` with positive integers.
fn valid_topology(t: &str) -> bool {
    let parts: Vec<&str> = t.split('x').collect();
    (2..=3).contains(&parts.len()) && parts.iter().all(|p| p.parse::<u32>().is_ok_and(|v| v > 0))
}

impl Target {
    /// The CPU with one device: what `cpu` means.
    pub fn cpu() -> Target {
        Target::Cpu { devices: 1 }
    }

    /// Folder name inside the artifact: `cpu`, `cpu-4` or `tpu-v6e-1x1`.
    pub fn dir_name(&self) -> String {
        match self {
            Target::Cpu { devices: 1 } => "cpu".into(),
            Target::Cpu { devices } => format!("cpu-{devices}"),
            Target::Tpu { generation, topology } => format!("tpu-{generation}-{topology}"),
        }
    }

    /// The devices of the target: CPU devices, or the chips of the TPU slice (the product of
    /// the topology's dims).
    pub fn devices(&self) -> u64 {
        match self {
            Target::Cpu { devices } => u64::from(*devices),
            Target::Tpu { topology, .. } => {
                topology.split('x').filter_map(|d| d.parse::<u64>().ok()).fold(1, u64::saturating_mul)
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cpu { devices: 1 } => f.write_str("cpu"),
            Target::Cpu { devices } => write!(f, "cpu:{devices}"),
            Target::Tpu { generation, topology } => write!(f, "tpu:{generation}:{topology}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_targets_and_explains_invalid_ones() {
        assert_eq!("cpu".parse::<Target>(), Ok(Target::cpu()));
        assert_eq!("cpu:1".parse::<Target>(), Ok(Target::cpu()));
        let four: Target = "cpu:4".parse().unwrap();
        assert_eq!((four.to_string(), four.dir_name(), four.devices()), ("cpu:4".into(), "cpu-4".into(), 4));
        assert!("cpu:0".parse::<Target>().unwrap_err().contains("1 to 64"));
        assert!("cpu:x".parse::<Target>().unwrap_err().contains("1 to 64"));
        assert_eq!("tpu:v5p:2x2x1".parse::<Target>().unwrap().devices(), 4);
        assert_eq!("tpu:v6e:2x4".parse::<Target>().unwrap().devices(), 8);
        let t: Target = "tpu:v5p:2x2x1".parse().unwrap();
        assert_eq!((t.to_string(), t.dir_name()), ("tpu:v5p:2x2x1".into(), "tpu-v5p-2x2x1".into()));
        assert!("tpu:v9:1x1".parse::<Target>().unwrap_err().contains("unknown TPU generation `v9`"));
        assert!("tpu:v6e:1".parse::<Target>().unwrap_err().contains("malformed topology"));
        assert!("gpu".parse::<Target>().unwrap_err().contains("valid targets"));
    }
}
