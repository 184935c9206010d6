"""Lockstep trial batching of exact Kernelized Exp3 (core.engine.trial run_trials, kernel_exp3 batch_key)."""

import numpy as np
import pytest
import torch

from banditsweep.core.kernel import kernels
from banditsweep.core.kernel.algorithms.kernel_exp3 import (LOCKSTEP_BATCH, KernelExp3, kernel_form_statistics,
                                                            work_bytes)
from banditsweep.core.kernel.kernels import Kernel
from banditsweep.core.engine.trial import TrialRun, TrialSpec, batch_key, run_trial, run_trials

GRID = {"kind": "adversarial_kernel", "domain": {"grid": [8, 8]}, "kernel": "matern32",
        "candidates": 100, "centers": 20}
HORIZON = 40
# Different seeds, c3, c4 and lambda (and one beta override) in one batch.
PARAMS = [({"c3": 5.0, "c4": 0.1, "lam": 5.0}, 0),
          ({"c3": 1.0, "c4": 0.5, "lam": 1.0}, 1),
          ({"c3": 10.0, "c4": 0.1, "lam": 10.0, "beta": 0.2}, 2)]


def specs(environment=GRID, horizon=HORIZON):
    return [TrialSpec.create("kernel_exp3", params, environment, seed, horizon) for params, seed in PARAMS]


def assert_same_trial(batched, alone):
    np.testing.assert_array_equal(batched.arm, alone.arm)
    np.testing.assert_allclose(batched.cum_regret, alone.cum_regret, rtol=0, atol=1e-9)
    np.testing.assert_allclose(batched.regret, alone.regret, rtol=0, atol=1e-9)
    np.testing.assert_allclose(batched.extras["expected_regret"], alone.extras["expected_regret"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(batched.reward, alone.reward, rtol=0, atol=1e-12)
    assert batched.diagnostics == pytest.approx(alone.diagnostics)


@pytest.fixture(scope="module")
def alone():
    return [run_trial(spec) for spec in specs()]


def test_batched_statistics_equal_one_system_at_a_time():
    kernel = Kernel.create("matern52", 2)
    x = np.random.default_rng(0).uniform(size=(30, 2))
    dense = torch.from_numpy(kernel.matrix(x))
    logits = np.random.default_rng(1).normal(size=(3, 30)) * 2.0
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    mu, index = np.array([0.01, 0.1, 1.0]), np.array([4, 0, 29])
    column, diagonal = kernel_form_statistics(dense, torch.from_numpy(p), torch.from_numpy(mu), torch.from_numpy(index))
    assert column.shape == diagonal.shape == (3, 30)
    for b in range(3):
        single_column, single_diagonal = kernel_form_statistics(dense, torch.from_numpy(p[b]), float(mu[b]),
                                                                int(index[b]))
        np.testing.assert_allclose(column[b].numpy(), single_column.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(diagonal[b].numpy(), single_diagonal.numpy(), rtol=1e-12, atol=1e-12)


def test_each_trial_of_a_batch_equals_the_trial_alone(alone):
    batch = specs()
    assert len({batch_key(spec) for spec in batch}) == 1
    progress = []
    results = run_trials(batch, on_progress=lambda i, t, r: progress.append((i, t)), progress_every=20)
    assert len(results) == 3
    for batched, single in zip(results, alone):
        assert_same_trial(batched, single)
    assert sorted(progress) == [(i, t) for i in range(3) for t in (20, 40)]
    # The trials really differ (different seeds and constants), so the comparison is not vacuous.
    assert not np.array_equal(results[0].arm, results[1].arm)


def test_a_batch_larger_than_the_device_memory_runs_in_chunks(monkeypatch, alone):
    # The algorithm reports how many trials fit on the device ...
    monkeypatch.setattr(kernels, "available_memory_bytes", lambda device="cpu": work_bytes(64, 2))
    assert KernelExp3.largest_batch(specs(), "cpu") == 2
    monkeypatch.undo()
    # ... and the runner splits a batch into chunks of that size, each trial as alone.
    monkeypatch.setattr(KernelExp3, "largest_batch", classmethod(lambda cls, batch, device: 2))
    sizes = []
    create = KernelExp3.create_batch.__func__
    monkeypatch.setattr(KernelExp3, "create_batch", classmethod(
        lambda cls, params, *rest: sizes.append(len(params)) or create(cls, params, *rest)))
    seen = []
    results = run_trials(specs(), on_progress=lambda i, t, r: seen.append(i), progress_every=HORIZON)
    assert sizes == [2, 1]
    assert sorted(seen) == [0, 1, 2]
    for batched, single in zip(results, alone):
        assert_same_trial(batched, single)


def test_batch_key_rules(monkeypatch):
    base = TrialSpec.create("kernel_exp3", {}, GRID, seed=0, horizon=HORIZON)
    key = KernelExp3.batch_key(base)
    assert key is not None and batch_key(base) == key
    # Seeds and the per-trial constants may differ.
    for params, seed in PARAMS:
        assert KernelExp3.batch_key(TrialSpec.create("kernel_exp3", params, GRID, seed, HORIZON)) == key
    # The environment config and the horizon may not.
    assert KernelExp3.batch_key(TrialSpec.create("kernel_exp3", {}, GRID, 0, HORIZON + 1)) != key
    assert KernelExp3.batch_key(TrialSpec.create("kernel_exp3", {}, {**GRID, "kernel": "se"}, 0, HORIZON)) != key
    assert KernelExp3.batch_key(TrialSpec.create("kernel_exp3", {}, {**GRID, "domain": {"grid": [9, 8]}},
                                                 0, HORIZON)) != key
    assert KernelExp3.batch_key(TrialSpec.create("kernel_exp3", {}, {**GRID, "candidates": 50}, 0, HORIZON)) != key
    # The paper's settings are fixed domains and batch.
    assert KernelExp3.batch_key(TrialSpec.create("kernel_exp3", {}, {"kind": "adversarial_kernel", "setting": 2},
                                                 0, HORIZON)) is not None
    # A domain drawn from the seed: every trial has its own K, so no batching.
    uniform = {**GRID, "domain": {"uniform": 64, "dim": 2}}
    assert KernelExp3.batch_key(TrialSpec.create("kernel_exp3", {}, uniform, 0, HORIZON)) is None
    # The work arrays of a batch of LOCKSTEP_BATCH trials must fit in the free memory.
    monkeypatch.setattr(kernels, "available_memory_bytes", lambda device="cpu": work_bytes(64, LOCKSTEP_BATCH))
    assert KernelExp3.batch_key(base) == key
    monkeypatch.setattr(kernels, "available_memory_bytes", lambda device="cpu": work_bytes(64, LOCKSTEP_BATCH) - 1)
    assert KernelExp3.batch_key(base) is None
    assert batch_key(base) is None


def test_other_exp3_algorithms_do_not_batch():
    for algorithm in ("apg_exp3", "rls_kernel_exp3", "random"):
        assert batch_key(TrialSpec.create(algorithm, {}, GRID, 0, HORIZON)) is None


def test_a_batch_refuses_trials_that_do_not_share_the_domain():
    uniform = {**GRID, "domain": {"uniform": 64, "dim": 2}}
    batch = [TrialSpec.create("kernel_exp3", {}, uniform, seed, 5) for seed in (0, 1)]
    with pytest.raises(ValueError, match="share the domain"):
        TrialRun(batch)
    with pytest.raises(ValueError, match="share the horizon"):
        TrialRun([TrialSpec.create("kernel_exp3", {}, GRID, 0, 5), TrialSpec.create("kernel_exp3", {}, GRID, 1, 6)])
