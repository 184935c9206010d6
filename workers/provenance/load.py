"""The machine's load while a trial ran, for its record (``TrialRecord.load_average``).

A trial's wall time is what its core gave it: on a machine whose run queue holds L processes for its
C CPUs, a CPU-bound process gets about C / L of a core once L > C. The record keeps the mean of the
1-minute load average (``os.getloadavg()[0]``) sampled at the trial's start, at most once a second
while it streams progress, and at its end; the runtime facts keep C (``machine_cpus``). The plan
(sweeps.planning.plan) uses both to tell a quiet measurement from a crowded one (:func:`quiet_factor`).
"""

from __future__ import annotations

import math
import os
import time


def load_now() -> float | None:
    """The 1-minute load average, or None where the OS has none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


class LoadSampler:
    """Samples of the load average over one trial (or one batch of trials run together)."""

    def __init__(self, every_seconds: float = 1.0, clock=time.monotonic, load=load_now):
        self.every, self.clock, self.load = every_seconds, clock, load
        self.samples: list[float] = []
        self.last = -math.inf
        self.sample()

    def sample(self, force: bool = True) -> None:
        now = self.clock()
        if not force and now - self.last < self.every:
            return
        value = self.load()
        if value is not None and math.isfinite(value):
            self.samples.append(value)
        self.last = now

    def tick(self) -> None:
        """A sample unless one was taken less than ``every_seconds`` ago (call it as often as you like)."""
        self.sample(force=False)

    def mean(self) -> float | None:
        """The mean of the samples (a last one taken now), or None without any."""
        self.sample()
        return sum(self.samples) / len(self.samples) if self.samples else None


def quiet_factor(load: float | None, cpus: int | None) -> float:
    """How much of a trial's measured time a quiet machine would have taken: min(1, C / max(L, 1)).

    At a load L up to C every runnable process has a CPU, so the time stands (1); above, each had
    about C / L of one, so the time shrinks by that share. Unknown (None / NaN) load or CPUs: 1."""
    if load is None or cpus is None or not math.isfinite(float(load)) or int(cpus) < 1:
        return 1.0
    return min(1.0, int(cpus) / max(float(load), 1.0))
