"""``z_inverse: invert`` (the paper's Table 3: Z inverted afresh every round) against the Sherman-Morrison
update we use: the same decisions, its time recorded; a parameter added later leaves the ids of the
trials recorded before it unchanged."""

import numpy as np
import pytest

from banditsweep.core.engine.trial import TrialSpec, run_trial

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


def test_a_journal_record_of_a_trial_with_a_later_parameter_at_its_default_is_valid(tmp_path):
    """The journal's content check names a trial by the trial's own rule: `z_inverse: update` (a
    parameter added later, at its default) is not part of the id, so the record is the trial's,
    not a damaged one (it was read as damaged, and the whole segment quarantined)."""
    from banditsweep.core.engine.trial import TrialSpec
    from banditsweep.workers.storage.journal import journal_text, read_records
    from banditsweep.workers.storage.record import FINISHED, TrialRecord

    spec = TrialSpec.create("neural_rbmle_pc", {"width": 10, "z": "full", "z_inverse": "update"},
                            {"kind": "synthetic", "function": "h1", "dim": 3}, 0, 10)
    assert spec.params["z_inverse"] == "update"
    record = TrialRecord(trial_id=spec.trial_id, sweep="s", algorithm=spec.algorithm, label="pc",
                         environment="synthetic:h1", seed=0, horizon=10, params=spec.params,
                         environment_config=spec.environment, log_every=5, status=FINISHED, attempts=1,
                         final_regret=1.0)
    assert record.content_ids()[0] == spec.trial_id
    path = tmp_path / "segment.jsonl"
    path.write_text(journal_text([record]))
    read = read_records(path, {spec.trial_id})
    assert not read.damage and [r.trial_id for r in read.records] == [spec.trial_id]
