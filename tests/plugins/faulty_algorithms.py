"""Test-only algorithms, registered as a plugin (``BANDITSWEEP_PLUGINS=faulty_algorithms``).

``always_raises`` raises in round 3; ``crash_once`` kills its worker process in round 5 the first
time each trial runs (a marker file under ``BANDITSWEEP_TEST_MARKERS`` remembers), then behaves
like ``random``; ``crash_always`` kills its worker the moment it starts, every time; ``raises_in_batch`` runs in lockstep batches and its ``fail: true`` trials raise;
``nan_distribution`` exposes a P_t with a NaN from round 3; ``nan_scores`` is ``random`` whose
scores (the distribution it draws from) hold a NaN from round 3; the environment kind
``infinite_rewards`` pays an infinite reward from round 4; ``slow_random`` is ``random`` taking
``pause`` seconds per round (a sweep long enough to break something in the middle of).
"""

import hashlib
import os
import time
from pathlib import Path

from banditsweep.core.engine import registry
from banditsweep.core.kernel.algorithms.random_policy import RandomPolicy
from banditsweep.core.engine.contracts import Config
from banditsweep.core.baselines.synthetic import SyntheticBandit


class AlwaysRaises(RandomPolicy):
    def select(self, t, contexts):
        if t == 3:
            raise ValueError("deliberate failure in round 3")
        return super().select(t, contexts)


class CrashOnce(RandomPolicy):
    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.marker = Path(os.environ["BANDITSWEEP_TEST_MARKERS"]) / hashlib.sha1(
            repr(rng.bit_generator.state).encode()).hexdigest()

    def select(self, t, contexts):
        if t == 5 and not self.marker.exists():
            self.marker.touch()
            # Dies mid-trial, as a worker out of memory does: a death within a millisecond of the
            # previous call's end may be counted for that call (workers.execution.dispatcher.requeue_dead).
            time.sleep(0.3)
            os._exit(1)
        return super().select(t, contexts)


class CrashAlways(RandomPolicy):
    def __init__(self, params, problem, rng, device="cpu"):
        os._exit(1)


registry.register_algorithm("always_raises", AlwaysRaises)
registry.register_algorithm("crash_once", CrashOnce)
registry.register_algorithm("crash_always", CrashAlways)


class RaisesInBatchParams(Config):
    fail: bool = False


class RaisesInBatch(RandomPolicy):
    """Runs in lockstep batches (one batch key for all trials of a horizon); a trial with ``fail``
    raises in round ``horizon - 1``, after every trial of its batch has streamed points: the batch
    is then run again one trial at a time."""

    Params = RaisesInBatchParams

    @classmethod
    def batch_key(cls, spec):
        return ("raises_in_batch", spec.horizon)

    @classmethod
    def preferred_batch_size(cls, spec, on_gpu):
        return 8

    def select(self, t, contexts):
        if self.params.fail and t == self.problem.horizon - 1:
            raise ValueError("deliberate failure of one trial of a batch")
        return super().select(t, contexts)


registry.register_algorithm("raises_in_batch", RaisesInBatch)


class InfiniteRewards(SyntheticBandit):
    """The synthetic bandit whose reward is infinite from round 4 on (a diverged simulator)."""

    def step(self, t, decision):
        feedback = super().step(t, decision)
        if t >= 4:
            feedback.reward = float("inf")
        return feedback


class NanDistribution(RandomPolicy):
    """Random on a kernel domain whose P_t holds a NaN from round 3 on (a diverged Exp3 weight)."""

    def select(self, t, contexts):
        decision = super().select(t, contexts)
        if t >= 3 and decision.probabilities is not None:
            decision.probabilities = decision.probabilities.copy()
            decision.probabilities[0] = float("nan")
        return decision


class NanScores(RandomPolicy):
    """Random whose scores hold a NaN at arm 1 from round 3 on: random's own scores (1/K for every
    arm) cannot leave the numbers, so the guard is shown on injected ones."""

    def select(self, t, contexts):
        decision = super().select(t, contexts)
        if t >= 3:
            decision.scores = decision.scores.copy()
            decision.scores[1] = float("nan")
        return decision


registry.register_environment("infinite_rewards", InfiniteRewards)
registry.register_algorithm("nan_distribution", NanDistribution)
registry.register_algorithm("nan_scores", NanScores)


class SlowRandomParams(Config):
    pause: float = 0.01


class SlowRandom(RandomPolicy):
    Params = SlowRandomParams

    def select(self, t, contexts):
        time.sleep(self.params.pause)
        return super().select(t, contexts)


registry.register_algorithm("slow_random", SlowRandom)
