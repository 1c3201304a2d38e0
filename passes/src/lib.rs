//! `torchtpu-passes`: the graph IR of torchtpu-compile, its verifier and its passes.
//!
//! Pure Rust: no FFI and no I/O, so `cargo test -p torchtpu-passes` runs anywhere.
#![warn(missing_docs)]

pub mod bucket_masks;
pub mod canonicalize;
pub mod compute_dtype;
pub mod const_eval;
pub mod cse;
pub mod dce;
pub mod fold_batch_norm;
pub mod fold_constants;
pub mod fuse_matmuls;
pub mod grouped_attention;
pub mod ir;
pub mod pad;
pub mod pass;
pub mod pipeline;
pub mod precision;
pub mod safe_softmax;
pub mod sdpa;
pub mod shard;
pub mod specialize;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verify;
pub mod weight_layout;

pub use pass::{bug, Fail, Pass, PassError, PassReport};
pub use pipeline::{pass_info, PassInfo, PassOptions, Pipeline, PASSES};
pub use verify::{verify, NodeError, VerifyError};
