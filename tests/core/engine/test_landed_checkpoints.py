"""Checkpoints written by an earlier release (tests/fixtures/checkpoints_7dd25d2: made by the tree
at commit 7dd25d2 with tests/golden's cases, stopped after round 7, and a sharded RLS-Kernelized
Exp3 trial on two shards saved at round 5) still resume on today's code and end as an
uninterrupted run does (the same arms; floats to 1e-12 of their scale on any CPU): moving or renaming modules must not break a user's checkpoints.
The kernel ones were saved before the design's ties were decided by core.engine.ties' rule: they are refused,
saying why, and their trials start again (resumed, they would go on under a design today's code does
not choose)."""

import sys

import numpy as np
import pytest
from paths import FIXTURES, GOLDEN
from sharded_cases import MemoryCheckpoints, local_shards, sharded_spec

sys.path.insert(0, str(GOLDEN))
from cases import DATA, specs  # noqa: E402

from banditsweep.core.engine.trial import TrialRun, checkpoint_key  # noqa: E402

LANDED = FIXTURES / "checkpoints_7dd25d2"


def _same(before, after, what):
    """The arms exactly; every float to 1e-12 of its scale. The fixtures' first rounds were computed on
    another machine's CPU, whose vectorised exp and BLAS kernels may round the last bit differently
    from this one's (a resume on the machine that saved the state is bit-identical:
    tests/core/engine/test_checkpoint_safety.py)."""
    np.testing.assert_array_equal(after.arm, before.arm, err_msg=f"{what} arm")
    floats = [(name, getattr(before, name), getattr(after, name)) for name in ("reward", "regret", "cum_regret")]
    floats += [(name, values, after.extras[name]) for name, values in before.extras.items()]
    for name, expected, actual in floats:
        expected = np.asarray(expected, dtype=np.float64)
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12 * scale, err_msg=f"{what} {name}")


@pytest.mark.parametrize("case", ["ga_batch_shuttle", "ucb_mushroom"])
def test_an_earlier_releases_checkpoint_resumes_as_an_uninterrupted_run(case, monkeypatch):
    monkeypatch.setenv("BANDITSWEEP_DATA", str(DATA))
    whole = TrialRun(specs(case))
    whole.advance()
    resumed = TrialRun.restore((LANDED / f"{case}.state").read_bytes(), specs(case))
    resumed.advance()
    for before, after in zip(whole.results(), resumed.results()):
        _same(before, after, case)
        assert after.diagnostics["resumed_from_round"] == 8.0


@pytest.mark.parametrize("case", ["kernel_exp3_batch", "rls_kernel_exp3"])
def test_a_kernel_checkpoint_saved_before_the_tie_rule_is_refused_and_the_trial_starts_again(case, monkeypatch,
                                                                                              tmp_path):
    """Its design was chosen by the smallest index among tied points (core.engine.ties): resumed, the trial
    would go on under a design today's code does not choose. It is refused, saying so, set aside,
    and the trial runs from round 1 as an uninterrupted run does."""
    from banditsweep.core.engine.state_codec import StateFormatError
    from banditsweep.core.engine.trial import run_trials
    from banditsweep.workers.storage.checkpoint_files import CheckpointFiles

    monkeypatch.setenv("BANDITSWEEP_DATA", str(DATA))
    with pytest.raises(StateFormatError, match="lacks .*tie_words"):
        TrialRun.restore((LANDED / f"{case}.state").read_bytes(), specs(case))
    checkpoints = CheckpointFiles(tmp_path, every=5)
    key = checkpoint_key(specs(case))
    assert checkpoints.save(key, (LANDED / f"{case}.state").read_bytes())
    restarted = run_trials(specs(case), checkpoints=checkpoints)
    whole = TrialRun(specs(case))
    whole.advance()
    for before, after in zip(whole.results(), restarted):
        _same(before, after, case)
        assert after.diagnostics["checkpoint_rejected"] == 1.0 and "resumed_from_round" not in after.diagnostics


def test_an_earlier_releases_sharded_checkpoint_is_refused_for_its_tie_rule():
    from banditsweep.core.kernel.sharded.coordinator import run_sharded

    spec = sharded_spec("rls_kernel_exp3", "setting2", horizon=20)
    key = checkpoint_key([spec])
    checkpoints = MemoryCheckpoints(every=5)
    for path in LANDED.glob("sharded_rls.*.state"):
        name = path.name[len("sharded_rls."):-len(".state")].replace("key_", "key/")
        checkpoints.states[name.replace("key", key, 1)] = path.read_bytes()
    assert len(checkpoints.states) == 3
    result = run_sharded(spec, local_shards(spec, 2), checkpoints=checkpoints)
    assert result.diagnostics["checkpoint_rejected"] == 1.0 and "resumed_from_round" not in result.diagnostics
    assert any("before its design's ties were decided" in reason for reason in checkpoints.rejected)
    whole = run_sharded(spec, local_shards(spec, 2))
    _same(whole, result, "sharded")
