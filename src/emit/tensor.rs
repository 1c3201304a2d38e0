//! Tensor creation: `arange` (constant shapes after specialization).

use melior::ir::Value;
use torchtpu_passes::ir::{Scalar, TensorType};

use super::builder::{static_dims, Builder, LowerResult};

/// `start + i * step` for `i` in `0..n`, computed in the output dtype.
pub fn arange<'c, 'b>(
    b: &Builder<'c, 'b>,
    start: Scalar,
    step: Scalar,
    out: &TensorType,
) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let iota = b.op("stablehlo.iota", &[], &dims, dt, &[("iota_dimension", "0 : i64".to_string())])?;
    let scaled = b.op("stablehlo.multiply", &[iota, b.splat(step, &dims, dt)?], &dims, dt, &[])?;
    b.op("stablehlo.add", &[scaled, b.splat(start, &dims, dt)?], &dims, dt, &[])
}
