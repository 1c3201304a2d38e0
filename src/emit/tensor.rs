//! Tensor creation: `arange` (constant shapes after specialization) and literals.

use melior::ir::Value;
use torchtpu_passes::ir::{DType, Scalar, TensorType};

use super::builder::{bug, static_dims, Builder, LowerResult};

/// `start + i * step` for `i` in `0..n`, computed in the output dtype.
pub(super) fn arange<'c, 'b>(
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

/// A literal's values as a `stablehlo.constant`, exact: the raw little-endian bytes of the
/// elements (`dense<"0x…">`). Bool is written as `u8` and compared with 0: MLIR versions
/// disagree on the raw form of `i1` (bytes or packed bits), so no `i1` data is written.
pub(super) fn literal<'c, 'b>(b: &Builder<'c, 'b>, values: &[Scalar], out: &TensorType) -> LowerResult<Value<'c, 'b>> {
    let dims = static_dims(out)?;
    let as_int = |v: Scalar| match v {
        Scalar::Bool(x) => i64::from(x),
        Scalar::Int(i) => i,
        Scalar::Float(x) => x as i64,
    };
    let stored = if out.dtype == DType::Bool { DType::U8 } else { out.dtype };
    let mut hex = String::with_capacity(2 + values.len() * 16);
    hex.push_str("0x");
    for &v in values {
        let bytes: Vec<u8> = match (stored, v) {
            (DType::U8, _) => vec![u8::from(as_int(v) != 0)],
            (DType::I32, _) => i32::try_from(as_int(v))
                .map_err(|_| format!("literal value {} overflows i32", as_int(v)))?
                .to_le_bytes()
                .into(),
            (DType::I64, _) => as_int(v).to_le_bytes().into(),
            (DType::F32, Scalar::Float(x)) => (x as f32).to_le_bytes().into(),
            (DType::F32, _) => (as_int(v) as f32).to_le_bytes().into(),
            (d, _) => return Err(bug(format!("literals of dtype {d} are not supported"))),
        };
        for byte in bytes {
            hex.push_str(&format!("{byte:02X}"));
        }
    }
    let ty = super::builder::tensor_type_text(&dims, stored);
    let c = b.op("stablehlo.constant", &[], &dims, stored, &[("value", format!("dense<\"{hex}\"> : {ty}"))])?;
    if stored == out.dtype {
        return Ok(c);
    }
    b.compare(c, b.splat(Scalar::Int(0), &dims, stored)?, &dims, stored, "NE")
}
