"""Kernelized Exp3's exploration variants (paper App. 16), the width of Theorem 3 on the exact algorithm,
and RLS-Kernelized Exp3's theory sampler against dense references (SPEC 3.1, 3.3, 3.4)."""

import math

import numpy as np
import pytest
from scipy import optimize

from banditsweep.core.engine import seeding, ties
from banditsweep.core.engine.ties import tied_argmax
from banditsweep.core.kernel.algorithms.kernel_exp3 import RLS_BETA_FACTOR, kernel_features
from banditsweep.core.engine.contracts import Decision
from banditsweep.core.kernel.exp3 import g_optimal_design, sample
from banditsweep.core.kernel.kernels import Kernel, growth_rate
from banditsweep.core.engine.trial import TrialSpec, run_trial

SMALL = {"kind": "adversarial_kernel", "domain": {"uniform": 40, "dim": 2}, "kernel": "matern32",
         "candidates": 80, "centers": 15}


def dense_leverage(kernel_matrix, design, ridge):
    """g(x) = psi(x)^T (sum_x' P(x') psi psi^T + ridge I)^{-1} psi(x), in the kernel form with a dense solve:
    (1/ridge) [K - K D^{1/2} (D^{1/2} K D^{1/2} + ridge I)^{-1} D^{1/2} K]_xx (no feature map)."""
    root = np.sqrt(design)
    weighted = root[:, None] * kernel_matrix
    system = weighted * root[None, :] + ridge * np.eye(len(design))
    return (np.diag(kernel_matrix) - np.einsum("ij,ij->j", weighted, np.linalg.solve(system, weighted))) / ridge


def log_det(kernel_matrix, design, ridge):
    """log det(D^{1/2} K D^{1/2} + ridge I): log det V(P) up to a constant (Sylvester)."""
    root = np.sqrt(np.maximum(design, 0.0))
    return np.linalg.slogdet(root[:, None] * kernel_matrix * root[None, :] + ridge * np.eye(len(design)))[1]


def points(seed, n, d=2):
    return np.random.default_rng(seed).uniform(size=(n, d))


# ---------------------------------------------------------------- the regularised G-optimal design

@pytest.mark.parametrize("name, ridge", [("matern32", 0.05), ("se", 0.01), ("matern52", 0.2)])
def test_regularised_design_meets_the_equivalence_theorem_densely(name, ridge):
    kernel_matrix = Kernel.create(name, 2).matrix(points(3, 60))
    features = kernel_features(kernel_matrix)
    epsilon = 1e-3
    design, g_max, iterations = g_optimal_design(features, epsilon, 100_000, ridge=ridge)
    assert design.min() >= 0 and design.sum() == pytest.approx(1.0)
    g = dense_leverage(kernel_matrix, design, ridge)
    assert g.max() == pytest.approx(g_max, rel=1e-7)
    effective = design @ g
    assert g.max() <= (1 + epsilon) * effective + 1e-9          # the stopping rule, checked densely
    # Concavity of log det: the Frank-Wolfe gap bounds the distance to the optimum. A random design and
    # the uniform start are no better than the design found.
    assert log_det(kernel_matrix, design, ridge) >= log_det(kernel_matrix, np.full(60, 1 / 60), ridge) - 1e-12
    other = np.random.default_rng(0).dirichlet(np.ones(60))
    assert log_det(kernel_matrix, design, ridge) >= log_det(kernel_matrix, other, ridge) - (g.max() - effective)


def test_regularised_design_equals_a_generic_optimiser_on_a_tiny_domain():
    """D-optimal regularised design on 7 points: Frank-Wolfe against scipy's SLSQP on the simplex."""
    kernel_matrix = Kernel.create("se", 1, lengthscale=0.15).matrix(points(1, 7, d=1))
    ridge = 0.02
    design, _, _ = g_optimal_design(kernel_features(kernel_matrix), 1e-6, 100_000, ridge=ridge)
    result = optimize.minimize(lambda p: -log_det(kernel_matrix, p, ridge), np.full(7, 1 / 7), method="SLSQP",
                               bounds=[(0, 1)] * 7, constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1}],
                               options={"ftol": 1e-14, "maxiter": 1000})
    assert result.success
    assert log_det(kernel_matrix, design, ridge) >= -result.fun - 1e-7
    np.testing.assert_allclose(dense_leverage(kernel_matrix, design, ridge),
                               dense_leverage(kernel_matrix, result.x, ridge), rtol=1e-3, atol=1e-3)


def test_ridge_zero_is_the_fedorov_wynn_design_of_apg_exp3():
    """One routine for both designs: APG-Exp3 imports it, and ridge 0 stops at Kiefer-Wolfowitz's D."""
    from banditsweep.core.kernel.algorithms import apg_exp3

    assert apg_exp3.g_optimal_design is g_optimal_design
    features = np.random.default_rng(2).normal(size=(80, 4))
    design, g_max, _ = g_optimal_design(features, 0.01, 100_000)
    assert 4 - 1e-9 <= g_max <= 1.01 * 4


# ---------------------------------------------------------------- Kernelized Exp3 with each exploration

def dense_mvr_distribution(kernel_matrix, length, lam, key=None):
    """MVR by dense posterior variances: x_{j+1} = argmax sigma_j^2, ties by core.engine.ties' rule (values
    within 1e-9 of the prior variance's scale; the largest priority keyed by ``key``)."""
    chosen = []
    for _ in range(length):
        if chosen:
            cross = kernel_matrix[:, chosen]
            system = kernel_matrix[np.ix_(chosen, chosen)] + lam * np.eye(len(chosen))
            variance = np.diag(kernel_matrix) - np.einsum("ij,ji->i", cross, np.linalg.solve(system, cross.T))
        else:
            variance = np.diag(kernel_matrix).copy()
        chosen.append(tied_argmax(variance, key, float(np.diag(kernel_matrix).max())))
    return np.bincount(chosen, minlength=len(kernel_matrix)) / length


def first_distribution(spec):
    """The policy's exploration pi and P_1, from the trial's own objects."""
    env, policy = spec.build()
    decision = policy.select(1, env.contexts(1))
    return env, policy, decision.probabilities


@pytest.mark.parametrize("exploration", ["mvr", "g_optimal", "uniform"])
def test_exploration_distribution_against_its_dense_definition(exploration):
    spec = TrialSpec.create("kernel_exp3", {"exploration": exploration, "design_epsilon": 1e-3}, SMALL, 4, 60)
    env, policy, first = first_distribution(spec)
    pi = policy.weights.exploration
    kernel_matrix = env.kernel.matrix(env.domain)
    schedule = policy.schedule
    n = len(env.domain)
    if exploration == "uniform":
        np.testing.assert_array_equal(pi, np.full(n, 1 / n))
    elif exploration == "mvr":
        np.testing.assert_allclose(pi, dense_mvr_distribution(kernel_matrix, schedule.design_length, 1.0,
                                                              policy.tie_key(ties.MVR)))
    else:   # App. 16: ridge lambda / (T alpha), stopped by the equivalence theorem
        ridge = 1.0 / (60 * schedule.alpha)
        g = dense_leverage(kernel_matrix, pi, ridge)
        assert g.max() <= (1 + 1e-3) * (pi @ g) + 1e-9
        diagnostics = policy.diagnostics()
        assert diagnostics["design_ridge"] == pytest.approx(ridge)
        assert diagnostics["design_effective_dimension"] == pytest.approx(pi @ g, rel=1e-6)
        assert "mvr_distinct_points" not in diagnostics
    # P_1 = (1 - alpha) uniform + alpha pi (no scores yet)
    np.testing.assert_allclose(first, (1 - schedule.alpha) / n + schedule.alpha * pi, rtol=1e-12)


@pytest.mark.parametrize("params", [{"exploration": "mvr"}, {"exploration": "g_optimal"},
                                    {"exploration": "uniform"}, {"beta_rule": "theorem3"}])
def test_kernel_exp3_variants_equal_a_dense_feature_map_reference(params):
    """Alg. 1 written out with an explicit feature map psi (|X| x |X|) and the explicit G_t^{-1}, given
    the variant's pi: same draws, same P_t, same regret."""
    horizon, seed = 25, 7
    spec = TrialSpec.create("kernel_exp3", params, SMALL, seed, horizon)
    result = run_trial(spec)
    _, policy, _ = first_distribution(spec)
    pi = policy.weights.exploration
    env = spec.build_environment()
    domain = env.contexts(1)
    n, d = domain.shape
    kernel_matrix = env.kernel.matrix(domain)
    values, vectors = np.linalg.eigh(kernel_matrix)
    psi = vectors * np.sqrt(np.maximum(values, 0.0))
    gamma = growth_rate(env.kernel, horizon, d)
    eta = 5.0 / math.sqrt(horizon * gamma)
    alpha = min(1.0, 0.1 * eta * gamma)
    mu = 1.0 / horizon
    beta = (RLS_BETA_FACTOR if params.get("beta_rule") == "theorem3" else 1.0) * 2.0 * math.sqrt(1.0 / horizon)
    assert result.diagnostics["beta"] == pytest.approx(beta)
    scores = np.zeros(n)
    rng = seeding.stream(seed, seeding.POLICY_STREAM)
    arms, regret = [], []
    for t in range(1, horizon + 1):
        weights = np.exp(eta * (scores - scores.max()))
        p = (1 - alpha) * weights / weights.sum() + alpha * pi
        arm = sample(p, rng)
        feedback = env.step(t, Decision(arm, p))
        inverse = np.linalg.inv(psi.T @ (p[:, None] * psi) + mu * np.eye(n))
        estimate = psi @ inverse @ psi[arm] * feedback.reward
        width = np.sqrt(np.einsum("ij,jk,ik->i", psi, inverse, psi))
        scores += estimate + beta * width
        arms.append(arm)
        regret.append(feedback.cumulative_regret)
    np.testing.assert_array_equal(result.arm, arms)
    np.testing.assert_allclose(result.cum_regret, regret, atol=1e-9)


# ---------------------------------------------------------------- RLS's beta on the exact algorithm

def test_exact_kernel_exp3_with_rls_beta_equals_rls_with_every_landmark():
    exact = run_trial(TrialSpec.create("kernel_exp3", {"beta_rule": "theorem3"}, SMALL, 5, 40))
    assert exact.diagnostics["beta"] == pytest.approx(2.0 * (1 + math.sqrt(2)) * math.sqrt(1.0 / 40))
    every = run_trial(TrialSpec.create("rls_kernel_exp3", {"landmarks": "all"}, SMALL, 5, 40))
    np.testing.assert_array_equal(every.arm, exact.arm)
    np.testing.assert_allclose(every.cum_regret, exact.cum_regret, atol=1e-9)
    # Musco & Musco's small-n rule: |X| = 40 <= 192 log(1/delta), so the theory sampler keeps all of X.
    theory = run_trial(TrialSpec.create("rls_kernel_exp3", {"sampler": "theory"}, SMALL, 5, 40))
    np.testing.assert_array_equal(theory.arm, exact.arm)
    assert theory.diagnostics["s_t_min"] == theory.diagnostics["s_t_max"] == 40
