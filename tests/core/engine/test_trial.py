"""Trial identity, determinism and the registry."""

import hashlib

import numpy as np
import pytest
from paths import PLUGINS

from banditsweep.core.engine import registry
from banditsweep.core.engine.trial import TrialRun, TrialSpec, run_trial

ENV = {"kind": "synthetic", "function": "h2", "arms": 4, "dim": 6}


def test_trial_id_is_a_stable_hash_of_canonical_content():
    a = TrialSpec.create("linucb", {"nu": 0.5}, ENV, seed=3, horizon=50)
    # Key order and defaults written out or not: same content, same id.
    b = TrialSpec.create("linucb", {"lam": 1.0, "nu": 0.5}, dict(reversed(list(ENV.items()))), seed=3, horizon=50)
    assert a.trial_id == b.trial_id
    # The id is the SHA-256 of the canonical JSON of the resolved content, the same on every machine.
    canonical = ('{"algorithm":"linucb","environment":{"arms":4,"dim":6,"function":"h2","kind":"synthetic",'
                 '"noise":0.1},"horizon":50,"params":{"lam":1.0,"nu":0.5},"seed":3}')
    assert a.trial_id == hashlib.sha256(canonical.encode()).hexdigest()[:20] == "5011be135bd932358312"
    for other in (TrialSpec.create("linucb", {"nu": 0.6}, ENV, 3, 50), TrialSpec.create("linucb", {"nu": 0.5}, ENV, 4, 50),
                  TrialSpec.create("linucb", {"nu": 0.5}, ENV, 3, 51), TrialSpec.create("lints", {"nu": 0.5}, ENV, 3, 50),
                  TrialSpec.create("linucb", {"nu": 0.5}, {**ENV, "noise": 0.2}, 3, 50)):
        assert other.trial_id != a.trial_id


@pytest.mark.parametrize("algorithm", ["random", "linucb", "lints", "linrbmle"])
def test_same_trial_twice_is_bit_identical(algorithm):
    spec = TrialSpec.create(algorithm, {}, ENV, seed=11, horizon=300)
    first, second = run_trial(spec), run_trial(spec)
    for name in ("arm", "reward", "regret", "cum_regret"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    other_seed = run_trial(TrialSpec.create(algorithm, {}, ENV, seed=12, horizon=300))
    assert not np.array_equal(first.reward, other_seed.reward)


def test_environment_draws_are_shared_across_algorithms_for_a_seed():
    a = TrialSpec.create("linucb", {}, ENV, seed=5, horizon=20).build()[0]
    b = TrialSpec.create("random", {}, ENV, seed=5, horizon=20).build()[0]
    np.testing.assert_array_equal(a.contexts(7), b.contexts(7))


def test_cumulative_regret_is_the_running_sum_of_pseudo_regret():
    result = run_trial(TrialSpec.create("linucb", {}, ENV, seed=1, horizon=100))
    np.testing.assert_allclose(np.cumsum(result.regret), result.cum_regret)
    assert np.all(result.regret >= 0)


def test_registry_maps_names_to_classes_and_refuses_unknown_names():
    assert registry.algorithm_class("linucb").__name__ == "LinUCB"
    assert registry.environment_class("synthetic").__name__ == "SyntheticBandit"
    for name in registry.algorithm_names():
        assert registry.algorithm_class(name).Params is not None, name
    with pytest.raises(KeyError, match="unknown algorithm 'nope'; known: "):
        registry.algorithm_class("nope")


def test_plugins_register_algorithms(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("BANDITSWEEP_PLUGINS", "faulty_algorithms")
    assert "always_raises" in registry.algorithm_names()
    with pytest.raises(ValueError, match="round 3"):
        run_trial(TrialSpec.create("always_raises", {}, ENV, 0, 10))


SNAPSHOT_CASES = {
    "linucb alone": [("linucb", {}, ENV, 3)],
    "neural_ucb batch": [("neural_ucb", {"width": 8, "steps": 2, "nu": nu}, ENV, seed)
                         for seed, nu in ((0, 1.0), (1, 0.1))],
    "kernel_exp3 batch": [("kernel_exp3", {}, {"kind": "adversarial_kernel", "domain": {"grid": [5, 5]},
                                               "candidates": 30, "centers": 5}, seed) for seed in (0, 1)],
    "rls_kernel_exp3 alone": [("rls_kernel_exp3", {}, {"kind": "adversarial_kernel", "domain": {"grid": [6, 6]},
                                                       "candidates": 30, "centers": 5}, 2)],
}


@pytest.mark.parametrize("case", list(SNAPSHOT_CASES))
def test_a_run_captured_between_rounds_and_restored_ends_as_if_never_stopped(case):
    specs = [TrialSpec.create(name, params, env, seed, horizon=30) for name, params, env, seed in SNAPSHOT_CASES[case]]
    straight = TrialRun(specs)
    straight.advance()
    interrupted = TrialRun(specs)
    interrupted.advance(12)
    assert interrupted.next_round == 13 and not interrupted.done
    state = interrupted.snapshot()
    interrupted.advance(5)   # the original goes on: the snapshot is independent of it
    resumed = TrialRun.restore(state)
    assert resumed.next_round == 13
    seen = []
    resumed.advance(on_progress=lambda trial, t, regret: seen.append((trial, t)), progress_every=10)
    assert sorted(seen) == [(i, t) for i in range(len(specs)) for t in (20, 30)]
    for expected, got in zip(straight.results(), resumed.results()):
        for name in ("arm", "reward", "regret", "cum_regret"):
            np.testing.assert_array_equal(getattr(got, name), getattr(expected, name))
        for name, values in expected.extras.items():
            np.testing.assert_array_equal(got.extras[name], values)


def test_results_before_the_last_round_are_refused():
    run = TrialRun([TrialSpec.create("random", {}, ENV, 0, horizon=10)])
    run.advance(3)
    with pytest.raises(RuntimeError, match="played 3 of 10 rounds"):
        run.results()


def test_plain_policies_run_as_a_batch_of_one_and_equal_a_hand_written_loop():
    """The one round loop gives what the contract's loop (core.engine.contracts docstring) gives."""
    spec = TrialSpec.create("linucb", {"nu": 0.3}, ENV, seed=4, horizon=60)
    env, policy = spec.build()
    arms, regret = [], []
    for t in range(1, 61):
        contexts = env.contexts(t)
        decision = policy.select(t, contexts)
        feedback = env.step(t, decision)
        policy.update(t, contexts, decision.arm, feedback.reward)
        arms.append(decision.arm)
        regret.append(feedback.cumulative_regret)
    result = run_trial(spec)
    np.testing.assert_array_equal(result.arm, arms)
    np.testing.assert_array_equal(result.cum_regret, regret)
