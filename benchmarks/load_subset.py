"""What ``banditsweep.load`` holds: the whole of a sweep's results against a part of them.

Writes a store of ``--trials`` trials x ``--horizon`` rounds (curve rows of the real schema, through
``SweepStore.write_outcomes`` and compaction, as a run leaves them), then loads it in a fresh process
each time, so that one load's memory does not hide another's:

- ``whole``: ``load(root, sweep)``;
- ``one algorithm``: ``algorithms=[...]`` (a quarter of the trials);
- ``last rounds``: ``rounds=(T - 99, T)``, ``columns=["cum_regret"]``;
- ``final round``: ``rounds=[T]``, ``columns=["cum_regret"]``.

Printed per case (and the floor of a process that imports what a load does and loads nothing): curve rows, the DataFrame's own memory (``memory_usage(deep=True)``), the process's
peak resident memory (``ru_maxrss``: the reading included, which a frame's size does not show) and the
wall time; one JSON line per case with ``--json``. Run on core alone (pandas and pyarrow; no Ray)::

    python benchmarks/load_subset.py --trials 400 --horizon 5000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "(no load)": None,   # the process's floor: Python, pandas, pyarrow and banditsweep imported
    "whole": {},
    "one algorithm": {"algorithms": ["A0"]},
    "last rounds": {"rounds": "LAST", "columns": ["cum_regret"]},
    "final round": {"rounds": "FINAL", "columns": ["cum_regret"]},
}


def write_store(root: Path, trials: int, horizon: int) -> None:
    import numpy as np

    from banditsweep.sweeps.cli.commands.shared import record_of
    from banditsweep.sweeps.spec.model import parse_sweep
    from banditsweep.workers import FINISHED, SweepStore, TrialOutcome

    seeds = max(1, trials // 4)
    sweep = parse_sweep({"sweep": "big", "horizon": horizon, "seeds": seeds,
                         "environments": [{"kind": "synthetic", "function": "h1"}],
                         "algorithms": [{"name": "random", "label": "A0"},   # a quarter of the trials
                                        {"name": "linucb", "label": "A1", "grid": {"nu": [0.1, 1.0, 10.0]}}]})
    store = SweepStore.for_sweep(root, "big")
    rng = np.random.default_rng(0)
    batch = []
    for index, trial in enumerate(sweep.trials):
        regret = rng.random(horizon)
        cum = np.cumsum(regret)
        record = dataclasses.replace(record_of(sweep, trial), status=FINISHED, final_regret=float(cum[-1]),
                                     wall_seconds=1.0, seconds_per_round=1e-3)
        batch.append(TrialOutcome(record, {"arm": rng.integers(0, 4, horizon), "reward": rng.random(horizon),
                                           "regret": regret, "cum_regret": cum, "seconds": np.full(horizon, 1e-4)}))
        if len(batch) == 50 or index == len(sweep.trials) - 1:
            store.write_outcomes(batch)
            batch = []
    store.compact()
    store.write_trials_table(list(store.journal().values()))


def measure(root: str, case: str, horizon: int) -> dict:
    """One load in this process: rows, the frame's memory, peak RSS, seconds."""
    import resource

    import banditsweep

    if CASES[case] is None:
        import banditsweep.workers.storage.store  # noqa: F401 (what a load imports, and no more)

        return {"case": case, "rows": 0, "frame_mb": 0.0,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "seconds": 0.0}
    options = dict(CASES[case])
    if options.get("rounds") == "LAST":
        options["rounds"] = (horizon - 99, horizon)
    elif options.get("rounds") == "FINAL":
        options["rounds"] = [horizon]
    started = time.perf_counter()
    trials, curves = banditsweep.load(root, "big", **options)
    seconds = time.perf_counter() - started
    return {"case": case, "rows": len(curves), "frame_mb": curves.memory_usage(deep=True).sum() / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--horizon", type=int, default=5000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--measure", nargs=3, metavar=("ROOT", "CASE", "HORIZON"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        root, case, horizon = args.measure
        print(json.dumps(measure(root, case, int(horizon))))
        return
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_store(root, args.trials, args.horizon)
        print(f"{args.trials} trials x {args.horizon} rounds; each load in a fresh process\n")
        print(f"{'case':<15}{'rows':>12}{'frame MiB':>12}{'peak RSS MiB':>15}{'seconds':>10}")
        for case in CASES:
            out = subprocess.run([sys.executable, __file__, "--measure", str(root), case, str(args.horizon)],
                                 check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(row) if args.json else
                  f"{case:<15}{row['rows']:>12,}{row['frame_mb']:>12.1f}{row['peak_rss_mb']:>15.1f}{row['seconds']:>10.2f}")


if __name__ == "__main__":
    main()
