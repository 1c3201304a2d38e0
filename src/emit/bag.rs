//! `_embedding_bag`: rows of an embedding table looked up by index and combined per bag
//! (sum, mean or max), bags given by offsets into the index list.
//!
//! Bag membership is a `[bags, entries]` mask computed from the offsets (an entry belongs to
//! the last bag whose offset it has reached, and entries equal to `padding_idx` belong to
//! none), so every mode is a masked reduction over the entries, with no data-dependent shape.
//! The three auxiliary outputs are shaped and filled as PyTorch's CPU kernel fills them.

use melior::ir::Value;
use torchtpu_passes::ir::ops::EmbeddingBag;
use torchtpu_passes::ir::{BagMode, DType, Scalar, TensorType};

use super::builder::{i64_array, static_dims, Builder, LowerResult};
use super::shape::index_select;
use super::Arg;

type V<'c, 'b> = Value<'c, 'b>;

fn broadcast<'c, 'b>(b: &Builder<'c, 'b>, v: V<'c, 'b>, to: &[i64], map: &[i64], dt: DType) -> LowerResult<V<'c, 'b>> {
    b.op("stablehlo.broadcast_in_dim", &[v], to, dt, &[("broadcast_dimensions", i64_array(map))])
}

fn iota<'c, 'b>(b: &Builder<'c, 'b>, dims: &[i64], dim: usize) -> LowerResult<V<'c, 'b>> {
    b.op("stablehlo.iota", &[], dims, DType::I64, &[("iota_dimension", format!("{dim} : i64"))])
}

/// `[bags, entries]`: true where entry `i` belongs to bag `j`.
fn membership<'c, 'b>(
    b: &Builder<'c, 'b>,
    idx: V<'c, 'b>,
    offsets: V<'c, 'b>,
    (bags, n): (i64, i64),
    padding_idx: Option<i64>,
) -> LowerResult<(V<'c, 'b>, V<'c, 'b>)> {
    let grid = [bags, n];
    let entry = iota(b, &grid, 1)?;
    let reached = b.compare(entry, broadcast(b, offsets, &grid, &[0], DType::I64)?, &grid, DType::I64, "GE")?;
    let reached = b.convert(reached, &grid, DType::Bool, DType::I64)?;
    let bag_of_entry = b.reduce(reached, &grid, &[0], DType::I64, "stablehlo.add", Scalar::Int(0))?;
    let bag_of_entry =
        b.op("stablehlo.subtract", &[bag_of_entry, b.splat(Scalar::Int(1), &[n], DType::I64)?], &[n], DType::I64, &[])?;
    let mut member =
        b.compare(broadcast(b, bag_of_entry, &grid, &[1], DType::I64)?, iota(b, &grid, 0)?, &grid, DType::I64, "EQ")?;
    if let Some(p) = padding_idx {
        let real = b.compare(idx, b.splat(Scalar::Int(p), &[n], DType::I64)?, &[n], DType::I64, "NE")?;
        let real = broadcast(b, real, &grid, &[1], DType::Bool)?;
        member = b.op("stablehlo.and", &[member, real], &grid, DType::Bool, &[])?;
    }
    Ok((member, bag_of_entry))
}

/// `_embedding_bag(weight, indices, offsets, …, per_sample_weights, include_last_offset,
/// padding_idx)`; outputs `[output, offset2bag, bag_size, max_indices]`.
pub(super) fn embedding_bag<'c, 'b>(
    b: &Builder<'c, 'b>,
    op: &EmbeddingBag,
    args: &[Arg<'c, 'b, '_>],
    out: &[TensorType],
) -> LowerResult<Vec<V<'c, 'b>>> {
    let &EmbeddingBag { mode, include_last_offset, padding_idx, .. } = op;
    let (weight, indices, offsets) = (args[0], args[1], args[2]);
    let (id, od) = (static_dims(indices.ty)?, static_dims(offsets.ty)?);
    if id.len() != 1 || od.len() != 1 {
        return Err(format!("expects 1-D indices and offsets, found {id:?} and {od:?}").into());
    }
    let n = id[0];
    let bags = od[0] - i64::from(include_last_offset);
    let width = static_dims(weight.ty)?[1];
    let dt = out[0].dtype;
    let idx = b.convert(indices.v, &id, indices.ty.dtype, DType::I64)?;
    let offs = b.convert(offsets.v, &od, offsets.ty.dtype, DType::I64)?;
    let offs = b.op(
        "stablehlo.slice",
        &[offs],
        &[bags],
        DType::I64,
        &[("start_indices", i64_array(&[0])), ("limit_indices", i64_array(&[bags])), ("strides", i64_array(&[1]))],
    )?;
    let (member, bag_of_entry) = membership(b, idx, offs, (bags, n), padding_idx)?;

    let rows_ty = TensorType::new(dt, &[n, width]);
    let idx_ty = TensorType::new(DType::I64, &[n]);
    let mut rows = index_select(b, 0, weight, Arg { v: idx, ty: &idx_ty }, &rows_ty)?;
    if let Some(psw) = args.get(3) {
        let psw = broadcast(b, b.convert(psw.v, &[n], psw.ty.dtype, dt)?, &[n, width], &[0], dt)?;
        rows = b.op("stablehlo.multiply", &[rows, psw], &[n, width], dt, &[])?;
    }
    let cube = [bags, n, width];
    let member3 = broadcast(b, member, &cube, &[0, 1], DType::Bool)?;
    let rows3 = broadcast(b, rows, &cube, &[1, 2], dt)?;
    let count = b.reduce(
        b.convert(member, &[bags, n], DType::Bool, DType::I64)?,
        &[bags, n],
        &[1],
        DType::I64,
        "stablehlo.add",
        Scalar::Int(0),
    )?;
    let out_dims = [bags, width];
    let masked = |fill: Scalar| b.op("stablehlo.select", &[member3, rows3, b.splat(fill, &cube, dt)?], &cube, dt, &[]);
    let (output, max_indices) = match mode {
        BagMode::Sum | BagMode::Mean => {
            let sum = b.reduce(masked(Scalar::Int(0))?, &cube, &[1], dt, "stablehlo.add", Scalar::Int(0))?;
            if mode == BagMode::Sum {
                (sum, None)
            } else {
                let at_least_one = b.op(
                    "stablehlo.maximum",
                    &[count, b.splat(Scalar::Int(1), &[bags], DType::I64)?],
                    &[bags],
                    DType::I64,
                    &[],
                )?;
                let divisor = broadcast(b, b.convert(at_least_one, &[bags], DType::I64, dt)?, &out_dims, &[0], dt)?;
                (b.op("stablehlo.divide", &[sum, divisor], &out_dims, dt, &[])?, None)
            }
        }
        BagMode::Max => {
            let max = b.reduce(masked(dt.lowest())?, &cube, &[1], dt, "stablehlo.maximum", dt.lowest())?;
            let empty = b.compare(count, b.splat(Scalar::Int(0), &[bags], DType::I64)?, &[bags], DType::I64, "EQ")?;
            let empty = broadcast(b, empty, &out_dims, &[0], DType::Bool)?;
            let max =
                b.op("stablehlo.select", &[empty, b.splat(Scalar::Int(0), &out_dims, dt)?, max], &out_dims, dt, &[])?;
            (max, Some(first_index_of_max(b, (member3, rows3, max), idx, &cube, dt)?))
        }
    };
    let offset2bag_dims = static_dims(&out[1])?;
    let offset2bag = if offset2bag_dims == [n] {
        b.convert(bag_of_entry, &[n], DType::I64, out[1].dtype)?
    } else {
        b.splat(Scalar::Int(0), &offset2bag_dims, out[1].dtype)?
    };
    let bag_size = if mode == BagMode::Sum {
        b.splat(Scalar::Int(0), &[bags], out[2].dtype)?
    } else {
        b.convert(count, &[bags], DType::I64, out[2].dtype)?
    };
    let max_indices = match max_indices {
        Some(m) => b.convert(m, &out_dims, DType::I64, out[3].dtype)?,
        None => b.convert(bag_size, &[bags], out[2].dtype, out[3].dtype)?,
    };
    Ok(vec![output, offset2bag, bag_size, max_indices])
}

/// For each bag and feature, the table row (index value) of the first entry holding the
/// maximum, as PyTorch's CPU kernel records it; 0 for empty bags.
fn first_index_of_max<'c, 'b>(
    b: &Builder<'c, 'b>,
    (member3, rows3, max): (V<'c, 'b>, V<'c, 'b>, V<'c, 'b>),
    idx: V<'c, 'b>,
    cube: &[i64; 3],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let n = cube[1];
    let max3 = broadcast(b, max, cube, &[0, 2], dt)?;
    let is_max = b.compare(rows3, max3, cube, dt, "EQ")?;
    let hit = b.op("stablehlo.and", &[member3, is_max], cube, DType::Bool, &[])?;
    let entry = iota(b, cube, 1)?;
    let none = b.splat(Scalar::Int(n), cube, DType::I64)?;
    let first = b.reduce(
        b.op("stablehlo.select", &[hit, entry, none], cube, DType::I64, &[])?,
        cube,
        &[1],
        DType::I64,
        "stablehlo.minimum",
        Scalar::Int(n),
    )?;
    let at_first = b.compare(entry, broadcast(b, first, cube, &[0, 2], DType::I64)?, cube, DType::I64, "EQ")?;
    let idx3 = broadcast(b, idx, cube, &[1], DType::I64)?;
    let picked =
        b.op("stablehlo.select", &[at_first, idx3, b.splat(Scalar::Int(0), cube, DType::I64)?], cube, DType::I64, &[])?;
    b.reduce(picked, cube, &[1], DType::I64, "stablehlo.add", Scalar::Int(0))
}
