//! What a graph pass is: the [`Pass`] trait, the context a pass records into ([`PassCx`]), its
//! error and its report, and [`Fail`], why one node could not be handled (a refusal of the
//! program or a bug), which the emitter shares. A leaf: every pass imports it, and it imports no pass; the registry
//! and the pipeline that run the passes are in [`crate::pipeline`].
//!
//! A [`Pass`] rewrites a static (specialized) graph in place and says what it changed. Passes
//! must leave the program's results equal to PyTorch's.

use serde::Serialize;

use crate::ir::Graph;
use crate::verify::VerifyError;

/// Whether a pass changed the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Changed {
    /// The graph is as it was.
    No,
    /// Something was rewritten.
    Yes,
}

/// What a pass may read besides the graph.
#[derive(Clone, Debug, Default)]
pub struct PassCx {
    /// Notes for the report: one line per kind of rewrite, e.g. "removed 12 no-op views".
    pub notes: Vec<String>,
    /// Contractions the `pad` pass widened.
    pub padded: Vec<PaddedContraction>,
}

impl PassCx {
    /// Records `count` rewrites described by `what` (nothing when zero).
    pub fn note(&mut self, count: usize, what: &str) {
        if count > 0 {
            self.notes.push(format!("{count} {what}"));
        }
    }
}

/// A failure of a pass.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The pass left a graph the verifier rejects: a bug in the pass.
    #[error("pass `{pass}` broke the graph: {source}")]
    BrokeInvariant {
        /// The pass.
        pass: &'static str,
        /// What the verifier found.
        #[source]
        source: VerifyError,
    },
    /// The pass cannot handle this graph.
    #[error("pass `{pass}`: {reason}")]
    Failed {
        /// The pass.
        pass: &'static str,
        /// Why.
        reason: String,
    },
    /// An invariant of the pass itself broke: a bug, never a verdict on the program.
    #[error("internal error in pass `{pass}`, a bug in torchtpu-compile (please report it): {reason}")]
    Bug {
        /// The pass.
        pass: &'static str,
        /// What broke, and where.
        reason: String,
    },
}

impl PassError {
    /// The error of `pass` for a [`Fail`]: `Failed` for a refusal, `Bug` for a bug.
    pub fn of(pass: &'static str, fail: Fail) -> PassError {
        match fail {
            Fail::Refused(reason) => PassError::Failed { pass, reason },
            Fail::Bug(reason) => PassError::Bug { pass, reason },
        }
    }

    /// True for a bug of the compiler (a broken invariant), false for a refusal of the program.
    pub fn is_bug(&self) -> bool {
        matches!(self, PassError::Bug { .. } | PassError::BrokeInvariant { .. })
    }
}

/// Why one node could not be handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    /// The program asks for what this pass or lowering does not provide: a message for the user.
    Refused(String),
    /// An invariant broke (a factor we made has no size, MLIR refused what we built): a bug in
    /// torchtpu-compile, never a verdict on the user's program. Made with [`bug`].
    Bug(String),
}

impl From<String> for Fail {
    fn from(reason: String) -> Fail {
        Fail::Refused(reason)
    }
}

impl From<&str> for Fail {
    fn from(reason: &str) -> Fail {
        Fail::Refused(reason.to_string())
    }
}

impl Fail {
    /// The same kind of failure, its reason rewritten (said from further out: `node `x`: …`).
    pub fn map(self, f: impl FnOnce(String) -> String) -> Fail {
        match self {
            Fail::Refused(r) => Fail::Refused(f(r)),
            Fail::Bug(r) => Fail::Bug(f(r)),
        }
    }

    /// The reason, whichever the kind.
    pub fn reason(self) -> String {
        match self {
            Fail::Refused(r) | Fail::Bug(r) => r,
        }
    }
}

/// A broken invariant; `.map_err(bug)` for a library's own errors.
pub fn bug(reason: impl std::fmt::Display) -> Fail {
    Fail::Bug(reason.to_string())
}

/// One graph rewrite.
pub trait Pass {
    /// Stable snake_case name used by `--passes`, reports and dump file names.
    fn name(&self) -> &'static str;
    /// Rewrites `graph`; records what it did in `cx`.
    fn run(&self, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError>;

    /// True when the pass holds for any graph of values (it needs no weights, mesh or
    /// signature): the pipeline then also runs it inside every region of control flow.
    fn inside_regions(&self) -> bool {
        false
    }
}

/// Runs `pass` inside every region of `graph`'s control-flow ops, nested ones included.
pub fn run_in_regions(pass: &dyn Pass, graph: &mut Graph, cx: &mut PassCx) -> Result<Changed, PassError> {
    let mut changed = Changed::No;
    let ids: Vec<_> = graph.node_ids().collect();
    for id in ids {
        for region in graph.node_mut(id).op.regions_mut() {
            if pass.run(&mut region.0, cx)? == Changed::Yes {
                changed = Changed::Yes;
            }
            if run_in_regions(pass, &mut region.0, cx)? == Changed::Yes {
                changed = Changed::Yes;
            }
        }
    }
    Ok(changed)
}

/// What one pass did, for the manifest and `-v`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PassReport {
    /// The pass.
    pub pass: String,
    /// Nodes before and after.
    pub nodes_before: usize,
    /// Nodes after.
    pub nodes_after: usize,
    /// What changed, one line per kind of rewrite.
    pub notes: Vec<String>,
    /// Contractions the `pad` pass widened, with their padded dims and extra FLOPs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub padded: Vec<PaddedContraction>,
    /// Wall time of the pass in microseconds (not in the manifest: it varies run to run).
    #[serde(skip)]
    pub micros: u64,
}

/// One contraction whose dims the `pad` pass widened (for the manifest).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PaddedContraction {
    /// The node.
    pub node: String,
    /// Each widened dim.
    pub dims: Vec<PaddedDim>,
    /// Multiply-adds ×2 added by the padding.
    pub extra_flops: u64,
}

/// One widened dim of a contraction.
#[derive(Clone, Debug, PartialEq, Serialize)]
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
