"""Dense, autograd-based references for the neural tests: the network of eq. (2) written plainly."""

from __future__ import annotations

import numpy as np
import torch

from banditsweep.core.engine.contracts import Config, Decision, Environment, Feedback, Problem


def dense_parameters(network, group: int = 0, parameter_set: int = 0) -> list[torch.Tensor]:
    """theta of one network as plain tensors: W1 (d, m), hidden (m, m)..., w (m,), then the biases
    b_1 (m,), ..., b_L () if the network has them."""
    W1 = network.W1[group, :, :, parameter_set]
    return [W1.reshape(-1, W1.shape[-1]).clone(), *[h[group, parameter_set].clone() for h in network.hidden],
            network.w[group, parameter_set].clone(), *[b[group, parameter_set].clone() for b in network.biases]]


def _split(theta: list[torch.Tensor], biased: bool):
    if not biased:
        return theta, None
    layers = len(theta) // 2
    return theta[:layers], theta[layers:]


def dense_forward(theta: list[torch.Tensor], x: torch.Tensor, out_scale: float, biased: bool = False) -> torch.Tensor:
    """f(x; theta) = out_scale W_L sigma(... sigma(W_1 x + b_1) ...) (+ b_L) for rows x (n, d)."""
    weights, biases = _split(theta, biased)
    act = x @ weights[0]
    for index, W in enumerate(weights[1:]):
        act = torch.relu(act + biases[index] if biased else act)
        act = act @ W
    f = out_scale * act
    return f + biases[-1] if biased else f


def dense_gradient(theta: list[torch.Tensor], x: torch.Tensor, out_scale: float, biased: bool = False) -> torch.Tensor:
    """g(x; theta) flattened in the order [vec W1 (d, m), hidden, w, biases] for one row x (d,)."""
    leaves = [p.detach().clone().requires_grad_(True) for p in theta]
    f = dense_forward(leaves, x[None], out_scale, biased)[0]
    grads = torch.autograd.grad(f, leaves)
    return torch.cat([g.reshape(-1) for g in grads])


def disjoint_contexts(features: np.ndarray) -> np.ndarray:
    """(K, d') rows of one feature vector per arm -> (K, d'K) disjoint encoding (SPEC 1.2)."""
    K, d = features.shape
    out = np.zeros((K, K * d))
    for arm in range(K):
        out[arm, arm * d:(arm + 1) * d] = features[arm]
    return out


class DisjointToyConfig(Config):
    arms: int = 3
    block: int = 4


class DisjointToy(Environment):
    """A small classification-like bandit with disjoint-encoded contexts: reward 1 for the arm whose
    weight vector best matches the shared feature row, else 0."""

    Config = DisjointToyConfig

    def __init__(self, config, horizon, rng):
        super().__init__(config, horizon, rng)
        self.rows = rng.standard_normal((horizon, config.block))
        self.rows /= np.linalg.norm(self.rows, axis=1, keepdims=True)
        self.weights = rng.standard_normal((config.arms, config.block))
        self.cumulative = 0.0

    @property
    def problem(self):
        return Problem(num_arms=self.config.arms, dim=self.config.arms * self.config.block, horizon=self.horizon,
                       disjoint_block=self.config.block)

    def contexts(self, t):
        return disjoint_contexts(np.repeat(self.rows[t - 1][None], self.config.arms, axis=0))

    def step(self, t, decision: Decision):
        best = int(np.argmax(self.weights @ self.rows[t - 1]))
        reward = float(decision.arm == best)
        self.cumulative += 1.0 - reward
        return Feedback(reward=reward, regret=1.0 - reward, cumulative_regret=self.cumulative)


class DenseToy(DisjointToy):
    """The same bandit, with the disjoint structure hidden from the policy (dense computation)."""

    @property
    def problem(self):
        return Problem(num_arms=self.config.arms, dim=self.config.arms * self.config.block, horizon=self.horizon)
