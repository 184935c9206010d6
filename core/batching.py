"""Running several trials on one actor.

``run_trials`` is what a trial actor calls. Trials whose algorithm implements lockstep batching
(``Policy.batch_key`` / ``Policy.run_batch``) and share a batch key run as one batched computation;
every other trial runs alone through :func:`banditsweep.core.trial.run_trial`. Either way the result
of each trial equals running it alone (to float tolerance; tested per algorithm).
"""

from __future__ import annotations

from typing import Callable

from banditsweep.core import registry
from banditsweep.core.trial import TrialResult, TrialSpec, run_trial

# on_progress(index of the trial in the batch, round t, cumulative regret)
BatchProgress = Callable[[int, int, float], None]


def batch_key(spec: TrialSpec) -> tuple | None:
    """Trials with equal non-None keys may run in lockstep; None means the trial runs alone."""
    policy_cls = registry.algorithm_class(spec.algorithm)
    key_fn = getattr(policy_cls, "batch_key", None)
    return None if key_fn is None else key_fn(spec)


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
