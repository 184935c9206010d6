"""Neural epsilon-greedy (a cheap extra of SPEC 1.5).

The network is trained as NeuralUCB's (J gradient steps on the Gaussian l_lambda, core.neural.training);
each round, with probability epsilon an arm is drawn uniformly, otherwise a_t = argmax_a f(x_{t,a}; theta).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from banditsweep.core.neural.algorithms.neural_base import NeuralParams, NeuralPolicy


class NeuralEpsGreedyParams(NeuralParams):
    epsilon: float = Field(0.05, ge=0.0, le=1.0, description="probability of a uniformly random arm (project choice)")


class NeuralEpsGreedy(NeuralPolicy):
    """Neural epsilon-greedy: the network's best arm, a uniform one with probability epsilon."""

    STATE = ()

    Params = NeuralEpsGreedyParams
    label = "neural epsilon-greedy"
    score_name = "network output"

    def choose_arms(self, t: int, contexts: np.ndarray):
        # The greedy values are checked even in a round that explores: they are the policy's state.
        values = self.current_values(self.active(contexts))[..., 0]
        arms = values.argmax(dim=1).cpu().numpy()
        epsilon = self.per_trial("epsilon")
        for group, rng in enumerate(self.rngs):
            if rng.random() < epsilon[group]:
                arms[group] = rng.integers(self.num_arms)
        return arms, values

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        self.record(t, self.active(contexts), arms, rewards)
        if self.should_train(t):
            self.train("gaussian")
