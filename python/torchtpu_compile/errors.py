"""The exceptions of torchtpu_compile: one class per kind of failure, each carrying the tool's
own message (which names the file, node, op or input concerned)."""


class TorchTpuError(Exception):
    """Any failure of the compiler or the runtime."""


class UsageError(TorchTpuError, ValueError):
    """An option or argument the command line refuses."""


class ArchiveError(TorchTpuError):
    """The .pt2 archive cannot be read or is not a valid exported program."""


class LoweringError(TorchTpuError):
    """The program cannot be lowered to StableHLO (an op or a form not supported)."""


class CompileError(TorchTpuError):
    """XLA rejected the program or failed to compile it."""


class PluginError(TorchTpuError):
    """The machine: a missing or mismatched PJRT plugin, no such device, no executable for it."""


class ArtifactError(TorchTpuError):
    """A .tpuexe artifact cannot be read or written."""


class InputError(TorchTpuError, ValueError):
    """A call's inputs or state: wrong count, dtype or shape, a size outside every bucket."""


class ExecutionError(TorchTpuError):
    """Running the executable failed."""


class UnsupportedError(TorchTpuError):
    """A feature this version does not provide."""


class InternalError(TorchTpuError):
    """A bug in torchtpu-compile (an invariant of the compiler broke): please report it."""


class FileAccessError(TorchTpuError, OSError):
    """A file could not be read or written."""


class SessionClosedError(TorchTpuError):
    """A session used after close()."""


# The one table from the tool's error kinds (`Error::kind` in Rust, plus the binding's own
# `usage` and `session_closed`) to the classes above.
_BY_KIND = {
    "usage": UsageError,
    "archive": ArchiveError,
    "lowering": LoweringError,
    "compile": CompileError,
    "plugin": PluginError,
    "artifact": ArtifactError,
    "input": InputError,
    "run": ExecutionError,
    "unsupported": UnsupportedError,
    "internal": InternalError,
    "io": FileAccessError,
    "session_closed": SessionClosedError,
}


def of_kind(kind: str, message: str) -> TorchTpuError:
    """The exception for a failure of ``kind`` (any other kind: ``TorchTpuError``)."""
    return _BY_KIND.get(kind, TorchTpuError)(message)
