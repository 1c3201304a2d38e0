//! `pad`: widens the feature dims of matmuls, convolutions and embeddings to a multiple of
//! `--pad-multiple` (off by default: libtpu's figures show the zeros only adding work), with
//! zeros in the weights at compile time, and keeps values padded along chains of layers, so
//! that one padded layer feeds the next without a slice and a pad in between. A dim is widened only when that at most doubles it
//! (64 → 128, 50257 → 50304, not 8 → 128).
//!
//! Every value the pass widens carries a `Padded` record: which dims are wider than their
//! true size, and whether the extra positions hold zeros. A node meets padded operands in one
//! of these ways:
//!
//! - **seeds** (`mm`, `addmm`, convolutions with one group, `embedding`): output features are
//!   padded (weight rows/columns and bias zero-padded as derived weights); the contracting dim
//!   is padded where the activation arrives padded, with matching zero rows in the weight. An
//!   activation that arrives unpadded is not padded just to be contracted: that would only
//!   add the zeros XLA's own tiling adds. When a matmul's output features are attention heads
//!   (a view downstream splits them into `[…, H, D]`, through the slices of a fused Q/K/V),
//!   each head is padded on its own (`D` 64 → 128: the dim holds `H` blocks, see `Width`),
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
//! padded contraction with its padded dims and the extra FLOPs. A node that read a weight
//! now padded (below, its transpose) is left without users, for `dce`. With
//! `--pad-multiple 128`:
//!
//! ```text
#![doc = include_str!("../../tests/pad/linear_output_features_widened.ir")]
//! ```

mod carry;
mod contract;
#[cfg(test)]
mod tests;
mod values;

use crate::ir::ops::{
    AdaptiveAvgPool, AvgPool, Bmm, Convolution, Embedding, LayerNorm, MaxPool, Mm, Permute, Reduce, Slice, Softmax,
    Unsqueeze,
};
use std::collections::BTreeMap;

use crate::ir::{norm_dim, DType, Dim, Graph, InputKind, NodeId, Op, Scalar, UnaryOp, ValueRef, WeightRecipe};
use crate::pass::{Changed, PaddedContraction, PaddedDim, Pass, PassCx, PassError};

/// See the module docs.
pub struct Pad {
    /// Feature dims become multiples of this; `None` leaves the graph alone.
    pub multiple: Option<i64>,
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
                Op::Slice(Slice { dim, .. }) if norm_dim(dim, out.len()) + 1 == out.len() => todo.push(user),
                Op::View(_) => match out[..] {
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
            Op::Mm(Mm) => self.matmul(graph, id, 0),
            Op::Addmm(_) => self.matmul(graph, id, 1),
            Op::Convolution(Convolution { groups: 1, transposed: false, .. }) => self.convolution(graph, id),
            Op::Embedding(Embedding) => self.embedding(graph, id),
            _ if !any_padded => true,
            Op::Bmm(Bmm) => self.bmm(graph, id),
            Op::Softmax(Softmax { dim, log, .. }) => self.softmax(graph, id, *dim, *log),
            Op::LayerNorm(LayerNorm { normalized_rank: 1, eps, has_weight, has_bias }) => {
                self.layer_norm(graph, id, *eps, [*has_weight, *has_bias])
            }
            op if op.is_elementwise() => self.elementwise(graph, id),
            Op::Permute(Permute { dims }) => self.permute(graph, id, dims),
            Op::Unsqueeze(Unsqueeze { dim }) => self.unsqueeze(graph, id, *dim),
            Op::View(_) => self.view(graph, id),
            Op::Slice(Slice { dim, end, .. }) => self.slice(graph, id, *dim, end),
            Op::Reduce(Reduce { op, dims, keepdim, .. }) => self.reduce(graph, id, *op, dims, *keepdim),
            Op::MaxPool(MaxPool { kernel, .. }) | Op::AvgPool(AvgPool { kernel, .. }) => {
                self.pool(graph, id, kernel.len())
            }
            Op::AdaptiveAvgPool(AdaptiveAvgPool { spatial }) => self.pool(graph, id, *spatial),
            _ => false,
        };
        if !handled {
            self.unpad_inputs(graph, id);
        }
    }
}

impl Padder {
    /// An embedding gathers rows by index, so a table with zero rows appended gives the same
    /// result: where its weight also has a copy padded further along the rows (a tied weight
    /// such as GPT-2's `wte`, whose LM head pads the vocabulary), the embedding reads that copy
    /// and the weight is stored once. Returns how many embeddings changed.
    fn share_tables(&self, graph: &mut Graph) -> usize {
        let mut shared = 0;
        let embeddings: Vec<NodeId> =
            graph.node_ids().filter(|&id| graph.node(id).op == Op::Embedding(Embedding)).collect();
        for id in embeddings {
            let table = graph.inputs(id)[0];
            let Some((fqn, padded, blocks)) = padding_of(graph, table.node) else { continue };
            let wider = self
                .padded_weights
                .iter()
                .filter(|((f, p, b), _)| {
                    *f == fqn && p.len() == 2 && p[1] == padded[1] && b[1] == blocks[1] && b[0] == 1 && p[0] > padded[0]
                })
                .max_by_key(|((_, p, _), _)| p[0]);
            if let Some((_, &copy)) = wider {
                graph.set_input(id, 0, ValueRef { node: copy, slot: 0 });
                shared += 1;
            }
        }
        shared
    }
}

/// The weight a 2-d table comes from, and its padding: a stored weight (as it is) or a padded
/// copy of one.
fn padding_of(graph: &Graph, node: NodeId) -> Option<(String, Vec<i64>, Vec<i64>)> {
    let n = graph.node(node);
    let dims = n.outputs[0].static_dims()?;
    match &n.op {
        Op::Input(InputKind::Derived { recipe: WeightRecipe::Pad { source, padded, blocks, .. }, .. }) => {
            let WeightRecipe::Cast { weight } = source.as_ref() else { return None };
            let blocks = if blocks.is_empty() { vec![1; padded.len()] } else { blocks.clone() };
            Some((weight.clone(), padded.clone(), blocks))
        }
        Op::Input(k) => Some((k.weight_fqn()?.to_string(), dims.clone(), vec![1; dims.len()])),
        _ => None,
    }
    .filter(|(_, p, _)| p.len() == 2)
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
        let shared = p.share_tables(graph);
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
        cx.note(shared, "embedding tables read from their tied weight's padded copy");
        cx.note(p.pads, "activations zero-padded");
        cx.note(p.slices, "slices back to true sizes");
        cx.note(removed, "nodes without users removed first");
        let changed = removed > 0 || !p.contractions.is_empty() || p.pads > 0 || p.slices > 0 || shared > 0;
        cx.padded = p.contractions;
        Ok(if changed { Changed::Yes } else { Changed::No })
    }
}

/// The report's record of dim `role` padded to `w`.
fn padded_dim(role: &str, w: Width) -> PaddedDim {
    let blocks = (w.blocks > 1).then_some(w.blocks);
    PaddedDim { role: role.into(), size: w.size, padded: w.padded, blocks }
}
