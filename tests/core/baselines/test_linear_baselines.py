"""The linear baselines (core.baselines.linear: LinUCB, LinTS, LinRBMLE) on the synthetic contextual
bandit of the NeuralUCB paper (core.baselines.synthetic): each learns, its regret well below the
Random policy's."""

import numpy as np

from banditsweep.core.engine.trial import TrialSpec, run_trial


def test_linear_algorithms_learn_a_linear_problem():
    env = {"kind": "synthetic", "function": "h1", "arms": 4, "dim": 5, "noise": 0.1}
    random = np.mean([run_trial(TrialSpec.create("random", {}, env, s, 1500)).final_regret for s in range(3)])
    for name in ("linucb", "lints", "linrbmle"):
        learned = np.mean([run_trial(TrialSpec.create(name, {"nu": 0.1}, env, s, 1500)).final_regret for s in range(3)])
        assert learned < 0.8 * random, name
