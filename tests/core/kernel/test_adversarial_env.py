"""The adaptive adversarial kernel environment (SPEC 2.1, 2.3)."""

import numpy as np
import pytest
from pydantic import ValidationError

from banditsweep.core.engine import registry
from banditsweep.core.engine.contracts import ADVERSARIAL_DOMAIN, Decision
from banditsweep.core.kernel.adversarial_kernel import AdversarialKernelBandit, AdversarialKernelConfig
from banditsweep.core.engine.trial import TrialSpec, run_trial


def small_env(seed=0, horizon=20, **overrides):
    config = AdversarialKernelConfig(**{"domain": {"grid": [12, 10]}, "kernel": "matern52",
                                        "candidates": 50, "centers": 10, **overrides})
    return AdversarialKernelBandit(config, horizon, np.random.default_rng(seed))


def test_registry_and_problem():
    assert registry.environment_class("adversarial_kernel") is AdversarialKernelBandit
    env = small_env()
    problem = env.problem
    assert (problem.num_arms, problem.dim, problem.interaction) == (120, 2, ADVERSARIAL_DOMAIN)
    assert problem.norm_bound == 2.0 and problem.kernel.name == "matern52"
    assert env.contexts(1) is env.contexts(7)  # the same domain array every round


def test_candidate_table_matches_the_dense_definition():
    """f^(i) = min{1, B/||f~||} f~, f~ = sum_m c k(x_m, .), redrawn from the same seed by hand."""
    env = small_env(seed=4)
    rng = np.random.default_rng(4)
    domain = env.domain  # grid domain: no random draws before the table
    n = len(domain)
    index = rng.integers(0, n, size=(50, 10))
    coefficients = rng.uniform(-1, 1, size=(50, 10))
    dense = env.kernel.matrix(domain)
    for i in range(50):
        raw = coefficients[i] @ dense[index[i]]
        norm = np.sqrt(coefficients[i] @ dense[np.ix_(index[i], index[i])] @ coefficients[i])
        np.testing.assert_allclose(env.table[i], min(1.0, 2.0 / norm) * raw, atol=1e-12)
        assert env.raw_norms[i] == pytest.approx(norm)


def test_adversary_is_the_brute_force_argmax_and_regret_bookkeeping():
    env = small_env(seed=1, horizon=30)
    rng = np.random.default_rng(9)
    picks, realised, expected = [], 0.0, 0.0
    total = np.zeros(len(env.domain))
    previous = 0.0
    for t in range(1, 31):
        p = rng.dirichlet(np.full(len(env.domain), 0.3))
        arm = int(rng.integers(len(env.domain)))
        gaps = [max(f) - sum(pi * fi for pi, fi in zip(p, f)) for f in env.table]
        best = int(np.argmax(gaps))
        assert env.adversary(p) == best
        feedback = env.step(t, Decision(arm, p))
        f = env.table[best]
        total += f
        realised += f[arm]
        expected += f @ p
        assert feedback.reward == f[arm]
        assert feedback.cumulative_regret == pytest.approx(total.max() - realised)
        assert feedback.regret == pytest.approx(feedback.cumulative_regret - previous)
        assert feedback.extras["expected_regret"] == pytest.approx(total.max() - expected)
        previous = feedback.cumulative_regret
        picks.append(best)
    assert env.diagnostics()["distinct_adversary_choices"] == len(set(picks))


def test_step_requires_probabilities():
    env = small_env()
    with pytest.raises(ValueError, match="P_t"):
        env.step(1, Decision(0, None))
    with pytest.raises(ValueError, match="one entry per domain point"):
        env.step(1, Decision(0, np.ones(3) / 3))


@pytest.mark.parametrize("config, message", [
    ({}, "exactly one of 'setting'"),
    ({"setting": 1, "domain": {"grid": [4]}}, "exactly one of 'setting'"),
    ({"setting": 5}, "setting"),
    ({"setting": 1, "kernel": "matern"}, "needs 'nu'"),
    ({"setting": 1, "kernel": "se", "nu": 1.0}, "only used with kernel 'matern'"),
    ({"setting": 1, "kernel": "rbf"}, "kernel"),
    ({"setting": 1, "norm_bound": 0}, "norm_bound"),
    ({"setting": 1, "candidates": 1000, "typo": 3}, "typo"),
    ({"domain": {"uniform": 10}}, "dim"),
])
def test_config_validation_errors_are_clear(config, message):
    with pytest.raises(ValidationError, match=message):
        AdversarialKernelConfig(**config)


def test_uniform_domain_and_general_matern_through_a_trial():
    environment = {"kind": "adversarial_kernel", "domain": {"uniform": 60, "dim": 3}, "kernel": "matern",
                   "nu": 0.5, "candidates": 40, "centers": 5}
    spec = TrialSpec.create("random", {}, environment, seed=2, horizon=15)
    assert spec.environment["lengthscale"] is None and spec.environment["candidates"] == 40
    first, second = run_trial(spec), run_trial(spec)
    np.testing.assert_array_equal(first.cum_regret, second.cum_regret)
    np.testing.assert_array_equal(first.extras["expected_regret"], second.extras["expected_regret"])
    assert first.diagnostics["domain_size"] == 60


def test_setting_label():
    spec = TrialSpec.create("random", {}, {"kind": "adversarial_kernel", "setting": 2, "kernel": "matern32"}, 0, 5)
    assert spec.environment_label.startswith("adversarial_kernel:setting=2,kernel=")
    assert "kernel=matern32" in spec.environment_label
