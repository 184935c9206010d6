"""The report's statistics from Python, for any results folder: ``banditsweep.compare(results, sweep)``.

The same numbers as ``banditsweep report`` writes (sweeps.results.report.summarise, sweeps.analysis.comparisons),
without a spec: algorithms and environments are named and ordered as the folder's journal holds
them, and nothing is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from banditsweep.sweeps.analysis.comparisons import AcrossEnvironments
from banditsweep.sweeps.results.report import judged_summary, recorded_trials
from banditsweep.workers import FAILED, FINISHED, InputError, ResultsNotFoundError, SweepStore


@dataclass
class SweepStatistics:
    """A sweep's comparisons. ``cells``: one row per (algorithm, environment) at its chosen grid
    point, with mean, std, n, ci_low, ci_high, ci_method (the interval of the mean) and the
    ``trial_ids`` behind it; ``pairs``: every pair of an environment compared by seed
    (sweeps.analysis.comparisons.pair_table); ``across``: the aggregates over environments (None for fewer
    than two environments with a random-policy reference); ``chosen``: on which seeds the grid
    points were chosen."""

    cells: pd.DataFrame
    pairs: pd.DataFrame
    across: AcrossEnvironments | None
    chosen: str
    notes: list[str]


def compare(results_root: str | os.PathLike, sweep: str | None = None, choose_on_seeds: int | None = None,
            same_seeds: bool = False) -> SweepStatistics:
    """The statistics of the finished trials of one sweep folder (``results_root/sweep``; without
    ``sweep``, ``results_root`` is the sweep folder). ``choose_on_seeds``: choose each cell's grid
    point on the first that many seeds and judge on the others (default: half of them where a cell
    has a grid and there are 4 seeds or more, sweeps.results.report.default_choose_on); ``same_seeds``:
    choose and judge on every seed (optimistic, ``chosen`` says so)."""
    root = Path(results_root).expanduser()
    folder = (root / sweep if sweep is not None else root).resolve()
    store = SweepStore(folder)
    store.check_format()
    if not store.journal_dir.is_dir():
        here = sorted(p.name for p in root.iterdir() if (p / ".journal").is_dir()) if root.is_dir() else []
        raise ResultsNotFoundError(f"{folder}: no sweep results here (no journal)" + (
            f"; {root} holds the sweeps {', '.join(here)}" if sweep is not None and here else
            "; give the results root and the sweep's name, or the sweep's folder"))
    trials = recorded_trials(store)
    if trials.empty or not (trials["status"] == FINISHED).any():
        raise InputError(f"{folder}: no finished trials to compare")
    return statistics_of(trials, choose_on_seeds=choose_on_seeds, same_seeds=same_seeds)


def statistics_of(trials: pd.DataFrame, labels: list[str] | None = None, envs: list[str] | None = None,
                  choose_on_seeds: int | None = None, same_seeds: bool = False) -> SweepStatistics:
    """The statistics of ``trials`` (rows of a sweep's recorded trials, sweeps.results.report.recorded_trials;
    its finished ones are compared), algorithms and environments in the order given (else as the
    rows hold them). With the spec at hand, :class:`banditsweep.sweeps.results.sweep_results.SweepResults` gives
    the same, its held-out stage and the marks for other code included."""
    finished, failed = trials[trials["status"] == FINISHED], trials[trials["status"] == FAILED]
    present_labels, present_envs = set(finished["label"]), set(finished["environment"])
    labels = [label for label in (labels or dict.fromkeys(finished["label"])) if label in present_labels]
    envs = [env for env in (envs or dict.fromkeys(finished["environment"])) if env in present_envs]
    summary, _ = judged_summary(finished, labels, envs, failed, choose_on_seeds=choose_on_seeds, same_seeds=same_seeds)
    return statistics_from(summary)


def statistics_from(summary) -> SweepStatistics:
    """The statistics of a report's :class:`~banditsweep.sweeps.results.report.Summary`: its cells (with their
    ``code`` marks), pairs, aggregates, how the grid points were chosen, and its notes."""
    cells = summary.best.rename(columns={"label": "algorithm_label", "seeds": "n"})
    keep = ["algorithm_label", "environment", "grid_point", "mean", "std", "n", "ci_low", "ci_high", "ci_method",
            "seconds_per_round", "trial_ids", "code"]
    return SweepStatistics(cells[keep].rename(columns={"algorithm_label": "algorithm"}), summary.pairs,
                           summary.across, summary.chosen, summary.notes)
