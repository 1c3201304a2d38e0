//! `fuse_matmuls`: horizontal fusion of matmuls that read the same input — the Q/K/V
//! projections of attention, the gate and up projections of a SwiGLU MLP. `mm(x, Wᵢᵀ)` for
//! stored weights `Wᵢ: [nᵢ, k]` become one `mm(x, Wᵀ)` on the rows of all `Wᵢ` stacked at
//! compile time (a derived weight), and a slice per original result: one large contraction
//! instead of several small ones, which keeps a TPU's matrix unit busier.
//!
//! Preconditions per group: two or more `mm` nodes with the same left operand, each right
//! operand a `[1, 0]` permute of a stored weight of the `mm`'s dtype (f32, bf16 or f16), all
//! with the same `k` and precision. Nothing is fused for a mesh with a `tp` axis: tensor
//! parallelism splits each projection's features across devices, and a stacked weight split so
//! would put a head's Q, K and V on different devices.
//! Postcondition: each group is one `mm` plus slices; the permutes left unused go to `dce`.
//!
//! Attention's Q/K/V projections, as a filetest (the input graph, then the graph after the
//! pass and `dce`, after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/fuse_matmuls/qkv_projections_fuse.ir")]
//! ```

use crate::ir::ops::{Mm, Permute, Slice};
use std::collections::BTreeMap;

use crate::ir::{DType, Dim, Graph, InputKind, Node, NodeId, Op, TensorType, ValueRef, WeightRecipe};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct FuseMatmuls {
    /// Leave the projections separate (a mesh with a `tp` axis).
    pub keep_separate: bool,
}

/// One candidate: the `mm`, its stored weight's name, `[n, k]` and dtype.
struct Candidate {
    mm: NodeId,
    weight: String,
    n: i64,
    k: i64,
    dtype: DType,
}

/// `mm(x, permute(W, [1, 0]))` with `W` a stored `[n, k]` weight of the `mm`'s dtype.
fn candidate(graph: &Graph, mm: NodeId) -> Option<(ValueRef, Candidate)> {
    let node = graph.node(mm);
    // Only an `mm` is sure to have one output (the verifier's arity); other nodes may have none.
    if node.op != Op::Mm(Mm) {
        return None;
    }
    let dtype = node.outputs[0].dtype;
    if !WeightRecipe::handles(dtype) {
        return None;
    }
    let ins = graph.inputs(mm);
    let perm = graph.node(ins[1].node);
    if perm.op != (Op::Permute(Permute { dims: vec![1, 0] })) {
        return None;
    }
    let w_value = graph.inputs(ins[1].node)[0];
    let w = graph.node(w_value.node);
    let Op::Input(kind) = &w.op else { return None };
    let fqn = kind.weight_fqn()?;
    let dims: Vec<i64> = w.outputs[0].dims.iter().filter_map(Dim::as_static).collect();
    let [n, k] = dims[..] else { return None };
    (w.outputs[0].dtype == dtype).then(|| (ins[0], Candidate { mm, weight: fqn.to_string(), n, k, dtype }))
}

/// The stacked weight named `fqn` that an earlier group made, if any.
fn stacked_weight(graph: &Graph, fqn: &str) -> Option<NodeId> {
    graph
        .graph_inputs()
        .iter()
        .copied()
        .find(|&i| matches!(&graph.node(i).op, Op::Input(InputKind::Derived { fqn: f, .. }) if f == fqn))
}

fn fuse(graph: &mut Graph, x: ValueRef, group: &[Candidate]) {
    let (k, dtype, total): (i64, DType, i64) = (group[0].k, group[0].dtype, group.iter().map(|c| c.n).sum());
    let first = graph.node(group[0].mm).clone();
    let m = first.outputs[0].dims[0].clone();
    let names: Vec<String> = group.iter().map(|c| c.weight.clone()).collect();
    let fqn = format!("fused:{}", names.join("+"));
    // The same weights may be fused for several inputs (a layer applied twice): one stacked weight.
    let w = match stacked_weight(graph, &fqn) {
        Some(w) => w,
        None => {
            let recipe = WeightRecipe::ConcatRows { weights: names };
            let derived = Op::Input(InputKind::Derived { fqn: fqn.clone(), recipe });
            graph.add_weight_input(Node::new(fqn, derived, [TensorType::new(dtype, &[total, k])]))
        }
    };
    let at = |name: &str, op: Op, ty: TensorType| Node::derived(&first, format_args!("fuse_matmuls.{name}"), op, [ty]);
    let wt = graph.add_op(
        at("t", Op::Permute(Permute { dims: vec![1, 0] }), TensorType::new(dtype, &[k, total])),
        &[ValueRef { node: w, slot: 0 }],
    );
    let mut mm = at("mm", Op::Mm(Mm), TensorType { dtype, dims: vec![m.clone(), Dim::Static(total)] });
    mm.precision = first.precision;
    let fused = graph.add_op(mm, &[x, ValueRef { node: wt, slot: 0 }]);
    let mut start = 0;
    for (i, c) in group.iter().enumerate() {
        let slice = Op::Slice(Slice { dim: 1, start: Dim::Static(start), end: Dim::Static(start + c.n), step: 1 });
        let ty = TensorType { dtype, dims: vec![m.clone(), Dim::Static(c.n)] };
        let s = graph.add_op(at(&format!("slice{i}"), slice, ty), &[ValueRef { node: fused, slot: 0 }]);
        graph.replace_uses(ValueRef { node: c.mm, slot: 0 }, ValueRef { node: s, slot: 0 });
        graph.remove_node(c.mm);
        start += c.n;
    }
}

impl Pass for FuseMatmuls {
    fn name(&self) -> &'static str {
        "fuse_matmuls"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        if self.keep_separate {
            return Ok(Changed::No);
        }
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        // Group by (left operand, k, precision); BTreeMap keeps the groups in a fixed order.
        let mut groups: BTreeMap<(ValueRef, i64, String), Vec<Candidate>> = BTreeMap::new();
        for id in order {
            if let Some((x, c)) = candidate(graph, id) {
                let precision = format!("{:?}", graph.node(id).precision);
                groups.entry((x, c.k, precision)).or_default().push(c);
            }
        }
        let mut fused = 0;
        for ((x, ..), group) in groups.into_iter().filter(|(_, g)| g.len() > 1) {
            fused += group.len();
            fuse(graph, x, &group);
        }
        cx.note(fused, "matmuls fused into wider ones on stacked weights");
        Ok(if fused > 0 { Changed::Yes } else { Changed::No })
    }
}
