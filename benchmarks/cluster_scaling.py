"""A sweep on a local multi-node Ray cluster: the trial pool follows the nodes.

Starts its own cluster inside this machine (``ray.cluster_utils.Cluster``: a head with no CPU for
trials, and worker nodes of ``--cpus`` CPUs each, on 127.0.0.1, under a private ``RAY_TMPDIR``),
runs ``banditsweep run --address`` on it as a subprocess with the sleeping plugin algorithm of
``benchmarks/plugins/sleep_algorithm.py`` (no CPU, so the figures are the pool's alone), and ends
exactly the processes it started, through the cluster's own handle.

Two cases:

``static``
    1, 2 and 3 worker nodes up before the sweep: trials per second (trials / span from first trial
    start to last trial end, as the algorithm records them), actors used, trials per node.
``joining``
    one worker node at the start; a second and a third join a few seconds into the sweep: the
    trials per node and the time each node's first trial started show the pool growing onto them.

    .venv/bin/python benchmarks/cluster_scaling.py [--trials 96] [--seconds 0.5] [--cpus 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"


def spec_text(trials: int, seconds: float) -> str:
    return (f"sweep: scaling\nhorizon: 20\nseeds: {trials}\n"
            f"environments:\n  - {{kind: synthetic, function: h1, dim: 3}}\n"
            f"algorithms:\n  - {{name: sleep, params: {{seconds: {seconds}}}}}\n"
            f"resources: {{cpus_per_trial: 1, gpus_per_trial: 0}}\nlog_every: 10\n")


def run_sweep(address: str, work: Path, trials: int, seconds: float, on_started=None) -> dict:
    import pandas as pd

    (work / "scaling.yaml").write_text(spec_text(trials, seconds))
    env = {**os.environ, "BANDITSWEEP_PLUGINS": "sleep_algorithm"}
    began = time.time()
    driver = subprocess.Popen([sys.executable, "-m", "banditsweep", "run", "scaling.yaml", "--address", address,
                               "--results", str(work / "results"), "--no-progress"],
                              cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if on_started is not None:
        on_started()
    output, _ = driver.communicate(timeout=900)
    if driver.returncode != 0:
        raise SystemExit(f"the sweep failed:\n{output}")
    table = pd.read_parquet(work / "results" / "scaling" / "trials")
    clocks = pd.DataFrame([json.loads(d) for d in table["diagnostics"]])
    span = clocks["clock_end"].max() - clocks["clock_start"].min()
    per_node = table.groupby("node_id").size().to_dict()
    first_start = {node: round(float(clocks.loc[table["node_id"] == node, "clock_start"].min()
                                     - clocks["clock_start"].min()), 1) for node in per_node}
    return {"trials_per_second": len(table) / span, "span": span, "command": time.time() - began,
            "actors": int(clocks["pid"].nunique()), "per_node": per_node, "first_start": first_start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=96)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--cpus", type=int, default=4, help="CPUs of each worker node (one sleeping actor each)")
    parser.add_argument("--join-after", type=float, default=4.0, help="seconds into the sweep the 2nd and 3rd node join")
    args = parser.parse_args()
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="bs-ray-")   # short: Ray's socket paths must fit
    os.environ["RAY_AUTH_MODE"] = "disabled"   # Cluster's nodes run without tokens: so does the driver
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"            # keep the nodes on 127.0.0.1
    # The nodes' workers import the plugin: they inherit this process's environment.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])
    import ray
    from ray.cluster_utils import Cluster

    rows = []
    cases = [("static", n) for n in (1, 2, 3)] + [("joining", 3)]
    for case, nodes in cases:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for _ in range(1 if case == "joining" else nodes):
                cluster.add_node(num_cpus=args.cpus)
            cluster.wait_for_nodes()

            def join():
                time.sleep(args.join_after)
                for _ in range(nodes - 1):
                    cluster.add_node(num_cpus=args.cpus)

            work = Path(tempfile.mkdtemp(prefix=f"scaling-{case}-{nodes}-"))
            figures = run_sweep(cluster.address, work, args.trials, args.seconds,
                                on_started=join if case == "joining" else None)
        finally:
            ray.shutdown()
            cluster.shutdown()
        rows.append((case, nodes, figures))
        print(f"{case} {nodes} node(s): {figures}", file=sys.stderr, flush=True)

    print(f"\n{args.trials} trials x {args.seconds} s, worker nodes of {args.cpus} CPUs (one actor per CPU); "
          f"minimum span with n nodes: {args.trials * args.seconds / args.cpus:.1f} s / n\n")
    print("| case | worker nodes | actors used | trials/s | span (s) | whole command (s) | trials per node | "
          "first trial on each node (s after the first) |")
    print("|---|---|---|---|---|---|---|---|")
    for case, nodes, f in rows:
        print(f"| {case} | {nodes} | {f['actors']} | {f['trials_per_second']:.1f} | {f['span']:.1f} | "
              f"{f['command']:.1f} | {sorted(f['per_node'].values(), reverse=True)} | "
              f"{sorted(f['first_start'].values())} |")


if __name__ == "__main__":
    main()
