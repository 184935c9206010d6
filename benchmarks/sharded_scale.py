"""One large-|X| adversarial-kernel trial split over shards (core.kernel.sharded): memory per shard,
time per round, and where one unsharded process stops fitting.

Runs on ``core`` alone (numpy, scipy): each shard is a process of its own (``multiprocessing``,
spawned), driven by the same coordinator that ``banditsweep run`` drives over Ray actors, so the
figures are the algorithm's, and every shard reports its own peak resident memory (``ru_maxrss``).

``memory``
    a fixed |X| (default a 400 x 400 grid, 1000 candidates, T rounds of ``--algorithm``) with 1, 2
    and 4 shards: peak memory per shard, seconds to build the shards, seconds per round; plus the
    peak memory of one unsharded trial (core.engine.trial, the ordinary path) at the same |X|, and a fresh
    shard process that built nothing (the constant).
``run``
    one trial at ``--grid N N`` with ``--shards S`` (e.g. 1000 x 1000 = 10^6 points, 4 shards, T = 100).
``cluster``
    the same trial through ``banditsweep run --address`` on a local multi-node Ray cluster this script
    starts (``ray.cluster_utils.Cluster``: a head without CPUs and one single-CPU worker node per
    shard, on 127.0.0.1, under a private ``RAY_TMPDIR``, ended through its own handle); the figures
    are the ones the trial records in Parquet (needs Ray).

Each shard process uses one BLAS thread (as a one-CPU Ray actor does): several shards on one machine
with threaded BLAS each oversubscribe its cores.

    .venv/bin/python benchmarks/sharded_scale.py memory [--grid 400 400] [--horizon 10]
    .venv/bin/python benchmarks/sharded_scale.py run --grid 1000 1000 --shards 4 --horizon 100
    .venv/bin/python benchmarks/sharded_scale.py cluster --grid 1000 1000 --shards 4 --horizon 100
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypeVar

from banditsweep.core.kernel.sharded.coordinator import ShardedKernelTrial
from banditsweep.core.kernel.sharded.partition import shard_ranges
from banditsweep.core.kernel.sharded.protocol import Request
from banditsweep.core.kernel.sharded.shard import KernelShard, domain_shape
from banditsweep.core.engine.trial import TrialSpec


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _serve(connection, spec: TrialSpec | None, start: int, stop: int) -> None:
    """A shard process: build the shard, then answer requests until told to stop (None)."""
    shard = KernelShard(spec, start, stop) if spec is not None else None
    connection.send(("ready", _peak_mb()))
    while True:
        request = connection.recv()
        if request is None:
            connection.send(_peak_mb())
            return
        connection.send(shard.handle(request))


R = TypeVar("R")


class ProcessShards:
    """A ShardGroup (core.kernel.sharded.protocol) of shard processes on this machine."""

    def __init__(self, spec: TrialSpec | None, count: int):
        n = domain_shape(spec)[0] if spec is not None else count
        self.ranges = shard_ranges(n, count) if spec is not None else [(0, 1)] * count
        context = mp.get_context("spawn")
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"   # read by each child's numpy
        self.connections, self.processes = [], []
        for start, stop in self.ranges:
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs, spec, start, stop), daemon=True)
            process.start()
            self.connections.append(mine)
            self.processes.append(process)
        self.built_mb = [connection.recv()[1] for connection in self.connections]

    def map(self, request: Request[R]) -> list[R]:
        for connection in self.connections:
            connection.send(request)
        return [connection.recv() for connection in self.connections]

    def ask(self, shard: int, request: Request[R]) -> R:
        self.connections[shard].send(request)
        return self.connections[shard].recv()

    def close(self) -> list[float]:
        """Each shard's peak resident memory (MiB); the processes end."""
        peaks = []
        for connection in self.connections:
            connection.send(None)
            peaks.append(connection.recv())
        for process in self.processes:
            process.join(timeout=30)
        return peaks


def _spec(grid: list[int], candidates: int, horizon: int, algorithm: str) -> TrialSpec:
    environment = {"kind": "adversarial_kernel", "domain": {"grid": grid}, "candidates": candidates}
    return TrialSpec.create(algorithm, {}, environment, 0, horizon, sharded=True)


def sharded_run(spec: TrialSpec, shards: int) -> dict[str, Any]:
    began = time.perf_counter()
    group = ProcessShards(spec, shards)
    built = time.perf_counter() - began
    trial = ShardedKernelTrial(spec, group)
    prepared = time.perf_counter() - began - built
    trial.advance()
    (result,) = trial.results()
    peaks = group.close()
    return {"points": domain_shape(spec)[0], "shards": shards, "build_seconds": round(built, 1),
            "prepare_seconds": round(prepared, 1), "seconds_per_round": round(result.seconds_per_round, 3),
            "peak_mb_per_shard": [round(p) for p in peaks], "final_regret": result.final_regret,
            "s_t_mean": result.diagnostics.get("s_t_mean")}


def _unsharded_peak(spec_json: str, connection) -> None:
    from banditsweep.core.engine.trial import run_trial

    content = json.loads(spec_json)
    spec = TrialSpec.create(content["algorithm"], content["params"], content["environment"], content["seed"],
                            content["horizon"])
    began = time.perf_counter()
    result = run_trial(spec)
    connection.send({"seconds": round(time.perf_counter() - began, 1), "peak_mb": round(_peak_mb()),
                     "final_regret": result.final_regret})


def unsharded_run(spec: TrialSpec) -> dict[str, Any]:
    context = mp.get_context("spawn")
    mine, theirs = context.Pipe()
    process = context.Process(target=_unsharded_peak, args=(json.dumps(spec.content()), theirs))
    process.start()
    out = mine.recv()
    process.join()
    return out


def cluster_run(grid: list[int], candidates: int, horizon: int, algorithm: str, shards: int) -> dict[str, Any]:
    import pandas as pd
    import yaml
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix="bs-shards-"))
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="bs-ray-")
    os.environ["RAY_AUTH_MODE"] = "disabled"   # Cluster's nodes run without tokens: so does the driver
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(shards):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        spec = {"sweep": "big", "horizon": horizon, "seeds": 1, "checkpoint_every": 50,
                "environments": [{"kind": "adversarial_kernel", "domain": {"grid": grid}, "candidates": candidates,
                                  "shards": shards}],
                "algorithms": [{"name": algorithm}]}
        (work / "big.yaml").write_text(yaml.safe_dump(spec))
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "banditsweep", "run", "big.yaml", "--address", cluster.address,
                               "--results", str(work / "results"), "--no-progress", "--sink", "none"],
                              cwd=work, capture_output=True, text=True)
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"the sweep failed:\n{done.stdout}\n{done.stderr}")
        row = pd.read_parquet(work / "results" / "big" / "trials").iloc[0]
        diagnostics = json.loads(row["diagnostics"])
        return {"points": diagnostics["domain_size"], "shards": shards, "nodes": diagnostics["shard_nodes"],
                "sweep_seconds": round(wall, 1), "trial_wall_seconds": round(row["wall_seconds"], 1),
                "seconds_per_round": round(row["seconds_per_round"], 3),
                "peak_mb_per_shard": [round(diagnostics[f"shard_{i}_peak_rss_mb"]) for i in range(shards)],
                "final_regret": row["final_regret"], "s_t_mean": diagnostics.get("s_t_mean")}
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["memory", "run", "cluster"])
    parser.add_argument("--grid", type=int, nargs="+", default=[400, 400])
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--algorithm", default="rls_kernel_exp3")
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    spec = _spec(args.grid, args.candidates, args.horizon, args.algorithm)
    if args.mode == "cluster":
        for shards in args.shards:
            print(json.dumps(cluster_run(args.grid, args.candidates, args.horizon, args.algorithm, shards)), flush=True)
        return
    if args.mode == "memory":
        empty = ProcessShards(None, 1)
        print(json.dumps({"constant_mb (a shard process that built nothing)": round(empty.close()[0])}))
        print(json.dumps({"unsharded (core.engine.trial)": unsharded_run(spec)}), flush=True)
    for shards in args.shards:
        print(json.dumps(sharded_run(spec, shards)), flush=True)


if __name__ == "__main__":
    main()
