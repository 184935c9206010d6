"""DeepFPL: neural follow-the-perturbed-leader (Kveton et al. 2020; SPEC 1.5).

After every reward the network is retrained (warm-started from the previous parameters — project
choice) on the history with each past reward perturbed by fresh noise, r_s + a z_s, z_s ~ N(0, 1),
a = nu; the next round acts greedily: a_t = argmax_a f(x_{t,a}; theta). The noise of a round is drawn
from the trial's stream in the order the rewards arrived.

Training (``training``, core.neural.algorithms.neural_base): ``reference`` (default) is the recipe of the
baselines' code the paper used (uclaml/NeuralTS ``learner_diag.py`` lines 9-16, 47-64: biases,
100 steps of SGD lr 0.01 on the MSE mean, weight decay lambda / t towards 0). That code has no
DeepFPL, so this is project choice: DeepFPL trained as that code trains NeuralUCB / NeuralTS, on the
perturbed rewards. ``paper`` is J gradient steps on the Gaussian l_lambda of eq. (10) at eta.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from banditsweep.core.neural.algorithms.neural_base import BASELINE_STRUCTURE, BaselineParams, NeuralPolicy


class DeepFPLParams(BaselineParams):
    nu: float = Field(1.0, ge=0.0, description="standard deviation a of the reward perturbation")


class DeepFPL(NeuralPolicy):
    """DeepFPL (Kveton et al. 2020): retrained on perturbed rewards, then greedy (follow the perturbed leader)."""

    STATE = ()

    Params = DeepFPLParams
    score_name = "network output"
    structural = BASELINE_STRUCTURE

    def choose_arms(self, t: int, contexts: np.ndarray):
        values = self.current_values(self.active(contexts))[..., 0]
        return values.argmax(dim=1).cpu().numpy(), values

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        self.record(t, self.active(contexts), arms, rewards)
        if not self.should_train(t):
            return
        history = self.history
        noise = np.zeros((self.groups, self.blocks, history.used))
        scale = self.per_trial("nu")
        for group, rng in enumerate(self.rngs):
            blocks, slots = np.asarray(history.positions[group]).T
            noise[group, blocks, slots] = scale[group] * rng.standard_normal(len(blocks))
        _, reward, _ = history.view()
        self.train("gaussian", reward=reward + torch.as_tensor(noise, device=self.torch_device, dtype=self.dtype))
