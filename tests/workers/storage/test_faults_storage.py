"""The results folder stops taking writes in the middle of a sweep (permissions taken away, a file
system remounted read-only), or cannot be written at the start: exit 3 (2 when found before
anything runs), one line naming the path, no trial recorded `failed` for it, nothing half-written;
a run after the folder is writable again completes the sweep with no duplicates.

The faults are real: the run is a `banditsweep run` process; as root (which permission bits do not
stop) it runs without the capabilities that override them, and the read-only file system is a
read-only bind mount over the sweep folder in a mount namespace of the run's own."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from store_builders import write_spec_results

from banditsweep.sweeps.cli.main import main

TRIALS = 12
SPEC = {"horizon": 100, "seeds": TRIALS,   # 100 rounds of 10 ms: about 1 s a trial, one worker
        "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
        "algorithms": [{"name": "slow_random", "params": {"pause": 0.01}}]}
# What lets root write where the permission bits say no.
OVERRIDES = "-dac_override,-dac_read_search,-fowner,-linux_immutable"


def as_a_user() -> list[str]:
    """The command prefix under which permission bits apply (nothing when not root)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permission bits cannot be made to apply")
    return ["setpriv", f"--inh-caps={OVERRIDES}", f"--bounding-set={OVERRIDES}"]


def mount_namespaces_work(folder: Path) -> bool:
    """Whether this machine lets the tests remount a folder read-only in a private mount namespace."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        return False
    probe = folder / "probe"
    probe.mkdir()
    answer = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                             'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && ! touch "$0/x" 2>/dev/null',
                             str(probe)], capture_output=True)
    probe.rmdir()
    return answer.returncode == 0


def journal_records(root: Path) -> int:
    count = 0
    for path in (root / ".journal").glob("s*.jsonl") if (root / ".journal").is_dir() else []:
        try:
            count += sum(1 for line in path.read_text().splitlines() if line.strip())
        except OSError:
            pass
    return count


def run_process(tmp_path: Path, sweep: str, prefix: list[str]) -> subprocess.Popen:
    return subprocess.Popen([*prefix, sys.executable, "-m", "banditsweep", "run", f"{sweep}.yaml", "--no-progress",
                             "--max-workers", "1"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(root: Path, process: subprocess.Popen, records: int) -> int:
    deadline = time.monotonic() + 180
    while journal_records(root) < records and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    return journal_records(root)


def half_written(root: Path) -> list[Path]:
    """Temporary files of writes that did not complete (every write goes through one)."""
    return [p for p in root.rglob(".*") if p.is_file() and p.name.endswith(".tmp")]


def check_stopped_cleanly(root: Path, process: subprocess.Popen, reason: str, removable: bool = True) -> int:
    """Exit 3, one line naming a file of the sweep folder, no trial failed, nothing half-written where
    the folder still takes a removal (a read-only file system, or a folder whose write permission went
    while a write was under way, keeps the temporary file that write made, which the next run removes:
    check_completed_by_a_rerun); returns how many trials were recorded."""
    out, err = process.communicate(timeout=180)
    assert process.returncode == 3, (out, err)
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"error: cannot write results to {root}/") and reason in lines[-1], err
    assert sum(line.startswith("error:") for line in lines) == 1 and "Traceback" not in err, err
    assert "failed" not in out.split("\n", 1)[1] or "0 failed" in out, out
    from banditsweep.workers.storage.store import SweepStore

    records = SweepStore(root).journal()
    assert records and all(r.status == "finished" for r in records.values())
    assert not removable or not half_written(root), half_written(root)
    return len(records)


def check_completed_by_a_rerun(tmp_path: Path, sweep: str, recorded: int, capsys) -> None:
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.queries import child_runs_by_trial

    capsys.readouterr()
    assert main(["run", f"{sweep}.yaml", "--no-progress"]) == 0
    assert f"{TRIALS - recorded} to run" in capsys.readouterr().out
    root = tmp_path / "results" / sweep
    assert not half_written(root), half_written(root)   # what a stopped write left is gone
    trials = pd.read_parquet(root / "trials")
    assert len(trials) == TRIALS and trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    curves = pd.read_parquet(root / "curves")
    assert len(curves) == TRIALS * 100 and not curves.duplicated(["trial_id", "t"]).any()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = child_runs_by_trial(client, client.get_experiment_by_name(sweep).experiment_id)
    assert sorted(runs) == sorted(trials["trial_id"])
    assert all([r.info.status for r in trial_runs] == ["FINISHED"] for trial_runs in runs.values())


@pytest.mark.slow  # three `run` processes: about 30 s
def test_permissions_taken_away_mid_sweep_stop_it_with_exit_3_and_a_rerun_completes_it(
        tmp_path, monkeypatch, plugins, shared_ray, capsys):
    prefix = as_a_user()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "perm.yaml").write_text(yaml.safe_dump({"sweep": "perm", **SPEC}))
    root = tmp_path / "results" / "perm"
    began = time.monotonic()
    process = run_process(tmp_path, "perm", prefix)
    wait_for(root, process, 3)
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        folder.chmod(0o555)                                 # chmod -R a-w on the folders
    # A write under way when the folders turn read-only keeps its temporary file (removing it needs the
    # write permission that just went); the rerun removes it.
    recorded = check_stopped_cleanly(root, process, "Permission denied", removable=False)
    assert all(path.parent.stat().st_mode & 0o200 == 0 for path in half_written(root)), half_written(root)
    stopped_seconds = time.monotonic() - began
    assert 3 <= recorded < TRIALS

    # Started again before the permissions are given back: refused up front (exit 2), naming the folder.
    again = subprocess.run([*prefix, sys.executable, "-m", "banditsweep", "run", "perm.yaml", "--no-progress"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2, again
    assert again.stderr.strip() == (f"error: $BANDITSWEEP_RESULTS: {root} is not writable (no write permission, "
                                    "or an immutable folder); a sweep's results folder must be a directory you "
                                    "can write to"), again.stderr
    assert SweepStore_records(root) == recorded
    # The results root itself without write permission: refused up front too.
    bare = tmp_path / "locked"
    bare.mkdir(mode=0o555)
    locked = subprocess.run([*prefix, sys.executable, "-m", "banditsweep", "run", "perm.yaml", "--no-progress",
                             "--results", str(bare / "results")], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert locked.returncode == 2 and f"{bare} is not writable" in locked.stderr, locked
    assert not list(bare.iterdir())

    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    began = time.monotonic()
    check_completed_by_a_rerun(tmp_path, "perm", recorded, capsys)
    print(f"\nFIGURES permissions: stopped after {stopped_seconds:.1f}s with {recorded}/{TRIALS} recorded; "
          f"rerun {time.monotonic() - began:.1f}s", file=sys.__stdout__)


def SweepStore_records(root: Path) -> int:
    from banditsweep.workers.storage.store import SweepStore

    return len(SweepStore(root).journal())


@pytest.mark.slow  # a `run` process with a Ray of its own, then a rerun: about 30 s
def test_a_file_system_remounted_read_only_mid_sweep_stops_it_with_exit_3_and_a_rerun_completes_it(
        tmp_path, monkeypatch, plugins, shared_ray, capsys):
    if not mount_namespaces_work(tmp_path):
        pytest.skip("no private mount namespaces here (needs root and unshare/nsenter)")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rofs.yaml").write_text(yaml.safe_dump({"sweep": "rofs", **SPEC}))
    root = tmp_path / "results" / "rofs"
    # The run has a mount namespace of its own; in it, the sweep folder is then covered by a
    # read-only bind mount of itself (a new mount, so the run's open lock file does not keep it busy).
    began = time.monotonic()
    process = run_process(tmp_path, "rofs", ["unshare", "-m", "--propagation", "private"])
    wait_for(root, process, 3)
    remount = subprocess.run(["nsenter", "-t", str(process.pid), "-m", "sh", "-c",
                              'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"', str(root)],
                             capture_output=True, text=True)
    assert remount.returncode == 0, remount.stderr
    recorded = check_stopped_cleanly(root, process, "Read-only file system", removable=False)
    stopped_seconds = time.monotonic() - began
    assert 3 <= recorded < TRIALS
    began = time.monotonic()
    check_completed_by_a_rerun(tmp_path, "rofs", recorded, capsys)   # the mount went with the process
    print(f"\nFIGURES read-only: stopped after {stopped_seconds:.1f}s with {recorded}/{TRIALS} recorded; "
          f"rerun {time.monotonic() - began:.1f}s", file=sys.__stdout__)


def test_a_checkpoint_that_cannot_be_saved_does_not_fail_its_trial(tmp_path, monkeypatch):
    """Disk full (or read-only) when a trial saves its checkpoint: the trial goes on and ends as it
    would have (whether its results can be written is the driver's to find, exit 3)."""
    import errno

    import numpy as np

    from banditsweep.core.engine.trial import TrialSpec, run_trial, run_trials
    from banditsweep.workers.storage import atomic, checkpoint_files as checkpoints

    def disk_full(*arguments, **keywords):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ck"))

    files = checkpoints.CheckpointFiles(tmp_path / "ck", 5)
    spec = TrialSpec.create("linucb", {}, {"kind": "synthetic", "function": "h1", "dim": 3}, 0, 20)
    monkeypatch.setattr(atomic.tempfile, "mkstemp", disk_full)
    (result,) = run_trials([spec], "cpu", checkpoints=files)
    monkeypatch.undo()
    np.testing.assert_array_equal(result.cum_regret, run_trial(spec).cum_regret)
    assert not list((tmp_path / "ck").iterdir())


def test_a_trials_table_that_cannot_be_rebuilt_is_exit_3_with_the_journal_kept(tmp_path, monkeypatch, shared_ray,
                                                                              capsys):
    """The journal takes the trials, then the trials table (derived from it) cannot be rebuilt:
    exit 3 naming it, the trials recorded stay recorded and mirrored, the MLflow parent run is
    closed as FAILED, and the next run rebuilds the table without running them again."""
    import errno

    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.queries import search_all
    from banditsweep.workers.storage.store import SweepStore

    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "table", "horizon": 50, "seeds": 4,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}], "algorithms": [{"name": "linucb"}]}
    (tmp_path / "table.yaml").write_text(yaml.safe_dump(spec))
    real = SweepStore.write_trials_table
    calls = []

    def read_only(self, records):   # the first rebuild works, the later ones (the last at the end) fail
        calls.append(len(records))
        if len(calls) == 1:
            return real(self, records)
        raise OSError(errno.EROFS, "Read-only file system", str(self.trials_dir / "trials.parquet"))

    monkeypatch.setattr(SweepStore, "write_trials_table", read_only)
    assert main(["run", "table.yaml", "--no-progress"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    root = tmp_path / "results" / "table"
    assert err[-1].startswith(f"error: cannot write results to {root}/trials/trials.parquet: Read-only file system")
    recorded = SweepStore(root).journal()
    assert recorded and all(r.status == "finished" for r in recorded.values())
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("table").experiment_id
    assert [r.info.status for r in search_all(client, experiment, "tags.kind = 'sweep'")] == ["FAILED"]
    assert len(search_all(client, experiment, "tags.kind = 'trial' and attributes.status = 'FINISHED'")) == len(recorded)
    monkeypatch.setattr(SweepStore, "write_trials_table", real)
    assert main(["run", "table.yaml", "--no-progress"]) == 0
    assert f"{4 - len(recorded)} to run" in capsys.readouterr().out
    trials = pd.read_parquet(root / "trials")
    assert len(trials) == 4 and trials["trial_id"].is_unique and (trials["status"] == "finished").all()


def test_a_damaged_file_that_cannot_be_moved_aside_is_exit_3_naming_the_folder(tmp_path):
    """`status` finds a damaged curves file but the sweep folder takes no writes (so the file cannot
    be quarantined): exit 3, one line naming where it could not write, no traceback."""
    prefix = as_a_user()
    spec = {"sweep": "locked", "horizon": 10, "seeds": 2,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}], "algorithms": [{"name": "random"}]}
    write_spec_results(tmp_path, spec, name="locked.yaml")   # finished, as a run leaves them
    root = tmp_path / "results" / "locked"
    (curves,) = root.joinpath("curves").glob("*.parquet")
    curves.write_bytes(curves.read_bytes()[:100])
    folders = [root, *(p for p in root.rglob("*") if p.is_dir())]
    for folder in folders:
        folder.chmod(0o555)
    try:
        status = subprocess.run([*prefix, sys.executable, "-m", "banditsweep", "status", "locked.yaml"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
    finally:
        for folder in folders:
            folder.chmod(0o755)
    assert status.returncode == 3, status
    assert status.stderr.strip() == f"error: cannot write to {root}/quarantine: Permission denied", status.stderr
    assert curves.exists() and not (root / "quarantine").exists()


def test_a_run_removes_what_unfinished_writes_left_and_nothing_else(tmp_path):
    """A write stopped by a file system turned read-only cannot remove its temporary file: the next run,
    holding the folder's lock, does (its own kind only, found without following links)."""
    from banditsweep.workers.storage.store import SweepStore

    store = SweepStore(tmp_path / "sweep")
    (store.root / "trials").mkdir(parents=True)
    left = [store.root / "trials" / ".trials.parquet.ab12cd.tmp", store.root / ".journal-x.tmp"]
    (store.root / ".journal-x.tmp").parent.mkdir(exist_ok=True)
    for path in left:
        path.write_bytes(b"half")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / ".keep.tmp").write_bytes(b"not the store's")
    (store.root / "linked").symlink_to(outside)
    (store.root / "trials" / "data.tmp").write_bytes(b"not hidden: not one of ours")
    with store.exclusive():
        pass
    assert not any(path.exists() for path in left)
    assert (outside / ".keep.tmp").exists() and (store.root / "trials" / "data.tmp").exists()
