"""APG-Exp3, Kernelized Exp3 and RLS-Kernelized Exp3 against dense references (SPEC 3.1-3.5)."""

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from banditsweep.core.kernel import kernels
from banditsweep.core.engine import registry
from banditsweep.core.kernel.algorithms.apg_exp3 import APGExp3, g_optimal_design, newton_basis
from banditsweep.core.kernel.algorithms.kernel_exp3 import KernelExp3, kernel_form_statistics
from banditsweep.core.kernel.algorithms.rls_kernel_exp3 import RLSKernelExp3, RLSKernelExp3AMVR, nystrom_statistics
from banditsweep.core.kernel.exp3 import ExponentialWeights, empirical_distribution, sample
from banditsweep.core.kernel.kernels import Kernel, growth_rate
from banditsweep.core.engine.trial import TrialSpec, run_trial

SMALL = {"kind": "adversarial_kernel", "domain": {"uniform": 50, "dim": 2}, "kernel": "matern32",
         "candidates": 100, "centers": 20}


def random_points(seed, n=50, d=2):
    return np.random.default_rng(seed).uniform(size=(n, d))


def random_distribution(seed, n):
    logits = np.random.default_rng(seed).normal(size=n) * 3.0
    p = np.exp(logits - logits.max())
    return p / p.sum()


def test_registry_names():
    assert registry.algorithm_class("kernel_exp3") is KernelExp3
    assert registry.algorithm_class("rls_kernel_exp3") is RLSKernelExp3
    assert registry.algorithm_class("rls_kernel_exp3_amvr") is RLSKernelExp3AMVR
    assert registry.algorithm_class("apg_exp3") is APGExp3


# ---------------------------------------------------------------- Exp3 pieces

def test_exponential_weights_are_stable_in_log_space():
    weights = ExponentialWeights(4, eta=1.0, alpha=0.2, exploration=np.array([0.5, 0.5, 0.0, 0.0]))
    weights.add(np.array([1e6, 0.0, -1e6, 1e6 - 1.0]))
    p = weights.distribution()
    assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)
    tilted = 1.0 / (1.0 + math.exp(-1.0))
    np.testing.assert_allclose(p, 0.8 * np.array([tilted, 0.0, 0.0, 1 - tilted]) + 0.2 * np.array([0.5, 0.5, 0, 0]))
    with pytest.raises(ValueError, match="alpha"):
        ExponentialWeights(2, 1.0, 1.5, np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="probability vector"):
        ExponentialWeights(2, 1.0, 0.5, np.array([0.5, 0.6]))


def test_sampling_follows_the_distribution():
    p = np.array([0.1, 0.0, 0.6, 0.3])
    rng = np.random.default_rng(0)
    draws = np.array([sample(p, rng) for _ in range(20000)])
    frequencies = np.bincount(draws, minlength=4) / len(draws)
    assert frequencies[1] == 0
    np.testing.assert_allclose(frequencies, p, atol=0.015)
    np.testing.assert_array_equal(empirical_distribution(np.array([2, 2, 0, 3]), 5), [0.25, 0, 0.5, 0.25, 0])


# ---------------------------------------------------------------- APG-Exp3 (SPEC 3.5)

def pivoted_partial_cholesky(matrix, tolerance):
    """Textbook pivoted Cholesky on the dense matrix: pivot on the largest Schur-complement diagonal,
    stop when its square root is <= tolerance."""
    residual = matrix.copy()
    columns, pivots = [], []
    while True:
        diagonal = np.diag(residual)
        pick = int(np.argmax(diagonal))
        if math.sqrt(max(diagonal[pick], 0.0)) <= tolerance:
            break
        column = residual[:, pick] / math.sqrt(diagonal[pick])
        residual = residual - np.outer(column, column)
        columns.append(column)
        pivots.append(pick)
    return np.array(columns).T, pivots


@pytest.mark.parametrize("name", ["se", "matern52"])
def test_p_greedy_is_pivoted_partial_cholesky(name):
    kernel = Kernel.create(name, 2)
    x = random_points(1, n=120)
    tolerance = math.log(120) / 100
    basis, pivots, power = newton_basis(kernel, x, tolerance)
    reference, reference_pivots = pivoted_partial_cholesky(kernel.matrix(x), tolerance)
    assert list(pivots) == reference_pivots
    np.testing.assert_allclose(basis, reference, atol=1e-9)
    assert power.max() <= tolerance
    # N spans the kernel on X up to the power function: K - N N^T has diagonal P_D^2.
    np.testing.assert_allclose(np.diag(kernel.matrix(x) - basis @ basis.T), power ** 2, atol=1e-10)


@pytest.mark.parametrize("epsilon", [0.5, 0.05])
def test_frank_wolfe_reaches_the_g_optimal_tolerance(epsilon):
    kernel = Kernel.create("matern32", 2)
    x = random_points(2, n=150)
    features, _, _ = newton_basis(kernel, x, 0.05)
    dim = features.shape[1]
    design, g_max, iterations = g_optimal_design(features, epsilon, 100_000)
    assert design.min() >= 0 and design.sum() == pytest.approx(1.0)
    information = features.T @ (design[:, None] * features)
    direct = np.einsum("ij,jk,ik->i", features, np.linalg.inv(information), features)
    assert direct.max() == pytest.approx(g_max, rel=1e-8)
    assert dim - 1e-8 <= direct.max() <= (1 + epsilon) * dim   # Kiefer-Wolfowitz: the optimum is D
    uniform = features.T @ features / len(x)
    start = np.einsum("ij,jk,ik->i", features, np.linalg.inv(uniform), features).max()
    assert (iterations > 0) == (start > (1 + epsilon) * dim)
    if epsilon == 0.05:
        assert iterations > 0


def test_apg_exp3_through_the_registry():
    spec = TrialSpec.create("apg_exp3", {}, {**SMALL, "kernel": "se"}, seed=3, horizon=40)
    result = run_trial(spec)
    diagnostics = result.diagnostics
    dim, horizon = diagnostics["D_T"], 40
    assert diagnostics["eta"] == pytest.approx(0.5 / math.sqrt(dim * horizon))
    assert diagnostics["alpha"] == pytest.approx(0.1 * diagnostics["eta"] * dim)
    assert diagnostics["pgreedy_tolerance"] == pytest.approx(math.log(50) / 40)
    assert diagnostics["design_g_ratio"] <= 1.1 + 1e-9
    assert spec.params == {"c1": 0.5, "c2": 0.1, "epsilon": 0.1, "max_iterations": 100000, "tolerance": None}


# ---------------------------------------------------------------- Kernelized Exp3 (SPEC 3.1)

def feature_map_reference(kernel_matrix, p, mu, index, reward):
    """Eq. (3) with the explicit feature map psi = rows of the Cholesky factor of K (paper Sec. 2)."""
    psi = np.linalg.cholesky(kernel_matrix)
    gram = psi.T @ (p[:, None] * psi) + mu * np.eye(len(p))
    solved = np.linalg.solve(gram, psi.T)
    estimate = psi @ solved[:, index] * reward
    width = np.sqrt(np.einsum("ij,ji->i", psi, solved))
    return estimate, width


@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_form_equals_explicit_feature_map(seed):
    kernel = Kernel.create("matern32", 2)
    x = random_points(seed)
    dense = kernel.matrix(x)
    p = random_distribution(seed, 50)
    mu, index, reward = 0.01, 7, -0.8
    column, diagonal = kernel_form_statistics(torch.from_numpy(dense), torch.from_numpy(p), mu, index)
    estimate, width = feature_map_reference(dense, p, mu, index, reward)
    np.testing.assert_allclose(column.numpy() * reward, estimate, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.sqrt(diagonal.numpy()), width, rtol=1e-8)


def test_kernel_exp3_schedule_and_exploration():
    spec = TrialSpec.create("kernel_exp3", {}, SMALL, seed=0, horizon=30)
    result = run_trial(spec)
    d = result.diagnostics
    gamma = growth_rate(Kernel.create("matern32", 2), 30, 2)
    assert d["gamma_T"] == pytest.approx(gamma)
    assert d["eta"] == pytest.approx(5.0 / math.sqrt(30 * gamma))
    assert d["alpha"] == pytest.approx(min(1.0, 0.1 * d["eta"] * gamma))
    assert d["beta"] == pytest.approx(2.0 * math.sqrt(1.0 / 30))
    assert d["mvr_length"] == math.ceil(30 * d["alpha"])
    assert spec.params == {"c3": 5.0, "c4": 0.1, "lam": 1.0, "beta": None, "beta_rule": "theorem1",
                           "exploration": "mvr", "design_epsilon": 0.1, "design_max_iterations": 10000}
    # alpha is capped at 1 where the formula exceeds it (large grid constants).
    capped = run_trial(TrialSpec.create("kernel_exp3", {"c3": 10, "c4": 10}, SMALL, 0, 10)).diagnostics
    assert capped["alpha_formula"] > 1 and capped["alpha"] == 1.0


def test_kernel_exp3_checks_memory_before_it_starts(monkeypatch):
    monkeypatch.setattr(kernels, "available_memory_bytes", lambda device="cpu": 1000)
    with pytest.raises(MemoryError, match="rls_kernel_exp3"):
        run_trial(TrialSpec.create("kernel_exp3", {}, SMALL, 0, 5))


# ---------------------------------------------------------------- RLS-Kernelized Exp3 (SPEC 3.4)

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nystrom_statistics_with_all_landmarks_equal_the_kernel_form(seed):
    kernel = Kernel.create("matern52", 2)
    x = random_points(seed, n=60)
    p = random_distribution(seed + 10, 60)
    mu, index = 1e-2, 11
    cross, variance = nystrom_statistics(kernel, x, p, np.arange(60), mu, index)
    column, diagonal = kernel_form_statistics(torch.from_numpy(kernel.matrix(x)), torch.from_numpy(p), mu, index)
    np.testing.assert_allclose(cross, column.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(variance, diagonal.numpy(), rtol=1e-6, atol=1e-6)


def test_rls_with_all_landmarks_is_kernelized_exp3():
    beta = 2.0 * math.sqrt(1.0 / 40)  # the exact algorithm's beta = B sqrt(lambda / T)
    exact = run_trial(TrialSpec.create("kernel_exp3", {}, SMALL, seed=5, horizon=40))
    approximate = run_trial(TrialSpec.create("rls_kernel_exp3", {"landmarks": "all", "beta": beta}, SMALL,
                                             seed=5, horizon=40))
    np.testing.assert_array_equal(approximate.arm, exact.arm)
    np.testing.assert_allclose(approximate.cum_regret, exact.cum_regret, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(approximate.extras["expected_regret"], exact.extras["expected_regret"],
                               rtol=1e-7, atol=1e-7)
    assert approximate.diagnostics["s_t_min"] == 50


def test_rls_schedule_and_landmark_statistics():
    result = run_trial(TrialSpec.create("rls_kernel_exp3", {}, {**SMALL, "domain": {"uniform": 300, "dim": 1}},
                                        seed=1, horizon=30))
    d = result.diagnostics
    assert d["beta"] == pytest.approx(2.0 * (1 + math.sqrt(2)) * math.sqrt(1.0 / 30))
    assert d["delta"] == 0.1
    assert 1 <= d["s_t_min"] <= d["s_t_mean"] <= d["s_t_max"] < 300
    assert d["effective_dimension_mean"] > 0


def test_amvr_variant_uses_fewer_landmarks_than_points():
    result = run_trial(TrialSpec.create("rls_kernel_exp3_amvr", {}, {**SMALL, "domain": {"grid": [300]},
                                                                     "kernel": "se"}, seed=2, horizon=30))
    assert 0 < result.diagnostics["mvr_landmarks"] < 300
    assert result.diagnostics["mvr_distinct_points"] >= 1


# ---------------------------------------------------------------- every algorithm

@pytest.mark.parametrize("algorithm", ["random", "apg_exp3", "kernel_exp3", "rls_kernel_exp3", "rls_kernel_exp3_amvr"])
def test_trials_are_deterministic_and_record_both_regrets(algorithm):
    spec = TrialSpec.create(algorithm, {}, SMALL, seed=11, horizon=25)
    first, second = run_trial(spec), run_trial(spec)
    for name in ("arm", "reward", "regret", "cum_regret"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    np.testing.assert_array_equal(first.extras["expected_regret"], second.extras["expected_regret"])
    assert first.diagnostics == second.diagnostics
    np.testing.assert_allclose(np.cumsum(first.regret), first.cum_regret, atol=1e-9)


def test_exp3_variants_beat_random_on_setting_one():
    """The paper's qualitative claim on a short horizon (fixed seeds, deterministic)."""
    final = {}
    for algorithm in ("random", "kernel_exp3", "rls_kernel_exp3"):
        results = [run_trial(TrialSpec.create(algorithm, {}, {"kind": "adversarial_kernel", "setting": 1}, seed, 60))
                   for seed in range(2)]
        final[algorithm] = np.mean([r.extras["expected_regret"][-1] for r in results])
    assert final["kernel_exp3"] < 0.5 * final["random"]
    assert final["rls_kernel_exp3"] < 0.5 * final["random"]


@pytest.mark.parametrize("algorithm, params, message", [
    ("kernel_exp3", {"c3": 0}, "c3"),
    ("kernel_exp3", {"lam": -1}, "lam"),
    ("rls_kernel_exp3", {"delta": 1.5}, "delta"),
    ("rls_kernel_exp3", {"landmarks": "some"}, "landmarks"),
    ("apg_exp3", {"c1": 1, "c3": 1}, "c3"),
])
def test_parameter_validation(algorithm, params, message):
    with pytest.raises(ValidationError, match=message):
        TrialSpec.create(algorithm, params, SMALL, 0, 10)


def test_exp3_algorithms_refuse_contextual_environments():
    with pytest.raises(ValueError, match="does not run on environment kind"):
        TrialSpec.create("kernel_exp3", {}, {"kind": "synthetic"}, 0, 5).build()
