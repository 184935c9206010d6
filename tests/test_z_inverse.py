"""``z_inverse: invert`` (the paper's Table 3: Z inverted afresh every round) against the Sherman-Morrison
update we use: the same decisions, its time recorded; a parameter added later leaves the ids of the
trials recorded before it unchanged."""

import numpy as np
import pytest

from banditsweep.core.trial import TrialSpec, run_trial

ENV = {"kind": "synthetic", "function": "h1", "dim": 4}
BASE = {"width": 8, "steps": 3, "lr": 0.01, "z": "full", "precision": "float64"}


@pytest.mark.parametrize("algorithm", ["neural_ucb", "neural_ts", "neural_rbmle_pc"])
def test_inverting_z_afresh_makes_the_decisions_of_the_update(algorithm):
    update = TrialSpec.create(algorithm, BASE, ENV, 0, 25)
    invert = TrialSpec.create(algorithm, {**BASE, "z_inverse": "invert"}, ENV, 0, 25)
    assert update.params["z_inverse"] == "update" and invert.params["z_inverse"] == "invert"   # recorded
    assert update.trial_id != invert.trial_id
    a, b = run_trial(update), run_trial(invert)
    np.testing.assert_array_equal(a.arm, b.arm)
    np.testing.assert_allclose(b.cum_regret, a.cum_regret, rtol=1e-12, atol=1e-12)
    assert b.diagnostics["z_inverse_seconds"] > 0


def test_a_parameter_added_later_keeps_the_ids_recorded_before_it():
    # The id of NeuralUCB's default trial on this bandit before z_inverse existed.
    assert TrialSpec.create("neural_ucb", {}, ENV, 0, 30).trial_id == "e0ec496d80b632eb5750"
    assert TrialSpec.create("neural_ucb", {"z_inverse": "invert"}, ENV, 0, 30).trial_id != "e0ec496d80b632eb5750"
