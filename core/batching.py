"""Running several trials on one actor.

``run_trials`` is what a trial actor calls. Trials whose algorithm implements lockstep batching
(``Policy.batch_key`` / ``Policy.run_batch``) and share a batch key run as one batched computation;
every other trial runs alone through :func:`banditsweep.core.trial.run_trial`. Either way the result
of each trial equals running it alone (to float tolerance; tested per algorithm).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from banditsweep.core import registry, seeding
from banditsweep.core.contracts import Decision
from banditsweep.core.trial import (TrialRecorder, TrialResult, TrialSpec, resolve_algorithm, resolve_environment,
                                    run_trial)

# on_progress(index of the trial in the batch, round t, cumulative regret)
BatchProgress = Callable[[int, int, float], None]


def batch_key(spec: TrialSpec) -> tuple | None:
    """Trials with equal non-None keys may run in lockstep; None means the trial runs alone."""
    policy_cls = registry.algorithm_class(spec.algorithm)
    key_fn = getattr(policy_cls, "batch_key", None)
    return None if key_fn is None else key_fn(spec)


# Lockstep batch sizes when neither the spec (resources.batch_trials) nor the algorithm says otherwise.
# On a GPU, batching trials is what fills the device. On a CPU slot it pays little for the neural
# algorithms (0.8-2.1x throughput for 10 trials with both cores, docs/benchmarks.md: every trial has
# its own weights, so a batch only saves per-operation overhead), and a one-CPU trial actor would
# hold ten trials' results back until the slowest finishes, so trials run one at a time there.
CPU_BATCH = 1
GPU_BATCH = 32


def preferred_batch_size(spec: TrialSpec, on_gpu: bool) -> int:
    """How many trials like ``spec`` to run in one lockstep batch on this kind of device: the
    algorithm's ``preferred_batch_size(spec, on_gpu)`` where it defines one, else the defaults above."""
    policy_cls = registry.algorithm_class(spec.algorithm)
    preferred = getattr(policy_cls, "preferred_batch_size", None)
    if preferred is not None:
        return max(1, int(preferred(spec, on_gpu)))
    return GPU_BATCH if on_gpu else CPU_BATCH


def run_trials(specs: list[TrialSpec], device: str = "cpu", on_progress: BatchProgress | None = None,
               progress_every: int = 100) -> list[TrialResult]:
    """Run ``specs`` (all with the same batch key when more than one batches) and return their results."""
    keys = {batch_key(spec) for spec in specs}
    if len(specs) > 1 and len(keys) == 1 and None not in keys:
        policy_cls = registry.algorithm_class(specs[0].algorithm)
        return policy_cls.run_batch(specs, device=device, on_progress=on_progress,
                                    progress_every=progress_every)
    results = []
    for index, spec in enumerate(specs):
        callback = None if on_progress is None else (lambda t, r, i=index: on_progress(i, t, r))
        results.append(run_trial(spec, device, callback, progress_every))
    return results


def run_lockstep(policy_cls, specs: list[TrialSpec], device: str = "cpu", on_progress: BatchProgress | None = None,
                 progress_every: int = 100) -> list[TrialResult]:
    """Run trials of one batch key in lockstep with one batched policy (``policy_cls.batched``).

    Each trial gets its own environment and its own random streams, exactly as in
    :func:`banditsweep.core.trial.run_trial`; one round of the batch is one batched ``select`` and one
    batched ``update``. The per-round ``seconds`` of each trial is the batch's round time divided by
    the batch size (so summed over the trials of a batch it is the batch's wall time).
    """
    horizon = specs[0].horizon
    if any(spec.horizon != horizon for spec in specs):
        raise ValueError("trials of one lockstep batch must share the horizon")
    envs = []
    for spec in specs:
        env_cls = registry.environment_class(spec.environment["kind"])
        envs.append(env_cls(resolve_environment(spec.environment), spec.horizon,
                            seeding.stream(spec.seed, seeding.ENVIRONMENT_STREAM)))
    problem = envs[0].problem
    if any(env.problem != problem for env in envs[1:]):
        raise ValueError("trials of one lockstep batch must share the environment shape")
    if envs[0].interaction not in policy_cls.supports:
        raise ValueError(f"algorithm {specs[0].algorithm!r} does not run on {specs[0].environment['kind']!r}")
    params = [resolve_algorithm(spec.algorithm, spec.params) for spec in specs]
    rngs = [seeding.stream(spec.seed, seeding.POLICY_STREAM) for spec in specs]
    policy = policy_cls.batched(params, problem, rngs, device=device)
    recorder = TrialRecorder(len(specs), horizon)
    for index in range(horizon):
        t = index + 1
        started = time.perf_counter()
        contexts = np.stack([env.contexts(t) for env in envs])
        arms = np.asarray(policy.select_batch(t, contexts), dtype=np.int64)
        for trial, env in enumerate(envs):
            recorder.record(trial, index, int(arms[trial]), env.step(t, Decision(arm=int(arms[trial]))))
        policy.update_batch(t, contexts, arms, recorder.reward[:, index].copy())
        recorder.round_done(index, started, on_progress, progress_every)
    policy_diagnostics = policy.diagnostics_batch()
    return recorder.results([{**env.diagnostics(), **policy_diagnostics[i]} for i, env in enumerate(envs)])
