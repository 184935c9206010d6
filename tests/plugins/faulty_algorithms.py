"""Test-only algorithms, registered as a plugin (``BANDITSWEEP_PLUGINS=faulty_algorithms``).

``always_raises`` raises in round 3; ``crash_once`` kills its worker process in round 5 the first
time each trial runs (a marker file under ``BANDITSWEEP_TEST_MARKERS`` remembers), then behaves
like ``random``.
"""

import hashlib
import os
from pathlib import Path

from banditsweep.core import registry
from banditsweep.core.algorithms.random_policy import RandomPolicy


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
            os._exit(1)
        return super().select(t, contexts)


registry.register_algorithm("always_raises", AlwaysRaises)
registry.register_algorithm("crash_once", CrashOnce)
