"""The compile fleet on a local Ray cluster (a head and two worker nodes, all on this machine)
sharing the local S3 test server (moto, from set-up) as the remote cache tier: the fleet's
artifact is byte for byte a local compile's, adding a target compiles only that target, a task
that dies is retried, and failures are named by model, bucket and target."""

import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import ray
import requests
from ray.cluster_utils import Cluster

import torchtpu_compile as ttc
from torchtpu_compile import fleet

MODELS = Path(__file__).resolve().parents[2] / "testdata" / "models"
# The test environment is a folder of the set-up folder, beside the S3 test server's.
MOTO = Path(sys.prefix).parent / "s3-test-server" / "bin" / "moto_server"
BUCKETS = ["input_ids:1=16,128,512"]


@pytest.fixture(scope="module")
def s3_env():
    """A moto S3 server on a free loopback port with the bucket `fleet`: the environment that
    points the compiler's remote tier at it."""
    assert MOTO.exists(), f"no S3 test server at {MOTO}: run `cargo xtask setup`"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [MOTO, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.put(f"{endpoint}/fleet", timeout=5).raise_for_status()
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "moto_server did not start"
                time.sleep(0.2)
        yield {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
        }
    finally:
        server.kill()
        server.wait()


@pytest.fixture(scope="module")
def cluster():
    """A head that runs no tasks and two worker nodes of one CPU each."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def entries(artifact: Path) -> dict:
    with zipfile.ZipFile(artifact) as z:
        return {name: z.read(name) for name in z.namelist()}


def test_the_fleets_artifact_is_a_local_compiles_and_a_new_target_is_all_it_compiles(
    tmp_path, s3_env, cluster, monkeypatch
):
    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)  # the driver's environment; the tasks get `env`
    model = MODELS / "llama_tiny_dyn.pt2"
    remote = "s3://fleet/llama"
    caches = {"cache_dir": tmp_path / "driver-cache", "worker_cache_dir": tmp_path / "worker-cache"}
    targets = ["cpu", "tpu:v6e:1x1"]
    job = fleet.Job(model, tmp_path / "fleet.tpuexe", targets=targets, buckets=BUCKETS)
    first = fleet.compile([job], remote, env=s3_env, **caches)
    assert sorted((t.bucket, t.target, t.outcome) for t in first.tasks) == sorted(
        (b, t, "compiled") for b in ["s70-16", "s70-128", "s70-512"] for t in targets
    )
    assert len({t.node for t in first.tasks}) == 2, "both worker nodes take tasks"
    # The driver's own cache was empty: every executable came from the remote tier.
    assert first.compiled_by_driver == []

    # A local compile on a worker host (its cache folder) writes the same bytes.
    local = tmp_path / "local.tpuexe"
    ttc.compile(model, local, targets=targets, buckets=BUCKETS, cache_dir=caches["worker_cache_dir"], quiet=True)
    assert (tmp_path / "fleet.tpuexe").read_bytes() == local.read_bytes()
    # A cold compile elsewhere: XLA's executables are not byte-deterministic (the CPU plugin's
    # object files come in varying order), but the programs, weights and cache keys are the same.
    cold = tmp_path / "cold.tpuexe"
    ttc.compile(model, cold, targets=targets, buckets=BUCKETS, cache_dir=tmp_path / "cold-cache", quiet=True)
    ours, theirs = entries(tmp_path / "fleet.tpuexe"), entries(cold)
    assert ours.keys() == theirs.keys()
    for name in ours:
        if not name.startswith("executables/") and name != "manifest.json":
            assert ours[name] == theirs[name], name
    keys = lambda m: [[e["cache_key"] for e in t["executables"]] for t in m["targets"]]
    assert keys(ttc.inspect(cold)) == keys(first.artifacts[os.fspath(tmp_path / "fleet.tpuexe")])

    # A third target: only its three executables are compiled; the rest are hits.
    targets.append("tpu:v5e:1x1")
    job = fleet.Job(model, tmp_path / "fleet3.tpuexe", targets=targets, buckets=BUCKETS)
    second = fleet.compile([job], remote, env=s3_env, **caches)
    assert len(second.tasks) == 9
    assert sorted(t.bucket for t in second.tasks if t.outcome == "compiled") == ["s70-128", "s70-16", "s70-512"]
    assert {t.target for t in second.tasks if t.outcome == "compiled"} == {"tpu:v5e:1x1"}
    assert second.compiled_by_driver == []
    ttc.compile(model, local, targets=targets, buckets=BUCKETS, cache_dir=caches["worker_cache_dir"], quiet=True)
    assert (tmp_path / "fleet3.tpuexe").read_bytes() == local.read_bytes()


CRASH_ONCE = r"""
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
/* With CRASH_ONCE_MARKER set (in the tasks), the first process to load it dies; the others
   get the real plugin's API. */
void *GetPjrtApi(void) {
    const char *marker = getenv("CRASH_ONCE_MARKER");
    if (marker && open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600) >= 0) *(volatile int *)0 = 1;
    void *real = dlopen(getenv("CRASH_ONCE_REAL_PLUGIN"), RTLD_NOW | RTLD_LOCAL);
    return ((void *(*)(void))dlsym(real, "GetPjrtApi"))();
}
"""


def test_a_task_whose_compiler_dies_is_retried(tmp_path, s3_env, cluster, monkeypatch):
    source = tmp_path / "crash_once.c"
    source.write_text(CRASH_ONCE)
    plugin = tmp_path / "libcrash_once.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", plugin, source, "-ldl"], check=True)
    real = Path(sys.prefix).parent / "plugins"
    (real,) = real.glob("*cpu*/*/pjrt_c_api_cpu_plugin.so")
    for name, value in dict(s3_env, CRASH_ONCE_REAL_PLUGIN=str(real)).items():
        monkeypatch.setenv(name, value)  # the driver loads the plugin too
    env = dict(s3_env, CRASH_ONCE_MARKER=str(tmp_path / "crashed"), CRASH_ONCE_REAL_PLUGIN=str(real))
    job = fleet.Job(MODELS / "mlp.pt2", tmp_path / "mlp.tpuexe", targets="cpu", options={"plugin": plugin})
    report = fleet.compile([job], "s3://fleet/retry", env=env, worker_cache_dir=tmp_path / "workers")
    assert (tmp_path / "crashed").exists(), "the first attempt loaded the crashing plugin"
    assert [(t.bucket, t.outcome) for t in report.tasks] == [("main", "compiled")]
    assert (tmp_path / "mlp.tpuexe").exists()


def test_failures_name_model_bucket_and_target_and_the_other_models_are_written(
    tmp_path, s3_env, cluster, monkeypatch
):
    # The workers cannot load libtpu: the TPU task fails (and is not retried); the CPU ones
    # succeed, and the model without a failed task is written.
    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    env = dict(s3_env, TORCHTPU_LIBTPU=str(tmp_path / "no-libtpu.so"))
    jobs = [
        fleet.Job(MODELS / "mlp.pt2", tmp_path / "mlp.tpuexe", targets=["cpu", "tpu:v6e:1x1"]),
        fleet.Job(MODELS / "cnn.pt2", tmp_path / "cnn.tpuexe", targets="cpu"),
    ]
    with pytest.raises(fleet.FleetError) as failed:
        fleet.compile(jobs, "s3://fleet/failures", env=env, worker_cache_dir=tmp_path / "workers")
    (failure,) = failed.value.failures
    assert (Path(failure.model).name, failure.bucket, failure.target) == ("mlp.pt2", "main", "tpu:v6e:1x1")
    assert "no-libtpu.so" in failure.message
    assert "mlp.pt2 [main] for tpu:v6e:1x1" in str(failed.value)
    assert not (tmp_path / "mlp.tpuexe").exists()
    assert (tmp_path / "cnn.tpuexe").exists()
    assert list(failed.value.report.artifacts) == [os.fspath(tmp_path / "cnn.tpuexe")]


def test_a_job_the_fleet_cannot_run_is_refused_before_any_task(tmp_path, cluster):
    job = fleet.Job(MODELS / "mlp.pt2", tmp_path / "x.tpuexe", options={"mesh": "auto"})
    with pytest.raises(ttc.UsageError, match="needs a given mesh"):
        fleet.compile([job], "s3://fleet/none")
    with pytest.raises(ttc.ArchiveError):
        fleet.compile([fleet.Job(MODELS / "mlp", tmp_path / "x.tpuexe")], "s3://fleet/none")
