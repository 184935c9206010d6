"""Short neural trials, this tree against an older commit's, side by side in one run.

Each case is a whole trial of T rounds (default 500) from an empty history at one dataset's shape
(core.neural.datasets' catalogue: d', K), m = 100, J = 100, 1 intra-op thread. Two worker processes, one
importing banditsweep from this checkout and one from the older commit's tree (``git archive`` of
``--base``, unpacked into a temporary folder), run the same cases in alternation: repeat r of the base
then repeat r of this tree, so a change of the machine's load hits both alike. Per case one JSON line:

  {"algorithm", "dataset", "rounds", "base_cpu_seconds_per_round", "cpu_seconds_per_round", "ratio",
   "base_seconds_per_round", "seconds_per_round", "load_start", "load_end", "repeats", "identical"}

with medians over the repeats. CPU seconds (the worker's process time) are the figure: on a shared
machine the wall time grows with the other processes' load, the work does not. "ratio" = base / this
tree (> 1: faster now). "identical": both trees chose the same arms in every round and ended with the
same network parameters, bit for bit.

    python benchmarks/neural_short.py [--base 3c0654b] [--rounds 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
SHAPES = {"adult": (2, 14), "shuttle": (7, 9)}  # (K, d') as in core.neural.datasets.DATASETS


def worker() -> None:
    """Serve cases from stdin: one JSON request a line, one JSON answer a line."""
    import hashlib
    import time

    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    from neural_step import contexts_stream, make_policy

    torch.set_num_threads(1)
    for line in sys.stdin:
        case = json.loads(line)
        K, d_block = case["K"], case["d_block"]
        policy = make_policy(case["algorithm"], K, d_block, case["rounds"], [0],
                             {"width": 100, "steps": case["steps"]}, "cpu")
        draw = contexts_stream(K, d_block, 0)
        digest = hashlib.sha256()
        start, cpu = time.perf_counter(), time.process_time()
        for t in range(1, case["rounds"] + 1):
            contexts, rng = draw()
            arms = policy.select_batch(t, contexts[None]).arms
            digest.update(arms.tobytes())
            policy.update_batch(t, contexts[None], arms, np.array([float(rng.random() < 0.5)]))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - start
        for tensor in policy.network.tensors():
            digest.update(tensor.numpy().tobytes())
        print(json.dumps({"cpu": cpu / case["rounds"], "wall": wall / case["rounds"], "digest": digest.hexdigest()}),
              flush=True)


def start_worker(tree: Path) -> subprocess.Popen:
    """A worker importing banditsweep from ``tree`` (a folder holding a ``banditsweep`` package)."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=environment, cwd=str(HERE))


def ask(process: subprocess.Popen, case: dict) -> dict:
    process.stdin.write(json.dumps(case) + "\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def package_tree(folder: Path, checkout: Path, commit: str | None) -> Path:
    """A folder with ``banditsweep`` -> the checkout (``commit`` None) or the commit's files."""
    package = folder / "banditsweep"
    if commit is None:
        package.symlink_to(checkout, target_is_directory=True)
    else:
        package.mkdir()
        archive = subprocess.run(["git", "-C", str(checkout), "archive", commit], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(package)], input=archive.stdout, check=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base", default="3c0654b", help="the older commit")
    parser.add_argument("--algorithms", default="ga,pc,ucb,ts")
    parser.add_argument("--datasets", default="adult,shuttle")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    with tempfile.TemporaryDirectory() as base_dir, tempfile.TemporaryDirectory() as this_dir:
        base = start_worker(package_tree(Path(base_dir), CHECKOUT, args.base))
        ours = start_worker(package_tree(Path(this_dir), CHECKOUT, None))
        try:
            for dataset in args.datasets.split(","):
                K, d_block = SHAPES[dataset]
                for algorithm in args.algorithms.split(","):
                    case = {"algorithm": algorithm, "K": K, "d_block": d_block, "rounds": args.rounds,
                            "steps": args.steps}
                    load_start = os.getloadavg()[0]
                    answers = {"base": [], "ours": []}
                    for _ in range(args.repeats):
                        answers["base"].append(ask(base, case))
                        answers["ours"].append(ask(ours, case))
                    median = {side: {key: statistics.median(a[key] for a in answers[side]) for key in ("cpu", "wall")}
                              for side in answers}
                    digests = {a["digest"] for side in answers for a in answers[side]}
                    print(json.dumps({"algorithm": algorithm, "dataset": dataset, "rounds": args.rounds,
                                      "base": args.base, "base_cpu_seconds_per_round": median["base"]["cpu"],
                                      "cpu_seconds_per_round": median["ours"]["cpu"],
                                      "ratio": median["base"]["cpu"] / median["ours"]["cpu"],
                                      "base_seconds_per_round": median["base"]["wall"],
                                      "seconds_per_round": median["ours"]["wall"], "load_start": load_start,
                                      "load_end": os.getloadavg()[0], "repeats": args.repeats,
                                      "identical": len(digests) == 1}), flush=True)
        finally:
            for process in (base, ours):
                process.stdin.close()
                process.wait()


if __name__ == "__main__":
    main()
