"""``banditsweep report SPEC``: tables (Markdown, CSV, LaTeX) and regret figures of the finished
trials into ``<results root>/<sweep>/report/``, attached to the sweep's MLflow run."""

from __future__ import annotations

import sys

from banditsweep.sweeps.events import say
from banditsweep.sweeps.options import SweepRequest
from banditsweep.sweeps.commands import EXIT_INCONSISTENT
from banditsweep.sweeps.commands.arguments import results_root, tracking_uri
from banditsweep.sweeps.commands.shared import (env_order, label_order, other_code_of, say_code_notes, say_health,
                                                say_selection, selected_sweep, store_of)
from banditsweep.sweeps.report import finished_trials, judged_summary, markdown_table, recorded_trials, write_report
from banditsweep.sweeps.spec import Sweep
from banditsweep.workers import attach_report
from banditsweep.workers import FAILED, InputError


def main(args: SweepRequest, sweep: Sweep) -> int:
    store = store_of(args, sweep)
    selection = selected_sweep(args, sweep, store)
    say_selection(selection)
    sweep = selection.sweep
    health = store.verify(planned=[trial.trial_id for trial in sweep.trials]) if store.root.is_dir() else None
    say_health(health)
    recorded = recorded_trials(store)
    trials = finished_trials(recorded, sweep.trials)
    if trials.empty:
        # Bad input (exit 2), as `verify` says it: nothing has failed, there is nothing to report.
        raise InputError(f"{store.root}: none of the {len(sweep.trials)} trials of {args.spec} is finished here; "
                         f"nothing to report (run `banditsweep run {args.spec}` first, or give the --results "
                         f"and --set it ran with)")
    failed = finished_trials(recorded, sweep.trials, FAILED)
    summary, how = judged_summary(trials, label_order(sweep), env_order(sweep), failed, other_code_of(store, sweep),
                                  choose_on_seeds=args.choose_on_seeds, same_seeds=args.same_seeds,
                                  choosing_seeds=sweep.spec.seed_list, confirm_seeds=sweep.spec.confirm_seeds)
    if how == "default":
        say(f"note: {summary.chosen} (held out by default; --same-seeds chooses and judges on every seed, "
              f"an optimistic reading)")
    elif how == "confirm":
        say(f"note: {summary.chosen} (the spec's held-out stage, confirm:)")
    files = write_report(store, summary, sweep.name, band=args.band)
    run_id, note = attach_report(tracking_uri(args), str(results_root(args)), sweep.name, store.report_dir)
    if note:
        say(f"warning: {note}", file=sys.stderr)
    say(f"Mean final cumulative regret ({sweep.name}, {len(trials)} finished trials):")
    say(markdown_table(summary.mean, 1, marks=summary.marks))
    say(f"\nStandard deviation:\n{markdown_table(summary.std, 2, marks=summary.marks)}")
    for note in summary.notes:
        say(f"note: {note}")
    say_code_notes(summary)
    say(f"\nwrote {len(files)} files to {store.report_dir}"
          + (f"; logged to MLflow run {run_id}" if run_id else ""))
    if health is not None and not health.ok:
        # Written, but without what the damaged or lost files held: a script that goes on to publish
        # it must be told, as `status` tells it.
        say(f"incomplete: the report leaves out the trials of the damaged or lost result files named above; "
              f"`banditsweep run {args.spec}` runs them again, then `report`", file=sys.stderr)
        return EXIT_INCONSISTENT
    return 0
