"""Test-only algorithms, registered as a plugin (``BANDITSWEEP_PLUGINS=stateful_policies``), that keep
state of their own beyond their base's: ``counting_random`` declares nothing (a plugin's class is
then saved whole, every attribute it carries); ``declared_counting_random`` declares its state and is
held to it (core.engine.state_declaration). Both are ``random`` counting the rounds they learnt from.
``paced_lints`` is LinTS slowed to a known pace.
"""

import time

from banditsweep.core.engine import registry
from banditsweep.core.baselines.linear import LinTS
from banditsweep.core.kernel.algorithms.random_policy import RandomPolicy


class CountingRandom(RandomPolicy):
    def update(self, t, contexts, arm, reward):
        self.rounds_seen = getattr(self, "rounds_seen", 0) + 1


class DeclaredCountingRandom(RandomPolicy):
    STATE = ("rounds_seen",)
    TRANSIENT = ("last_reward",)   # not saved: a restored policy starts without it

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.rounds_seen = 0

    def update(self, t, contexts, arm, reward):
        self.rounds_seen += 1
        self.last_reward = reward


registry.register_algorithm("counting_random", CountingRandom)
registry.register_algorithm("declared_counting_random", DeclaredCountingRandom)


class PacedLinTS(LinTS):
    """LinTS that waits ``PACE`` seconds a round: the same choices, slow enough for a test to stop its
    run mid-trial on any machine."""

    PACE = 0.002

    def select(self, t, contexts):
        time.sleep(self.PACE)
        return super().select(t, contexts)


registry.register_algorithm("paced_lints", PacedLinTS)
