//! Committed prost output for the protobuf messages this crate sends to XLA.
//!
//! `xla.rs` is generated from `schemas/xla_compile_options.proto` by `cargo xtask codegen`
//! (protox + prost-build, no `protoc`); never edit it by hand.

// Generated code: lints are for hand-written code, and a newer clippy must not break the build.
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub(crate) mod xla;
