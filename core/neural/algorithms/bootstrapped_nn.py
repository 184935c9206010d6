"""BootstrappedNN (Osband et al. 2016; SPEC 1.5).

q networks, each with its own theta_0. Every observation enters each network's training data with
probability p (independent draws when it arrives). After every reward all q networks are retrained
— as one batched computation of q stacked parameter sets; each round one network is drawn uniformly
and the policy acts greedily on it. Paper settings: q = 10, p = 0.8.

Training (``training``, core.neural.algorithms.neural_base):

- ``reference`` (default): uclaml/NeuralTS ``neural_boost.py``, the code the paper ran: networks
  with biases and nn.Linear's default init (lines 8-18); each member takes the observation with
  probability p, members visited in order, and the visit stops at the first member that still has
  no data (lines 41-47: ``if length == 0: break``, which only matters in the first rounds); every
  member then takes 100 steps of ``optim.SGD(lr=1e-2)`` — no weight decay, so ``lam`` is unused —
  on the MSE mean over its own data (lines 48-55). That code trains on every call (it has no
  ``delay``); ``train_every`` > 1 trains in rounds k, 2k, ... as the NeuralUCB code does.
- ``paper``: J gradient steps on each member's own Gaussian l_lambda of eq. (10), core.neural.training.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from banditsweep.core.neural.algorithms.neural_base import BASELINE_STRUCTURE, BaselineParams, NeuralPolicy


class BootstrappedNNParams(BaselineParams):
    q: int = Field(10, ge=1, description="number of bootstrapped networks")
    p: float = Field(0.8, gt=0.0, le=1.0, description="probability that an observation enters a network's data")


class BootstrappedNN(NeuralPolicy):
    """BootstrappedNN (Osband et al. 2016): q networks on bootstrapped data, one drawn per round."""

    STATE = ("member_rows",)

    Params = BootstrappedNNParams
    score_name = "drawn network's output"
    structural = BASELINE_STRUCTURE + ("q",)

    def parameter_sets(self) -> int:
        return self.params.q

    def mask_sets(self) -> int:
        return self.params.q

    def initial_networks(self, draw) -> list[tuple]:
        return [draw() for _ in range(self.params.q)]

    def choose_arms(self, t: int, contexts: np.ndarray):
        drawn = np.array([rng.integers(self.params.q) for rng in self.rngs])
        values = self.current_values(self.active(contexts))  # (G, K, q)
        rows = torch.arange(self.groups, device=self.torch_device)
        played = values[rows, :, torch.as_tensor(drawn, device=self.torch_device)]
        return played.argmax(dim=1).cpu().numpy(), played

    def setup(self) -> None:
        self.member_rows = np.zeros((self.groups, self.params.q), dtype=np.int64)  # each member's data size

    def weight_decay(self) -> bool:
        return False  # neural_boost.py line 48: optim.SGD(lr=1e-2), no weight_decay

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        keep = self.per_trial("p")
        if self.reference:
            weights = np.zeros((self.groups, self.params.q))
            for group, rng in enumerate(self.rngs):
                for member in range(self.params.q):  # neural_boost.py lines 41-47
                    weights[group, member] = rng.random() < keep[group]
                    if self.member_rows[group, member] + weights[group, member] == 0:
                        break
            self.member_rows += weights.astype(np.int64)
        else:
            weights = np.stack([rng.random(self.params.q) < keep[group] for group, rng in enumerate(self.rngs)])
        self.record(t, self.active(contexts), arms, rewards, weights.astype(np.float64))
        if self.should_train(t):
            self.train("gaussian")
