"""The shared pieces: network of eq. (2), block-sparse first layer, optimiser, likelihoods, Z."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from banditsweep.core.neural import likelihoods
from banditsweep.core.neural.networks import StackedNetwork, initial_biases, initial_parameters, output_scale
from banditsweep.core.neural import training
from banditsweep.core.neural.training import gradient_ascent, log_likelihood
from banditsweep.core.neural.z_matrix import ZMatrix

from neural_reference import dense_forward, dense_gradient, dense_parameters

@pytest.fixture(autouse=True)
def seeded_torch():
    """Every test draws its random data from the same stream, whatever ran before it, in float64 by
    default; the default dtype is given back after each test (set at import, it held for every
    test of the session collected after this module)."""
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def make_network(groups, sets, blocks, block_dim, width=8, depth=2, init="paper", seed=0, distinct=True,
                 biases=False):
    generator = torch.Generator().manual_seed(seed)

    def draw():
        weights = initial_parameters(width, depth, blocks * block_dim, init, generator)
        return (*weights, initial_biases(width, depth, blocks * block_dim, generator)) if biases else weights

    nets = []
    for _ in range(groups):
        first = draw()
        nets.append([draw() if distinct else first for _ in range(sets)])
    return StackedNetwork.stack(nets, blocks, sets, output_scale(width, init), "cpu", torch.float64)


def test_paper_init_is_zero_on_symmetric_inputs_and_block_diagonal():
    generator = torch.Generator().manual_seed(1)
    W1, hidden, w = initial_parameters(10, 3, 6, "paper", generator)
    assert torch.all(W1[:3, 5:] == 0) and torch.all(W1[3:, :5] == 0)
    assert torch.equal(W1[:3, :5], W1[3:, 5:])
    assert torch.equal(w[:5], -w[5:])
    x = torch.randn(3)
    f = dense_forward([W1, *hidden, w], torch.cat([x, x])[None], np.sqrt(10))
    assert abs(float(f)) < 1e-12
    default = initial_parameters(10, 2, 6, "default", generator)[0]
    assert default.abs().max() <= 1 / np.sqrt(6) and default.ne(0).all()


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("blocks", [1, 3])
def test_rows_forward_backward_equal_dense_autograd(depth, blocks, biases):
    """Block-sparse rows (SPEC 1.3) give the dense f and the dense gradient of sum_rows coef * f
    (with the biases of the baselines' reference recipe too)."""
    G, S, d_b, n = 2, 3, 4, 5
    net = make_network(G, S, blocks, d_b, depth=depth, init="default" if biases else "paper", biases=biases)
    X = torch.randn(G, blocks, n, d_b)
    coef = torch.randn(G, blocks, n, S)
    f, cache = net.forward_rows(X)
    grads = net.backward_rows(X, cache, coef)
    for g in range(G):
        for s in range(S):
            theta = [p.requires_grad_(True) for p in dense_parameters(net, g, s)]
            dense_x = torch.zeros(blocks, n, blocks * d_b)
            for b in range(blocks):
                dense_x[b, :, b * d_b:(b + 1) * d_b] = X[g, b]
            dense_f = dense_forward(theta, dense_x.reshape(-1, blocks * d_b), net.out_scale, biases).reshape(blocks, n)
            torch.testing.assert_close(f[g, :, :, s], dense_f.detach())
            expected = torch.autograd.grad((dense_f * coef[g, :, :, s]).sum(), theta)
            ours = [grads[0][g, :, :, s].reshape(-1, grads[0].shape[-1]), *[h[g, s] for h in grads[1:]]]
            assert len(ours) == len(expected) == (2 * depth if biases else depth)
            for a, b in zip(ours, expected):
                torch.testing.assert_close(a, b)


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("depth", [2, 3])
def test_per_arm_gradients_equal_autograd(depth, biases):
    K, d_b = 3, 4
    net = make_network(2, 1, K, d_b, depth=depth, biases=biases)
    block_of_arm = torch.arange(K)
    x = torch.randn(2, K, d_b)
    f, g = net.arm_parameters(block_of_arm).forward(x, with_gradient=True)
    z = ZMatrix(net, np.ones(2), 1.0, "full")
    flat = z.flatten(g, block_of_arm)
    for group in range(2):
        theta = dense_parameters(net, group)
        for arm in range(K):
            dense_x = torch.zeros(K * d_b)
            dense_x[arm * d_b:(arm + 1) * d_b] = x[group, arm]
            torch.testing.assert_close(f[group, arm], dense_forward(theta, dense_x[None], net.out_scale, biases)[0])
            torch.testing.assert_close(flat[group, arm], dense_gradient(theta, dense_x, net.out_scale, biases))


@pytest.mark.parametrize("name", ["gaussian", "bernoulli", "mixture"])
def test_likelihood_derivatives_match_autograd_of_written_formulas(name):
    reward = torch.tensor([0.0, 1.0, 0.3, -2.0, 1.0])
    f = torch.tensor([-3.0, 0.0, 0.7, 2.5, 8.0], requires_grad=True)
    written = {
        "gaussian": reward * f - f ** 2 / 2,
        "bernoulli": reward * f - torch.log(1 + torch.exp(f)),
        "mixture": (reward * f - f ** 2 / 2) + (reward * f - torch.log(1 + torch.exp(f))),
    }[name]
    torch.testing.assert_close(likelihoods.value(name, reward, f.detach()), written.detach())
    (expected,) = torch.autograd.grad(written.sum(), f)
    torch.testing.assert_close(likelihoods.derivative(name, reward, f.detach()), expected)


def test_gradient_ascent_equals_plain_autograd_loop():
    """The batched optimiser = J plain autograd steps per network on (scale *) eq. (10) + bias."""
    G, S, K, d_b, n, steps = 2, 3, 3, 4, 6, 7
    net = make_network(G, S, K, d_b, distinct=False)
    initial = net.clone()
    X = torch.randn(G, K, n, d_b)
    reward = torch.rand(G, K, n)
    mask = (torch.rand(G, K, n, 1) < 0.8).double()
    bias = torch.zeros(G, K, n, S)
    bias[:, torch.arange(S), 0, torch.arange(S)] = 0.7
    lr, lam, width = np.array([0.01, 0.02]), np.array([0.1, 0.3]), 8
    before = [dense_parameters(net, g, s) for g in range(G) for s in range(S)]
    gradient_ascent(net, initial, X, reward, mask, "bernoulli", steps, lr, lr * width * lam, bias)
    for g in range(G):
        for s in range(S):
            theta = [p.clone().requires_grad_(True) for p in before[g * S + s]]
            theta0 = [p.clone() for p in before[g * S + s]]
            dense_x = torch.zeros(K, n, K * d_b)
            for b in range(K):
                dense_x[b, :, b * d_b:(b + 1) * d_b] = X[g, b]
            for _ in range(steps):
                f = dense_forward(theta, dense_x.reshape(-1, K * d_b), net.out_scale).reshape(K, n)
                objective = (likelihoods.value("bernoulli", reward[g], f) * mask[g, ..., 0]).sum()
                objective = objective + (bias[g, ..., s] * f).sum()
                objective = objective - width * lam[g] / 2 * sum(((p - p0) ** 2).sum() for p, p0 in zip(theta, theta0))
                grads = torch.autograd.grad(objective, theta)
                with torch.no_grad():
                    for p, grad in zip(theta, grads):
                        p += lr[g] * grad
            for a, b in zip(dense_parameters(net, g, s), theta):
                torch.testing.assert_close(a, b.detach())
    values, _ = log_likelihood(net, initial, X, reward, mask, "bernoulli", width * lam)
    theta = dense_parameters(net, 1, 2)
    dense_x = torch.zeros(K, n, K * d_b)
    for b in range(K):
        dense_x[b, :, b * d_b:(b + 1) * d_b] = X[1, b]
    f = dense_forward(theta, dense_x.reshape(-1, K * d_b), net.out_scale).reshape(K, n)
    expected = (likelihoods.value("bernoulli", reward[1], f) * mask[1, ..., 0]).sum() - width * lam[1] / 2 * sum(
        ((p - p0) ** 2).sum() for p, p0 in zip(theta, dense_parameters(initial, 1, 2)))
    torch.testing.assert_close(values[1, 2], expected)


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("mode", ["diag", "full"])
@pytest.mark.parametrize("blocks", [1, 3])
def test_z_matrix_against_dense_numpy(mode, blocks, biases):
    G, K, d_b, width, lam, scale = 2, 3, 2, 4, 0.5, 0.25
    net = make_network(G, 1, blocks, d_b, width=width, depth=3, biases=biases)
    z = ZMatrix(net, np.full(G, lam), scale, mode)
    block_of_arm = torch.arange(K) if blocks == K else torch.zeros(K, dtype=torch.long)
    p = z.size
    assert p == blocks * d_b * width + width ** 2 + width + (2 * width + 1 if biases else 0)
    dense_z = np.stack([np.eye(p) * lam for _ in range(G)])
    for _ in range(6):
        x = torch.randn(G, K, d_b)
        _, g = net.arm_parameters(block_of_arm).forward(x, with_gradient=True)
        flat = z.flatten(g, block_of_arm).numpy()
        arms = np.array([0, 2])
        chosen = g.select(torch.tensor([0, 1]), torch.as_tensor(arms))
        z.add(chosen, block_of_arm[arms])
        for group in range(G):
            dense_z[group] += scale * np.outer(flat[group, arms[group]], flat[group, arms[group]])
    x = torch.randn(G, K, d_b)
    _, g = net.arm_parameters(block_of_arm).forward(x, with_gradient=True)
    flat = z.flatten(g, block_of_arm).numpy()
    solved = z.flatten(z.solve(g, block_of_arm), block_of_arm).numpy()
    quadratic = z.quadratic(g, block_of_arm).numpy()
    for group in range(G):
        inverse = (np.diag(1.0 / np.diag(dense_z[group])) if mode == "diag" else np.linalg.inv(dense_z[group]))
        expected = flat[group] @ inverse
        np.testing.assert_allclose(quadratic[group], np.einsum("kp,kp->k", expected, flat[group]), rtol=1e-9)
        for arm in range(K):
            # Z^{-1} g restricted to the arm's block and the other layers (all f(x_a) depends on).
            active = flat[group, arm] != 0
            np.testing.assert_allclose(solved[group, arm][active], expected[arm][active], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli", "mixture"])
@pytest.mark.parametrize("blocks, mask_sets, uniform", [(3, 1, True), (1, 1, False), (3, 3, False)])
@pytest.mark.parametrize("d_b", [4, 9])
def test_fused_one_hidden_layer_path_equals_layerwise_path(likelihood, blocks, mask_sets, uniform, d_b, biases):
    """L = 2: the fused batched-matmul optimiser = the layer-by-layer one (forward_rows/backward_rows),
    with per-set masks (BootstrappedNN), a reward bias (GA), and per-trial or shared lr and lambda;
    in the weight form (5 rows, d' = 4) and in the Gram form (5 rows < d' = 9); with biases pulled
    towards a zero network (the baselines' reference recipe)."""
    G, S, n, steps, width = 2, 3, 5, 6, 8
    fused = make_network(G, S, blocks, d_b, width=width, biases=biases)
    initial = fused.zeros_like() if biases else fused.clone()
    for p, scale in zip(fused.tensors(), (0.3, 0.2, 0.2, 0.2)):  # start away from theta_0 (a warm start)
        p.add_(scale * torch.randn_like(p))
    layerwise = fused.clone()
    X, reward, mask, bias = random_history(G, blocks, n, d_b, S, mask_sets)
    lr = np.array([0.01, 0.01]) if uniform else np.array([0.01, 0.03])
    ridge = lr * width * (np.array([0.1, 0.1]) if uniform else np.array([0.1, 0.2]))
    training.ascend_one_hidden_layer(fused, initial, X, reward, mask, likelihood, steps, lr, ridge, bias)
    training.ascend_layers(layerwise, initial, X, reward, mask, likelihood, steps, lr, ridge, bias)
    for a, b in zip(fused.tensors(), layerwise.tensors()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_intra_op_threads_grows_with_the_step_work():
    assert training.intra_op_threads(75, 54, 100, 7, cores=2) == 1
    assert training.intra_op_threads(1000, 784, 100, 10, groups=10, cores=2) == 2
    assert training.intra_op_threads(1000, 784, 100, 10, groups=10, cores=8, flops_per_thread=1e12) == 1


def random_history(G, blocks, n, d_b, S, mask_sets, generator=None):
    """Rows X, rewards, 0/1 likelihood weights (S_mask columns) and a GA-like bias on each block's first row."""
    X = torch.randn(G, blocks, n, d_b, generator=generator)
    reward = torch.rand(G, blocks, n, generator=generator)
    mask = (torch.rand(G, blocks, n, mask_sets, generator=generator) < 0.75).double()
    bias = torch.zeros(G, blocks, n, S)
    bias[:, :, 0, :] = 0.4
    return X, reward, mask, bias


def _skewed_history(G, blocks, n, d_b, S, mask_sets, seed=0):
    """A padded history whose blocks hold very different numbers of rows (zeros beyond them)."""
    rows = np.array([[n, 1, 0, 2, n - 1][:blocks], [n - 2, 3, 0, 0, 1][:blocks]])[:G]
    X, reward, mask, bias = random_history(G, blocks, n, d_b, S, mask_sets, torch.Generator().manual_seed(seed))
    for g in range(G):
        for b in range(blocks):
            X[g, b, rows[g, b]:] = 0.0
            reward[g, b, rows[g, b]:] = 0.0
            mask[g, b, rows[g, b]:] = 0.0
            bias[g, b, rows[g, b]:] = 0.0
    return X, reward, mask, bias, rows


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli"])
@pytest.mark.parametrize("mask_sets", [1, 3])
def test_bucketed_blocks_skip_padding_and_equal_the_padded_computation(likelihood, mask_sets, biases):
    """Rows beyond block_rows are padding: skipping them (several buckets) changes nothing, and every
    block, even one with no row, still gets the ridge pull towards theta_0 (with biases, whose
    padding rows have nonzero activations but zero weight)."""
    G, S, B, d_b, n, steps, width = 2, 3, 5, 4, 9, 7, 8
    X, reward, mask, bias, rows = _skewed_history(G, B, n, d_b, S, mask_sets)
    assert len(training.bucket_blocks(rows.max(axis=0), d_b, 1e9)) > 1  # the case under test
    padded = make_network(G, S, B, d_b, width=width, biases=biases)
    initial = padded.clone()
    for p in padded.tensors():
        p.add_(0.2 * torch.randn_like(p))
    bucketed, layerwise = padded.clone(), padded.clone()
    lr, ridge = np.array([0.01, 0.02]), np.array([0.01, 0.02]) * width * 0.1
    training.ascend_one_hidden_layer(padded, initial, X, reward, mask, likelihood, steps, lr, ridge, bias)
    training.ascend_one_hidden_layer(bucketed, initial, X, reward, mask, likelihood, steps, lr, ridge, bias,
                                      block_rows=rows)
    training.ascend_layers(layerwise, initial, X, reward, mask, likelihood, steps, lr, ridge, bias)
    for a, b, c in zip(bucketed.tensors(), padded.tensors(), layerwise.tensors()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)


def test_bucket_blocks_cuts_only_when_padding_costs_more_than_a_bucket():
    balanced = training.bucket_blocks(np.array([11, 12, 10, 12, 11, 9, 12]), 54, 700)
    assert [(list(blocks), height) for blocks, height in balanced] == [([0, 1, 2, 3, 4, 5, 6], 12)]
    skewed = training.bucket_blocks(np.array([3, 400, 2, 5, 1, 4, 3]), 54, 700)
    assert [(list(blocks), height) for blocks, height in skewed] == [([1], 400), ([0, 2, 3, 4, 5, 6], 5)]
    covered = np.sort(np.concatenate([blocks for blocks, _ in training.bucket_blocks(np.arange(10) ** 2, 5, 1e9)]))
    np.testing.assert_array_equal(covered, np.arange(10))


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("groups, sets, mask_sets", [(1, 5, 1), (4, 1, 1), (2, 3, 3)])
def test_thread_chunks_equal_one_thread(groups, sets, mask_sets, monkeypatch, biases):
    """The G x S optimisations split over worker threads (along the sets, else the trials) give the
    same networks as one thread, and leave torch's thread count as it was."""
    monkeypatch.setattr(training, "MIN_CHUNK_FLOPS", 0.0)  # split even this tiny problem
    B, d_b, n, steps, width = 3, 4, 6, 5, 8
    single = make_network(groups, sets, B, d_b, width=width, biases=biases)
    initial = single.clone()
    chunked = single.clone()
    X, reward, mask, bias = random_history(groups, B, n, d_b, sets, mask_sets)
    lr = np.linspace(0.01, 0.02, groups)
    ridge = lr * width * 0.1
    before = torch.get_num_threads()
    gradient_ascent(single, initial, X, reward, mask, "gaussian", steps, lr, ridge, bias, workers=1)
    gradient_ascent(chunked, initial, X, reward, mask, "gaussian", steps, lr, ridge, bias, workers=3)
    assert torch.get_num_threads() == before
    assert len(training.independent_chunks(groups, sets, 3)) > 1
    for a, b in zip(chunked.tensors(), single.tensors()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_small_steps_stay_on_one_thread():
    assert training.independent_chunks(1, 7, 2, step_flops=1.3e7) == []  # GA, covertype, ~12 rows per block
    assert len(training.independent_chunks(1, 7, 2, step_flops=1.5e8)) == 2  # ~140 rows per block
    assert [c[1] for c in training.independent_chunks(1, 7, 2, step_flops=1.5e8)] == [slice(0, 4), slice(4, 7)]
