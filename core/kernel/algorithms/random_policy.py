"""Random: every arm (every point of X, SPEC 3.6) with equal probability; on a sharded domain
(SPEC 4) :class:`ShardedRandom`."""

from __future__ import annotations

import numpy as np

from banditsweep.core.engine.contracts import ADVERSARIAL_DOMAIN, CONTEXTUAL, Config, Decision, Policy
from banditsweep.core.kernel.sharded.algorithm import Round, ShardedAlgorithm
from banditsweep.core.kernel.sharded.protocol import Play, UniformSums


class RandomParams(Config):
    pass


class RandomPolicy(Policy):
    """Every arm (every point of X) with equal probability: the baseline every method must beat."""

    STATE = ()

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


# ---- on a sharded domain (SPEC 4, core.kernel.sharded) -------------------------------------------


class ShardedRandom(ShardedAlgorithm, shards=RandomPolicy):
    """Random on shards: x_t uniform on X from the policy stream, as :class:`RandomPolicy` draws it;
    the adversary's sums F (1/n) are the same every round, summed over the shards once."""

    STATE = ("uniform_sums",)

    uniform_sums: np.ndarray   # (m,) sum_x f^(i)(x) / n

    def prepare(self, trial) -> None:
        self.uniform_sums = np.sum(np.stack(trial.group.map(UniformSums())), axis=0)

    def play(self, trial, t: int) -> Round:
        arm = int(trial.rng.integers(trial.n))
        candidate = trial.adversary(self.uniform_sums)
        moved = trial.group.map(Play(candidate, arm))
        reward = next(part.reward for part in moved if part.reward is not None)
        return Round(arm, candidate, self.uniform_sums, reward, max(part.best for part in moved))

    @classmethod
    def from_landed(cls, attributes: dict) -> dict:
        return {"uniform_sums": attributes["dots"]}
