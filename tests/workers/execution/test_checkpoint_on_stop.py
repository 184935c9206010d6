"""A run that is stopped (a scheduler's SIGTERM, Ctrl-C) with ``checkpoint_every`` in its spec has its
running trials save their state at the round they have reached, so the next run loses no round of
them; the resumed trials end bit-identical to trials never stopped."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from paths import GOLDEN, PLUGINS
from sharded_cases import MemoryCheckpoints

sys.path.insert(0, str(GOLDEN))
from cases import DATA, specs  # noqa: E402

from banditsweep.core.engine.round_loop import TrialStopped  # noqa: E402
from banditsweep.core.engine.trial import checkpoint_key, run_trials  # noqa: E402
from banditsweep.workers.storage.checkpoint_files import CheckpointFiles  # noqa: E402
from banditsweep.workers.storage.store import SweepStore  # noqa: E402


class StopAfter(MemoryCheckpoints):
    """Checkpoints in memory that ask the loop to stop once ``rounds`` rounds have been played."""

    def __init__(self, every: int, rounds: int | None):
        super().__init__(every)
        self.rounds, self.played = rounds, 0

    def stop_requested(self):
        self.played += 1   # asked once before every round
        return self.rounds is not None and self.played > self.rounds


@pytest.mark.parametrize("case", ["linucb_h1", "ucb_mushroom", "ucb_batch_h1"])
def test_a_stop_between_periodic_checkpoints_saves_the_round_reached_and_resumes_bit_identical(case, monkeypatch):
    monkeypatch.setenv("BANDITSWEEP_DATA", str(DATA))
    whole = run_trials(specs(case))
    horizon = specs(case)[0].horizon
    store = StopAfter(every=10 * horizon, rounds=horizon // 3)   # no periodic checkpoint before the end
    with pytest.raises(TrialStopped) as stopped:
        run_trials(specs(case), checkpoints=store)
    assert stopped.value.saved and stopped.value.next_round == horizon // 3 + 1
    assert list(store.states) == [checkpoint_key(specs(case))] and not store.rejected
    store.rounds = None
    resumed = run_trials(specs(case), checkpoints=store)
    assert store.states == {}   # a finished batch's state is removed
    for before, after in zip(whole, resumed):
        for name in ("arm", "reward", "regret", "cum_regret"):
            np.testing.assert_array_equal(getattr(after, name), getattr(before, name), err_msg=f"{case} {name}")
        assert after.diagnostics["resumed_from_round"] == horizon // 3 + 1


def test_the_stop_marker_is_the_runs_own(tmp_path):
    """A marker another run left behind asks nothing of this one; this run's marker is seen, and stays
    seen; clearing it removes the file."""
    (tmp_path / ".stop-earlier").write_text("stop\n")
    files = CheckpointFiles(tmp_path, 100, stop_marker=".stop-this")
    assert not files.stop_requested()
    assert CheckpointFiles(tmp_path, 100).stop_requested() is False   # no marker named: never asked
    assert files.request_stop() and (tmp_path / ".stop-this").is_file()
    time.sleep(0.25)
    assert files.stop_requested()
    files.clear_stop()
    assert not (tmp_path / ".stop-this").exists() and files.stop_requested()


HORIZON = 3000   # paced_lints: 2 ms a round, 6 s a trial


def _spec(folder: Path, name: str, checkpoint_every: int | None) -> Path:
    spec = {"sweep": name, "horizon": HORIZON, "seeds": 3, "log_every": 500,
            "environments": [{"kind": "synthetic", "function": "h2", "dim": 10}],
            "algorithms": [{"name": "paced_lints", "params": {"nu": 0.1}}]}
    if checkpoint_every:
        spec["checkpoint_every"] = checkpoint_every
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(folder: Path, spec: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "BANDITSWEEP_PLUGINS": "stateful_policies",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "banditsweep", "run", spec.name, "--no-progress", "--sink", "none",
                             *extra], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_a_sigterm_mid_trial_saves_the_running_trial_and_the_rerun_resumes_it(tmp_path):
    """`run` with checkpoint_every larger than the horizon (no periodic checkpoint), one worker:
    SIGTERM while the second trial runs. The driver says it saved the running trial, the state file
    is there, and the rerun resumes it from the round it had reached; every trial's rounds equal those
    of an uninterrupted run."""
    spec = _spec(tmp_path, "stopped", checkpoint_every=100_000)
    driver = _run(tmp_path, spec, "--max-workers", "1")
    store = SweepStore.for_sweep(tmp_path / "results", "stopped")
    deadline = time.time() + 240
    while time.time() < deadline and len(store.journal()) < 1 and driver.poll() is None:
        time.sleep(0.05)
    time.sleep(1.5)   # the second trial is some hundred rounds in
    driver.send_signal(signal.SIGTERM)
    output, _ = driver.communicate(timeout=120)
    assert driver.returncode == 130, output
    assert "saved the state of 1 of 1 running trial(s)" in output, output
    checkpoints = tmp_path / "results" / "stopped" / ".checkpoints"
    assert len(list(checkpoints.glob("*.state"))) == 1, output
    assert not list(checkpoints.glob(".stop-*")), "the run's stop marker is removed when it ends"
    done_before = len(store.journal())
    assert done_before < 3

    rerun = _run(tmp_path, spec)
    output, _ = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, output
    trials = pd.read_parquet(tmp_path / "results" / "stopped" / "trials")
    assert len(trials) == 3 and (trials["status"] == "finished").all()
    resumed = trials["diag_resumed_from_round"].dropna()
    assert len(resumed) == 1 and 1 < resumed.iloc[0] < HORIZON, trials.filter(like="resumed")
    assert not list(checkpoints.glob("*.state"))

    # The same trials never stopped, in a folder of their own: the same rounds, bit for bit.
    whole_run = _run(tmp_path, _spec(tmp_path, "whole", None))
    output, _ = whole_run.communicate(timeout=240)
    assert whole_run.returncode == 0, output
    key = ["seed", "t"]
    whole = pd.read_parquet(tmp_path / "results" / "whole" / "curves").sort_values(key).reset_index(drop=True)
    stopped = pd.read_parquet(tmp_path / "results" / "stopped" / "curves").sort_values(key).reset_index(drop=True)
    assert len(whole) == len(stopped) == 3 * HORIZON
    for column in ("arm", "reward", "regret", "cum_regret"):
        np.testing.assert_array_equal(stopped[column].to_numpy(), whole[column].to_numpy(), err_msg=column)
