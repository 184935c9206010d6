"""``banditsweep plan SPEC``: what a sweep will cost before it runs (sweeps.planning.plan): per cell the
trials, trial-rounds, seconds per round, memory per trial and GPUs, then the total as wall time on
this machine's CPUs, or on ``--workers N`` / ``--gpus N``."""

from __future__ import annotations

import os
from dataclasses import dataclass

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import PlanRequest
from banditsweep.sweeps.planning import slurm
from banditsweep.sweeps.cli.commands.arguments import tracking_uri
from banditsweep.sweeps.cli.commands.shared import store_of
from banditsweep.sweeps.planning.confirmation import describe, with_costed_confirmation
from banditsweep.sweeps.planning.datasets import chosen_data_dir, ensure_datasets_of_trials
from banditsweep.sweeps.planning.plan import SweepPlan, data_directory, default_workers, duration, plan_sweep
from banditsweep.sweeps.spec.model import Sweep
from banditsweep.sweeps.spec.errors import SpecError
from banditsweep.workers import MLFLOW_SINK, compare_code, mirror_plan


@dataclass
class PlanReport:
    """What ``plan`` found: the plan of the trials left (sweeps.planning.plan.SweepPlan), the spec's trials
    finished in the store and left out of it, and those of them computed by other code (which
    `run` runs again, so they are in the plan)."""

    plan: SweepPlan
    sweep: Sweep
    done: set[str]
    other_code: dict[str, list[str]]
    exit_code: int = 0


def main(args: PlanRequest, sweep: Sweep) -> int:
    return execute(args, sweep).exit_code


def execute(args: PlanRequest, sweep: Sweep) -> PlanReport:
    """The plan (what `banditsweep plan` and ``banditsweep.plan`` do), printing what the command prints."""
    # First: a cluster the trials cannot run on is refused before anything.
    job = slurm_allocation(args, sweep) if args.slurm else None
    trials_at_once = job.workers if job else workers(args, sweep)
    data_dir = chosen_data_dir(args.data_dir)
    ensure_datasets_of_trials(args.spec, (trial.spec for trial in sweep.trials), data_dir)
    store = store_of(args, sweep)
    sweep, stage = with_costed_confirmation(sweep, store)
    if stage is not None:
        say(describe(stage) + ("; costed below at each waiting cell's first grid point" if stage.waiting else ""))
    records = store.journal() if store.root.exists() else {}
    code = compare_code(((trial.spec, f"{trial.label} | {trial.environment}") for trial in sweep.trials), records)
    # Trials computed by other code are not done: `run` runs them again by default.
    done = {trial_id for trial_id, record in records.items() if record.status == "finished"} - set(code.other)
    with data_directory(data_dir):
        plan = plan_sweep(sweep, trials_at_once, records, args.probe_seconds, done)
    for line in plan.lines() if plan.cells or not done else []:
        say(line)
    if done and not plan.cells:
        say(f"nothing to run: all {len(done)} trials of the spec are already finished in {store.root}")
    elif done:
        say(f"({len(done)} trials of the spec are finished in {store.root} and left out)")
    if code.other:
        seconds = sum(records[trial_id].wall_seconds or 0.0 for trial_id in code.other)
        say(f"(of the trials to run, {code.other_code_line()}; re-running them is about {duration(seconds)} of "
              f"trial time, {duration(seconds / max(1, trials_at_once))} on {trials_at_once} worker(s), as they "
              "took; `run --keep-changed` keeps them instead)")
    if code.unknown:
        say(f"(note: {code.unknown_line()})")
    for line in mirror_lines(args, sweep, sum(1 for trial in sweep.trials if trial.trial_id not in done)):
        say(line)
    for line in slurm.sbatch_lines(job, plan, submit_command(args), sweep.spec.checkpoint_every) if job else []:
        say(line)
    return PlanReport(plan, sweep, done, dict(code.other))


def mirror_lines(args: PlanRequest, sweep: Sweep, trials: int) -> list[str]:
    """What the MLflow mirror of a run of these ``trials`` will write and cost (none when the spec's
    sinks leave MLflow out)."""
    if MLFLOW_SINK not in [name.lower() for name in (sweep.spec.sinks or [MLFLOW_SINK])] or not trials:
        return []
    cells = len({trial.group for trial in sweep.trials})
    return mirror_plan(tracking_uri(args), sweep.spec.mlflow_runs, trials, cells)


def slurm_allocation(args: PlanRequest, sweep: Sweep) -> slurm.Allocation:
    return slurm.Allocation.of(sweep.spec.resources, args.nodes, args.gpus_per_node, args.cpus_per_node,
                               args.time_limit)


def submit_command(args: PlanRequest) -> list[str]:
    """``sbatch cluster-slurm.sbatch`` with the spec and the options that choose its trials and store."""
    command = ["sbatch", "cluster-slurm.sbatch", args.spec]
    for flag, value in (("--results", args.results), ("--mlflow-uri", args.mlflow_uri)):
        if value is not None:
            command += [flag, value]
    command += [item for value in args.overrides for item in ("--set", value)]
    return command + [item for value in args.selectors for item in ("--only", value)]


def workers(args: PlanRequest, sweep: Sweep) -> int:
    resources = sweep.spec.resources
    if args.gpus == 0 and (resources.gpus_per_trial or 0) > 0:
        raise SpecError("--gpus", "0", f"the spec's trials ask for {resources.gpus_per_trial:g} GPU(s) each "
                                       "(resources.gpus_per_trial) and cannot run without GPUs; give the cluster's "
                                       "GPUs, or --set resources.gpus_per_trial=0 to plan them on CPUs")
    if args.workers:
        return args.workers
    cpus = len(os.sched_getaffinity(0))
    return default_workers(cpus, resources.cpus_per_trial, args.gpus or 0, resources.gpus_per_trial or 0.0)
