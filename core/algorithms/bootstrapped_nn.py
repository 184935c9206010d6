"""BootstrappedNN (Osband et al. 2016; SPEC 1.5).

q networks, each with its own theta_0. Every observation enters each network's training data with
probability p (independent draws when it arrives). After every reward all q networks are retrained
(J gradient steps on their own Gaussian l_lambda, core.training) — as one batched computation of q
stacked parameter sets; each round one network is drawn uniformly and the policy acts greedily on it.
Paper settings: q = 10, p = 0.8.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from banditsweep.core.algorithms.neural_base import SHARED_STRUCTURE, NeuralParams, NeuralPolicy


class BootstrappedNNParams(NeuralParams):
    q: int = Field(10, ge=1, description="number of bootstrapped networks")
    p: float = Field(0.8, gt=0.0, le=1.0, description="probability that an observation enters a network's data")


class BootstrappedNN(NeuralPolicy):
    Params = BootstrappedNNParams
    structural = SHARED_STRUCTURE + ("q",)

    def parameter_sets(self) -> int:
        return self.params.q

    def mask_sets(self) -> int:
        return self.params.q

    def initial_networks(self, draw) -> list[tuple]:
        return [draw() for _ in range(self.params.q)]

    def choose_arms(self, t: int, contexts: np.ndarray) -> np.ndarray:
        drawn = np.array([rng.integers(self.params.q) for rng in self.rngs])
        values = self.current_values(self.active(contexts))  # (G, K, q)
        rows = torch.arange(self.groups, device=self.torch_device)
        return values[rows, :, torch.as_tensor(drawn, device=self.torch_device)].argmax(dim=1).cpu().numpy()

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        keep = self.per_trial("p")
        weights = np.stack([rng.random(self.params.q) < keep[group] for group, rng in enumerate(self.rngs)])
        self.record(t, self.active(contexts), arms, rewards, weights.astype(np.float64))
        if self.should_train(t):
            self.train("gaussian")
