//! The library's top-level error: one variant per stage, each with its own typed cause.

use thiserror::Error;

use crate::import::ImportError;

/// Any failure of the compiler library.
#[derive(Debug, Error)]
pub enum Error {
    /// The input archive could not be read or is not a valid exported program.
    #[error(transparent)]
    Import(#[from] ImportError),
}

impl Error {
    /// The process exit code this failure maps to (DESIGN.md §3): 1 for a model that cannot
    /// be compiled or checked, 3 for an environment problem.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Import(_) => 1,
        }
    }
}
