"""How the dispatcher cuts trials into lockstep batches."""

from banditsweep.core.engine.trial import TrialSpec
from banditsweep.workers.execution.batches import make_batches
from banditsweep.workers.execution.run_values import Job

SYNTHETIC = {"kind": "synthetic", "function": "h1", "dim": 4}
KERNEL = {"kind": "adversarial_kernel", "setting": 1, "kernel": "se"}


def _jobs(algorithm, environment, seeds, params=None):
    return [Job(TrialSpec.create(algorithm, params or {}, environment, seed, 20), {}) for seed in range(seeds)]


def _sizes(batches):
    return sorted(len(batch) for batch in batches)


def test_cpu_defaults_follow_the_measured_benefit():
    neural = _jobs("neural_ucb", SYNTHETIC, 6, {"width": 8, "steps": 2})
    kernel = _jobs("kernel_exp3", KERNEL, 12)
    linear = _jobs("linucb", SYNTHETIC, 3)
    batches = make_batches(neural + kernel + linear, batch_trials=None, on_gpu=False, workers=1)
    # neural: one at a time on a CPU; kernel_exp3 on |X| = 400: batches of 8; linear: never batched
    assert _sizes(batches) == [1] * 9 + [4, 8]
    assert all(len({job.spec.algorithm for job in batch}) == 1 for batch in batches)


def test_gpu_default_and_explicit_batch_size():
    neural = _jobs("neural_ucb", SYNTHETIC, 40, {"width": 8, "steps": 2})
    assert _sizes(make_batches(neural, None, on_gpu=True, workers=1)) == [8, 32]
    assert _sizes(make_batches(neural, None, on_gpu=True, workers=4)) == [10, 10, 10, 10]  # no idle worker
    assert _sizes(make_batches(neural, batch_trials=16, on_gpu=False, workers=1)) == [8, 16, 16]


def test_trials_that_differ_in_structure_never_share_a_batch():
    wide = _jobs("neural_ucb", SYNTHETIC, 2, {"width": 8, "steps": 2})
    narrow = _jobs("neural_ucb", SYNTHETIC, 2, {"width": 4, "steps": 2})
    batches = make_batches(wide + narrow, batch_trials=8, on_gpu=False, workers=1)
    assert _sizes(batches) == [2, 2]
    assert {len({job.spec.params["width"] for job in batch}) for batch in batches} == {1}
