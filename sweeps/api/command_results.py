"""What the Python functions of :mod:`banditsweep.sweeps.api.functions` return: one typed result per command,
each holding what the command said (``output``: its lines, ``warnings`` and notes as data) and, for
the commands about a spec's trials, those trials' tables, statistics and figure, read through one
:class:`~banditsweep.sweeps.results.sweep_results.SweepResults`."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from banditsweep.sweeps.events import Collector
from banditsweep.sweeps.spec.model import Sweep

if TYPE_CHECKING:   # heavy (numpy, core): imported where a command runs
    from banditsweep.sweeps.planning.plan import SweepPlan
    from banditsweep.sweeps.results.sweep_results import SweepResults
    from banditsweep.workers import StatusSummary

__all__ = ["PlanResult", "ReportResult", "RunResult", "StatusResult", "VerifyResult"]



class _SweepResults:
    """What a result offers of the spec's trials in its folder: the tables, the statistics, the figure."""

    sweep: str
    folder: Path
    _planned: Sweep

    @functools.cached_property
    def _store(self):
        from banditsweep.workers import SweepStore

        return SweepStore(self.folder)

    @functools.cached_property
    def _tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        from banditsweep.workers import load

        if not self.folder.is_dir():
            return pd.DataFrame(), pd.DataFrame()
        trials, curves = load(self.folder)
        ids = {trial.trial_id for trial in self._planned.trials}
        trials = trials[trials["trial_id"].isin(ids)].reset_index(drop=True) if not trials.empty else trials
        curves = curves[curves["trial_id"].isin(ids)].reset_index(drop=True) if not curves.empty else curves
        return trials, curves

    @property
    def trials(self) -> pd.DataFrame:
        """The spec's finished and failed trials, one row each, as ``banditsweep.load`` gives them."""
        return self._tables[0]

    @property
    def curves(self) -> pd.DataFrame:
        """The spec's finished trials' curves, one row per trial per round, as ``banditsweep.load`` gives them."""
        return self._tables[1]

    @functools.cached_property
    def _results(self):
        from banditsweep.sweeps.results.sweep_results import SweepResults

        return SweepResults(self._store, self._planned)

    @property
    def statistics(self):
        """The report's statistics of the spec's finished trials (what ``banditsweep.compare`` gives:
        ``cells`` with their ``code`` marks, ``pairs``, ``across``); None before any finished."""
        return self._results.statistics

    def plot(self, band: str = "ci", environments: list[str] | None = None):
        """A matplotlib figure of the mean cumulative regret per round, a panel per environment, each
        algorithm at its chosen grid point with the report's band (``ci``: the 95% interval of the
        mean; ``std``: ±1 standard deviation), as ``banditsweep report`` draws them."""
        return self._results.figure(band, environments)


@dataclass(eq=False)
class RunResult(_SweepResults):
    """What ``banditsweep.run`` did. ``total``: the spec's trials (after ``overrides`` and ``only``);
    ``finished_before`` / ``failed_before``: of them, as the store held them before; ``ran``: the trials
    this run ran, ``finished`` / ``failed`` of those; ``failures``: the records of the spec's failed
    trials; ``exit_code``: the command line's (0, or 1 with failed trials). ``trials``, ``curves``,
    ``statistics`` and ``plot()`` are of the spec's trials in ``folder``."""

    sweep: str
    folder: Path
    total: int
    finished_before: int
    failed_before: int
    ran: int
    finished: int
    failed: int
    seconds: float
    workers: int
    device: str
    exit_code: int
    failures: list = field(default_factory=list, repr=False)
    _planned: Sweep = field(default=None, repr=False)
    output: Collector = field(default_factory=Collector, repr=False)   # what the command said, line by line

    @property
    def warnings(self) -> list[str]:
        """The run's warnings and failed trials' lines, as the command line shows them on stderr."""
        return self.output.warnings

    @property
    def ok(self) -> bool:
        """No trial of the spec is recorded as failed."""
        return self.exit_code == 0

    @property
    def summary(self) -> str:
        """One line on what the run did, and where the results are: also when it found every trial
        done already (``finished`` counts this run's trials only)."""
        if not self.ran:
            if not self.failed_before:
                return f"all {self.total} trials of the spec are already finished in {self.folder}"
            return (f"nothing run: of the spec's {self.total} trials, {self.finished_before} are finished and "
                    f"{self.failed_before} failed in {self.folder} (retry_failed=True runs the failed ones again)")
        before = f"; {self.finished_before} were finished before" if self.finished_before else ""
        return (f"{self.finished} trials finished, {self.failed} failed in {self.seconds:.1f} s{before}; "
                f"results in {self.folder}")

    def __str__(self) -> str:
        return self.summary


@dataclass(eq=False)
class PlanResult:
    """What ``banditsweep.plan`` found: per cell (algorithm label, environment) the trials left, their
    rounds, seconds per round, memory per trial and GPUs (``cells``); the totals; the spec's trials
    finished in the store and left out (``done``); those computed by other code (``other_code``:
    trial id -> the modules that changed; in the plan, since `run` runs them again)."""

    sweep: str
    cells: pd.DataFrame
    trials: int
    trial_rounds: int
    serial_seconds: float
    wall_seconds: float
    workers: int
    unknown: int
    done: int
    other_code: dict[str, list[str]]
    lines: list[str] = field(repr=False)
    plan: SweepPlan | None = field(default=None, repr=False)
    output: Collector = field(default_factory=Collector, repr=False)   # what the command said, line by line

    def __str__(self) -> str:
        return "\n".join(self.lines)


@dataclass(eq=False)
class StatusResult(_SweepResults):
    """What ``banditsweep.status`` found: per cell the trials ``done``, ``failed``, ``running``, ``pending``
    and ``other_code`` (``cells``), their totals, and the check of the result files: ``consistent``
    (None when there is no results folder yet), its ``problems`` and ``notes``; ``exit_code`` the command
    line's (4 when the files disagree)."""

    sweep: str
    folder: Path
    cells: pd.DataFrame
    total: int
    consistent: bool | None
    problems: list[str]
    notes: list[str]
    exit_code: int
    summary: StatusSummary | None = field(default=None, repr=False)
    _planned: Sweep = field(default=None, repr=False)
    output: Collector = field(default_factory=Collector, repr=False)   # what the command said, line by line

    def count(self, what: str) -> int:
        """The spec's trials that are ``what``: done, failed, running, pending or other_code."""
        return int(self.cells[what].sum()) if what in self.cells else 0

    @property
    def done(self) -> int:
        return self.count("done")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def pending(self) -> int:
        return self.count("pending")


@dataclass(eq=False)
class ReportResult:
    """What ``banditsweep.report`` wrote: the ``files`` under ``folder``/report, the MLflow run they were
    attached to (``run_id``; None: not attached), the ``statistics`` they show (``banditsweep.compare``'s,
    with the marks) and the command line's ``exit_code`` (0; 4 where damaged files were left out)."""

    sweep: str
    folder: Path
    files: list[Path]
    run_id: str | None
    exit_code: int
    _planned: Sweep = field(default=None, repr=False)
    output: Collector = field(default_factory=Collector, repr=False)
    _results: SweepResults | None = field(default=None, repr=False)

    @property
    def statistics(self):
        return self._results.statistics if self._results is not None else None

    @property
    def warnings(self) -> list[str]:
        return self.output.warnings


@dataclass(eq=False)
class VerifyResult:
    """What ``banditsweep.verify`` found: the ``sample`` of trial ids re-run, how many ``reproduced``,
    the ``differences`` (trial id -> its first differing round and quantity), the sample's ``seed``,
    whether ``accept`` was asked, and the command line's ``exit_code`` (0, or 4 when one differs)."""

    sweep: str
    sample: list[str]
    reproduced: int
    differences: dict
    seed: int
    accepted: bool
    exit_code: int
    output: Collector = field(default_factory=Collector, repr=False)

    @property
    def ok(self) -> bool:
        return not self.differences
