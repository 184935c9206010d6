"""``banditsweep status SPEC``: done / failed / running / pending trials per algorithm and
environment, what a run going on now is doing (each running trial's round of T and its last
progress, from the run's ``running.json``), and whether the result files are whole and agree with
each other (exit 4 when not)."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import SweepRequest
from banditsweep.sweeps.cli.commands import EXIT_INCONSISTENT
from banditsweep.sweeps.cli.commands.shared import (jobs_of, say_code_findings, say_health, say_selection,
                                                    selected_sweep, store_of)
from banditsweep.sweeps.publishing.display import display_name
from banditsweep.sweeps.results.report import markdown_table
from banditsweep.sweeps.spec.model import Sweep
from banditsweep.workers import STALE_SECONDS, LiveTrial
from banditsweep.workers import StatusSummary, status_summary

# Running trials (or lockstep batches) listed at most; a count says how many more.
LISTED = 20


@dataclass
class StatusReport:
    """What ``status`` found: the trials shown (the spec's, or those of the run whose --set planned
    what the store holds: ``selection``), the counts per cell and the check of the files
    (workers.storage.status_counts.StatusSummary); exit code 4 when they disagree."""

    exit_code: int
    sweep: Sweep
    store_root: Path
    summary: StatusSummary
    notes: list[str] = field(default_factory=list)


def main(args: SweepRequest, sweep: Sweep) -> int:
    return execute(args, sweep).exit_code


def execute(args: SweepRequest, sweep: Sweep) -> StatusReport:
    """The status (what `banditsweep status` and ``banditsweep.status`` do), printing what the command prints."""
    store = store_of(args, sweep)
    selection = selected_sweep(args, sweep, store)
    say_selection(selection)
    sweep = selection.sweep
    summary = status_summary(store, jobs_of(sweep))
    say_health(summary.health)
    if summary.live_warning:
        say(f"warning: {summary.live_warning}", file=sys.stderr)
    cells = pd.DataFrame([asdict(cell) for cell in summary.cells])
    if not summary.running_now:
        cells = cells.drop(columns="running")
    if not summary.total("other_code"):
        cells = cells.drop(columns="other_code")
    say(markdown_table(_named(cells, sweep).rename(columns={"other_code": "other code"}), index=False))
    running = f"{summary.total('running')} running, " if summary.running_now else ""
    other = f"{summary.total('other_code')} by other code, " if summary.total("other_code") else ""
    selected = f" (selected by {sweep.selected_by})" if sweep.selected_by else ""
    say(f"\n{sweep.name}: {len(sweep.trials)} trials{selected}: {summary.total('done')} done, {other}"
          f"{summary.total('failed')} failed, {running}{summary.total('pending')} pending")
    say_code_state(summary.code)
    say_live(summary)
    report = StatusReport(0, sweep, store.root, summary, list(selection.notes))
    if summary.consistency is None:
        return report
    say(f"verified: {summary.consistency.summary()}")
    for note in summary.consistency.notes:
        say(f"note: {note}")
    for problem in summary.consistency.problems:
        say(f"inconsistent: {problem}", file=sys.stderr)
    report.exit_code = EXIT_INCONSISTENT if summary.inconsistent else 0
    return report


def _named(cells: pd.DataFrame, sweep: Sweep) -> pd.DataFrame:
    """The table's algorithms by the names the figures and `run`'s table give them (``LinUCB``, not
    ``linucb``); the result's ``cells`` keep the labels of the Parquet results."""
    if cells.empty or "algorithm" not in cells:
        return cells
    algorithms = {trial.label: trial.spec.algorithm for trial in sweep.trials}
    return cells.assign(algorithm=[display_name(label, algorithms.get(label)) for label in cells["algorithm"]])


def say_code_state(code) -> None:
    """Which modules changed since the finished trials ran, and the trials recorded without code."""
    if code is not None:
        say_code_findings(code, "`run` runs them again (--keep-changed keeps them), `verify --accept` stamps "
                                "them as today's where a sample reproduces", "`run --rerun-changed` runs them again")


def say_live(summary: StatusSummary) -> None:
    """The run going on now (from its running.json): its running trials, or that it ended or is gone."""
    live = summary.live
    if live is None:
        return
    now = time.time()
    driver = f"driver pid {live.pid} on host {live.host}"
    if live.ended:
        say(f"running: none (the last run, {driver}, ended {_ago(now - live.ended_at)} ago: {live.status})")
        return
    if live.stale(now):
        say(f"warning: running.json: the run's {driver} last wrote {_ago(live.age(now))} ago (a live one writes "
              f"every few seconds; over {STALE_SECONDS:.0f} s): it is probably gone (killed, or its machine lost); "
              f"its {live.running} trial(s) listed as running are not counted as running", file=sys.stderr)
        return
    counts = (f"; this run: {live.done} of {live.total} done, {live.failed} failed"
              if None not in (live.done, live.total, live.failed) else "")
    say(f"running: {live.running} (driver pid {live.pid} on host {live.host}, updated {_ago(live.age(now))} ago"
          f"{counts})")
    shown = _batches(live.trials)[:LISTED]
    for group in shown:
        say(f"  {_line(group, now)}")
    rest = live.running - sum(len(group) for group in shown)
    if rest > 0:
        say(f"  and {rest} more running trial(s)")


def _batches(trials: list[LiveTrial]) -> list[list[LiveTrial]]:
    """The trials grouped by the lockstep batch they run in (a batch's trials share their rounds)."""
    groups: dict[object, list[LiveTrial]] = {}
    for trial in trials:
        key = trial.batch if trial.batch_size > 1 and trial.batch else trial.trial_id
        groups.setdefault(key, []).append(trial)
    return list(groups.values())


def _line(group: list[LiveTrial], now: float) -> str:
    first = group[0]
    name = first.run_name or first.trial_id[:12]
    if len(group) > 1:
        name = f"batch of {len(group)} ({name} and {len(group) - 1} more)"
    step = min(trial.round for trial in group)
    latest = max(trial.updated_at for trial in group)
    node = f" on {first.node}" if first.node else ""
    return f"{name}: round {step}/{first.horizon}{node}, last progress {_ago(now - latest)} ago"


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"

