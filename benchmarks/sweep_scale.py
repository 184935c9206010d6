"""Many tiny trials: how fast a sweep goes when the trials cost nothing, and whether the mirror keeps up.

Runs ``banditsweep run`` as a subprocess (its own embedded Ray on loopback) on a spec of ``--trials``
trials of ``random`` and ``linucb`` at T = 10 on a 3-dimensional synthetic environment, once per
``--sinks`` setting, side by side in one invocation (the machine's load is shared by both), and reports
per setting:

- ``trials_per_second``: trials / the run's wall time (the whole command: Ray start to exit);
- ``driver_peak_mb``: the driver process's peak resident memory (``ru_maxrss`` of the child);
- ``driver_mb_by_tenth``: its resident memory, the largest reading in each tenth of the run (read
  every second): whether it grows with the trials done or levels off;
- ``expand_seconds``: the time to read, expand and validate the spec (``banditsweep plan``-free: the
  spec module alone, in this process);
- ``mirror_lag_seconds``: for a setting with a sink, its wall time less the Parquet-only run's (what the
  mirror added);
- ``mlflow_finished`` / ``mlflow_running``: child runs in MLflow after the run (the mirror's completeness);
- ``parquet_trials`` / ``parquet_curve_rows`` / ``duplicates``: what the record of truth holds.

    .venv/bin/python benchmarks/sweep_scale.py --trials 10000 --sinks none mlflow

``--nodes N`` runs the same on a local multi-node cluster instead of the embedded Ray: a head with no CPU
for trials and N worker nodes of ``--node-cpus`` CPUs each (``ray.cluster_utils.Cluster`` on 127.0.0.1,
under a private ``RAY_TMPDIR``; its processes are ended through the cluster's own handle), the sweep
given ``--address``. The driver's memory is the same measure; the mirror runs on the head.

    .venv/bin/python benchmarks/sweep_scale.py --trials 10000 --sinks none mlflow --nodes 2

``--server plain`` / ``--server auth`` mirrors the ``mlflow`` setting to a real ``mlflow server`` on
loopback (SQLite backend; ``auth``: MLflow's basic-auth app, which checks the password on every request)
instead of a local SQLite store, started by the benchmark and ended by its process group; each row then
also gives ``trials_seconds``, from the run's start to its last trial's end (what the mirror must not
slow), against the Parquet-only run's:

    .venv/bin/python benchmarks/sweep_scale.py --trials 1000 --sinks none mlflow --server auth --mlflow-runs auto

``--backend postgresql`` gives that server a private PostgreSQL (tests/postgres_server.py: Debian's
``postgresql``, as root) instead of SQLite; ``--server-workers`` its worker processes (MLflow's default,
4). For each server setting the benchmark is run once, the Parquet-only run and the mirrored one side by
side:

    .venv/bin/python benchmarks/sweep_scale.py --trials 10000 --sinks none mlflow --server plain --backend postgresql

``--mirror-only N`` measures the MLflow sink alone instead: N ended trials (a 2-point curve, 6
parameters, 3 final metrics each) written to a fresh SQLite store through the bulk writer (one
transaction per 500 runs) and through MLflow's client (create, log_batch, terminate per run, 4 at a
time), in runs per second. With ``--server``, N runs go through MLflow's client to that server twice,
side by side: 8 calls in flight, 32 runs handed at a time (the writer before its calls followed the
server) and as many as the server keeps up with (``writers.CallsInFlight``), handed as the mirror
hands them now (about 20 s of the server's pace at a time):

    .venv/bin/python benchmarks/sweep_scale.py --mirror-only 2000 --server plain --backend postgresql
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_spec(folder: Path, trials: int, mlflow_runs: str) -> Path:
    seeds = max(1, trials // 2)
    path = folder / "scale.yaml"
    path.write_text(f"sweep: scale\nhorizon: 10\nseeds: {seeds}\nlog_every: 5\nmlflow_runs: {mlflow_runs}\n"
                    "environments:\n  - {kind: synthetic, function: h1, dim: 3}\n"
                    "algorithms:\n  - {name: random}\n  - {name: linucb}\n"
                    "resources: {cpus_per_trial: 0.5, batch_trials: 64}\n")
    return path


def expand_seconds(spec: Path) -> float:
    from banditsweep.sweeps.spec.model import load_sweep

    started = time.perf_counter()
    load_sweep(str(spec))
    return time.perf_counter() - started


RSS_EVERY = 1.0   # seconds between two readings of the driver's resident memory


def resident_mb(pid: int) -> float:
    """The resident memory of process ``pid`` in MB (Linux), NaN once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def by_tenth(samples: list[tuple[float, float]], seconds: float) -> list[float]:
    """The largest reading in each tenth of the run's wall time: memory that grows with the trials
    done climbs tenth after tenth, a bounded driver levels off."""
    tenths = [float("nan")] * 10
    for at, mb in samples:
        index = min(9, int(10 * at / seconds))
        if mb == mb and not tenths[index] >= mb:
            tenths[index] = round(mb, 1)
    return tenths


def run(folder: Path, spec: Path, sink: str, address: str | None = None, server=None) -> dict:
    results = folder / f"results-{sink}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / f'mlflow-{sink}.db'}"}
    if server is not None:
        env["MLFLOW_TRACKING_URI"] = server.uri
        if server.auth_password is not None:
            env.update(MLFLOW_TRACKING_USERNAME=server.admin, MLFLOW_TRACKING_PASSWORD=server.auth_password)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started_at = time.time()
    started = time.perf_counter()
    where = ["--address", address] if address else []
    with tempfile.TemporaryFile("w+") as output:
        driver = subprocess.Popen([sys.executable, "-m", "banditsweep", "run", str(spec), "--results", str(results),
                                   "--sink", sink, "--no-progress", *where], cwd=folder, env=env, stdout=output,
                                  stderr=subprocess.STDOUT, text=True)
        samples = []   # (seconds since start, the driver's resident MB)
        while driver.poll() is None:
            samples.append((time.perf_counter() - started, resident_mb(driver.pid)))
            time.sleep(RSS_EVERY)
        seconds = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    row = {"sink": sink, "exit": driver.returncode, "seconds": seconds,
           "driver_peak_mb": (peak if peak > before else float("nan")) / 1024,
           "driver_mb_by_tenth": by_tenth(samples, seconds)}
    if driver.returncode != 0:
        row["output"] = text[-2000:]
        return row
    import pandas as pd

    trials = pd.read_parquet(results / "scale" / "trials")
    curves = pd.read_parquet(results / "scale" / "curves", columns=["trial_id", "t"])
    row.update(parquet_trials=len(trials), parquet_curve_rows=len(curves),
               duplicates=int(trials["trial_id"].duplicated().sum() + curves.duplicated().sum()),
               trials_per_second=len(trials) / seconds, trials_seconds=pd.Timestamp(trials["finished_at"].max()).timestamp() - started_at)
    if sink == "mlflow":
        from mlflow.tracking import MlflowClient

        from banditsweep.workers.mirrors.mlflow.queries import search_all

        os.environ.update({k: v for k, v in env.items() if k.startswith("MLFLOW_TRACKING_")})
        client = MlflowClient(env["MLFLOW_TRACKING_URI"])
        experiment = client.get_experiment_by_name("scale").experiment_id
        statuses: dict[str, int] = {}
        for found in search_all(client, experiment, "tags.kind = 'trial'"):
            statuses[found.info.status] = statuses.get(found.info.status, 0) + 1
        row.update(mlflow_finished=statuses.get("FINISHED", 0), mlflow_running=statuses.get("RUNNING", 0),
                   mlflow_other=sum(v for k, v in statuses.items() if k not in ("FINISHED", "RUNNING")),
                   mlflow_cell_runs=len(search_all(client, experiment, "tags.kind = 'cell'")),
                   # every run of the experiment (parent, cell and trial runs) not FINISHED
                   mlflow_not_finished=len(search_all(client, experiment, "attributes.status != 'FINISHED'")))
    return row


def group_cpu_seconds(groups: list[int]) -> float:
    """CPU seconds (user and system) of the live processes of the process ``groups`` (Linux /proc): the
    tracking server's workers and its database's backends, which live as long as their connections."""
    total, tick = 0, os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:   # a process that ended meanwhile
            continue
        if int(fields[2]) in groups:   # after the name: state, ppid, pgrp, ..., utime (11), stime (12)
            total += int(fields[11]) + int(fields[12])
    return total / tick


def mirror_only(count: int, server=None, where: dict | None = None) -> None:
    from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
    from banditsweep.workers.mirrors.mlflow.sink import MLflowSink
    from banditsweep.workers.mirrors.mlflow.writers import SERVER_FIRST_CONCURRENCY, CallsInFlight
    from banditsweep.workers.mirrors.sinks import SinkContext
    from banditsweep.workers.storage.record import FINISHED, TrialRecord

    if server is None:
        cases = (("bulk", count), ("client", max(1, count // 10)))
    else:
        # a new server's first requests pay its workers' lazy start (several times a warm run's CPU):
        # a warm-up set of runs goes first, not reported
        cases = (("warm-up", min(count, 100)), (f"server, {SERVER_FIRST_CONCURRENCY} in flight (before)", count),
                 ("server, paced (now)", count))
        if server.auth_password is not None:
            os.environ.update(MLFLOW_TRACKING_USERNAME=server.admin, MLFLOW_TRACKING_PASSWORD=server.auth_password)
    for number, (mode, n) in enumerate(cases):
        with tempfile.TemporaryDirectory(prefix="banditsweep-mirror-") as work:
            uri = server.uri if server is not None else f"sqlite:///{work}/mlflow.db"
            sweep = f"mirror{number}"
            sink = MLflowSink(SinkContext(sweep, f"{work}/results", sink_options=MLflowOptions(uri).sink_options()))
            if mode == "client":
                sink.use_client()
            if mode.endswith("(before)"):
                sink.writer.in_flight = CallsInFlight(SERVER_FIRST_CONCURRENCY, SERVER_FIRST_CONCURRENCY)
            records = [TrialRecord(trial_id=f"{number}{i:019d}", sweep=sweep, algorithm="linucb", label="LinUCB",
                                   environment="synthetic:h1", seed=i, horizon=10, params={"nu": 0.1, "lam": 1.0},
                                   environment_config={"dim": 3}, log_every=5, status=FINISHED, attempts=1,
                                   final_regret=3.0, wall_seconds=0.1, seconds_per_round=0.01,
                                   diagnostics={"batch_size": 64.0}) for i in range(n)]
            sink.open(sink.context.store.journal(), [])
            # the server's processes (and its database's), each started in a process group of its own
            groups = [] if server is None else [p.pid for p in (server.process, getattr(server, "database_process", None))
                                                if p is not None]
            started, first, levels, cpu = time.perf_counter(), 0, [], os.times()
            server_cpu = group_cpu_seconds(groups)
            while first < n:   # as the mirror hands them (workers.mirrors.sinks): the sink's own chunk size
                # (before: 4 rounds of 8 calls at a time)
                size = 4 * SERVER_FIRST_CONCURRENCY if mode.endswith("(before)") else sink.ended_per_call
                levels.append(getattr(sink.writer, "concurrency", None))
                sink.trials_ended([(r, [(5, 1.0), (10, 3.0)]) for r in records[first:first + size]])
                first += size
            seconds = time.perf_counter() - started
            # the client's own CPU (this process: MLflow's client and the sink): the rest is the server's
            client_ms = 1000 * (os.times().user + os.times().system - cpu.user - cpu.system) / n
            server_ms = 1000 * (group_cpu_seconds(groups) - server_cpu) / n if groups else None
            sink.close("FINISHED", {})
            if mode == "warm-up":
                continue
            print(json.dumps({"case": "mirror", **(where or {}), "mode": mode, "runs": n, "seconds": seconds,
                              "runs_per_second": n / seconds, "client_cpu_ms_per_run": client_ms,
                              "server_cpu_ms_per_run": server_ms,
                              "in_flight_by_call": levels}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--sinks", nargs="+", default=["none", "mlflow"])
    parser.add_argument("--mirror-only", type=int, default=0, metavar="N")
    parser.add_argument("--mlflow-runs", default="trials", choices=["trials", "cells", "both", "auto"],
                        help="the spec's mlflow_runs (default trials: one MLflow run per trial, the hard case)")
    parser.add_argument("--nodes", type=int, default=0, help="worker nodes of a local multi-node cluster (0: embedded Ray)")
    parser.add_argument("--node-cpus", type=int, default=2, help="CPUs of each worker node")
    parser.add_argument("--server", choices=["none", "plain", "auth"], default="none",
                        help="mirror the mlflow setting to a real mlflow server on loopback (auth: basic-auth app)")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite",
                        help="the server's store (postgresql: a private PostgreSQL, as root)")
    parser.add_argument("--server-workers", type=int, default=4, help="the server's worker processes (MLflow's default)")
    args = parser.parse_args()
    if args.mirror_only:
        with tempfile.TemporaryDirectory(prefix="banditsweep-mirror-server-") as work:
            with servers(Path(work), args) as server:
                mirror_only(args.mirror_only, server, {"server": args.server, "backend": args.backend,
                                                       "server_workers": args.server_workers,
                                                       "load_average": os.getloadavg()[0]})
        return
    cluster = start_cluster(args.nodes, args.node_cpus) if args.nodes else None
    where = {"nodes": args.nodes, "node_cpus": args.node_cpus} if cluster else {"nodes": "embedded"}
    try:
        with tempfile.TemporaryDirectory(prefix="banditsweep-scale-") as work:
            folder = Path(work)
            spec = write_spec(folder, args.trials, args.mlflow_runs)
            print(json.dumps({"case": "expand", "trials": args.trials, "mlflow_runs": args.mlflow_runs,
                              "expand_seconds": expand_seconds(spec)}),
                  flush=True)
            where.update(server=args.server, backend=args.backend, server_workers=args.server_workers)
            with servers(folder, args) as server:
                rows = []
                for sink in args.sinks:   # RUSAGE_CHILDREN keeps the largest child so far: Parquet only first
                    rows.append(run(folder, spec, sink, cluster.address if cluster else None,
                                    server if sink == "mlflow" else None))
                    base = next((r for r in rows if r["sink"] == "none" and "seconds" in r), None)
                    if base is not None and sink != "none":
                        rows[-1]["mirror_lag_seconds"] = rows[-1]["seconds"] - base["seconds"]
                        rows[-1]["ratio_to_parquet_only"] = rows[-1]["seconds"] / base["seconds"]
                        if "trials_seconds" in rows[-1]:
                            rows[-1]["trials_ratio_to_parquet_only"] = (rows[-1]["trials_seconds"]
                                                                        / base["trials_seconds"])
                    print(json.dumps({"case": "run", "trials": args.trials, **where, "load_average": os.getloadavg()[0],
                                      **rows[-1]}), flush=True)
    finally:
        if cluster is not None:
            cluster.shutdown()


@contextlib.contextmanager
def servers(folder: Path, args):
    """The ``mlflow server`` of ``--server`` (None for ``none``) over ``--backend``, with ``--server-workers``
    workers, on loopback (the tests' helpers, tests/mlflow_server.py and tests/postgres_server.py: each in
    its own process group, ended here)."""
    if args.server == "none":
        yield None
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from mlflow_server import TrackingServer
    from postgres_server import PostgresServer

    database = PostgresServer().start() if args.backend == "postgresql" else None
    try:
        (folder / "server").mkdir()
        backend = database.uri.replace("postgresql://", "postgresql+psycopg2://", 1) if database else None
        server = TrackingServer(folder / "server", workers=args.server_workers, backend_uri=backend,
                                auth_password="bench-" + os.urandom(8).hex() if args.server == "auth" else None)
        server.start(within=600)   # 4 workers making a new store under load: minutes
        server.database_process = database.process if database else None
        try:
            yield server
        finally:
            server.stop()
    finally:
        if database is not None:
            database.stop()


def start_cluster(nodes: int, cpus: int):
    """A head with no CPU for trials and ``nodes`` worker nodes of ``cpus`` CPUs, on loopback, under a
    private temp dir (ended by the caller through ``cluster.shutdown()``)."""
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="bs-ray-")   # short: Ray's socket paths must fit
    os.environ["RAY_AUTH_MODE"] = "disabled"   # the Cluster's nodes run without tokens: so does the driver
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"            # keep the nodes on 127.0.0.1
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(nodes):
        cluster.add_node(num_cpus=cpus)
    cluster.wait_for_nodes()
    return cluster


if __name__ == "__main__":
    main()
