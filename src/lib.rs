//! torchtpu-compile: an ahead-of-time compiler from `torch.export` archives to TPU executables.
//!
//! The pipeline, and the API this crate offers for each step:
//!
//! - [`import`] reads a `.pt2` archive into a verified [`Program`]; [`check`] lists every op of
//!   it that does not lower, and [`inspect_report`] describes it.
//! - [`compile`] lowers it (one program per size bucket), compiles each program with XLA through
//!   a PJRT plugin for every target of a [`CompileRequest`], and writes an [`Artifact`]
//!   (`.tpuexe`, described by its [`Manifest`]); [`recompile`] compiles an artifact's stored
//!   programs again for other targets or plugins ([`RecompileRequest`]).
//! - [`Session`] opens an artifact, puts its weights on the devices once and runs it many times;
//!   [`run`] is one call of a session on `.npy` files ([`RunRequest`]), and [`generate`] the
//!   decode loop of a decode-step export ([`GenerateRequest`]); a [`Batcher`] serves many
//!   requests through the rows of one session's decode step (continuous batching), and
//!   [`Session::swap_weights`] takes another checkpoint's weights without recompiling;
//!   [`serve`] puts a session behind an OpenAI-compatible HTTP server.
//! - Every failure is an [`Error`], whose [`Error::kind`] and [`Error::exit_code`] classify it.
//!
//! The command line is [`cli`]. What is public beyond this is for the project's own tools
//! (xtask, the Python extension, examples and tests) and has no stability: `internal`.
#![warn(missing_docs, unreachable_pub)]
// Without the emitter, what only compiling uses (writing artifacts, the cache's writers, …) is
// left unused: that build is for importing, inspecting and running.
#![cfg_attr(not(feature = "mlir"), allow(dead_code, unused_imports, unreachable_pub))]

mod artifact;
mod buckets;
mod cache;
#[cfg(feature = "mlir")]
mod check;
#[cfg(feature = "mlir")]
pub mod cli;
#[cfg(feature = "mlir")]
mod compile;
mod container;
mod coverage;
mod crash;
#[cfg(feature = "mlir")]
mod derive;
mod digest;
mod display;
#[cfg(feature = "mlir")]
mod driver;
#[cfg(feature = "mlir")]
mod emit;
mod error;
mod guards;
mod import;
mod inspect;
mod npy;
mod pjrt;
/// `plan`: candidate slices and meshes compiled deviceless, with estimates of time and price.
#[cfg(feature = "mlir")]
mod plan;
mod proto;
mod run;
mod serve;
mod setup;
mod target;

#[cfg(test)]
mod tests;

pub use artifact::{Artifact, Manifest};
#[cfg(feature = "mlir")]
pub use check::{check, CheckReport};
#[cfg(feature = "mlir")]
pub use compile::{compile, compile_to_cache, recompile, CompileRequest, CompileSummary, RecompileRequest};
#[cfg(feature = "mlir")]
pub use emit::Precision;
pub use error::Error;
pub use guards::Guard;
pub use import::{import, Program};
pub use inspect::{report as inspect_report, Report as InspectReport};
pub use npy::Array;
pub use run::{
    batch_of, generate, generate_requests, generate_seq2seq, run, serve_all, Batcher, Figures, Finished,
    GenerateRequest, Generated, Logprobs, NewToken, Request, RunReport, RunRequest, Sampling, Seq2Seq, Served, Session,
    Stepped, Verification,
};
pub use serve::{serve, serve_with, ServeOptions, ServeSummary};
pub use target::Target;

/// For the project's own tools (xtask, the Python extension, examples and tests): no stability.
#[doc(hidden)]
pub mod internal {
    pub use crate::artifact::{dtype_of_safetensors, output_files};
    pub use crate::cache::{default_dir as default_cache_dir, Cache, CacheConfig};
    pub use crate::container::MappedZip;
    pub use crate::crash::install_handler as install_crash_handler;
    pub use crate::pjrt::{
        prepare_libtpu_environment, prepare_xla_environment, Buffer, Client, CompileOptions, Created, ElementType,
        LoadedExecutable, Plugin,
    };
    pub use crate::run::{
        compare, conform_inputs, decode, generate_seq2seq, parse_dtype, Decoding, DeviceKind, Seq2Seq,
    };
    pub use crate::setup::{cpu_plugin, tpu_plugin};
}
