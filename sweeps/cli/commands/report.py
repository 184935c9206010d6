"""``banditsweep report SPEC``: tables (Markdown, CSV, LaTeX) and regret figures of the finished
trials into ``<results root>/<sweep>/report/``, attached to the sweep's MLflow run."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import SweepRequest
from banditsweep.sweeps.cli.commands import EXIT_INCONSISTENT
from banditsweep.sweeps.cli.commands.arguments import results_root, tracking_uri
from banditsweep.sweeps.cli.commands.shared import (display_table, say_code_notes, say_health, said_selection,
                                                    store_of)
from banditsweep.sweeps.results.report import write_report
from banditsweep.sweeps.results.sweep_results import SweepResults
from banditsweep.sweeps.spec.model import Sweep
from banditsweep.workers import attach_report
from banditsweep.workers import InputError


@dataclass
class ReportOutcome:
    """What ``report`` did: its exit code (0, or 4 where damaged or lost files were left out), the
    sweep as reported (its confirming trials included), the files written, the MLflow run they were
    attached to (None: not attached), and the results they were written from."""

    exit_code: int
    sweep: Sweep
    store_root: Path
    files: list[Path]
    run_id: str | None
    results: SweepResults


def main(args: SweepRequest, sweep: Sweep) -> int:
    return execute(args, sweep).exit_code


def execute(args: SweepRequest, sweep: Sweep) -> ReportOutcome:
    """The report (what `banditsweep report` and ``banditsweep.report`` do), saying what the command says."""
    store = store_of(args, sweep)
    sweep = said_selection(args, sweep, store)
    health = store.verify(planned=[trial.trial_id for trial in sweep.trials]) if store.root.is_dir() else None
    say_health(health)
    results = SweepResults(store, sweep, args.choose_on_seeds, args.same_seeds)
    if results.finished.empty:
        # Bad input (exit 2), as `verify` says it: nothing has failed, there is nothing to report.
        raise InputError(f"{store.root}: none of the {len(sweep.trials)} trials of {args.spec} is finished here; "
                         f"nothing to report (run `banditsweep run {args.spec}` first, or give the --results "
                         f"and --set it ran with)")
    summary = results.summary
    if results.chosen_by == "default":
        say(f"note: {summary.chosen} (held out by default; --same-seeds chooses and judges on every seed, "
            f"an optimistic reading)")
    elif results.chosen_by == "confirm":
        say(f"note: {summary.chosen} (the spec's held-out stage, confirm:)")
    files = write_report(store, summary, sweep.name, band=args.band)
    run_id, note = attach_report(tracking_uri(args), str(results_root(args)), sweep.name, store.report_dir)
    if note:
        say(f"warning: {note}", file=sys.stderr)
    say(f"Mean final cumulative regret ({sweep.name}, {len(results.finished)} finished trials):")
    say(display_table(summary, summary.mean, 1))
    say(f"\nStandard deviation:\n{display_table(summary, summary.std, 2)}")
    for note in summary.notes:
        say(f"note: {note}")
    say_code_notes(summary)
    say(f"\nwrote {len(files)} files to {store.report_dir}" + (f"; logged to MLflow run {run_id}" if run_id else ""))
    outcome = ReportOutcome(0, sweep, store.root, list(files), run_id, results)
    if health is not None and not health.ok:
        # Written, but without what the damaged or lost files held: a script that goes on to publish
        # it must be told, as `status` tells it.
        say(f"incomplete: the report leaves out the trials of the damaged or lost result files named above; "
            f"`banditsweep run {args.spec}` runs them again, then `report`", file=sys.stderr)
        outcome.exit_code = EXIT_INCONSISTENT
    return outcome
