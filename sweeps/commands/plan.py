"""``banditsweep plan SPEC``: what a sweep will cost before it runs (sweeps.plan): per cell the
trials, trial-rounds, seconds per round, memory per trial and GPUs, then the total as wall time on
this machine's CPUs, or on ``--workers N`` / ``--gpus N``."""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager

from banditsweep.core.datasets import DATA_ENV_VAR
from banditsweep.sweeps.commands.shared import store_of
from banditsweep.sweeps.datasets import chosen_data_dir, ensure_datasets_of_trials
from banditsweep.sweeps.plan import default_workers, plan_sweep
from banditsweep.sweeps.spec import Sweep


def main(args: argparse.Namespace, sweep: Sweep) -> int:
    data_dir = chosen_data_dir(args.data_dir)
    ensure_datasets_of_trials(args.spec, (trial.spec for trial in sweep.trials), data_dir)
    store = store_of(args, sweep)
    records = store.journal() if store.root.exists() else {}
    done = {trial_id for trial_id, record in records.items() if record.status == "finished"}
    with _data_directory(data_dir):
        plan = plan_sweep(sweep, workers(args, sweep), records, args.probe_seconds, done)
    for line in plan.lines():
        print(line)
    if done:
        print(f"({len(done)} trials of the spec are finished in {store.root} and left out)")
    return 0


def workers(args: argparse.Namespace, sweep: Sweep) -> int:
    resources = sweep.spec.resources
    if args.workers:
        return args.workers
    cpus = len(os.sched_getaffinity(0))
    return default_workers(cpus, resources.cpus_per_trial, args.gpus or 0, resources.gpus_per_trial or 0.0)


@contextmanager
def _data_directory(data_dir):
    """The probes build classification environments in this process: they read the data directory
    from its environment, as a trial actor's do; restored afterwards."""
    before = os.environ.get(DATA_ENV_VAR)
    if data_dir is not None:
        os.environ[DATA_ENV_VAR] = str(data_dir)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(DATA_ENV_VAR, None)
        else:
            os.environ[DATA_ENV_VAR] = before
