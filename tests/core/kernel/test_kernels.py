"""Kernels, domains, gamma_T, MVR and recursive RLS-Nystrom against dense references (SPEC 2.2, 3.1-3.3)."""

import math

import numpy as np
import pytest
from scipy import special

from banditsweep.core.kernel import domains
from banditsweep.core.kernel.kernels import Kernel, check_memory, growth_rate
from banditsweep.core.kernel.mvr import approximate_mvr_sequence, mvr_sequence
from banditsweep.core.kernel.nystrom import (nystrom_embedding, recursive_rls_nystrom, recursive_rls_nystrom_theory,
                                             weighted_kernel_block)


def random_points(seed, n=60, d=2):
    return np.random.default_rng(seed).uniform(size=(n, d))


def matern_reference(r, nu, lengthscale):
    """Textbook Matern through the Bessel function, element by element."""
    out = np.ones_like(r)
    for index, value in np.ndenumerate(r):
        if value > 0:
            s = math.sqrt(2 * nu) * value / lengthscale
            out[index] = 2 ** (1 - nu) / math.gamma(nu) * s ** nu * special.kv(nu, s)
    return out


@pytest.mark.parametrize("name, nu", [("matern52", 2.5), ("matern32", 1.5)])
def test_closed_form_matern_equals_bessel_form(name, nu):
    x = random_points(0)
    r = np.linalg.norm(x[:, None] - x[None], axis=-1)
    closed = Kernel.create(name, 2)(x, x)
    np.testing.assert_allclose(closed, matern_reference(r, nu, 0.3 * math.sqrt(2)), rtol=1e-10, atol=1e-12)
    general = Kernel.create("matern", 2, nu=nu)(x, x)
    np.testing.assert_allclose(general, closed, rtol=1e-10, atol=1e-12)


def test_se_and_matern_half_known_values():
    x = random_points(1, n=30, d=3)
    r = np.linalg.norm(x[:, None] - x[None], axis=-1)
    lengthscale = 0.3 * math.sqrt(3)
    np.testing.assert_allclose(Kernel.create("se", 3)(x, x), np.exp(-r ** 2 / (2 * lengthscale ** 2)), rtol=1e-12)
    np.testing.assert_allclose(Kernel.create("matern", 3, nu=0.5)(x, x), np.exp(-r / lengthscale), rtol=1e-10)
    assert Kernel.create("se", 3).lengthscale == pytest.approx(0.3 * math.sqrt(3))
    assert Kernel.create("se", 3, lengthscale=0.7).lengthscale == 0.7


def test_tiles_and_columns_match_the_dense_matrix():
    kernel = Kernel.create("matern32", 2)
    x = random_points(2, n=97)
    dense = kernel(x, x)
    assembled = np.vstack([block for _, block in kernel.tiles(x, tile_elements=500)])
    np.testing.assert_array_equal(assembled, dense)
    np.testing.assert_array_equal(kernel.matrix(x), dense)
    index = np.array([5, 3, 90])
    np.testing.assert_array_equal(kernel.columns(x, index), dense[:, index])
    np.testing.assert_array_equal(np.diag(dense), kernel.diag(x))


def test_kernel_validation():
    with pytest.raises(ValueError, match="unknown kernel"):
        Kernel("rbf", 1.0)
    with pytest.raises(ValueError, match="nu"):
        Kernel.create("matern", 1)
    with pytest.raises(ValueError, match="lengthscale"):
        Kernel("se", 0.0)


def test_growth_rate_formulas():
    t, d = 1000, 2
    assert growth_rate(Kernel.create("se", d), t, d) == pytest.approx(math.log(t) ** 3 / math.log(math.log(t)) ** 2)
    nu = 1.5
    expected = t ** (d / (2 * nu + d)) * math.log(t) ** ((4 * nu + d) / (2 * nu + d))
    assert growth_rate(Kernel.create("matern32", d), t, d) == pytest.approx(expected)
    # Tiny horizons are evaluated at e^e, where log log T = 1.
    assert growth_rate(Kernel.create("se", 1), 2, 1) == pytest.approx(math.e ** 2)


def test_check_memory_refuses_impossible_requests():
    with pytest.raises(MemoryError, match="GiB"):
        check_memory(1 << 60, "cpu", "a test")
    check_memory(1024, "cpu", "a test")


def test_domains():
    assert domains.setting(1).shape == (400, 1)
    assert domains.setting(2).shape == (400, 2)
    assert domains.setting(3).shape == (10000, 1)
    x4 = domains.setting(4)
    assert x4.shape == (10000, 2) and x4.min() == 0.0 and x4.max() == 1.0
    assert len(np.unique(x4, axis=0)) == 10000
    g = domains.build(None, domains.GridDomain(grid=[3, 4, 2]), np.random.default_rng(0))
    assert g.shape == (24, 3)
    u1 = domains.build(None, domains.UniformDomain(uniform=50, dim=3), np.random.default_rng(5))
    u2 = domains.build(None, domains.UniformDomain(uniform=50, dim=3), np.random.default_rng(5))
    np.testing.assert_array_equal(u1, u2)
    assert u1.shape == (50, 3) and 0 <= u1.min() and u1.max() <= 1
    with pytest.raises(ValueError, match="exactly one"):
        domains.build(1, domains.GridDomain(grid=[3]), np.random.default_rng(0))


# ---------------------------------------------------------------- MVR (SPEC 3.2)

def direct_posterior_variance(kernel_matrix, chosen, lam):
    """sigma^2(x) = k(x,x) - k_j(x)^T (K_j + lam I)^{-1} k_j(x), by a dense solve."""
    if not chosen:
        return np.diag(kernel_matrix).copy()
    cross = kernel_matrix[:, chosen]
    system = kernel_matrix[np.ix_(chosen, chosen)] + lam * np.eye(len(chosen))
    return np.diag(kernel_matrix) - np.einsum("ij,ji->i", cross, np.linalg.solve(system, cross.T))


@pytest.mark.parametrize("name, lam", [("se", 1.0), ("matern32", 0.05)])
def test_mvr_incremental_equals_direct_posterior_variance(name, lam):
    kernel = Kernel.create(name, 2)
    x = random_points(3, n=80)
    dense = kernel.matrix(x)
    length = 40
    sequence, final = mvr_sequence(kernel, x, length, lam)
    chosen = []
    for j in range(length):
        variance = direct_posterior_variance(dense, chosen, lam)
        assert variance[sequence[j]] == pytest.approx(variance.max(), rel=1e-9, abs=1e-12)
        chosen.append(int(sequence[j]))
    np.testing.assert_allclose(final, direct_posterior_variance(dense, chosen, lam), atol=1e-10)
    assert len(np.unique(sequence)) < length or name == "matern32"  # SE at lam=1 repeats points


def test_approximate_mvr_with_exact_features_is_exact_mvr():
    """With phi phi^T = K the approximated variance is the exact posterior variance, so every pick is
    an argmax of the direct formula (ties, e.g. the first pick, may go either way by rounding)."""
    kernel = Kernel.create("matern52", 2)
    x = random_points(7, n=70)
    dense = kernel.matrix(x)
    features = nystrom_embedding(dense, dense)  # all points as landmarks
    np.testing.assert_allclose(features @ features.T, dense, atol=1e-9)
    lam = 0.5
    sequence, final = approximate_mvr_sequence(features, kernel.diag(x), 25, lam)
    chosen = []
    for j in range(25):
        variance = direct_posterior_variance(dense, chosen, lam)
        assert variance[sequence[j]] == pytest.approx(variance.max(), rel=1e-8, abs=1e-10)
        chosen.append(int(sequence[j]))
    np.testing.assert_allclose(final, direct_posterior_variance(dense, chosen, lam), atol=1e-8)


# ---------------------------------------------------------------- recursive RLS-Nystrom (SPEC 3.3)

def weighted_instance(seed, name, n=240):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 2))
    kernel = Kernel.create(name, 2)
    logits = rng.normal(size=n) * rng.uniform(0.0, 5.0)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    dense = np.sqrt(p)[:, None] * kernel.matrix(x) * np.sqrt(p)[None, :]
    return rng, kernel, x, p, dense


def spectral_error(dense, landmarks):
    """Eigenvalues of K - K_nys, K_nys = K_.S K_SS^+ K_S., computed stably through a feature map:
    K = F F^T and K_nys = F Pi F^T with Pi the projection onto the row space of F_S, so
    K - K_nys = (F (I - Pi)) (F (I - Pi))^T (PSD by construction; the pseudo-inverse of the
    ill-conditioned K_SS of the SE kernel is never formed)."""
    eigenvalues, vectors = np.linalg.eigh(dense)
    features = vectors * np.sqrt(np.maximum(eigenvalues, 0.0))
    _, singular, right = np.linalg.svd(features[landmarks], full_matrices=False)
    basis = right[singular > 1e-10 * singular.max()]
    residual = features - (features @ basis.T) @ basis
    return np.linalg.eigvalsh(residual @ residual.T)


@pytest.mark.parametrize("name", ["se", "matern32"])
def test_recursive_nystrom_spectral_guarantee_rate(name):
    """K_nys <= K <= K_nys + mu I holds with probability >= 1 - delta (Musco & Musco Thm. 3).
    Measured over 20 random weighted instances with the recursion exercised (base size 32)."""
    mu, delta, successes, sizes = 1e-3, 0.1, 0, []
    for seed in range(20):
        rng, kernel, x, p, dense = weighted_instance(seed, name)
        sample = recursive_rls_nystrom(weighted_kernel_block(kernel, x, p), p * kernel.diag(x), rng,
                                       ridge=mu, delta=delta, base_size=32)
        assert len(np.unique(sample.landmarks)) == len(sample.landmarks)
        assert sample.levels > 1
        error = spectral_error(dense, sample.landmarks)
        successes += bool(error.max() <= mu * (1 + 1e-9))
        sizes.append(len(sample.landmarks))
    rate = successes / 20
    print(f"{name}: spectral guarantee held on {successes}/20 instances, mean s = {np.mean(sizes):.1f} of 240")
    assert rate >= 1 - 2 * delta
    assert np.mean(sizes) < 240


def test_recursive_nystrom_target_size_mode():
    successes = 0
    for seed in range(10):
        rng, kernel, x, p, dense = weighted_instance(100 + seed, "matern32")
        sample = recursive_rls_nystrom(weighted_kernel_block(kernel, x, p), p * kernel.diag(x), rng,
                                       size=40, base_size=32)
        assert len(sample.landmarks) == 40 and len(np.unique(sample.landmarks)) == 40
        successes += bool(spectral_error(dense, sample.landmarks).max() <= sample.ridge * (1 + 1e-9))
    print(f"target-size mode: spectral guarantee at the adaptive ridge held on {successes}/10 instances")
    assert successes >= 8


def test_recursive_nystrom_arguments():
    rng, kernel, x, p, _ = weighted_instance(0, "se", n=50)
    block = weighted_kernel_block(kernel, x, p)
    with pytest.raises(ValueError, match="exactly one"):
        recursive_rls_nystrom(block, p, rng)
    with pytest.raises(ValueError, match="exactly one"):
        recursive_rls_nystrom(block, p, rng, ridge=1.0, size=5)
    a = recursive_rls_nystrom(block, p, np.random.default_rng(3), ridge=1e-3, base_size=8)
    b = recursive_rls_nystrom(block, p, np.random.default_rng(3), ridge=1e-3, base_size=8)
    np.testing.assert_array_equal(a.landmarks, b.landmarks)


# ---------------------------------------------------------------- Musco & Musco's Alg. 2 (sampler: theory)

def test_theory_sampler_small_n_rule_returns_every_point():
    """m <= 192 log(1/delta) (442 at delta = 0.1): S = I, every point with weight 1, nothing estimated."""
    rng, kernel, x, p, _ = weighted_instance(1, "se", n=400)
    sample = recursive_rls_nystrom_theory(weighted_kernel_block(kernel, x, p), p * kernel.diag(x), rng,
                                          ridge=1e-3, delta=0.1)
    np.testing.assert_array_equal(np.sort(sample.landmarks), np.arange(400))
    np.testing.assert_array_equal(sample.weights, np.ones(400))
    assert sample.levels == 1 and math.isnan(sample.effective_dimension)
    assert 192 * math.log(1 / 0.1) > 400                    # the rule's threshold at delta = 0.1: 442


@pytest.mark.parametrize("name", ["se", "matern32"])
def test_theory_sampler_recursion_and_spectral_guarantee(name):
    """Above the small-n threshold: one halving per level (delta / 3 each), landmarks distinct with weights
    1/sqrt(p_i) >= 1, and the guarantee K_nys <= K <= K_nys + lam I (Musco & Musco, Thm. 7: probability
    >= 1 - 3 delta) on every one of 6 instances (the factors 3/2 and 16 make it hold with room)."""
    ridge, delta, n = 1e-2, 0.5, 600      # 192 log 2 = 133 < 600: two or three levels
    sizes = []
    for seed in range(6):
        rng, kernel, x, p, dense = weighted_instance(200 + seed, name, n=n)
        sample = recursive_rls_nystrom_theory(weighted_kernel_block(kernel, x, p), p * kernel.diag(x), rng,
                                              ridge=ridge, delta=delta)
        assert sample.levels >= 2 and sample.ridge == ridge
        assert len(np.unique(sample.landmarks)) == len(sample.landmarks) <= n
        assert (sample.weights >= 1.0).all()
        assert sample.effective_dimension > 0
        assert spectral_error(dense, sample.landmarks).max() <= ridge * (1 + 1e-9)
        sizes.append(len(sample.landmarks))
    assert min(sizes) < n / 2


def test_theory_sampler_arguments_and_determinism():
    rng, kernel, x, p, _ = weighted_instance(0, "se", n=50)
    block = weighted_kernel_block(kernel, x, p)
    with pytest.raises(ValueError, match="ridge"):
        recursive_rls_nystrom_theory(block, p, rng, ridge=0.0)
    with pytest.raises(ValueError, match="delta"):
        recursive_rls_nystrom_theory(block, p, rng, ridge=1.0, delta=1.5)
    a = recursive_rls_nystrom_theory(block, p, np.random.default_rng(4), ridge=1e-3, delta=0.9)
    b = recursive_rls_nystrom_theory(block, p, np.random.default_rng(4), ridge=1e-3, delta=0.9)
    np.testing.assert_array_equal(a.landmarks, b.landmarks)


# ---------------------------------------------------------------- the linear kernel

def test_linear_kernel_values_diagonal_and_growth_rate():
    x = random_points(7, n=30, d=3)
    kernel = Kernel.create("linear", 3)
    assert kernel.lengthscale == pytest.approx(math.sqrt(3)) and kernel.nu is None
    np.testing.assert_allclose(kernel(x, x), x @ x.T / 3, rtol=1e-12)
    np.testing.assert_allclose(kernel.diag(x), (x * x).sum(1) / 3, rtol=1e-12)
    assert kernel.diag(np.ones((1, 3)))[0] == pytest.approx(1.0)        # k(x, x) <= 1 on [0, 1]^d
    np.testing.assert_allclose(kernel.matrix(x), kernel(x, x))
    assert Kernel.create("linear", 3, lengthscale=2.0)(x[:1], x[:1])[0, 0] == pytest.approx(x[0] @ x[0] / 4)
    assert np.linalg.matrix_rank(kernel.matrix(x)) == 3
    assert growth_rate(kernel, 1000, 3) == pytest.approx(3 * math.log(1000))
    with pytest.raises(ValueError, match="not a function"):
        kernel.profile(np.array([0.5]))


@pytest.mark.parametrize("algorithm", ["random", "apg_exp3", "kernel_exp3", "rls_kernel_exp3", "rls_kernel_exp3_amvr"])
def test_every_kernel_algorithm_runs_with_the_linear_kernel(algorithm):
    from banditsweep.core.engine.trial import TrialSpec, run_trial

    env = {"kind": "adversarial_kernel", "domain": {"grid": [8, 8]}, "kernel": "linear", "candidates": 50,
           "centers": 10}
    result = run_trial(TrialSpec.create(algorithm, {}, env, 1, 30))
    assert np.isfinite(result.cum_regret).all()
    if algorithm == "apg_exp3":
        assert result.diagnostics["D_T"] <= 2      # the linear kernel's rank on [0, 1]^2
    if algorithm == "kernel_exp3":
        assert result.diagnostics["gamma_T"] == pytest.approx(2 * math.log(30))


# ---------------------------------------------------------------- continuous domains (paper Cor. 2)

@pytest.mark.parametrize("dim, horizon", [(1, 50), (1, 1000), (2, 100), (2, 1000), (3, 200)])
def test_continuous_domain_is_a_one_over_sqrt_t_net(dim, horizon):
    config = domains.ContinuousDomain(continuous=dim)
    x = domains.build(None, config, np.random.default_rng(0), horizon)
    m = domains.net_points(dim, horizon)
    assert x.shape == (m ** dim, dim)
    assert domains.grid_shape(None, {"continuous": dim}, horizon) == (m,) * dim
    # Brute force: random points of [0, 1]^d and the cube's corners lie within 1/sqrt(T) of X.
    probe = np.vstack([np.random.default_rng(1).uniform(size=(3000, dim)),
                       np.array(np.meshgrid(*[[0.0, 1.0]] * dim)).reshape(dim, -1).T])
    nearest = np.sqrt(((probe[:, None, :] - x[None, :, :]) ** 2).sum(-1)).min(1)
    radius = domains.net_radius(dim, m)
    assert nearest.max() <= radius + 1e-12 <= 1 / math.sqrt(horizon) + 1e-12
    # m is the fewest points per axis of such a grid, and |X| = O(T^{d/2}).
    if m > 2:
        assert domains.net_radius(dim, m - 1) > 1 / math.sqrt(horizon)
    assert m ** dim <= (math.sqrt(dim * horizon) / 2 + 2) ** dim


def test_continuous_domain_through_an_environment():
    from banditsweep.core.kernel.algorithms.kernel_exp3 import domain_size
    from banditsweep.core.engine.trial import TrialSpec

    environment = {"kind": "adversarial_kernel", "domain": {"continuous": 2}, "candidates": 20, "centers": 5}
    spec = TrialSpec.create("random", {}, environment, 0, 1000)
    env = spec.build_environment()
    assert env.domain.shape == (576, 2)                   # 24 x 24 at T = 1000
    assert domain_size(spec.environment, 1000) == 576 and domain_size(spec.environment) is None
    assert spec.environment_label == 'adversarial_kernel:kernel=se,domain={"continuous":2},candidates=20,centers=5'
    with pytest.raises(ValueError, match="horizon"):
        domains.build(None, domains.ContinuousDomain(continuous=1), np.random.default_rng(0))
    with pytest.raises(ValueError):
        domains.ContinuousDomain(continuous=0)
