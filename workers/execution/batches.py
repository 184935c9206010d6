"""Lockstep batches: which queued trials run together in one actor call, and how many.

Trials whose algorithm gives them equal batch keys (``core.engine.trial.batch_key``: the algorithm's own
``batch_key``, None for one that never batches) are grouped and cut into batches; every other trial
is a batch of its own. The actor plays a batch round by round as one computation (core.engine.round_loop).
"""

from __future__ import annotations

import math
from typing import Any

from banditsweep.core.engine.trial import TrialSpec, batch_key
from banditsweep.workers.execution.run_values import Job

# Lockstep batch sizes when neither the spec (resources.batch_trials) nor the algorithm says otherwise.
# On a GPU, batching trials is what fills the device. On a CPU slot it pays little for the neural
# algorithms (0.8-2.1x throughput for 10 trials with both cores, docs/benchmarks.md: every trial has
# its own weights, so a batch only saves per-operation overhead), and a one-CPU trial actor would
# hold ten trials' results back until the slowest finishes, so trials run one at a time there.
CPU_BATCH = 1
GPU_BATCH = 32


def preferred_batch_size(spec: TrialSpec, on_gpu: bool) -> int:
    """How many trials like ``spec`` to run in one lockstep batch on this kind of device: the
    algorithm's ``preferred_batch_size`` where it states one, else the defaults above."""
    preferred = spec.policy_class.preferred_batch_size(spec, on_gpu)
    if preferred is None:
        return GPU_BATCH if on_gpu else CPU_BATCH
    return max(1, int(preferred))


def default_batch_size(spec: TrialSpec, on_gpu: bool, group_size: int, workers: int) -> int:
    """What the algorithm prefers on this device, but small enough that every worker gets a batch."""
    return max(1, min(preferred_batch_size(spec, on_gpu), math.ceil(group_size / max(1, workers))))


def make_batches(jobs: list[Job], batch_trials: int | None, on_gpu: bool, workers: int,
                 saved: list[list[str]] = ()) -> list[list[Job]]:
    """``jobs`` cut into batches: first each ``saved`` batch (trial ids, in order) whose trials are
    all among ``jobs``, as it was (a batch with a saved state resumes from it only as the same
    batch); then each batchable group of the others in slices of ``batch_trials`` (the spec's) or
    the default size, in queue order; then the trials that run alone, one per batch."""
    by_id = {job.spec.trial_id: job for job in jobs}
    resumed: list[list[Job]] = []
    for trials in saved:
        if all(trial in by_id for trial in trials) and len(set(trials)) == len(trials):
            resumed.append([by_id.pop(trial) for trial in trials])
    jobs = [job for job in jobs if job.spec.trial_id in by_id]
    groups: dict[Any, list[Job]] = {}
    singles: list[list[Job]] = []
    for job in jobs:
        key = batch_key(job.spec)
        if key is None:
            singles.append([job])
        else:
            groups.setdefault(key, []).append(job)
    batches = []
    for group in groups.values():
        size = batch_trials or default_batch_size(group[0].spec, on_gpu, len(group), workers)
        batches.extend(group[i:i + size] for i in range(0, len(group), size))
    return resumed + batches + singles
