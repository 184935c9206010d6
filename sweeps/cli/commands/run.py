"""``banditsweep run SPEC``: run every trial of the spec not yet finished, then show the results.

The datasets the trials read are made sure of, the sinks chosen and every trial checked to fit its
node before the sweep's folder is locked; then the store says where the sweep stands
(workers.storage.resume), and either the dispatcher runs what is left (workers.execution.dispatcher) or, with nothing
left, the store and the sinks are brought up to date.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import SweepRequest
from banditsweep.sweeps.cli.commands import EXIT_FAILED_TRIALS
from banditsweep.workers import one_line
from banditsweep.sweeps.cli.commands.arguments import check_sink_stores, results_root, sink_options
from banditsweep.sweeps.cli.commands.progress import ProgressDisplay
from banditsweep.sweeps.planning.confirmation import describe, with_confirmation
from banditsweep.sweeps.cli.commands.shared import jobs_of, print_results, say_code_findings, say_health, store_of
from banditsweep.sweeps.planning.datasets import chosen_data_dir, ensure_datasets_of_trials
from banditsweep.sweeps.spec.model import DEFAULT_SINKS, Sweep
from banditsweep.sweeps.spec.errors import SpecError
from banditsweep.sweeps.spec.reading import SpecText
from banditsweep.workers import source_commit
from banditsweep.workers import run_sweep
from banditsweep.workers import Job, RunOptions
from banditsweep.workers import check_fits
from banditsweep.workers import ray_address
from banditsweep.workers import CodeComparison
from banditsweep.workers import KEEP, RERUN, RERUN_ALL, catch_up, failed_records, plan_resume
from banditsweep.workers import record_run
from banditsweep.workers import SinkContext, sink_names
from banditsweep.workers import shipped_classes

# What the driver's environment hands every Ray worker process: the plugins it imports.
PLUGINS_ENV_VAR = "BANDITSWEEP_PLUGINS"


@dataclass
class RunReport:
    """What a ``run`` did: its exit code (0, or 1 with failed trials), the sweep as planned (after
    --set and --only), its results folder, where the store stood before (``finished_before``,
    ``failed_before`` of ``total``), the trials it ran and how they went (none ran when none was left)."""

    exit_code: int
    sweep: Sweep
    store_root: Path
    total: int
    finished_before: int = 0
    failed_before: int = 0
    ran: int = 0
    finished: int = 0
    failed: int = 0
    seconds: float = 0.0
    workers: int = 0
    device: str = ""
    failures: list = field(default_factory=list)   # the spec's failed trials' records (TrialRecord)


def main(args: SweepRequest, sweep: Sweep) -> int:
    return execute(args, sweep).exit_code


def execute(args: SweepRequest, sweep: Sweep) -> RunReport:
    """The run (what `banditsweep run` and ``banditsweep.run`` do), printing what the command prints."""
    data_dir = chosen_data_dir(args.data_dir)
    ensure_datasets_of_trials(args.spec, (trial.spec for trial in sweep.trials), data_dir)
    options = run_options(args, sweep, chosen_sinks(args, sweep), data_dir)
    check_sink_stores(args, options.sinks)
    jobs = jobs_of(sweep)
    check_fits(jobs, options, args.spec)
    report = RunReport(0, sweep, store_of(args, sweep).root, len(sweep.trials))
    store = store_of(args, sweep)
    with store.exclusive():
        planned, stage = with_confirmation(sweep, store)
        report.sweep = planned
        # Where cells are still to be chosen, the results are shown once, after the held-out stage.
        report.exit_code = run_locked(args, planned, jobs_of(planned), options, report,
                                      final=stage is None or not stage.waiting)
        if stage is None:
            return report
        # The held-out stage (sweeps.planning.confirmation): the cells whose choosing trials ended in this run
        # now have a chosen grid point to run on the fresh seeds.
        again, stage = with_confirmation(sweep, store)
        if len(again.trials) > len(planned.trials):
            say(f"\n{describe(stage)}")
            first = (report.ran, report.finished, report.failed, report.seconds)
            code = run_locked(args, again, jobs_of(again), options, report)
            report.exit_code = max(report.exit_code, code)
            report.ran, report.finished, report.failed, report.seconds = (
                a + b for a, b in zip(first, (report.ran, report.finished, report.failed, report.seconds)))
            report.sweep = again
        elif stage.waiting:
            say(f"note: {describe(stage)}")
    return report


def chosen_sinks(args: SweepRequest, sweep: Sweep) -> list[str]:
    """--sink, else the spec's ``sinks:``, else the default; each must be a registered sink."""
    names = args.sinks or sweep.spec.sinks or list(DEFAULT_SINKS)
    if names == ["none"]:
        return []
    if "none" in names:
        source = "--sink" if args.sinks else f"{args.spec}: sinks"
        raise SpecError(source, "none", f"means no sink, so it stands alone (got {', '.join(names)}); give none, "
                                        "or the sinks to use")
    known = sink_names()
    for name in names:
        if name not in known:
            source = "--sink" if args.sinks else f"{args.spec}: sinks"
            raise SpecError(source, name, f"unknown sink; allowed: {', '.join(known)} (or none alone)")
    return list(dict.fromkeys(names))


def run_options(args: SweepRequest, sweep: Sweep, sinks: list[str], data_dir: Path | None) -> RunOptions:
    resources = sweep.spec.resources
    plugins = os.environ.get(PLUGINS_ENV_VAR)
    return RunOptions(results_root=str(results_root(args)), sinks=sinks, sink_options=sink_options(args, sweep),
                      cpus_per_trial=resources.cpus_per_trial, gpus_per_trial=resources.gpus_per_trial,
                      batch_trials=resources.batch_trials, max_workers=args.max_workers,
                      checkpoint_every=sweep.spec.checkpoint_every, spec_path=str(args.spec),
                      address=ray_address(args.address), env_vars={PLUGINS_ENV_VAR: plugins} if plugins else {},
                      cpus_per_shard=resources.cpus_per_shard, gpus_per_shard=resources.gpus_per_shard,
                      data_dir=str(data_dir) if data_dir is not None else None,
                      settings=sweep_settings(args, sweep), shipped=shipped_classes())


def sweep_settings(args: SweepRequest, sweep: Sweep) -> dict[str, str]:
    """What a run was asked to do, as the parent run's parameters: the spec's sweep-level values and
    the command line's overrides and selection (the trials' own values are on their runs)."""
    spec = sweep.spec
    seeds = spec.seed_list
    # A long run of consecutive seeds as its ends: MLflow keeps 6,000 characters of a parameter.
    if len(seeds) > 10 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        seeds = f"{seeds[0]}..{seeds[-1]}"
    settings = {"trials": len(sweep.trials), "horizon": spec.horizon, "seeds": seeds,
                "log_every": spec.log_every, "checkpoint_every": spec.checkpoint_every,
                "algorithms": sorted({trial.label for trial in sweep.trials}),
                "environments": sorted({trial.environment for trial in sweep.trials}),
                **{f"resources.{key}": value for key, value in spec.resources.model_dump().items()},
                "overrides": " ".join(f"--set {item}" for item in args.overrides), "only": sweep.selected_by}
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in settings.items()
            if value not in (None, "")}


def run_locked(args: SweepRequest, sweep: Sweep, jobs: list[Job], options: RunOptions,
               report: RunReport | None = None, final: bool = True) -> int:
    """With the sweep's folder locked: resume where the store stands, run, say how it went (and
    note it in ``report``); the exit code. ``final``: show the results and what to do next (not
    after a spec's choosing stage, which its held-out stage follows)."""
    store = store_of(args, sweep)
    plan = plan_resume(store, jobs, args.retry_failed,
                       KEEP if args.keep_changed else RERUN_ALL if args.rerun_changed else RERUN)
    say_health(plan.health)
    selected = f" (selected by {sweep.selected_by})" if sweep.selected_by else ""
    say(f"{sweep.name}: {plan.total} trials{selected}, {plan.finished} finished, {plan.failed} failed, "
          f"{len(plan.pending)} to run")
    say_code(plan.code, plan.rerun_changed, plan.rerun_unknown)
    report = report or RunReport(0, sweep, store.root, plan.total)
    report.total, report.finished_before, report.failed_before = plan.total, plan.finished, plan.failed
    if not plan.pending:
        say(f"nothing to run: all {plan.total} trials of the spec are already finished in {store.root}" if not plan.failed
            else f"nothing to run: of the spec's {plan.total} trials, {plan.finished} are finished and {plan.failed} "
                 f"failed in {store.root} (--retry-failed runs the failed ones again)")
        caught = catch_up(store, options.sinks, SinkContext(sweep.name, options.results_root,
                                                            sink_options=options.sink_options))
        for warning in caught.warnings:
            say(f"warning: {warning}", file=sys.stderr)
        if caught.rebuilt_runs:
            say(f"restored {caught.rebuilt_runs} MLflow runs from the Parquet results")
        print_results(store, sweep)
        report.failures = failed_records(store, [job.record.trial_id for job in jobs]) if plan.failed else []
        return EXIT_FAILED_TRIALS if plan.failed else 0
    say_estimate(sweep, store, plan.pending, options, args.spec)
    options = replace(options, spec_text=_spec_text(args.spec), source_commit=source_commit())
    # Which --set planned these trials: `status` and `report` without them find them by it.
    record_run(store.root, args.overrides or [], len(sweep.trials))
    display = ProgressDisplay(len(plan.pending), sweep.name, bar=not args.no_progress)
    try:
        outcome = run_sweep(sweep.name, plan.pending, options, display.show)
    finally:
        display.close()
    sharded = f" and {outcome.sharded} sharded trial(s) over shard actors" if outcome.sharded else ""
    say(f"{outcome.finished} finished, {outcome.failed} failed in {outcome.seconds:.1f} s "
          f"on {outcome.workers} {outcome.device} worker(s){sharded}"
          + "".join(f"; {note}" for note in outcome.mirror.notes))
    for error in outcome.mirror.errors[:5]:
        say(f"warning: result sink: {error}", file=sys.stderr)
    for note in outcome.notes:
        say(f"warning: {note}", file=sys.stderr)
    report.ran, report.finished, report.failed = len(plan.pending), outcome.finished, outcome.failed
    report.seconds, report.workers, report.device = outcome.seconds, outcome.workers, outcome.device
    say(f"results: {store.root}")
    if not final:
        return EXIT_FAILED_TRIALS if outcome.failed else 0
    print_results(store, sweep)
    repeated = "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in
                       [("--results", args.results), ("--mlflow-uri", args.mlflow_uri),
                        *(("--set", item) for item in args.overrides or []),
                        *(("--only", item) for item in args.selectors or [])] if value is not None)
    if isinstance(args.spec, SpecText):   # given in Python: no file for the commands to name
        say(f"\nnext: the result's .statistics and .plot(); "
              f"`trials, curves = banditsweep.load({options.results_root!r}, {sweep.name!r})`")
    else:
        say(f"\nnext: `banditsweep report {shlex.quote(args.spec)}{repeated}` for tables and figures, "
              f"`banditsweep ui {shlex.quote(args.spec)}{repeated}` to compare runs in MLflow; in Python: "
              f"`trials, curves = banditsweep.load({options.results_root!r}, {sweep.name!r})`")
    failures = failed_records(store, [job.record.trial_id for job in jobs])
    for record in failures[:5]:
        # One line each, whatever the record holds (an exception's message may span lines).
        say(one_line(f"failed: {record.label} | {record.environment} | seed {record.seed}: {record.error}", 500),
              file=sys.stderr)
    report.failures = failures
    return EXIT_FAILED_TRIALS if failures else 0


def say_code(code: CodeComparison, rerun: bool, rerun_unknown: bool = False) -> None:
    """What `run` found of the finished trials' code, and what it does about it."""
    other = ("running them again on today's code (--keep-changed keeps them; if the change moves no number, "
             "`banditsweep verify SPEC --accept` first)") if rerun else \
        "kept (--keep-changed): `report` marks their cells as computed by other code"
    unknown = "running them again on today's code (--rerun-changed)" if rerun_unknown else \
        "`run --rerun-changed` runs them again"
    say_code_findings(code, other, unknown)


# Cells a run probes for its first-line estimate (each for at most RUN_PROBE_SECONDS); a sweep of more
# cells without measured costs is left to `banditsweep plan`.
RUN_PROBE_CELLS = 12
RUN_PROBE_SECONDS = 0.3


def say_estimate(sweep: Sweep, store, pending: list[Job], options: RunOptions, spec: str) -> None:
    """The run's cost in its first lines (sweeps.planning.plan), and a word before a long one starts."""
    from banditsweep.sweeps.planning.plan import LONG_RUN_SECONDS, data_directory, default_workers, duration, plan_sweep
    from banditsweep.sweeps.planning.slurm import time_limit_notes

    records = store.journal()
    wanted = {job.record.trial_id for job in pending}
    done = {trial.trial_id for trial in sweep.trials} - wanted
    measured = {(r.label, r.environment, r.horizon) for r in records.values() if r.status == "finished"}
    unmeasured = {(t.label, t.environment, t.spec.horizon) for t in sweep.trials if t.trial_id in wanted} - measured
    if len(unmeasured) > RUN_PROBE_CELLS:
        say(f"estimate: {planning(spec)} times its {len(unmeasured)} cells")
        return
    cpus = len(os.sched_getaffinity(0)) if options.address is None else 0
    workers = options.max_workers or (default_workers(cpus, options.cpus_per_trial) if cpus else 0)
    with data_directory(options.data_dir):
        estimate = plan_sweep(sweep, max(1, workers), records, RUN_PROBE_SECONDS, done, probe_plugins=False)
    say(estimate_line(estimate, workers, planning(spec)))
    seconds = estimate.wall_seconds if workers else estimate.serial_seconds
    for line in time_limit_notes(estimate, sweep.spec.checkpoint_every):   # inside a Slurm job
        say(line, file=sys.stderr)
    if seconds > LONG_RUN_SECONDS:
        say(f"note: a long run ({duration(seconds)}); --set horizon=... / --set seeds=... cut it down, and "
              "an interrupted run resumes where it stopped")


def planning(spec: str) -> str:
    """How the user asks for the plan of ``spec``: the command, or the function for a spec given in Python."""
    return "`banditsweep.plan(spec)`" if isinstance(spec, SpecText) else f"`banditsweep plan {shlex.quote(spec)}`"


def estimate_line(estimate, workers: int, planning: str) -> str:
    """The run's first-line estimate, saying what it covers: the trials it timed, and Ray's start and
    stop on an embedded Ray (a cluster's Ray is up already; its actors' start is not estimated)."""
    from banditsweep.sweeps.planning.plan import about

    reasons = sorted({cell.source for cell in estimate.cells if math.isnan(cell.seconds_per_trial)})
    left_out = f"{estimate.unknown} cell(s) not estimated: {'; '.join(reasons)}" if reasons else ""
    if not estimate.estimated:
        ray = f"; Ray's start and stop alone take {about(estimate.ray_start_seconds)}" if workers else ""
        return f"estimate: none: {left_out}{ray}"
    left_out = f" ({left_out})" if left_out else ""
    if not workers:
        return (f"estimate: the trials take {about(estimate.serial_seconds)} of one core (the cluster's size is "
                f"not known yet){left_out}, plus the trial actors' start ({planning} for the breakdown)")
    return (f"estimate: {about(estimate.wall_seconds)} on {workers} worker(s): the trials "
            f"{about(estimate.trial_seconds)}{left_out}, Ray's start and stop {about(estimate.ray_start_seconds)} "
            f"({planning} for the breakdown)")


def _spec_text(path: str) -> str:
    if isinstance(path, SpecText):
        return path.text
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return ""
