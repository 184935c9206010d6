"""A policy whose numbers diverge fails its trial, naming the round and the quantity.

Every policy's decision carries the per-arm scores it chose by (the indices it took the argmax of,
or the distribution it drew from); the round loop checks them every round, as it checks the
environment's values, and the neural methods check their network after each training. Before, a
NaN index made the argmax play arm 0 in every round and the trial was saved ``finished`` with a
plausible regret (LinUCB at lam = 1e-300: 50.3 over 20 rounds; NeuralUCB at lr = 1e6: 53.5).
"""

import re

import numpy as np
import pandas as pd
import pytest
import yaml
from module_results import PLUGIN_MODULES
from paths import PLUGINS

from banditsweep.core.engine import registry
from banditsweep.core.kernel.sharded.coordinator import run_sharded
from banditsweep.core.kernel.sharded.partition import shard_ranges
from banditsweep.core.kernel.sharded.protocol import LocalShards, Moved
from banditsweep.core.kernel.sharded.shard import KernelShard, domain_shape
from banditsweep.core.engine.trial import NonFiniteError, TrialRun, TrialSpec, run_trial, run_trials
from banditsweep.sweeps.cli.main import main

SYNTHETIC = {"kind": "synthetic", "function": "h1", "dim": 3, "arms": 4}
KERNEL = {"kind": "adversarial_kernel", "domain": {"grid": [8, 8]}, "candidates": 10, "centers": 3}
SMALL = {"width": 8, "steps": 5}
NON_FINITE = r"(nan|-?inf)"

# (label, algorithm, a setting that really diverges, the round it is caught in, the quantity named).
# Linear: lam = 1e-300 makes V^{-1} = 1e300 I, whose first Sherman-Morrison update overflows (inf - inf);
# LinTS's sampled theta~ = theta_hat + nu L z overflows at nu = 1e308. Neural: lr = 1e6 blows the
# network up in its first training (BootstrappedNN's second member first trains in round 4 at p = 0.8);
# nu = 1e308 overflows NeuralUCB's bonus and PC's parameter correction with no training at all.
# Exp3 family: the weights are kept in log space and re-centred, so a huge eta alone mostly gives a
# finite one-hot P_t; beta = 1e308 makes the estimate u_t infinite, and APG-Exp3 (no beta) overflows
# eta u_t at c1 = 1.79e308 with c2 = 1e-320 (alpha = c2 eta D_T below 1) on this domain and seed.
CASES = [
    ("linucb", "linucb", {"lam": 1e-300}, 2, "LinUCB index of arm 0"),
    ("lints", "lints", {"nu": 1e308}, 2, "LinTS sampled reward of arm 0"),
    ("linrbmle", "linrbmle", {"lam": 1e-300}, 2, "LinRBMLE index of arm 0"),
    ("neural_ucb", "neural_ucb", {**SMALL, "lr": 1e6}, 1, "NeuralUCB training diverged: a network parameter"),
    ("neural_ucb_index", "neural_ucb", {**SMALL, "steps": 0, "nu": 1e308}, 1, "NeuralUCB index of arm 0"),
    ("neural_ts", "neural_ts", {**SMALL, "lr": 1e6}, 1, "NeuralTS training diverged: a network parameter"),
    ("neural_rbmle_ga", "neural_rbmle_ga", {**SMALL, "lr": 1e6}, 1,
     "NeuralRBMLE-GA training diverged: a network parameter"),
    ("neural_rbmle_pc", "neural_rbmle_pc", {**SMALL, "lr": 1e6}, 1,
     "NeuralRBMLE-PC training diverged: a network parameter"),
    ("neural_rbmle_pc_index", "neural_rbmle_pc", {**SMALL, "steps": 0, "nu": 1e308}, 1,
     "NeuralRBMLE-PC index of arm 0"),
    ("deep_fpl", "deep_fpl", {**SMALL, "lr": 1e6}, 1, "DeepFPL training diverged: a network parameter"),
    ("bootstrapped_nn", "bootstrapped_nn", {**SMALL, "lr": 1e6, "q": 2}, 4,
     "BootstrappedNN training diverged: a network parameter"),
    ("neural_eps_greedy", "neural_eps_greedy", {**SMALL, "lr": 1e6}, 1,
     "neural epsilon-greedy training diverged: a network parameter"),
    ("kernel_exp3", "kernel_exp3", {"beta": 1e308}, 2, "Kernelized Exp3 sampling distribution P_t of arm 0"),
    ("rls_kernel_exp3", "rls_kernel_exp3", {"beta": 1e308}, 2,
     "RLS-Kernelized Exp3 sampling distribution P_t of arm 0"),
    ("rls_kernel_exp3_amvr", "rls_kernel_exp3_amvr", {"beta": 1e308}, 2,
     "RLS-Kernelized Exp3 (approximated MVR) sampling distribution P_t of arm 0"),
    ("apg_exp3", "apg_exp3", {"c1": 1.79e308, "c2": 1e-320}, 2, "APG-Exp3 sampling distribution P_t of arm 0"),
    # random draws from 1/K on every arm for every setting (it has none): its math cannot leave the
    # numbers, so the guard is shown on the test plugin ``nan_scores``, random with a NaN injected.
    ("random", "nan_scores", {}, 3, "Random sampling distribution of arm 1"),
]


def _supports(name: str) -> frozenset[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BANDITSWEEP_PLUGINS", PLUGIN_MODULES)
        patch.syspath_prepend(str(PLUGINS))
        return registry.algorithm_class(name).supports


@pytest.fixture(scope="module")
def diverged_sweep(tmp_path_factory, shared_ray_session):
    """One CLI run of every case (and a healthy random) on the embedded Ray: (exit code, trials)."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("diverged")
    spec = {"sweep": "diverged", "horizon": 10, "seeds": 1, "environments": [SYNTHETIC, KERNEL],
            "algorithms": [{"name": name, "label": label, "params": params,
                            "when": {"kind": "synthetic" if "contextual" in _supports(name) else "adversarial_kernel"}}
                           for label, name, params, _, _ in CASES]
            + [{"name": "random", "label": "healthy"}]}
    (folder / "diverged.yaml").write_text(yaml.safe_dump(spec))
    with pytest.MonkeyPatch.context() as patch:   # the driver loads the test plugins as the workers do
        patch.setenv("BANDITSWEEP_PLUGINS", PLUGIN_MODULES)
        patch.syspath_prepend(str(PLUGINS))
        code = main(["run", str(folder / "diverged.yaml"), "--results", str(folder / "results"),
                     "--sink", "none", "--no-progress"])
    return code, pd.read_parquet(folder / "results" / "diverged" / "trials")


def test_the_run_exits_1_and_a_healthy_trial_finishes(diverged_sweep):
    code, trials = diverged_sweep
    assert code == 1
    healthy = trials[trials["label"] == "healthy"]
    assert len(healthy) == 2 and (healthy["status"] == "finished").all()   # contextual and kernel domain
    assert len(trials) == len(CASES) + 2


@pytest.mark.parametrize("label, name, params, round_, quantity", CASES, ids=[case[0] for case in CASES])
def test_a_diverged_policy_is_a_failed_trial_naming_round_and_quantity(diverged_sweep, label, name, params,
                                                                       round_, quantity):
    _, trials = diverged_sweep
    row = trials[trials["label"] == label]
    assert len(row) == 1
    row = row.iloc[0]
    assert row["status"] == "failed" and pd.isna(row["final_regret"])
    pattern = rf"NonFiniteError: round {round_}: the {re.escape(quantity)} (is {NON_FINITE}|{NON_FINITE} after)"
    assert re.fullmatch(pattern + r".*", row["error"]), row["error"]


def test_every_registered_algorithm_reports_the_scores_it_chose_by():
    """The guard covers every built-in algorithm: each decision carries finite (B, K) scores."""
    built_in = [name for name in registry.algorithm_names()
                if registry.algorithm_class(name).__module__.startswith("banditsweep.")]
    # A new algorithm needs a diverging case above (or, like random, a reason it has none).
    assert set(built_in) == {name for _, name, *_ in CASES} - {"nan_scores"} | {"random"}
    for name in built_in:
        supports = registry.algorithm_class(name).supports
        environment = SYNTHETIC if "contextual" in supports else KERNEL
        params = {"width": 8, "steps": 1} if "width" in registry.algorithm_class(name).Params.model_fields else {}
        run = TrialRun([TrialSpec.create(name, params, environment, 0, 10)])
        decision = run.policy.select_batch(1, run.contexts(1))
        scores = decision.scores
        assert scores is not None, name
        scores = scores.cpu().numpy() if hasattr(scores, "cpu") else scores
        assert scores.shape == (1, run.environments[0].problem.num_arms), name
        assert np.isfinite(scores).all() and decision.quantity.split()[0] != "score", name


def test_the_guard_names_the_trial_of_a_lockstep_batch():
    """Neural trials run as one batched program and Exp3 trials as a batch of policies: the trial
    whose numbers diverged is named by its id; its batch mate alone finishes."""
    neural = [TrialSpec.create("neural_ucb", {**SMALL, "lr": lr}, SYNTHETIC, seed, 5)
              for seed, lr in ((0, 0.01), (1, 1e6))]
    assert neural[0].policy_class.batch_key(neural[0]) == neural[1].policy_class.batch_key(neural[1])
    with pytest.raises(NonFiniteError, match=rf"^round 1: the NeuralUCB training diverged: a network parameter "
                                             rf"is {NON_FINITE} after training of trial {neural[1].trial_id} "
                                             rf"of the lockstep batch$"):
        run_trials(neural)
    assert np.isfinite(run_trial(neural[0]).final_regret)
    kernel = [TrialSpec.create("kernel_exp3", {"beta": beta}, KERNEL, seed, 5) for seed, beta in ((0, None), (1, 1e308))]
    run = TrialRun(kernel)
    assert len(run.policy.policies) == 2   # one Exp3 batch
    with pytest.raises(NonFiniteError, match=rf"^round 2: the Kernelized Exp3 sampling distribution P_t of arm 0 "
                                             rf"of trial {kernel[1].trial_id} of the lockstep batch is nan$"):
        run.advance()


def _sharded(spec, count=2):
    n, _ = domain_shape(spec)
    return LocalShards([KernelShard(spec, a, b) for a, b in shard_ranges(n, count)])


def test_a_sharded_trial_applies_the_same_checks(monkeypatch):
    """The sharded coordinator checks P_t (through its shards' masses) and the feedback it records;
    before, a sharded rls_kernel_exp3 at beta = 1e308 finished with regret 12.3."""
    spec = TrialSpec.create("rls_kernel_exp3", {"beta": 1e308}, KERNEL, 0, 10, sharded=True)
    with pytest.raises(NonFiniteError, match=r"^round 2: the RLS-Kernelized Exp3 sampling distribution P_t mass "
                                             r"of shard 0 is nan$"):
        run_sharded(spec, _sharded(spec))
    healthy = TrialSpec.create("random", {}, KERNEL, 0, 10, sharded=True)
    monkeypatch.setattr(KernelShard, "play", lambda self, request: Moved(
        float("inf"), float("inf") if self.start <= request.arm < self.stop else None))
    with pytest.raises(NonFiniteError, match=r"^round 1: the reward of the trial is inf$"):
        run_sharded(healthy, _sharded(healthy))


@pytest.mark.parametrize("algorithm", ["apg_exp3", "rls_kernel_exp3"])
def test_a_shard_reporting_a_nan_reward_stops_its_trial_at_that_round(monkeypatch, algorithm):
    """The sharded trial records through the one round loop (core.engine.round_loop), so the value a shard
    reports for f_t(x_t) passes the same finiteness check as an environment's feedback."""
    spec = TrialSpec.create(algorithm, {}, KERNEL, 0, 10, sharded=True)
    value, calls = KernelShard.value, []

    def nan_in_round_3(self, request):
        calls.append(request.arm)
        return float("nan") if len(calls) == 3 else value(self, request)

    monkeypatch.setattr(KernelShard, "value", nan_in_round_3)
    with pytest.raises(NonFiniteError, match=r"^round 3: the reward of the trial is nan$"):
        run_sharded(spec, _sharded(spec))


def test_a_nan_in_a_shards_table_stops_its_trial_naming_the_round(monkeypatch):
    """A NaN column of one shard's candidate table: the adversary's sums F P_t turn NaN, and with them
    the expected regret recorded in round 1."""
    spec = TrialSpec.create("random", {}, KERNEL, 0, 10, sharded=True)
    group = _sharded(spec)
    group.shards[1].table[:, 0] = np.nan
    with pytest.raises(NonFiniteError, match=r"^round 1: the expected_regret of the trial is nan$"):
        run_sharded(spec, group)



def test_apg_exp3_on_a_horizon_shorter_than_log_x_fails_saying_why():
    """T = 3 on 64 points: the P-greedy tolerance log|X| / T = 1.39 exceeds every sqrt(k(x, x)) = 1, the
    Newton basis is empty and eta = c1 / sqrt(D_T T) undefined: a clear error, not a ZeroDivisionError."""
    from banditsweep.core.engine.trial import TrialSpec, run_trial

    environment = {"kind": "adversarial_kernel", "domain": {"grid": [8, 8]}, "candidates": 10, "centers": 3}
    with pytest.raises(ValueError, match=r"Newton basis is empty; use a horizon T > log\|X\| = 4.16"):
        run_trial(TrialSpec.create("apg_exp3", {}, environment, 0, 3))
