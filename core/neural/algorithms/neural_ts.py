"""NeuralTS (Zhang et al. 2021; SPEC 1.5).

Trained exactly as NeuralUCB (``training``: the reference code, uclaml/NeuralTS ``learner_diag.py``
with ``--style ts``, by default; or the paper's Gaussian l_lambda, core.neural.training). Each arm's reward
is sampled,

    paper form:      r~_a ~ N(f(x_a; theta), nu^2 lambda g_a^T Z^{-1} g_a / m),  Z = lambda I + sum g g^T / m
    reference form:  r~_a ~ N(f(x_a; theta), lambda nu g_a^T Z^{-1} g_a),        Z = lambda I + sum g g^T

and the arm with the largest sample is played (reference form: ``torch.normal(mu, sigma)``,
``learner_diag.py`` lines 38-40); the chosen arm's gradient enters Z. The K standard normals of a
round come from the trial's own stream.
"""

from __future__ import annotations

import numpy as np
import torch

from banditsweep.core.neural.algorithms.neural_ucb import NeuralUCB, NeuralUCBParams


class NeuralTSParams(NeuralUCBParams):
    pass


class NeuralTS(NeuralUCB):
    """NeuralTS (Zhang et al. 2021): a draw around the network output with the gradient-feature variance."""

    STATE = ()

    Params = NeuralTSParams
    score_name = "sampled reward"

    def variance(self, g) -> torch.Tensor:
        quadratic = self.z.quadratic(g, self.block_of_arm)
        if self.params.form == "paper":
            return self.factor("nu") ** 2 * self.factor("lam") * quadratic / self.width
        return self.factor("lam") * self.factor("nu") * quadratic

    def score(self, mean: torch.Tensor, g) -> torch.Tensor:
        noise = np.stack([rng.standard_normal(self.num_arms) for rng in self.rngs])
        noise_t = torch.as_tensor(noise, device=self.torch_device, dtype=self.dtype)
        return mean + torch.sqrt(torch.clamp(self.variance(g), min=0.0)) * noise_t
