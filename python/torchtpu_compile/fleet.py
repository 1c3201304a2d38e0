"""Compile many models × buckets × targets over a Ray cluster, and assemble each artifact from
the cache.

    import ray
    from torchtpu_compile import fleet

    ray.init(address="auto")                       # a running cluster (or none: a local one)
    report = fleet.compile(
        [fleet.Job("llama.pt2", "llama.tpuexe", targets=["tpu:v5e:2x2", "tpu:v6e:1x1"], buckets="auto:9")],
        remote_cache="s3://team-bucket/torchtpu",
    )
    print(report.compiled, "compiled,", report.hits, "cache hits")

One Ray task per (model, bucket, target) runs ``torchtpu-compile compile MODEL [the job's
options] --cache-only --only-bucket B --only-target T`` on a worker, which puts the executable into the shared remote
tier; the driver then compiles each model as usual, every executable a remote hit, and writes
the artifact: byte for byte what a compile on one machine writes. What the remote tier already
holds is a hit on the worker, so adding a target, or a model, compiles only what is new.

Workers need this package, the plugins of the targets (``cargo xtask setup``, or ``plugin=``
in a job's options), the archives at the same paths as the driver (a shared filesystem) and
access to the remote tier: credentials from the nodes' environment, or ``env=`` (passed to
each task). A task that dies (a crash inside XLA, a lost node) or cannot upload is retried by
Ray; a model that cannot be compiled is not retried. Failures are reported by model, bucket
and target (``FleetError``); the models whose tasks all succeeded are still assembled. Entries
are checked when read, so nothing half-written is served from either tier.
"""

import json
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _compile_options, _execute_in_child
from .errors import TorchTpuError, UsageError

__all__ = ["Job", "Task", "Failure", "Report", "FleetError", "compile"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Job:
    """One model to compile: the archive, the artifact to write, and ``compile``'s keywords
    (``targets``, ``buckets`` and the rest in ``options``, e.g. ``{"precision": "highest"}``)."""

    src: PathLike
    out: PathLike
    targets: Union[str, Sequence[str], None] = None
    buckets: Union[str, Sequence[str], Dict[str, Any], None] = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def argv_options(self) -> List[str]:
        given = dict(self.options, targets=self.targets, buckets=self.buckets)
        for owned in ("remote_cache", "cache_dir", "no_cache", "emit", "quiet", "verbose"):
            if given.get(owned):
                raise UsageError(f"{os.fspath(self.src)}: the fleet sets `{owned}` itself")
        if given.get("mesh") == "auto":
            raise UsageError(
                f"{os.fspath(self.src)}: the fleet needs a given mesh, not `auto` (`torchtpu-compile plan` names one)"
            )
        return _compile_options(given)


@dataclass(frozen=True)
class Task:
    """One executable: how the worker had it (``compiled``, ``hit``, ``remote-hit``), the
    seconds the task took there, and the node that ran it (host name and Ray node id)."""

    model: str
    bucket: str
    target: str
    outcome: str
    seconds: float
    node: str


@dataclass(frozen=True)
class Failure:
    model: str
    bucket: str
    target: str
    message: str


@dataclass
class Report:
    """What a fleet compile did: every task, the artifacts written (path → manifest), the
    executables the driver had to compile itself (none, unless the remote tier lost one), and
    the wall time."""

    tasks: List[Task]
    artifacts: Dict[str, Dict[str, Any]]
    compiled_by_driver: List[str]
    seconds: float

    @property
    def compiled(self) -> int:
        return sum(t.outcome == "compiled" for t in self.tasks)

    @property
    def hits(self) -> int:
        return len(self.tasks) - self.compiled


class FleetError(TorchTpuError):
    """Some tasks failed after their retries: ``failures`` names each by model, bucket and
    target; ``report`` holds what succeeded."""

    def __init__(self, failures: List[Failure], report: Report):
        lines = [f"{f.model} [{f.bucket}] for {f.target}: {f.message}" for f in failures]
        super().__init__(f"{len(failures)} of the fleet's compiles failed:\n  " + "\n  ".join(lines))
        self.failures = failures
        self.report = report


class _Transient(Exception):
    """A task's failure that another attempt may not meet (Ray retries it)."""


def _run_task(src: str, argv: List[str]) -> Dict[str, Any]:
    """On a worker: compiles one (bucket, target) into the cache tiers; its summary entry."""
    import ray

    started = time.monotonic()
    host = f"{socket.gethostname()} ({ray.get_runtime_context().get_node_id()[:8]})"
    if not os.path.isfile(src):
        raise TorchTpuError(f"`{src}` is not readable on node {host}: workers read the archives at the driver's paths")
    with tempfile.TemporaryDirectory(prefix="torchtpu-fleet-") as tmp:
        try:
            out = _execute_in_child(argv, tmp)
        except TorchTpuError as e:
            if "process died" in str(e):
                raise _Transient(f"on {host}: {e}") from None
            raise
    summary = json.loads(out)
    lost = [w for w in summary.get("warnings", []) if w.startswith("remote cache")]
    if lost:
        raise _Transient(f"on {host}: the executable did not reach the remote tier: {'; '.join(lost)}")
    (executable,) = summary["targets"]
    return {"outcome": executable["cache"], "seconds": time.monotonic() - started, "node": host}


def _executables(job: Job, options: List[str]) -> List[Dict[str, Any]]:
    """Every (bucket, target) of compiling ``job``, as ``cache explain`` lists them."""
    src = os.fspath(job.src)
    with tempfile.TemporaryDirectory(prefix="torchtpu-fleet-") as tmp:
        argv = ["torchtpu-compile", "cache", "--format", "json", "explain", src, *options, "--cache-dir", tmp]
        return json.loads(_execute_in_child(argv, tmp, exit_codes=(0, 1)))


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"fleet: {text}", file=sys.stderr, flush=True)


def compile(
    jobs: Sequence[Job],
    remote_cache: str,
    *,
    env: Optional[Mapping[str, str]] = None,
    retries: int = 2,
    cache_dir: Optional[PathLike] = None,
    worker_cache_dir: Optional[PathLike] = None,
    progress: bool = True,
) -> Report:
    """Compiles every job's executables as Ray tasks (one per bucket and target) into the
    remote tier ``remote_cache`` (``s3://…``, ``gs://…``, ``file:///…`` on a shared disk), then
    writes each job's artifact on this machine from cache hits. ``env``: environment variables
    for the tasks (the remote tier's credentials and endpoint, ``XLA_FLAGS``…); ``retries``:
    further attempts of a task that died or could not upload; ``cache_dir`` and
    ``worker_cache_dir``: the local cache folders of the driver and of the workers (default:
    each machine's own). The driver's own compiles (listing the executables, assembling) run
    in this process's environment. Raises ``FleetError`` when a task failed after its retries
    (the other jobs' artifacts are written), or ``UsageError`` for a job the fleet cannot run."""
    import ray

    if not ray.is_initialized():
        ray.init()
    started = time.monotonic()
    env = dict(env or {})
    remote_task = ray.remote(num_cpus=1)(_run_task).options(
        max_retries=retries,
        retry_exceptions=[_Transient],
        runtime_env={"env_vars": env} if env else None,
    )
    worker_cache = ["--cache-dir", os.fspath(worker_cache_dir)] if worker_cache_dir else []
    pending = {}
    for index, job in enumerate(jobs):
        src, options = os.path.abspath(os.fspath(job.src)), job.argv_options()
        for e in _executables(job, options):
            argv = ["torchtpu-compile", "compile", src, *options, "--cache-only", "--remote-cache", remote_cache]
            argv += ["--only-bucket", e["bucket"], "--only-target", e["target"], *worker_cache]
            argv += ["--format", "json", "-q"]
            pending[remote_task.remote(src, argv)] = (index, e["bucket"], e["target"])
    _say(progress, f"{len(pending)} executables of {len(jobs)} models on {_nodes(ray)} nodes")

    tasks, failures, failed = [], [], set()
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        index, bucket, target = pending.pop(ref)
        model = os.fspath(jobs[index].src)
        try:
            done = ray.get(ref)
        except Exception as e:  # a RayTaskError wrapping the task's exception
            cause = getattr(e, "cause", None) or e
            failures.append(Failure(model, bucket, target, str(cause).strip()))
            failed.add(index)
            _say(progress, f"{model} [{bucket}] {target}: FAILED")
            continue
        tasks.append(Task(model, bucket, target, done["outcome"], done["seconds"], done["node"]))
        _say(progress, f"{model} [{bucket}] {target}: {done['outcome']} on {done['node']} in {done['seconds']:.1f} s")

    report = Report(tasks, {}, [], 0.0)
    for index, job in enumerate(jobs):
        if index not in failed:
            _assemble(job, remote_cache, cache_dir, report)
            _say(progress, f"wrote {os.fspath(job.out)}")
    report.seconds = time.monotonic() - started
    if failures:
        raise FleetError(failures, report)
    return report


def _nodes(ray) -> int:
    return sum(1 for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0)


def _assemble(job: Job, remote_cache: str, cache_dir: Optional[PathLike], report: Report) -> None:
    """Writes ``job``'s artifact on the driver from the cache; notes what had to be compiled."""
    src, out = os.path.abspath(os.fspath(job.src)), os.fspath(job.out)
    argv = ["torchtpu-compile", "compile", src, "-o", out, *job.argv_options(), "--remote-cache", remote_cache]
    argv += (["--cache-dir", os.fspath(cache_dir)] if cache_dir else []) + ["--format", "json", "-q"]
    with tempfile.TemporaryDirectory(prefix="torchtpu-fleet-") as tmp:
        summary = json.loads(_execute_in_child(argv, tmp))
    for t in summary["targets"]:
        if t["cache"] not in ("hit", "remote-hit"):
            report.compiled_by_driver.append(f"{job.src} [{t['bucket']}] {t['target']}")
    from . import inspect

    report.artifacts[out] = inspect(out)
