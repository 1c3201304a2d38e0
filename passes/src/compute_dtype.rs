//! `compute_dtype`: mixed precision for contractions (`--compute-dtype bf16`). Every f32
//! matmul and convolution gets bf16 operands and still produces (accumulates in) f32: weights
//! feeding them are stored in bf16 (derived weights, half the bytes; a weight also read
//! elsewhere keeps its f32 copy too), other operands are converted in the graph, each value
//! once. Biases, norms, softmax, reductions and everything else stay f32. Without
//! `--compute-dtype` the pass changes nothing. The f32 transposes of narrowed weights are left
//! without users, for `dce`:
//!
//! ```text
#![doc = include_str!("../tests/compute_dtype/linear_gets_bf16_operands.ir")]
//! ```

use crate::ir::ops::{Bmm, Convert, Mm};
use std::collections::BTreeMap;

use crate::ir::{DType, Graph, InputKind, Node, NodeId, Op, TensorType, ValueRef, WeightRecipe};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct ComputeDtype {
    /// The operand dtype of contractions; `None` leaves the graph alone.
    pub dtype: Option<DType>,
}

/// The operand slots of a contraction with an f32 result.
fn operand_slots(node: &Node) -> &'static [u16] {
    if node.outputs.first().map(|t| t.dtype) != Some(DType::F32) {
        return &[];
    }
    match node.op {
        Op::Mm(Mm) | Op::Bmm(Bmm) => &[0, 1],
        Op::Addmm(_) => &[1, 2],
        Op::Convolution(_) => &[0, 1],
        _ => &[],
    }
}

/// Rewrites values to `dtype`, each at most once.
struct Narrowing {
    dtype: DType,
    done: BTreeMap<ValueRef, ValueRef>,
    weights: usize,
    converts: usize,
}

impl Narrowing {
    fn ty(&self, t: &TensorType) -> TensorType {
        TensorType { dtype: self.dtype, dims: t.dims.clone() }
    }

    fn narrow(&mut self, graph: &mut Graph, v: ValueRef) -> ValueRef {
        if let Some(&n) = self.done.get(&v) {
            return n;
        }
        let node = graph.node(v.node).clone();
        let ty = self.ty(&node.outputs[usize::from(v.slot)]);
        // A weight (stored, or derived by an earlier pass) is kept narrow in the artifact.
        let weight = match &node.op {
            Op::Input(InputKind::Derived { fqn, recipe }) => Some((fqn.clone(), recipe.clone())),
            Op::Input(k) => k.weight_fqn().map(|f| (f.to_string(), WeightRecipe::Cast { weight: f.to_string() })),
            _ => None,
        };
        let id = if let Some((fqn, recipe)) = weight.filter(|_| node.outputs[0].dtype == DType::F32) {
            self.weights += 1;
            let name = format!("{fqn}@{}", self.dtype);
            let op = Op::Input(InputKind::Derived { fqn: name.clone(), recipe });
            graph.add_weight_input(Node::new(name, op, [ty]))
        } else if let (Op::Permute(_), Some(src)) = (&node.op, graph.inputs(v.node).first().copied()) {
            // A transposed operand (`nn.Linear`): narrow what is transposed.
            let narrowed = self.narrow(graph, src);
            graph.add_op(Node::derived(&node, "compute_dtype", node.op.clone(), [ty]), &[narrowed])
        } else {
            self.converts += 1;
            graph.add_op(
                Node::derived(&node, format_args!("{}.compute_dtype", v.slot), Op::Convert(Convert), [ty]),
                &[v],
            )
        };
        let narrowed = ValueRef { node: id, slot: 0 };
        self.done.insert(v, narrowed);
        narrowed
    }
}

impl Pass for ComputeDtype {
    fn name(&self) -> &'static str {
        "compute_dtype"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let Some(dtype) = self.dtype else { return Ok(Changed::No) };
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let targets: Vec<NodeId> = order.into_iter().filter(|&id| !operand_slots(graph.node(id)).is_empty()).collect();
        let mut n = Narrowing { dtype, done: BTreeMap::new(), weights: 0, converts: 0 };
        for &id in &targets {
            for &slot in operand_slots(graph.node(id)) {
                let v = graph.inputs(id)[usize::from(slot)];
                let narrowed = n.narrow(graph, v);
                graph.set_input(id, slot, narrowed);
            }
        }
        cx.note(targets.len(), &format!("contractions fed {dtype} operands, accumulating in f32"));
        cx.note(n.weights, &format!("weights stored in {dtype}"));
        cx.note(n.converts, &format!("activations converted to {dtype}"));
        Ok(if targets.is_empty() { Changed::No } else { Changed::Yes })
    }
}
