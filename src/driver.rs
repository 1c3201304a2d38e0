//! Lowering one bucket of an imported program: specialize, then the passes ([`transform`]),
//! then emit ([`lower`]); shared by `compile`, `check` and tests.
//!
//! The words, used the same way everywhere: *translate* is ATen → IR (`import::ops`),
//! *transform* runs the graph passes, *emit* is IR → StableHLO (`emit`), and *lower* is all of
//! it for one set of sizes. `compile` then hands each lowered bucket to XLA.

use std::collections::BTreeMap;

use torchtpu_passes::bucket_masks::BucketSpec;
use torchtpu_passes::ir::{print, Graph};
use torchtpu_passes::specialize::{specialize, SpecializeError};
use torchtpu_passes::{PassError, PassOptions, PassReport, Pipeline, PASSES};

use crate::emit::{emit, EmitError, EmitOptions, Emitted};
use crate::import::Program;

/// The sizes of the example inputs used at export: where `check` and `--emit` lower a dynamic
/// program, and where a compile with one bucket at the example sizes does.
pub(crate) fn example_bindings(program: &Program) -> Result<BTreeMap<String, i64>, SpecializeError> {
    let inputs = program
        .graph
        .symbols()
        .keys()
        .filter(|s| program.bindings.contains_key(*s))
        .map(|s| {
            let v = program.bindings.get(s).and_then(|b| b.example);
            v.map(|v| (s.clone(), v)).ok_or_else(|| SpecializeError::Unbound { symbol: s.clone() })
        })
        .collect::<Result<_, _>>()?;
    with_computed_sizes(program, inputs)
}

/// `values` (a size for each dynamic dim of the inputs) with the bound there of every size the
/// data decides (`nonzero`'s count).
pub(crate) fn with_computed_sizes(
    program: &Program,
    mut values: BTreeMap<String, i64>,
) -> Result<BTreeMap<String, i64>, SpecializeError> {
    let computed = torchtpu_passes::specialize::computed_bounds(&program.graph, &values)?;
    values.extend(computed);
    Ok(values)
}

/// How to lower.
#[derive(Clone, Debug)]
pub(crate) struct LowerOptions {
    pub emit: EmitOptions,
    /// The passes to run (names from [`PASSES`]); they run in pipeline order.
    pub passes: Vec<String>,
    /// Settings of the passes.
    pub pass_options: PassOptions,
    /// Keep the printed IR after each stage (for `--dump-dir`).
    pub keep_stages: bool,
}

impl Default for LowerOptions {
    /// Every pass, default precision.
    fn default() -> LowerOptions {
        LowerOptions {
            emit: EmitOptions::default(),
            passes: PASSES.iter().map(|p| p.name.to_string()).collect(),
            pass_options: PassOptions::default(),
            keep_stages: false,
        }
    }
}

/// A program lowered to StableHLO at one set of symbol values.
pub(crate) struct Lowered {
    /// Symbol values used.
    pub bindings: BTreeMap<String, i64>,
    /// The static graph that was emitted.
    pub graph: Graph,
    /// The module.
    pub module: Emitted,
    /// What each pass did.
    pub passes: Vec<PassReport>,
    /// `(stage, printed IR)` after specialization and after each pass, when asked for.
    pub stages: Vec<(String, String)>,
    /// With `--attention blocked`, each attention that stays naive, and why.
    pub naive_attentions: Vec<String>,
}

/// Errors of lowering, before any XLA compile.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    #[error("cannot specialize the dynamic shapes: {0}")]
    Specialize(#[from] SpecializeError),
    #[error("the program at these sizes is ill-typed: {0}")]
    Specialized(torchtpu_passes::VerifyError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    Emit(#[from] EmitError),
}

/// The static graph after the passes, with what each did and the printed stages.
pub(crate) struct Transformed {
    /// The graph, ready to emit.
    pub graph: Graph,
    /// What each pass did.
    pub passes: Vec<PassReport>,
    /// `(stage, printed IR)` after specialization and after each pass, when asked for.
    pub stages: Vec<(String, String)>,
}

/// Specializes the program at `bindings` and runs the passes (no emission: what `check` needs
/// to know whether a bucketed program can be made exact).
pub(crate) fn transform(
    program: &Program,
    bindings: &BTreeMap<String, i64>,
    opts: &LowerOptions,
) -> Result<Transformed, LowerError> {
    let mut graph = specialize(&program.graph, bindings)?;
    torchtpu_passes::verify(&graph).map_err(LowerError::Specialized)?;
    let mut pass_options = opts.pass_options.clone();
    if pass_options.bucket.is_none() && torchtpu_passes::specialize::has_sizes_from_data(&program.graph) {
        // Such a program is always compiled with `bucket_masks`, which computes those sizes
        // and returns them.
        let bounds = program.graph.symbols().clone();
        pass_options.bucket = Some(BucketSpec { values: bindings.clone(), bounds });
    }
    let mut stages = Vec::new();
    if opts.keep_stages {
        stages.push(("specialize".to_string(), print(&graph)));
    }
    let pipeline = Pipeline::only(&opts.passes, &opts.pass_options)
        .map_err(|reason| PassError::Failed { pass: "pipeline", reason })?
        .for_bucket(&pass_options);
    let passes = pipeline.run(&mut graph, |pass, g| {
        if opts.keep_stages {
            stages.push((pass.to_string(), print(g)));
        }
    })?;
    Ok(Transformed { graph, passes, stages })
}

/// Specializes the program at `bindings`, runs the passes and emits its StableHLO.
pub(crate) fn lower(
    program: &Program,
    bindings: BTreeMap<String, i64>,
    opts: &LowerOptions,
) -> Result<Lowered, LowerError> {
    let Transformed { graph, passes, stages } = transform(program, &bindings, opts)?;
    let module = emit(&graph, &opts.emit)?;
    let naive_attentions = crate::emit::naive_attentions(&graph, &opts.emit);
    Ok(Lowered { bindings, graph, module, passes, stages, naive_attentions })
}
