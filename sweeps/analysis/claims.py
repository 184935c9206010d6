"""A paper's claims judged with statistics (sweeps.analysis.statistics), on our trials and on the paper's
own table, over the environments and algorithms run here.

Each claim says that on every environment of its scope ``algorithm``'s ``statistic`` is lower (or
higher) than that of every algorithm of ``than``, optionally within a ``tolerance`` (the NeuralRBMLE
paper's 1% rule for Table 1: "lower" then means below (1 + tolerance) x the other's). The rules:

- **mean** (of the final regret): per environment and other algorithm, the difference
  a - (1 + tolerance) b with its 95% interval: paired by seed on our trials (sweeps.analysis.statistics.compare),
  Welch's test from means, standard deviations and n on a paper's table. ``holds`` where the
  interval lies wholly on the claimed side, ``does not hold`` where wholly on the other, else
  ``cannot be told apart at n`` with the seeds a paired test would need.
- **std**: the spread of the final regrets compared without assuming normal data, by the
  Brown-Forsythe test (Levene's test about the medians) on our per-seed values, against 1 + tolerance
  (the other's values scaled by it); below :data:`MIN_SPREAD_SEEDS` seeds of each, or from a paper's
  summaries alone (no values to test), it cannot be judged. (An F-interval of the ratio would assume
  normal data, fragile with three values such as 91 / 417 / 432.)
- **seconds_per_round**: the means compared as numbers (a measured cost; its seed-to-seed noise is
  the machine's, not the algorithm's).
- "On every environment" (and "than every other") is a family of parts. It **holds** where every part
  holds, each at 5%: an intersection-union test, which needs no adjustment. It **does not hold** where
  some part lies on the other side with a p-value below 5% after Holm's adjustment over the claim's
  parts (a family-wise error of 5% for saying "does not hold"); a part on the other side at 5% before
  the adjustment only is undecided. Else it cannot be told apart.

Beside the statistical verdict each claim keeps the plain comparison of the means (``ours_means``,
``paper_means``), as the paper states its claims.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
from scipy import stats

from banditsweep.sweeps.analysis.statistics import (ALPHA, SIGN_TEST, Comparison, SeedsNeeded, compare,
                                                    compare_summaries, holm)

HOLDS, FAILS, UNDECIDED, UNJUDGED = "holds", "does not hold", "cannot be told apart", "cannot be judged"
RULES = {"mean": "paired by seed (ours), Welch from the table's means, stds and n (the paper's); 95% intervals",
         "std": f"Brown-Forsythe test of equal spread on the per-seed values (at least {5} seeds of each)",
         "seconds_per_round": "means compared as numbers"}
FAMILY_RULE = ("holds: every part holds at 5% (intersection-union); does not hold: a part on the other side at 5% "
               "after Holm's adjustment over the claim's parts; else cannot be told apart")
MIN_SPREAD_SEEDS = 5


def _more_seeds(seeds: SeedsNeeded | None) -> str:
    return seeds.text() if seeds is not None else "no difference to detect"


class Part:
    """One verdict of a claim: on one environment against one other algorithm. ``p``: the two-sided
    p-value of its test (0 where numbers are compared as such, NaN where none); ``wrong_side``: its
    estimate lies on the other side of the claim."""

    def __init__(self, outcome: str, n: int, seeds: SeedsNeeded | None, text: str, p: float = float("nan"),
                 wrong_side: bool = False, atoms: list["Part"] | None = None):
        self.outcome, self.n, self.seeds, self.text = outcome, n, seeds, text
        self.p, self.wrong_side = p, wrong_side
        # The single comparisons a combined verdict stands on (an environment's, against each other
        # algorithm): Holm's adjustment is over all of a claim's, whatever they are grouped by.
        self.atoms = atoms if atoms is not None else [self]


def mean_part(comparison: Comparison, lower: bool) -> Part:
    interval = comparison.interval
    if comparison.test == "identical on every seed":
        return Part(UNDECIDED, comparison.n, None, "identical on every seed", 1.0)
    if not np.isfinite(interval.low):
        return Part(UNJUDGED, comparison.n, None, f"n = {comparison.n}")
    wrong = comparison.difference > 0 if lower else comparison.difference < 0
    if comparison.test == SIGN_TEST and not comparison.p < ALPHA:
        return Part(UNDECIDED, comparison.n, comparison.seeds, f"the same difference {comparison.difference:.4g} on "
                    f"every seed, sign test p = {comparison.p:.2g}", comparison.p, wrong)
    below, above = interval.high < 0, interval.low > 0
    outcome = (HOLDS if below else FAILS if above else UNDECIDED) if lower else \
        (HOLDS if above else FAILS if below else UNDECIDED)
    text = (f"difference {comparison.difference:.4g} [{interval.low:.4g}, {interval.high:.4g}], {comparison.test}, "
            f"n = {comparison.n}, p = {comparison.p:.2g}")
    return Part(outcome, comparison.n, comparison.seeds, text, comparison.p, wrong)


def std_part(a: Mapping[int, float] | None, b: Mapping[int, float] | None, bound: float, lower: bool) -> Part:
    """The spreads of ``a`` and ``b`` (per-seed final regrets, b's scaled by ``bound``) by the Brown-Forsythe test."""
    if a is None or b is None:
        return Part(UNJUDGED, 0, None, "a spread from summaries alone cannot be compared without assuming normal data")
    x, y = np.asarray(list(a.values()), float), np.asarray(list(b.values()), float) * bound
    n = min(len(x), len(y))
    if n < MIN_SPREAD_SEEDS:
        return Part(UNJUDGED, n, None, f"spread at n = {n}: a test that assumes no normal data needs at least "
                                       f"{MIN_SPREAD_SEEDS} seeds of each")
    sx, sy = float(np.std(x, ddof=1)), float(np.std(y, ddof=1))
    if sx == sy:
        return Part(UNDECIDED, n, None, f"equal spreads at n = {n}", 1.0)
    p = float(stats.levene(x, y, center="median").pvalue)
    wrong = sx > sy if lower else sx < sy
    outcome = (FAILS if wrong else HOLDS) if p < ALPHA else UNDECIDED
    withheld = SeedsNeeded(None, None, "no power formula without a model of the spread's distribution")
    return Part(outcome, n, withheld if outcome == UNDECIDED else None,
                f"stds {sx:.3g} and {sy:.3g}, Brown-Forsythe p = {p:.2g}, n = {n}", p, wrong)


def _failing(judged: list[Part]) -> list[bool]:
    """Which parts fail after Holm's adjustment over the family: on the other side, adjusted p < 5%."""
    adjusted = holm([part.p for part in judged])
    return [part.outcome == FAILS and part.wrong_side and np.isfinite(q) and q < ALPHA
            for part, q in zip(judged, adjusted)]


def _widest(seeds: list[SeedsNeeded | None]) -> SeedsNeeded | None:
    """The seeds every part of a family needs: the largest low and high ends (unbounded if one is)."""
    known = [s for s in seeds if s is not None]
    if not known or any(s.withheld for s in known):
        return next((s for s in known if s.withheld), None)
    lows = [s.low for s in known if s.low is not None]
    high = None if any(s.high is None for s in known) else max(s.high for s in known)
    return SeedsNeeded(max(lows) if lows else None, high)


def _atoms(parts: list[Part]) -> list[Part]:
    return [atom for part in parts for atom in part.atoms if atom.outcome != UNJUDGED]


def combine(parts: list[Part]) -> Part | None:
    """The family's verdict (module docstring); None where no part could be judged."""
    judged = [p for p in parts if p.outcome != UNJUDGED]
    if not judged:
        return None
    n, atoms = min(p.n for p in judged), _atoms(judged)
    if all(p.outcome == HOLDS for p in judged):
        return Part(HOLDS, n, None, "", atoms=atoms)
    if any(_failing(atoms)):
        return Part(FAILS, n, None, "", atoms=atoms)
    undecided = [p for p in judged if p.outcome != HOLDS]
    return Part(UNDECIDED, n, _widest([p.seeds for p in undecided]), "", atoms=atoms)


def verdict_text(parts: list[Part], unjudged: int = 0) -> str:
    """``holds (on 6 of 6)``, ``does not hold (fails on 2 of 6 after Holm)`` or ``cannot be told apart
    at n = 3 (on 4 of 6; 12 to 40 seeds would)``, over the per-environment verdicts."""
    judged = [p for p in parts if p.outcome != UNJUDGED]
    if not judged:
        return UNJUDGED
    count = len(judged)
    # A part fails where one of its comparisons is on the other side after Holm over all of the
    # claim's comparisons (every environment's against every other algorithm).
    atoms = _atoms(judged)
    failed = {id(atom) for atom, fail in zip(atoms, _failing(atoms)) if fail}
    failing = [any(id(atom) in failed for atom in part.atoms) for part in judged]
    fails = sum(failing)
    undecided = [p for p, f in zip(judged, failing) if p.outcome != HOLDS and not f]
    if fails:
        more = f"; {len(undecided)} cannot be told apart" if undecided else ""
        return f"{FAILS} (fails on {fails} of {count} after Holm{more})"
    if undecided:
        before = sum(any(atom.outcome == FAILS and atom.wrong_side for atom in p.atoms) for p in undecided)
        unadjusted = f"; {before} on the other side at 5% before Holm's adjustment only" if before else ""
        overall = combine(undecided) or Part(UNDECIDED, min(p.n for p in undecided), None, "")
        return (f"{UNDECIDED} at n = {overall.n} (on {len(undecided)} of {count}{unadjusted}; "
                f"{_more_seeds(_widest([p.seeds for p in undecided]))})")
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
            parts.append(Part(HOLDS if ok else FAILS, min(counts(name), counts(other)), None, "", 0.0, not ok))
            details.append(f"{label[other]}: {x:.3g} {'<=' if ok == lower else '>'} {y:.3g}")
            continue
        if statistic == "std":
            part = std_part(finals(name), finals(other), scale, lower)
        else:
            a, b = finals(name), finals(other)
            if a is not None and b is not None:
                comparison = compare(name, a, other, {seed: v * scale for seed, v in b.items()})
            else:
                comparison = compare_summaries(name, values(name, "mean"), values(name, "std"), counts(name), other,
                                               values(other, "mean") * scale, values(other, "std") * scale,
                                               counts(other))
            part = mean_part(comparison, lower)
        parts.append(part)
        scaled = "" if not tolerance else f" x {scale:.3g}"
        details.append(f"{label[other]}{scaled}: {part.text}: {part.outcome}"
                       + (f" ({_more_seeds(part.seeds)})" if part.outcome == UNDECIDED else ""))
    return combine(parts), "; ".join(details)
