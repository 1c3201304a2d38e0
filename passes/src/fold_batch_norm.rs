//! `fold_batch_norm`: an eval-mode BatchNorm right after a convolution is folded into the
//! convolution's weights and bias at compile time. With `s = gamma / sqrt(var + eps)` per
//! output channel, `bn(conv(x, W, b)) = conv(x, W * s, (b - mean) * s + beta)`: one
//! convolution, no normalization at run time. The new weight and bias are derived weights
//! (`InputKind::Derived`), which the compiler computes from the stored ones.
//!
//! Preconditions for a fold: the convolution is not transposed, its only consumer is the
//! BatchNorm's first output (the other two are unused), and every weight involved is a stored
//! weight of the convolution weight's dtype, f32, bf16 or f16 (the fold is computed in f64 and
//! rounded to that dtype). Otherwise the pair is left alone.
//!
//! A filetest (the input graph, then the graph the pass leaves after `; expect:`):
//!
//! ```text
#![doc = include_str!("../tests/fold_batch_norm/conv_bn_folds_into_derived_weights.ir")]
//! ```

use crate::ir::ops::{BatchNormInference, Convolution};
use crate::ir::{DType, Graph, InputKind, Node, NodeId, Op, Origin, TensorType, ValueRef, WeightRecipe};
use crate::pass::{Changed, Pass, PassCx, PassError};

/// See the module docs.
pub struct FoldBatchNorm;

/// The state-dict name of a stored weight of `dtype` feeding `v`, if that is what feeds it.
fn stored(graph: &Graph, v: ValueRef, dtype: DType) -> Option<String> {
    let node = graph.node(v.node);
    match &node.op {
        Op::Input(k) if node.outputs[0].dtype == dtype => k.weight_fqn().map(str::to_string),
        _ => None,
    }
}

/// A foldable (convolution, batch norm) pair and the names of the weights involved.
struct Fold {
    conv: NodeId,
    bn: NodeId,
    recipes: (WeightRecipe, WeightRecipe),
    names: (String, String),
    types: (TensorType, TensorType),
}

fn find(graph: &Graph, bn: NodeId) -> Option<Fold> {
    let Op::BatchNormInference(BatchNormInference { eps, has_weight, has_bias }) = graph.node(bn).op else {
        return None;
    };
    let bn_in = graph.inputs(bn);
    let conv = bn_in[0].node;
    let Op::Convolution(Convolution { transposed: false, has_bias: conv_bias, .. }) = graph.node(conv).op else {
        return None;
    };
    let only_bn_reads_conv = graph.users(conv).iter().all(|&(u, _, _)| u == bn) && !graph.is_output(conv);
    let only_y_used = graph.users(bn).iter().all(|&(_, _, slot)| slot == 0)
        && graph.outputs().iter().all(|o| o.value.node != bn || o.value.slot == 0);
    if !only_bn_reads_conv || !only_y_used {
        return None;
    }
    let conv_in = graph.inputs(conv);
    let dtype = graph.value_type(conv_in[1]).dtype;
    if !WeightRecipe::handles(dtype) {
        return None;
    }
    let stored = |graph: &Graph, v: ValueRef| stored(graph, v, dtype);
    let weight = stored(graph, conv_in[1])?;
    let bias = if conv_bias { Some(stored(graph, conv_in[2])?) } else { None };
    let mut rest = bn_in[1..].iter();
    let mut next_opt = |present: bool| -> Option<Option<String>> {
        if present {
            Some(Some(stored(graph, *rest.next()?)?))
        } else {
            Some(None)
        }
    };
    let gamma = next_opt(has_weight)?;
    let beta = next_opt(has_bias)?;
    let mean = stored(graph, *rest.next()?)?;
    let var = stored(graph, *rest.next()?)?;
    let bn_name = &graph.node(bn).name;
    let w_ty = graph.node(conv_in[1].node).outputs[0].clone();
    let c_out = w_ty.dims.first()?.clone();
    Some(Fold {
        conv,
        bn,
        names: (
            format!("{weight}@folded:{bn_name}"),
            bias.as_ref()
                .map_or_else(|| format!("{weight}:bias@folded:{bn_name}"), |b| format!("{b}@folded:{bn_name}")),
        ),
        recipes: (
            WeightRecipe::BnFoldedWeight { weight: weight.clone(), gamma: gamma.clone(), var: var.clone(), eps },
            WeightRecipe::BnFoldedBias { bias, gamma, beta, mean, var, eps },
        ),
        types: (w_ty, TensorType { dtype, dims: vec![c_out] }),
    })
}

/// Folds one pair. The convolution's input is read now, not when the pair was found: an
/// earlier fold may have replaced the node that fed it (a BatchNorm right before this
/// convolution, as in MobileNet's project → expand), and its id may since have been reused.
fn apply(graph: &mut Graph, f: Fold) {
    let (conv, bn) = (graph.node(f.conv).clone(), graph.node(f.bn).clone());
    let x = graph.inputs(f.conv)[0];
    let derived = |fqn: String, recipe: WeightRecipe, ty: TensorType| {
        let mut n = Node::new(fqn.clone(), Op::Input(InputKind::Derived { fqn, recipe }), [ty]);
        n.origin = Origin { derived_from: Some(bn.name.clone()), ..Origin::default() };
        n
    };
    let w = graph.add_weight_input(derived(f.names.0, f.recipes.0, f.types.0));
    let b = graph.add_weight_input(derived(f.names.1, f.recipes.1, f.types.1));
    let Op::Convolution(Convolution { stride, padding, dilation, transposed, output_padding, groups, .. }) = conv.op
    else {
        return;
    };
    let op =
        Op::Convolution(Convolution { stride, padding, dilation, transposed, output_padding, groups, has_bias: true });
    let mut node = Node::new(format!("{}.fold_batch_norm.0", conv.name), op, [bn.outputs[0].clone()]);
    node.origin = Origin { derived_from: Some(conv.name.clone()), ..bn.origin.clone() };
    node.precision = conv.precision;
    let folded = graph.add_op(node, &[x, ValueRef { node: w, slot: 0 }, ValueRef { node: b, slot: 0 }]);
    graph.replace_uses(ValueRef { node: f.bn, slot: 0 }, ValueRef { node: folded, slot: 0 });
    graph.remove_node(f.bn);
    graph.remove_node(f.conv);
}

impl Pass for FoldBatchNorm {
    fn name(&self) -> &'static str {
        "fold_batch_norm"
    }

    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
        let order = graph.topo_order().map_err(|_| PassError::Failed { pass: self.name(), reason: "cycle".into() })?;
        let folds: Vec<Fold> = order.into_iter().filter_map(|id| find(graph, id)).collect();
        let n = folds.len();
        for f in folds {
            apply(graph, f);
        }
        cx.note(n, "batch norms folded into the preceding convolution");
        Ok(if n > 0 { Changed::Yes } else { Changed::No })
    }
}

#[cfg(test)]
mod tests {
    use super::FoldBatchNorm;
    use crate::ir::builder::Builder;
    use crate::ir::ops::{BatchNormInference, Convolution};
    use crate::ir::{DType, Node, Op, TensorType, ValueRef};
    use crate::pass::{Pass, PassCx};

    fn f32(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, dims)
    }

    fn conv(groups: i64) -> Op {
        Op::Convolution(Convolution {
            stride: vec![1, 1],
            padding: vec![0, 0],
            dilation: vec![1, 1],
            transposed: false,
            output_padding: vec![0, 0],
            groups,
            has_bias: false,
        })
    }

    /// conv (no bias) → BatchNorm, one pair, as torchvision writes it.
    fn conv_bn(b: &mut Builder, name: &str, x: ValueRef, c: i64, groups: i64) -> ValueRef {
        let w = b.param(&format!("{name}_w"), &format!("{name}.weight"), f32(&[c, c / groups, 1, 1]));
        let c_out = b.op(&format!("{name}_conv"), conv(groups), &[x, w], f32(&[1, c, 4, 4]));
        let stats: Vec<ValueRef> = ["g", "b", "m", "v"]
            .iter()
            .map(|s| b.param(&format!("{name}_{s}"), &format!("{name}.bn.{s}"), f32(&[c])))
            .collect();
        let bn = Op::BatchNormInference(BatchNormInference { eps: 1e-5, has_weight: true, has_bias: true });
        let node = Node::new(format!("{name}_bn"), bn, [f32(&[1, c, 4, 4]), f32(&[0]), f32(&[0])]);
        let id = b.graph_mut().add_op(node, &[c_out, stats[0], stats[1], stats[2], stats[3]]);
        ValueRef { node: id, slot: 0 }
    }

    /// MobileNet's project conv + BN feeding the next expand conv + BN directly, with bias-free
    /// and depthwise convolutions: both pairs fold and the second reads the first's result
    /// (it once read a derived 1-D bias that had taken the removed BatchNorm's node id).
    #[test]
    fn back_to_back_bias_free_pairs_both_fold() {
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[1, 8, 4, 4]));
        let y = conv_bn(&mut b, "a", x, 8, 1);
        let z = conv_bn(&mut b, "d", y, 8, 8);
        b.output(z);
        let mut g = b.finish();
        let mut cx = PassCx::default();
        FoldBatchNorm.run(&mut g, &mut cx).expect("runs");
        crate::verify(&g).expect("verifies");
        assert_eq!(cx.notes[0], "2 batch norms folded into the preceding convolution");
        let out = g.outputs()[0].value;
        let second = g.inputs(out.node);
        assert!(matches!(g.node(out.node).op, Op::Convolution(Convolution { groups: 8, has_bias: true, .. })));
        let first = g.node(second[0].node);
        assert!(
            matches!(first.op, Op::Convolution(Convolution { groups: 1, has_bias: true, .. })),
            "reads {}",
            first.name
        );
        assert_eq!(first.outputs[0], f32(&[1, 8, 4, 4]));
    }
}
