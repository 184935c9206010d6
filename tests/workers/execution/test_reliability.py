"""Numbers that stop being numbers fail their trial, naming the round and the quantity; result
files respect the umask; errors are plain text."""

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest
import yaml
from store_builders import make_store, write_spec_results

from banditsweep.core.engine.trial import NonFiniteError, TrialSpec, run_trial
from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.record import TrialRecord

KERNEL = {"kind": "adversarial_kernel", "domain": {"grid": [4, 4]}, "candidates": 10, "centers": 3}


def test_a_non_finite_reward_or_distribution_fails_the_trial_naming_round_and_quantity(plugins):
    with pytest.raises(NonFiniteError, match="round 4: the reward of the trial is inf"):
        run_trial(TrialSpec.create("linucb", {}, {"kind": "infinite_rewards", "dim": 3}, 0, 10))
    with pytest.raises(NonFiniteError, match="round 3: the sampling distribution P_t of arm 0 is nan"):
        run_trial(TrialSpec.create("nan_distribution", {}, KERNEL, 0, 10))


def test_through_the_cli_they_are_failed_trials_and_the_others_finish(tmp_path, monkeypatch, plugins, shared_ray):
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "finite", "horizon": 10, "seeds": 1,
            "environments": [{"kind": "infinite_rewards", "dim": 3}, KERNEL],
            "algorithms": [{"name": "linucb"}, {"name": "nan_distribution"}, {"name": "random"}]}
    (tmp_path / "finite.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "finite.yaml", "--no-progress"]) == 1
    trials = pd.read_parquet("results/finite/trials").set_index(["algorithm", "environment"])
    assert trials.loc[("linucb", "infinite_rewards:h1,dim=3"), "error"] == (
        "NonFiniteError: round 4: the reward of the trial is inf")
    nan_row = trials.xs("nan_distribution", level="algorithm").iloc[0]
    assert nan_row["error"] == "NonFiniteError: round 3: the sampling distribution P_t of arm 0 is nan"
    # Random on the kernel domain is finite; on the infinite-reward bandit it fails like linucb.
    assert trials.xs("random", level="algorithm")["status"].tolist().count("finished") == 1


def test_result_files_get_the_mode_the_umask_gives(tmp_path):
    """0644 under 022, not mkstemp's 0600: the store writes them (curves, trials table, compacted
    files), whether a run or anything else gives it the outcomes."""
    store = make_store(tmp_path)
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask
    paths = list(store.root.rglob("*.parquet"))
    assert paths
    for path in paths:
        assert stat.S_IMODE(path.stat().st_mode) == mode, path


def test_errors_are_stored_as_plain_text():
    record = TrialRecord("t" * 20, "s", "a", "a", "e", 0, 1, {}, {})
    failed = record.failed("\x1b[31mValueError\x1b[0m: boom", "Traceback\n\x1b[1mline\x1b[0m", at=0.0)
    assert failed.error == "ValueError: boom" and failed.traceback == "Traceback\nline"
    assert json.loads(json.dumps(failed.to_json()))["error"] == "ValueError: boom"


def _small(name: str) -> dict:
    """Two Random trials of 10 rounds."""
    return {"sweep": name, "horizon": 10, "seeds": 2,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}], "algorithms": [{"name": "random"}]}


def _spec(tmp_path, name="mirror"):
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(_small(name)))
    return f"{name}.yaml"


def _finished(tmp_path, name="mirror"):
    """The spec's trials finished in the results folder, written directly (nothing run); the spec's name."""
    write_spec_results(tmp_path, _small(name), name=f"{name}.yaml")
    return f"{name}.yaml"


def test_an_unreachable_tracking_server_is_a_clear_error_in_seconds(tmp_path, monkeypatch, capsys):
    import socket
    import time

    monkeypatch.chdir(tmp_path)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]   # nothing listens there once closed
    began = time.monotonic()
    assert main(["run", _spec(tmp_path), "--mlflow-uri", f"http://127.0.0.1:{port}", "--no-progress"]) == 2
    assert time.monotonic() - began < 15
    err = capsys.readouterr().err
    assert f"the MLflow tracking server at http://127.0.0.1:{port} does not answer" in err
    assert "--sink none" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "results").exists()   # nothing written


def test_sync_mlflow_backfills_a_parquet_only_store_once(tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    spec = _finished(tmp_path)   # as a run with --sink none leaves it
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert client.get_experiment_by_name("mirror") is None
    assert main(["sync-mlflow", spec]) == 0
    assert "2 MLflow runs rebuilt" in capsys.readouterr().out
    experiment = client.get_experiment_by_name("mirror").experiment_id
    runs = client.search_runs([experiment], "tags.kind = 'trial'")
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    assert main(["sync-mlflow", spec]) == 0
    assert "0 MLflow runs rebuilt" in capsys.readouterr().out


def test_a_parent_run_left_running_by_a_driver_that_died_is_closed_by_the_next_run(tmp_path, monkeypatch):
    """The next run of its store, here one with nothing left to run."""
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    spec = _finished(tmp_path)
    assert main(["sync-mlflow", spec]) == 0
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("mirror").experiment_id], "tags.kind = 'trial'")
    stale = client.get_run(runs[0].data.tags["mlflow.parentRunId"])
    client.update_run(stale.info.run_id, status="RUNNING")
    assert main(["run", spec, "--no-progress"]) == 0
    assert client.get_run(stale.info.run_id).info.status == "KILLED"


@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_worker_counts_below_one_are_refused(tmp_path, monkeypatch, capsys, value):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["run", _spec(tmp_path), "--max-workers", value])
    assert exit_.value.code == 2 and "--max-workers" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_damaged_result_files_are_named_quarantined_and_their_trials_run_again(tmp_path, monkeypatch, shared_ray,
                                                                               capsys):
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, "damage")
    assert main(["run", spec, "--no-progress"]) == 0
    root = tmp_path / "results" / "damage"
    before = pd.read_parquet(root / "trials").set_index("trial_id")["final_regret"]
    (curves,) = root.joinpath("curves").glob("*.parquet")
    curves.write_bytes(curves.read_bytes()[:200])            # a truncated curves file
    (segment,) = root.joinpath(".journal").glob("*.jsonl")
    text = segment.read_text()
    segment.write_text(text[: len(text) // 2 + 5])           # a journal cut mid-record
    capsys.readouterr()

    assert main(["status", spec]) == 4   # damage found (and moved aside): the store was inconsistent
    captured = capsys.readouterr()
    assert f"damaged result file {curves} (not readable Parquet" in captured.err
    assert f"damaged result file {segment} (1 unreadable record(s): line " in captured.err
    assert "2 trials: 0 done, 0 failed, 2 pending" in captured.out
    assert sorted(p.name for p in (root / "quarantine").iterdir()) == [f"curves-{curves.name}",
                                                                       f"journal-{segment.name}"]
    assert main(["run", spec, "--no-progress"]) == 0
    assert "2 to run" in capsys.readouterr().out
    after = pd.read_parquet(root / "trials").set_index("trial_id")["final_regret"]
    pd.testing.assert_series_equal(after.sort_index(), before.sort_index())   # the same results again
    assert len(pd.read_parquet(root / "curves")) == 2 * 10
    assert main(["report", spec]) == 0
    assert main(["status", spec]) == 0   # repaired


def test_a_trial_whose_worker_dies_resumes_from_its_checkpoint_bit_identical(tmp_path, monkeypatch, plugins, capsys):
    """GA, PC, NeuralUCB, Kernelized Exp3 and RLS-Kernelized Exp3, each killed at round 13 of 20
    with checkpoints every 5 rounds: the retry resumes at round 11 and ends with exactly the arrays
    of an uninterrupted run; no checkpoint is left behind."""
    import numpy as np
    import ray

    from banditsweep.workers.storage.store import SweepStore

    monkeypatch.chdir(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("BANDITSWEEP_TEST_MARKERS", str(markers))
    monkeypatch.setenv("BANDITSWEEP_PLUGINS", "crash_midway")
    ray.shutdown()   # an embedded Ray of its own: its workers load the crash plugin
    neural = {"width": 8, "steps": 3, "lr": 0.01}
    kernel = {"kind": "adversarial_kernel", "domain": {"grid": [5, 5]}, "candidates": 20, "centers": 5}
    synthetic = {"kind": "synthetic", "function": "h1", "dim": 4}
    cases = [("neural_rbmle_ga", neural, synthetic), ("neural_rbmle_pc", neural, synthetic),
             ("neural_ucb", neural, synthetic), ("kernel_exp3", {}, kernel), ("rls_kernel_exp3", {}, kernel)]
    spec = {"sweep": "resume", "horizon": 20, "seeds": [3], "checkpoint_every": 5,
            "environments": [synthetic, kernel],
            "algorithms": [{"name": f"{name}_crash_midway", "params": params, "when": {"kind": env["kind"]}}
                           for name, params, env in cases]}
    (tmp_path / "resume.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "resume.yaml", "--no-progress", "--max-workers", "2"]) == 0
    assert sorted(p.name for p in markers.iterdir()) == sorted(f"{name}_crash_midway.crashed" for name, _, _ in cases)
    store = SweepStore.for_sweep(tmp_path / "results", "resume")
    trials = store.read_trials().set_index("algorithm")
    assert (trials["attempts"] == 2).all() and (trials["status"] == "finished").all()
    assert not list((store.root / ".checkpoints").iterdir())
    for name, params, env in cases:
        row = trials.loc[f"{name}_crash_midway"]
        assert json.loads(row["diagnostics"])["resumed_from_round"] == 11.0, name   # the last checkpoint
        curve = store.read_curves([row["trial_id"]]).sort_values("t")
        alone = run_trial(TrialSpec.create(name, params, env, 3, 20))
        np.testing.assert_array_equal(curve["arm"].to_numpy(), alone.arm, err_msg=name)
        np.testing.assert_array_equal(curve["cum_regret"].to_numpy(), alone.cum_regret, err_msg=name)
        np.testing.assert_array_equal(curve["reward"].to_numpy(), alone.reward, err_msg=name)


def test_an_address_where_no_ray_head_answers_is_exit_2_in_seconds(tmp_path, monkeypatch, capsys):
    import time

    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, "impossible")
    began = time.monotonic()
    assert main(["run", spec, "--address", "127.0.0.1:1", "--no-progress"]) == 2
    assert time.monotonic() - began < 15
    assert "--address 127.0.0.1:1: no Ray head answers there" in capsys.readouterr().err


def test_a_request_no_node_can_ever_meet_is_exit_2_in_one_line(tmp_path, monkeypatch, capsys):
    import ray

    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, "impossible")
    ray.shutdown()   # an embedded Ray of this machine's size, not the tests' shared one
    assert main(["run", spec, "--set", "resources.cpus_per_trial=64", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "each trial asks for 64 CPU, but the embedded Ray on this machine has" in err
    assert len(err.strip().splitlines()) == 1


def test_a_full_disk_stops_the_run_with_exit_3_and_marks_no_trial_failed(tmp_path, monkeypatch, shared_ray, capsys):
    import errno

    from banditsweep.workers.storage.store import SweepStore

    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "full", "horizon": 300, "seeds": 6,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}], "algorithms": [{"name": "linucb"}]}
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(spec))
    real_write = SweepStore.write_outcomes
    calls = []

    def disk_fills_up(self, outcomes):
        calls.append(len(outcomes))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.curves_dir / "part-x.parquet"))
        real_write(self, outcomes)

    monkeypatch.setattr(SweepStore, "write_outcomes", disk_fills_up)
    assert main(["run", "full.yaml", "--max-workers", "1", "--no-progress"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: cannot write results to {tmp_path}/results/full/curves/part-x.parquet: "
                              "No space left on device")
    store = SweepStore.for_sweep(tmp_path / "results", "full")
    written = store.journal()
    assert len(written) == calls[0] and all(r.status == "finished" for r in written.values())
    monkeypatch.setattr(SweepStore, "write_outcomes", real_write)
    assert main(["run", "full.yaml", "--no-progress"]) == 0
    assert f"{6 - calls[0]} to run" in capsys.readouterr().out
    trials = pd.read_parquet("results/full/trials")
    assert len(trials) == 6 and (trials["status"] == "finished").all()


def test_ui_serves_the_sweeps_store_on_loopback(tmp_path, monkeypatch, capsys):
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    monkeypatch.chdir(tmp_path)
    spec = _finished(tmp_path, "ui")
    assert main(["sync-mlflow", spec]) == 0   # the sweep's experiment, which `ui` opens on
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    ui = subprocess.Popen([sys.executable, "-m", "banditsweep", "ui", spec, "--port", str(port)], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        # At once: that it is starting, and where; the address only once the server answers there.
        first = ui.stdout.readline()
        assert first.startswith(f"ui: starting the MLflow UI of sqlite:///{tmp_path}/mlflow.db on "
                                f"http://127.0.0.1:{port}") and "its address follows once it answers" in first, first
        deadline, lines = time.monotonic() + 300, []   # a loaded 2-core machine takes minutes to start MLflow
        while time.monotonic() < deadline:
            line = ui.stdout.readline()
            assert line, "".join(lines)   # `ui` ended
            lines.append(line)
            if " at http://" in line:
                break
        else:
            raise AssertionError("no address within 300 s:\n" + "".join(lines))
        assert f"MLflow UI of sqlite:///{tmp_path}/mlflow.db at http://127.0.0.1:{port}/#/experiments/" in line, line
        assert "Ctrl-C stops it" in line
        # On loopback, answering when its address is given.
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
            assert answer.status == 200
    finally:
        # SIGTERM, as a scheduler or `kill` sends it (`ui` stops on it as on Ctrl-C): a SIGINT would be
        # ignored where the tests run as a background job, which starts with SIGINT ignored (inherited).
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(timeout=120)
        except subprocess.TimeoutExpired:   # still starting MLflow on a loaded machine: end the group
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait(timeout=30)
        # The MLflow server `ui` started lives in a process group of its own, which `ui` ends on its way
        # out; whatever of it is still there (this test's port is in its command line) is a leak.
        left = _processes_with_argument(f"--port {port}")
        for pid in left:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not left, "ui left its MLflow server running"


def _processes_with_argument(argument: str) -> list[int]:
    """The processes whose command line holds ``argument`` (Linux: read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if argument in command and "pytest" not in command:
                found.append(int(entry.name))
    return found
