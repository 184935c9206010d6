"""What several commands do alike: the trials of a spec as the workers layer takes them, the sweep's
store and the selection of the spec it holds, warnings about its files, and the results table a
command ends with."""

from __future__ import annotations

import sys

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import SweepRequest
from banditsweep.sweeps.cli.commands.arguments import results_root
from banditsweep.sweeps.analysis.comparisons import ONE_POINT
from banditsweep.sweeps.planning.confirmation import describe, with_confirmation
from banditsweep.sweeps.results.report import CODE_LEGEND, markdown_table
from banditsweep.sweeps.spec.selection import parse_selectors, select
from banditsweep.sweeps.results.sweep_results import (SweepResults, env_order, label_order,  # noqa: F401 (API)
                                                      other_code_of)
from banditsweep.sweeps.spec.model import PlannedTrial, Sweep
from banditsweep.sweeps.spec.errors import SpecError
from banditsweep.sweeps.spec.stored_runs import Selection, select_sweep
from banditsweep.workers import Job
from banditsweep.workers import TrialRecord
from banditsweep.workers import StoreHealth, SweepStore


def record_of(sweep: Sweep, trial: PlannedTrial) -> TrialRecord:
    """A planned trial's record before it runs: what it is, from the spec."""
    spec = trial.spec
    return TrialRecord(trial_id=trial.trial_id, sweep=sweep.name, algorithm=spec.algorithm, label=trial.label,
                       environment=trial.environment, seed=spec.seed, horizon=spec.horizon, params=spec.params,
                       environment_config=spec.environment, log_every=sweep.spec.log_every,
                       run_name=trial.run_name, group=trial.group)


def jobs_of(sweep: Sweep) -> list[Job]:
    """Every trial of the spec, as the workers layer runs and counts them."""
    return [Job(spec=trial.spec, record=record_of(sweep, trial), shards=trial.shards) for trial in sweep.trials]


def store_of(args: SweepRequest, sweep: Sweep) -> SweepStore:
    return SweepStore.for_sweep(results_root(args), sweep.name)


def selected_sweep(args: SweepRequest, sweep: Sweep, store: SweepStore) -> Selection:
    """The spec's trials as the store holds them: those of the command's --set, else those of the
    run whose --set planned what the store holds (sweeps.spec.stored_runs)."""
    # The confirming trials of a spec's held-out stage are the spec's own, not another run's.
    confirmed, stage = with_confirmation(sweep, store)
    selection = select_sweep(args.spec, confirmed, args.overrides or [], store)
    if selection.switched and getattr(args, "selectors", None):
        try:   # the command's --only applies to the run's trials too
            selection.sweep = select(selection.sweep, parse_selectors(args.selectors))
        except SpecError as error:
            selection.notes.append(f"--only does not apply to that run's trials ({error.message}): all are shown")
    if selection.switched:   # another run's selection: its own held-out stage (the choice is made once otherwise)
        selection.sweep, stage = with_confirmation(selection.sweep, store)
    if stage is not None:
        selection.notes.append(describe(stage))
    return selection


def said_selection(args: SweepRequest, sweep: Sweep, store: SweepStore) -> Sweep:
    """The trials the command works on (:func:`selected_sweep`), its warnings and notes said."""
    selection = selected_sweep(args, sweep, store)
    say_selection(selection)
    return selection.sweep


def say_selection(selection: Selection) -> None:
    for warning in selection.warnings:
        say(f"warning: {warning}", file=sys.stderr)
    for note in selection.notes:
        say(f"note: {note}")


def say_health(health: StoreHealth | None) -> None:
    """What the check of the result files found: damaged files moved aside, trials that run again."""
    if health is None:
        return
    for line in health.quarantined:
        say(f"warning: damaged result file {line}", file=sys.stderr)
    if health.missing_results:
        say(f"warning: {len(health.missing_results)} finished trial(s) have lost their per-round results; "
              "`run` runs them again", file=sys.stderr)


def say_code_findings(code, other: str, unknown: str) -> None:
    """The finished trials computed by other code (and ``other``: what is done about them), those of
    code unknown (and ``unknown``), and the code that cannot be digested."""
    if code.other:
        say(f"note: {code.other_code_line()}; {other}")
    if code.unknown:
        say(f"note: {code.unknown_line()}; {unknown}")
    for line in code.undigestable_lines():
        say(f"warning: {line}", file=sys.stderr)


def say_code_notes(summary) -> None:
    """The legend of the cells marked for their code, and which modules they concern."""
    for mark in sorted({c for value in summary.marks.values() for c in value}):
        say(f"{CODE_LEGEND[mark]}")
    for note in summary.code_notes:
        say(f"code: {note}")


def summary_of(store: SweepStore, sweep: Sweep):
    """The report's summary of the spec's finished trials (sweeps.results.sweep_results); None with none."""
    return SweepResults(store, sweep).summary


def display_table(summary, table, digits: int) -> str:
    """A summary's table for the terminal, its algorithms by the names the figures give them
    (``LinUCB``, not ``linucb``), marked as the report marks them."""
    names = {row["label"]: row["display"] for _, row in summary.best.iterrows()}
    marks = {(column, names.get(label, label)): mark for (column, label), mark in summary.marks.items()}
    return markdown_table(table.rename(index=names), digits, marks=marks)


def print_results(store: SweepStore, sweep: Sweep) -> None:
    summary = summary_of(store, sweep)
    if summary is None:
        say("no finished trials yet")
        return
    say(f"\nMean final cumulative regret (best grid point per cell, {sweep.name}):")
    say(display_table(summary, summary.mean, 1))
    if summary.chosen != ONE_POINT:
        say(f"note: {summary.chosen}")
    for note in summary.notes:
        say(f"note: {note}")
    say_code_notes(summary)
