"""NeuralUCB (Zhou et al. 2020; SPEC 1.5).

The network f(x; theta) is fitted after every reward (``train_every``), warm-started, by one of two
recipes (``training``, core.neural.algorithms.neural_base): ``reference`` (default), the code the paper ran
its baselines with (uclaml/NeuralTS ``learner_diag.py`` with ``--style ucb``: nn.Linear layers with
biases, 100 steps of SGD lr 0.01 on the MSE mean with weight decay lambda / t towards 0), or
``paper``, J gradient steps of size eta on the squared loss with weight decay
sum_s (f(x_s; theta) - r_s)^2 / 2 + m lambda ||theta - theta_0||^2 / 2 (the Gaussian l_lambda of
core.neural.training, eq. 10), no biases. The arm maximising

    paper form:      f(x_a; theta) + nu sqrt(g_a^T Z^{-1} g_a / m),   Z = lambda I + sum g g^T / m
    reference form:  f(x_a; theta) + sqrt(lambda nu g_a^T Z^{-1} g_a), Z = lambda I + sum g g^T

is played (``form``; reference form: ``learner_diag.py`` lines 38 and 42, with U the diagonal of Z,
line 44), with g_a = g(x_{t,a}; theta_{t-1}) — biases included under the reference recipe (line 37);
the chosen arm's gradient enters Z. ``z`` picks the diagonal surrogate of Z^{-1} (reference code,
paper App. F) or the exact inverse.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from banditsweep.core.neural.algorithms.neural_base import (
    BASELINE_STRUCTURE,
    BaselineParams,
    GradientExplorationPolicy,
)
from banditsweep.core.engine.trial import ADDED_LATER
from pydantic import Field


class NeuralUCBParams(BaselineParams):
    nu: float = Field(1.0, ge=0.0, description="exploration scale nu")
    form: Literal["paper", "reference"] = Field(
        "reference", description="bonus and Z as in the reference code or the paper (default under training=paper)")
    z: Literal["diag", "full"] = Field("diag", description="Z^{-1}: inverse of the diagonal (paper) or exact")
    z_inverse: Literal["update", "invert"] = Field(
        "update", json_schema_extra={ADDED_LATER: True},
        description="with z: full, keep Z^{-1} by Sherman-Morrison updates or invert Z afresh every round (Table 3)")


class NeuralUCB(GradientExplorationPolicy):
    """NeuralUCB (Zhou et al. 2020): network output plus a gradient-feature confidence width."""

    STATE = ("last_index", "pending")

    Params = NeuralUCBParams
    score_name = "index"
    structural = BASELINE_STRUCTURE + ("form", "z", "z_inverse")

    @property
    def z_scale_reference(self) -> bool:  # type: ignore[override]
        return self.params.form == "reference"

    def variance(self, g) -> torch.Tensor:
        """The squared width of each arm's confidence interval: (G, K)."""
        quadratic = self.z.quadratic(g, self.block_of_arm)
        if self.params.form == "paper":
            return self.factor("nu") ** 2 * quadratic / self.width
        return self.factor("lam") * self.factor("nu") * quadratic

    def factor(self, name: str) -> torch.Tensor:
        return torch.as_tensor(self.per_trial(name), device=self.torch_device, dtype=self.dtype).view(-1, 1)

    def score(self, mean: torch.Tensor, g) -> torch.Tensor:
        return mean + torch.sqrt(torch.clamp(self.variance(g), min=0.0))

    def choose_arms(self, t: int, contexts: np.ndarray):
        mean, g = self.gradients(self.active(contexts))
        index = self.score(mean, g)
        self.last_index = index
        arms = index.argmax(dim=1).cpu().numpy()
        self.pending = self.chosen(g, arms)
        return arms, index

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        g_chosen, blocks = self.pending
        self.z.add(g_chosen, blocks)
        self.record(t, self.active(contexts), arms, rewards)
        if self.should_train(t):
            self.train("gaussian")
