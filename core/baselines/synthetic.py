"""Synthetic contextual bandit of the NeuralUCB paper (SPEC 1.2): the quick-start environment.

Contexts are K points uniform on the unit sphere of R^d; the reward of arm a is h(x_a) + N(0, noise^2):

    h1(x) = 10 (x^T a)^2,   h2(x) = x^T A^T A x,   h3(x) = cos(3 x^T a),

with a uniform on the sphere and A having N(0, 1) entries (both drawn once per trial from the seed).
Regret is the pseudo-regret max_a h(x_a) - h(x_chosen). The constants (d = 20, K = 4, noise 0.1)
are a project choice; all are parameters.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from banditsweep.core.engine.contracts import Config, Decision, Environment, Feedback, Problem


class SyntheticConfig(Config):
    function: Literal["h1", "h2", "h3"] = Field(
        "h1", description="reward function: h1 = 10 (x^T a)^2, h2 = x^T A^T A x, h3 = cos(3 x^T a)")
    arms: int = Field(4, ge=2, description="arms K per round")
    dim: int = Field(20, ge=1, description="context dimension d")
    noise: float = Field(0.1, ge=0.0, description="standard deviation of the Gaussian reward noise")


class SyntheticBandit(Environment):
    """Synthetic contextual bandit of the NeuralUCB paper: rewards h(x) + noise on unit-sphere contexts."""

    STATE = ("_a", "_A", "_contexts", "_mean", "_noise", "_cumulative")

    Config = SyntheticConfig
    label_field = "function"
    title_fields = ("function",)

    @classmethod
    def title(cls, config: SyntheticConfig) -> str:
        return f"synthetic {config.function}"

    def __init__(self, config: SyntheticConfig, horizon: int, rng: np.random.Generator):
        super().__init__(config, horizon, rng)
        d = config.dim
        direction = rng.standard_normal(d)
        self._a = direction / np.linalg.norm(direction)
        self._A = rng.standard_normal((d, d))
        raw = rng.standard_normal((horizon, config.arms, d))
        self._contexts = raw / np.linalg.norm(raw, axis=2, keepdims=True)
        self._mean = self._h(self._contexts)  # (T, K)
        self._noise = rng.standard_normal((horizon, config.arms)) * config.noise
        self._cumulative = 0.0

    @classmethod
    def footprint(cls, config: SyntheticConfig, horizon: int) -> tuple[int, int, int]:
        # The drawn and the normalised contexts (T, K, d) at once, the means and the noise (T, K), A.
        k, d = config.arms, config.dim
        return k, d, 8 * (2 * horizon * k * d + 2 * horizon * k + d * d)

    def _h(self, x: np.ndarray) -> np.ndarray:
        if self.config.function == "h1":
            return 10.0 * (x @ self._a) ** 2
        if self.config.function == "h2":
            projected = x @ self._A.T
            return np.sum(projected * projected, axis=-1)
        return np.cos(3.0 * (x @ self._a))

    @property
    def problem(self) -> Problem:
        return Problem(num_arms=self.config.arms, dim=self.config.dim, horizon=self.horizon)

    def contexts(self, t: int) -> np.ndarray:
        return self._contexts[t - 1]

    def step(self, t: int, decision: Decision) -> Feedback:
        means = self._mean[t - 1]
        arm = decision.arm
        regret = float(means.max() - means[arm])
        self._cumulative += regret
        return Feedback(reward=float(means[arm] + self._noise[t - 1, arm]), regret=regret,
                        cumulative_regret=self._cumulative)
