"""NeuralRBMLE-PC (paper Algorithm 2; SPEC 1.4).

One base estimator theta_hat_t: J steps of gradient ascent with step size eta on l_lambda(F_t; theta)
(eq. 14, Gaussian likelihood), warm-started. The reward bias is applied as a parameter correction

    theta_bar_{t,a} = theta_hat_t + (alpha(t) / m) Z_{t-1}^{-1} g(x_{t,a}; theta_hat_t)         (eq. 15)

and the arm with the largest surrogate index f(x_{t,a}; theta_bar_{t,a}) is played (Alg. 2 line 8).
After the reward, theta_hat is retrained on the extended history (line 9) and
Z_t = Z_{t-1} + g(x_t; theta_hat_t) g(x_t; theta_hat_t)^T / m, Z_0 = lambda I (line 10).
Z^{-1} is the inverse of Z's diagonal (``z="diag"``, the paper's experiments) or exact (``z="full"``);
both live in core.neural.z_matrix. alpha(t) = nu t^n.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from banditsweep.core.neural.algorithms.neural_base import (
    SHARED_STRUCTURE,
    BiasedParams,
    GradientExplorationPolicy,
)
from banditsweep.core.engine.trial import ADDED_LATER
from pydantic import Field


class NeuralRBMLEPCParams(BiasedParams):
    z: Literal["diag", "full"] = Field("diag", description="Z^{-1}: inverse of the diagonal (paper) or exact")
    z_inverse: Literal["update", "invert"] = Field(
        "update", json_schema_extra={ADDED_LATER: True},
        description="with z: full, keep Z^{-1} by Sherman-Morrison updates or invert Z afresh every round (Table 3)")


class NeuralRBMLEPC(GradientExplorationPolicy):
    """NeuralRBMLE-PC (NeuralRBMLE paper, Algorithm 2): one network, the reward bias as a parameter correction (eq. 15)."""

    STATE = ("last_index",)

    Params = NeuralRBMLEPCParams
    label = "NeuralRBMLE-PC"
    score_name = "index"
    structural = SHARED_STRUCTURE + ("z", "z_inverse")

    def choose_arms(self, t: int, contexts: np.ndarray):
        """Alg. 2 lines 5-8 for G lockstep trials of K arms: ``contexts`` (G, K, d); ``g`` the gradient
        of f(x_{t,a}; .) at theta_hat_t for each arm (core.neural.networks.ArmParameters: every layer's
        tensor with a leading (G, K)); the index (G, K)."""
        x = self.active(contexts)
        theta_hat = self.network.arm_parameters(self.block_of_arm)   # theta_hat_t, trained after the last reward
        _, g = theta_hat.forward(x, with_gradient=True)              # g(x_{t,a}; theta_hat_t)
        correction = torch.as_tensor(self.alpha(t) / self.width, device=self.torch_device, dtype=self.dtype)
        theta_bar = theta_hat.plus(self.z.solve(g, self.block_of_arm), correction.view(-1, 1))  # eq. (15)
        index, _ = theta_bar.forward(x)                              # Alg. 2 line 8: f(x_{t,a}; theta_bar_{t,a})
        self.last_index = index
        return index.argmax(dim=1).cpu().numpy(), index

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        x = self.active(contexts)
        self.record(t, x, arms, rewards)
        if self.should_train(t):            # Alg. 2 line 9: J ascent steps on l_lambda (eq. 14), warm-started
            self.train("gaussian")
        _, g = self.gradients(x)  # g(x_{t,a}; theta_hat_t) at the retrained estimator
        g_chosen, blocks = self.chosen(g, arms)
        self.z.add(g_chosen, blocks)        # Alg. 2 line 10: Z_t = Z_{t-1} + g g^T / m
