//! Writes into tensors: `scatter` (all reductions), `index_put`, `slice_scatter`,
//! `select_scatter`, `masked_scatter` and `embedding_dense_backward`, all through
//! `stablehlo.scatter` with coordinates built like the matching gathers.

use melior::ir::Value;
use torchtpu_passes::ir::ops::{Arange, Literal};
use torchtpu_passes::ir::{CumulativeOp, DType, Dim, Graph, NodeId, Op, Scalar, ScatterReduce, TensorType, ValueRef};

use super::builder::{bug, dim_size, norm_dim, static_dims, Builder, LowerResult};
use super::shape::{along_dim_coordinates, index_plan};
use super::Arg;

type V<'c, 'b> = Value<'c, 'b>;

fn list(v: &[i64]) -> String {
    format!("[{}]", v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
}

/// Where a scatter writes: the `#stablehlo.scatter` dimension numbers.
struct Layout<'a> {
    update_window_dims: &'a [i64],
    inserted_window_dims: &'a [i64],
    scatter_dims_to_operand_dims: &'a [i64],
    index_vector_dim: usize,
    /// Operand dims written one slice per entry of the indices' dim of the same position
    /// (`input_batching_dims` and `scatter_indices_batching_dims`); empty for most scatters.
    batching: &'a [(i64, i64)],
}

#[allow(clippy::too_many_arguments)] // the operands and attributes of `stablehlo.scatter`
/// `stablehlo.scatter` whose region combines the old value and the update with `combiner`
/// (`None`: the update replaces it).
fn scatter_op<'c, 'b>(
    b: &Builder<'c, 'b>,
    operand: V<'c, 'b>,
    indices: V<'c, 'b>,
    updates: V<'c, 'b>,
    layout: &Layout<'_>,
    combiner: Option<&str>,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let region = b.scalar_region(&[dt, dt], |r, a| {
        Ok(vec![match combiner {
            Some(name) => r.op(name, &[a[0], a[1]], &[], dt, &[])?,
            None => a[1],
        }])
    })?;
    let batching = if layout.batching.is_empty() {
        String::new()
    } else {
        let (operand, indices): (Vec<i64>, Vec<i64>) = layout.batching.iter().copied().unzip();
        format!(", input_batching_dims = {}, scatter_indices_batching_dims = {}", list(&operand), list(&indices))
    };
    let numbers = format!(
        "#stablehlo.scatter<update_window_dims = {}, inserted_window_dims = {}{batching}, scatter_dims_to_operand_dims = {}, index_vector_dim = {}>",
        list(layout.update_window_dims),
        list(layout.inserted_window_dims),
        list(layout.scatter_dims_to_operand_dims),
        layout.index_vector_dim
    );
    let attrs = [
        ("scatter_dimension_numbers", numbers),
        ("indices_are_sorted", "false".into()),
        ("unique_indices", "false".into()),
    ];
    Ok(b.op_n("stablehlo.scatter", &[operand, indices, updates], &[(dims, dt)], &attrs, vec![region])?.remove(0))
}

fn combiner(reduce: ScatterReduce, dt: DType) -> Option<&'static str> {
    match reduce {
        ScatterReduce::Replace => None,
        ScatterReduce::Sum | ScatterReduce::Mean => {
            Some(if dt == DType::Bool { "stablehlo.or" } else { "stablehlo.add" })
        }
        ScatterReduce::Prod => Some(if dt == DType::Bool { "stablehlo.and" } else { "stablehlo.multiply" }),
        ScatterReduce::Amax => Some("stablehlo.maximum"),
        ScatterReduce::Amin => Some("stablehlo.minimum"),
    }
}

/// `scatter`, `scatter_add` and `scatter_reduce` along `dim`. With `include_self=false` the
/// positions that receive updates start from the reduction's identity; `mean` divides by the
/// number of contributions (plus one for `self` when included).
pub(super) fn scatter<'c, 'b>(
    b: &Builder<'c, 'b>,
    (dim, reduce, include_self): (i64, ScatterReduce, bool),
    value: Option<Scalar>,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let (this, index) = (args[0], args[1]);
    let axis = norm_dim(dim, dims.len())? as usize;
    let idx_dims = static_dims(index.ty)?;
    let coords = along_dim_coordinates(b, &dims, axis, index)?;
    let updates = match value {
        Some(v) => b.splat(v, &idx_dims, dt)?,
        None => {
            // `src` may be larger than `index`: only its leading `index.shape` block is used.
            let src = args[2];
            let sd = static_dims(src.ty)?;
            let v = b.convert(src.v, &sd, src.ty.dtype, dt)?;
            if sd == idx_dims {
                v
            } else {
                let strides = vec![1; sd.len()];
                let attrs = [
                    ("start_indices", super::builder::i64_array(&vec![0; sd.len()])),
                    ("limit_indices", super::builder::i64_array(&idx_dims)),
                    ("strides", super::builder::i64_array(&strides)),
                ];
                b.op("stablehlo.slice", &[v], &idx_dims, dt, &attrs)?
            }
        }
    };
    let all: Vec<i64> = (0..dims.len() as i64).collect();
    let layout = Layout {
        update_window_dims: &[],
        inserted_window_dims: &all,
        scatter_dims_to_operand_dims: &all,
        index_vector_dim: idx_dims.len(),
        batching: &[],
    };
    let base = b.convert(this.v, &dims, this.ty.dtype, dt)?;
    let touched = || -> LowerResult<V<'c, 'b>> {
        let zeros = b.splat(Scalar::Int(0), &dims, DType::I64)?;
        let ones = b.splat(Scalar::Int(1), &idx_dims, DType::I64)?;
        scatter_op(b, zeros, coords, ones, &layout, Some("stablehlo.add"), &dims, DType::I64)
    };
    let start = if include_self || reduce == ScatterReduce::Replace {
        base
    } else {
        let hit = b.compare(touched()?, b.splat(Scalar::Int(0), &dims, DType::I64)?, &dims, DType::I64, "GT")?;
        b.op("stablehlo.select", &[hit, b.splat(reduce.identity(dt), &dims, dt)?, base], &dims, dt, &[])?
    };
    let result = scatter_op(b, start, coords, updates, &layout, combiner(reduce, dt), &dims, dt)?;
    if reduce != ScatterReduce::Mean {
        return Ok(result);
    }
    let mut count = touched()?;
    if include_self {
        count = b.op("stablehlo.add", &[count, b.splat(Scalar::Int(1), &dims, DType::I64)?], &dims, DType::I64, &[])?;
    }
    let count =
        b.op("stablehlo.maximum", &[count, b.splat(Scalar::Int(1), &dims, DType::I64)?], &dims, DType::I64, &[])?;
    let count = b.convert(count, &dims, DType::I64, dt)?;
    if dt.is_float() {
        b.op("stablehlo.divide", &[result, count], &dims, dt, &[])
    } else {
        super::math::floor_div(b, result, count, &dims, dt)
    }
}

/// `index_put(self, indices, values, accumulate)`: `self[indices] = values` (or `+=`), with
/// `values` broadcast to the shape `self[indices]` has.
pub(super) fn index_put<'c, 'b>(
    b: &Builder<'c, 'b>,
    (present, per_row): (&[bool], bool),
    accumulate: bool,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let mut rest = args[1..].iter().copied();
    let given: Vec<Option<Arg>> = present.iter().map(|&p| if p { rest.next() } else { None }).collect();
    let values = rest.next().ok_or("index_put needs values")?;
    if let [Some(mask)] = given.as_slice() {
        if mask.ty.dtype == DType::Bool {
            return masked_put(b, (args[0], *mask, values), accumulate, &dims, dt);
        }
    }
    if per_row {
        return index_put_per_row(b, (args[0], &given, values), accumulate, &dims, dt);
    }
    let coordinate_types = mask_coordinate_types(&given)?;
    let indices = masks_as_coordinates(b, &dims, &given, &coordinate_types)?;
    let Some(plan) = index_plan(b, &dims, &indices)? else {
        return Err("index_put without any index tensor".into());
    };
    // The shape of `self[indices]`: batch dims plus kept dims at the offsets gather would use.
    let kept: Vec<i64> =
        (0..dims.len() as i64).filter(|d| !plan.indexed.contains(d)).map(|d| dims[d as usize]).collect();
    let rank = plan.batch.len() + kept.len();
    let mut view = vec![0; rank];
    let mut batch_it = plan.batch.iter();
    let mut kept_it = kept.iter();
    for (pos, slot) in view.iter_mut().enumerate() {
        *slot = if plan.offset_dims.contains(&(pos as i64)) {
            *kept_it.next().unwrap_or(&1)
        } else {
            *batch_it.next().unwrap_or(&1)
        };
    }
    let layout = Layout {
        update_window_dims: &plan.offset_dims,
        inserted_window_dims: &plan.indexed,
        scatter_dims_to_operand_dims: &plan.indexed,
        index_vector_dim: plan.batch.len(),
        batching: &[],
    };
    put_values(b, (args[0], plan.start, values), &view, &layout, accumulate, dt)
}

/// `base` with `values`, broadcast to `view`, written (or added, `accumulate`) at `start` by a
/// scatter of `layout`: the end of every `index_put`.
fn put_values<'c, 'b>(
    b: &Builder<'c, 'b>,
    (base, start, values): (Arg<'c, 'b, '_>, V<'c, 'b>, Arg<'c, 'b, '_>),
    view: &[i64],
    layout: &Layout<'_>,
    accumulate: bool,
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let dims = static_dims(base.ty)?;
    let vd = static_dims(values.ty)?;
    let v = b.convert(values.v, &vd, values.ty.dtype, dt)?;
    let updates = b.broadcast_to(v, &vd, view, dt)?;
    let base = b.convert(base.v, &dims, base.ty.dtype, dt)?;
    let combine = if accumulate { combiner(ScatterReduce::Sum, dt) } else { None };
    scatter_op(b, base, start, updates, layout, combine, &dims, dt)
}

/// Whether `index_put` node `id` writes one slice per row of its operand: its first index is
/// `arange(0, n)` over the operand's first dim `n` (or the literal folded from it), and the
/// indices are vectors of `n` on the leading dims (a KV cache written at each row's own
/// position: `cache[arange(B), pos] = new`).
pub(super) fn writes_per_row(graph: &Graph, id: NodeId, present: &[bool]) -> bool {
    let ins = graph.inputs(id);
    let count = present.iter().take_while(|&&p| p).count();
    if count < 2 || present[count..].iter().any(|&p| p) {
        return false;
    }
    let Some(&Dim::Static(n)) = graph.value_type(ins[0]).dims.first() else { return false };
    let indices = &ins[1..=count];
    let vector = |v: &ValueRef| {
        let t = graph.value_type(*v);
        t.dims == [Dim::Static(n)] && t.dtype.is_integer()
    };
    // The rows' `arange`, or the literal the constant folder made of it.
    let rows = match &graph.node(indices[0].node).op {
        Op::Arange(a) => *a == Arange { start: Scalar::Int(0), end: Scalar::Int(n), step: Scalar::Int(1) },
        Op::Literal(Literal { values }) => values.iter().copied().eq((0..n).map(Scalar::Int)),
        _ => false,
    };
    rows && indices.iter().all(vector)
}

/// [`index_put`] of one slice per row ([`writes_per_row`]): a scatter whose operand's first
/// dim is a batching dim of the indices' first, so that a program split along the rows (`dp`)
/// writes each device's rows where they are, with no gather of the indices and updates.
fn index_put_per_row<'c, 'b>(
    b: &Builder<'c, 'b>,
    (base, given, values): (Arg<'c, 'b, '_>, &[Option<Arg<'c, 'b, '_>>], Arg<'c, 'b, '_>),
    accumulate: bool,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let count = given.iter().take_while(|g| g.is_some()).count();
    // The other indices' coordinates, wrapped as Python wraps negative ones: `[n, count - 1]`.
    let mut rest = given.to_vec();
    rest[0] = None;
    let plan = index_plan(b, dims, &rest)?.ok_or_else(|| bug("a per-row write without positions"))?;
    let view: Vec<i64> = std::iter::once(dims[0]).chain(dims[count..].iter().copied()).collect();
    let window: Vec<i64> = (1..view.len() as i64).collect();
    let layout = Layout {
        update_window_dims: &window,
        inserted_window_dims: &plan.indexed,
        scatter_dims_to_operand_dims: &plan.indexed,
        index_vector_dim: 1,
        batching: &[(0, 0)],
    };
    put_values(b, (base, plan.start, values), &view, &layout, accumulate, dt)
}

/// `self[mask] = values` (or `+=`) with one boolean mask over the leading dims: a select,
/// whatever the number of trues. Values that broadcast to the trailing dims (the same values
/// at every selected position, as `x[ids == eoi] = embedding` writes them) are selected as
/// they are; values with one row per selected position (`x[mask] = f(x[mask])`, its count made
/// by data and padded to its bound) are first gathered to the positions ([`rows_at_trues`]).
fn masked_put<'c, 'b>(
    b: &Builder<'c, 'b>,
    (x, mask, values): (Arg<'c, 'b, '_>, Arg<'c, 'b, '_>, Arg<'c, 'b, '_>),
    accumulate: bool,
    dims: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let md = static_dims(mask.ty)?;
    if dims.get(..md.len()) != Some(&md[..]) {
        return Err(format!("a boolean index of shape {md:?} does not match the indexed dims of {dims:?}").into());
    }
    let trailing = &dims[md.len()..];
    let mut vd = static_dims(values.ty)?;
    while vd.len() > trailing.len() && vd[0] == 1 {
        vd.remove(0);
    }
    let broadcasts = |vd: &[i64]| {
        vd.len() <= trailing.len() && vd.iter().rev().zip(trailing.iter().rev()).all(|(&v, &t)| v == t || v == 1)
    };
    let v = if broadcasts(&vd) {
        let v = b.reshape(values.v, &vd, values.ty.dtype)?;
        let v = b.convert(v, &vd, values.ty.dtype, dt)?;
        b.broadcast_to(v, &vd, dims, dt)?
    } else if vd.len() == trailing.len() + 1 && vd[0] >= 1 && broadcasts(&vd[1..]) {
        let v = b.convert(values.v, &vd, values.ty.dtype, dt)?;
        let rows = b.broadcast_to(v, &vd, &[&vd[..1], trailing].concat(), dt)?;
        rows_at_trues(b, mask.v, &md, rows, vd[0], trailing, dt)?
    } else {
        return Err(format!(
            "index_put with a boolean mask of shape {md:?} and values of shape {:?}: they neither broadcast to \
             {trailing:?} nor give one row of that shape per selected position",
            static_dims(values.ty)?
        )
        .into());
    };
    let mut mask_shape = md.clone();
    mask_shape.resize(dims.len(), 1);
    let m = b.reshape(mask.v, &mask_shape, DType::Bool)?;
    let m = b.broadcast_to(m, &mask_shape, dims, DType::Bool)?;
    let base = b.convert(x.v, dims, x.ty.dtype, dt)?;
    if accumulate {
        let added = b.op("stablehlo.add", &[base, v], dims, dt, &[])?;
        b.op("stablehlo.select", &[m, added, base], dims, dt, &[])
    } else {
        b.op("stablehlo.select", &[m, v, base], dims, dt, &[])
    }
}

/// `rows[r]` at the position of the mask's `r`-th true entry (row-major), laid out as
/// `mask_dims ++ trailing`: each position takes the row its running count of trues names
/// (positions that are not true take row 0, for the caller's select to drop). `rows` holds `k`
/// rows: as many as the trues, or their bound with the rows past the real count unread.
fn rows_at_trues<'c, 'b>(
    b: &Builder<'c, 'b>,
    mask: V<'c, 'b>,
    mask_dims: &[i64],
    rows: V<'c, 'b>,
    k: i64,
    trailing: &[i64],
    dt: DType,
) -> LowerResult<V<'c, 'b>> {
    let n: i64 = mask_dims.iter().product();
    let flat = b.convert(b.reshape(mask, &[n], DType::Bool)?, &[n], DType::Bool, DType::I64)?;
    let flat_ty = TensorType::new(DType::I64, &[n]);
    let running = super::reduce::cumulative(b, (CumulativeOp::Cumsum, 0), Arg { v: flat, ty: &flat_ty }, &flat_ty)?;
    let rank =
        b.op("stablehlo.subtract", &[running, b.splat(Scalar::Int(1), &[n], DType::I64)?], &[n], DType::I64, &[])?;
    let (lo, hi) = (b.splat(Scalar::Int(0), &[n], DType::I64)?, b.splat(Scalar::Int(k - 1), &[n], DType::I64)?);
    let rank = b.op("stablehlo.clamp", &[lo, rank, hi], &[n], DType::I64, &[])?;
    let start = b.reshape(rank, &[n, 1], DType::I64)?;
    let width: i64 = trailing.iter().product();
    let table = b.reshape(rows, &[k, width], dt)?;
    let picked =
        super::shape::gather_op(b, table, start, &[1], &[0], &[0], 1, &[1, width], &TensorType::new(dt, &[n, width]))?;
    b.reshape(picked, &[mask_dims, trailing].concat(), dt)
}

/// For `index_put` with boolean masks among integer indices (`x[mask, idx] = v`): the type of
/// the integer coordinates each mask stands for, `i64[k]` with `k` the length the integer
/// indices broadcast to (PyTorch requires the mask's count of true entries to be `k`). Empty
/// when no index is a mask.
fn mask_coordinate_types(indices: &[Option<Arg<'_, '_, '_>>]) -> LowerResult<Vec<TensorType>> {
    let masks = indices.iter().flatten().filter(|a| a.ty.dtype == DType::Bool).count();
    if masks == 0 {
        return Ok(vec![]);
    }
    let mut k = None;
    for a in indices.iter().flatten().filter(|a| a.ty.dtype != DType::Bool) {
        let n: i64 = static_dims(a.ty)?.iter().product();
        k = Some(k.map_or(n, |k: i64| k.max(n)));
    }
    let k = k.ok_or(
        "index_put with only boolean-mask indices writes a data-dependent number of values; \
         export turns the common forms into `where`, this one is not supported",
    )?;
    let coords: usize = indices.iter().flatten().filter(|a| a.ty.dtype == DType::Bool).map(|a| a.ty.rank()).sum();
    Ok(vec![TensorType::new(DType::I64, &[k]); coords])
}

/// The indices with each boolean mask replaced by one integer index per mask dim: the
/// coordinates of its first `k` true entries in row-major order (`types`, from
/// [`mask_coordinate_types`]). Entry `j` is found as the number of positions whose running
/// count of trues is at most `j`; positions past the last true are out of range, so a mask
/// with fewer trues than PyTorch requires writes nothing there.
fn masks_as_coordinates<'c, 'b, 't>(
    b: &Builder<'c, 'b>,
    dims: &[i64],
    indices: &[Option<Arg<'c, 'b, 't>>],
    types: &'t [TensorType],
) -> LowerResult<Vec<Option<Arg<'c, 'b, 't>>>> {
    if types.is_empty() {
        return Ok(indices.to_vec());
    }
    let k = types[0].dims[0].as_static().unwrap_or(0);
    let mut out = Vec::with_capacity(types.len() + indices.len());
    let mut next_type = types.iter();
    let mut at = 0; // the dim of `self` the next index applies to
    for idx in indices {
        match idx {
            Some(mask) if mask.ty.dtype == DType::Bool => {
                let md = static_dims(mask.ty)?;
                if md.is_empty() || dims.get(at..at + md.len()) != Some(&md[..]) {
                    return Err(
                        format!("a boolean index of shape {md:?} does not match the indexed dims of {dims:?}").into()
                    );
                }
                for coord in mask_positions(b, mask.v, &md, k)? {
                    let ty = next_type.next().ok_or_else(|| bug("mask coordinate types"))?;
                    out.push(Some(Arg { v: coord, ty }));
                }
                at += md.len();
            }
            other => {
                out.push(*other);
                at += 1;
            }
        }
    }
    Ok(out)
}

/// The coordinates (one `i64[k]` per dim of `mask_dims`) of the first `k` true entries.
fn mask_positions<'c, 'b>(
    b: &Builder<'c, 'b>,
    mask: V<'c, 'b>,
    mask_dims: &[i64],
    k: i64,
) -> LowerResult<Vec<V<'c, 'b>>> {
    let n: i64 = mask_dims.iter().product();
    let flat = b.convert(b.reshape(mask, &[n], DType::Bool)?, &[n], DType::Bool, DType::I64)?;
    let flat_ty = TensorType::new(DType::I64, &[n]);
    let running = super::reduce::cumulative(b, (CumulativeOp::Cumsum, 0), Arg { v: flat, ty: &flat_ty }, &flat_ty)?;
    let grid = [k, n];
    let running = b.broadcast_to(running, &[n], &grid, DType::I64)?;
    let j = b.op("stablehlo.iota", &[], &grid, DType::I64, &[("iota_dimension", "0 : i64".into())])?;
    let before = b.compare(running, j, &grid, DType::I64, "LE")?;
    let before = b.convert(before, &grid, DType::Bool, DType::I64)?;
    let position = b.reduce(before, &grid, &[1], DType::I64, "stablehlo.add", Scalar::Int(0))?;
    // Row-major unravel: coordinate t is (position / stride_t) % size_t.
    let mut coords = Vec::with_capacity(mask_dims.len());
    for (t, &size) in mask_dims.iter().enumerate() {
        let stride: i64 = mask_dims[t + 1..].iter().product();
        let q = b.op(
            "stablehlo.divide",
            &[position, b.splat(Scalar::Int(stride), &[k], DType::I64)?],
            &[k],
            DType::I64,
            &[],
        )?;
        let c = if t == 0 {
            q // keeps positions past the end out of range
        } else {
            b.op("stablehlo.remainder", &[q, b.splat(Scalar::Int(size), &[k], DType::I64)?], &[k], DType::I64, &[])?
        };
        coords.push(c);
    }
    Ok(coords)
}

/// `slice_scatter`: a scatter along `dim` at `start, start+step, …` of `src`'s slices.
pub(super) fn slice_scatter<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    (start, end, step): (&Dim, &Dim, i64),
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let (axis, size) = dim_size(&dims, dim)?;
    let bound = |d: &Dim| -> LowerResult<i64> {
        let v = d.as_static().ok_or("slice bound is still symbolic")?;
        Ok((if v < 0 { v + size } else { v }).clamp(0, size))
    };
    let (lo, _) = (bound(start)?, bound(end)?);
    let src = args[1];
    let sd = static_dims(src.ty)?;
    let n = sd[axis];
    let iota = b.op("stablehlo.iota", &[], &[n, 1], DType::I64, &[("iota_dimension", "0 : i64".into())])?;
    let scaled = b.op(
        "stablehlo.multiply",
        &[iota, b.splat(Scalar::Int(step), &[n, 1], DType::I64)?],
        &[n, 1],
        DType::I64,
        &[],
    )?;
    let indices =
        b.op("stablehlo.add", &[scaled, b.splat(Scalar::Int(lo), &[n, 1], DType::I64)?], &[n, 1], DType::I64, &[])?;
    let window: Vec<i64> = (0..dims.len() as i64).filter(|&d| d != axis as i64).collect();
    let layout = Layout {
        update_window_dims: &window,
        inserted_window_dims: &[axis as i64],
        scatter_dims_to_operand_dims: &[axis as i64],
        index_vector_dim: 1,
        batching: &[],
    };
    // Updates carry the scatter dim first: move `axis` of `src` to the front.
    let mut perm: Vec<i64> = vec![axis as i64];
    perm.extend(window.iter().copied());
    let moved: Vec<i64> = perm.iter().map(|&p| sd[p as usize]).collect();
    let v = b.convert(src.v, &sd, src.ty.dtype, dt)?;
    let updates =
        b.op("stablehlo.transpose", &[v], &moved, dt, &[("permutation", super::builder::i64_array(&perm))])?;
    let layout = Layout { update_window_dims: &(1..dims.len() as i64).collect::<Vec<_>>(), ..layout };
    let base = b.convert(args[0].v, &dims, args[0].ty.dtype, dt)?;
    scatter_op(b, base, indices, updates, &layout, None, &dims, dt)
}

/// `select_scatter`: `src` (without dim `dim`) written at `index` of that dim.
pub(super) fn select_scatter<'c, 'b>(
    b: &Builder<'c, 'b>,
    dim: i64,
    index: i64,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let dims = static_dims(out)?;
    let (axis, size) = dim_size(&dims, dim)?;
    let i = if index < 0 { index + size } else { index };
    let mut one = dims.clone();
    one[axis] = 1;
    let src = args[1];
    let reshaped = b.reshape(src.v, &one, src.ty.dtype)?;
    let ty = TensorType::new(src.ty.dtype, &one);
    let start = Dim::Static(i);
    slice_scatter(b, axis as i64, (&start, &Dim::Static(i + 1), 1), &[args[0], Arg { v: reshaped, ty: &ty }], out)
}

/// `masked_scatter(self, mask, source)`: the k-th true position of the (broadcast) mask takes
/// the k-th element of `source` (flattened); others keep `self`.
pub(super) fn masked_scatter<'c, 'b>(
    b: &Builder<'c, 'b>,
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let n: i64 = dims.iter().product();
    let md = static_dims(args[1].ty)?;
    let mask = b.broadcast_to(b.convert(args[1].v, &md, args[1].ty.dtype, DType::Bool)?, &md, &dims, DType::Bool)?;
    let flat_mask = b.reshape(mask, &[n], DType::Bool)?;
    let as_int = b.convert(flat_mask, &[n], DType::Bool, DType::I64)?;
    // Inclusive prefix count minus one: the source position of each true element.
    let init = b.splat(Scalar::Int(0), &[], DType::I64)?;
    let region = b.scalar_region(&[DType::I64, DType::I64], |r, a| {
        Ok(vec![r.op("stablehlo.add", &[a[0], a[1]], &[], DType::I64, &[])?])
    })?;
    let attrs = [
        ("window_dimensions", super::builder::i64_array(&[n.max(1)])),
        ("padding", format!("dense<[[{}, 0]]> : tensor<1x2xi64>", (n - 1).max(0))),
    ];
    let count =
        b.op_n("stablehlo.reduce_window", &[as_int, init], &[(&[n], DType::I64)], &attrs, vec![region])?.remove(0);
    let pos =
        b.op("stablehlo.subtract", &[count, b.splat(Scalar::Int(1), &[n], DType::I64)?], &[n], DType::I64, &[])?;
    let pos = b.op("stablehlo.maximum", &[pos, b.splat(Scalar::Int(0), &[n], DType::I64)?], &[n], DType::I64, &[])?;
    let src = args[2];
    let sd = static_dims(src.ty)?;
    let sn: i64 = sd.iter().product();
    let flat_src = b.reshape(b.convert(src.v, &sd, src.ty.dtype, dt)?, &[sn], dt)?;
    let pos = b.op(
        "stablehlo.minimum",
        &[pos, b.splat(Scalar::Int((sn - 1).max(0)), &[n], DType::I64)?],
        &[n],
        DType::I64,
        &[],
    )?;
    let pos = b.reshape(pos, &[n, 1], DType::I64)?;
    let numbers =
        "#stablehlo.gather<offset_dims = [], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>";
    let attrs = [
        ("dimension_numbers", numbers.to_string()),
        ("slice_sizes", super::builder::i64_array(&[1])),
        ("indices_are_sorted", "false".to_string()),
    ];
    let taken = b.op("stablehlo.gather", &[flat_src, pos], &[n], dt, &attrs)?;
    let flat_self = b.reshape(b.convert(args[0].v, &dims, args[0].ty.dtype, dt)?, &[n], dt)?;
    let merged = b.op("stablehlo.select", &[flat_mask, taken, flat_self], &[n], dt, &[])?;
    b.reshape(merged, &dims, dt)
}

/// `embedding_dense_backward`: the gradient rows summed into `num_weights` rows by index,
/// skipping `padding_idx`, divided by each index's frequency when `scale_grad_by_freq`.
pub(super) fn embedding_backward<'c, 'b>(
    b: &Builder<'c, 'b>,
    (num_weights, padding_idx, scale_grad_by_freq): (i64, i64, bool),
    args: &[Arg<'c, 'b, '_>],
    out: &TensorType,
) -> LowerResult<V<'c, 'b>> {
    let dims = static_dims(out)?;
    let dt = out.dtype;
    let (grad, idx) = (args[0], args[1]);
    let gd = static_dims(grad.ty)?;
    let id = static_dims(idx.ty)?;
    let n: i64 = id.iter().product();
    let width = *dims.last().ok_or("embedding gradient needs a feature dim")?;
    let flat_idx = b.reshape(b.convert(idx.v, &id, idx.ty.dtype, DType::I64)?, &[n], DType::I64)?;
    let mut rows = b.reshape(b.convert(grad.v, &gd, grad.ty.dtype, dt)?, &[n, width], dt)?;
    let keep = b.compare(flat_idx, b.splat(Scalar::Int(padding_idx), &[n], DType::I64)?, &[n], DType::I64, "NE")?;
    let keep_rows = b.broadcast_to(b.reshape(keep, &[n, 1], DType::Bool)?, &[n, 1], &[n, width], DType::Bool)?;
    rows =
        b.op("stablehlo.select", &[keep_rows, rows, b.splat(Scalar::Int(0), &[n, width], dt)?], &[n, width], dt, &[])?;
    let indices = b.reshape(flat_idx, &[n, 1], DType::I64)?;
    let layout = Layout {
        update_window_dims: &[1],
        inserted_window_dims: &[0],
        scatter_dims_to_operand_dims: &[0],
        index_vector_dim: 1,
        batching: &[],
    };
    if scale_grad_by_freq {
        let counts = {
            let zeros = b.splat(Scalar::Int(0), &[num_weights, 1], dt)?;
            let ones = b.splat(Scalar::Int(1), &[n, 1], dt)?;
            scatter_op(b, zeros, indices, ones, &layout, Some("stablehlo.add"), &[num_weights, 1], dt)?
        };
        let numbers = "#stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>";
        let attrs = [
            ("dimension_numbers", numbers.to_string()),
            ("slice_sizes", super::builder::i64_array(&[1, 1])),
            ("indices_are_sorted", "false".to_string()),
        ];
        let per_row = b.op("stablehlo.gather", &[counts, indices], &[n, 1], dt, &attrs)?;
        let per_row = b.broadcast_to(per_row, &[n, 1], &[n, width], dt)?;
        rows = b.op("stablehlo.divide", &[rows, per_row], &[n, width], dt, &[])?;
    }
    let zeros = b.splat(Scalar::Int(0), &dims, dt)?;
    scatter_op(b, zeros, indices, rows, &layout, Some("stablehlo.add"), &dims, dt)
}
