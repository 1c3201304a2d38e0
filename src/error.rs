//! The library's top-level error: one variant per stage, each with its own typed cause, and the
//! exit code each maps to (`--help` lists them: 1 model or input, 2 usage, 3 environment).

use thiserror::Error;

use crate::import::ImportError;

/// Any failure of the compiler library.
#[derive(Debug, Error)]
pub enum Error {
    /// The input archive could not be read or is not a valid exported program.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The program could not be lowered to StableHLO.
    #[cfg(feature = "mlir")]
    #[error(transparent)]
    Lower(#[from] crate::driver::LowerError),
    /// The PJRT plugin is missing or cannot be loaded.
    #[error("{source} (plugin chosen by {chosen_by})\n  hint: {}", crate::setup::PLUGIN_HINT)]
    Plugin {
        /// What the PJRT layer reported.
        source: crate::pjrt::PjrtError,
        /// How the plugin was chosen (`--plugin`, an environment variable, the set-up folder).
        chosen_by: &'static str,
    },
    /// XLA rejected the program or failed to compile it.
    #[error("XLA compilation for `{target}` failed: {source}")]
    Compile {
        /// The target, as written on the command line.
        target: String,
        /// What XLA reported.
        source: crate::pjrt::PjrtError,
    },
    /// An artifact could not be read or written.
    #[error(transparent)]
    Artifact(#[from] crate::artifact::ArtifactError),
    /// Running an artifact failed.
    #[error(transparent)]
    Run(#[from] crate::run::RunError),
    /// A feature this version does not provide.
    #[error("{0}")]
    Unsupported(String),
    /// An invariant of the compiler itself broke: a bug in torchtpu-compile, never a verdict
    /// on the user's program.
    #[error("internal error, a bug in torchtpu-compile (please report it with the command and the archive): {0}")]
    Internal(String),
    /// A file could not be written or read.
    #[error("cannot access `{path}`: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
}

impl Error {
    /// Inputs that cannot be read as the program's arrays (kind `input`), for callers that
    /// build arrays themselves (the Python extension).
    pub fn bad_input(reason: String) -> Error {
        Error::Run(crate::run::RunError::Decode(reason))
    }

    /// A plugin error: an environment problem when loading failed, a program problem otherwise.
    pub fn plugin(source: crate::pjrt::PjrtError, chosen_by: &'static str) -> Error {
        if source.is_plugin_setup() {
            Error::Plugin { source, chosen_by }
        } else {
            Error::Compile { target: "cpu".into(), source }
        }
    }

    /// What went wrong, in one word (the Python package's exception classes): `archive`,
    /// `lowering`, `plugin` (the machine: plugin, device), `compile`, `artifact`, `input` (a
    /// call's inputs or state), `run`, `unsupported`, `internal` (a bug) or `io`.
    pub fn kind(&self) -> &'static str {
        use crate::run::RunError as R;
        match self {
            Error::Import(ImportError::Bug { .. }) => "internal",
            Error::Import(_) => "archive",
            #[cfg(feature = "mlir")]
            Error::Lower(crate::driver::LowerError::Emit(crate::emit::EmitError::Internal(_))) => "internal",
            #[cfg(feature = "mlir")]
            Error::Lower(crate::driver::LowerError::Pass(e)) if e.is_bug() => "internal",
            #[cfg(feature = "mlir")]
            Error::Lower(_) => "lowering",
            Error::Plugin { .. } => "plugin",
            Error::Run(e) if e.is_environment() => "plugin",
            Error::Compile { .. } => "compile",
            Error::Artifact(_) => "artifact",
            Error::Run(
                R::OutOfRange { .. }
                | R::Guard { .. }
                | R::NotDerived { .. }
                | R::InputCount { .. }
                | R::InputMismatch { .. }
                | R::Npy(_)
                | R::State { .. }
                | R::Checkpoint { .. }
                | R::Decode(_),
            ) => "input",
            Error::Run(_) => "run",
            Error::Unsupported(_) => "unsupported",
            Error::Internal(_) => "internal",
            Error::Io { .. } => "io",
        }
    }

    /// The process exit code: 1 for a model or artifact that cannot be compiled, checked or run,
    /// 3 for an environment problem (missing or mismatched plugin, no executable for this machine).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Plugin { .. } => 3,
            Error::Run(e) if e.is_environment() => 3,
            _ => 1,
        }
    }
}

impl From<crate::npy::NpyError> for Error {
    fn from(e: crate::npy::NpyError) -> Error {
        Error::Run(crate::run::RunError::Npy(e))
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use crate::import::ImportError;

    /// A broken invariant is a kind of its own that says it is a bug, never a refusal of the
    /// user's program.
    #[test]
    fn an_internal_error_says_it_is_a_bug() {
        let e = Error::Internal("no bucket to compile".into());
        assert_eq!(e.kind(), "internal");
        assert_eq!(
            e.to_string(),
            "internal error, a bug in torchtpu-compile (please report it with the command and the archive): \
             no bucket to compile"
        );
        assert_ne!(Error::Unsupported("x".into()).kind(), e.kind());
        let import = Error::Import(ImportError::Bug { node: "n".into(), target: "t".into(), reason: "r".into() });
        assert_eq!(import.kind(), "internal");
        assert!(import.to_string().contains("a bug in torchtpu-compile"), "{import}");
    }

    /// The emitter's and the passes' broken invariants are of the same kind, not `lowering`.
    #[cfg(feature = "mlir")]
    #[test]
    fn a_bug_of_the_emitter_or_a_pass_is_internal() {
        use crate::driver::LowerError;
        use crate::emit::EmitError;
        let e = Error::Lower(LowerError::Emit(EmitError::Internal("node `x` (): a missing operand".into())));
        assert_eq!(e.kind(), "internal");
        assert!(e.to_string().contains("a bug in torchtpu-compile"), "{e}");
        assert_eq!(Error::Lower(LowerError::Emit(EmitError::Lowering(vec![]))).kind(), "lowering");
        let pass = |fail| Error::Lower(LowerError::Pass(torchtpu_passes::PassError::of("bucket_masks", fail)));
        assert_eq!(pass(torchtpu_passes::bug("a dim of no pieces")).kind(), "internal");
        assert_eq!(pass("regroups dynamic dims".into()).kind(), "lowering");
    }
}
