"""The lower-bound hard instance (kernel paper Sec. 5, App. 13): its construction, norm bound and the
gap between the clipped and the Gaussian instance."""

import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import special

from banditsweep.core.engine import registry
from banditsweep.core.engine.contracts import ADVERSARIAL_DOMAIN, Decision
from banditsweep.core.kernel.kernel_lower_bound import (KernelLowerBound, KernelLowerBoundConfig,
                                                        lower_bound_rate, noise_threshold)
from banditsweep.core.engine.trial import TrialSpec, run_trial

ENV = {"kind": "kernel_lower_bound", "domain": {"grid": [15, 4]}, "kernel": "matern52", "centers": 12}


def make(seed=0, horizon=20, **overrides):
    config = KernelLowerBoundConfig(**{"domain": {"grid": [15, 4]}, "kernel": "matern52", "centers": 12,
                                       **overrides})
    return KernelLowerBound(config, horizon, np.random.default_rng(seed))


def rkhs_norm(env, coefficient):
    """||f + c k(0, .)||_k from the representer: a^T K a over the centres of f and the point 0."""
    points = np.vstack([env.domain[env.center_index], np.zeros((1, env.domain.shape[1]))])
    weights = np.append(env.coefficients, coefficient)
    return math.sqrt(max(weights @ env.kernel(points, points) @ weights, 0.0))


def test_registry_problem_and_label():
    assert registry.environment_class("kernel_lower_bound") is KernelLowerBound
    env = make()
    problem = env.problem
    assert (problem.num_arms, problem.dim, problem.interaction) == (60, 2, ADVERSARIAL_DOMAIN)
    assert problem.norm_bound == 2.0 and problem.kernel.name == "matern52"
    spec = TrialSpec.create("random", {}, {"kind": "kernel_lower_bound", "setting": 1}, 0, 10)
    assert spec.environment_label == "kernel_lower_bound:setting=1,kernel=se"
    gaussian = TrialSpec.create("random", {}, {"kind": "kernel_lower_bound", "setting": 2, "noise": "gaussian"}, 0, 10)
    assert gaussian.environment_label == "kernel_lower_bound:setting=2,kernel=se,noise=gaussian"
    assert set(KernelLowerBound.round_extras) == {"expected_regret", "pseudo_regret", "noise_coefficient", "clipped"}


def test_reward_functions_are_f_plus_a_multiple_of_k_at_the_origin():
    """f_t = f + c_t k(0, .), f = (B/2) f~ / ||f~||_k, c_t = B eta_t / (2 sqrt(2 log(2 T^2))), redrawn by hand."""
    horizon = 30
    env = make(seed=3, horizon=horizon)
    rng = np.random.default_rng(3)
    index = rng.integers(0, 60, size=12)
    raw = rng.uniform(-1, 1, size=12)
    dense = env.kernel.matrix(env.domain)
    raw_norm = math.sqrt(raw @ dense[np.ix_(index, index)] @ raw)
    f = (raw / raw_norm) @ dense[index]                       # B/2 = 1
    eta = rng.standard_normal(horizon)
    origin = env.kernel(np.zeros((1, 2)), env.domain)[0]
    m = math.sqrt(2 * math.log(2 * horizon ** 2))
    for t in range(1, horizon + 1):
        c = 2.0 * np.clip(eta[t - 1], -m, m) / (2 * m)
        np.testing.assert_allclose(env.reward_function(t), f + c * origin, atol=1e-12)
    assert rkhs_norm(env, 0.0) == pytest.approx(1.0)          # ||f||_k = B/2 exactly
    np.testing.assert_allclose(env.noise_function[0], 1.0)   # the grid contains the origin: k(0, 0) = 1


def test_norm_bound_holds_in_every_round_of_the_clipped_instance():
    """||f_t||_k <= B for every draw under App. 13's instance 2; in the Gaussian instance 1 the noise part
    alone, ||c_t k(0, .)||_k = |c_t|, exceeds its budget B/2 when |eta_t| passes the threshold, so the
    bound is no longer guaranteed. T = 2 makes the threshold small (2.04), so clipped rounds occur."""
    clipped_rounds = exceeded = 0
    for seed in range(150):
        clipped = make(seed=seed, horizon=2, noise="clipped")
        gaussian = make(seed=seed, horizon=2, noise="gaussian")
        for t in (1, 2):
            norm = rkhs_norm(clipped, clipped.coefficient[t - 1])
            assert norm <= 2.0 + 1e-9
            if abs(clipped.eta[t - 1]) >= clipped.threshold:
                clipped_rounds += 1
                assert abs(clipped.coefficient[t - 1]) == pytest.approx(1.0)   # sign(eta) B/2
                exceeded += abs(gaussian.coefficient[t - 1]) > 1.0
            else:
                assert gaussian.coefficient[t - 1] == clipped.coefficient[t - 1]
    assert clipped_rounds > 0 and exceeded > 0


@pytest.mark.parametrize("horizon", [1, 2, 10, 100, 1000, 10**6])
def test_the_stated_gap_between_the_two_instances(horizon):
    """App. 13: P(|eta_t| >= sqrt(2 log(2 T^2))) <= 2 exp(-m^2/2) = 1/T^2, so by the union bound the
    instances differ somewhere with probability <= 1/T and their expected regrets by at most
    B T P(...) <= B (eq. 56)."""
    m = noise_threshold(horizon)
    assert m == pytest.approx(math.sqrt(2 * math.log(2 * horizon ** 2)))
    per_round = special.erfc(m / math.sqrt(2))                 # exact P(|N(0,1)| >= m)
    assert per_round <= 2 * math.exp(-m * m / 2) == pytest.approx(1 / horizon ** 2)
    any_round = 1 - (1 - per_round) ** horizon
    assert any_round <= 1 / horizon + 1e-15
    assert 2.0 * horizon * any_round <= 2.0 + 1e-12           # B T P(exists clipped round) <= B


def test_clipping_frequency_and_zero_mean_noise():
    """The realised clip frequency matches erfc(m / sqrt 2); the noise is symmetric (mean zero, the
    step behind eq. 53), and instance 1's variance is B^2 / (8 log(2 T^2))."""
    horizon, seeds = 3, 400
    envs = [make(seed=seed, horizon=horizon, noise="gaussian") for seed in range(seeds)]
    coefficients = np.concatenate([env.coefficient for env in envs])
    clipped = np.concatenate([np.abs(env.eta) >= env.threshold for env in envs])
    expected = special.erfc(noise_threshold(horizon) / math.sqrt(2))
    count = len(clipped)
    assert abs(clipped.mean() - expected) <= 4 * math.sqrt(expected * (1 - expected) / count)
    variance = 4.0 / (8 * math.log(2 * horizon ** 2))
    assert abs(coefficients.mean()) <= 4 * math.sqrt(variance / count)
    assert coefficients.var() == pytest.approx(variance, rel=0.15)
    assert envs[0].diagnostics()["noise_variance"] == pytest.approx(variance)


def test_the_two_instances_coincide_until_the_first_clipped_round():
    """The coupling of App. 13 eq. (55): the same seed draws the same f and eta for both instances, so an
    adaptive learner sees the same history until a round with |eta_t| >= m."""
    horizon = 3
    seed = next(s for s in range(2000) if abs(make(seed=s, horizon=horizon).eta[1]) >= noise_threshold(horizon))
    env = {**ENV, "noise": "clipped"}
    clipped = run_trial(TrialSpec.create("kernel_exp3", {}, env, seed, horizon))
    gaussian = run_trial(TrialSpec.create("kernel_exp3", {}, {**env, "noise": "gaussian"}, seed, horizon))
    np.testing.assert_array_equal(clipped.arm[:2], gaussian.arm[:2])
    assert clipped.reward[0] == gaussian.reward[0] and clipped.reward[1] != gaussian.reward[1]
    assert clipped.extras["clipped"][1] == 1.0 and clipped.diagnostics["clipped_rounds"] >= 1
    # A seed with no clipped round: the two instances are the same run.
    calm = next(s for s in range(100) if (np.abs(make(seed=s, horizon=horizon).eta) < noise_threshold(horizon)).all())
    first = run_trial(TrialSpec.create("kernel_exp3", {}, env, calm, horizon))
    second = run_trial(TrialSpec.create("kernel_exp3", {}, {**env, "noise": "gaussian"}, calm, horizon))
    np.testing.assert_array_equal(first.arm, second.arm)
    np.testing.assert_array_equal(first.cum_regret, second.cum_regret)


def test_regret_bookkeeping_against_a_dense_replay():
    horizon = 25
    env = make(seed=5, horizon=horizon)
    replay = make(seed=5, horizon=horizon)
    rng = np.random.default_rng(9)
    cumulative, rewards, expected, pseudo = np.zeros(60), 0.0, 0.0, 0.0
    for t in range(1, horizon + 1):
        p = rng.dirichlet(np.ones(60))
        arm = int(rng.integers(60))
        feedback = env.step(t, Decision(arm, p))
        function = replay.function + replay.coefficient[t - 1] * replay.noise_function
        cumulative += function
        rewards += function[arm]
        expected += function @ p
        pseudo += replay.function.max() - replay.function[arm]
        assert feedback.reward == pytest.approx(function[arm])
        assert feedback.cumulative_regret == pytest.approx(cumulative.max() - rewards)
        assert feedback.extras["expected_regret"] == pytest.approx(cumulative.max() - expected)
        assert feedback.extras["pseudo_regret"] == pytest.approx(pseudo)
    # Without P_t the expected form is not defined.
    assert math.isnan(make(seed=5).step(1, Decision(0)).extras["expected_regret"])


@pytest.mark.parametrize("algorithm", ["random", "apg_exp3", "kernel_exp3", "rls_kernel_exp3", "rls_kernel_exp3_amvr"])
def test_every_kernel_algorithm_runs_on_the_instance(algorithm):
    spec = TrialSpec.create(algorithm, {}, {**ENV, "kernel": "se"}, seed=2, horizon=20)
    first, second = run_trial(spec), run_trial(spec)
    np.testing.assert_array_equal(first.arm, second.arm)
    assert np.isfinite(first.cum_regret).all() and np.isfinite(first.extras["expected_regret"]).all()
    assert (np.diff(first.extras["pseudo_regret"]) >= -1e-12).all()    # max f - f(x_t) >= 0
    assert first.diagnostics["lower_bound_rate"] > 0


def test_a_continuous_domain_and_batches_of_exact_kernel_exp3():
    """{continuous: d} on the lower-bound instance, exact Kernelized Exp3 in one lockstep batch."""
    from banditsweep.core.engine.trial import batch_key, run_trials

    env = {"kind": "kernel_lower_bound", "domain": {"continuous": 2}, "kernel": "matern32"}
    specs = [TrialSpec.create("kernel_exp3", {}, env, seed, 30) for seed in (0, 1)]
    assert batch_key(specs[0]) == batch_key(specs[1]) is not None
    together = run_trials(specs)
    alone = [run_trial(spec) for spec in specs]
    for batched, single in zip(together, alone):
        np.testing.assert_array_equal(batched.arm, single.arm)
        np.testing.assert_allclose(batched.cum_regret, single.cum_regret, atol=1e-9)
    assert together[0].diagnostics["domain_size"] == 5 * 5      # m = 1 + ceil(sqrt(2 * 30) / 2) = 5


def test_lower_bound_rate_formulas():
    from banditsweep.core.kernel.kernels import Kernel

    t, d = 1000, 1
    variance = 4.0 / (8 * math.log(t))
    assert lower_bound_rate(Kernel.create("se", d), t, d, 2.0) == pytest.approx(
        math.sqrt(variance * t * math.log(t / variance) ** 0.5))
    nu = 1.5
    assert lower_bound_rate(Kernel.create("matern32", d), t, d, 2.0) == pytest.approx(
        variance ** (nu / (2 * nu + d)) * t ** ((nu + d) / (2 * nu + d)))


@pytest.mark.parametrize("config, message", [
    ({}, "exactly one of 'setting'"),
    ({"setting": 1, "kernel": "linear"}, "kernel"),
    ({"setting": 1, "kernel": "matern"}, "needs 'nu'"),
    ({"setting": 1, "noise": "laplace"}, "noise"),
])
def test_config_validation(config, message):
    with pytest.raises(ValidationError, match=message):
        KernelLowerBoundConfig(**config)
