//! Making the values the pad pass needs: a padded value sliced back to its true shape, an
//! unpadded one zero-padded, a weight padded at compile time, the padding set to a fill value
//! through a cached valid-position mask.

use super::{zero_of, Padded, Padder, Width, Widths};
use crate::ir::ops::{Arange, Binary, Pad, Permute, Slice, View, Where};
use crate::ir::{
    BinaryOp, DType, Dim, Graph, InputKind, Node, NodeId, Op, Operand, Scalar, TensorType, ValueRef, WeightRecipe,
};

impl Padder {
    /// A new node derived from `from`, named `{from}.pad.{k}`.
    pub(super) fn derived(&mut self, graph: &Graph, from: NodeId, op: Op, ty: TensorType) -> Node {
        self.counter += 1;
        Node::derived(graph.node(from), format_args!("pad.{}", self.counter), op, [ty])
    }

    /// Adds a node derived from `from` reading `inputs`; returns its value.
    pub(super) fn add(
        &mut self,
        graph: &mut Graph,
        from: NodeId,
        op: Op,
        ty: TensorType,
        inputs: &[ValueRef],
    ) -> ValueRef {
        let n = self.derived(graph, from, op, ty);
        ValueRef { node: graph.add_op(n, inputs), slot: 0 }
    }

    /// `v` at its true shape (slices of its padded dims).
    pub(super) fn true_value(&mut self, graph: &mut Graph, v: ValueRef) -> ValueRef {
        let Some(p) = self.state.get(&v).cloned() else { return v };
        if let Some(&t) = self.true_values.get(&v) {
            return t;
        }
        let mut cur = v;
        for (&d, &w) in &p.dims {
            cur = self.in_blocks(graph, v.node, cur, d, w, |ty, d| {
                let op =
                    Op::Slice(Slice { dim: d as i64, start: Dim::Static(0), end: Dim::Static(w.block().0), step: 1 });
                ty.dims[d] = Dim::Static(w.block().0);
                op
            });
            self.slices += 1;
        }
        self.true_values.insert(v, cur);
        cur
    }

    /// Applies the op `make` returns (given the type to adjust and the dim) to `v`'s dim `d`
    /// laid out as `w`, block by block: on the dim itself when it is one block, else on a view
    /// `[…, blocks, block, …]` viewed back after (`make` maps the block sizes).
    pub(super) fn in_blocks(
        &mut self,
        graph: &mut Graph,
        from: NodeId,
        v: ValueRef,
        d: usize,
        w: Width,
        make: impl Fn(&mut TensorType, usize) -> Op,
    ) -> ValueRef {
        let mut ty = graph.value_type(v).clone();
        if w.blocks == 1 {
            let op = make(&mut ty, d);
            return self.add(graph, from, op, ty, &[v]);
        }
        let mut split = ty.clone();
        split.dims[d] = Dim::Static(w.blocks);
        split.dims.insert(d + 1, Dim::Static(ty.dims[d].as_static().unwrap_or(0) / w.blocks));
        let view = |t: &TensorType| Op::View(View { size: t.dims.clone() });
        let cur = self.add(graph, from, view(&split), split.clone(), &[v]);
        let mut changed = split;
        let op = make(&mut changed, d + 1);
        let cur = self.add(graph, from, op, changed.clone(), &[cur]);
        let block = changed.dims.remove(d + 1).as_static().unwrap_or(0);
        ty.dims[d] = Dim::Static(w.blocks * block);
        self.add(graph, from, view(&ty), ty, &[cur])
    }

    /// `v` with exactly the padded dims `want`, zeros in the padding.
    pub(super) fn with_padding(&mut self, graph: &mut Graph, v: ValueRef, want: &Widths) -> ValueRef {
        match self.state.get(&v) {
            Some(p) if p.dims == *want && p.zero => return v,
            None if want.is_empty() => return v,
            _ => {}
        }
        let base = self.true_value(graph, v);
        if want.is_empty() {
            return base;
        }
        let key = (base, want.clone());
        if let Some(&done) = self.zero_padded.get(&key) {
            return done;
        }
        let padded = self.pad_with_zeros(graph, base, want);
        self.state.insert(padded, Padded { dims: want.clone(), zero: true });
        self.zero_padded.insert(key, padded);
        padded
    }

    /// Zero-pads a value at its true shape: a stored f32 weight (or a transpose of one)
    /// becomes a derived weight padded at compile time, anything else gets a `pad` node.
    pub(super) fn pad_with_zeros(&mut self, graph: &mut Graph, base: ValueRef, want: &Widths) -> ValueRef {
        let node = graph.node(base.node).clone();
        let mut ty = node.outputs[usize::from(base.slot)].clone();
        for (&d, w) in want {
            ty.dims[d] = Dim::Static(w.padded);
        }
        if let Some(w) = self.padded_weight(graph, base.node, want) {
            return ValueRef { node: w, slot: 0 };
        }
        if let (Op::Permute(Permute { dims }), [src]) = (&node.op, graph.inputs(base.node).as_slice()) {
            let src_want: Widths = want.iter().map(|(&d, &w)| (dims[d] as usize, w)).collect();
            if let Some(w) = self.padded_weight(graph, src.node, &src_want) {
                return self.add(graph, base.node, node.op.clone(), ty, &[ValueRef { node: w, slot: 0 }]);
            }
        }
        self.pads += 1;
        let zero = zero_of(ty.dtype);
        if want.values().all(|w| w.blocks == 1) {
            let rank = ty.rank();
            let mut pad = Vec::with_capacity(2 * rank);
            for d in (0..rank).rev() {
                pad.extend([0, want.get(&d).map_or(0, |w| w.padded - w.size)]);
            }
            return self.add(graph, base.node, Op::Pad(Pad { pad, value: zero }), ty, &[base]);
        }
        let mut cur = base;
        for (&d, &w) in want {
            cur = self.in_blocks(graph, base.node, cur, d, w, |ty, d| {
                let (size, padded) = w.block();
                ty.dims[d] = Dim::Static(padded);
                let mut pad = vec![0; 2 * ty.rank()];
                pad[2 * (ty.rank() - 1 - d) + 1] = padded - size;
                Op::Pad(Pad { pad, value: zero })
            });
        }
        cur
    }

    /// A derived weight: the weight `id` (f32, bf16 or f16) zero-padded as `want` says.
    pub(super) fn padded_weight(&mut self, graph: &mut Graph, id: NodeId, want: &Widths) -> Option<NodeId> {
        let node = graph.node(id);
        let (fqn, source) = match &node.op {
            Op::Input(InputKind::Derived { fqn, recipe }) => (fqn.clone(), recipe.clone()),
            Op::Input(k) => {
                let f = k.weight_fqn()?;
                (f.to_string(), WeightRecipe::Cast { weight: f.to_string() })
            }
            _ => return None,
        };
        if !WeightRecipe::handles(node.outputs[0].dtype) {
            return None;
        }
        let mut ty = node.outputs[0].clone();
        let dims = ty.static_dims()?;
        let mut padded = dims.clone();
        let mut blocks = vec![1; dims.len()];
        for (&d, w) in want {
            (padded[d], blocks[d]) = (w.padded, w.blocks);
            ty.dims[d] = Dim::Static(w.padded);
        }
        let key = (fqn.clone(), padded.clone(), blocks.clone());
        if let Some(&w) = self.padded_weights.get(&key) {
            return Some(w);
        }
        let shape: Vec<String> = padded.iter().map(i64::to_string).collect();
        let mut name = format!("{fqn}@pad{}", shape.join("x"));
        if blocks.iter().any(|&b| b > 1) {
            let b: Vec<String> = blocks.iter().map(i64::to_string).collect();
            name = format!("{name}@blocks{}", b.join("x"));
        }
        let recipe = WeightRecipe::Pad { source: Box::new(source), dims, padded, blocks };
        let op = Op::Input(InputKind::Derived { fqn: name.clone(), recipe });
        let w = graph.add_weight_input(Node::new(name, op, [ty]));
        self.padded_weights.insert(key, w);
        Some(w)
    }

    /// `v` with the padding of `dims` set to `fill` (`where(valid, v, fill)` per dim).
    pub(super) fn fill_padding(
        &mut self,
        graph: &mut Graph,
        from: NodeId,
        v: ValueRef,
        dims: &Widths,
        fill: Scalar,
    ) -> ValueRef {
        let ty = graph.value_type(v).clone();
        let mut cur = v;
        for (&d, &w) in dims {
            let valid = self.valid_positions(graph, from, d, w, ty.rank());
            let op = Op::Where(Where { on_true: Operand::Tensor, on_false: Operand::Scalar(fill) });
            cur = self.add(graph, from, op, ty.clone(), &[valid, cur]);
        }
        cur
    }

    /// `bool[1, …, padded, …, 1]` (the padded size at `d` of `rank` dims), true at the true
    /// positions: `arange(padded) < size`, or `arange(padded) % block < true block` for heads.
    pub(super) fn valid_positions(
        &mut self,
        graph: &mut Graph,
        from: NodeId,
        d: usize,
        w: Width,
        rank: usize,
    ) -> ValueRef {
        if let Some(&mask) = self.masks.get(&(d, w, rank)) {
            return mask;
        }
        let (block, padded_block) = w.block();
        let flat = |dtype| TensorType::new(dtype, &[w.padded]);
        let scalar =
            |op, x| Op::Binary(Binary { op, lhs: Operand::Tensor, rhs: Operand::Scalar(Scalar::Int(x)), alpha: None });
        let arange = Op::Arange(Arange { start: Scalar::Int(0), end: Scalar::Int(w.padded), step: Scalar::Int(1) });
        let mut positions = self.add(graph, from, arange, flat(DType::I64), &[]);
        if w.blocks > 1 {
            positions =
                self.add(graph, from, scalar(BinaryOp::Remainder, padded_block), flat(DType::I64), &[positions]);
        }
        let valid = self.add(graph, from, scalar(BinaryOp::Lt, block), flat(DType::Bool), &[positions]);
        let mut shape = vec![1; rank];
        shape[d] = w.padded;
        let view = Op::View(View { size: shape.iter().map(|&s| Dim::Static(s)).collect() });
        let mask = self.add(graph, from, view, TensorType::new(DType::Bool, &shape), &[valid]);
        self.masks.insert((d, w, rank), mask);
        mask
    }

    /// Like [`Padder::with_padding`], but keeps a value already padded in `want`'s dims as it
    /// is, zero or not (position-wise ops do not care).
    pub(super) fn with_padding_keep_fill(&mut self, graph: &mut Graph, v: ValueRef, want: &Widths) -> ValueRef {
        match self.state.get(&v) {
            Some(p) if p.dims == *want => v,
            _ => self.with_padding(graph, v, want),
        }
    }
}
