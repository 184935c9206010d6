"""A paper's claims judged with statistics (sweeps.statistics), on our trials and on the paper's
own table, over the environments and algorithms run here.

Each claim says that on every environment of its scope ``algorithm``'s ``statistic`` is lower (or
higher) than that of every algorithm of ``than``, optionally within a ``tolerance`` (the NeuralRBMLE
paper's 1% rule for Table 1: "lower" then means below (1 + tolerance) x the other's). The rules:

- **mean** (of the final regret): per environment and other algorithm, the difference
  a - (1 + tolerance) b with its 95% interval: paired by seed on our trials (sweeps.statistics.compare),
  Welch's test from means, standard deviations and n on a paper's table. ``holds`` where the
  interval lies wholly on the claimed side, ``does not hold`` where wholly on the other, else
  ``cannot be told apart at n`` with the seeds a paired test would need.
- **std**: the 95% F-interval of the ratio of standard deviations (sweeps.statistics.std_ratio_interval),
  against 1 + tolerance; the seeds an F-test would need.
- **seconds_per_round**: the means compared as numbers (a measured cost; its seed-to-seed noise is
  the machine's, not the algorithm's).
- "On every environment" (and "than every other") is the conjunction of the single verdicts, an
  intersection-union test: it holds where every part holds, each at 5%, with no adjustment needed;
  it does not hold where one part does not; else it cannot be told apart.

Beside the statistical verdict each claim keeps the plain comparison of the means (``ours_means``,
``paper_means``), as the paper states its claims.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from banditsweep.sweeps.statistics import (ALPHA, MOST_SEEDS, SIGN_TEST, Comparison, compare, compare_summaries,
                                           seeds_needed_for_std_ratio, std_ratio_interval)

HOLDS, FAILS, UNDECIDED, UNJUDGED = "holds", "does not hold", "cannot be told apart", "cannot be judged"
RULES = {"mean": "paired by seed (ours), Welch from the table's means, stds and n (the paper's); 95% intervals",
         "std": "95% F-interval of the ratio of standard deviations",
         "seconds_per_round": "means compared as numbers"}


def _more_seeds(seeds: int | None) -> str:
    if seeds is None:
        return "no difference to detect"
    return f"more than {MOST_SEEDS:,} seeds would" if seeds > MOST_SEEDS else f"about {seeds} seeds would"


class Part:
    """One verdict of a claim: on one environment against one other algorithm."""

    def __init__(self, outcome: str, n: int, seeds: int | None, text: str):
        self.outcome, self.n, self.seeds, self.text = outcome, n, seeds, text


def _mean_part(comparison: Comparison, lower: bool) -> Part:
    interval = comparison.interval
    if comparison.test == "identical on every seed":
        return Part(UNDECIDED, comparison.n, None, "identical on every seed")
    if not np.isfinite(interval.low):
        return Part(UNJUDGED, comparison.n, None, f"n = {comparison.n}")
    if comparison.test == SIGN_TEST and not comparison.p < ALPHA:
        return Part(UNDECIDED, comparison.n, comparison.seeds, f"the same difference {comparison.difference:.4g} on "
                    f"every seed, sign test p = {comparison.p:.2g}")
    below, above = interval.high < 0, interval.low > 0
    outcome = (HOLDS if below else FAILS if above else UNDECIDED) if lower else \
        (HOLDS if above else FAILS if below else UNDECIDED)
    text = (f"difference {comparison.difference:.4g} [{interval.low:.4g}, {interval.high:.4g}], {comparison.test}, "
            f"n = {comparison.n}, p = {comparison.p:.2g}")
    return Part(outcome, comparison.n, comparison.seeds, text)


def _std_part(std_a: float, n_a: int, std_b: float, n_b: int, bound: float, lower: bool) -> Part:
    interval = std_ratio_interval(std_a, n_a, std_b, n_b)
    n = min(n_a, n_b)
    if not np.isfinite(interval.low):
        return Part(UNJUDGED, n, None, f"ratio of stds at n = {n}: {interval.method}")
    if lower:
        outcome = HOLDS if interval.high < bound else FAILS if interval.low > bound else UNDECIDED
    else:
        outcome = HOLDS if interval.low > bound else FAILS if interval.high < bound else UNDECIDED
    ratio = std_a / std_b
    return Part(outcome, n, seeds_needed_for_std_ratio(ratio / bound),
                f"ratio of stds {ratio:.3g} [{interval.low:.3g}, {interval.high:.3g}] (F), n = {n}")


def combine(parts: list[Part]) -> Part | None:
    """The conjunction of verdicts (module docstring); None where none could be judged."""
    judged = [p for p in parts if p.outcome != UNJUDGED]
    if not judged:
        return None
    n = min(p.n for p in judged)
    if any(p.outcome == FAILS for p in judged):
        return Part(FAILS, n, None, "")
    undecided = [p for p in judged if p.outcome == UNDECIDED]
    if undecided:
        needed = [p.seeds for p in undecided]
        seeds = None if any(s is None for s in needed) else max(needed)
        return Part(UNDECIDED, n, seeds, "")
    return Part(HOLDS, n, None, "")


def verdict_text(parts: list[Part], unjudged: int = 0) -> str:
    """``holds (on 6 of 6)``, ``does not hold (fails on 2 of 6)`` or ``cannot be told apart at n = 3 (on
    4 of 6; about 14 seeds would)``, over the per-environment verdicts."""
    judged = [p for p in parts if p.outcome != UNJUDGED]
    if not judged:
        return UNJUDGED
    count = len(judged)
    fails = sum(p.outcome == FAILS for p in judged)
    undecided = [p for p in judged if p.outcome == UNDECIDED]
    if fails:
        more = f"; {len(undecided)} cannot be told apart" if undecided else ""
        return f"{FAILS} (fails on {fails} of {count}{more})"
    if undecided:
        overall = combine(undecided)
        return (f"{UNDECIDED} at n = {overall.n} (on {len(undecided)} of {count}; {_more_seeds(overall.seeds)})")
    return f"{HOLDS} (on {count} of {count})"


def judge_environment(statistic: str, lower: bool, tolerance: float, name: str, others: list[str],
                      values: Callable[[str, str], float], finals: Callable[[str], Mapping[int, float] | None],
                      counts: Callable[[str], int], label: Mapping[str, str]) -> tuple[Part | None, str]:
    """The verdict of one environment (the conjunction over ``others``) and its details. ``values(name,
    statistic)``: a cell's mean, std or seconds; ``finals(name)``: its final regret per seed, or None
    where only summaries are known; ``counts(name)``: its seeds."""
    scale = 1 + tolerance if lower else 1 / (1 + tolerance)
    parts, details = [], []
    for other in others:
        if statistic == "seconds_per_round":
            x, y = values(name, statistic), values(other, statistic) * scale
            ok = x <= y if lower else x >= y
            parts.append(Part(HOLDS if ok else FAILS, min(counts(name), counts(other)), None, ""))
            details.append(f"{label[other]}: {x:.3g} {'<=' if ok == lower else '>'} {y:.3g}")
            continue
        if statistic == "std":
            part = _std_part(values(name, "std"), counts(name), values(other, "std"), counts(other), scale, lower)
        else:
            a, b = finals(name), finals(other)
            if a is not None and b is not None:
                comparison = compare(name, a, other, {seed: v * scale for seed, v in b.items()})
            else:
                comparison = compare_summaries(name, values(name, "mean"), values(name, "std"), counts(name), other,
                                               values(other, "mean") * scale, values(other, "std") * scale,
                                               counts(other))
            part = _mean_part(comparison, lower)
        parts.append(part)
        scaled = "" if not tolerance else f" x {scale:.3g}"
        details.append(f"{label[other]}{scaled}: {part.text}: {part.outcome}"
                       + (f" ({_more_seeds(part.seeds)})" if part.outcome == UNDECIDED else ""))
    return combine(parts), "; ".join(details)
