//! `--mesh` and `--shard-plan`: parsed and checked as the command line is read.

use torchtpu_passes::ir::Mesh;
use torchtpu_passes::shard::plan::ShardPlan;

/// `--mesh`: the axes, or `auto` (chosen by compiling each candidate).
#[derive(Clone, Debug)]
pub(super) enum MeshArg {
    Auto,
    Given(Mesh),
}

pub(super) fn parse_mesh(s: &str) -> Result<MeshArg, String> {
    if s == "auto" {
        return Ok(MeshArg::Auto);
    }
    Mesh::parse(s).map(MeshArg::Given)
}

/// `--shard-plan`: `auto`, or a plan file, read and checked as the command line is parsed.
#[derive(Clone, Debug)]
pub(super) enum ShardPlanArg {
    Auto,
    File(Box<ShardPlan>),
}

pub(super) fn parse_shard_plan(s: &str) -> Result<ShardPlanArg, String> {
    if s == "auto" {
        return Ok(ShardPlanArg::Auto);
    }
    let bytes = std::fs::read(s).map_err(|e| format!("cannot read the plan file `{s}`: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("`{s}` is not a shard plan: it is not UTF-8 text"))?;
    let plan = ShardPlan::from_json(&text).map_err(|e| format!("`{s}` is not a shard plan: {e}"))?;
    Ok(ShardPlanArg::File(Box::new(plan)))
}
