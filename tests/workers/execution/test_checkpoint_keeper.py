"""Checkpoints through the run's keeper (workers.execution.checkpoint_keeper), as a process on a node
that shares no disk with the driver reaches them: every state lands in the driver's folder, the
driver's stop reaches the trial, and the trial resumed from it elsewhere ends as if never stopped.

The keeper is reached exactly as from another node: the checkpoints are given a node id that is not
this one's. (tests/clusters/test_hosts.py runs it across real separate hosts.)"""

import numpy as np
import pytest
import ray

from banditsweep.core.engine.round_loop import TrialStopped
from banditsweep.core.engine.trial import TrialSpec, checkpoint_key, run_trials
from banditsweep.workers.execution.checkpoint_keeper import CheckpointKeeper, ClusterCheckpoints
from banditsweep.workers.storage.checkpoint_files import CheckpointFiles
from banditsweep.workers.storage.untrusted_files import NotARegularFile

SPEC = TrialSpec.create("linucb", {}, {"kind": "synthetic", "function": "h1"}, 0, 120)


@pytest.fixture
def far_checkpoints(tmp_path, shared_ray):
    """Checkpoints whose every call goes through a keeper, with the driver's folder under tmp_path."""
    files = CheckpointFiles(tmp_path / "sweep" / ".checkpoints", 50, stop_marker=".stop-run")
    keeper = CheckpointKeeper.remote(files)
    checkpoints = ClusterCheckpoints(files, keeper, node_id="another node")
    yield checkpoints
    checkpoints.close()


def elsewhere(checkpoints, spec, lost_at=None):
    """A trial played by another process, as a trial actor would: its results, or how it stopped;
    with ``lost_at`` the process is lost after that round (a crash, its node gone). (Made here: a
    function of this module would be sent by name, which Ray's workers cannot import.)"""

    @ray.remote(num_cpus=0, max_retries=0)
    def play(checkpoints, spec, lost_at):
        assert not checkpoints.local()

        def progress(_trial, t, _regret):
            if t == lost_at:
                raise ConnectionAbortedError(t)
        try:
            return "finished", run_trials([spec], checkpoints=checkpoints, on_progress=progress, progress_every=10)
        except TrialStopped as stopped:
            return "stopped", stopped.saved
        except ConnectionAbortedError:
            return "lost", None

    return ray.get(play.remote(checkpoints, spec, lost_at))


def test_a_trial_lost_elsewhere_resumes_from_the_state_it_saved_in_the_drivers_folder(far_checkpoints):
    whole = run_trials([SPEC])
    state = far_checkpoints.directory / f"{checkpoint_key([SPEC])}.state"

    assert elsewhere(far_checkpoints, SPEC, lost_at=70) == ("lost", None)
    assert state.is_file()                  # round 50's state, written by the keeper in the driver's folder

    kind, [resumed] = elsewhere(far_checkpoints, SPEC)
    assert kind == "finished" and resumed.diagnostics["resumed_from_round"] == 51
    for name in ("arm", "reward", "regret", "cum_regret"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole[0], name), err_msg=name)
    assert not state.exists()               # a finished trial's state is removed


def test_the_drivers_stop_reaches_a_trial_elsewhere_and_its_state_is_saved_there(far_checkpoints):
    assert far_checkpoints.request_stop()   # the driver's SIGTERM
    assert elsewhere(far_checkpoints, SPEC) == ("stopped", True)
    assert (far_checkpoints.directory / f"{checkpoint_key([SPEC])}.state").is_file()
    far_checkpoints.clear_stop()


def test_the_keeper_loads_rejects_and_discards_for_the_far_process(far_checkpoints):
    @ray.remote(num_cpus=0)
    def calls(checkpoints):
        saved = checkpoints.save("k", b"state")
        loaded = checkpoints.load("k")
        checkpoints.discard("k")
        gone = checkpoints.load("k")
        checkpoints.save("bad", b"garbage")
        checkpoints.reject("bad", "not a state")
        return saved, loaded, gone

    assert ray.get(calls.remote(far_checkpoints)) == (True, b"state", None)
    quarantined = list((far_checkpoints.directory.parent / "quarantine").iterdir())
    assert any("checkpoint-bad.state" in path.name for path in quarantined), quarantined


def test_a_state_the_driver_cannot_read_is_an_oserror_where_it_was_asked_for(far_checkpoints):
    far_checkpoints.directory.mkdir(parents=True)
    (far_checkpoints.directory / "fifo.state").symlink_to("/etc/hostname")

    @ray.remote(num_cpus=0)
    def load(checkpoints):
        try:
            checkpoints.load("fifo")
        except OSError as error:
            return type(error).__name__, str(error)

    name, message = ray.get(load.remote(far_checkpoints))
    assert name == NotARegularFile.__name__ and "fifo.state (on the driver's node)" in message
