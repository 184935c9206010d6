"""The statistics of :mod:`banditsweep.sweeps.analysis.statistics` applied to a sweep's results: each cell's
interval, every pair of algorithms of an environment compared by seed, which cell is significantly
the best of its column, and the aggregates across environments (Agarwal et al., NeurIPS 2021).

A cell is an (algorithm label, environment) at its chosen grid point (``Summary.best``: the grid
point of lowest mean final regret, sweeps.results.report.summarise). The grid point is chosen on the same
seeds it is then judged on, which flatters the chosen points;
:func:`banditsweep.sweeps.results.report.summarise_held_out` (``report --choose-on-seeds N``) chooses on some
seeds and judges on the others.

Across environments, a final regret is normalised by the uniformly random policy's expected final
regret on its environment (:func:`reference_regret`): T (1 - 1/K) on a classification bandit (no
trial needed; K from the dataset catalogue), else the mean final regret of the sweep's ``random``
algorithm there, else the environment is left out of the aggregates, and a note says so. 0 is a
policy with no regret, 1 one no better than picking arms at random.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from banditsweep.sweeps.analysis.statistics import (ALPHA, Comparison, adjusted, compare, iqm, performance_profile,
                                                    probability_of_improvement, random_policy_regret,
                                                    stratified_bootstrap)

RANDOM_ALGORITHM = "random"   # the registry name of the uniformly random policy


def final_by_seed(trials: pd.DataFrame, trial_ids: list[str]) -> pd.Series:
    """The final regret of each seed of one cell (its chosen grid point's trials), indexed by seed."""
    chosen = trials[trials["trial_id"].isin(trial_ids)].drop_duplicates("trial_id", keep="last")
    return chosen.set_index("seed")["final_regret"].astype(float).sort_index()


def pair_verdict(comparison: Comparison) -> str:
    """Which of the two has the lower regret, where the interval says so, and whether that survives
    Holm's adjustment over the environment's pairs."""
    text = comparison.verdict("a < b")
    significant = np.isfinite(comparison.p_adjusted) and comparison.p_adjusted < ALPHA
    if text == "holds":
        return f"{comparison.a} lower" if significant else f"{comparison.a} lower (not after Holm)"
    if text == "does not hold":
        return f"{comparison.b} lower" if significant else f"{comparison.b} lower (not after Holm)"
    return text


PAIRS_CAPTION = ("final regret of each pair of algorithms, a - b at their chosen grid points, mean difference "
                 "with its 95% interval; paired by seed (the trials of one seed share the environment's random "
                 "stream): the paired t-test, which gives both the interval and p (it assumes roughly normal "
                 "differences), Welch's test where the seeds do not match; p Holm-adjusted over the "
                 "pairs of each environment; seeds_needed: the seeds a paired t-test would need for 80% power "
                 "at 5%, as the range over the difference's and the spread's 95% intervals (none below 3 pairs); "
                 "candidates_a / _b: the grid points each chose among (where chosen and judged on the same seeds, "
                 "the one with more is flattered more)")
SAME_SEEDS = ("The grid points were chosen on the same seeds they are judged on, which flatters the chosen "
              "points: an optimistic reading (with seeds to spare a report holds half of them out by default)")
ONE_POINT = "Each cell has one configuration: no grid point was chosen, and no seed flatters a choice"


def pair_table(trials: pd.DataFrame, best: pd.DataFrame, columns: dict[str, str] | None = None,
               order: list[str] | None = None) -> pd.DataFrame:
    """Per environment, every pair of algorithms at their chosen grid points (``best``: one row per
    cell with ``label``, ``environment``, ``trial_ids``) compared on final regret (:func:`compare`),
    p-values Holm-adjusted over the environment's pairs. ``columns`` names each environment as its
    table column, ``order`` lists the labels in the order pairs name them (a before b). One row per pair: environment, a, b, n, difference (a - b), ci_low, ci_high, test,
    p, p_holm, seeds_needed, verdict."""
    rows = []
    for environment in dict.fromkeys(best["environment"]):
        cells = best[best["environment"] == environment]
        finals = {row["label"]: final_by_seed(trials, row["trial_ids"]) for _, row in cells.iterrows()}
        among = {row["label"]: int(row["candidates"]) if "candidates" in cells.columns else 1
                 for _, row in cells.iterrows()}
        labels = sorted(finals, key=lambda label: (order or []).index(label) if label in (order or []) else len(finals))
        pairs = [compare(a, finals[a].to_dict(), b, finals[b].to_dict())
                 for i, a in enumerate(labels) for b in labels[i + 1:]]
        for comparison in adjusted(pairs):
            rows.append({"environment": (columns or {}).get(environment, environment), "a": comparison.a,
                         "b": comparison.b, "n": comparison.n, "difference": comparison.difference,
                         "ci_low": comparison.interval.low, "ci_high": comparison.interval.high,
                         "test": comparison.test, "p": comparison.p, "p_holm": comparison.p_adjusted,
                         "seeds_needed": comparison.seeds.text() if comparison.seeds is not None else "",
                         "verdict": pair_verdict(comparison), "candidates_a": among[comparison.a],
                         "candidates_b": among[comparison.b]})
    return pd.DataFrame(rows, columns=["environment", "a", "b", "n", "difference", "ci_low", "ci_high", "test", "p",
                                       "p_holm", "seeds_needed", "verdict", "candidates_a", "candidates_b"])


def significant_best(pairs: pd.DataFrame, mean: pd.DataFrame) -> dict[str, str]:
    """Column -> the algorithm whose cell is bold: the one of lowest mean that is lower than every
    other algorithm of its column by the pairs' test at 5% after Holm's adjustment (``pairs``:
    :func:`pair_table` with environments named as ``mean``'s columns). A column of one algorithm,
    or whose best is not significantly below every other, has no bold cell."""
    bold = {}
    for column in mean.columns:
        values = mean[column].dropna()
        if len(values) < 2:
            continue
        best = values.idxmin()
        rows = pairs[(pairs["environment"] == column) & ((pairs["a"] == best) | (pairs["b"] == best))]
        if len(rows) != len(values) - 1:
            continue

        def lower(row) -> bool:
            below = row["ci_high"] < 0 if row["a"] == best else row["ci_low"] > 0
            return bool(below and np.isfinite(row["p_holm"]) and row["p_holm"] < ALPHA)

        if all(lower(row) for _, row in rows.iterrows()):
            bold[column] = best
    return bold


def significance_rule(seeds: str) -> str:
    """The bold rule of :func:`significant_best` in words, for a caption."""
    return (f"bold: lower than every other algorithm of its column at 5% after Holm's adjustment over the "
            f"column's pairs (paired by seed: the paired t-test; {seeds})")


# ---- across environments ------------------------------------------------------------------------

def reference_regret(config: dict, horizon: int) -> float | None:
    """The uniformly random policy's expected final regret on an environment where it is known
    without a trial: T (1 - 1/K) on a classification bandit of a catalogued dataset; else None."""
    if config.get("kind") != "classification":
        return None
    from banditsweep.core.neural.datasets import DATASETS

    info = DATASETS.get(config.get("dataset"))
    return None if info is None else random_policy_regret(horizon, info.classes)


@dataclass
class AcrossEnvironments:
    """The aggregates over environments of normalised final regret (module docstring)."""

    scores: dict[str, dict[str, np.ndarray]]   # label -> environment -> normalised final regrets (its seeds)
    references: pd.DataFrame   # environment, reference regret, how it was found
    iqm: pd.DataFrame          # label, environments, runs, iqm, ci_low, ci_high, interval (its method), mean
    improvement: pd.DataFrame  # P(row's regret < column's) on a random environment
    notes: list[str] = field(default_factory=list)

    def profile(self, thresholds: np.ndarray) -> dict[str, np.ndarray]:
        """Per label, the fraction of its runs with normalised regret at most each threshold."""
        return {label: performance_profile(np.concatenate(list(by_env.values())), thresholds)
                for label, by_env in self.scores.items()}


def across_environments(trials: pd.DataFrame, best: pd.DataFrame, columns: dict[str, str] | None = None
                        ) -> AcrossEnvironments | None:
    """IQM of normalised final regret per algorithm with a stratified-bootstrap interval (seeds
    resampled within each environment), and the probability of improvement of each pair, over the
    environments every algorithm ran and that have a reference (:func:`reference_regret`). None for
    a sweep of fewer than two such environments."""
    columns = columns or {}
    if best.empty or not {"horizon", "environment_config"} <= set(trials.columns):
        return None
    by_id = trials.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    references, notes = [], []
    for environment in dict.fromkeys(best["environment"]):
        cells = best[best["environment"] == environment]
        ids = [tid for ids in cells["trial_ids"] for tid in ids if tid in by_id.index]
        horizons = sorted({int(h) for h in by_id.loc[ids, "horizon"]})
        name = columns.get(environment, environment)
        if len(horizons) != 1:
            notes.append(f"{name}: left out (its trials have horizons {horizons})")
            continue
        value = reference_regret(json.loads(by_id.loc[ids[0], "environment_config"]), horizons[0])
        how = "T (1 - 1/K), the random policy's expectation"
        if value is None and "algorithm" in cells.columns:
            random = cells[cells["algorithm"] == RANDOM_ALGORITHM]
            if len(random) == 1:
                finals = final_by_seed(trials, random.iloc[0]["trial_ids"])
                value, how = float(finals.mean()), f"the random policy's mean over {len(finals)} seeds"
        if value is None or not np.isfinite(value) or value <= 0:
            notes.append(f"{name}: left out (no random-policy reference: not a classification bandit, and no "
                         f"`{RANDOM_ALGORITHM}` algorithm ran there)")
            continue
        references.append({"environment": name, "key": environment, "reference_regret": value, "how": how})
    envs = [r["key"] for r in references]
    labels = [label for label in dict.fromkeys(best["label"])]
    present = {label: set(best[best["label"] == label]["environment"]) for label in labels}
    common = [env for env in envs if all(env in present[label] for label in labels)]
    for env in envs:
        if env not in common:
            missing = [label for label in labels if env not in present[label]]
            notes.append(f"{columns.get(env, env)}: left out ({', '.join(missing)} did not run there)")
    if len(common) < 2:
        return None
    reference = {r["key"]: r["reference_regret"] for r in references}
    scores: dict[str, dict[str, np.ndarray]] = {}
    for _, row in best[best["environment"].isin(common)].iterrows():
        finals = final_by_seed(trials, row["trial_ids"]).to_numpy()
        scores.setdefault(row["label"], {})[row["environment"]] = finals / reference[row["environment"]]
    iqm_rows = []
    for label in labels:
        interval = stratified_bootstrap(scores[label], iqm)
        runs = np.concatenate(list(scores[label].values()))
        iqm_rows.append({"algorithm": label, "environments": len(scores[label]), "runs": len(runs),
                         "iqm": iqm(runs), "ci_low": interval.low, "ci_high": interval.high,
                         "interval": interval.method, "mean": float(runs.mean())})
    improvement = pd.DataFrame([[probability_of_improvement(scores[x], scores[y]) if x != y else math.nan
                                 for y in labels] for x in labels],
                               index=pd.Index(labels, name="P(row < column)"), columns=labels)
    kept = pd.DataFrame([r for r in references if r["key"] in common]).drop(columns=["key"])
    return AcrossEnvironments(scores, kept, pd.DataFrame(iqm_rows), improvement, notes)
