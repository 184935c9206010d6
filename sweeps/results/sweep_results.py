"""A sweep's results as its spec plans them: one object behind the report, the commands' tables and
the Python results, so that a number, its interval and its mark for other code are computed once and
read the same wherever they appear.

:class:`SweepResults` holds a store and the spec's planned trials (a held-out stage's confirming
trials included, sweeps.planning.confirmation) and computes, each once: the recorded trials, the finished and
failed ones named as the spec names them, the trials computed by other code than today's, the judged
summary (grid points chosen and judged as :func:`banditsweep.sweeps.results.report.judged_summary` says, with
its caption), the statistics ``banditsweep.compare`` gives, and the regret figure.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pandas as pd

from banditsweep.sweeps.spec.model import Sweep
from banditsweep.workers import FAILED, SweepStore, compare_code


def label_order(sweep: Sweep) -> list[str]:
    """The algorithms' labels in the spec's order (tables' rows, figures' colours)."""
    return list(dict.fromkeys(t.label for t in sweep.trials))


def env_order(sweep: Sweep) -> list[str]:
    return list(dict.fromkeys(t.environment for t in sweep.trials))


def other_code_of(store: SweepStore, sweep: Sweep) -> dict[str, list[str]]:
    """The spec's finished trials computed by code other than today's, with the modules that changed."""
    journal = store.journal() if store.root.is_dir() else {}
    return compare_code(((t.spec, f"{t.label} | {t.environment}") for t in sweep.trials), journal).other


@dataclass(eq=False)
class SweepResults:
    """The results of ``sweep``'s planned trials in ``store``; ``choose_on_seeds`` / ``same_seeds``
    as ``banditsweep report``'s options (default: the spec's held-out stage where it ran, else half
    the seeds choose where there are seeds to spare)."""

    store: SweepStore
    sweep: Sweep
    choose_on_seeds: int | None = None
    same_seeds: bool = False

    @functools.cached_property
    def recorded(self) -> pd.DataFrame:
        from banditsweep.sweeps.results.report import recorded_trials

        return recorded_trials(self.store) if self.store.root.is_dir() else pd.DataFrame()

    @functools.cached_property
    def finished(self) -> pd.DataFrame:
        from banditsweep.sweeps.results.report import finished_trials

        return finished_trials(self.recorded, self.sweep.trials)

    @functools.cached_property
    def failed(self) -> pd.DataFrame:
        from banditsweep.sweeps.results.report import finished_trials

        return finished_trials(self.recorded, self.sweep.trials, FAILED)

    @functools.cached_property
    def other_code(self) -> dict[str, list[str]]:
        return other_code_of(self.store, self.sweep)

    @functools.cached_property
    def _judged(self):
        from banditsweep.sweeps.results.report import judged_summary

        if self.finished.empty:
            return None, ""
        spec = self.sweep.spec
        return judged_summary(self.finished, label_order(self.sweep), env_order(self.sweep), self.failed,
                              self.other_code, choose_on_seeds=self.choose_on_seeds, same_seeds=self.same_seeds,
                              choosing_seeds=spec.seed_list, confirm_seeds=spec.confirm_seeds)

    @property
    def summary(self):
        """The report's :class:`~banditsweep.sweeps.results.report.Summary`; None before any trial finished."""
        return self._judged[0]

    @property
    def chosen_by(self) -> str:
        """How the grid points were chosen: ``confirm``, ``asked``, ``default`` or ``same``."""
        return self._judged[1]

    @functools.cached_property
    def statistics(self):
        """What ``banditsweep.compare`` gives (cells with their marks, pairs, across, chosen); None
        before any trial finished."""
        from banditsweep.sweeps.results.compare import statistics_from

        return None if self.summary is None else statistics_from(self.summary)

    def figure(self, band: str = "ci", environments: list[str] | None = None):
        """The report's regret curves as one matplotlib figure (a panel per environment)."""
        from banditsweep.sweeps.publishing.figures import BANDS, regret_figure

        if band not in BANDS:
            raise ValueError(f"band: {band!r} is not allowed; allowed: {', '.join(BANDS)}")
        if self.summary is None:
            raise ValueError(f"{self.sweep.name}: no finished trials in {self.store.root} to plot")
        return regret_figure(self.store, self.summary, band, environments)
