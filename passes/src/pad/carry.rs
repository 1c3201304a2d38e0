//! Carrying padding through the ops that keep it: element-wise arithmetic, views, permutes,
//! slices and pooling, and the reductions and normalizations that must see only the true
//! positions.

use super::{keeps_zero, Padded, Padder, Width, Widths};
use crate::ir::ops::{Binary, Convert, Identity, Reduce, Slice, View};
use crate::ir::{norm_dim, BinaryOp, DType, Dim, Graph, NodeId, Op, Operand, ReduceOp, Scalar, UnaryOp, ValueRef};

impl Padder {
    /// `native_layer_norm` over a last dim padded with zeros (GPT-2's and BERT's
    /// hidden size between layers): written out as its arithmetic, with the statistics taken
    /// over the true positions (`mean = Σx / n`, the centred values zeroed past `n` before the
    /// variance), so the result stays padded — zeros there, the weight and bias zero-padded.
    /// Only when the node's `mean` and `rstd` outputs are unused (inference).
    pub(super) fn layer_norm(&mut self, graph: &mut Graph, id: NodeId, eps: f64, affine: [bool; 2]) -> bool {
        let ins = graph.inputs(id);
        let x = ins[0];
        let p = self.state[&x].clone();
        let ty = graph.node(id).outputs[0].clone();
        let last = ty.rank() - 1;
        let stats_used = graph.users(id).iter().any(|&(_, _, slot)| slot > 0)
            || graph.outputs().iter().any(|o| o.value.node == id && o.value.slot > 0);
        let Some(&w) = p.dims.get(&last) else { return false };
        if p.dims.len() != 1 || !p.zero || stats_used || ty.dtype != DType::F32 {
            return false;
        }
        let mut ty = ty;
        ty.dims[last] = Dim::Static(w.padded);
        let mut stat_ty = ty.clone();
        stat_ty.dims[last] = Dim::Static(1);
        let binary = |op, rhs| Op::Binary(Binary { op, lhs: Operand::Tensor, rhs, alpha: None });
        let tensor = |op| binary(op, Operand::Tensor);
        let scalar = |op, x: f64| binary(op, Operand::Scalar(Scalar::Float(x)));
        let sum = || Op::Reduce(Reduce { op: ReduceOp::Sum, dims: vec![-1], keepdim: true, dtype: None });
        let n = w.size as f64;
        let total = self.add(graph, id, sum(), stat_ty.clone(), &[x]);
        let mean = self.add(graph, id, scalar(BinaryOp::Div, n), stat_ty.clone(), &[total]);
        let centred = self.add(graph, id, tensor(BinaryOp::Sub), ty.clone(), &[x, mean]);
        let centred = self.fill_padding(graph, id, centred, &p.dims, Scalar::Float(0.0));
        let square = self.add(graph, id, tensor(BinaryOp::Mul), ty.clone(), &[centred, centred]);
        let var = self.add(graph, id, sum(), stat_ty.clone(), &[square]);
        let var = self.add(graph, id, scalar(BinaryOp::Div, n), stat_ty.clone(), &[var]);
        let var = self.add(graph, id, scalar(BinaryOp::Add, eps), stat_ty.clone(), &[var]);
        let rstd = self.add(graph, id, Op::Unary(UnaryOp::Rsqrt), stat_ty, &[var]);
        let mut y = self.add(graph, id, tensor(BinaryOp::Mul), ty.clone(), &[centred, rstd]);
        let mut params = ins[1..].iter();
        for (present, op) in affine.into_iter().zip([BinaryOp::Mul, BinaryOp::Add]) {
            if let (true, Some(&param)) = (present, params.next()) {
                let param = self.with_padding(graph, param, &Widths::from([(0, w)]));
                y = self.add(graph, id, tensor(op), ty.clone(), &[y, param]);
            }
        }
        graph.replace_uses(ValueRef { node: id, slot: 0 }, y);
        graph.remove_node(id);
        self.state.insert(y, Padded { dims: p.dims, zero: true });
        true
    }

    /// Softmax along a padded dim: the padding is set to -inf first, so the maximum and the
    /// sum are the true row's and the padding comes out 0 (`log_softmax`: -inf). Along another
    /// dim the padding carries through (not zero: a row of zeros has a softmax of 1/n).
    pub(super) fn softmax(&mut self, graph: &mut Graph, id: NodeId, dim: i64, log: bool) -> bool {
        let v = graph.inputs(id)[0];
        let p = self.state[&v].clone();
        let d = norm_dim(dim, graph.value_type(v).rank());
        if !graph.node(id).outputs[0].dtype.is_float() {
            return false;
        }
        if let Some(&w) = p.dims.get(&d) {
            let minus_inf = Scalar::Float(f64::NEG_INFINITY);
            let filled = self.fill_padding(graph, id, v, &Widths::from([(d, w)]), minus_inf);
            graph.set_input(id, 0, filled);
        }
        let zero = !log && p.dims.len() == 1 && p.dims.contains_key(&d);
        self.set_output(graph, id, 0, Padded { dims: p.dims, zero });
        true
    }

    /// Element-wise ops with NumPy broadcasting: operands that span a padded dim at its true
    /// size are zero-padded to match; operands of size 1 there broadcast as before.
    pub(super) fn elementwise(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let node = graph.node(id).clone();
        let rank = node.outputs[0].rank();
        let ins = graph.inputs(id);
        // The output's padded dims, from the operands' (right-aligned).
        let mut widths = Widths::new();
        for v in &ins {
            let offset = rank - graph.value_type(*v).rank();
            for (&d, &w) in self.state.get(v).map(|p| &p.dims).into_iter().flatten() {
                widths.insert(d + offset, w);
            }
        }
        let mut zero_operands = Vec::with_capacity(ins.len());
        let mut garbage_operands = Vec::with_capacity(ins.len());
        for (slot, v) in ins.iter().enumerate() {
            let ty = graph.value_type(*v).clone();
            let offset = rank - ty.rank();
            let mut want = Widths::new();
            for (&d, &w) in &widths {
                match d.checked_sub(offset).and_then(|od| ty.dims.get(od).map(|dim| (od, dim.as_static()))) {
                    Some((od, Some(s))) if s == w.size || s == w.padded => {
                        want.insert(od, w);
                    }
                    _ => {}
                }
            }
            // Zero at every padded position only when padded in every padded output dim.
            let full = want.len() == widths.len();
            let new_v = self.with_padding_keep_fill(graph, *v, &want);
            let padding = self.state.get(&new_v).filter(|p| !p.dims.is_empty());
            zero_operands.push(full && padding.is_some_and(|p| p.zero));
            garbage_operands.push(padding.is_some_and(|p| !p.zero));
            graph.set_input(id, slot as u16, new_v);
        }
        let zero = Self::result_is_zero(&node.op, &zero_operands, &garbage_operands);
        self.set_output(graph, id, 0, Padded { dims: widths, zero });
        true
    }

    /// Whether an element-wise op maps zero padding (`zero`: per tensor operand) to zero;
    /// `garbage`: per tensor operand, padding that is not known zero (it may hold inf or NaN).
    pub(super) fn result_is_zero(op: &Op, zero: &[bool], garbage: &[bool]) -> bool {
        let is_zero = |o: &Operand| match *o {
            Operand::Tensor => None,
            Operand::Scalar(Scalar::Int(i)) => Some(i == 0),
            Operand::Scalar(Scalar::Float(x)) => Some(x == 0.0),
            Operand::Scalar(Scalar::Bool(b)) => Some(!b),
        };
        match op {
            Op::Unary(u) => keeps_zero(*u) && zero[0],
            Op::Convert(Convert) | Op::Identity(Identity) | Op::LeakyRelu(_) | Op::Elu(_) => zero[0],
            // Booleans and integers: one zero operand makes a zero.
            Op::Binary(Binary { op: BinaryOp::LogicalAnd | BinaryOp::BitwiseAnd, lhs, rhs, .. }) => {
                zero.contains(&true) || is_zero(lhs) == Some(true) || is_zero(rhs) == Some(true)
            }
            // Floats: `0 · x` is not 0 when `x` is inf or NaN, which padding that is not known
            // zero may hold (`0 / 0` of a division padded on both sides): a zero-padded operand
            // makes a zero only when no other operand has such padding (SwiftFormer's
            // `(q / ‖q‖) · s` fed a contraction NaN); an operand broadcast along the padded dims
            // reads its true values there.
            Op::Binary(Binary { op: BinaryOp::Mul, lhs, rhs, .. }) => {
                (zero.contains(&true) || is_zero(lhs) == Some(true) || is_zero(rhs) == Some(true))
                    && !garbage.contains(&true)
            }
            Op::Binary(Binary {
                op: BinaryOp::Add | BinaryOp::Sub | BinaryOp::Maximum | BinaryOp::Minimum | BinaryOp::BitwiseOr,
                lhs,
                rhs,
                ..
            }) => !zero.contains(&false) && is_zero(lhs) != Some(false) && is_zero(rhs) != Some(false),
            Op::Binary(Binary { op: BinaryOp::Div, lhs: Operand::Tensor, rhs, .. }) => {
                zero[0] && is_zero(rhs) == Some(false)
            }
            // 0^p = 0 for p > 0.
            Op::Binary(Binary { op: BinaryOp::Pow, lhs: Operand::Tensor, rhs: Operand::Scalar(p), .. }) => {
                zero[0]
                    && match *p {
                        Scalar::Int(i) => i > 0,
                        Scalar::Float(x) => x > 0.0,
                        Scalar::Bool(_) => false,
                    }
            }
            _ => false,
        }
    }

    pub(super) fn permute(&mut self, graph: &mut Graph, id: NodeId, dims: &[i64]) -> bool {
        let v = graph.inputs(id)[0];
        let p = self.state[&v].clone();
        let rank = dims.len();
        let moved =
            dims.iter().enumerate().filter_map(|(i, &d)| p.dims.get(&norm_dim(d, rank)).map(|&w| (i, w))).collect();
        self.set_output(graph, id, 0, Padded { dims: moved, zero: p.zero });
        true
    }

    pub(super) fn unsqueeze(&mut self, graph: &mut Graph, id: NodeId, dim: i64) -> bool {
        let v = graph.inputs(id)[0];
        let p = self.state[&v].clone();
        let at = norm_dim(dim, graph.node(id).outputs[0].rank());
        let moved = p.dims.iter().map(|(&d, &w)| (if d >= at { d + 1 } else { d }, w)).collect();
        self.set_output(graph, id, 0, Padded { dims: moved, zero: p.zero });
        true
    }

    /// A view with one padded dim: keeps it when it regroups only the dims before it and the
    /// dims after it (`[1, 16, 64] → [16, 64]`, `[8, 64, 1, 1] → [8, 64]`); splits a dim of
    /// padded heads into heads and one head's padded features (`[16, H·Dp] → [16, H, Dp]`);
    /// merges a padded dim with the dim before it into padded heads (`[16, H, Dp] → [16, H·Dp]`).
    pub(super) fn view(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let v = graph.inputs(id)[0];
        let p = self.state[&v].clone();
        let (Some(mut input), Some(out)) = (graph.value_type(v).static_dims(), graph.node(id).outputs[0].static_dims())
        else {
            return false;
        };
        let [(&d, &w)] = p.dims.iter().collect::<Vec<_>>()[..] else { return false };
        input[d] = w.size;
        let product = |dims: &[i64]| dims.iter().product::<i64>();
        let (before, after) = (product(&input[..d]), product(&input[d + 1..]));
        // Output dim `q` laid out as `w` when `out[..q]` holds `lead` elements, `out[q]` is
        // `size` and the dims after it `after`.
        let at = |q: usize, lead: i64, size: i64| {
            out[q] == size && product(&out[..q]) == lead && product(&out[q + 1..]) == after
        };
        let (block, _) = w.block();
        let placed = if let Some(q) = (0..out.len()).find(|&q| at(q, before, w.size)) {
            Some((q, w))
        } else if let Some(q) =
            (1..out.len()).find(|&q| w.blocks > 1 && out[q - 1] == w.blocks && at(q, before * w.blocks, block))
        {
            Some((q, Width::at_end(block, w.block().1)))
        } else if d > 0 {
            let heads = input[d - 1];
            let merged = |q: &usize| heads > 1 && at(*q, before / heads, heads * w.size);
            (0..out.len()).find(merged).map(|q| (q, w.repeated(heads)))
        } else {
            None
        };
        let Some((q, w)) = placed else { return false };
        let mut size_attr: Vec<Dim> = out.iter().map(|&s| Dim::Static(s)).collect();
        size_attr[q] = Dim::Static(w.padded);
        graph.node_mut(id).op = Op::View(View { size: size_attr });
        self.set_output(graph, id, 0, Padded { dims: Widths::from([(q, w)]), zero: p.zero });
        true
    }

    /// A slice along a padded dim: one padded at its end ends within the true size (the result
    /// is not padded); one of padded heads takes whole heads (the result keeps their padding).
    /// Along another dim the padding carries through.
    pub(super) fn slice(&mut self, graph: &mut Graph, id: NodeId, dim: i64, end: &Dim) -> bool {
        let v = graph.inputs(id)[0];
        let mut p = self.state[&v].clone();
        let d = norm_dim(dim, graph.value_type(v).rank());
        let Some(w) = p.dims.remove(&d) else {
            self.set_output(graph, id, 0, p);
            return true;
        };
        let Op::Slice(Slice { start, step, .. }) = &graph.node(id).op else { return false };
        let (Some(start), Some(end)) = (start.as_static(), end.as_static()) else { return false };
        // Bounds as PyTorch resolves them against the true size (negative ones count from its
        // end), so that they mean the same on the padded value.
        let resolve = |i: i64| if i < 0 { i.saturating_add(w.size).max(0) } else { i.min(w.size) };
        let (start, end) = (resolve(start), resolve(end));
        if w.blocks == 1 {
            if let Op::Slice(Slice { start: s, end: e, .. }) = &mut graph.node_mut(id).op {
                (*s, *e) = (Dim::Static(start), Dim::Static(end));
            }
            self.set_output(graph, id, 0, p);
            return true;
        }
        let (block, padded_block) = w.block();
        if *step != 1 || start % block != 0 || end % block != 0 || start >= end {
            return false;
        }
        let heads = (end - start) / block;
        if let Op::Slice(Slice { start: s, end: e, .. }) = &mut graph.node_mut(id).op {
            (*s, *e) = (Dim::Static(start / block * padded_block), Dim::Static(end / block * padded_block));
        }
        p.dims.insert(d, Width { size: end - start, padded: heads * padded_block, blocks: heads });
        self.set_output(graph, id, 0, p);
        true
    }

    /// Reductions: over padded dims `sum` and `mean` run on zero padding (`mean` dividing by the
    /// true count), `amax`, `amin`, `prod`, `any` and `all` on padding set to their identity;
    /// over other dims the padding carries through.
    pub(super) fn reduce(&mut self, graph: &mut Graph, id: NodeId, op: ReduceOp, dims: &[i64], keepdim: bool) -> bool {
        let v = graph.inputs(id)[0];
        let p = self.state[&v].clone();
        let in_ty = graph.value_type(v).clone();
        let rank = in_ty.rank();
        let reduced: Vec<usize> =
            if dims.is_empty() { (0..rank).collect() } else { dims.iter().map(|&d| norm_dim(d, rank)).collect() };
        let over_padded = reduced.iter().any(|d| p.dims.contains_key(d));
        let out_widths: Widths = p
            .dims
            .iter()
            .filter(|(d, _)| !reduced.contains(d))
            .map(|(&d, &w)| (if keepdim { d } else { d - reduced.iter().filter(|&&r| r < d).count() }, w))
            .collect();
        if !over_padded {
            self.set_output(graph, id, 0, Padded { dims: out_widths, zero: p.zero });
            return true;
        }
        let dtype = graph.node(id).outputs[0].dtype;
        let fill = match op {
            _ if !dtype.is_float() && !matches!(op, ReduceOp::Any | ReduceOp::All) => return false,
            ReduceOp::Sum | ReduceOp::Mean => None,
            op => Some(op.identity(dtype)),
        };
        if let Some(fill) = fill {
            // The reduced padding set to the op's identity; other padded dims keep theirs (a
            // zero padding stays zero: max(0, -inf), 0·1, any(false) are all zero).
            let reduced_padding: Widths =
                p.dims.iter().filter(|(d, _)| reduced.contains(d)).map(|(&d, &w)| (d, w)).collect();
            let filled = self.fill_padding(graph, id, v, &reduced_padding, fill);
            graph.set_input(id, 0, filled);
            self.set_output(graph, id, 0, Padded { dims: out_widths, zero: p.zero });
            return true;
        }
        let zeroed = self.with_padding(graph, v, &p.dims);
        graph.set_input(id, 0, zeroed);
        let padded = Padded { dims: out_widths, zero: true };
        self.set_output(graph, id, 0, padded.clone());
        if op == ReduceOp::Mean {
            let count: i64 = reduced
                .iter()
                .map(|&d| p.dims.get(&d).map_or_else(|| in_ty.dims[d].as_static().unwrap_or(1), |w| w.size))
                .product();
            let mean = self.divide_mean(graph, id, count);
            if !padded.dims.is_empty() {
                self.state.insert(mean, padded);
            }
        }
        true
    }

    /// Turns `mean` node `id` into a `sum` followed by a division by the true `count`.
    pub(super) fn divide_mean(&mut self, graph: &mut Graph, id: NodeId, count: i64) -> ValueRef {
        if let Op::Reduce(Reduce { op, .. }) = &mut graph.node_mut(id).op {
            *op = ReduceOp::Sum;
        }
        let sum = ValueRef { node: id, slot: 0 };
        let users = graph.users(id);
        let ty = graph.node(id).outputs[0].clone();
        let div = Op::Binary(Binary {
            op: BinaryOp::Div,
            lhs: Operand::Tensor,
            rhs: Operand::Scalar(Scalar::Float(count as f64)),
            alpha: None,
        });
        let mean = self.add(graph, id, div, ty, &[sum]);
        for (user, dst_slot, _) in users {
            graph.set_input(user, dst_slot, mean);
        }
        graph.redirect_outputs(sum, mean);
        mean
    }

    /// Pooling over the trailing `spatial` dims carries padding of the other dims through.
    pub(super) fn pool(&mut self, graph: &mut Graph, id: NodeId, spatial: usize) -> bool {
        let v = graph.inputs(id)[0];
        let p = self.state[&v].clone();
        let rank = graph.value_type(v).rank();
        if p.dims.keys().any(|&d| d + spatial >= rank) {
            return false;
        }
        for slot in 0..graph.node(id).outputs.len() as u16 {
            let zero = p.zero && slot == 0;
            self.set_output(graph, id, slot, Padded { dims: p.dims.clone(), zero });
        }
        true
    }
}
