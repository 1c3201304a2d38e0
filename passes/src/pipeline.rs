//! The registry of passes and the one pipeline that runs them.
//!
//! [`PASSES`] lists every pass in pipeline order, with its one-line summary and how to make it
//! from the [`PassOptions`]; the [`Pipeline`] runs them in that order ([`Pipeline::standard`]),
//! verifies the graph after each, and returns a [`PassReport`] per pass (node counts before and
//! after, what changed) for the manifest and `-v`, and the printed IR after each pass for
//! `--dump-dir`. This module imports the passes; they import only [`crate::pass`].

use std::time::Instant;

use crate::ir::{DType, Graph, Precision};
use crate::pass::{Changed, Pass, PassCx, PassError, PassReport};
use crate::precision::PrecisionPass;
use crate::verify::verify;

/// A registered pass: its name (for `--passes`, `--no-<name>`, reports and dump files), what it
/// does in one line (for `--help`), what skipping it turns off besides, and how to make it from
/// the options.
pub struct PassInfo {
    /// Stable snake_case name; the pass's own [`Pass::name`].
    pub name: &'static str,
    /// One line for `--help`.
    pub summary: &'static str,
    /// What `--no-<name>` also turns off, when something (an option the pass applies).
    pub when_skipped: Option<&'static str>,
    /// Makes the pass.
    pub make: fn(&PassOptions) -> Box<dyn Pass>,
}

/// Every pass, in pipeline order: the one list the pipeline, the command line's pass flags and
/// their help are made from.
pub const PASSES: &[PassInfo] = &[
    PassInfo {
        name: "canonicalize",
        summary: "drop no-op views, copies, identity permutes and metadata asserts",
        when_skipped: None,
        make: |_| Box::new(crate::canonicalize::Canonicalize),
    },
    PassInfo {
        name: "fold_constants",
        summary: "drop identities (x*1, x-0, and with all-true) and make constant shapes plain fulls",
        when_skipped: None,
        make: |_| Box::new(crate::fold_constants::FoldConstants),
    },
    PassInfo {
        name: "fold_batch_norm",
        summary: "fold eval-mode BatchNorm into the preceding convolution's weights",
        when_skipped: None,
        make: |_| Box::new(crate::fold_batch_norm::FoldBatchNorm),
    },
    PassInfo {
        name: "cse",
        summary: "merge nodes that compute the same value",
        when_skipped: None,
        make: |_| Box::new(crate::cse::Cse),
    },
    PassInfo {
        name: "grouped_attention",
        summary: "attention products read shared K/V heads instead of repeated ones (GQA)",
        when_skipped: None,
        make: |_| Box::new(crate::grouped_attention::GroupedAttention),
    },
    PassInfo {
        name: "safe_softmax",
        summary: "attention's softmax and its fully-masked-row guard become one safe softmax",
        when_skipped: None,
        make: |_| Box::new(crate::safe_softmax::SafeSoftmax),
    },
    PassInfo {
        name: "fuse_matmuls",
        summary: "one matmul on stacked weights for matmuls that read the same input (Q/K/V, gate/up)",
        when_skipped: None,
        make: |o| Box::new(crate::fuse_matmuls::FuseMatmuls { keep_separate: o.tensor_parallel() }),
    },
    PassInfo {
        name: "pad",
        summary: "widen matmul/convolution feature dims to multiples of --pad-multiple, zeros in the weights",
        when_skipped: Some("`--pad-multiple` is then ignored"),
        make: |o| Box::new(crate::pad::Pad { multiple: o.pad_multiple }),
    },
    PassInfo {
        name: "compute_dtype",
        summary: "bf16 operands for f32 matmuls/convolutions with --compute-dtype bf16",
        when_skipped: Some("`--compute-dtype` is then ignored"),
        make: |o| Box::new(crate::compute_dtype::ComputeDtype { dtype: o.compute_dtype }),
    },
    PassInfo {
        name: "weight_layout",
        summary: "store convolution kernels spatial dims first (HWIO), read through a transpose XLA folds",
        when_skipped: None,
        make: |_| Box::new(crate::weight_layout::WeightLayout),
    },
    PassInfo {
        name: "shard",
        summary: "split the program over the devices of --mesh: batch along dp, Megatron tensor parallelism along tp",
        when_skipped: Some("every device then runs the whole program on whole tensors"),
        make: |o| Box::new(crate::shard::Shard { mesh: o.mesh.clone(), plan: o.shard_plan.clone() }),
    },
    PassInfo {
        name: "dce",
        summary: "remove nodes and weights whose values are never used",
        when_skipped: None,
        make: |_| Box::new(crate::dce::Dce),
    },
    PassInfo {
        name: "precision",
        summary: "per-node precision of contractions from --precision-override",
        when_skipped: Some("overrides are then ignored"),
        make: |o| Box::new(PrecisionPass { overrides: o.precision_overrides.clone() }),
    },
    PassInfo {
        name: "sdpa",
        summary: "each attention (bmm, mask, softmax, bmm) emitted as one `torchtpu.sdpa` stablehlo.composite",
        when_skipped: Some("attention is emitted inline"),
        make: |_| Box::new(crate::sdpa::Sdpa),
    },
];

/// The registered pass of that name.
pub fn pass_info(name: &str) -> Option<&'static PassInfo> {
    PASSES.iter().find(|p| p.name == name)
}

/// Settings of the passes.
#[derive(Clone, Debug, Default)]
pub struct PassOptions {
    /// `(pattern, level)` for the `precision` pass, in command-line order.
    pub precision_overrides: Vec<(String, Precision)>,
    /// Operand dtype of contractions for the `compute_dtype` pass (`None`: unchanged).
    pub compute_dtype: Option<DType>,
    /// Feature dims of contractions become multiples of this for the `pad` pass (`None`: off).
    pub pad_multiple: Option<i64>,
    /// The size bucket the program is compiled for (`None`: one exact size).
    pub bucket: Option<crate::bucket_masks::BucketSpec>,
    /// The device mesh the `shard` pass splits the program over (`None`: one device).
    pub mesh: Option<crate::ir::Mesh>,
    /// What a plan file (`--shard-plan FILE`) overrides in the `shard` pass (empty: `auto`).
    pub shard_plan: crate::shard::plan::ShardPlan,
}

impl PassOptions {
    /// True when the mesh has a `tp` axis of more than one device.
    pub fn tensor_parallel(&self) -> bool {
        self.mesh.as_ref().is_some_and(|m| m.size("tp") > 1)
    }
}

/// An ordered list of passes.
pub struct Pipeline {
    passes: Vec<Box<dyn Pass>>,
}

impl Pipeline {
    /// The standard pipeline: every pass of [`PASSES`], in that order.
    pub fn standard(opts: &PassOptions) -> Pipeline {
        Pipeline { passes: PASSES.iter().map(|p| (p.make)(opts)).collect() }
    }

    /// The standard pipeline restricted to `enabled` (names as in [`PASSES`]), in pipeline
    /// order. Unknown names are an error listing the valid ones.
    pub fn only(enabled: &[String], opts: &PassOptions) -> Result<Pipeline, String> {
        if let Some(unknown) = enabled.iter().find(|name| pass_info(name).is_none()) {
            let valid: Vec<&str> = PASSES.iter().map(|p| p.name).collect();
            return Err(format!("unknown pass `{unknown}` (passes: {})", valid.join(", ")));
        }
        let passes = PASSES.iter().filter(|p| enabled.iter().any(|e| e == p.name)).map(|p| (p.make)(opts)).collect();
        Ok(Pipeline { passes })
    }

    /// For a program compiled for a size bucket: `bucket_masks` first, whatever the selection
    /// (results past the real sizes would be wrong without it).
    pub fn for_bucket(mut self, opts: &PassOptions) -> Pipeline {
        if let Some(bucket) = &opts.bucket {
            self.passes.insert(0, Box::new(crate::bucket_masks::BucketMasks { bucket: Some(bucket.clone()) }));
        }
        self
    }

    /// The names of the passes, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Runs every pass in order, verifying the graph after each that changed it (the caller
    /// verified it before the first); `after_each(pass, graph)` sees the graph after each pass
    /// (for dumps).
    pub fn run(
        &self,
        graph: &mut Graph,
        mut after_each: impl FnMut(&str, &Graph),
    ) -> Result<Vec<PassReport>, PassError> {
        let mut reports = Vec::with_capacity(self.passes.len());
        for pass in &self.passes {
            let nodes_before = graph.len();
            let mut cx = PassCx::default();
            // Test builds hold every pass to its word: "unchanged" means the same printed IR.
            #[cfg(debug_assertions)]
            let printed = crate::ir::print(graph);
            let started = Instant::now();
            let mut changed = pass.run(graph, &mut cx)?;
            if pass.inside_regions() && crate::pass::run_in_regions(pass.as_ref(), graph, &mut cx)? == Changed::Yes {
                changed = Changed::Yes;
            }
            let micros = started.elapsed().as_micros() as u64;
            // An unchanged graph was verified before this pass.
            if changed == Changed::Yes {
                verify(graph).map_err(|source| PassError::BrokeInvariant { pass: pass.name(), source })?;
            }
            #[cfg(debug_assertions)]
            if changed == Changed::No {
                assert!(
                    printed == crate::ir::print(graph),
                    "pass `{}` changed the graph but said it did not",
                    pass.name()
                );
            }
            after_each(pass.name(), graph);
            reports.push(PassReport {
                pass: pass.name().to_string(),
                nodes_before,
                nodes_after: graph.len(),
                notes: cx.notes,
                padded: cx.padded,
                micros,
            });
        }
        Ok(reports)
    }
}

#[cfg(test)]
mod tests {
    use super::{PassOptions, Pipeline};
    use crate::ir::builder::Builder;
    use crate::ir::ops::{Binary, Convolution, Identity, View};
    use crate::ir::{print, BinaryOp, Dim, Op, Operand, TensorType, UnaryOp};
    use crate::pass::{Changed, Pass, PassCx, PassError};

    fn f32(dims: &[i64]) -> TensorType {
        TensorType::new(crate::ir::DType::F32, dims)
    }

    /// Feeds the convolution its 1-D bias instead of its input, as `fold_batch_norm` once did
    /// through a reused node id.
    struct Broken;

    impl Pass for Broken {
        fn name(&self) -> &'static str {
            "broken"
        }

        fn run(&self, g: &mut crate::ir::Graph, _: &mut PassCx) -> Result<Changed, PassError> {
            let conv =
                g.topo_order().expect("acyclic").into_iter().find(|&id| g.node(id).name == "conv").expect("conv");
            let bias = g.inputs(conv)[2];
            g.set_input(conv, 0, bias);
            Ok(Changed::Yes)
        }
    }

    /// Each registered pass answers to its registry name, and names are unique.
    #[test]
    fn the_registry_names_each_pass_once() {
        let opts = PassOptions::default();
        for p in super::PASSES {
            assert_eq!((p.make)(&opts).name(), p.name);
            assert_eq!(super::PASSES.iter().filter(|q| q.name == p.name).count(), 1, "{}", p.name);
        }
        assert_eq!(Pipeline::standard(&opts).names(), super::PASSES.iter().map(|p| p.name).collect::<Vec<_>>());
    }

    /// A pass that rewrites the graph but reports `Changed::No` is caught in test builds.
    #[test]
    #[should_panic(expected = "pass `broken` changed the graph but said it did not")]
    fn a_pass_that_hides_a_change_is_caught() {
        struct Hides;
        impl Pass for Hides {
            fn name(&self) -> &'static str {
                "broken"
            }
            fn run(&self, g: &mut crate::ir::Graph, _: &mut PassCx) -> Result<Changed, PassError> {
                let id = g.node_ids().last().expect("a node");
                g.node_mut(id).name = "renamed".into();
                Ok(Changed::No)
            }
        }
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[2]));
        let y = b.op("y", Op::Unary(UnaryOp::Neg), &[x], f32(&[2]));
        b.output(y);
        let mut g = b.finish();
        let _ = Pipeline { passes: vec![Box::new(Hides)] }.run(&mut g, |_, _| {});
    }

    /// The verifier after each pass sees the ill-typed convolution and names pass and node;
    /// nothing reaches the emitter.
    #[test]
    fn a_pass_that_breaks_types_fails_the_pipeline() {
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[1, 3, 8, 8]));
        let w = b.param("w", "conv.weight", f32(&[4, 3, 3, 3]));
        let bias = b.param("bias", "conv.bias", f32(&[4]));
        let conv = Op::Convolution(Convolution {
            stride: vec![1, 1],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            transposed: false,
            output_padding: vec![0, 0],
            groups: 1,
            has_bias: true,
        });
        let y = b.op("conv", conv, &[x, w, bias], f32(&[1, 4, 8, 8]));
        b.output(y);
        let mut g = b.finish();
        crate::verify(&g).expect("well typed before");
        let err = Pipeline { passes: vec![Box::new(Broken)] }.run(&mut g, |_, _| {}).expect_err("caught");
        assert_eq!(
            err.to_string(),
            "pass `broken` broke the graph: node `conv` (convolution): a 2-d convolution takes an input and a \
             weight of rank 4, found [4] and [4,3,3,3]"
        );
    }

    /// `exp(clone(x)) + exp(view(x))`, plus an unused `neg(x)`: canonicalize drops the clone
    /// and the no-op view, cse merges the two `exp`, dce drops `neg`.
    #[test]
    fn standard_pipeline_cleans_up() {
        let mut b = Builder::new("t");
        let x = b.input("x", f32(&[4]));
        let c = b.op("c", Op::Identity(Identity), &[x], f32(&[4]));
        let v = b.op("v", Op::View(View { size: vec![Dim::Static(4)] }), &[x], f32(&[4]));
        let e1 = b.op("e1", Op::Unary(UnaryOp::Exp), &[c], f32(&[4]));
        let e2 = b.op("e2", Op::Unary(UnaryOp::Exp), &[v], f32(&[4]));
        let add = Op::Binary(Binary { op: BinaryOp::Add, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let s = b.op("s", add, &[e1, e2], f32(&[4]));
        b.op("unused", Op::Unary(UnaryOp::Neg), &[x], f32(&[4]));
        b.output(s);
        let mut g = b.finish();
        let mut seen = Vec::new();
        let reports =
            Pipeline::standard(&PassOptions::default()).run(&mut g, |p, _| seen.push(p.to_string())).expect("runs");
        // Every registered pass, in the registry's order (the command-line test in
        // src/tests/passes.rs writes the order out, so that a reordering shows up there).
        assert_eq!(seen, super::PASSES.iter().map(|p| p.name).collect::<Vec<_>>());
        let counts: Vec<(usize, usize)> = reports.iter().map(|r| (r.nodes_before, r.nodes_after)).collect();
        assert_eq!(
            counts,
            [
                (7, 5),
                (5, 5),
                (5, 5),
                (5, 4),
                (4, 4),
                (4, 4),
                (4, 4),
                (4, 4),
                (4, 4),
                (4, 4),
                (4, 4),
                (4, 3),
                (3, 3),
                (3, 3)
            ]
        );
        assert_eq!(reports[0].notes, ["1 removed copies", "1 removed no-op views"]);
        insta::assert_snapshot!(print(&g), @r"
        graph t {
          %0 = input.user #0 : f32[4]  # x
          %1 = exp(%0) : f32[4]  # e1
          %2 = add(%1, %1) : f32[4]  # s
          return user[0] = %2
        }
        ");
    }

    #[test]
    fn only_checks_names_and_keeps_pipeline_order() {
        let opts = PassOptions::default();
        let p = Pipeline::only(&["dce".into(), "canonicalize".into()], &opts).expect("valid");
        assert_eq!(p.names(), ["canonicalize", "dce"]);
        let e = Pipeline::only(&["fusion".into()], &opts).err().expect("unknown");
        assert!(
            e.contains("unknown pass `fusion`")
                && e.contains(
                    "canonicalize, fold_constants, fold_batch_norm, cse, grouped_attention, safe_softmax, fuse_matmuls"
                ),
            "{e}"
        );
    }
}
