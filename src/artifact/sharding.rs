//! The manifest's record of a program split over a device mesh (`--mesh`), and of how
//! `--mesh auto` chose the mesh.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A program split over a device mesh: the mesh, the plan, and how each argument is split
/// (per dim, the mesh axes that split it; every result is whole on every device).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardingInfo {
    /// The axes, major to minor: device `d` sits at `d`'s mixed-radix digits.
    pub mesh: Vec<MeshAxisInfo>,
    /// `auto`, or the plan file's name.
    pub plan: String,
    /// Per weight argument (named as in `weights.order`) that is split, its split.
    pub weights: BTreeMap<String, Vec<Vec<String>>>,
    /// Per user input (in order), its split (`[]` per dim when whole).
    pub inputs: Vec<Vec<Vec<String>>>,
    /// With `--mesh auto`: every mesh tried, the one chosen and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<MeshChoice>,
}

/// How `--mesh auto` chose: every mesh tried with its figures, the one chosen, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeshChoice {
    pub chosen: String,
    pub why: String,
    pub tried: Vec<MeshTried>,
}

/// One mesh `--mesh auto` tried: its figures over the targets (the largest peak's share of a
/// chip's HBM, the longest estimated call, all the collectives), or why it was refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeshTried {
    pub mesh: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// The largest peak's share of its chip's HBM (TPU targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hbm_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_call_s: Option<f64>,
    #[serde(default)]
    pub collective_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeshAxisInfo {
    pub name: String,
    pub size: i64,
}

impl ShardingInfo {
    /// The mesh as `--mesh` takes it: `dp=2,tp=4`.
    pub fn mesh_flag(&self) -> String {
        self.mesh.iter().map(|a| format!("{}={}", a.name, a.size)).collect::<Vec<_>>().join(",")
    }

    /// The mesh, as the passes' type.
    pub fn mesh(&self) -> Result<torchtpu_passes::ir::Mesh, String> {
        torchtpu_passes::ir::Mesh::new(
            self.mesh.iter().map(|a| torchtpu_passes::ir::MeshAxis { name: a.name.clone(), size: a.size }).collect(),
        )
    }
}
