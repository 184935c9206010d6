"""No kernel design hangs on rounding (core.engine.ties): on grids and settings whose greedy quantities tie
exactly in real arithmetic, perturbing every kernel value by up to 2 ulp, or the lengthscale by a few
ulp, leaves the design of every algorithm unchanged; one and several shards choose the same design;
and the design is recorded with every trial (design_digest), which verify does not hold against
trials recorded before it."""

import numpy as np
import pandas as pd
import pytest

from banditsweep.core.engine import ties
from banditsweep.core.kernel.kernels import Kernel
from banditsweep.core.engine.trial import TrialSpec
from sharded_cases import local_shards, sharded_spec

# (registry name, params): every algorithm whose first round builds a design.
DESIGNS = [("kernel_exp3", {}), ("rls_kernel_exp3", {}), ("rls_kernel_exp3_amvr", {}), ("apg_exp3", {})]
# Kernelized Exp3's G-optimal design (App. 16): an eigendecomposition of an n x n matrix per Frank-Wolfe
# iteration, so on a 10 x 10 grid here (capped at 40 iterations: each chooses a point, ties and all) and
# on the larger ones in the slow set.
G_OPTIMAL = ("kernel_exp3", {"exploration": "g_optimal", "design_max_iterations": 40})
GRID_10 = {"kind": "adversarial_kernel", "domain": {"grid": [10, 10]}, "kernel": "se", "candidates": 40,
           "centers": 10}


def _noisy(method, ulps: int, seed: int):
    """A kernel method whose every value moves by up to ``ulps`` units in the last place, as another
    CPU's exp or BLAS may round it (deterministic in the values' shape, different per ``seed``)."""
    def wrapped(self, *args, **kwargs):
        values = np.array(method(self, *args, **kwargs), dtype=np.float64, copy=True)
        steps = np.random.default_rng([seed, values.size]).integers(-ulps, ulps + 1, size=values.shape)
        for _ in range(ulps):
            values = np.where(steps > 0, np.nextafter(values, np.inf), np.where(steps < 0, np.nextafter(values, -np.inf),
                                                                               values))
            steps = steps - np.sign(steps)
        return values
    return wrapped


def _design(algorithm, params, environment, seed=0, horizon=60):
    spec = TrialSpec.create(algorithm, params, environment, seed, horizon)
    env, policy = spec.build()
    policy.select(1, env.contexts(1))
    return policy.diagnostics()["design_digest"]


def _perturbed(monkeypatch, ulps, seed):
    for name in ("__call__", "diag", "matrix", "columns"):
        if hasattr(Kernel, name):
            monkeypatch.setattr(Kernel, name, _noisy(getattr(Kernel, name), ulps, seed))


GRID_20 = {"kind": "adversarial_kernel", "domain": {"grid": [20, 20]}, "kernel": "se", "candidates": 40,
           "centers": 10}


@pytest.mark.parametrize("algorithm,params", DESIGNS)
def test_two_ulp_in_every_kernel_value_moves_no_design(algorithm, params, monkeypatch):
    before = _design(algorithm, params, GRID_20)
    assert before == _design(algorithm, params, GRID_20)   # the record is of the design, and repeatable
    for seed in (1, 2, 3):
        with monkeypatch.context() as patch:
            _perturbed(patch, 2, seed)
            assert _design(algorithm, params, GRID_20) == before, f"{algorithm} {params}: noise draw {seed}"


def test_the_g_optimal_design_does_not_hang_on_rounding(monkeypatch):
    before = _design(*G_OPTIMAL, GRID_10)
    with monkeypatch.context() as patch:
        _perturbed(patch, 2, 5)
        assert _design(*G_OPTIMAL, GRID_10) == before
    assert _design(*G_OPTIMAL, {**GRID_10, "lengthscale": 0.3 * (1 + 4e-15)}) == \
        _design(*G_OPTIMAL, {**GRID_10, "lengthscale": 0.3})


@pytest.mark.parametrize("algorithm,params", DESIGNS)
def test_a_few_ulp_of_the_lengthscale_move_no_design(algorithm, params):
    base = {**GRID_20, "lengthscale": 0.2}
    before = _design(algorithm, params, base)
    for factor in (1 + 4e-15, 1 - 4e-15, 1 + 9e-16):
        assert _design(algorithm, params, {**base, "lengthscale": 0.2 * factor}) == before


@pytest.mark.parametrize("setting", [1, 2])
@pytest.mark.parametrize("algorithm,params", DESIGNS)
def test_the_papers_settings_designs_do_not_hang_on_rounding(setting, algorithm, params, monkeypatch):
    environment = {"kind": "adversarial_kernel", "setting": setting, "kernel": "matern32"}
    before = _design(algorithm, params, environment)
    with monkeypatch.context() as patch:
        _perturbed(patch, 2, 7)
        assert _design(algorithm, params, environment) == before


@pytest.mark.slow
@pytest.mark.parametrize("environment", [
    {"kind": "adversarial_kernel", "domain": {"grid": [50, 50]}, "kernel": "se"},
    {"kind": "adversarial_kernel", "setting": 3, "kernel": "se"},
    {"kind": "adversarial_kernel", "setting": 4, "kernel": "matern52"}])
@pytest.mark.parametrize("algorithm,params", [("kernel_exp3", {}), ("rls_kernel_exp3", {}),
                                               ("rls_kernel_exp3_amvr", {})])
def test_large_grids_and_settings_designs_do_not_hang_on_rounding(environment, algorithm, params, monkeypatch):
    _check_unmoved(environment, algorithm, params, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("environment", [GRID_20, {"kind": "adversarial_kernel", "setting": 2, "kernel": "se"}])
def test_the_g_optimal_design_on_larger_domains(environment, monkeypatch):
    _check_unmoved(environment, *G_OPTIMAL, monkeypatch)


def _check_unmoved(environment, algorithm, params, monkeypatch):
    before = _design(algorithm, params, environment, horizon=100)
    with monkeypatch.context() as patch:
        _perturbed(patch, 2, 11)
        assert _design(algorithm, params, environment, horizon=100) == before


def test_seeds_choose_among_tied_designs_and_a_design_is_a_seeds_own():
    """The design is not one for every seed (which would move every seed of a row together when a
    tie flips), and is the same for a seed whatever ran before it."""
    designs = {seed: _design("kernel_exp3", {}, GRID_20, seed=seed) for seed in range(4)}
    assert len(set(designs.values())) > 1
    assert _design("kernel_exp3", {}, GRID_20, seed=2) == designs[2]


def test_the_rule_itself():
    values = np.array([1.0, 3.0, 3.0 - 1e-12, 2.0, 3.0 - 1e-6])
    assert ties.tied_argmax(values, None) == 1                              # the smallest tied index
    chosen = {ties.tied_argmax(values, key) for key in range(40)}
    assert chosen == {1, 2}                                                 # within RTOL only
    assert ties.tied_argmax(values, 5, indices=np.array([10, 20, 30, 40, 50])) in (1, 2)
    assert ties.tied_argmax(-values, 3, lowest=True) in (1, 2)
    # A value far below the largest at the quantity's scale is tied to it at that scale only.
    small = np.array([1e-12, 1e-12 * (1 + 1e-6)])
    assert ties.tied_argmax(small, None) == 1 and ties.tied_argmax(small, None, scale=1.0) == 0
    # On shards: the same choice as on the whole.
    key = 99
    whole = ties.tied_argmax(values, key)
    parts = [ties.tied_among(values[a:b], ties.threshold(values.max()), key, np.arange(a, b)) for a, b in
             ((0, 2), (2, 4), (4, 5))]
    best = max((p[0], -(p[1] + a), p[1] + a) for p, a in zip(parts, (0, 2, 4)) if p is not None)
    assert best[2] == whole


@pytest.mark.parametrize("algorithm", ["rls_kernel_exp3", "apg_exp3"])
def test_one_and_several_shards_choose_the_same_design(algorithm):
    from banditsweep.core.kernel.sharded.coordinator import run_sharded

    spec = sharded_spec(algorithm, "setting2", horizon=8)
    designs = {shards: run_sharded(spec, local_shards(spec, shards)).diagnostics["design_digest"] for shards in (1, 2, 3)}
    assert len(set(designs.values())) == 1, designs
    unsharded = TrialSpec.create(spec.algorithm, spec.params, spec.environment, spec.seed, spec.horizon)
    env, policy = unsharded.build()
    policy.select(1, env.contexts(1))
    assert policy.diagnostics()["design_digest"] == designs[1]


def test_verify_does_not_hold_a_diagnostic_added_later_against_older_trials():
    from banditsweep.workers import compare_trial
    from banditsweep.workers.storage.record import TrialRecord

    def record(diagnostics):
        return TrialRecord("t" * 20, "s", "kernel_exp3", "K", "e", 0, 2, {}, {}, status="finished",
                           final_regret=1.5, diagnostics=diagnostics)

    curve = pd.DataFrame({"t": [1, 2], "arm": [0, 1], "reward": [0.1, 0.2], "regret": [0.5, 1.0],
                          "cum_regret": [0.5, 1.5]})
    older = record({"eta": 0.1})
    assert compare_trial(older, curve, record({"eta": 0.1, "design_digest": 12345.0}), curve) is None
    differs = compare_trial(record({"eta": 0.1, "design_digest": 1.0}), curve,
                            record({"eta": 0.1, "design_digest": 2.0}), curve)
    assert differs is not None and "design_digest" in differs.what
