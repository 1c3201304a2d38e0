//! Nodes and value references of the IR.

use petgraph::stable_graph::NodeIndex;
use smallvec::SmallVec;

use super::ops::Op;
use super::types::{Precision, TensorType};

/// Stable handle of a node; stays valid when other nodes are removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) NodeIndex<u32>);

impl NodeId {
    /// The raw index, for diagnostics and deterministic tie-breaking.
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// One output of one node: the unit of data flow (tract's `OutletId`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    /// The producing node.
    pub node: NodeId,
    /// Which of its outputs.
    pub slot: u16,
}

/// Where a node came from in the exported program; kept across passes for diagnostics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Origin {
    /// The FX target, e.g. `torch.ops.aten.addmm.default` (empty for graph inputs).
    pub target: String,
    /// FX names of the node's outputs, one per output slot (`getitem`, `getitem_3`, …).
    pub output_names: Vec<String>,
    /// The Python stack trace recorded at export, if any.
    pub stack_trace: Option<String>,
    /// `nn_module_stack` paths, outermost first, e.g. `["model.layers.0", "model.layers.0.mlp"]`.
    pub module_path: Vec<String>,
    /// For nodes created by a pass: the name of the node it was derived from.
    pub derived_from: Option<String>,
}

impl Origin {
    /// The innermost `File "…", line N` frame of the stack trace outside torch itself, which
    /// points at the model's code (falls back to the innermost frame).
    pub fn source_line(&self) -> Option<&str> {
        let trace = self.stack_trace.as_deref()?;
        let mut frames = trace.lines().map(str::trim).filter(|l| l.starts_with("File "));
        let innermost = frames.clone().next_back();
        frames.rfind(|l| !l.contains("/torch/")).or(innermost)
    }
}

/// A node: one operation with typed outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique name; the FX node name for imported nodes, `{orig}.{pass}.{k}` for derived ones.
    pub name: String,
    /// The operation.
    pub op: Op,
    /// Types of the outputs, one per output slot. Invariant: the verifier checks them against
    /// the op's shape rules.
    pub outputs: SmallVec<[TensorType; 1]>,
    /// Provenance, for messages and MLIR locations.
    pub origin: Origin,
    /// For contractions: a precision set by the `precision` pass, overriding the default.
    pub precision: Option<Precision>,
    /// The op and output types before `specialize` gave the symbolic sizes values (only for
    /// nodes that had some): what `bucket_masks` reads to know which dims are dynamic.
    pub symbolic: Option<Box<Symbolic>>,
    /// The group this node belongs to, which the emitter wraps into one `stablehlo.composite`
    /// (set by the `sdpa` pass).
    pub composite: Option<Composite>,
    /// How the first output is split over the graph's mesh (set by the `shard` pass): for a graph
    /// input, the argument's sharding; for an op, a constraint on its result. `None`: left to
    /// the partitioner (replicated for inputs).
    pub sharding: Option<super::sharding::Sharding>,
}

/// The composite the `sdpa` pass marks attentions as.
pub const SDPA: &str = "torchtpu.sdpa";

/// Every composite name the IR knows: what a `composite=NAME#K` attribute may name.
pub const COMPOSITES: &[&str] = &[SDPA];

/// One instance of a composite: nodes that carry the same `Composite` are emitted as one
/// `stablehlo.composite` named `name`, whose decomposition function holds their ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Composite {
    /// The composite's name, e.g. `torchtpu.sdpa`.
    pub name: &'static str,
    /// Which instance in the graph (0, 1, … in topological order).
    pub instance: u32,
}

/// A node as it was before specialization.
#[derive(Clone, Debug, PartialEq)]
pub struct Symbolic {
    /// The op, with symbolic attributes.
    pub op: Op,
    /// The output types, with symbolic dims.
    pub outputs: Vec<TensorType>,
}

impl Node {
    /// A node with no provenance beyond its name.
    pub fn new(name: impl Into<String>, op: Op, outputs: impl IntoIterator<Item = TensorType>) -> Node {
        Node {
            name: name.into(),
            op,
            outputs: outputs.into_iter().collect(),
            origin: Origin::default(),
            precision: None,
            symbolic: None,
            composite: None,
            sharding: None,
        }
    }

    /// A node a pass makes from `source`: named `{source}.{suffix}` (the pass's name and a
    /// counter or a tag, e.g. `addmm.pad.3`, `q.fuse_matmuls.qkv`), with `source`'s provenance
    /// and `derived_from` naming it, so messages and MLIR locations still point at the model.
    pub fn derived(
        source: &Node,
        suffix: impl std::fmt::Display,
        op: Op,
        outputs: impl IntoIterator<Item = TensorType>,
    ) -> Node {
        let mut node = Node::new(format!("{}.{suffix}", source.name), op, outputs);
        node.origin = Origin { derived_from: Some(source.name.clone()), ..source.origin.clone() };
        node
    }
}

/// Weight of a data-flow edge: which output feeds which input slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// Output slot of the producer.
    pub src_slot: u16,
    /// Input slot of the consumer.
    pub dst_slot: u16,
}
