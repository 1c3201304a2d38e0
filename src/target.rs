//! Compilation targets: `cpu` or `tpu:<generation>:<topology>`.

use std::fmt;
use std::str::FromStr;

/// Where an executable runs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// The XLA CPU plugin: executables that run here, for verification.
    Cpu,
    /// A TPU slice, compiled through libtpu.
    Tpu { generation: String, topology: String },
}

/// TPU generations libtpu accepts in topology names.
pub const TPU_GENERATIONS: &[&str] = &["v2", "v3", "v4", "v5e", "v5p", "v6e", "tpu7x"];

const VALID_FORMS: &str = "valid targets: `cpu`, or `tpu:<generation>:<topology>` with a generation among \
     v2, v3, v4, v5e, v5p, v6e, tpu7x and a topology like 1x1, 2x2 or 2x2x1 (e.g. `tpu:v6e:1x1`, `tpu:v5p:2x2x1`)";

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Target, String> {
        if s == "cpu" {
            return Ok(Target::Cpu);
        }
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
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
    /// Folder name inside the artifact: `cpu` or `tpu-v6e-1x1`.
    pub fn dir_name(&self) -> String {
        match self {
            Target::Cpu => "cpu".into(),
            Target::Tpu { generation, topology } => format!("tpu-{generation}-{topology}"),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cpu => f.write_str("cpu"),
            Target::Tpu { generation, topology } => write!(f, "tpu:{generation}:{topology}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_targets_and_explains_invalid_ones() {
        assert_eq!("cpu".parse::<Target>(), Ok(Target::Cpu));
        let t: Target = "tpu:v5p:2x2x1".parse().unwrap();
        assert_eq!((t.to_string(), t.dir_name()), ("tpu:v5p:2x2x1".into(), "tpu-v5p-2x2x1".into()));
        assert!("tpu:v9:1x1".parse::<Target>().unwrap_err().contains("unknown TPU generation `v9`"));
        assert!("tpu:v6e:1".parse::<Target>().unwrap_err().contains("malformed topology"));
        assert!("gpu".parse::<Target>().unwrap_err().contains("valid targets"));
    }
}
