//! `pad`: widens the feature dims of matmuls, convolutions and embeddings to a multiple of
//! `--pad-multiple` (128 for a TPU's matrix unit), with zeros in the weights at compile time,
//! and keeps values padded along chains of layers, so that one padded layer feeds the next
//! without a slice and a pad in between. A dim is widened only when that at most doubles it
//! (64 → 128, 50257 → 50304, not 8 → 128).
//!
//! Every value the pass widens carries a [`Padded`] record: which dims are wider than their
//! true size, and whether the extra positions hold zeros. A node meets padded operands in one
//! of these ways:
//!
//! - **seeds** (`mm`, `addmm`, convolutions with one group, `embedding`): output features are
//!   padded (weight rows/columns and bias zero-padded as derived weights); the contracting dim
//!   is padded where the activation arrives padded, with matching zero rows in the weight. An
//!   activation that arrives unpadded is not padded just to be contracted: that would only
//!   add the zeros XLA's own tiling adds. When a matmul's output features are attention heads
//!   (a view downstream splits them into `[…, H, D]`, through the slices of a fused Q/K/V),
//!   each head is padded on its own (`D` 64 → 128: the dim holds `H` blocks, see [`Width`]),
//!   so the heads split off already padded and attention runs on 128-wide heads.
//! - **position-wise** ops (element-wise arithmetic, permutes, views that keep the padded dim
//!   whole or split/merge padded heads, unsqueeze, slices, pooling over other dims) carry the
//!   padding through; whether the padding stays zero is tracked (`0 * x`, `relu(0)`, `0 + 0`
//!   are zero; `exp(0)`, `x + 1` are not).
//! - **`bmm`** contracts a padded dim padded (zeros on at least one side, so the sum is
//!   unchanged) and carries padded rows and columns to its result: `Q·Kᵀ` over the padded head
//!   dim, `P·V` producing padded heads.
//! - **reductions and normalizations** over a padded dim see only the true positions: `sum`
//!   and `mean` run over zero padding (`mean` dividing by the true count); `amax`, `amin`,
//!   `prod`, `any`, `all` and softmax first set the padding to their identity (`-inf` for
//!   softmax, whose padding then comes out 0); a layer norm is written out with its
//!   statistics over the true positions. The result is PyTorch's exactly.
//! - **everything else** (`cat`, gathers, group norm, …) reads its operands sliced back to
//!   their true size — as do graph outputs — so no op ever sees a padded position it would
//!   mix into a valid one.
//!
//! Postcondition: every graph output has its true shape and value; the report lists each
//! padded contraction with its padded dims and the extra FLOPs.
//!
//! ```text
//! %t = permute(%w) : f32[64, 10]       %wp = input.derived "w@pad" : f32[128, 64]
//! %y = mm(%x, %t) : f32[16, 10]    →   %t = permute(%wp) : f32[64, 128]
//! %r = relu(%y) : f32[16, 10]          %y = mm(%x, %t) : f32[16, 128]
//!                                      %r = relu(%y) : f32[16, 128]
//!                                      %o = slice(%r) {dim=1, start=0, end=10} : f32[16, 10]
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ir::{
    norm_dim, BinaryOp, DType, Dim, Graph, InputKind, Node, NodeId, Op, Operand, Origin, ReduceOp, Scalar, TensorType,
    UnaryOp, ValueRef, WeightRecipe,
};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct Pad {
    /// Feature dims become multiples of this; `None` leaves the graph alone.
    pub multiple: Option<i64>,
}

/// One contraction whose dims the pass widened (for the manifest).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaddedContraction {
    /// The node.
    pub node: String,
    /// Each widened dim.
    pub dims: Vec<PaddedDim>,
    /// Multiply-adds ×2 added by the padding.
    pub extra_flops: u64,
}

/// One widened dim of a contraction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaddedDim {
    /// `k` (contracting), `n` (output features), `c_in`, `c_out` or `embed`.
    pub role: String,
    /// True size.
    pub size: i64,
    /// Size after padding.
    pub padded: i64,
    /// Attention heads padded one by one (`n` of a Q/K/V projection: 8 heads of 64 → 128 is
    /// 512 → 1024 in 8 blocks); absent for a dim padded at its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<i64>,
}

impl PaddedDim {
    fn new(role: &str, w: Width) -> Self {
        let blocks = (w.blocks > 1).then_some(w.blocks);
        PaddedDim { role: role.into(), size: w.size, padded: w.padded, blocks }
    }
}

/// How one dim is widened: `blocks` equal blocks of `size / blocks` true positions, each
/// followed by zeros up to `padded / blocks` (one block: the padding at the end; several:
/// attention heads `[H·D] → [H·Dp]`, each head's features padded on their own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Width {
    size: i64,
    padded: i64,
    blocks: i64,
}

impl Width {
    /// The padding at the end of a dim of `size`.
    fn at_end(size: i64, padded: i64) -> Self {
        Width { size, padded, blocks: 1 }
    }

    /// One block's true and padded sizes.
    fn block(self) -> (i64, i64) {
        (self.size / self.blocks, self.padded / self.blocks)
    }

    /// The same layout repeated `times` times (a dim merged with the `times` dims before it).
    fn repeated(self, times: i64) -> Self {
        Width { size: self.size * times, padded: self.padded * times, blocks: self.blocks * times }
    }
}

/// Which dims of a value are wider than their true size.
type Widths = BTreeMap<usize, Width>;

/// The padding of one value.
#[derive(Clone, Debug, PartialEq)]
struct Padded {
    dims: Widths,
    /// The padded positions hold zeros.
    zero: bool,
}

/// Unary functions with `f(0) = 0`.
fn keeps_zero(op: UnaryOp) -> bool {
    use UnaryOp::*;
    matches!(
        op,
        Abs | Neg
            | Relu
            | Gelu
            | GeluTanh
            | Sin
            | Sinh
            | Tan
            | Tanh
            | Asin
            | Asinh
            | Atan
            | Atanh
            | Erf
            | Expm1
            | Log1p
            | Sqrt
            | Ceil
            | Floor
            | Round
            | Trunc
            | Sign
    )
}

fn round_up(n: i64, m: i64) -> i64 {
    (n + m - 1) / m * m
}

fn zero_of(dtype: DType) -> Scalar {
    if dtype.is_float() || dtype.is_complex() {
        Scalar::Float(0.0)
    } else if dtype == DType::Bool {
        Scalar::Bool(false)
    } else {
        Scalar::Int(0)
    }
}

/// The head width `D` when matmul `id`'s output features are attention heads: following its
/// users through slices of the features (a fused Q/K/V split) and views that keep them whole,
/// a view splits them into `[…, H, D]`.
fn head_dim(graph: &Graph, id: NodeId) -> Option<i64> {
    let last = |id: NodeId| graph.node(id).outputs[0].dims.last().and_then(Dim::as_static);
    let mut todo = vec![id];
    while let Some(n) = todo.pop() {
        let width = last(n)?;
        for (user, _, _) in graph.users(n) {
            let out = &graph.node(user).outputs[0].dims;
            match graph.node(user).op {
                Op::Slice { dim, .. } if norm_dim(dim, out.len()) + 1 == out.len() => todo.push(user),
                Op::View { .. } => match out[..] {
                    [.., Dim::Static(h), Dim::Static(d)] if h > 1 && h * d == width => return Some(d),
                    [.., Dim::Static(d)] if d == width => todo.push(user),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    None
}

/// What a matmul or convolution contracts: `x` (input `x_slot`, its dim 1 contracted) and the
/// weight after it (dim `w_in` contracted, dim `w_out` the output features): `k` by `n`, each
/// (input, output) feature pair costing `macs_per_pair` multiply-adds.
struct Contraction {
    x_slot: u16,
    w_in: usize,
    w_out: usize,
    /// Names of the two dims in the report.
    roles: [&'static str; 2],
    k: i64,
    n: i64,
    macs_per_pair: i64,
}

/// The rewrite state: the padding of every widened value and memos so that each value is
/// sliced or padded once.
struct Padder {
    multiple: i64,
    state: BTreeMap<ValueRef, Padded>,
    true_values: BTreeMap<ValueRef, ValueRef>,
    zero_padded: BTreeMap<(ValueRef, Widths), ValueRef>,
    padded_weights: BTreeMap<(String, Vec<i64>, Vec<i64>), NodeId>,
    /// Valid-position masks by (dim, width, rank), made once each.
    masks: BTreeMap<(usize, Width, usize), ValueRef>,
    contractions: Vec<PaddedContraction>,
    counter: usize,
    slices: usize,
    pads: usize,
}

impl Padder {
    /// A new node derived from `from`, named `{from}.pad.{k}`.
    fn derived(&mut self, graph: &Graph, from: NodeId, op: Op, ty: TensorType) -> Node {
        let src = graph.node(from);
        self.counter += 1;
        let mut n = Node::new(format!("{}.pad.{}", src.name, self.counter), op, [ty]);
        n.origin = Origin { derived_from: Some(src.name.clone()), ..src.origin.clone() };
        n
    }

    /// Adds a node derived from `from` reading `inputs`; returns its value.
    fn add(&mut self, graph: &mut Graph, from: NodeId, op: Op, ty: TensorType, inputs: &[ValueRef]) -> ValueRef {
        let n = self.derived(graph, from, op, ty);
        ValueRef { node: graph.add_op(n, inputs), slot: 0 }
    }

    /// `v` at its true shape (slices of its padded dims).
    fn true_value(&mut self, graph: &mut Graph, v: ValueRef) -> ValueRef {
        let Some(p) = self.state.get(&v).cloned() else { return v };
        if let Some(&t) = self.true_values.get(&v) {
            return t;
        }
        let mut cur = v;
        for (&d, &w) in &p.dims {
            cur = self.in_blocks(graph, v.node, cur, d, w, |ty, d| {
                let op = Op::Slice { dim: d as i64, start: Dim::Static(0), end: Dim::Static(w.block().0), step: 1 };
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
    fn in_blocks(
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
        let view = |t: &TensorType| Op::View { size: t.dims.clone() };
        let cur = self.add(graph, from, view(&split), split.clone(), &[v]);
        let mut changed = split;
        let op = make(&mut changed, d + 1);
        let cur = self.add(graph, from, op, changed.clone(), &[cur]);
        let block = changed.dims.remove(d + 1).as_static().unwrap_or(0);
        ty.dims[d] = Dim::Static(w.blocks * block);
        self.add(graph, from, view(&ty), ty, &[cur])
    }

    /// `v` with exactly the padded dims `want`, zeros in the padding.
    fn with_padding(&mut self, graph: &mut Graph, v: ValueRef, want: &Widths) -> ValueRef {
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
    fn pad_with_zeros(&mut self, graph: &mut Graph, base: ValueRef, want: &Widths) -> ValueRef {
        let node = graph.node(base.node).clone();
        let mut ty = node.outputs[usize::from(base.slot)].clone();
        for (&d, w) in want {
            ty.dims[d] = Dim::Static(w.padded);
        }
        if let Some(w) = self.padded_weight(graph, base.node, want) {
            return ValueRef { node: w, slot: 0 };
        }
        if let (Op::Permute { dims }, [src]) = (&node.op, graph.inputs(base.node).as_slice()) {
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
            return self.add(graph, base.node, Op::Pad { pad, value: zero }, ty, &[base]);
        }
        let mut cur = base;
        for (&d, &w) in want {
            cur = self.in_blocks(graph, base.node, cur, d, w, |ty, d| {
                let (size, padded) = w.block();
                ty.dims[d] = Dim::Static(padded);
                let mut pad = vec![0; 2 * ty.rank()];
                pad[2 * (ty.rank() - 1 - d) + 1] = padded - size;
                Op::Pad { pad, value: zero }
            });
        }
        cur
    }

    /// A derived weight: the f32 weight `id` zero-padded as `want` says.
    fn padded_weight(&mut self, graph: &mut Graph, id: NodeId, want: &Widths) -> Option<NodeId> {
        let node = graph.node(id);
        let (fqn, source) = match &node.op {
            Op::Input(InputKind::Derived { fqn, recipe }) => (fqn.clone(), recipe.clone()),
            Op::Input(k) => {
                let f = k.weight_fqn()?;
                (f.to_string(), WeightRecipe::Cast { weight: f.to_string() })
            }
            _ => return None,
        };
        if node.outputs[0].dtype != DType::F32 {
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

    /// The padded size of a dim of size `n`: `None` when `n` is already a multiple, or when
    /// padding would more than double it (a dim under half the multiple is left to XLA's own
    /// tiling: `cargo xtask bench` measured padding 8 and 16 channels to 128 quadrupling the
    /// mini ResNet's TPU memory).
    fn widened(&self, n: i64) -> Option<i64> {
        let p = round_up(n, self.multiple);
        (p != n && p <= 2 * n).then_some(p)
    }

    /// The widths for one dim of size `n` padded at its end (empty when not worth it).
    fn widen(&self, d: usize, n: i64) -> Widths {
        self.widened(n).map(|p| (d, Width::at_end(n, p))).into_iter().collect()
    }

    /// The widths for the `n` output features (dim `d`) of matmul `id`: when they are
    /// attention heads of a width worth padding (64 → 128), each head is padded on its own,
    /// so that the heads split off by a view arrive padded; else the dim is padded at its end.
    fn features(&self, graph: &Graph, id: NodeId, d: usize, n: i64) -> Widths {
        let heads = head_dim(graph, id)
            .filter(|&h| n % h == 0)
            .and_then(|h| self.widened(h).map(|hp| Width { size: n, padded: n / h * hp, blocks: n / h }));
        match heads {
            Some(w) => Widths::from([(d, w)]),
            None => self.widen(d, n),
        }
    }

    /// The padding a contraction operand arrives with in `dim` (its true size if none).
    fn arriving(&self, v: ValueRef, dim: usize) -> Option<Width> {
        self.state.get(&v).and_then(|p| p.dims.get(&dim).copied())
    }

    /// Gives node `id`'s output `slot` the padding `p` (and the widened type).
    fn set_output(&mut self, graph: &mut Graph, id: NodeId, slot: u16, p: Padded) {
        if p.dims.is_empty() {
            return;
        }
        let out = &mut graph.node_mut(id).outputs[usize::from(slot)];
        for (&d, w) in &p.dims {
            out.dims[d] = Dim::Static(w.padded);
        }
        self.state.insert(ValueRef { node: id, slot }, p);
    }

    /// Every padded operand of `id` read at its true shape instead.
    fn unpad_inputs(&mut self, graph: &mut Graph, id: NodeId) {
        for (slot, v) in graph.input_edges(id) {
            if self.state.contains_key(&v) {
                let t = self.true_value(graph, v);
                graph.set_input(id, slot, t);
            }
        }
    }

    fn visit(&mut self, graph: &mut Graph, id: NodeId) {
        let node = graph.node(id).clone();
        let any_padded = graph.inputs(id).iter().any(|v| self.state.contains_key(v));
        let handled = match &node.op {
            Op::Mm => self.matmul(graph, id, 0),
            Op::Addmm { .. } => self.matmul(graph, id, 1),
            Op::Convolution { groups: 1, transposed: false, .. } => self.convolution(graph, id),
            Op::Embedding => self.embedding(graph, id),
            _ if !any_padded => true,
            Op::Bmm => self.bmm(graph, id),
            Op::Softmax { dim, log, .. } => self.softmax(graph, id, *dim, *log),
            Op::LayerNorm { normalized_rank: 1, eps, has_weight, has_bias } => {
                self.layer_norm(graph, id, *eps, [*has_weight, *has_bias])
            }
            op if op.is_elementwise() => self.elementwise(graph, id),
            Op::Permute { dims } => self.permute(graph, id, dims),
            Op::Unsqueeze { dim } => self.unsqueeze(graph, id, *dim),
            Op::View { .. } => self.view(graph, id),
            Op::Slice { dim, end, .. } => self.slice(graph, id, *dim, end),
            Op::Reduce { op, dims, keepdim, .. } => self.reduce(graph, id, *op, dims, *keepdim),
            Op::MaxPool { kernel, .. } | Op::AvgPool { kernel, .. } => self.pool(graph, id, kernel.len()),
            Op::AdaptiveAvgPool { spatial } => self.pool(graph, id, *spatial),
            _ => false,
        };
        if !handled {
            self.unpad_inputs(graph, id);
        }
    }

    /// `mm(x, w)` (`x_slot` 0) or `addmm(c, x, w)` (`x_slot` 1) on 2-D float operands.
    fn matmul(&mut self, graph: &mut Graph, id: NodeId, x_slot: u16) -> bool {
        let ins = graph.inputs(id);
        let (x, w) = (ins[usize::from(x_slot)], ins[usize::from(x_slot) + 1]);
        let (Some(xd), Some(wd)) = (graph.value_type(x).static_dims(), graph.value_type(w).static_dims()) else {
            return false;
        };
        let (&[m, _], &[k, n]) = (&xd[..], &wd[..]) else { return false };
        if !graph.node(id).outputs[0].dtype.is_float() {
            return false;
        }
        let c = Contraction { x_slot, w_in: 0, w_out: 1, roles: ["k", "n"], k, n, macs_per_pair: m };
        let features = self.features(graph, id, 1, n);
        let Some(n_pad) = self.contract(graph, id, c, features) else {
            return !ins.iter().any(|v| self.state.contains_key(v));
        };
        if x_slot == 1 {
            self.pad_bias(graph, id, 0, n, &n_pad);
        }
        self.set_output(graph, id, 0, Padded { dims: n_pad, zero: true });
        true
    }

    /// Pads `x`'s dim 1 where it arrives padded and the output features always (`features`),
    /// with the weight to match; records the contraction. `None` when there is nothing to pad.
    fn contract(&mut self, graph: &mut Graph, id: NodeId, c: Contraction, n_pad: Widths) -> Option<Widths> {
        let ins = graph.inputs(id);
        let (x, w) = (ins[usize::from(c.x_slot)], ins[usize::from(c.x_slot) + 1]);
        let k_pad: Widths = self.arriving(x, 1).map(|k| (1, k)).into_iter().collect();
        if k_pad.is_empty() && n_pad.is_empty() && !self.state.contains_key(&x) {
            return None;
        }
        let new_x = self.with_padding(graph, x, &k_pad);
        graph.set_input(id, c.x_slot, new_x);
        let w_want: Widths =
            k_pad.values().map(|&k| (c.w_in, k)).chain(n_pad.values().map(|&n| (c.w_out, n))).collect();
        let new_w = self.with_padding(graph, w, &w_want);
        graph.set_input(id, c.x_slot + 1, new_w);
        let k = k_pad.get(&1).copied().unwrap_or(Width::at_end(c.k, c.k));
        let n = n_pad.get(&1).copied().unwrap_or(Width::at_end(c.n, c.n));
        let dims = [(c.roles[0], k), (c.roles[1], n)]
            .into_iter()
            .filter(|(_, w)| w.size != w.padded)
            .map(|(role, w)| PaddedDim::new(role, w))
            .collect();
        let extra_flops = 2 * c.macs_per_pair * (k.padded * n.padded - c.k * c.n);
        self.contractions.push(PaddedContraction {
            node: graph.node(id).name.clone(),
            dims,
            extra_flops: extra_flops as u64,
        });
        Some(n_pad)
    }

    /// A bias operand (`[n]`, or `[.., n]` broadcast against the result) widened like the
    /// result's last dim.
    fn pad_bias(&mut self, graph: &mut Graph, id: NodeId, slot: u16, n: i64, n_pad: &Widths) {
        let b = graph.inputs(id)[usize::from(slot)];
        let Some(bd) = graph.value_type(b).static_dims() else { return };
        let last = bd.len().saturating_sub(1);
        let want = match (bd.last(), n_pad.values().next()) {
            (Some(&size), Some(&w)) if size == n => Widths::from([(last, w)]),
            _ => Widths::new(),
        };
        let new_b = self.with_padding(graph, b, &want);
        graph.set_input(id, slot, new_b);
    }

    /// `bmm(a, b)` on `[B, M, K] × [B, K, N]` operands (attention's `Q·Kᵀ` and `P·V`): a
    /// padded `K` is contracted padded, with zeros in at least one operand; padded `M` and `N`
    /// carry through to the result.
    fn bmm(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let [a, b] = graph.inputs(id)[..] else { return false };
        let (pa, pb) = (self.state.get(&a).cloned(), self.state.get(&b).cloned());
        let dims_of = |p: &Option<Padded>| p.as_ref().map(|p| p.dims.clone()).unwrap_or_default();
        let (mut wa, mut wb) = (dims_of(&pa), dims_of(&pb));
        if wa.contains_key(&0) || wb.contains_key(&0) || !graph.node(id).outputs[0].dtype.is_float() {
            return false;
        }
        let k = match (wa.get(&2), wb.get(&1)) {
            (Some(x), Some(y)) if x != y => return false,
            (x, y) => x.or(y).copied(),
        };
        if let Some(k) = k {
            wa.insert(2, k);
            wb.insert(1, k);
        }
        let new_a = self.with_padding_keep_fill(graph, a, &wa);
        let mut new_b = self.with_padding_keep_fill(graph, b, &wb);
        let zero = |s: &Self, v: ValueRef| s.state.get(&v).is_none_or(|p| p.zero);
        if k.is_some() && !zero(self, new_a) && !zero(self, new_b) {
            new_b = self.with_padding(graph, b, &wb);
        }
        graph.set_input(id, 0, new_a);
        graph.set_input(id, 1, new_b);
        let out: Widths = wa.get(&1).map(|&m| (1, m)).into_iter().chain(wb.get(&2).map(|&n| (2, n))).collect();
        let out_zero = (!out.contains_key(&1) || zero(self, new_a)) && (!out.contains_key(&2) || zero(self, new_b));
        // (true, padded) sizes of M, K and N.
        let size = |v: ValueRef, d: usize, w: Option<&Width>| {
            let s = graph.value_type(v).dims[d].as_static().unwrap_or(1);
            w.map_or((s, s), |w| (w.size, w.padded))
        };
        let [(m, mp), (kk, kp), (n, np)] = [size(a, 1, out.get(&1)), size(a, 2, k.as_ref()), size(b, 2, out.get(&2))];
        let dims: Vec<PaddedDim> = [("m", out.get(&1)), ("k", k.as_ref()), ("n", out.get(&2))]
            .into_iter()
            .filter_map(|(role, w)| w.map(|&w| PaddedDim::new(role, w)))
            .collect();
        if !dims.is_empty() {
            let batch = size(a, 0, None).0;
            let extra_flops = 2 * batch * (mp * kp * np - m * kk * n);
            self.contractions.push(PaddedContraction {
                node: graph.node(id).name.clone(),
                dims,
                extra_flops: extra_flops as u64,
            });
        }
        self.set_output(graph, id, 0, Padded { dims: out, zero: out_zero });
        true
    }

    /// `native_layer_norm` over a last dim padded with zeros (GPT-2's and BERT's
    /// hidden size between layers): written out as its arithmetic, with the statistics taken
    /// over the true positions (`mean = Σx / n`, the centred values zeroed past `n` before the
    /// variance), so the result stays padded — zeros there, the weight and bias zero-padded.
    /// Only when the node's `mean` and `rstd` outputs are unused (inference).
    fn layer_norm(&mut self, graph: &mut Graph, id: NodeId, eps: f64, affine: [bool; 2]) -> bool {
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
        let binary = |op, rhs| Op::Binary { op, lhs: Operand::Tensor, rhs, alpha: None };
        let tensor = |op| binary(op, Operand::Tensor);
        let scalar = |op, x: f64| binary(op, Operand::Scalar(Scalar::Float(x)));
        let sum = || Op::Reduce { op: ReduceOp::Sum, dims: vec![-1], keepdim: true, dtype: None };
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

    /// `v` with the padding of `dims` set to `fill` (`where(valid, v, fill)` per dim).
    fn fill_padding(&mut self, graph: &mut Graph, from: NodeId, v: ValueRef, dims: &Widths, fill: Scalar) -> ValueRef {
        let ty = graph.value_type(v).clone();
        let mut cur = v;
        for (&d, &w) in dims {
            let valid = self.valid_positions(graph, from, d, w, ty.rank());
            let op = Op::Where { on_true: Operand::Tensor, on_false: Operand::Scalar(fill) };
            cur = self.add(graph, from, op, ty.clone(), &[valid, cur]);
        }
        cur
    }

    /// `bool[1, …, padded, …, 1]` (the padded size at `d` of `rank` dims), true at the true
    /// positions: `arange(padded) < size`, or `arange(padded) % block < true block` for heads.
    fn valid_positions(&mut self, graph: &mut Graph, from: NodeId, d: usize, w: Width, rank: usize) -> ValueRef {
        if let Some(&mask) = self.masks.get(&(d, w, rank)) {
            return mask;
        }
        let (block, padded_block) = w.block();
        let flat = |dtype| TensorType::new(dtype, &[w.padded]);
        let scalar = |op, x| Op::Binary { op, lhs: Operand::Tensor, rhs: Operand::Scalar(Scalar::Int(x)), alpha: None };
        let arange = Op::Arange { start: Scalar::Int(0), end: Scalar::Int(w.padded), step: Scalar::Int(1) };
        let mut positions = self.add(graph, from, arange, flat(DType::I64), &[]);
        if w.blocks > 1 {
            positions =
                self.add(graph, from, scalar(BinaryOp::Remainder, padded_block), flat(DType::I64), &[positions]);
        }
        let valid = self.add(graph, from, scalar(BinaryOp::Lt, block), flat(DType::Bool), &[positions]);
        let mut shape = vec![1; rank];
        shape[d] = w.padded;
        let view = Op::View { size: shape.iter().map(|&s| Dim::Static(s)).collect() };
        let mask = self.add(graph, from, view, TensorType::new(DType::Bool, &shape), &[valid]);
        self.masks.insert((d, w, rank), mask);
        mask
    }

    /// Softmax along a padded dim: the padding is set to -inf first, so the maximum and the
    /// sum are the true row's and the padding comes out 0 (`log_softmax`: -inf). Along another
    /// dim the padding carries through (not zero: a row of zeros has a softmax of 1/n).
    fn softmax(&mut self, graph: &mut Graph, id: NodeId, dim: i64, log: bool) -> bool {
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

    /// A convolution with one group: channels in (where the input arrives padded) and out.
    fn convolution(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let ins = graph.inputs(id);
        let out = graph.node(id).outputs[0].clone();
        let (Some(wd), Some(od)) = (graph.value_type(ins[1]).static_dims(), out.static_dims()) else { return false };
        if !out.dtype.is_float() || wd.len() < 3 {
            return false;
        }
        // Multiply-adds per (input channel, output channel) pair.
        let macs_per_pair = od[0] * od[2..].iter().product::<i64>() * wd[2..].iter().product::<i64>();
        let c =
            Contraction { x_slot: 0, w_in: 1, w_out: 0, roles: ["c_in", "c_out"], k: wd[1], n: wd[0], macs_per_pair };
        let c_out = self.widen(1, c.n);
        let Some(c_out_pad) = self.contract(graph, id, c, c_out) else {
            return !ins.iter().any(|v| self.state.contains_key(v));
        };
        if ins.len() > 2 {
            let want: Widths = c_out_pad.values().map(|&p| (0, p)).collect();
            let new_b = self.with_padding(graph, ins[2], &want);
            graph.set_input(id, 2, new_b);
        }
        self.set_output(graph, id, 0, Padded { dims: c_out_pad, zero: true });
        true
    }

    /// `embedding(w, idx)`: the embedding width padded (zero columns in the table).
    fn embedding(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let [w, idx] = graph.inputs(id)[..] else { return false };
        if self.state.contains_key(&w) || self.state.contains_key(&idx) {
            return false;
        }
        let out = graph.node(id).outputs[0].clone();
        let Some(wd) = graph.value_type(w).static_dims() else { return false };
        let (&[_, e], true) = (&wd[..], out.dtype == DType::F32) else { return false };
        let widths = self.widen(1, e);
        if widths.is_empty() {
            return true;
        }
        let new_w = self.with_padding(graph, w, &widths);
        graph.set_input(id, 0, new_w);
        let dims = vec![PaddedDim::new("embed", widths[&1])];
        self.contractions.push(PaddedContraction { node: graph.node(id).name.clone(), dims, extra_flops: 0 });
        let last = out.rank() - 1;
        self.set_output(graph, id, 0, Padded { dims: widths.values().map(|&w| (last, w)).collect(), zero: true });
        true
    }

    /// Element-wise ops with NumPy broadcasting: operands that span a padded dim at its true
    /// size are zero-padded to match; operands of size 1 there broadcast as before.
    fn elementwise(&mut self, graph: &mut Graph, id: NodeId) -> bool {
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
            zero_operands.push(full && self.state.get(&new_v).is_some_and(|p| p.zero));
            graph.set_input(id, slot as u16, new_v);
        }
        let zero = Self::result_is_zero(&node.op, &zero_operands);
        self.set_output(graph, id, 0, Padded { dims: widths, zero });
        true
    }

    /// Like [`Padder::with_padding`], but keeps a value already padded in `want`'s dims as it
    /// is, zero or not (position-wise ops do not care).
    fn with_padding_keep_fill(&mut self, graph: &mut Graph, v: ValueRef, want: &Widths) -> ValueRef {
        match self.state.get(&v) {
            Some(p) if p.dims == *want => v,
            _ => self.with_padding(graph, v, want),
        }
    }

    /// Whether an element-wise op maps zero padding (`zero`: per tensor operand) to zero.
    fn result_is_zero(op: &Op, zero: &[bool]) -> bool {
        let is_zero = |o: &Operand| match *o {
            Operand::Tensor => None,
            Operand::Scalar(Scalar::Int(i)) => Some(i == 0),
            Operand::Scalar(Scalar::Float(x)) => Some(x == 0.0),
            Operand::Scalar(Scalar::Bool(b)) => Some(!b),
        };
        match op {
            Op::Unary(u) => keeps_zero(*u) && zero[0],
            Op::Convert | Op::Copy | Op::LeakyRelu { .. } | Op::Elu { .. } => zero[0],
            Op::Binary { op: BinaryOp::Mul | BinaryOp::LogicalAnd | BinaryOp::BitwiseAnd, lhs, rhs, .. } => {
                zero.contains(&true) || is_zero(lhs) == Some(true) || is_zero(rhs) == Some(true)
            }
            Op::Binary {
                op: BinaryOp::Add | BinaryOp::Sub | BinaryOp::Maximum | BinaryOp::Minimum | BinaryOp::BitwiseOr,
                lhs,
                rhs,
                ..
            } => !zero.contains(&false) && is_zero(lhs) != Some(false) && is_zero(rhs) != Some(false),
            Op::Binary { op: BinaryOp::Div, lhs: Operand::Tensor, rhs, .. } => zero[0] && is_zero(rhs) == Some(false),
            // 0^p = 0 for p > 0.
            Op::Binary { op: BinaryOp::Pow, lhs: Operand::Tensor, rhs: Operand::Scalar(p), .. } => {
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

    fn permute(&mut self, graph: &mut Graph, id: NodeId, dims: &[i64]) -> bool {
        let v = graph.inputs(id)[0];
        let p = self.state[&v].clone();
        let rank = dims.len();
        let moved =
            dims.iter().enumerate().filter_map(|(i, &d)| p.dims.get(&norm_dim(d, rank)).map(|&w| (i, w))).collect();
        self.set_output(graph, id, 0, Padded { dims: moved, zero: p.zero });
        true
    }

    fn unsqueeze(&mut self, graph: &mut Graph, id: NodeId, dim: i64) -> bool {
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
    fn view(&mut self, graph: &mut Graph, id: NodeId) -> bool {
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
        graph.node_mut(id).op = Op::View { size: size_attr };
        self.set_output(graph, id, 0, Padded { dims: Widths::from([(q, w)]), zero: p.zero });
        true
    }

    /// A slice along a padded dim: one padded at its end ends within the true size (the result
    /// is not padded); one of padded heads takes whole heads (the result keeps their padding).
    /// Along another dim the padding carries through.
    fn slice(&mut self, graph: &mut Graph, id: NodeId, dim: i64, end: &Dim) -> bool {
        let v = graph.inputs(id)[0];
        let mut p = self.state[&v].clone();
        let d = norm_dim(dim, graph.value_type(v).rank());
        let Some(w) = p.dims.remove(&d) else {
            self.set_output(graph, id, 0, p);
            return true;
        };
        let Op::Slice { start, step, .. } = &graph.node(id).op else { return false };
        let (Some(start), Some(end)) = (start.as_static(), end.as_static()) else { return false };
        let end = end.min(w.size);
        if w.blocks == 1 {
            if let Op::Slice { end: e, .. } = &mut graph.node_mut(id).op {
                *e = Dim::Static(end);
            }
            self.set_output(graph, id, 0, p);
            return true;
        }
        let (block, padded_block) = w.block();
        if *step != 1 || start % block != 0 || end % block != 0 || start >= end {
            return false;
        }
        let heads = (end - start) / block;
        if let Op::Slice { start: s, end: e, .. } = &mut graph.node_mut(id).op {
            (*s, *e) = (Dim::Static(start / block * padded_block), Dim::Static(end / block * padded_block));
        }
        p.dims.insert(d, Width { size: end - start, padded: heads * padded_block, blocks: heads });
        self.set_output(graph, id, 0, p);
        true
    }

    /// Reductions: over padded dims `sum` and `mean` run on zero padding (`mean` dividing by the
    /// true count), `amax`, `amin`, `prod`, `any` and `all` on padding set to their identity;
    /// over other dims the padding carries through.
    fn reduce(&mut self, graph: &mut Graph, id: NodeId, op: ReduceOp, dims: &[i64], keepdim: bool) -> bool {
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
        let float = graph.node(id).outputs[0].dtype.is_float();
        let fill = match op {
            ReduceOp::Sum | ReduceOp::Mean if float => None,
            ReduceOp::Max if float => Some(Scalar::Float(f64::NEG_INFINITY)),
            ReduceOp::Min if float => Some(Scalar::Float(f64::INFINITY)),
            ReduceOp::Prod if float => Some(Scalar::Float(1.0)),
            ReduceOp::Any => Some(Scalar::Bool(false)),
            ReduceOp::All => Some(Scalar::Bool(true)),
            _ => return false,
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
    fn divide_mean(&mut self, graph: &mut Graph, id: NodeId, count: i64) -> ValueRef {
        if let Op::Reduce { op, .. } = &mut graph.node_mut(id).op {
            *op = ReduceOp::Sum;
        }
        let sum = ValueRef { node: id, slot: 0 };
        let users = graph.users(id);
        let ty = graph.node(id).outputs[0].clone();
        let div = Op::Binary {
            op: BinaryOp::Div,
            lhs: Operand::Tensor,
            rhs: Operand::Scalar(Scalar::Float(count as f64)),
            alpha: None,
        };
        let mean = self.add(graph, id, div, ty, &[sum]);
        for (user, dst_slot, _) in users {
            graph.set_input(user, dst_slot, mean);
        }
        graph.redirect_outputs(sum, mean);
        mean
    }

    /// Pooling over the trailing `spatial` dims carries padding of the other dims through.
    fn pool(&mut self, graph: &mut Graph, id: NodeId, spatial: usize) -> bool {
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

impl Pass for Pad {
    fn name(&self) -> &'static str {
        "pad"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let Some(multiple) = self.multiple.filter(|&m| m > 1) else { return Ok(Changed::No) };
        let cycle = |_| PassError::Failed { pass: self.name(), reason: "cycle".into() };
        // Nodes earlier passes left without users go first (as `dce` would remove them later),
        // so that no slice or pad is made only for them. The order is taken after: the nodes
        // this pass adds may reuse the removed nodes' ids, and must not be visited.
        let removed = crate::dce::remove_dead(graph, &graph.topo_order().map_err(cycle)?);
        let order = graph.topo_order().map_err(cycle)?;
        let mut p = Padder {
            multiple,
            state: BTreeMap::new(),
            true_values: BTreeMap::new(),
            zero_padded: BTreeMap::new(),
            padded_weights: BTreeMap::new(),
            masks: BTreeMap::new(),
            contractions: Vec::new(),
            counter: 0,
            slices: 0,
            pads: 0,
        };
        for id in order {
            p.visit(graph, id);
        }
        let outputs: Vec<ValueRef> = graph.outputs().iter().map(|o| o.value).collect();
        for v in outputs {
            if p.state.contains_key(&v) {
                let t = p.true_value(graph, v);
                graph.redirect_outputs(v, t);
            }
        }
        let flops: u64 = p.contractions.iter().map(|c| c.extra_flops).sum();
        cx.note(p.contractions.len(), &format!("contractions padded to multiples of {multiple} (+{flops} FLOPs)"));
        cx.note(p.padded_weights.len(), "weights zero-padded at compile time");
        cx.note(p.pads, "activations zero-padded");
        cx.note(p.slices, "slices back to true sizes");
        cx.note(removed, "nodes without users removed first");
        let changed = removed > 0 || !p.contractions.is_empty() || p.pads > 0 || p.slices > 0;
        cx.padded = p.contractions;
        Ok(if changed { Changed::Yes } else { Changed::No })
    }
}

#[cfg(test)]
mod tests {
    use super::Pad;
    use crate::ir::builder::Builder;
    use crate::ir::{print, BinaryOp, DType, Op, Operand, ReduceOp, TensorType, UnaryOp};
    use crate::pass::{Pass, PassCx};

    fn f32(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, dims)
    }

    fn run(g: &mut crate::ir::Graph) -> PassCx {
        let mut cx = PassCx::default();
        Pad { multiple: Some(128) }.run(g, &mut cx).expect("runs");
        crate::verify(g).expect("verifies");
        cx
    }

    /// `mean(relu(x @ w1ᵀ) @ w2ᵀ * x2, -1)`: both matmuls padded, the chain between them stays
    /// padded, the mean divides by the true width and only the output is sliced.
    #[test]
    fn chains_stay_padded_and_means_use_true_sizes() {
        let mut b = Builder::new("t");
        let w1 = b.param("w1", "w1", f32(&[100, 64]));
        let w2 = b.param("w2", "w2", f32(&[70, 100]));
        let x = b.input("x", f32(&[16, 64]));
        let t1 = b.op("t1", Op::Permute { dims: vec![1, 0] }, &[w1], f32(&[64, 100]));
        let h = b.op("h", Op::Mm, &[x, t1], f32(&[16, 100]));
        let r = b.op("r", Op::Unary(UnaryOp::Relu), &[h], f32(&[16, 100]));
        let t2 = b.op("t2", Op::Permute { dims: vec![1, 0] }, &[w2], f32(&[100, 70]));
        let y = b.op("y", Op::Mm, &[r, t2], f32(&[16, 70]));
        let e = b.op("e", Op::Unary(UnaryOp::Exp), &[y], f32(&[16, 70]));
        let mul = Op::Binary { op: BinaryOp::Mul, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None };
        let z = b.op("z", mul, &[y, e], f32(&[16, 70]));
        let mean = Op::Reduce { op: ReduceOp::Mean, dims: vec![-1], keepdim: true, dtype: None };
        let m = b.op("m", mean, &[z], f32(&[16, 1]));
        b.output(m);
        b.output(e);
        let mut g = b.finish();
        let cx = run(&mut g);
        assert_eq!(cx.padded.len(), 2);
        assert_eq!(cx.padded[1].extra_flops, 2 * 16 * (128 * 128 - 100 * 70));
        insta::assert_snapshot!(print(&g), @r#"
        graph t {
          %0 = input.param "w1" : f32[100,64]  # w1
          %1 = input.param "w2" : f32[70,100]  # w2
          %2 = input.user #0 : f32[16,64]  # x
          %3 = permute(%0) {dims=[1, 0]} : f32[64,100]  # t1
          %4 = permute(%1) {dims=[1, 0]} : f32[100,70]  # t2
          %5 = input.derived "w1@pad128x64" : f32[128,64]  # w1@pad128x64
          %6 = permute(%5) {dims=[1, 0]} : f32[64,128]  # t1.pad.1
          %7 = mm(%2, %6) : f32[16,128]  # h
          %8 = relu(%7) : f32[16,128]  # r
          %9 = input.derived "w2@pad128x128" : f32[128,128]  # w2@pad128x128
          %10 = permute(%9) {dims=[1, 0]} : f32[128,128]  # t2.pad.2
          %11 = mm(%8, %10) : f32[16,128]  # y
          %12 = exp(%11) : f32[16,128]  # e
          %13 = mul(%11, %12) : f32[16,128]  # z
          %14 = reduce_sum(%13) {dims=[-1], keepdim=true, dtype=none} : f32[16,1]  # m
          %15 = div(%14, 70.0) : f32[16,1]  # m.pad.3
          %16 = slice(%12) {dim=1, start=0, end=70, step=1} : f32[16,70]  # e.pad.4
          return user[0] = %15
          return user[1] = %16
        }
        "#);
    }

    /// Attention with two heads of 64: the Q/K/V projection pads each head to 128 in the
    /// weight, the heads split off padded, both `bmm`s run at 128 and the output projection
    /// reads the merged heads padded — no `pad` node, one slice (the graph output).
    #[test]
    fn attention_heads_are_padded_one_by_one() {
        use crate::ir::Dim;
        let mut b = Builder::new("t");
        let wqkv = b.param("wqkv", "wqkv", f32(&[384, 64]));
        let wo = b.param("wo", "wo", f32(&[64, 128]));
        let x = b.input("x", f32(&[16, 64]));
        let t = b.op("t", Op::Permute { dims: vec![1, 0] }, &[wqkv], f32(&[64, 384]));
        let qkv = b.op("qkv", Op::Mm, &[x, t], f32(&[16, 384]));
        let mut heads = Vec::new();
        for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
            let (start, end) = (Dim::Static(128 * i as i64), Dim::Static(128 * (i as i64 + 1)));
            let s = b.op(name, Op::Slice { dim: 1, start, end, step: 1 }, &[qkv], f32(&[16, 128]));
            let size = [16, 2, 64].map(Dim::Static).to_vec();
            let v = b.op(&format!("{name}.view"), Op::View { size }, &[s], f32(&[16, 2, 64]));
            heads.push(b.op(&format!("{name}.heads"), Op::Permute { dims: vec![1, 0, 2] }, &[v], f32(&[2, 16, 64])));
        }
        let kt = b.op("kt", Op::Permute { dims: vec![0, 2, 1] }, &[heads[1]], f32(&[2, 64, 16]));
        let scores = b.op("scores", Op::Bmm, &[heads[0], kt], f32(&[2, 16, 16]));
        let p = b.op("p", Op::Softmax { dim: -1, log: false, safe: false }, &[scores], f32(&[2, 16, 16]));
        let o = b.op("o", Op::Bmm, &[p, heads[2]], f32(&[2, 16, 64]));
        let merged = b.op("merged", Op::Permute { dims: vec![1, 0, 2] }, &[o], f32(&[16, 2, 64]));
        let flat = b.op("flat", Op::View { size: [16, 128].map(Dim::Static).to_vec() }, &[merged], f32(&[16, 128]));
        let to = b.op("to", Op::Permute { dims: vec![1, 0] }, &[wo], f32(&[128, 64]));
        let y = b.op("y", Op::Mm, &[flat, to], f32(&[16, 64]));
        b.output(y);
        let mut g = b.finish();
        let cx = run(&mut g);
        let text = print(&g);
        assert!(!text.contains(" pad("), "{text}");
        assert_eq!(text.matches(" slice(").count(), 4, "the q/k/v splits and the output: {text}");
        assert!(text.contains("input.derived \"wqkv@pad768x64@blocks6x1\" : f32[768,64]"), "{text}");
        assert!(text.contains("input.derived \"wo@pad128x256@blocks1x2\" : f32[128,256]"), "{text}");
        assert!(text.contains("bmm(") && text.contains(": f32[2,16,128]  # o"), "{text}");
        let roles: Vec<String> = cx
            .padded
            .iter()
            .map(|c| c.dims.iter().map(|d| format!("{}:{}→{}", d.role, d.size, d.padded)).collect::<Vec<_>>().join(","))
            .collect();
        assert_eq!(roles, ["n:384→768", "k:64→128", "n:64→128", "k:128→256,n:64→128"]);
    }

    /// A layer norm on a padded hidden size stays padded: its statistics are taken over the
    /// 100 true positions (a 0/1 mask on the centred values), its weight and bias are
    /// zero-padded, and the next matmul contracts the padded dim: the only slice is the output.
    #[test]
    fn layer_norm_keeps_the_padding() {
        let mut b = Builder::new("t");
        let w1 = b.param("w1", "w1", f32(&[100, 64]));
        let gamma = b.param("gamma", "gamma", f32(&[100]));
        let beta = b.param("beta", "beta", f32(&[100]));
        let w2 = b.param("w2", "w2", f32(&[64, 100]));
        let x = b.input("x", f32(&[16, 64]));
        let t1 = b.op("t1", Op::Permute { dims: vec![1, 0] }, &[w1], f32(&[64, 100]));
        let h = b.op("h", Op::Mm, &[x, t1], f32(&[16, 100]));
        let ln = Op::LayerNorm { normalized_rank: 1, eps: 1e-5, has_weight: true, has_bias: true };
        let outs = [f32(&[16, 100]), f32(&[16, 1]), f32(&[16, 1])];
        let ln = b.graph_mut().add_op(crate::ir::Node::new("ln", ln, outs), &[h, gamma, beta]);
        let normalized = crate::ir::ValueRef { node: ln, slot: 0 };
        let t2 = b.op("t2", Op::Permute { dims: vec![1, 0] }, &[w2], f32(&[100, 64]));
        let y = b.op("y", Op::Mm, &[normalized, t2], f32(&[16, 64]));
        b.output(y);
        let mut g = b.finish();
        let cx = run(&mut g);
        let text = print(&g);
        assert!(!text.contains("layer_norm("), "{text}");
        assert_eq!(text.matches(" slice(").count(), 1, "only the graph output: {text}");
        assert!(text.contains("lt(") && text.contains(": f32[128]  # gamma@pad128"), "{text}");
        assert_eq!(text.matches("div(").count(), 2, "mean and variance divide by 100: {text}");
        assert_eq!(cx.padded.len(), 2, "both matmuls");
    }

    /// Softmax and `amax` over a padded dim see -inf in the padding; the softmax's padding
    /// comes out zero, so the next matmul contracts it padded. `cat` reads the true value.
    #[test]
    fn softmax_and_max_over_padding_see_their_identity() {
        let mut b = Builder::new("t");
        let w = b.param("w", "w", f32(&[100, 64]));
        let w2 = b.param("w2", "w2", f32(&[64, 100]));
        let x = b.input("x", f32(&[4, 64]));
        let t = b.op("t", Op::Permute { dims: vec![1, 0] }, &[w], f32(&[64, 100]));
        let y = b.op("y", Op::Mm, &[x, t], f32(&[4, 100]));
        let s = b.op("s", Op::Softmax { dim: -1, log: false, safe: false }, &[y], f32(&[4, 100]));
        let t2 = b.op("t2", Op::Permute { dims: vec![1, 0] }, &[w2], f32(&[100, 64]));
        let z = b.op("z", Op::Mm, &[s, t2], f32(&[4, 64]));
        let amax = Op::Reduce { op: ReduceOp::Max, dims: vec![-1], keepdim: false, dtype: None };
        let m = b.op("m", amax, &[y], f32(&[4]));
        let c = b.op("c", Op::Cat { dim: 0 }, &[y, y], f32(&[8, 100]));
        for v in [z, m, c] {
            b.output(v);
        }
        let mut g = b.finish();
        run(&mut g);
        let text = print(&g);
        assert!(text.contains("softmax(%") && text.contains("} : f32[4,128]  # s"), "{text}");
        assert!(text.contains("mm(%") && text.contains(": f32[4,128]  # z"), "s feeds z padded: {text}");
        assert_eq!(text.matches("where(").count(), 2, "-inf in the padding for s and m: {text}");
        assert!(text.contains("reduce_max(") && text.contains(": f32[4]  # m"), "{text}");
        assert!(text.contains(": f32[4,100]  # y.pad.") && text.contains("cat("), "cat reads sliced: {text}");
    }
}
