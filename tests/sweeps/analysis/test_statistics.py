"""The statistics of the report (sweeps.analysis.statistics): intervals that cover at their nominal rate at
the seeds the project ships, paired tests that use the pairing, Holm's adjustment, the three
verdicts, the seeds a comparison needs, and the across-environment aggregates."""

import math

import numpy as np
from scipy import stats
import pytest

from banditsweep.sweeps.analysis import statistics as S


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_interval_of_a_mean_covers_it_at_its_nominal_rate(n):
    rng = np.random.default_rng(n)
    draws = 2000
    covered = 0
    for _ in range(draws):
        interval = S.mean_interval(rng.normal(50.0, 12.0, n))
        covered += interval.low <= 50.0 <= interval.high
    assert abs(covered / draws - 0.95) <= 0.02, covered / draws
    assert S.mean_interval(rng.normal(0, 1, n)).method == "t"


def test_a_bootstrap_only_where_there_are_values_enough():
    rng = np.random.default_rng(0)
    assert S.mean_interval(rng.normal(0, 1, S.BOOTSTRAP_FROM)).method == "BCa bootstrap"
    assert S.mean_interval([3.0, 3.0, 3.0]) == S.Interval(3.0, 3.0, "identical values")
    assert S.mean_interval([1.0]).method == "n < 2" and math.isnan(S.mean_interval([1.0]).low)


def test_pairing_by_seed_tells_apart_what_unpaired_cannot():
    """Each seed's environment moves both algorithms alike (common random numbers): the paired test
    sees a difference of 3 under an environment spread of 30, the unpaired one does not."""
    rng = np.random.default_rng(7)
    environment = rng.normal(100.0, 30.0, 8)
    a = {seed: value + rng.normal(0, 1) for seed, value in enumerate(environment)}
    b = {seed: value + 3.0 + rng.normal(0, 1) for seed, value in enumerate(environment)}
    paired = S.compare("A", a, "B", b)
    unpaired = S.compare("A", a, "B", {seed + 100: value for seed, value in b.items()})
    assert paired.test == "paired t" and paired.p < 0.001 and paired.verdict() == "holds"
    assert unpaired.test == "Welch (unpaired)" and unpaired.p > 0.5
    assert unpaired.verdict().startswith("cannot be told apart")


@pytest.mark.parametrize("n", [3, 5, 12, 40])
def test_a_pairs_verdict_and_its_p_value_come_from_one_test(n):
    """At every n the interval and the p-value are the paired t-test's: the interval excludes 0 exactly
    where p < 5% (a Wilcoxon p beside a t-interval could disagree from 10 pairs on)."""
    rng = np.random.default_rng(n)
    for shift in (0.0, 0.3, 1.0, 3.0):
        a = {seed: float(rng.normal(10, 1)) for seed in range(n)}
        b = {seed: value + shift + float(rng.normal(0, 1)) for seed, value in a.items()}
        comparison = S.compare("A", a, "B", b)
        assert comparison.test == "paired t" and comparison.interval.method == "t"
        assert comparison.interval.excludes(0.0) == (comparison.p < 0.05), (n, shift, comparison)


def test_holm_against_a_hand_computed_case():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.06
    assert S.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert S.holm([0.5, float("nan")])[0] == 0.5 and math.isnan(S.holm([0.5, float("nan")])[1])
    assert S.holm([0.4, 0.6]) == pytest.approx([0.8, 0.8])


def test_the_three_verdicts():
    win = S.compare("GA", {0: 100.0, 1: 110.0, 2: 95.0}, "UCB", {0: 140.0, 1: 152.0, 2: 136.0})
    assert win.verdict("a < b") == "holds" and win.verdict("a > b") == "does not hold"
    loss = S.compare("GA", {0: 140.0, 1: 152.0, 2: 136.0}, "UCB", {0: 100.0, 1: 110.0, 2: 95.0})
    assert loss.verdict("a < b") == "does not hold"
    # Mushroom at T = 2000 as docs/reproduction.md had it: GA 125.0 +- 25.2 against NeuralUCB 121.0.
    few = S.compare("GA", {0: 100.0, 1: 150.0, 2: 125.0}, "UCB", {0: 90.0, 1: 160.0, 2: 113.0})
    # Not "about 3,134 seeds": at n = 3 the difference may be 0, and the most favourable plausible
    # difference and spread still need this many.
    assert few.seeds.high is None and few.seeds.low >= 2
    assert few.verdict() == (f"cannot be told apart at n = 3 (at least {few.seeds.low} seeds would (the difference "
                             f"may be 0))")


def test_identical_on_every_seed_is_an_answer_not_an_error():
    same = S.compare("NeuralUCB", {0: 50.0, 1: 60.0}, "NeuralTS", {0: 50.0, 1: 60.0})
    assert same.difference == 0.0 and same.test == "identical on every seed" and same.p == 1.0
    assert same.verdict() == "cannot be told apart: identical on every seed (n = 2)"


def test_seeds_needed_matches_the_power_of_a_paired_t_test():
    # A standardised effect of 1 needs 10 pairs for 80% power at 5% (two-sided), as power tables give.
    assert S.seeds_needed(10.0, 10.0) == 10
    assert S.seeds_needed(1.0, 10.0) > 700
    assert S.seeds_needed(0.0, 10.0) is None


def test_welch_from_a_papers_summaries():
    difference, interval, p = S.welch_from_summaries(313.1, 20.0, 10, 583.8, 30.0, 10)
    assert difference == pytest.approx(-270.7) and interval.high < 0 and p < 1e-10
    _, interval, p = S.welch_from_summaries(100.0, 40.0, 3, 110.0, 40.0, 3)
    assert interval.low < 0 < interval.high and p > 0.5


def test_across_environments():
    assert S.iqm([0, 1, 2, 3, 4, 5, 6, 100]) == pytest.approx(3.5)   # the outlier is trimmed
    scores = {"mushroom": [0.2, 0.3, 0.25], "shuttle": [0.5, 0.6, 0.55]}
    few = S.stratified_bootstrap(scores, S.iqm)
    assert not np.isfinite(few.low) and few.method.startswith("too few runs for an interval")
    interval = S.stratified_bootstrap(scores, S.iqm, fewest=3)
    assert interval.low <= S.iqm([v for values in scores.values() for v in values]) <= interval.high
    better = {"mushroom": [0.1, 0.1], "shuttle": [0.2, 0.2]}
    assert S.probability_of_improvement(better, scores) == 1.0
    assert S.probability_of_improvement(scores, better) == 0.0
    assert S.probability_of_improvement(scores, scores) == pytest.approx(0.5)
    assert S.performance_profile([0.1, 0.2, 0.5, 0.9], [0.15, 0.5, 1.0]).tolist() == [0.25, 0.75, 1.0]
    assert S.random_policy_regret(500, 2) == 250.0


def _simulated_power(effect: float, n: int, draws: int, rng) -> float:
    differences = rng.normal(effect, 1.0, size=(draws, n))
    t = differences.mean(axis=1) / (differences.std(axis=1, ddof=1) / np.sqrt(n))
    return float(np.mean(np.abs(t) > stats.t.ppf(0.975, n - 1)))


@pytest.mark.parametrize("effect", [8.0, 2.0, 0.5])
def test_seeds_needed_against_a_brute_force_power_simulation(effect):
    """The smallest n with 80% power, checked by simulating paired t-tests at n and n - 1 (scipy's
    noncentral t gives NaN far in a tail: at a standardised effect of 8 the answer is 3, not 2)."""
    rng = np.random.default_rng(int(effect * 10))
    n = S.seeds_needed(effect, 1.0)
    if effect == 8.0:
        assert n == 3
    assert _simulated_power(effect, n, 20000, rng) >= 0.78
    if n > 2:
        assert _simulated_power(effect, n - 1, 20000, rng) < 0.82


def test_seeds_needed_is_a_range_the_data_allow_or_withheld():
    sure = S.compare("A", {s: 10.0 + s for s in range(6)}, "B", {s: 12.5 + s + 0.3 * (s % 2) for s in range(6)})
    assert sure.verdict() == "holds"
    unsure = S.compare("A", {0: 10.0, 1: 14.0, 2: 9.0, 3: 12.0}, "B", {0: 11.0, 1: 13.0, 2: 11.0, 3: 13.5})
    assert unsure.seeds.high is None and unsure.seeds.low is not None   # the interval holds 0: no upper end
    # A difference the interval keeps away from 0 but not decided at 5%: both ends, low below high.
    interval = S.Interval(0.5, 3.0, "t")
    seeds = S.seeds_range(interval, 2.0, 8)
    assert seeds.low < seeds.high and seeds.text() == f"{seeds.low} to {seeds.high} seeds would"
    assert S.seeds_range(interval, 2.0, 2).withheld   # two pairs say nothing about the spread


@pytest.mark.slow   # 240 simulated data sets x 300 resamples: about a minute
@pytest.mark.parametrize("shape", ["normal", "skewed"])
def test_the_across_environment_interval_covers_at_the_runs_it_is_given_for(shape):
    """Coverage of the interquartile mean's interval at IQM_INTERVAL_FROM runs on each of 6
    environments (the population IQM from 10^6 draws), over 120 data sets: measured elsewhere at 95%
    (normal) and 92% (skewed) over 400; here at least 90% and 86% (about two standard errors below).
    The uncorrected percentile interval of 3 runs (86%) would fail the normal case."""
    rng = np.random.default_rng(7 if shape == "normal" else 8)
    means, spreads = rng.uniform(0.1, 0.6, 6), rng.uniform(0.02, 0.15, 6)

    def draw(i, k):
        if shape == "normal":
            return rng.normal(means[i], spreads[i], k)
        return means[i] + spreads[i] * (rng.lognormal(0.0, 0.75, k) - math.exp(0.28))

    truth = S.iqm(np.concatenate([draw(i, 170_000) for i in range(6)]))
    n, hits, sets = S.IQM_INTERVAL_FROM, 0, 120
    for d in range(sets):
        interval = S.stratified_bootstrap({f"e{i}": draw(i, n) for i in range(6)}, S.iqm, resamples=300, seed=d)
        hits += interval.low <= truth <= interval.high
    assert hits / sets >= (0.90 if shape == "normal" else 0.86), hits / sets


def test_does_not_hold_is_decided_for_the_claims_family_after_holm():
    """A claim over 6 environments with one part on the wrong side at p = 0.03 used to read "does not
    hold"; over a family of 6 parts that p is 0.18 after Holm's adjustment: it cannot be told apart.
    A part at p = 0.001 (0.006 adjusted) still decides it. "Holds" needs every part at 5%."""
    from banditsweep.sweeps.analysis.claims import FAILS, HOLDS, UNDECIDED, Part, combine, verdict_text

    undecided = [Part(UNDECIDED, 3, S.SeedsNeeded(5, None), "", 0.5, False) for _ in range(5)]
    weak = Part(FAILS, 3, S.SeedsNeeded(4, 9), "", 0.03, True)
    assert combine([weak, *undecided]).outcome == UNDECIDED
    text = verdict_text([weak, *undecided])
    assert text.startswith("cannot be told apart at n = 3 (on 6 of 6; 1 on the other side at 5% before Holm")
    strong = Part(FAILS, 3, None, "", 0.001, True)
    assert combine([strong, *undecided]).outcome == FAILS
    assert verdict_text([strong, *undecided]) == "does not hold (fails on 1 of 6 after Holm; 5 cannot be told apart)"
    holding = [Part(HOLDS, 3, None, "", 0.01, False) for _ in range(6)]
    assert combine(holding).outcome == HOLDS and verdict_text(holding) == "holds (on 6 of 6)"


def test_a_spread_is_compared_without_assuming_normal_data_or_not_at_all():
    from banditsweep.sweeps.analysis.claims import FAILS, HOLDS, UNJUDGED, std_part

    three = std_part({0: 91.0, 1: 417.0, 2: 432.0}, {0: 300.0, 1: 310.0, 2: 305.0}, 1.0, lower=True)
    assert three.outcome == UNJUDGED and "at least 5 seeds" in three.text
    assert std_part(None, {0: 1.0}, 1.0, lower=True).outcome == UNJUDGED   # summaries alone
    rng = np.random.default_rng(4)
    tight = {s: float(v) for s, v in enumerate(rng.normal(100, 1, 30))}
    wide = {s: float(v) for s, v in enumerate(rng.normal(100, 20, 30))}
    assert std_part(tight, wide, 1.0, lower=True).outcome == HOLDS
    assert std_part(wide, tight, 1.0, lower=True).outcome == FAILS


def test_the_family_is_every_comparison_of_the_claim_not_its_environments():
    """A claim's environments each combine comparisons against several algorithms; Holm runs over all
    of the claim's comparisons. An environment whose comparison with one baseline is on the other side
    at p = 2e-6 fails the claim even where it was combined first (its combined verdict once carried no
    p-value, and the claim read "cannot be told apart"); three environments of undecided parts do not."""
    from banditsweep.sweeps.analysis.claims import FAILS, UNDECIDED, Part, combine, verdict_text

    def environment(*parts):
        return combine(list(parts))

    mnist = environment(Part(FAILS, 10, None, "", 2e-6, True), Part(UNDECIDED, 10, S.SeedsNeeded(9, None), "", 0.4))
    others = [environment(Part(UNDECIDED, 10, S.SeedsNeeded(9, None), "", 0.3),
                          Part(UNDECIDED, 10, S.SeedsNeeded(9, None), "", 0.6)) for _ in range(5)]
    assert mnist.outcome == FAILS and len(mnist.atoms) == 2
    assert verdict_text([mnist, *others]) == "does not hold (fails on 1 of 6 after Holm; 5 cannot be told apart)"
    # At p = 0.01 over the claim's 12 comparisons (0.12 after Holm) the same environment does not decide it.
    weak = environment(Part(FAILS, 10, None, "", 0.01, True), Part(UNDECIDED, 10, S.SeedsNeeded(9, None), "", 0.4))
    assert verdict_text([weak, *others]).startswith("cannot be told apart at n = 10 (on 6 of 6; 1 on the other side")
