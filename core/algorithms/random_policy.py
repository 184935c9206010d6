"""Random: every arm (every point of X, SPEC 3.6) with equal probability."""

from __future__ import annotations

import numpy as np

from banditsweep.core.contracts import ADVERSARIAL_DOMAIN, CONTEXTUAL, Config, Decision, Policy


class RandomParams(Config):
    pass


class RandomPolicy(Policy):
    """Every arm (every point of X) with equal probability: the baseline every method must beat."""

    Params = RandomParams

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        return 16 * arms   # the uniform distribution over the arms and a draw
    supports = frozenset({CONTEXTUAL, ADVERSARIAL_DOMAIN})
    label = "Random"
    score_name = "sampling distribution"

    def select(self, t: int, contexts: np.ndarray) -> Decision:
        k = self.problem.num_arms
        uniform = np.full(k, 1.0 / k)
        # P_t is shown to the adversary of a kernel domain only; the scores are the distribution drawn from.
        exposed = uniform if self.problem.interaction == ADVERSARIAL_DOMAIN else None
        return Decision(arm=int(self.rng.integers(k)), probabilities=exposed, scores=uniform)

    def update(self, t: int, contexts: np.ndarray, arm: int, reward: float) -> None:
        pass
