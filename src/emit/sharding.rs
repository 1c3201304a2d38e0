//! Shardy's annotations for a program split over a device mesh: `sdy.mesh @mesh`, an
//! `sdy.sharding` on every argument and result of `@main`, and `sdy.sharding_constraint`s on
//! op results. Shardy (not GSPMD's `mhlo.sharding`) because it is XLA's current partitioner
//! (GSPMD's propagation logs its deprecation on every compile), and because its shardings name
//! mesh axes, as the `shard` pass and the manifest do. Every argument and result gets a closed
//! sharding (whole when nothing splits it): an open or missing one lets the partitioner choose,
//! which would change the shapes each device's buffers have.

use melior::ir::attribute::Attribute;
use melior::ir::operation::{Operation, OperationBuilder};
use melior::ir::{Identifier, Location, Value};
use melior::Context;
use torchtpu_passes::ir::{Mesh, Sharding, TensorType};

use super::builder::{Builder, LowerResult};
use super::Arg;

/// The mesh's symbol.
const MESH: &str = "mesh";

/// `sdy.mesh @mesh = <["dp"=2, "tp"=2]>`.
pub(super) fn mesh_op<'c>(ctx: &'c Context, mesh: &Mesh) -> Result<Operation<'c>, String> {
    let parse = |text: &str| Attribute::parse(ctx, text).ok_or_else(|| format!("cannot parse `{text}`"));
    OperationBuilder::new("sdy.mesh", Location::unknown(ctx))
        .add_attributes(&[
            (Identifier::new(ctx, "sym_name"), parse(&format!("\"{MESH}\""))?),
            (Identifier::new(ctx, "mesh"), parse(&format!("#sdy.mesh<{mesh}>"))?),
        ])
        .build()
        .map_err(|e| e.to_string())
}

/// `#sdy.sharding<@mesh, [{"tp"}, {}]>`.
fn attribute(sharding: &Sharding) -> String {
    format!("#sdy.sharding<@{MESH}, {sharding}>")
}

/// The `sdy.sharding` entry of an argument or result's attribute dictionary: `sharding`, or
/// whole for a value of rank `rank` where it has none.
pub(super) fn entry(sharding: Option<&Sharding>, rank: usize) -> String {
    format!("sdy.sharding = {}", attribute(sharding.unwrap_or(&Sharding::replicated(rank))))
}

/// `v` (of type `ty`) constrained to `sharding`.
pub(super) fn constrain<'c, 'b>(
    b: &Builder<'c, 'b>,
    v: Value<'c, 'b>,
    ty: &TensorType,
    sharding: &Sharding,
) -> LowerResult<Value<'c, 'b>> {
    let dims = super::builder::static_dims(ty)?;
    Ok(b.op_n("sdy.sharding_constraint", &[v], &[(&dims, ty.dtype)], &[("sharding", attribute(sharding))], vec![])?
        .remove(0))
}

/// `x`, once `y` exists: result 0 of `stablehlo.optimization_barrier(x, y)`.
pub(super) fn after<'c, 'b>(b: &Builder<'c, 'b>, x: Arg<'c, 'b, '_>, y: Arg<'c, 'b, '_>) -> LowerResult<Value<'c, 'b>> {
    let (xd, yd) = (super::builder::static_dims(x.ty)?, super::builder::static_dims(y.ty)?);
    let both =
        b.op_n("stablehlo.optimization_barrier", &[x.v, y.v], &[(&xd, x.ty.dtype), (&yd, y.ty.dtype)], &[], vec![])?;
    Ok(both[0])
}
