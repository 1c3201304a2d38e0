//! The artifact's `weights.safetensors`: the weight arguments of the lowered program, stored
//! ones straight from the archive, derived ones computed from their recipes.

use std::borrow::Cow;
use std::collections::BTreeMap;

use safetensors::tensor::{Dtype, View};
use torchtpu_passes::ir::{DType, Graph, InputKind, Op};

use crate::artifact::safetensors_dtype;
use crate::import::Program;
use crate::Error;

/// The names of `graph`'s weight arguments (stored and derived), in calling order.
pub fn weight_order(graph: &Graph) -> Vec<String> {
    graph
        .graph_inputs()
        .iter()
        .filter_map(|&id| match &graph.node(id).op {
            Op::Input(InputKind::Derived { fqn, .. }) => Some(fqn.clone()),
            Op::Input(k) => k.weight_fqn().map(str::to_string),
            _ => None,
        })
        .collect()
}

/// A weight as a safetensors view over the archive's bytes (or over computed ones).
struct WeightView<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Cow<'a, [u8]>,
}

impl View for &WeightView<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// The weight arguments of the lowered graph as safetensors keyed by fully qualified name.
pub fn safetensors(program: &Program, graph: &Graph) -> Result<Vec<u8>, Error> {
    let mut views = BTreeMap::new();
    for &id in graph.graph_inputs() {
        let Op::Input(kind) = &graph.node(id).op else {
            continue;
        };
        let (name, view) = match kind {
            InputKind::Derived { fqn, recipe } => {
                let ty = &graph.node(id).outputs[0];
                let values = crate::derive::compute(program, recipe)?;
                let shape = ty.dims.iter().filter_map(|d| d.as_static()).map(|d| d as usize).collect();
                let (dtype, data) = match ty.dtype {
                    DType::BF16 => {
                        (Dtype::BF16, values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect())
                    }
                    DType::F32 => (Dtype::F32, values.iter().flat_map(|v| v.to_le_bytes()).collect()),
                    d => return Err(Error::Unsupported(format!("derived weight `{fqn}` of dtype {d}"))),
                };
                (fqn.clone(), WeightView { dtype, shape, data: Cow::Owned(data) })
            }
            k => {
                let Some(fqn) = k.weight_fqn() else { continue };
                let w = &program.weights[fqn];
                let dtype = safetensors_dtype(w.dtype).ok_or_else(|| {
                    Error::Unsupported(format!("weight `{fqn}` has dtype {}, which the artifact cannot store", w.dtype))
                })?;
                let data = w.contiguous_bytes(&program.archive)?;
                (fqn.to_string(), WeightView { dtype, shape: w.sizes.iter().map(|&s| s as usize).collect(), data })
            }
        };
        views.insert(name, view);
    }
    safetensors::serialize(views.iter().map(|(k, v)| (k.as_str(), v)), None)
        .map_err(|e| Error::Unsupported(format!("cannot serialize the weights: {e}")))
}
