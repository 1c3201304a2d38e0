//! The compile pipeline: import → specialize → emit, shared by `compile`, `check` and tests.

use std::collections::BTreeMap;

use torchtpu_passes::ir::Graph;
use torchtpu_passes::specialize::{specialize, SpecializeError};

use crate::emit::{emit, EmitError, EmitOptions, Emitted};
use crate::import::Program;

/// Symbol values at which a dynamic program is compiled today: the sizes of the example
/// inputs used at export (bucketing will compile one program per size bucket).
pub fn example_bindings(program: &Program) -> Result<BTreeMap<String, i64>, SpecializeError> {
    program
        .graph
        .symbols()
        .keys()
        .map(|s| {
            let v = program.bindings.get(s).and_then(|b| b.example);
            v.map(|v| (s.clone(), v)).ok_or_else(|| SpecializeError::Unbound { symbol: s.clone() })
        })
        .collect()
}

/// A program lowered to StableHLO at one set of symbol values.
pub struct Lowered {
    /// Symbol values used.
    pub bindings: BTreeMap<String, i64>,
    /// The static graph that was emitted.
    pub graph: Graph,
    /// The module.
    pub module: Emitted,
}

/// Errors of lowering, before any XLA compile.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    #[error("cannot specialize the dynamic shapes: {0}")]
    Specialize(#[from] SpecializeError),
    #[error(transparent)]
    Emit(#[from] EmitError),
}

/// Specializes the program at `bindings` and emits its StableHLO.
pub fn lower(program: &Program, bindings: BTreeMap<String, i64>, opts: &EmitOptions) -> Result<Lowered, LowerError> {
    let graph = specialize(&program.graph, &bindings)?;
    let module = emit(&graph, opts)?;
    Ok(Lowered { bindings, graph, module })
}
