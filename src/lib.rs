//! torchtpu-compile: an ahead-of-time compiler from `torch.export` archives to TPU executables.
//!
//! The library is the whole compiler; `main.rs` only parses the command line. Today it reads
//! `.pt2` archives into the verified IR ([`import`]) and describes them ([`inspect`]).

pub mod cli;
pub mod error;
pub mod import;
pub mod inspect;

#[cfg(test)]
mod tests;

pub use error::Error;
pub use import::{import, Program};
