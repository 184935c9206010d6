"""The neural algorithms against their equations (SPEC 1.4-1.5), determinism, block-sparse = dense."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from banditsweep.core.neural import likelihoods
from banditsweep.core.engine import registry, seeding
from banditsweep.core.engine.contracts import Problem
from banditsweep.core.engine.trial import TrialSpec, run_trial

from neural_reference import DenseToy, DisjointToy, dense_forward, dense_gradient, dense_parameters, disjoint_contexts

NEURAL = ["neural_rbmle_ga", "neural_rbmle_pc", "neural_ucb", "neural_ts", "deep_fpl", "bootstrapped_nn",
          "neural_eps_greedy"]
SMALL = {"width": 8, "steps": 3, "lr": 0.01, "precision": "float64"}


def make_policy(name, problem, seed=0, **params):
    cls = registry.algorithm_class(name)
    return cls(cls.Params(**{**SMALL, **params}), problem, seeding.stream(seed, seeding.POLICY_STREAM))


def drive(policy, contexts_fn, rounds, rng):
    """Play ``rounds`` rounds with rewards from ``rng``; return the contexts of the next round."""
    for t in range(1, rounds + 1):
        contexts = contexts_fn(t)
        decision = policy.select(t, contexts)
        policy.update(t, contexts, decision.arm, float(rng.random() < 0.5))
    return contexts_fn(rounds + 1)


def dense_rows(policy):
    """The observed history as dense rows (n, d) and rewards (n,)."""
    h = policy.history
    rows, rewards = [], []
    for block, slot in h.positions[0]:
        x = torch.zeros(policy.blocks * policy.block_dim, dtype=torch.float64)
        x[block * policy.block_dim:(block + 1) * policy.block_dim] = h.X[0, block, slot]
        rows.append(x)
        rewards.append(h.reward[0, block, slot])
    return torch.stack(rows), torch.stack(rewards)


def toy_contexts(K, block, seed):
    rng = np.random.default_rng(seed)
    return lambda t: disjoint_contexts(rng.standard_normal((K, block)))


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli", "mixture"])
@pytest.mark.parametrize("scale", ["sum", "mean"])
def test_ga_index_equals_eq13_and_arms_follow_plain_gradient_ascent(likelihood, scale):
    K, block, nu, lam, zeta, lr, steps = 3, 4, 0.7, 0.05, 1.3, 0.005, 4
    problem = Problem(num_arms=K, dim=K * block, horizon=20, disjoint_block=block)
    policy = make_policy("neural_rbmle_ga", problem, likelihood=likelihood, nu=nu, lam=lam, zeta=zeta, lr=lr,
                         steps=steps, objective_scale=scale, alpha_power=0.5)
    contexts_fn = toy_contexts(K, block, 1)
    reward_rng = np.random.default_rng(2)
    next_contexts = drive(policy, contexts_fn, 6, reward_rng)
    t = 7
    before = [dense_parameters(policy.network, 0, a) for a in range(K)]
    theta0 = dense_parameters(policy.initial, 0, 0)
    rows, rewards = dense_rows(policy)
    arm = policy.select(t, next_contexts).arm
    alpha = nu * t ** 0.5
    x_t = torch.as_tensor(next_contexts)
    width = SMALL["width"]
    factor = 1.0 if scale == "sum" else 1.0 / len(rewards)

    def objective(theta, a):  # eq. (10) + alpha(t) f(x_{t,a}) (eq. 12)
        f = dense_forward(theta, rows, policy.network.out_scale)
        ll = likelihoods.value(likelihood, rewards, f).sum()
        ll = ll - width * lam / 2 * sum(((p - p0) ** 2).sum() for p, p0 in zip(theta, theta0))
        return ll, dense_forward(theta, x_t[a:a + 1], policy.network.out_scale)[0]

    index = []
    for a in range(K):
        theta = [p.clone().requires_grad_(True) for p in before[a]]
        for _ in range(steps):  # Algorithm 1 line 6, one arm at a time
            ll, f_a = objective(theta, a)
            grads = torch.autograd.grad(factor * (ll + alpha * f_a), theta)
            with torch.no_grad():
                for p, grad in zip(theta, grads):
                    p += lr * grad
        for ours, expected in zip(dense_parameters(policy.network, 0, a), theta):
            torch.testing.assert_close(ours, expected.detach())
        ll, f_a = objective(theta, a)
        index.append(float((ll + alpha * zeta * f_a).detach()))  # eq. (13) with zeta
    np.testing.assert_allclose(policy.last_index[0].numpy(), index, rtol=1e-9, atol=1e-9)
    assert arm == int(np.argmax(index))


@pytest.mark.parametrize("z", ["diag", "full"])
@pytest.mark.parametrize("disjoint", [True, False])
def test_pc_theta_bar_equals_eq15(z, disjoint):
    K, block, nu, lam = 3, 3, 0.9, 0.1
    problem = Problem(num_arms=K, dim=K * block, horizon=20, disjoint_block=block if disjoint else None)
    policy = make_policy("neural_rbmle_pc", problem, z=z, nu=nu, lam=lam, width=6)
    added = []
    original_add = policy.z.add

    def recording_add(g, blocks):
        # Each increment must be g(x_t; theta_hat_t) at the retrained estimator (Alg. 2 line 10).
        added.append(policy.z._flat_one(g, blocks)[0].clone())
        theta = dense_parameters(policy.network)
        x = torch.as_tensor(recording_add.contexts[recording_add.arm])
        torch.testing.assert_close(added[-1], dense_gradient(theta, x, policy.network.out_scale))
        original_add(g, blocks)

    policy.z.add = recording_add
    contexts_fn = toy_contexts(K, block, 3)
    reward_rng = np.random.default_rng(4)
    for t in range(1, 6):
        contexts = contexts_fn(t)
        arm = policy.select(t, contexts).arm
        recording_add.contexts, recording_add.arm = contexts, arm
        policy.update(t, contexts, arm, float(reward_rng.random()))
    t, contexts = 6, contexts_fn(6)
    arm = policy.select(t, contexts).arm
    width = 6
    p = policy.z.size
    Z = lam * np.eye(p) + sum(np.outer(g, g) for g in torch.stack(added).numpy()) / width
    inverse = np.diag(1 / np.diag(Z)) if z == "diag" else np.linalg.inv(Z)
    theta_hat = dense_parameters(policy.network)
    flat_hat = torch.cat([q.reshape(-1) for q in theta_hat]).numpy()
    alpha = nu * t ** 0.5
    index = []
    for a in range(K):
        x = torch.as_tensor(contexts[a])
        g = dense_gradient(theta_hat, x, policy.network.out_scale).numpy()
        theta_bar = flat_hat + alpha / width * inverse @ g  # eq. (15)
        pieces, offset = [], 0
        for q in theta_hat:
            pieces.append(torch.as_tensor(theta_bar[offset:offset + q.numel()]).reshape(q.shape))
            offset += q.numel()
        index.append(float(dense_forward(pieces, x[None], policy.network.out_scale)[0]))
    np.testing.assert_allclose(policy.last_index[0].numpy(), index, rtol=1e-9, atol=1e-10)
    assert arm == int(np.argmax(index))


@pytest.mark.parametrize("training", ["paper", "reference"])
@pytest.mark.parametrize("form", ["paper", "reference"])
@pytest.mark.parametrize("z,width", [("diag", 2048), ("full", 64)])
def test_ucb_bonus_matches_dense_quadratic_in_linear_regime(form, z, width, training):
    """Wide network, tiny step: g stays g(x; theta_0), so the bonus is that of a linear model in g
    (under the reference recipe g includes the bias gradients, as learner_diag.py's grad_batch)."""
    K, d, nu, lam = 3, 4, 0.5, 0.01
    problem = Problem(num_arms=K, dim=d, horizon=20)
    policy = make_policy("neural_ucb", problem, width=width, lr=1e-9, steps=2, nu=nu, lam=lam, form=form, z=z,
                         training=training)
    biased = training == "reference"
    rng = np.random.default_rng(5)
    theta0 = dense_parameters(policy.initial)
    assert len(theta0) == (4 if biased else 2)
    scale = policy.network.out_scale
    grads = []
    for t in range(1, 9):
        contexts = rng.standard_normal((K, d))
        arm = policy.select(t, contexts).arm
        grads.append(dense_gradient(theta0, torch.as_tensor(contexts[arm]), scale, biased).numpy())
        policy.update(t, contexts, arm, float(rng.random()))
    contexts = rng.standard_normal((K, d))
    policy.select(9, contexts)
    G = np.stack(grads)
    c = 1.0 if form == "reference" else 1.0 / width
    diag = lam + c * (G ** 2).sum(0)
    mean = dense_forward(theta0, torch.as_tensor(contexts), scale, biased).numpy()
    for a in range(K):
        g = dense_gradient(theta0, torch.as_tensor(contexts[a]), scale, biased).numpy()
        if z == "diag":
            quadratic = (g * g / diag).sum()
        else:
            quadratic = g @ np.linalg.solve(lam * np.eye(len(g)) + c * G.T @ G, g)
        bonus = nu * np.sqrt(quadratic / width) if form == "paper" else np.sqrt(lam * nu * quadratic)
        np.testing.assert_allclose(float(policy.last_index[0, a]), mean[a] + bonus, rtol=1e-4, atol=1e-6)


def test_ts_samples_use_the_stated_variance():
    K, d, nu, lam, width = 3, 4, 0.5, 0.1, 16
    problem = Problem(num_arms=K, dim=d, horizon=10)
    for form in ["paper", "reference"]:
        ts = make_policy("neural_ts", problem, seed=3, nu=nu, lam=lam, width=width, form=form)
        ucb = make_policy("neural_ucb", problem, seed=3, nu=nu, lam=lam, width=width, form=form)
        rng = np.random.default_rng(6)
        contexts = rng.standard_normal((K, d))
        mirror = seeding.stream(3, seeding.POLICY_STREAM)
        seeding.torch_generator(mirror)  # the draw that seeded theta_0
        ts.select(1, contexts)
        ucb.select(1, contexts)
        mean, g = ucb.gradients(ucb.active(contexts[None]))
        quadratic = ucb.z.quadratic(g, ucb.block_of_arm)[0].numpy()
        variance = nu ** 2 * lam * quadratic / width if form == "paper" else lam * nu * quadratic
        expected = mean[0].numpy() + np.sqrt(variance) * mirror.standard_normal(K)
        np.testing.assert_allclose(ts.last_index[0].numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize("name", NEURAL)
def test_trials_are_deterministic(name):
    spec = TrialSpec.create(name, {"width": 8, "steps": 3, "q": 3} if name == "bootstrapped_nn" else
                            {"width": 8, "steps": 3}, {"kind": "synthetic"}, 7, 25)
    first, second = run_trial(spec), run_trial(spec)
    for field in ("arm", "reward", "regret", "cum_regret"):
        np.testing.assert_array_equal(getattr(first, field), getattr(second, field))
    assert "seconds_training" in first.diagnostics
    other = run_trial(TrialSpec.create(name, spec.params, {"kind": "synthetic"}, 8, 25))
    assert not np.array_equal(first.reward, other.reward)


@pytest.mark.parametrize("name", NEURAL)
def test_block_sparse_first_layer_equals_dense_computation(name):
    """SPEC 1.3: using only the active block gives the results of the dense d'K computation."""
    extra = {"q": 3} if name == "bootstrapped_nn" else {}
    results = []
    for env_cls in (DisjointToy, DenseToy):
        env = env_cls(DisjointToy.Config(arms=3, block=4), 30, seeding.stream(11, seeding.ENVIRONMENT_STREAM))
        policy = make_policy(name, env.problem, seed=11, **extra)
        arms, indices = [], []
        for t in range(1, 31):
            contexts = env.contexts(t)
            decision = policy.select(t, contexts)
            feedback = env.step(t, decision)
            policy.update(t, contexts, decision.arm, feedback.reward)
            arms.append(decision.arm)
            if hasattr(policy, "last_index"):
                indices.append(policy.last_index.clone())
        results.append((arms, indices, policy.diagnostics()))
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert policy.blocks == 1


def test_ga_train_every_keeps_parameters_between_trainings():
    problem = Problem(num_arms=2, dim=3, horizon=10)
    policy = make_policy("neural_rbmle_ga", problem, train_every=3)
    rng = np.random.default_rng(0)
    snapshots = []
    for t in range(1, 5):
        contexts = rng.standard_normal((2, 3))
        policy.update(t, contexts, policy.select(t, contexts).arm, 1.0)
        snapshots.append(policy.network.W1.clone())
    assert torch.equal(snapshots[0], snapshots[1]) and torch.equal(snapshots[1], snapshots[2])
    assert not torch.equal(snapshots[2], snapshots[3])


def test_params_validate_and_record_choices():
    cls = registry.algorithm_class("neural_rbmle_ga")
    defaults = cls.Params()
    assert (defaults.width, defaults.depth, defaults.steps, defaults.lr, defaults.lam, defaults.nu) == (
        100, 2, 100, 0.001, 0.001, 1.0)
    with pytest.raises(ValueError):
        cls.Params(likelihood="poisson")
    with pytest.raises(ValueError):
        cls.Params(unknown=1)
    spec = TrialSpec.create("neural_ucb", {}, {"kind": "synthetic"}, 0, 5)
    assert {"form", "z", "init", "objective_scale", "train_every", "training"} <= set(spec.params)


BASELINES = ["neural_ucb", "neural_ts", "deep_fpl", "bootstrapped_nn"]


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_default_to_the_reference_recipe_and_paper_restores_its_defaults(name):
    """training = reference (the code the paper ran) by default, with that code's lr, init and
    exploration form; training = paper brings back the paper recipe's defaults (SPEC 1.6); the
    reference recipe rejects choices its code does not make; GA/PC have no such parameter."""
    cls = registry.algorithm_class(name)
    reference = cls.Params()
    assert (reference.training, reference.lr, reference.init, reference.steps) == ("reference", 0.01, "default", 100)
    paper = cls.Params(training="paper")
    assert (paper.lr, paper.init, paper.steps) == (0.001, "paper", 100)
    if name in ("neural_ucb", "neural_ts"):
        assert (reference.form, paper.form) == ("reference", "paper")
    explicit = cls.Params(training="paper", lr=0.01, init="default")
    assert (explicit.lr, explicit.init) == (0.01, "default")
    with pytest.raises(ValueError, match="init='default'"):
        cls.Params(init="paper")
    with pytest.raises(ValueError, match="mean"):
        cls.Params(objective_scale="sum")
    assert "training" in cls.structural
    # Resolved parameters round-trip (the trial record holds every default written out).
    assert cls.Params(**paper.model_dump()) == paper
    spec = TrialSpec.create(name, {}, {"kind": "synthetic"}, 0, 5)
    assert spec.params["training"] == "reference" and spec.params["init"] == "default"
    for other in ("neural_rbmle_ga", "neural_rbmle_pc"):
        assert "training" not in registry.algorithm_class(other).Params.model_fields


@pytest.mark.parametrize("name", BASELINES)
def test_reference_recipe_networks_have_biases_and_train_in_rounds_k_2k(name):
    problem = Problem(num_arms=2, dim=3, horizon=10)
    extra = {"q": 3} if name == "bootstrapped_nn" else {}
    reference = make_policy(name, problem, train_every=3, **extra)
    paper = make_policy(name, problem, train_every=3, training="paper", **extra)
    assert [b.shape[-1] for b in reference.network.biases] == [8, reference.network.w.shape[1]]
    assert paper.network.biases == []
    # learner_diag.py line 56: train when len % delay == 0 (len = t); the paper recipe: t = 1, 1 + k, ...
    assert [t for t in range(1, 8) if reference.should_train(t)] == [3, 6]
    assert [t for t in range(1, 8) if paper.should_train(t)] == [1, 4, 7]
    # The same trial stream draws the same first network's weights with and without biases (its
    # biases come after them).
    torch.testing.assert_close(reference.initial.W1[..., 0, :],
                               make_policy(name, problem, training="paper", init="default", **extra).initial.W1[..., 0, :])


def test_bootstrap_reference_members_take_data_as_neural_boost_does():
    """neural_boost.py lines 41-47: each member takes the observation with probability p, members in
    order, stopping at the first member that still has no data; the mean of each member's MSE is over
    its own rows."""
    problem = Problem(num_arms=2, dim=3, horizon=40)
    policy = make_policy("bootstrapped_nn", problem, seed=4, q=5, p=0.5)
    mirror = seeding.stream(4, seeding.POLICY_STREAM)
    seeding.torch_generator(mirror)  # the draw that seeded theta_0
    rng = np.random.default_rng(1)
    counts = np.zeros(5, dtype=int)
    for t in range(1, 31):
        contexts = rng.standard_normal((2, 3))
        arm = policy.select(t, contexts).arm
        mirror.integers(5)  # the member the policy acted on
        expected = np.zeros(5)
        for member in range(5):
            expected[member] = mirror.random() < 0.5
            if counts[member] + expected[member] == 0:
                break
        counts += expected.astype(int)
        policy.update(t, contexts, arm, 1.0)
        h = policy.history
        block, slot = h.positions[0][-1]
        np.testing.assert_array_equal(h.mask[0, block, slot].numpy(), expected)
    np.testing.assert_array_equal(policy.member_rows[0], counts)
    assert counts.min() > 0
