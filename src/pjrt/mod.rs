//! Compiling and running StableHLO through a PJRT plugin (XLA's PJRT C API).
//!
//! A PJRT plugin is a shared object exporting `GetPjrtApi`, which returns a table of C functions
//! (`pjrt_c_api.h` in openxla/xla). This module is a small safe layer over the part of that table
//! the compiler needs:
//!
//! - [`Plugin::load`] opens the `.so` once per process and never unloads it, checks the API
//!   version and initializes the plugin; the plugin's path, file sha256 and API version key the
//!   executable cache, because an executable only loads into the plugin build that produced it.
//! - [`Client`] compiles MLIR (StableHLO text or bytecode) with [`CompileOptions`], reloads
//!   serialized executables and copies host data into device [`Buffer`]s.
//! - [`LoadedExecutable`] runs on one device and serializes itself.
//! - [`Plugin::topology`] describes a TPU slice by name (libtpu, no TPU needed) and
//!   [`Topology::compile`] compiles for it without a client, giving an unloaded [`Executable`]
//!   that serializes itself and reports its code size and [`MemoryStats`]. libtpu needs
//!   [`prepare_libtpu_environment`] before it is initialized.
//!
//! Every `PJRT_Error*` the plugin returns becomes a [`PjrtError::Call`] carrying the plugin's
//! message and code, and is destroyed. All FFI lives in `ffi.rs` (layouts) and the `unsafe`
//! blocks of `api.rs` (the function table and what reading its results needs), `plugin.rs`,
//! `client.rs`, `executable.rs` and `topology.rs`. The files form layers, bottom up: `ffi`,
//! `api`, `env` (what the plugins read from the environment), `quiet`, `types`, `plugin`,
//! `handle` (the owned client and its devices), `executable`, `client`, `topology`.

mod api;
mod client;
mod env;
mod executable;
mod ffi;
mod handle;
mod plugin;
mod quiet;
mod topology;
mod types;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tpu_tests;

use std::fmt;
use std::path::PathBuf;

pub use client::Client;
pub use env::{prepare_libtpu_environment, prepare_xla_environment};
pub use executable::{Buffer, LoadedExecutable};
pub(crate) use executable::{Donation, Executable, MemoryStats};
pub use plugin::{Created, Plugin};
pub(crate) use quiet::set_shown as show_plugin_output;
pub(crate) use topology::Topology;
pub use types::{CompileOptions, ElementType};

/// Errors of the PJRT layer.
#[derive(Debug, thiserror::Error)]
pub enum PjrtError {
    /// The plugin file does not exist.
    #[error("no PJRT plugin at `{}`", path.display())]
    PluginNotFound { path: PathBuf },

    /// The plugin exists but could not be read or opened (`dlopen` failed).
    #[error("cannot load PJRT plugin `{}`: {reason}", path.display())]
    PluginLoad { path: PathBuf, reason: String },

    /// The shared object does not export a symbol PJRT requires.
    #[error("`{}` is not a PJRT plugin: symbol `{symbol}` not found", path.display())]
    MissingSymbol { path: PathBuf, symbol: &'static str },

    /// The plugin implements an API version or table this build cannot use.
    #[error("plugin `{}` implements PJRT C API {found}, this build needs {needed}", path.display())]
    ApiVersion { path: PathBuf, found: String, needed: String },

    /// A PJRT call returned an error (or the plugin lacks the function).
    #[error("`{call}` failed{}: {message}", code.map(|c| format!(" ({c})")).unwrap_or_default())]
    Call { call: &'static str, code: Option<ErrorCode>, message: String },

    /// An argument failed this crate's own checks before reaching the plugin.
    #[error("{0}")]
    InvalidArgument(String),
}

impl PjrtError {
    /// Whether the error is about finding or opening the plugin rather than about a program
    /// (the CLI reports these with a hint to run `cargo xtask setup`).
    pub fn is_plugin_setup(&self) -> bool {
        matches!(
            self,
            Self::PluginNotFound { .. }
                | Self::PluginLoad { .. }
                | Self::MissingSymbol { .. }
                | Self::ApiVersion { .. }
        )
    }

    /// The plugin's error code, for [`PjrtError::Call`].
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Call { code, .. } => *code,
            _ => None,
        }
    }
}

/// `PJRT_Error_Code`: the abseil status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl ErrorCode {
    /// Maps the C value; `None` for 0 (OK) and values this build does not know.
    pub fn from_raw(code: i32) -> Option<Self> {
        Some(match code {
            1 => Self::Cancelled,
            2 => Self::Unknown,
            3 => Self::InvalidArgument,
            4 => Self::DeadlineExceeded,
            5 => Self::NotFound,
            6 => Self::AlreadyExists,
            7 => Self::PermissionDenied,
            8 => Self::ResourceExhausted,
            9 => Self::FailedPrecondition,
            10 => Self::Aborted,
            11 => Self::OutOfRange,
            12 => Self::Unimplemented,
            13 => Self::Internal,
            14 => Self::Unavailable,
            15 => Self::DataLoss,
            16 => Self::Unauthenticated,
            _ => return None,
        })
    }

    /// The lowercase abseil name, e.g. `invalid argument`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cancelled => "cancelled",
            Self::Unknown => "unknown",
            Self::InvalidArgument => "invalid argument",
            Self::DeadlineExceeded => "deadline exceeded",
            Self::NotFound => "not found",
            Self::AlreadyExists => "already exists",
            Self::PermissionDenied => "permission denied",
            Self::ResourceExhausted => "resource exhausted",
            Self::FailedPrecondition => "failed precondition",
            Self::Aborted => "aborted",
            Self::OutOfRange => "out of range",
            Self::Unimplemented => "unimplemented",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
            Self::DataLoss => "data loss",
            Self::Unauthenticated => "unauthenticated",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
