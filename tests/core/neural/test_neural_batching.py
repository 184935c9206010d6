"""Lockstep trial batching: each trial of a batch equals the same trial run alone (DESIGN: batch the math)."""

from __future__ import annotations

import numpy as np
import pytest

from banditsweep.core.engine.trial import TrialSpec, batch_key, run_trial, run_trials

CASES = {
    "neural_rbmle_ga": [{"nu": 1.0}, {"nu": 0.1, "lr": 0.002}, {"nu": 0.001}],
    "neural_rbmle_pc": [{"nu": 1.0}, {"nu": 0.1}, {"nu": 0.01, "lam": 0.01}],
    "neural_ucb": [{"nu": 1.0}, {"nu": 0.1}, {"nu": 0.01}],
    "neural_ts": [{"nu": 1.0}, {"nu": 0.1}, {"nu": 0.01}],
    "deep_fpl": [{"nu": 1.0}, {"nu": 0.1}, {"nu": 0.01}],
    "bootstrapped_nn": [{"q": 3}, {"q": 3, "p": 0.5}, {"q": 3}],
    "neural_eps_greedy": [{"epsilon": 0.1}, {"epsilon": 0.3}, {"epsilon": 0.0}],
}


BASELINES = ("neural_ucb", "neural_ts", "deep_fpl", "bootstrapped_nn")


def specs_for(name, horizon=30, training=None):
    common = {"width": 8, "steps": 3, "lr": 0.01, "precision": "float64"}
    if training is not None:
        common["training"] = training
    return [TrialSpec.create(name, {**common, **values}, {"kind": "synthetic", "dim": 6}, seed, horizon)
            for seed, values in zip((1, 2, 3), CASES[name])]


@pytest.mark.parametrize("name, training", [(name, None) for name in CASES]
                         + [(name, "paper") for name in BASELINES])
def test_each_trial_of_a_batch_equals_running_it_alone(name, training):
    """(The baselines run their default, reference training; and the paper recipe.)"""
    specs = specs_for(name, training=training)
    assert len({batch_key(spec) for spec in specs}) == 1
    progress = []
    batched = run_trials(specs, on_progress=lambda i, t, r: progress.append((i, t)), progress_every=10)
    for spec, result in zip(specs, batched):
        alone = run_trial(spec)
        np.testing.assert_array_equal(result.arm, alone.arm)
        np.testing.assert_allclose(result.cum_regret, alone.cum_regret, rtol=1e-12)
        np.testing.assert_allclose(result.reward, alone.reward, rtol=1e-12)
        assert set(result.diagnostics) == set(alone.diagnostics)
    assert sorted(progress) == [(i, t) for i in range(3) for t in (10, 20, 30)]


def test_float32_batch_matches_alone_to_tolerance():
    specs = [TrialSpec.create("neural_rbmle_ga", {"width": 16, "steps": 5, "nu": nu}, {"kind": "synthetic"}, seed, 40)
             for seed, nu in ((4, 1.0), (5, 0.1))]
    for spec, result in zip(specs, run_trials(specs)):
        alone = run_trial(spec)
        np.testing.assert_allclose(result.cum_regret, alone.cum_regret, rtol=1e-5)


def test_batch_keys_separate_structural_choices():
    base = TrialSpec.create("neural_ucb", {"width": 8}, {"kind": "synthetic"}, 1, 10)
    same = TrialSpec.create("neural_ucb", {"width": 8, "nu": 0.1, "lr": 0.01}, {"kind": "synthetic"}, 2, 10)
    assert batch_key(base) == batch_key(same)
    for other in (TrialSpec.create("neural_ucb", {"width": 16}, {"kind": "synthetic"}, 1, 10),
                  TrialSpec.create("neural_ucb", {"width": 8, "z": "full"}, {"kind": "synthetic"}, 1, 10),
                  TrialSpec.create("neural_ucb", {"width": 8, "training": "paper", "init": "default", "form": "reference",
                                                  "lr": 0.01}, {"kind": "synthetic"}, 1, 10),
                  TrialSpec.create("neural_ucb", {"width": 8}, {"kind": "synthetic", "dim": 5}, 1, 10),
                  TrialSpec.create("neural_ucb", {"width": 8}, {"kind": "synthetic"}, 1, 11),
                  TrialSpec.create("neural_ts", {"width": 8}, {"kind": "synthetic"}, 1, 10)):
        assert batch_key(other) != batch_key(base)
