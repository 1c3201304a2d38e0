"""torchtpu_compile: compile PyTorch programs exported with ``torch.export`` ahead of time for
TPUs (and the CPU, to check the numbers), and run what was compiled.

    import numpy as np
    import torchtpu_compile as ttc

    ttc.compile("model.pt2", "model.tpuexe", targets=["tpu:v6e:1x1", "cpu"])
    with ttc.load("model.tpuexe") as model:      # the CPU executable, weights loaded once
        y = model(np.ones((1, 16), np.float32))

    with ttc.load("decoder.tpuexe") as decoder:  # a decode-step export with KV caches
        out = decoder.generate(np.array([1, 2, 3]), max_new_tokens=24)
        print(out.tokens, out.tokens_per_second)

Arrays go in and come out as numpy arrays; torch tensors are taken too (when torch is
imported), and then the outputs are torch tensors. Every failure raises a subclass of
``TorchTpuError`` (see ``torchtpu_compile.errors``) with the tool's own message. The same
wheel installs the ``torchtpu-compile`` command.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any, Dict, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _native
from .errors import (
    ArchiveError,
    ArtifactError,
    CompileError,
    ExecutionError,
    FileAccessError,
    InputError,
    InternalError,
    LoweringError,
    PluginError,
    SessionClosedError,
    TorchTpuError,
    UnsupportedError,
    UsageError,
)

__all__ = [
    "compile",
    "load",
    "generate",
    "serve",
    "inspect",
    "check",
    "Session",
    "Generation",
    "main",
    "TorchTpuError",
    "UsageError",
    "ArchiveError",
    "LoweringError",
    "CompileError",
    "PluginError",
    "ArtifactError",
    "InputError",
    "ExecutionError",
    "UnsupportedError",
    "InternalError",
    "FileAccessError",
    "SessionClosedError",
]

# numpy dtypes by the tool's names (bf16 travels as its 16 bits).
_NUMPY = {
    "bool": np.bool_,
    "u8": np.uint8,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "c64": np.complex64,
    "c128": np.complex128,
}
_NAMES = {np.dtype(t): name for name, t in _NUMPY.items()}

PathLike = Union[str, "os.PathLike[str]"]


def _torch():
    """torch, when the program has imported it (this package never imports it itself)."""
    return sys.modules.get("torch")


def _is_tensor(value) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def _to_native(value, what: str):
    """(dtype name, shape, bytes) of a numpy array, a torch tensor or anything numpy takes."""
    if _is_tensor(value):
        torch = _torch()
        t = value.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            arr, name = t.view(torch.int16).numpy(), "bf16"
        else:
            arr = t.numpy()
            name = _NAMES.get(arr.dtype)
    else:
        arr = np.asarray(value)
        name = _NAMES.get(arr.dtype)
    if name is None:
        raise InputError(f"{what}: dtype {arr.dtype} is not one torchtpu-compile takes")
    # (np.ascontiguousarray would make a 0-d array 1-d.)
    arr = np.asarray(arr, order="C")
    return name, list(arr.shape), memoryview(arr.reshape(-1).view(np.uint8))


def _from_native(out, as_torch: bool):
    """A numpy array (or torch tensor) viewing the bytes the native side returned."""
    name, shape, data = out
    torch = _torch() if as_torch else None
    if name == "bf16":
        bits = np.frombuffer(data, np.uint16).reshape(shape)
        if torch is not None:
            return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if name not in _NUMPY:
        raise UnsupportedError(f"an output of dtype {name}, which numpy cannot hold")
    arr = np.frombuffer(data, _NUMPY[name]).reshape(shape)
    return torch.from_numpy(arr) if torch is not None else arr


def _option_args(flag: str, value) -> list:
    """The command-line words of one option."""
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in (flag, f"{k}={_joined(v)}")]
    if isinstance(value, (list, tuple)):
        return [w for v in value for w in (flag, _joined(v))]
    return [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]


def _joined(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


# Each keyword of `compile` and the command line's flag it becomes; a test keeps this table in
# step with `torchtpu-compile compile --help` (`--output` is `out`, `--no-<pass>` is `skip`,
# `--format` is the binding's own business).
_COMPILE_FLAGS = {
    "targets": "--target",
    "buckets": "--buckets",
    "max": "--max",
    "emit": "--emit",
    "mesh": "--mesh",
    "shard_plan": "--shard-plan",
    "precision": "--precision",
    "precision_override": "--precision-override",
    "compute_dtype": "--compute-dtype",
    "pad_multiple": "--pad-multiple",
    "grouped_mm": "--grouped-mm",
    "attention": "--attention",
    "attention_block": "--attention-block",
    "jobs": "--jobs",
    "weights": "--weights",
    "plugin": "--plugin",
    "tokenizer": "--tokenizer",
    "cache_dir": "--cache-dir",
    "no_cache": "--no-cache",
    "cache_max_size": "--cache-max-size",
    "remote_cache": "--remote-cache",
    "passes": "--passes",
    "dump_dir": "--dump-dir",
    "quiet": "--quiet",
    "verbose": "--verbose",
}


def compile(
    src,
    out: PathLike,
    targets: Union[str, Sequence[str], None] = None,
    buckets: Union[str, Sequence[str], Dict[str, Any], None] = None,
    *,
    max: Optional[Dict[str, int]] = None,  # noqa: A002 - the command line's `--max`
    emit: Optional[str] = None,
    mesh: Optional[str] = None,
    shard_plan: Optional[PathLike] = None,
    precision: Optional[str] = None,
    precision_override: Optional[Dict[str, str]] = None,
    compute_dtype: Optional[str] = None,
    pad_multiple: Optional[int] = None,
    grouped_mm: Optional[str] = None,
    attention: Optional[str] = None,
    attention_block: Optional[int] = None,
    jobs: Optional[int] = None,
    weights: Optional[str] = None,
    plugin: Optional[PathLike] = None,
    tokenizer: Optional[PathLike] = None,
    cache_dir: Optional[PathLike] = None,
    no_cache: bool = False,
    cache_max_size: Optional[str] = None,
    remote_cache: Optional[str] = None,
    passes: Union[str, Sequence[str], None] = None,
    skip: Sequence[str] = (),
    dump_dir: Optional[PathLike] = None,
    quiet: bool = False,
    verbose: bool = False,
    isolate: bool = True,
) -> Optional[Dict[str, Any]]:
    """Compiles ``src`` (a ``.pt2`` path, or an ``ExportedProgram`` when torch is imported,
    decomposed to Core ATen and saved to a temporary archive) to the artifact ``out``; returns
    its manifest (``inspect``), or None when ``emit`` is not ``"exe"``.

    ``targets``: ``"tpu:v6e:1x1"``, ``"cpu"``, … (default: the command line's, TPU v6e and CPU).
    ``buckets``: ``"auto:4"``, ``"pow2"``, ``["1,8,64"]`` or ``{"s0": [1, 8, 64]}``. ``max``: the
    largest size of a dim the export left unbounded (``Dim.AUTO``), ``{"s0": 64}`` or
    ``{"x:0": 64}``.
    ``tokenizer``: the model's Hugging Face folder, whose tokenizer, chat template and generation
    config the artifact stores for ``serve``.
    ``precision_override``: ``{"attn.*": "highest"}``. ``passes``: the passes to run (a list, or
    ``"none"``); ``skip``: passes to leave out (``["pad", "cse"]``, the ``--no-<pass>`` flags).
    Every keyword is the option of ``torchtpu-compile compile --help`` of the same name (``_``
    for ``-``), documented there. ``isolate`` (the default) runs the compile in a child process,
    so that a plugin crashing inside XLA raises ``CompileError`` naming the target and bucket
    instead of ending the caller's process. Raises a ``TorchTpuError`` subclass.
    """
    given = dict(locals())
    with tempfile.TemporaryDirectory(prefix="torchtpu-compile-") as tmp:
        path = _archive_of(src, tmp)
        argv = ["torchtpu-compile", "compile", path, "-o", os.fspath(out), *_compile_options(given)]
        if isolate:
            _execute_in_child(argv, tmp)
        else:
            _native.execute(argv)
    if (emit or "exe") != "exe":
        return None
    return inspect(out)


def _compile_options(given: Dict[str, Any]) -> list:
    """The command line's words for the keywords of `compile` in ``given`` (absent ones are
    left out)."""
    argv = []
    for name, flag in _COMPILE_FLAGS.items():
        value = given.get(name)
        if name in ("targets", "buckets") and isinstance(value, str):
            value = [value]
        if name == "passes" and isinstance(value, (list, tuple)):
            value = ",".join(value)
        argv += _option_args(flag, value)
    for name in given.get("skip", ()):
        argv.append(f"--no-{name.replace('_', '-')}")
    return argv


# What the child of an isolated compile runs: the command line; what it printed, or its failure
# as the exception's class name and message, sent back as the last line of stdout.
_CHILD = """
import json, sys
from torchtpu_compile import _native
try:
    code, text = _native.execute_status(json.loads(sys.argv[1]))
    print(json.dumps({"ok": True, "code": code, "stdout": text}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""


def _execute_in_child(argv, tmp: str, exit_codes=(0,)) -> str:
    """Runs the command line ``argv`` in a child process (progress on this process's stderr);
    returns what it printed when it exits with one of ``exit_codes``, or raises its failure,
    or ``CompileError`` when it died, naming what it was doing from the journal the compiler
    keeps (``TORCHTPU_COMPILE_JOURNAL``)."""
    journal = os.path.join(tmp, "journal")
    env = dict(os.environ, TORCHTPU_COMPILE_JOURNAL=journal)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(argv)], env=env, stdout=subprocess.PIPE, text=True
    )
    if done.returncode < 0:
        try:
            cause = f"signal {signal.Signals(-done.returncode).name}"
        except ValueError:
            cause = f"signal {-done.returncode}"
        raise CompileError(
            f"the compiler's process died ({cause}) {_in_flight(journal)}: a crash inside XLA or its "
            "plugin; this process is unharmed (isolate=False runs it in this process)"
        )
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    if "error" in result:
        from . import errors

        raise getattr(errors, result["error"], TorchTpuError)(result["message"])
    if not result.get("ok"):
        raise TorchTpuError(f"the compiler's process exited with code {done.returncode}")
    if result["code"] not in exit_codes:
        raise TorchTpuError(f"the command exited with code {result['code']}: {result['stdout']}")
    return result["stdout"]


def _in_flight(journal: str) -> str:
    """What the compiler had started and not ended: ``while compiling cpu [s53-2]``."""
    try:
        with open(journal) as f:
            notes = f.read().splitlines()
    except OSError:
        notes = []
    open_ = [n[len("start "):] for n in notes if n.startswith("start ") and f"end {n[6:]}" not in notes]
    if not open_:
        return "before it loaded a plugin"
    words = {"load": "while loading the plugin for", "compile": "while compiling"}
    parts = []
    for what in open_:
        verb, _, rest = what.partition(" ")
        parts.append(f"{words.get(verb, verb)} `{rest}`")
    return " and ".join(parts)


def check(src) -> Dict[str, Any]:
    """The ``check --format json`` report of ``src`` (a ``.pt2`` path or an ``ExportedProgram``):
    ``ok``, and per op that does not lower its nodes and the reason. Does not raise for such
    ops, only for an archive that cannot be read."""
    with tempfile.TemporaryDirectory(prefix="torchtpu-compile-") as tmp:
        return json.loads(_native.check(_archive_of(src, tmp)))


def _archive_of(src, tmp: str) -> str:
    """The path of ``src``'s archive: itself, or an ``ExportedProgram`` saved under ``tmp``."""
    if isinstance(src, (str, os.PathLike)):
        return os.fspath(src)
    torch = _torch()
    if torch is not None and isinstance(src, torch.export.ExportedProgram):
        path = os.path.join(tmp, "program.pt2")
        # torch.export gives ATen as PyTorch traced it (`linear`, …); the compiler reads Core
        # ATen, which decomposing gives (a no-op on a program already decomposed).
        torch.export.save(src.run_decompositions(), path)
        return path
    raise UsageError(f"compile takes a .pt2 path or a torch.export.ExportedProgram, not {type(src).__name__}")


def inspect(path: PathLike) -> Dict[str, Any]:
    """What ``path`` holds: an artifact's manifest (targets, buckets, signature, weights), or for
    a ``.pt2`` archive the ``inspect --format json`` report (signature with symbolic dims and
    bounds, weights, op histogram). Told apart by content, as the command line does."""
    return json.loads(_native.inspect(os.fspath(path)))


class Generation(NamedTuple):
    """What ``generate`` gave."""

    tokens: Any
    """The new tokens only, ``[B, N]`` int64."""
    logits: Any
    """The logits that chose each of them, ``[B, N, V]`` float32; ``None`` when
    ``generate(..., logits=False)`` (a 128k vocabulary makes them 0.5 MB a token a row)."""
    prompt_tokens: int
    prompt_calls: int
    """The calls that fed the prompt: one per token, or fewer through a prefill program."""
    new_tokens: int
    prefill_ms: float
    decode_ms: float
    tokens_per_second: float


class Session:
    """An artifact opened once, its weights on the device, called many times.

    The buffers a program updates (KV caches, BatchNorm statistics) stay on the device from one
    call to the next; ``state()`` reads them, ``set_state`` replaces them, ``reset()`` puts the
    artifact's values back. Use it in a ``with`` block, or ``close()`` it, to free the device.
    Calls from several threads are run one at a time.
    """

    def __init__(self, path: PathLike, device: str = "cpu", plugin: Optional[PathLike] = None):
        plugin = None if plugin is None else os.fspath(plugin)
        self._native = _native.Session(os.fspath(path), device, plugin)
        self._files = self._native.output_files()
        self.manifest: Dict[str, Any] = json.loads(self._native.manifest())

    @property
    def inputs(self):
        """The user inputs: name, dtype and dims (ints, or symbol names for dynamic dims)."""
        return self.manifest["signature"]["inputs"]

    def __call__(self, *inputs, seed: int = 0):
        """Runs the program on ``inputs``; returns what the model returns: one array, or a tuple
        of them. The updated buffers keep their new values on the device."""
        as_torch = any(_is_tensor(x) for x in inputs)
        natives = [_to_native(x, f"input {i}") for i, x in enumerate(inputs)]
        outs = self._native.call(natives, seed)
        user = [_from_native(o, as_torch) for o, f in zip(outs, self._files) if f.startswith("out_")]
        return user[0] if len(user) == 1 else tuple(user)

    def state(self) -> Dict[str, Any]:
        """The current value of every buffer or parameter the program updates, by name."""
        return {name: _from_native(value, False) for name, value in self._native.state()}

    def set_state(self, values: Dict[str, Any]) -> None:
        """Replaces updated buffers by name; each value must have the buffer's dtype and shape."""
        for name, value in values.items():
            self._native.set_state(name, _to_native(value, f"state `{name}`"))

    def reset(self) -> None:
        """Puts the weights' values back in the updated buffers (the artifact's, or those of
        the checkpoint ``swap_weights`` took)."""
        self._native.reset()

    def swap_weights(self, checkpoint: PathLike) -> None:
        """Runs the weights of another checkpoint of the same program from now on, without
        recompiling: a ``.pt2`` of the same model with other values (fine-tuned, another
        adapter), or a ``.safetensors`` with every weight of the artifact by name, dtype and
        shape. A checkpoint of another program is refused (``UnsupportedError``, or
        ``InputError`` for a weights file of other names or shapes) and the session keeps its
        weights."""
        self._native.swap_weights(os.fspath(checkpoint))

    def generate(
        self,
        prompt,
        max_new_tokens: int,
        temperature: Optional[float] = None,
        seed: int = 0,
        reset: bool = True,
        logits: bool = True,
        encoder: Optional["Session"] = None,
        start_token: int = 0,
        eos: Optional[int] = None,
    ) -> Generation:
        """The decode loop of a decode-step export (token ids ``[B, 1]``, a position, logits
        out, KV caches as updated buffers): feeds ``prompt`` (``[T]`` or ``[B, T]`` token ids)
        one token per call, or in one call through a prefill program (token ids ``[B, T]``
        with ``T`` dynamic, compiled with buckets), then picks ``max_new_tokens`` tokens greedily, or by sampling at
        ``temperature`` with ``seed``. Starts from the artifact's caches unless ``reset`` is
        False. ``logits=False`` keeps only the tokens.

        With ``encoder`` (the session of an encoder–decoder model's encoder, as transformers'
        seq2seq export recipe writes it), this session is its decoder step: the encoder runs
        once on ``prompt`` (``[S]`` or ``[1, S]``), then the decoder from ``start_token``, one
        token a call, from its artifact's caches, until ``max_new_tokens`` or ``eos`` (kept)."""
        if encoder is not None:
            tokens, chosen_by, figures = self._native.generate_seq2seq(
                encoder._native, _to_native(prompt, "the prompt"), max_new_tokens, start_token, eos,
                temperature, seed, logits
            )
        else:
            if eos is not None:
                raise InputError("`eos` is for an encoder–decoder generation; a decoder-only one stops at max_new_tokens")
            if reset:
                self.reset()
            tokens, chosen_by, figures = self._native.generate(
                _to_native(prompt, "the prompt"), max_new_tokens, temperature, seed, logits
            )
        as_torch = _is_tensor(prompt)
        f = json.loads(figures)
        return Generation(
            _from_native(tokens, as_torch),
            None if chosen_by is None else _from_native(chosen_by, as_torch),
            f["prompt_tokens"],
            f["prompt_calls"],
            f["new_tokens"],
            f["prefill_ms"],
            f["decode_ms"],
            f["tokens_per_second"],
        )

    def close(self) -> None:
        """Frees the device's buffers; a later call raises ``SessionClosedError``."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load(path: PathLike, device: str = "cpu", plugin: Optional[PathLike] = None) -> Session:
    """Opens the artifact at ``path`` on ``device`` (``"cpu"``, or ``"tpu"`` on a TPU host),
    checks it and puts its weights on the device. ``plugin``: the PJRT plugin (default: the one
    ``cargo xtask setup`` installed, or ``$TORCHTPU_PJRT_PLUGIN`` / ``$TORCHTPU_LIBTPU``)."""
    return Session(path, device, plugin)


def generate(path: PathLike, prompt, max_new_tokens: int, **options) -> Generation:
    """``load(path).generate(prompt, max_new_tokens, **options)`` in one session."""
    device = options.pop("device", "cpu")
    with load(path, device) as session:
        return session.generate(prompt, max_new_tokens, **options)


def serve(
    path: PathLike,
    port: int = 8000,
    host: str = "127.0.0.1",
    *,
    device: str = "cpu",
    max_waiting: int = 64,
    model: Optional[str] = None,
    checkpoint: Optional[PathLike] = None,
    plugin: Optional[PathLike] = None,
    admin: bool = False,
    tokenizer: Optional[PathLike] = None,
    encoder: Optional[PathLike] = None,
    start_token: int = 0,
    chat_template: Optional[PathLike] = None,
    generation_config: Optional[PathLike] = None,
    max_body_bytes: Optional[int] = None,
) -> None:
    """Serves the decode-step artifact at ``path`` over HTTP until SIGINT or SIGTERM, as
    ``torchtpu-compile serve`` does: an OpenAI-compatible ``POST /v1/completions`` with token
    ids (streamed as server-sent events with ``"stream": true``), ``GET /health``,
    ``GET /metrics`` and ``GET /v1/models``; concurrent requests share the step's rows. It
    prints the address once ready (``port=0``: any free port). ``admin``: offer
    ``POST /admin/weights`` (another checkpoint's weights between requests). ``tokenizer``: a
    Hugging Face ``tokenizer.json``, so that prompts may be text and completions come with their
    text; with ``chat_template`` too (a ``.jinja`` file or a ``tokenizer_config.json``),
    ``POST /v1/chat/completions`` takes conversations. Requests stop at the model's EOS ids (the
    ``eos_token_id`` of ``generation_config``, default the ``generation_config.json`` beside the
    tokenizer, and the chat template's EOS token) unless they ask ``"ignore_eos": true``.
    ``max_body_bytes``: the largest request body taken (default 2 MiB). ``encoder``: for an encoder–decoder model (``path`` its decoder step), the encoder's
    artifact: each request's prompt is encoded once, the decoder starting at ``start_token``;
    one request at a time. Raises ``TorchTpuError`` when it cannot serve (the reason is on
    stderr)."""
    argv = ["torchtpu-compile", "serve", os.fspath(path), "--port", str(port), "--host", host]
    argv += ["--device", device, "--max-waiting", str(max_waiting)] + (["--admin"] if admin else [])
    options = (("--model", model), ("--checkpoint", checkpoint), ("--plugin", plugin), ("--tokenizer", tokenizer),
               ("--encoder", encoder), ("--chat-template", chat_template),
               ("--generation-config", generation_config))
    for flag, value in options:
        if value is not None:
            argv += [flag, os.fspath(value)]
    if encoder is not None:
        argv += ["--start-token", str(start_token)]
    if max_body_bytes is not None:
        argv += ["--max-body-bytes", str(max_body_bytes)]
    code = _native.main(argv)
    if code:
        raise TorchTpuError(f"`torchtpu-compile serve` exited with code {code} (its reason is on stderr)")


def main() -> None:
    """The ``torchtpu-compile`` command."""
    sys.exit(_native.main(["torchtpu-compile", *sys.argv[1:]]))
