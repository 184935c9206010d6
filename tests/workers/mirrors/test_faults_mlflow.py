"""MLflow faults with a real tracking server: the server stopped in the middle of a sweep (the sweep
goes on in Parquet and ends on time; `sync-mlflow` later mirrors every trial exactly once)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from banditsweep.sweeps.cli.main import main
from mlflow_server import TrackingServer
from banditsweep.workers.mirrors.mlflow.run_content import regret_metric

TRIALS = 16
# One trial: 100 rounds of 10 ms, about 1 s; 16 trials on the tests' two workers, about 8 s.
SPEC = {"horizon": 100, "seeds": TRIALS // 2, "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
        "algorithms": [{"name": "slow_random", "grid": {"pause": [0.01]}, "label": "slow_a"},
                       {"name": "slow_random", "grid": {"pause": [0.0101]}, "label": "slow_b"}]}
# The outage test stops the server once 2 trials are mirrored and needs the sweep still running then;
# on a loaded machine the mirror's first writes to a server took longer than the 8 s above, so its
# trials are 3x longer (16 trials: about 24 s).
OUTAGE_SPEC = {**SPEC, "algorithms": [{"name": "slow_random", "grid": {"pause": [0.03]}, "label": "slow_a"},
                                      {"name": "slow_random", "grid": {"pause": [0.0301]}, "label": "slow_b"}]}


@pytest.fixture
def server(tmp_path):
    folder = tmp_path / "server"
    folder.mkdir()
    tracking = TrackingServer(folder)
    tracking.start()
    yield tracking
    tracking.stop()


def journal_count(root: Path) -> int:
    journal = root / ".journal"
    if not journal.is_dir():
        return 0
    count = 0
    for path in journal.glob("s*.jsonl"):
        try:
            count += sum(1 for line in path.read_text().splitlines() if line.strip())
        except OSError:   # compacted away while read
            pass
    return count


def trial_runs(uri: str, sweep: str) -> tuple[dict[str, list[str]], list[str]]:
    """Child runs' statuses by trial id, and the parent runs' statuses (active runs only)."""
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.queries import search_all

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(sweep)
    if experiment is None:
        return {}, []
    children: dict[str, list[str]] = {}
    for run in search_all(client, experiment.experiment_id, "tags.kind = 'trial'"):
        children.setdefault(run.data.tags["trial_id"], []).append(run.info.status)
    parents = [run.info.status for run in search_all(client, experiment.experiment_id, "tags.kind = 'sweep'")]
    return children, parents


@pytest.mark.slow  # a tracking server started twice and three sweeps: about 90 s
def test_a_tracking_server_stopped_mid_sweep_costs_no_time_and_sync_mirrors_each_trial_once(
        tmp_path, monkeypatch, plugins, shared_ray, server, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("steady", "outage"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"sweep": name, **OUTAGE_SPEC}))
    uri = ["--mlflow-uri", server.uri]

    # The same sweep with the server up all along: the time to beat.
    began = time.monotonic()
    assert main(["run", "steady.yaml", "--no-progress", *uri]) == 0
    steady_seconds = time.monotonic() - began
    children, parents = trial_runs(server.uri, "steady")
    assert len(children) == TRIALS and all(statuses == ["FINISHED"] for statuses in children.values())
    assert parents == ["FINISHED"]

    # The server is stopped once 4 trials are durable and 2 mirrored, and stays down until the
    # sweep has ended.
    root = tmp_path / "results" / "outage"
    stopped = {}

    def mirrored() -> int:
        children, _ = trial_runs(server.uri, "outage")
        return sum(1 for statuses in children.values() if "FINISHED" in statuses)

    def stop_the_server():
        deadline = time.monotonic() + 120
        while (journal_count(root) < 4 or mirrored() < 2) and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped["done"] = journal_count(root)
        server.stop()
        stopped["at"] = time.monotonic()

    capsys.readouterr()
    watcher = threading.Thread(target=stop_the_server, daemon=True)
    began = time.monotonic()
    watcher.start()
    assert main(["run", "outage.yaml", "--no-progress", *uri]) == 0
    ended = time.monotonic()
    watcher.join(timeout=10)
    outage_seconds = ended - began
    captured = capsys.readouterr()
    assert 4 <= stopped["done"] < TRIALS   # stopped in the middle of the sweep
    trials = pd.read_parquet(root / "trials")
    assert len(trials) == TRIALS and (trials["status"] == "finished").all()
    assert trials["trial_id"].is_unique
    curves = pd.read_parquet(root / "curves")
    assert len(curves) == TRIALS * 100 and not curves.duplicated(["trial_id", "t"]).any()
    assert f"{TRIALS} finished, 0 failed" in captured.out
    # Said (not a traceback), and what to do: the mirror kept what it owes and names sync-mlflow.
    assert "results are kept in Parquet and it is retried with back-off" in captured.err
    assert "sync-mlflow" in captured.err
    assert "Traceback" not in captured.err
    # The outage costs the sweep no more than a few seconds: nothing waits for MLflow.
    assert outage_seconds < steady_seconds + 30, (outage_seconds, steady_seconds)

    # The server comes back (same store, same address); sync-mlflow mirrors every trial exactly once.
    restart_seconds = server.start()
    before, _ = trial_runs(server.uri, "outage")
    mirrored_before = sum(1 for statuses in before.values() if "FINISHED" in statuses)
    assert 2 <= mirrored_before < TRIALS   # those mirrored before the stop, not the rest
    began = time.monotonic()
    assert main(["sync-mlflow", "outage.yaml", *uri]) == 0
    sync_seconds = time.monotonic() - began
    out = capsys.readouterr().out
    children, parents = trial_runs(server.uri, "outage")
    assert sorted(children) == sorted(trials["trial_id"])
    assert all(statuses == ["FINISHED"] for statuses in children.values()), children
    assert "RUNNING" not in parents   # the outage run's parent is closed (KILLED), not left running
    rebuilt = int(out.split(" MLflow runs rebuilt")[0].rsplit(" ", 1)[1])
    assert rebuilt == TRIALS - mirrored_before   # the trials that ended while the server was down
    # Idempotent: nothing more to do, and the steady sweep's runs were not touched.
    assert main(["sync-mlflow", "outage.yaml", *uri]) == 0
    assert "0 MLflow runs rebuilt, 0 stale runs deleted" in capsys.readouterr().out
    children, _ = trial_runs(server.uri, "steady")
    assert len(children) == TRIALS and all(statuses == ["FINISHED"] for statuses in children.values())
    print(f"\nFIGURES steady={steady_seconds:.1f}s outage={outage_seconds:.1f}s stopped_after={stopped['done']} "
          f"mirrored_before={mirrored_before} before={sorted(map(tuple, before.values()))} rebuilt={rebuilt} restart={restart_seconds:.1f}s sync={sync_seconds:.1f}s", file=sys.__stdout__)


def test_a_delivery_cut_off_part_way_is_handed_again_without_duplicate_runs_or_lost_points(tmp_path, monkeypatch):
    """The server goes away in the middle of a call (some trials' runs written, not the rest): the
    mirror hands the whole call again, and the sink does only what is left."""
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors import sinks
    from banditsweep.workers.mirrors.mlflow.sink import MLflowSink
    from banditsweep.workers.storage.record import FINISHED, TrialRecord
    from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
    from banditsweep.workers.mirrors.sinks import Mirror, SinkContext

    monkeypatch.setattr(sinks, "MAX_RETRY_DELAY", 0.05)
    uri = f"sqlite:///{tmp_path}/cut.db"
    sink = MLflowSink(SinkContext("cut", str(tmp_path / "results"), sink_options=MLflowOptions(uri).sink_options()))
    real = sink.client

    class CutOff:
        """The real client, failing its `fail_at`-th store call (counted from when it is armed)."""

        calls, fail_at = 0, None

        def __getattr__(self, name):
            method = getattr(real, name)

            def call(*arguments, **keywords):
                CutOff.calls += 1
                if CutOff.calls == CutOff.fail_at:
                    raise ConnectionError("connection refused")
                return method(*arguments, **keywords)
            return call

    sink.use_client(CutOff())   # the client's path, a tracking server's (a transaction is never half made)
    records = [TrialRecord(trial_id=f"{i:020d}", sweep="cut", algorithm="random", label="random", environment="env",
                           seed=i, horizon=4, params={}, environment_config={}, log_every=2, status=FINISHED,
                           attempts=1, final_regret=3.0 + i) for i in range(6)]
    mirror = Mirror([sink], interval=0.02)
    mirror.started(records[:2])                       # two long trials stream their first points
    time.sleep(0.2)
    mirror.progress(records[0].trial_id, [(2, 1.0)])
    time.sleep(0.2)
    # Ending six trials takes 3 calls each for the four not started, 3 for each started one; the
    # 9th call (the second not-started trial's log_batch) fails, after two trials' runs are closed.
    CutOff.calls, CutOff.fail_at = 0, 9
    mirror.ended([(r, [(2, 1.0 + r.seed), (4, 3.0 + r.seed)]) for r in records])
    deadline = time.monotonic() + 20
    while not mirror.status.notes and time.monotonic() < deadline:
        time.sleep(0.05)
    status = mirror.close("FINISHED", {}, timeout=20)
    assert CutOff.calls > 9 and "MLflowSink reachable again: caught up" in status.notes
    assert sum("MLflowSink failed" in e for e in status.errors) == 1 and status.pending == 0
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("cut").experiment_id
    runs = client.search_runs([experiment], "tags.kind = 'trial'")
    by_trial = {}
    for run in runs:
        by_trial.setdefault(run.data.tags["trial_id"], []).append(run)
    assert sorted(by_trial) == [r.trial_id for r in records]
    for record in records:
        (run,) = by_trial[record.trial_id]   # one run each, however often the call was handed
        assert run.info.status == "FINISHED" and run.data.metrics["final_regret"] == 3.0 + record.seed
        assert run.data.params["seed"] == str(record.seed)
        history = client.get_metric_history(run.info.run_id, regret_metric(run.data.params["environment"]))
        assert [(m.step, m.value) for m in history] == [(2, 1.0 + record.seed), (4, 3.0 + record.seed)]


@pytest.mark.slow  # two `run` processes, each with a Ray of its own: about 25 s
def test_two_results_folders_running_at_once_on_one_sqlite_store_keep_to_their_own_runs(tmp_path, plugins):
    """Two `banditsweep run` processes, the same sweep into two results folders, started together
    on one new SQLite MLflow store: no trial fails for the other's sake, and MLflow ends with one
    FINISHED child run per trial and store (each tagged with its store), one parent run each."""
    from banditsweep.workers.mirrors.mlflow.queries import search_all
    from banditsweep.workers.mirrors.sinks import store_id

    spec = {"sweep": "shared", **SPEC, "horizon": 40, "seeds": 12,
            "algorithms": [{"name": "slow_random", "grid": {"pause": [0.003]}, "label": "slow_a"},
                           {"name": "slow_random", "grid": {"pause": [0.0031]}, "label": "slow_b"}]}
    (tmp_path / "shared.yaml").write_text(yaml.safe_dump(spec))
    uri = f"sqlite:///{tmp_path}/shared.db"
    began = time.monotonic()
    runs = {folder: subprocess.Popen(
        [sys.executable, "-m", "banditsweep", "run", "shared.yaml", "--results", folder, "--mlflow-uri", uri,
         "--no-progress", "--max-workers", "1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for folder in ("a", "b")}
    outputs = {}
    try:
        for folder, process in runs.items():
            outputs[folder] = process.communicate(timeout=300)[0]
    finally:
        for process in runs.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
    seconds = time.monotonic() - began
    for folder, process in runs.items():
        assert process.returncode == 0, outputs[folder]
        assert "24 finished, 0 failed" in outputs[folder], outputs[folder]
        trials = pd.read_parquet(tmp_path / folder / "shared" / "trials")
        assert len(trials) == 24 and (trials["status"] == "finished").all() and trials["trial_id"].is_unique
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("shared").experiment_id
    ids = {store_id(str(tmp_path / folder), "shared"): folder for folder in runs}
    trial_ids = sorted(pd.read_parquet(tmp_path / "a" / "shared" / "trials")["trial_id"])
    children: dict[tuple[str, str], list[str]] = {}
    for run in search_all(client, experiment, "tags.kind = 'trial'"):
        children.setdefault((ids[run.data.tags["store"]], run.data.tags["trial_id"]), []).append(run.info.status)
    assert sorted(children) == sorted((folder, t) for folder in runs for t in trial_ids)
    assert all(statuses == ["FINISHED"] for statuses in children.values()), children
    parents = {ids[run.data.tags["store"]]: run.info.status
               for run in search_all(client, experiment, "tags.kind = 'sweep'")}
    assert parents == {"a": "FINISHED", "b": "FINISHED"}
    print(f"\nFIGURES concurrent two runs: {seconds:.1f}s", file=sys.__stdout__)


def _open_a_sink(uri: str, folder: str, start: float) -> str:
    from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
    from banditsweep.workers.mirrors.sinks import SinkContext, open_sinks

    time.sleep(max(0.0, start - time.time()))   # all at once
    context = SinkContext("race", folder, sink_options=MLflowOptions(uri).sink_options())
    sinks, _, errors = open_sinks(["mlflow"], context, {}, [])
    return errors[0] if errors else sinks[0].experiment_id


def test_runs_opening_one_new_sqlite_store_at_once_all_get_their_sink(tmp_path):
    """Three runs (processes) open their MLflow sink on one new SQLite store in the same instant:
    MLflow creates the store's tables once, the experiment once, and every run keeps its sink."""
    import multiprocessing

    uri = f"sqlite:///{tmp_path}/race.db"
    start = time.time() + 3.0
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        answers = pool.starmap(_open_a_sink, [(uri, str(tmp_path / f"r{i}"), start) for i in range(3)])
    assert len(set(answers)) == 1 and answers[0].isdigit(), answers   # one experiment, no error


def _open_a_sink_saying(uri: str, folder: str, start: float) -> tuple[str, list[str]]:
    from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
    from banditsweep.workers.mirrors.sinks import SinkContext, open_sinks

    time.sleep(max(0.0, start - time.time()))   # all at once
    context = SinkContext("race", folder, sink_options=MLflowOptions(uri).sink_options())
    sinks, _, warnings = open_sinks(["mlflow"], context, {}, [])
    return (sinks[0].experiment_id if sinks else ""), warnings


def test_runs_opening_one_broken_sqlite_store_at_once_move_it_aside_once(tmp_path):
    """Three runs open their MLflow sink on one broken SQLite store in the same instant: one moves
    it aside (under the setup lock) and makes it anew, the others wait and open the new store; one
    experiment, one store moved aside, every run keeps its sink."""
    import multiprocessing

    broken = tmp_path / "race.db"
    broken.write_bytes(b"SQLite format 3\x00" + os.urandom(4080))   # a header, then what a full disk left
    uri = f"sqlite:///{broken}"
    start = time.time() + 3.0
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        answers = pool.starmap(_open_a_sink_saying, [(uri, str(tmp_path / f"r{i}"), start) for i in range(3)])
    experiments = {experiment for experiment, _ in answers}
    assert len(experiments) == 1 and experiments.pop().isdigit(), answers
    warnings = [warning for _, said in answers for warning in said]
    (aside,) = tmp_path.glob("race.db.broken-*")
    assert len(warnings) == 1 and f"the MLflow store {broken} could not be opened" in warnings[0], warnings
    assert f"moved aside to {aside} " in warnings[0] and aside.read_bytes()[:16] == b"SQLite format 3\x00"
