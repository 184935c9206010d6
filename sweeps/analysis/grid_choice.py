"""Which grid point of each cell a sweep's numbers are given at, by one rule for every reader.

The papers' tuning rule: for each (algorithm label, environment) cell, the grid point with the lowest
mean final regret over seeds. Stated in full here because a report, ``run``'s table, a result's
``.statistics`` and a spec's held-out stage (sweeps.planning.confirmation) must all choose alike: failed points
are left out, ties within :data:`CHOICE_RTOL` go to the earliest point in the spec's grid order, and
which seeds choose (:func:`default_choose_on`) is stated with every number judged after the choice
(sweeps.results.report.judged_summary).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd


# Grid points whose mean final regrets lie within this relative distance of the lowest are tied: the
# earliest of them in the spec's grid order is chosen, on every CPU (a tie, not the last bits of a sum of
# floats or the order trials finished in, decides the choice).
CHOICE_RTOL = 1e-9


@dataclass
class Choice:
    """Each cell's chosen grid point (``best``: one row per (label, environment)), every grid point's
    aggregates (``grouped``) and notes on points left out of the choice."""

    best: pd.DataFrame
    grouped: pd.DataFrame
    notes: list[str]


def choose_grid_points(trials: pd.DataFrame, failed: pd.DataFrame | None = None) -> Choice:
    """Best grid point per (algorithm label, environment) by mean final regret (the papers' tuning
    rule). A grid point with a failed trial (``failed``: a seed that diverged, say) is not a
    candidate: the mean of the seeds that survived would flatter it. Only where every grid point of
    a cell has one is the best of what finished chosen, and a note says so. Means within
    :data:`CHOICE_RTOL` of the cell's lowest are tied, and the earliest in the spec's grid order wins
    (``plan_order``, :func:`finished_trials`; without a spec, the first by the parameters' JSON text).
    ``sweeps.planning.confirmation`` runs what this chooses on fresh seeds, so a report and a run
    choose alike."""
    named = {"algorithm": ("algorithm", "first")} if "algorithm" in trials.columns else {}
    ended = trials.assign(failed=0)
    if failed is not None and not failed.empty:   # failed trials' grid points, also where no seed finished
        ended = pd.concat([ended, failed.assign(failed=1, final_regret=np.nan, seconds_per_round=np.nan)],
                          ignore_index=True)
    # The spec's order, whatever order the trials ended in; without a spec (a results folder alone),
    # the order of the parameters' text.
    ended = ended.sort_values("plan_order" if "plan_order" in ended.columns else "params", kind="stable")
    # observed=True throughout: label and environment are categorical as the store reads them, and pandas
    # before 3.0 otherwise groups every combination of their categories (a label at another label's grid
    # points, with no trials).
    grouped = (ended.groupby(["label", "environment", "params"], sort=False, observed=True)
               .agg(mean=("final_regret", "mean"), std=("final_regret", "std"), seeds=("final_regret", "count"),
                    seconds_per_round=("seconds_per_round", "mean"), seconds_std=("seconds_per_round", "std"),
                    failed=("failed", "sum"), trial_ids=("trial_id", list), **named)
               .reset_index())
    grouped[["std", "seconds_std"]] = grouped[["std", "seconds_std"]].fillna(0.0)
    # Candidates: the grid points whose every trial finished; all of a cell's where none did.
    cell = ["label", "environment"]
    has_complete = grouped.groupby(cell, sort=False, observed=True)["failed"].transform("min") == 0
    candidates = grouped[((grouped["failed"] == 0) | ~has_complete) & grouped["mean"].notna()]
    lowest = candidates.groupby(cell, sort=False, observed=True)["mean"].transform("min")
    tied = candidates[candidates["mean"] <= lowest + CHOICE_RTOL * lowest.abs()]
    best = tied.groupby(cell, sort=False, observed=True).head(1).reset_index(drop=True)
    # How many grid points each cell chose among: a choice among more is flattered more by the seeds it
    # was chosen on (pairs say whose choice had more candidates).
    counts = grouped.groupby(cell, sort=False, observed=True)["params"].nunique()
    best["candidates"] = [int(counts[(row["label"], row["environment"])]) for _, row in best.iterrows()]
    notes = []
    for (label, environment), left_out in grouped[grouped["failed"] > 0].groupby(cell, sort=False, observed=True):
        points = "; ".join(_point_text(grouped, label, environment, row) for _, row in left_out.iterrows())
        chosen = "every grid point has failed seeds: the best of the finished ones is shown" if not \
            has_complete[left_out.index].any() else "left out of the choice of the best"
        notes.append(f"{label} | {environment}: {chosen} ({points})")
    return Choice(best, grouped, notes)


HOLD_OUT_FROM = 4   # seeds from which a report holds some out by default (half chooses, half judges)


def default_choose_on(trials: pd.DataFrame) -> int | None:
    """The seeds a report chooses grid points on by default: the first half where some cell has more
    than one grid point and the trials have at least :data:`HOLD_OUT_FROM` seeds; None (choose and
    judge on every seed, said to flatter the choice) where there are fewer, or nothing to choose."""
    if trials.empty:
        return None
    seeds = trials["seed"].nunique()
    grid = trials.groupby(["label", "environment"], observed=True)["params"].nunique().max()
    return seeds // 2 if grid > 1 and seeds >= HOLD_OUT_FROM else None


def _point_text(grouped: pd.DataFrame, label: str, environment: str, row) -> str:
    values = grid_values(grouped, label, environment, row["params"])
    point = ", ".join(f"{key}={value}" for key, value in values.items()) or "its only grid point"
    return f"{point}: {row['failed']} of {row['failed'] + row['seeds']} seeds failed"


def grid_values(grouped: pd.DataFrame, label: str, environment: str, params: str) -> dict:
    """The values of ``params`` that the grid varied for this (label, environment) (``{"nu": 0.1}``);
    empty when the label had one point there."""
    cell = grouped[(grouped["label"] == label) & (grouped["environment"] == environment)]
    points = [json.loads(text) for text in cell["params"]]
    chosen = json.loads(params)
    return {k: chosen[k] for k in chosen if len({json.dumps(p.get(k), sort_keys=True) for p in points}) > 1}
