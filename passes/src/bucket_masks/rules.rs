//! The rules the ops' definitions name ([`PaddingRule`]): what each does along a padded dim it
//! does not work along position by position. Every rule is matched: there is no catch-all.

use super::{DynDims, Factors, Masker, Res, MERGED, REFUSED};
use crate::ir::ops::{
    AvgPool, Binary, Convert, Convolution, Full, Gather, Index, IndexSelect, Pad, PaddingRule, Reduce, Slice, View,
    Where,
};
use crate::ir::{
    norm_dim, ArgReduceOp, BinaryOp, DType, Dim, Graph, NodeId, Op, Operand, ReduceOp, Scalar, SymExpr, TensorType,
    ValueRef,
};
use crate::pass::bug;

/// A padded dim an op reads across: operand slot, dim, its factors.
pub(super) type Across = (usize, usize, Factors);

impl Masker<'_> {
    /// The rule `rule` of an op whose padding needs one; `across` lists the padded dims the op
    /// does not work along position by position.
    pub(super) fn rule(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        rule: &PaddingRule,
        in_dyn: &[DynDims],
        across: &[Across],
    ) -> Res<()> {
        let ins = graph.inputs(id);
        let rank = |slot: usize| Self::ty(graph, ins[slot]).rank();
        let prefix_only = || {
            if across.iter().any(|(_, _, f)| f.len() > 1) {
                Err(MERGED.to_string())
            } else {
                Ok(())
            }
        };
        let float_fill = |x: f64| Scalar::Float(x);
        match rule {
            PaddingRule::View => self.view(graph, id),
            PaddingRule::Slice(slice) => self.slice(graph, id, slice, across),
            PaddingRule::Select { dim, index } => {
                prefix_only()?;
                let d = norm_dim(*dim, rank(0));
                let len = in_dyn[0].get(&d).map(|f| f[0].clone()).ok_or_else(|| bug("no padded dim"))?;
                match self.min_of(&len) {
                    Some(m) if *index >= 0 && *index < m => Ok(()),
                    Some(m) if *index < 0 && -*index <= m => self.select_from_end(graph, id, d, &len, *index),
                    _ => Err("selects an index of a dynamic dim that is not valid at every size".into()),
                }
            }
            PaddingRule::Cat { dim } => {
                let out_rank = graph.node(id).outputs[0].rank();
                self.cat(graph, id, norm_dim(*dim, out_rank), in_dyn)
            }
            PaddingRule::Split { dim } => self.split(graph, id, norm_dim(*dim, rank(0)), across),
            PaddingRule::GroupNorm(gn) => self.group_norm(graph, id, gn, across),
            PaddingRule::Gather => self.gather(graph, id, across),
            PaddingRule::IndexPut { present, accumulate } => self.index_put(graph, id, (present, *accumulate), in_dyn),
            PaddingRule::Contract { lhs, rhs } => self.contract(graph, id, *lhs, *rhs),
            PaddingRule::Softmax { dim } => {
                let d = norm_dim(*dim, rank(0));
                self.mask_input(graph, id, 0, &[d], float_fill(f64::NEG_INFINITY))?;
                // The result's positions along `d` are the operand's: factors or pieces stay.
                if let Some(f) = in_dyn[0].get(&d).filter(|f| f.len() > 1) {
                    self.merged.insert((ValueRef { node: id, slot: 0 }, d), f.clone());
                }
                Ok(())
            }
            PaddingRule::Reduce { op, dims } => self.reduce(graph, id, (*op, dims), &in_dyn[0]),
            // Past the real size, the identity of the extremum in the operand's dtype: ties go
            // to the first index, so a padded position is never chosen... when the real
            // positions come first, which factors do not promise.
            PaddingRule::ArgExtremum { op, dim } => {
                prefix_only()?;
                let extremum = if *op == ArgReduceOp::Argmax { ReduceOp::Max } else { ReduceOp::Min };
                let fill = extremum.identity(graph.value_type(ins[0]).dtype);
                self.mask_input(graph, id, 0, &[norm_dim(*dim, rank(0))], fill)
            }
            PaddingRule::Extremum { max, dim } => {
                // Over factors or pieces the values are exact, the indices the bucket's.
                let indices = ValueRef { node: id, slot: 1 };
                if graph.users(id).iter().any(|u| u.2 == 1) || graph.outputs().iter().any(|o| o.value == indices) {
                    prefix_only()?;
                }
                let extremum = if *max { ReduceOp::Max } else { ReduceOp::Min };
                let fill = extremum.identity(graph.value_type(ins[0]).dtype);
                self.mask_input(graph, id, 0, &[norm_dim(*dim, rank(0))], fill)
            }
            PaddingRule::Sort { descending, what } => self.sort(graph, id, (*descending, what), across),
            PaddingRule::Histc => {
                // NaN is counted in no bin.
                let dims: Vec<usize> = across.iter().map(|(_, d, _)| *d).collect();
                self.mask_input(graph, id, 0, &dims, float_fill(f64::NAN))
            }
            PaddingRule::Convolution(conv) => self.convolution(graph, id, conv, across),
            PaddingRule::MaxPool => {
                prefix_only()?;
                if across.iter().any(|(_, d, _)| *d < 2) {
                    return Err(REFUSED.into());
                }
                if graph.users(id).iter().any(|u| u.2 > 0) {
                    return Err("its indices along a dynamic dim are used".into());
                }
                let dims: Vec<usize> = across.iter().map(|(_, d, _)| *d).collect();
                self.mask_input(graph, id, 0, &dims, float_fill(f64::NEG_INFINITY))
            }
            PaddingRule::AvgPool(pool) => self.avg_pool(graph, id, pool, across),
            PaddingRule::Upsample(up) => self.resample(graph, id, up, across),
            PaddingRule::Pad(pad) => self.pad(graph, id, pad, across),
            PaddingRule::Repeat { repeats } => self.repeat(graph, id, repeats, across),
            PaddingRule::Scatter { dim } => self.scatter(graph, id, norm_dim(*dim, rank(0)), across),
            PaddingRule::MaskedScatter => self.masked_scatter(graph, id, in_dyn),
            PaddingRule::Fourier(fft) => self.fourier(graph, id, fft, across),
            PaddingRule::Nms => self.nms(graph, id, across),
            PaddingRule::Nonzero => self.nonzero(graph, id, in_dyn),
            PaddingRule::Item => self.item(graph, id),
        }
    }

    /// True for a dim of symbolic size whose symbols are at their least value in this bucket:
    /// it has no padding here, whatever the op does along it.
    fn unpadded(&self, f: &[SymExpr]) -> bool {
        self.pieces_of(f).is_none() && f.iter().all(|e| self.is_static(e))
    }

    /// The factors of the part `[start, end)` (the bucket's positions) of a dim of `pieces`:
    /// one piece's own, or a dim of the pieces it holds; refused where a bound falls inside a
    /// piece or the part holds none (`what` the op does, for the message).
    fn pieces_between(&mut self, pieces: Vec<Factors>, (start, end): (i64, i64), what: &str) -> Res<Factors> {
        let (mut at, mut kept) = (0i64, vec![]);
        for piece in pieces {
            let next = at.checked_add(self.product(&piece)?).ok_or("its size overflows")?;
            if start <= at && next <= end {
                kept.push(piece);
            } else if next > start && at < end {
                return Err(format!("{what} a dim of pieces inside a piece").into());
            }
            at = next;
        }
        match <[Factors; 1]>::try_from(kept) {
            Ok([one]) => Ok(one),
            Err(none) if none.is_empty() => Err(format!("{what} a dim of pieces and keeps none of them").into()),
            Err(many) => Ok(self.new_pieces(many)),
        }
    }

    /// A split of a dim of pieces at their bounds (ProphetNet's main and n-gram streams,
    /// concatenated for a layer norm and split again), or of equal pieces that a view made
    /// blocks (`[k, piece]`, see `views`), at the blocks' bounds: each part takes its whole
    /// pieces or blocks, a prefix where it is one. A split of any other padded dim is refused.
    fn split(&mut self, graph: &Graph, id: NodeId, d: usize, across: &[Across]) -> Res<()> {
        let [(0, at_dim, f)] = across else { return Err(REFUSED.into()) };
        if *at_dim != d {
            return Err(bug("a split reads across a dim it does not split"));
        }
        if self.unpadded(f) {
            return Ok(());
        }
        let pieces = self.pieces_of(f);
        let mut at = 0i64;
        for (slot, ty) in graph.node(id).outputs.iter().enumerate() {
            let n = ty.dims[d].as_static().ok_or("not specialized")?;
            let end = at.checked_add(n).ok_or("its size overflows")?;
            let factors = match &pieces {
                Some(pieces) => self.pieces_between(pieces.clone(), (at, end), "splits")?,
                None => self.blocks_between(f, (at, end))?,
            };
            if factors.len() > 1 {
                let slot = u16::try_from(slot).map_err(|_| bug("more outputs than a slot holds"))?;
                self.merged.insert((ValueRef { node: id, slot }, d), factors);
            }
            at = end;
        }
        Ok(())
    }

    /// The factors of the part `[start, end)` (the bucket's positions) of a dim of factors
    /// `[k, rest…]` with a static `k` (blocks of the size of `rest`): `[m, rest…]` for `m` whole
    /// blocks, `rest` for one; refused where a bound falls inside a block, or for any other dim.
    fn blocks_between(&self, f: &[SymExpr], (start, end): (i64, i64)) -> Res<Factors> {
        let [outer, rest @ ..] = f else { return Err("splits a dynamic dim".into()) };
        if rest.is_empty() || !self.is_static(outer) {
            return Err("splits a dynamic dim".into());
        }
        let block = self.product(rest)?;
        if block <= 0 || start % block != 0 || end % block != 0 {
            return Err("splits a dim of equal pieces inside a piece".into());
        }
        let blocks = SymExpr::Int((end - start) / block);
        Ok(self.normalize(std::iter::once(blocks).chain(rest.iter().cloned()).collect()))
    }

    /// A slice of a padded dim: from a fixed start along a prefix, with any step (its real part
    /// is the prefix's, cut at the slice's end: the real rows it takes come first, as eager's
    /// `x[:, 1::2]`, Swin's merging of patches, takes them); along a dim of pieces, exactly some of its pieces
    /// (the attention sink sliced off the probabilities: `probs[..., :-1]`).
    fn slice(&mut self, graph: &Graph, id: NodeId, slice: &Slice, across: &[Across]) -> Res<()> {
        let [(0, d, f)] = across else { return Err(REFUSED.into()) };
        if self.unpadded(f) {
            return Ok(());
        }
        if let Some(pieces) = self.pieces_of(f) {
            let size = Self::ty(graph, graph.inputs(id)[0]).dims[*d].as_static().ok_or("not specialized")?;
            // The bounds at the bucket's sizes (as the specialized slice has them); a negative
            // one counts from the end (`probs[..., :-1]`).
            let bound = |e: &Dim| self.padded(&e.to_expr()).map(|b| (if b < 0 { b + size } else { b }).clamp(0, size));
            let (Some(start), Some(end), 1) = (bound(&slice.start), bound(&slice.end), slice.step) else {
                return Err("slices a dim of pieces with a symbolic bound or a step".into());
            };
            let factors = self.pieces_between(pieces, (start, end), "slices")?;
            if factors.len() > 1 {
                self.merged.insert((ValueRef { node: id, slot: 0 }, *d), factors);
            }
            return Ok(());
        }
        if f.len() > 1 {
            return Err(MERGED.into());
        }
        // A start at or before minus the dim's size is 0 at every size (XLM's `x[:, -slen:]`).
        let from_the_front = |start: &SymExpr| {
            SymExpr::Add(vec![start.clone(), f[0].clone()]).simplify().as_const().is_some_and(|c| c <= 0)
        };
        let fixed_start = match &slice.start {
            Dim::Static(s) => *s >= 0,
            Dim::Sym(e) => from_the_front(e),
        };
        if fixed_start {
            Ok(())
        } else {
            Err("slices a dynamic dim from a size-dependent start".into())
        }
    }

    /// `cat` along dim `d`: when only the last piece is padded the real positions stay a prefix;
    /// otherwise the result is a dim of pieces (scores with an attention sink appended).
    fn cat(&mut self, graph: &Graph, id: NodeId, d: usize, in_dyn: &[DynDims]) -> Res<()> {
        let ins = graph.inputs(id);
        let rank = graph.node(id).outputs[0].rank();
        let mut pieces = vec![];
        for (slot, &v) in ins.iter().enumerate() {
            let ty = Self::ty(graph, v);
            // The legacy empty 1-d piece (`torch.cat([torch.tensor([]), x])`) has another rank.
            if ty.rank() != rank {
                continue;
            }
            let size = ty.dims[d].as_static().ok_or("not specialized")?;
            pieces.push(in_dyn[slot].get(&d).cloned().unwrap_or_else(|| vec![SymExpr::Int(size)]));
        }
        let padded = |f: &Factors| f.len() > 1 || f.iter().any(|e| !e.symbols().is_empty());
        let first = pieces.iter().position(padded).unwrap_or(pieces.len());
        if first + 1 == pieces.len() && pieces[first].len() == 1 {
            return Ok(());
        }
        if pieces.iter().any(|f| self.pieces_of(f).is_some()) {
            return Err("concatenates a dim that is already made of pieces".into());
        }
        let factors = self.new_pieces(pieces);
        self.merged.insert((ValueRef { node: id, slot: 0 }, d), factors);
        Ok(())
    }

    /// A gather along a padded dim. Indices that are real positions of it (`arange`, a sort's
    /// indices) read real rows; along a prefix, other indices (computed from data: the offsets
    /// of an MoE's pieces of sorted tokens) are made so: see [`Masker::clamp_into_real_rows`].
    fn gather(&mut self, graph: &mut Graph, id: NodeId, across: &[Across]) -> Res<()> {
        let ins = graph.inputs(id);
        let op = graph.node(id).op.clone();
        for (slot, d, f) in across {
            let index = match &op {
                Op::Index(Index { present }) if *slot == 0 && present.get(*d) == Some(&true) => {
                    Some(1 + present[..*d].iter().filter(|&&p| p).count())
                }
                // Dims the result takes from the indices, or keeps from `x`, position by position.
                Op::Index(_) => None,
                Op::Gather(Gather { dim }) | Op::IndexSelect(IndexSelect { dim })
                    if *slot == 0 && norm_dim(*dim, Self::ty(graph, ins[0]).rank()) == *d =>
                {
                    Some(1)
                }
                _ => return Err(format!("reads across the dynamic dim {d} of operand {slot}").into()),
            };
            match index.map(|i| (i, self.positions.get(&ins[i]))) {
                None if f.len() > 1 => return Err(MERGED.into()),
                None => {}
                Some((_, Some(p))) if self.same_factors(p, f) => {}
                Some((i, _)) if self.window_fits(&ins[i], f) => {}
                // Numbers: from data, or positions of another prefix.
                Some((i, p)) if f.len() == 1 && p.is_none_or(|p| p.len() == 1) => {
                    self.clamp_into_real_rows(graph, id, i, &f[0])?
                }
                Some(_) => {
                    return Err(format!("gathers along the dynamic dim {d} with indices that are not positions").into())
                }
            }
        }
        Ok(())
    }

    /// Indices from data along a padded prefix of real length `len`, as the program's input
    /// `slot` of `id`: a negative one wrapped by the real length (as eager wraps it by its
    /// size), then all clamped into `[0, len)`. Every index eager accepts reads the row it
    /// reads in eager; one eager rejects (out of bounds) reads a real row too, never padding.
    fn clamp_into_real_rows(&mut self, graph: &mut Graph, id: NodeId, slot: usize, len: &SymExpr) -> Res<()> {
        let index = graph.inputs(id)[slot];
        let wrapped = self.wrapped(graph, id, index, len)?;
        let ty = Self::ty(graph, index);
        let real = self.real_length_as(graph, id, len, ty.dtype)?;
        let scalar_ty = TensorType { dtype: ty.dtype, dims: vec![] };
        let last = self.binary(graph, id, BinaryOp::Sub, Operand::Scalar(Scalar::Int(1)), &[real], scalar_ty);
        let at_most = self.binary(graph, id, BinaryOp::Minimum, Operand::Tensor, &[wrapped, last], ty.clone());
        let clamped = self.binary(graph, id, BinaryOp::Maximum, Operand::Scalar(Scalar::Int(0)), &[at_most], ty);
        graph.set_input(id, slot as u16, clamped);
        Ok(())
    }

    /// `index` with its negative entries wrapped by the real length `len`, as eager wraps them
    /// by its size (the bucket's program would wrap them by the padded size).
    fn wrapped(&mut self, graph: &mut Graph, id: NodeId, index: ValueRef, len: &SymExpr) -> Res<ValueRef> {
        let ty = Self::ty(graph, index);
        if !ty.dtype.is_integer() {
            return Err(format!("indexes a dynamic dim with {} indices", ty.dtype).into());
        }
        let real = self.real_length_as(graph, id, len, ty.dtype)?;
        let bool_ty = TensorType { dtype: DType::Bool, dims: ty.dims.clone() };
        let negative = self.binary(graph, id, BinaryOp::Lt, Operand::Scalar(Scalar::Int(0)), &[index], bool_ty);
        let shifted = self.binary(graph, id, BinaryOp::Add, Operand::Tensor, &[index, real], ty.clone());
        let select = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Tensor });
        Ok(self.add(graph, id, select, ty, &[negative, shifted, index]))
    }

    /// The real value of `len` as a scalar of `dtype`.
    fn real_length_as(&mut self, graph: &mut Graph, id: NodeId, len: &SymExpr, dtype: DType) -> Res<ValueRef> {
        let real = self.length(graph, id, len)?;
        if dtype == DType::I64 {
            return Ok(real);
        }
        Ok(self.add(graph, id, Op::Convert(Convert), TensorType { dtype, dims: vec![] }, &[real]))
    }

    /// A window of positions (see `Masker::windows`) that indexes a padded prefix of `f` reads
    /// real positions only at its own real positions: the dim is at least `reach` longer than
    /// the window's at every size (unfold's `[s + 2p]` padded input read at `i + j`, `j < 2p + 1`).
    fn window_fits(&self, index: &ValueRef, f: &[SymExpr]) -> bool {
        let Some(([along], reach)) = self.windows.get(index).map(|(w, r)| (w.as_slice(), *r)) else { return false };
        let [len] = f else { return false };
        let minus = |e: &SymExpr| SymExpr::Mul(vec![SymExpr::Int(-1), e.clone()]);
        let slack = SymExpr::Add(vec![len.clone(), minus(along), SymExpr::Int(-reach)]).simplify();
        self.min_of(&slack).is_some_and(|least| least >= 0)
    }

    /// `self[indices] = values` with padded indices: into a tensor with no dynamic dim (a KV
    /// cache written at a prompt's positions), or whose padded dims are indexed by positions of
    /// them (tokens an MoE's expert gathered), the padded indices are set past the end of
    /// their dim, so that the scatter drops them; into a padded dim along a sort's
    /// permutation (the inverse permutation of a router's sort), every position is written
    /// once and the result's real positions are the sort's.
    fn index_put(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (present, accumulate): (&[bool], bool),
        in_dyn: &[DynDims],
    ) -> Res<()> {
        let ins = graph.inputs(id);
        if present == [true] && Self::ty(graph, ins[1]).dtype == DType::Bool {
            return self.masked_put(graph, id, in_dyn);
        }
        let indexed: Vec<usize> = present.iter().enumerate().filter(|(_, &p)| p).map(|(d, _)| d).collect();
        // Every padded dim of the target indexed by positions of it (not a permutation of it):
        // real indices land on real positions (an MoE adding its experts' results back to
        // their tokens). A target that is the same everywhere (`zeros`) takes the layout of
        // the positions written into it: a prefix `[batch·seq]` becomes factors `[batch, seq]`.
        // Padded prefixes indexed by numbers from data (the offsets of an MoE's pieces of
        // sorted tokens): real indices are real positions as eager has them, after wrapping.
        let permutes = ins[1..].iter().any(|v| self.perms.contains_key(v));
        let uniform = matches!(graph.node(ins[0].node).op, Op::Full(_));
        // A padded dim before or after every indexed one is taken whole (`out[:, :, ih, iw] +=
        // cols`, a fold's scatter in a dynamic batch; a pad of height then width to whole
        // windows): padding is written with padding when `values` is padded alike there or
        // broadcasts over it.
        let values = 1 + indexed.len();
        let index_rank = ins[1..values].iter().map(|&v| Self::ty(graph, v).rank()).max().unwrap_or(0);
        let result_rank = (Self::ty(graph, ins[0]).rank() + index_rank).saturating_sub(indexed.len());
        let values_ty = Self::ty(graph, ins[values]);
        let contiguous = indexed.windows(2).all(|w| w[1] == w[0] + 1);
        // Where dim `d` of `self`, not indexed, is in the result.
        let in_result = |d: usize| match (indexed.first(), indexed.last()) {
            (Some(&first), _) if d < first => Some(d),
            (_, Some(&last)) if d > last => (d + index_rank).checked_sub(indexed.len()),
            _ => None,
        };
        let sliced = |d: usize, f: &[SymExpr]| {
            let Some(r) = in_result(d).filter(|_| contiguous) else { return false };
            match (r + values_ty.rank()).checked_sub(result_rank) {
                None => true,
                Some(vd) => match in_dyn[values].get(&vd) {
                    Some(g) => self.same_factors(g, f),
                    None => values_ty.dims.get(vd) == Some(&Dim::Static(1)),
                },
            }
        };
        let (mut layouts, mut from_data) = (vec![], vec![]);
        for (&d, f) in &in_dyn[0] {
            let slot = indexed.iter().position(|k| *k == d).map(|i| 1 + i);
            let p = slot.and_then(|slot| self.positions.get(&ins[slot]));
            match (slot, p) {
                (None, _) if sliced(d, f) => layouts.push((d, f.clone())),
                (Some(_), Some(p)) if self.same_factors(p, f) => layouts.push((d, f.clone())),
                (Some(_), Some(p)) if uniform && self.same_factors(&[SymExpr::Mul(p.clone()).simplify()], f) => {
                    layouts.push((d, p.clone()))
                }
                (Some(slot), p) if f.len() == 1 && p.is_none_or(|p| p.len() == 1) => {
                    layouts.push((d, f.clone()));
                    from_data.push((slot, f[0].clone()));
                }
                _ => break,
            }
        }
        if !in_dyn[0].is_empty() && (permutes || layouts.len() < in_dyn[0].len()) {
            return self.invert(graph, id, (present, accumulate), in_dyn);
        }
        let out = ValueRef { node: id, slot: 0 };
        for (d, f) in layouts.into_iter().filter(|(_, f)| f.len() > 1) {
            self.merged.insert((out, d), f);
        }
        let dims = Self::ty(graph, ins[0]).dims;
        for (slot, &d) in (1..).zip(&indexed) {
            if in_dyn[slot].values().any(|f| f.len() > 1) {
                return Err(MERGED.into());
            }
            let past_end = dims[d].as_static().ok_or("not specialized")?;
            let dynamic: Vec<usize> = in_dyn[slot].keys().copied().collect();
            self.mask_input(graph, id, slot, &dynamic, Scalar::Int(past_end))?;
        }
        for (slot, len) in from_data {
            let index = graph.inputs(id)[slot];
            let wrapped = self.wrapped(graph, id, index, &len)?;
            graph.set_input(id, slot as u16, wrapped);
        }
        Ok(())
    }

    /// `self[mask] = values` (`index_put` with one boolean index, over `self`'s leading dims),
    /// as [`Self::masked_scatter`]: with the mask false wherever it is padded, no padded position
    /// is written and the real true positions keep their row-major order, so `values`' rows
    /// (one per true position, its leading dim padded after the real count) or values the same
    /// at every position land where eager puts them. Each padded dim of `self` must be one the
    /// mask covers, padded alike.
    fn masked_put(&mut self, graph: &mut Graph, id: NodeId, in_dyn: &[DynDims]) -> Res<()> {
        if in_dyn[2].iter().any(|(&d, f)| d != 0 || f.len() > 1) {
            return Err("writes values padded inside (only their leading dim may be padded)".into());
        }
        let covered = |d: usize, f: &[SymExpr]| in_dyn[1].get(&d).is_some_and(|m| self.same_factors(m, f));
        if let Some((d, _)) = in_dyn[0].iter().find(|(&d, f)| !covered(d, f)) {
            return Err(format!("writes into dim {d}, padded, which its boolean index does not cover alike").into());
        }
        self.write_through_mask(graph, id, in_dyn)
    }

    /// The end of a write through a boolean mask (input 1): the result keeps `self`'s merged
    /// dims, and the mask is set false wherever it is padded.
    fn write_through_mask(&mut self, graph: &mut Graph, id: NodeId, in_dyn: &[DynDims]) -> Res<()> {
        let out = ValueRef { node: id, slot: 0 };
        for (&d, f) in in_dyn[0].iter().filter(|(_, f)| f.len() > 1) {
            self.merged.insert((out, d), f.clone());
        }
        let dims: Vec<usize> = in_dyn[1].keys().copied().collect();
        self.mask_input(graph, id, 1, &dims, Scalar::Bool(false))
    }

    /// `masked_scatter(self, mask, source)`: `source`'s elements, in order, at the mask's true
    /// positions. With the mask false wherever it is padded, the real true positions keep their
    /// row-major order and no padded one is written; `source`'s padding, after its real rows
    /// (its leading dim, a prefix: rows gathered at a count from data), is never reached, as
    /// eager needs no more elements than there are true positions. A padded dim of `self` that
    /// the mask broadcasts over would take elements between real ones: refused, unless it is
    /// `self`'s leading dim (its padding comes after every real position).
    fn masked_scatter(&mut self, graph: &mut Graph, id: NodeId, in_dyn: &[DynDims]) -> Res<()> {
        if in_dyn[2].iter().any(|(&d, f)| d != 0 || f.len() > 1) {
            return Err("scatters a source padded inside (only its leading dim may be padded)".into());
        }
        let (rank, mask_rank) =
            (Self::ty(graph, graph.inputs(id)[0]).rank(), Self::ty(graph, graph.inputs(id)[1]).rank());
        let masked = |d: usize| d + mask_rank >= rank && in_dyn[1].contains_key(&(d + mask_rank - rank));
        if let Some((d, _)) = in_dyn[0].iter().find(|(&d, f)| !(masked(d) || (d == 0 && f.len() == 1))) {
            return Err(format!("scatters into dim {d}, padded, which its mask broadcasts over").into());
        }
        self.write_through_mask(graph, id, in_dyn)
    }

    /// `out[perm] = values` along dim 0 of a padded `out` of the same size as `perm`, a sort's
    /// indices: `values`' real rows (a prefix as long as the sort's real entries) land on the
    /// real positions of the sorted dim.
    fn invert(
        &mut self,
        graph: &Graph,
        id: NodeId,
        (present, accumulate): (&[bool], bool),
        in_dyn: &[DynDims],
    ) -> Res<()> {
        let ins = graph.inputs(id);
        let refused = || Err("writes into a tensor with a dynamic dim".into());
        // A permutation writes each position once: adding into zeros (`zeros.index_add(0,
        // perm, x)`, JetMoE's attention experts) is writing.
        let into_zeros = || {
            let zero = |v: &Scalar| matches!(v, Scalar::Int(0)) || matches!(v, Scalar::Float(f) if *f == 0.0);
            matches!(&graph.node(ins[0].node).op, Op::Full(Full { value, .. }) if zero(value))
        };
        if (accumulate && !into_zeros()) || present != [true] || ins.len() != 3 {
            return refused();
        }
        let (perm, values) = (ins[1], ins[2]);
        let Some(f) = self.perms.get(&perm).cloned() else { return refused() };
        let n = self.padded(&SymExpr::Mul(f.clone())).unwrap_or(-1);
        let sorted = [SymExpr::Mul(f.clone()).simplify()];
        let rows_real = in_dyn[2].get(&0).is_some_and(|r| self.same_factors(r, &sorted));
        if Self::ty(graph, ins[0]).dims.first() != Some(&Dim::Static(n)) || !rows_real {
            return refused();
        }
        let out = ValueRef { node: id, slot: 0 };
        if f.len() > 1 {
            self.merged.insert((out, 0), f);
        }
        if let Some(p) = self.positions.get(&values).cloned() {
            self.positions.insert(out, p);
        }
        Ok(())
    }

    /// A sort or top-k along a padded dim. The sort is stable (`emit`), so along a prefix the
    /// padding, given the key that sorts last (−inf descending; NaN ascending, which is last
    /// even after real NaNs; the integer extremes), comes after every real entry, ties included:
    /// the first real-count results are the real ones, in the same order, and the indices are
    /// real positions. Along factors, where padding may come first, only integer keys bounded
    /// by a static size (a router's expert ids) are exact: the padding gets the bound. Either
    /// way the indices are a permutation whose real entries are real positions.
    fn sort(&mut self, graph: &mut Graph, id: NodeId, (descending, what): (bool, &str), across: &[Across]) -> Res<()> {
        let x = graph.inputs(id)[0];
        let [(0, d, f)] = across else { return Err(REFUSED.into()) };
        let dtype = graph.value_type(x).dtype;
        let fill = match (f.len(), self.bounded.get(&x)) {
            (1, _) if dtype.is_float() => Scalar::Float(if descending { f64::NEG_INFINITY } else { f64::NAN }),
            (1, _) if dtype.is_integer() => {
                if descending { ReduceOp::Max } else { ReduceOp::Min }.identity(dtype)
            }
            (_, Some(&bound)) if !descending && dtype.is_integer() => Scalar::Int(bound),
            _ => return Err(format!("{what} along a padded dim whose real positions are not a prefix, by keys that are not indices bounded by a static size").into()),
        };
        let f = f.clone();
        self.mask_input(graph, id, 0, &[*d], fill)?;
        let (values, indices) = (ValueRef { node: id, slot: 0 }, ValueRef { node: id, slot: 1 });
        if let Some(&bound) = self.bounded.get(&x) {
            self.bounded.insert(values, bound + 1);
        }
        self.positions.insert(indices, f.clone());
        if matches!(graph.node(id).op, Op::Sort(_)) {
            self.perms.insert(indices, f);
        }
        Ok(())
    }

    /// Non-maximum suppression over a padded count of boxes: the scores past the real count are
    /// made −inf, so that the stable sort puts every padded box after every real one (after a
    /// real −inf score too: ties keep the boxes' order). A box is only suppressed by boxes before
    /// it, so no padded box changes a real box's decision: the decisions and the order have
    /// their real positions first, and the order's values are real positions of the boxes (the
    /// `nonzero` after it masks the padded decisions).
    fn nms(&mut self, graph: &mut Graph, id: NodeId, across: &[Across]) -> Res<()> {
        if across.iter().any(|(_, d, f)| *d != 0 || f.len() > 1) {
            return Err("suppresses along a dynamic dim that merges sizes, or along a box's coordinates".into());
        }
        let Some((_, _, f)) = across.iter().find(|(slot, ..)| *slot == 1) else {
            return Err("its boxes are padded and its scores are not".into());
        };
        let f = f.clone();
        self.mask_input(graph, id, 1, &[0], Scalar::Float(f64::NEG_INFINITY))?;
        let order = ValueRef { node: id, slot: 1 };
        self.positions.insert(order, f.clone());
        self.perms.insert(order, f);
        Ok(())
    }

    /// A convolution along a padded spatial dim (a causal convolution along a sequence): its
    /// input is zero past the real length, as the convolution's own padding is, so every real
    /// output reads what it reads at the real size.
    fn convolution(&mut self, graph: &mut Graph, id: NodeId, conv: &Convolution, across: &[Across]) -> Res<()> {
        if across.iter().any(|(slot, d, f)| *slot != 0 || *d < 2 || f.len() > 1) || conv.transposed {
            return Err("is dynamic along its channels or its weights, or is transposed".into());
        }
        let dims: Vec<usize> = across.iter().map(|(_, d, _)| *d).collect();
        self.mask_input(graph, id, 0, &dims, Scalar::Float(0.0))
    }

    /// An average pool along padded spatial dims: their padding zeroed, the sums of the real
    /// windows are eager's. So are the divisors where no window is cut short at the real end:
    /// without `ceil_mode` a window ends within the real length and its own padding, which
    /// counts when `count_include_pad` (the default); without it, only where that padding is 0.
    fn avg_pool(&mut self, graph: &mut Graph, id: NodeId, pool: &AvgPool, across: &[Across]) -> Res<()> {
        let rank = Self::ty(graph, graph.inputs(id)[0]).rank();
        let first_spatial =
            rank.checked_sub(pool.kernel.len()).ok_or_else(|| bug("a pool of more dims than its operand"))?;
        let fixed_divisor = pool.divisor_override.is_some();
        for (_, d, f) in across {
            let k = d.checked_sub(first_spatial).ok_or_else(|| bug("a pool dynamic along a dim it keeps"))?;
            let padding = pool.padding.get(k).or(pool.padding.first()).copied().unwrap_or(0);
            if f.len() > 1 {
                return Err(MERGED.into());
            }
            if pool.ceil_mode && !fixed_divisor {
                return Err(
                    "pools in ceil_mode along a dynamic dim: its last window's divisor depends on the real size".into(),
                );
            }
            if !pool.count_include_pad && padding > 0 && !fixed_divisor {
                return Err(
                    "pools with padding along a dynamic dim and count_include_pad=False: its last windows' divisors \
                     depend on the real size"
                        .into(),
                );
            }
        }
        let dims: Vec<usize> = across.iter().map(|(_, d, _)| *d).collect();
        self.mask_input(graph, id, 0, &dims, Scalar::Float(0.0))
    }

    /// `constant_pad_nd` of a padded dim: on the left, the real positions stay a prefix
    /// (longer by the pad); on the right, the pad value is written from the real length on.
    fn pad(&mut self, graph: &mut Graph, id: NodeId, pad: &Pad, across: &[Across]) -> Res<()> {
        let rank = Self::ty(graph, graph.inputs(id)[0]).rank();
        let mut out = ValueRef { node: id, slot: 0 };
        let users = graph.users(id);
        for (_, d, f) in across {
            let k = 2 * (rank - 1 - d);
            let (lo, hi) = (pad.pad.get(k).copied().unwrap_or(0), pad.pad.get(k + 1).copied().unwrap_or(0));
            if f.len() > 1 || lo < 0 || hi < 0 {
                return Err("pads a dynamic dim that merges sizes, or crops it".into());
            }
            if hi > 0 {
                // The positions from `lo + len` on get the pad value.
                let real = SymExpr::Add(vec![f[0].clone(), SymExpr::Int(lo)]).simplify();
                out = self.mask(graph, id, (out, *d), &[real], pad.value)?;
            }
        }
        if out.node != id {
            self.take_over(graph, ValueRef { node: id, slot: 0 }, out, users);
        }
        Ok(())
    }

    /// `scatter` along dim `d`, padded along it: the real entries of the index hold real
    /// positions (values below the real size, as eager requires), so they write real positions;
    /// the index's padding is set past the end of `d`, where the scatter drops it (a mask built
    /// from the chosen top-k keys: `full(-inf).scatter(-1, topk_indices, 0)`).
    fn scatter(&mut self, graph: &mut Graph, id: NodeId, d: usize, across: &[Across]) -> Res<()> {
        let past_end = Self::ty(graph, graph.inputs(id)[0]).dims[d].as_static().ok_or("not specialized")?;
        // The source is read where the index is: padded alike along `d`, its padding is never read
        // once the index's padding points past the end.
        let index_factors = across.iter().find(|(slot, dim, _)| *slot == 1 && *dim == d).map(|(_, _, f)| f);
        for (slot, dim, f) in across {
            let like_index = index_factors.is_some_and(|g| self.same_factors(g, f));
            match (*slot, *dim == d, f.len()) {
                (0, true, 1) => {}
                (2, true, 1) => {}
                (2, true, _) if like_index => {}
                // Any pattern of real positions, merged ones included (TAPAS's flattened
                // `[batch·seq]` segment ids): the padded indices are dropped.
                (1, true, _) => self.mask_input(graph, id, 1, &[d], Scalar::Int(past_end))?,
                _ => {
                    return Err(
                        "scatters along a dynamic dim other than its own, or one whose real positions are not a prefix"
                            .into(),
                    )
                }
            }
        }
        Ok(())
    }

    /// `repeat` of a padded dim `c` times: `c` copies of the padded dim one after the other, a
    /// dim of factors `[c, …]` (the copy, then the dim's own factors).
    fn repeat(&mut self, graph: &Graph, id: NodeId, repeats: &[Dim], across: &[Across]) -> Res<()> {
        let shift = repeats.len().saturating_sub(Self::ty(graph, graph.inputs(id)[0]).rank());
        for (_, d, f) in across {
            let mut factors = vec![repeats[d + shift].to_expr()];
            factors.extend(f.iter().cloned());
            let factors = self.normalize(factors);
            if factors.len() > 1 {
                self.merged.insert((ValueRef { node: id, slot: 0 }, d + shift), factors);
            }
        }
        Ok(())
    }

    /// A matmul contracting `lhs.1` with `rhs.1` (`(slot, dim)` each): a padded contracting dim
    /// gets both operands zeroed past its real positions.
    fn contract(&mut self, graph: &mut Graph, id: NodeId, lhs: (usize, usize), rhs: (usize, usize)) -> Res<()> {
        let ins = graph.inputs(id);
        let padded = |m: &Self, (slot, d): (usize, usize)| m.dyn_dims(graph, ins[slot]).remove(&d);
        if let (Some(l), Some(r)) = (padded(self, lhs), padded(self, rhs)) {
            // Position `i` of one operand meets position `i` of the other: the same real rows.
            // One laid out as a prefix, the other otherwise (pieces, factors): the other is
            // gathered into the prefix.
            if self.relayout_of(&l, &r) {
                self.relayout_input(graph, id, rhs, &r, &l)?;
            } else if self.relayout_of(&r, &l) {
                self.relayout_input(graph, id, lhs, &l, &r)?;
            } else if !self.same_layout(&l, &r) {
                let shown = |f: &Factors| f.iter().map(ToString::to_string).collect::<Vec<_>>().join("·");
                return Err(format!(
                    "contracts a dim padded as [{}] with one padded as [{}]: their real positions differ",
                    shown(&l),
                    shown(&r)
                )
                .into());
            }
        }
        let zero = Scalar::Float(0.0);
        self.mask_input(graph, id, lhs.0, &[lhs.1], zero)?;
        self.mask_input(graph, id, rhs.0, &[rhs.1], zero)
    }

    /// Reductions: padded reduced dims masked with the identity; `mean` divides the masked
    /// sum by the real count.
    fn reduce(&mut self, graph: &mut Graph, id: NodeId, (op, dims): (ReduceOp, &[i64]), x_dyn: &DynDims) -> Res<()> {
        let x = graph.inputs(id)[0];
        let ty = Self::ty(graph, x);
        let rank = ty.rank();
        let reduced: Vec<usize> =
            if dims.is_empty() { (0..rank).collect() } else { dims.iter().map(|&d| norm_dim(d, rank)).collect() };
        self.mask_input(graph, id, 0, &reduced, op.identity(ty.dtype))?;
        if op != ReduceOp::Mean {
            return Ok(());
        }
        // mean = sum / real count, the count being the product of the reduced dims' real sizes.
        let mut count = vec![];
        for &d in &reduced {
            count.extend(x_dyn.get(&d).cloned().unwrap_or_else(|| vec![ty.dims[d].to_expr()]));
        }
        let real = self.length(graph, id, &SymExpr::Mul(count).simplify())?;
        if let Op::Reduce(Reduce { op, .. }) = &mut graph.node_mut(id).op {
            *op = ReduceOp::Sum;
        }
        let out_ty = graph.node(id).outputs[0].clone();
        let users = graph.users(id);
        let sum = ValueRef { node: id, slot: 0 };
        let realf = self.add(graph, id, Op::Convert(Convert), TensorType::new(out_ty.dtype, &[]), &[real]);
        let div = Op::Binary(Binary { op: BinaryOp::Div, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let mean = self.add(graph, id, div, out_ty, &[sum, realf]);
        self.take_over(graph, sum, mean, users);
        Ok(())
    }

    /// `x.select(d, -k)` on a dynamic dim: the index counts from the real end (`len - k`), read
    /// with `index_select` and the selected dim dropped.
    fn select_from_end(&mut self, graph: &mut Graph, id: NodeId, d: usize, len: &SymExpr, index: i64) -> Res<()> {
        let x = graph.inputs(id)[0];
        let real = self.length(graph, id, len)?;
        let scalar = TensorType::new(DType::I64, &[]);
        let at = self.binary(graph, id, BinaryOp::Add, Operand::Scalar(Scalar::Int(index)), &[real], scalar);
        let one = Op::View(View { size: vec![Dim::Static(1)] });
        let at = self.add(graph, id, one, TensorType::new(DType::I64, &[1]), &[at]);
        let mut picked = Self::ty(graph, x);
        picked.dims[d] = Dim::Static(1);
        let row = self.add(graph, id, Op::IndexSelect(IndexSelect { dim: d as i64 }), picked, &[x, at]);
        let out = graph.node(id).outputs[0].clone();
        let view = Op::View(View { size: out.dims.clone() });
        let result = self.add(graph, id, view, out, &[row]);
        let users = graph.users(id);
        self.take_over(graph, ValueRef { node: id, slot: 0 }, result, users);
        Ok(())
    }

    /// The smallest value `len` takes at the bucket's real sizes.
    fn min_of(&self, len: &SymExpr) -> Option<i64> {
        len.range(&self.ranges).map(|(least, _)| least)
    }
}
