//! torchtpu-compile: an ahead-of-time compiler from `torch.export` archives to TPU executables.
//!
//! The library is the whole compiler; `main.rs` only forwards the command line to [`cli`].
//! Pipeline: [`import`] (`.pt2` → verified IR) → [`driver`] (specialize, [`emit`] StableHLO)
//! → [`compile`] (XLA through [`pjrt`]) → [`artifact`] (`.tpuexe`) → [`run`].

pub mod artifact;
pub mod buckets;
pub mod cache;
#[cfg(feature = "mlir")]
pub mod check;
#[cfg(feature = "mlir")]
pub mod cli;
#[cfg(feature = "mlir")]
pub mod compile;
pub mod container;
pub mod coverage;
#[cfg(feature = "mlir")]
pub mod derive;
pub mod digest;
pub mod display;
#[cfg(feature = "mlir")]
pub mod driver;
#[cfg(feature = "mlir")]
pub mod emit;
pub mod error;
pub mod import;
pub mod inspect;
pub mod npy;
pub mod pjrt;
pub mod proto;
pub mod run;
pub mod setup;
pub mod target;

#[cfg(test)]
mod tests;

pub use error::Error;
pub use import::{import, Program};
