"""Statistics a reviewer accepts, on numpy and scipy: intervals for a cell's mean, paired comparisons
over seeds with a multiplicity adjustment, the number of seeds a comparison needs, and the
across-environment aggregates of Agarwal et al. (NeurIPS 2021): the interquartile mean with
stratified-bootstrap intervals, the probability of improvement and performance profiles.

Choices, each said where it is used:

- **Interval of a mean** (:func:`mean_interval`): the t-interval below :data:`BOOTSTRAP_FROM` values,
  BCa bootstrap from there on (no normality assumed). A bootstrap of 3 values has at most 10
  distinct resamples, and at the seeds bandit papers run it is too narrow: measured over 1000 draws
  of normal data, BCa covered the mean 89% of the time at n = 10 and 93% at n = 20, the t-interval
  95% at n = 3, 5, 10 and 20 (tests/sweeps/analysis/test_statistics.py checks the t-interval's rate).
- **Paired comparison** (:func:`compare`): trials of one seed on one environment see the same data
  order (classification) or candidate table (adversarial kernel), so two algorithms are compared on
  the differences of their seeds, which removes the environment's share of the variance. The paired
  t-test at every n, its interval the t-interval of the differences: one test gives both the
  verdict and the p-value, so they cannot disagree (a Wilcoxon p beside a t-interval could). Seeds
  that do not match: Welch's test on the two samples, said so. Identical results on every seed: a
  difference of 0, "identical on every seed" (not NaN).
- **Holm's step-down adjustment** (:func:`holm`) over the comparisons of one environment.
- **Seeds needed** (:func:`seeds_range`): not a number but the range the data allow. The power of a
  paired t-test (80% at level 5%, noncentral t) is evaluated at the ends of the observed difference's
  95% interval and of the spread's (chi-square) 95% interval: "12 to 40 seeds would", "at least 9
  (the difference may be 0)" where the interval holds 0, nothing below 3 pairs. Plugging the observed
  difference and spread in as true values (as :func:`seeds_needed` alone does) claims a precision
  that 3 seeds do not have.
- **Verdict** (:func:`verdict`): ``holds`` where the interval of the difference lies wholly on the
  claimed side, ``does not hold`` where it lies wholly on the other, else ``cannot be told apart at
  n = 3 (about 14 seeds would)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95
ALPHA = 0.05
POWER = 0.80
BOOTSTRAP_FROM = 30      # values from which a mean's interval is a BCa bootstrap (t-interval below)
BOOTSTRAP_RESAMPLES = 9999
MOST_SEEDS = 100_000     # seeds_needed answers "more than this" above it
SIGN_TEST = "sign test (the same difference on every seed)"
SEED = 20211206          # the bootstrap's random stream: the same data give the same interval


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str          # "t", "BCa bootstrap", "identical values", "n < 2"

    def excludes(self, value: float) -> bool:
        return bool(np.isfinite(self.low) and (self.low > value or self.high < value))


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """A ``level`` confidence interval of the mean of ``values`` (method chosen by n, module docstring)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 2:
        return Interval(math.nan, math.nan, "n < 2")
    if np.all(x == x[0]):
        return Interval(float(x[0]), float(x[0]), "identical values")
    mean, sem = float(x.mean()), float(x.std(ddof=1) / math.sqrt(n))
    if n < BOOTSTRAP_FROM:
        half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sem
        return Interval(mean - half, mean + half, "t")
    result = stats.bootstrap((x,), np.mean, confidence_level=level, n_resamples=BOOTSTRAP_RESAMPLES,
                             method="BCa", random_state=np.random.default_rng(SEED))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (np.isfinite(low) and np.isfinite(high)):   # BCa undefined (e.g. one value differs): percentile
        result = stats.bootstrap((x,), np.mean, confidence_level=level, n_resamples=BOOTSTRAP_RESAMPLES,
                                 method="percentile", random_state=np.random.default_rng(SEED))
        return Interval(float(result.confidence_interval.low), float(result.confidence_interval.high),
                        "percentile bootstrap")
    return Interval(low, high, "BCa bootstrap")


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b`` (lower is better): the mean difference a - b with its interval, the test
    and its p-value (``p_adjusted`` once :func:`holm` ran over a family), and the seeds needed."""

    a: str
    b: str
    n: int                       # pairs (paired) or the smaller sample (unpaired)
    difference: float            # mean of a - b (paired), or mean(a) - mean(b)
    interval: Interval
    test: str                    # "paired t", "Welch (unpaired)", "identical on every seed",
                                 # "sign test (the same difference on every seed)"
    p: float
    p_adjusted: float = math.nan
    spread: float = math.nan     # std of the paired differences (the unpaired: pooled)
    seeds: "SeedsNeeded | None" = None   # the seeds a t-test (paired, or unpaired where the test is) would
                                         # need, as the range the data allow (None: no difference)

    @property
    def paired(self) -> bool:
        return self.test != "Welch (unpaired)"

    def verdict(self, claim: str = "a < b") -> str:
        return verdict(self, claim)


def compare(a_name: str, a: Mapping[int, float], b_name: str, b: Mapping[int, float], level: float = LEVEL
            ) -> Comparison:
    """Compare the final regrets ``a`` and ``b`` (seed -> value) of two algorithms on one environment:
    paired by seed where every seed of one is a seed of the other, else unpaired (Welch)."""
    seeds = sorted(set(a) & set(b))
    if seeds and set(a) == set(b):
        diff = np.array([a[s] - b[s] for s in seeds], dtype=float)
        n = len(diff)
        if np.all(diff == 0):
            return Comparison(a_name, b_name, n, 0.0, Interval(0.0, 0.0, "identical values"),
                              "identical on every seed", 1.0, spread=0.0, seeds=None)
        spread = float(diff.std(ddof=1)) if n > 1 else math.nan
        test = "paired t"
        p = float(stats.ttest_1samp(diff, 0.0).pvalue) if n > 1 and spread > 0 else math.nan
        if n > 1 and spread == 0:
            # The same non-zero difference on every seed (integer regrets make it likely at few seeds):
            # the t statistic is undefined, and n signs that agree are all the evidence there is. The
            # exact sign test's p, 2 / 2^n (0.25 at n = 3, 0.03 at n = 6), not a p of 0.
            p, test = float(stats.binomtest(n, n, 0.5).pvalue), SIGN_TEST
            needed = max(n, math.ceil(math.log2(2 / (1 - level))))   # seeds whose agreeing signs reach the level
            return Comparison(a_name, b_name, n, float(diff[0]), mean_interval(diff, level), test, p,
                              spread=0.0, seeds=SeedsNeeded(needed, needed) if p >= 1 - level else None)
        interval = t_interval(diff, level)
        return Comparison(a_name, b_name, n, float(diff.mean()), interval, test, p,
                          spread=spread, seeds=seeds_range(interval, spread, n))
    x, y = np.asarray(list(a.values()), float), np.asarray(list(b.values()), float)
    n = min(len(x), len(y))
    if n < 2:
        return Comparison(a_name, b_name, n, float(x.mean() - y.mean()) if n else math.nan,
                          Interval(math.nan, math.nan, "n < 2"), "Welch (unpaired)", math.nan)
    test = stats.ttest_ind(x, y, equal_var=False)
    low, high = test.confidence_interval(level)
    pooled = math.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2)
    difference = float(x.mean() - y.mean())
    interval = Interval(float(low), float(high), "Welch")
    return Comparison(a_name, b_name, n, difference, interval, "Welch (unpaired)", float(test.pvalue), spread=pooled,
                      seeds=seeds_range(interval, pooled, n, paired=False))


def welch_from_summaries(mean_a: float, std_a: float, n_a: int, mean_b: float, std_b: float, n_b: int,
                         level: float = LEVEL) -> tuple[float, Interval, float]:
    """(difference, interval, p) of Welch's test from means, standard deviations and counts only
    (what a paper's table gives)."""
    va, vb = std_a ** 2 / n_a, std_b ** 2 / n_b
    difference = mean_a - mean_b
    se = math.sqrt(va + vb)
    if se == 0:
        return difference, Interval(difference, difference, "identical values"), 1.0 if difference == 0 else 0.0
    dof = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    p = float(2 * stats.t.sf(abs(difference) / se, dof))
    return difference, Interval(difference - half, difference + half, "Welch"), p


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (NaN stays NaN and is not counted)."""
    p = np.asarray(pvalues, dtype=float)
    valid = np.flatnonzero(np.isfinite(p))
    adjusted = np.full(len(p), math.nan)
    m = len(valid)
    running = 0.0
    for rank, index in enumerate(valid[np.argsort(p[valid], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def adjusted(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """The comparisons of one family (one environment) with their Holm-adjusted p-values."""
    from dataclasses import replace

    return [replace(c, p_adjusted=q) for c, q in zip(comparisons, holm([c.p for c in comparisons]))]


def seeds_needed(difference: float, spread: float, alpha: float = ALPHA, power: float = POWER,
                 paired: bool = True) -> int | None:
    """The smallest number of seeds at which a two-sided paired t-test at level ``alpha`` has
    ``power`` against a true mean difference ``difference`` with differences of std ``spread``
    (noncentral t); unpaired (``paired=False``): seeds per algorithm of a two-sample t-test, ``spread``
    the common std. None without a difference to detect; MOST_SEEDS + 1 beyond MOST_SEEDS."""
    if not np.isfinite(difference) or difference == 0:
        return None
    if not np.isfinite(spread):
        return None
    if spread == 0:
        return 2
    effect = abs(difference) / spread

    def power_at(n: int) -> float:
        dof = n - 1 if paired else 2 * n - 2
        critical = float(stats.t.ppf(1 - alpha / 2, dof))
        shift = effect * math.sqrt(n if paired else n / 2)
        return _two_sided_power(critical, dof, shift)

    return _smallest_n(power_at, power)


def _two_sided_power(critical: float, dof: int, shift: float) -> float:
    """P(|T'| > critical) for T' noncentral t. scipy's nct gives NaN far in a tail (scipy 1.17:
    ``nct.cdf(-c, 1, 8 sqrt 2)``), which a comparison takes for "too little": a tail it cannot
    compute is far from the centre, 0 below it, 1 above it."""
    upper = float(stats.nct.sf(critical, dof, shift))
    lower = float(stats.nct.cdf(-critical, dof, shift))
    if not math.isfinite(upper):
        upper = 1.0 if shift > critical else 0.0
    if not math.isfinite(lower):
        lower = 1.0 if shift < -critical else 0.0
    return min(1.0, upper + lower)


@dataclass(frozen=True)
class SeedsNeeded:
    """The seeds a comparison would need (80% power at 5%), as the range its data allow: ``low`` at the
    most favourable ends of the difference's and the spread's intervals, ``high`` at the least
    favourable (None: unbounded, the difference may be 0); ``withheld`` says why there is no range."""

    low: int | None
    high: int | None
    withheld: str = ""

    def text(self) -> str:
        if self.withheld:
            return self.withheld
        if self.low is None:
            return "no difference to detect"
        low = _seed_count(self.low)
        if self.high is None:
            return f"at least {low} seeds would (the difference may be 0)"
        return f"about {low} seeds would" if self.high == self.low else f"{low} to {_seed_count(self.high)} seeds would"

    def __str__(self) -> str:
        return self.text()


def _seed_count(n: int) -> str:
    return f"more than {MOST_SEEDS:,}" if n > MOST_SEEDS else str(n)


MIN_PAIRS_FOR_SEEDS = 3   # below, the spread of 2 differences says nothing: no range is given


def seeds_range(interval: Interval, spread: float, n: int, paired: bool = True, level: float = LEVEL
                ) -> SeedsNeeded | None:
    """The seeds needed (:func:`seeds_needed`) over the plausible differences (``interval``) and spreads
    (the chi-square ``level`` interval of ``spread`` from n - 1 degrees of freedom): module docstring."""
    if not np.isfinite(interval.low) or not np.isfinite(spread):
        return None
    if n < MIN_PAIRS_FOR_SEEDS:
        return SeedsNeeded(None, None, f"n = {n} cannot say how many seeds would")
    if interval.low == interval.high == 0:
        return None
    dof = n - 1 if paired else 2 * n - 2
    spread_low = spread * math.sqrt(dof / float(stats.chi2.ppf(0.5 + level / 2, dof)))
    spread_high = spread * math.sqrt(dof / float(stats.chi2.ppf(0.5 - level / 2, dof)))
    largest = max(abs(interval.low), abs(interval.high))
    smallest = 0.0 if interval.low <= 0 <= interval.high else min(abs(interval.low), abs(interval.high))
    low = seeds_needed(largest, spread_low, paired=paired)
    high = seeds_needed(smallest, spread_high, paired=paired) if smallest > 0 else None
    return SeedsNeeded(low, high)


def t_interval(values: np.ndarray, level: float = LEVEL) -> Interval:
    """The ``level`` t-interval of the mean of ``values`` (the paired comparison's, at every n)."""
    n = len(values)
    if n < 2:
        return Interval(math.nan, math.nan, "n < 2")
    mean, sem = float(np.mean(values)), float(np.std(values, ddof=1) / math.sqrt(n))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sem
    return Interval(mean - half, mean + half, "t")


def _smallest_n(power_at, power: float) -> int:
    """The smallest n >= 2 with ``power_at(n) >= power`` (power grows with n): doubling, then
    bisection; MOST_SEEDS + 1 beyond MOST_SEEDS."""
    low, high = 2, 2
    while power_at(high) < power:
        if high > MOST_SEEDS:
            return MOST_SEEDS + 1
        low, high = high + 1, high * 2
    while low < high:
        middle = (low + high) // 2
        if power_at(middle) >= power:
            high = middle
        else:
            low = middle + 1
    return high


def verdict(comparison: Comparison, claim: str = "a < b") -> str:
    """``holds``, ``does not hold`` or ``cannot be told apart at n = k (about m seeds would)`` for the
    claim that a's regret is below b's (``"a < b"``) or above it (``"a > b"``)."""
    interval = comparison.interval
    if comparison.test == "identical on every seed":
        return f"cannot be told apart: identical on every seed (n = {comparison.n})"
    if comparison.test == SIGN_TEST and not comparison.p < ALPHA:
        return (f"cannot be told apart at n = {comparison.n} (the same difference on every seed; "
                f"{comparison.seeds.text()})")
    if not np.isfinite(interval.low):
        return f"cannot be judged at n = {comparison.n}"
    below, above = interval.high < 0, interval.low > 0
    if (claim == "a < b" and below) or (claim == "a > b" and above):
        return "holds"
    if (claim == "a < b" and above) or (claim == "a > b" and below):
        return "does not hold"
    more = comparison.seeds.text() if comparison.seeds is not None else "no difference to detect"
    return f"cannot be told apart at n = {comparison.n} ({more})"


# ---- across environments (Agarwal et al. 2021) ---------------------------------------------------

def iqm(values: Sequence[float]) -> float:
    """The interquartile mean: the mean of the middle 50% of the values (robust, yet efficient)."""
    x = np.asarray(values, dtype=float)
    return float(stats.trim_mean(x, 0.25)) if len(x) else math.nan


IQM_INTERVAL_FROM = 10   # runs per environment from which the across-environment interval is given


def stratified_bootstrap(scores: Mapping[str, Sequence[float]], statistic, level: float = LEVEL,
                         resamples: int = 2000, seed: int = SEED, fewest: int = IQM_INTERVAL_FROM) -> Interval:
    """A ``level`` interval of ``statistic`` over all runs, resampling seeds within each environment
    (the strata), so that every environment keeps its weight.

    Agarwal et al.'s percentile interval covered the interquartile mean 86% of the time at 3 runs per
    environment and 88.5% at 5 (6 environments, normal scores, 200 data sets). Here each stratum's
    resample is spread by sqrt(n / (n - 1)) about the stratum's mean (a resample's spread is (n - 1) / n
    of the data's) and the interval is the estimate +- the t quantile with k (n - 1) degrees of freedom
    times the resamples' standard deviation. Measured (6 environments, 200-400 data sets each; the test
    in tests/sweeps/analysis/test_statistics.py repeats it): at 10 runs per environment 95% on normal and 92% on skewed
    (lognormal) scores, at 20 runs 94% on both; at 3 and 5 runs 95 / 91.5% and 94.5 / 89.5%, too unsure
    on skewed scores: below ``fewest`` runs per environment no interval is given ("too few runs for an
    interval")."""
    strata = [np.asarray(v, dtype=float) for v in scores.values() if len(v)]
    if not strata:
        return Interval(math.nan, math.nan, "no runs")
    n = min(len(s) for s in strata)
    if n < max(fewest, 2):
        return Interval(math.nan, math.nan, f"too few runs for an interval ({n} per environment, {fewest} needed)")
    rng = np.random.default_rng(seed)
    inflate = [math.sqrt(len(s) / (len(s) - 1)) for s in strata]
    values = np.empty(resamples)
    for r in range(resamples):
        parts = []
        for s, k in zip(strata, inflate):
            drawn = s[rng.integers(0, len(s), len(s))]
            parts.append(s.mean() + (drawn - s.mean()) * k)
        values[r] = statistic(np.concatenate(parts))
    estimate = float(statistic(np.concatenate(strata)))
    half = float(stats.t.ppf(0.5 + level / 2, len(strata) * (n - 1))) * float(values.std(ddof=1))
    return Interval(estimate - half, estimate + half, "stratified bootstrap (t)")


def probability_of_improvement(x: Mapping[str, Sequence[float]], y: Mapping[str, Sequence[float]]) -> float:
    """P(X < Y): the chance that a run of algorithm X has a lower (normalised) regret than a run of Y
    on the same environment (ties count half), averaged over the environments both have."""
    per_environment = []
    for env in sorted(set(x) & set(y)):
        a, b = np.asarray(x[env], float), np.asarray(y[env], float)
        if len(a) and len(b):
            less = (a[:, None] < b[None, :]).mean()
            ties = (a[:, None] == b[None, :]).mean()
            per_environment.append(less + ties / 2)
    return float(np.mean(per_environment)) if per_environment else math.nan


def performance_profile(scores: Sequence[float], thresholds: Sequence[float]) -> np.ndarray:
    """The fraction of runs whose normalised regret is at most each threshold (lower is better)."""
    x = np.asarray(scores, dtype=float)
    return np.array([(x <= tau).mean() if len(x) else math.nan for tau in thresholds])


def random_policy_regret(horizon: int, arms: int) -> float:
    """The uniformly random policy's expected regret on a classification bandit, T (1 - 1/K): a
    reward of 1 for the true class, 0 otherwise, so each round loses 1 - 1/K in expectation."""
    return horizon * (1.0 - 1.0 / arms)


# ---- from a paper's summaries ------------------------------------------------------------------

def compare_summaries(a_name: str, mean_a: float, std_a: float, n_a: int, b_name: str, mean_b: float, std_b: float,
                      n_b: int, level: float = LEVEL) -> Comparison:
    """:func:`compare` where only means, standard deviations and counts are known (a paper's table):
    Welch's test, unpaired (the seeds' values are not there to pair)."""
    if min(n_a, n_b) < 2 or not all(np.isfinite([mean_a, std_a, mean_b, std_b])):
        return Comparison(a_name, b_name, min(n_a, n_b), mean_a - mean_b, Interval(math.nan, math.nan, "n < 2"),
                          "Welch from summaries", math.nan)
    difference, interval, p = welch_from_summaries(mean_a, std_a, n_a, mean_b, std_b, n_b, level)
    spread = math.sqrt((std_a ** 2 + std_b ** 2) / 2)
    return Comparison(a_name, b_name, min(n_a, n_b), difference, interval, "Welch from summaries", p,
                      spread=spread, seeds=seeds_range(interval, spread, min(n_a, n_b), paired=False))
