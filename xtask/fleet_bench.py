"""`cargo xtask bench fleet`: wall time of a fleet compile (torchtpu_compile.fleet) on a local
Ray cluster of 1 and of 2 one-CPU worker nodes, and of the same compile on one machine, each
from empty caches (a fresh remote prefix, fresh local folders).

    python fleet_bench.py MODEL.pt2 WORK_DIR   (AWS_* point at an S3 server with bucket `bench`)
"""

import sys
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import torchtpu_compile as ttc
from torchtpu_compile import fleet

TARGETS = ["cpu", "tpu:v6e:1x1"]


def fleet_wall(model: Path, work: Path, workers: int) -> tuple:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(workers):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        job = fleet.Job(model, work / f"fleet-{workers}.tpuexe", targets=TARGETS)
        started = time.monotonic()
        report = fleet.compile(
            [job],
            f"s3://bench/fleet-{workers}-{time.time_ns()}",
            cache_dir=work / f"driver-{workers}",
            worker_cache_dir=work / f"workers-{workers}",
            progress=False,
        )
        return time.monotonic() - started, report
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    model, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    ttc.compile(model, work / "local.tpuexe", targets=TARGETS, cache_dir=work / "local-cache", quiet=True)
    local = time.monotonic() - started
    walls = {}
    for workers in (1, 2):
        walls[workers], report = fleet_wall(model, work, workers)
        buckets = len({t.bucket for t in report.tasks})
        print(
            f"  {workers} worker{'s' if workers > 1 else ' '}: {walls[workers]:6.1f} s "
            f"({len(report.tasks)} tasks: {buckets} buckets x {len(TARGETS)} targets, {report.compiled} compiled; "
            f"driver compiled {len(report.compiled_by_driver)})"
        )
    print(f"  one machine (`compile`, --jobs default): {local:.1f} s; 1 worker / 2 workers: {walls[1] / walls[2]:.2f}x")


if __name__ == "__main__":
    main()
