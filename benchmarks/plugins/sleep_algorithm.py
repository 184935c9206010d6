"""A plugin algorithm that only sleeps: the workload of ``benchmarks/sweep_overhead.py``.

Registered as ``sleep`` when this module is imported through ``BANDITSWEEP_PLUGINS=sleep_algorithm``
(with ``benchmarks/plugins`` on ``PYTHONPATH``). It runs on the ``synthetic`` environment (any
contextual one), always plays arm 0, and its trial takes exactly ``seconds`` of wall time in total
(default 0.5 s) without using the CPU: round t of T sleeps until ``seconds * t / T`` after the
policy was built, so the rounds share the time evenly and oversleeping in one round is made up in
the next.

``diagnostics()`` (called once, when the trial's last round is done) records, as wall-clock epoch
seconds, when the policy was built (``clock_start``) and when the trial ended (``clock_end``), plus
the worker's ``pid`` and the real path of the ``banditsweep`` package the worker imported
(``package``), so a benchmark can read from the trials table when each trial really ran, on which
actor, and with which code tree — independently of the framework's own bookkeeping.
"""

from __future__ import annotations

import os
import time
import zlib

import numpy as np
from pydantic import Field

import banditsweep
from banditsweep.core.engine import registry
from banditsweep.core.engine.contracts import CONTEXTUAL, Config, Decision, Policy

PACKAGE = os.path.dirname(os.path.realpath(banditsweep.__file__))


class SleepParams(Config):
    seconds: float = Field(0.5, ge=0.0)


class SleepPolicy(Policy):
    Params = SleepParams
    supports = frozenset({CONTEXTUAL})

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.clock_start = time.time()
        self._started = time.perf_counter()

    def select(self, t: int, contexts: np.ndarray) -> Decision:
        deadline = self._started + self.params.seconds * t / self.problem.horizon
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return Decision(arm=0)

    def update(self, t: int, contexts: np.ndarray, arm: int, reward: float) -> None:
        pass

    def diagnostics(self) -> dict:
        return {"clock_start": self.clock_start, "clock_end": time.time(), "pid": os.getpid(),
                "package": zlib.crc32(PACKAGE.encode())}   # diagnostics are numbers: the path's CRC-32


registry.register_algorithm("sleep", SleepPolicy)
