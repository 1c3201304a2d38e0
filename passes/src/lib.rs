//! `torchtpu-passes`: the graph IR of torchtpu-compile, its verifier and (later) its passes.
//!
//! Pure Rust: no FFI and no I/O, so `cargo test -p torchtpu-passes` runs anywhere.
#![warn(missing_docs)]

pub mod ir;
pub mod specialize;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verify;

pub use verify::{verify, NodeError, VerifyError};
