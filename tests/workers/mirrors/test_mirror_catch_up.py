"""The end of a run and its MLflow mirror: a mirror slower than the sweep is waited for (saying how
much is left), and a wait cut short says exactly what MLflow lacks and leaves no run RUNNING; the bulk
writer's runs read back as the client's."""

import os
import signal
import subprocess
import sys
import time
import types

import pandas as pd
import pytest
import yaml
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.mirrors.mlflow.queries import search_all
from banditsweep.workers.mirrors.mlflow.run_content import regret_metric
from banditsweep.workers.mirrors.mlflow.sink import MLflowSink
from banditsweep.workers.mirrors.mlflow.writers import BulkWriter
from banditsweep.workers.storage.record import FINISHED, TrialRecord
from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
from banditsweep.workers.mirrors.sinks import SinkContext

from paths import PLUGINS


def _spec(tmp_path, name, seeds):
    spec = {"sweep": name, "horizon": 10, "seeds": seeds, "log_every": 5,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "random"}, {"name": "linucb"}]}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    return f"{name}.yaml"


def _child_statuses(uri, sweep):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(sweep).experiment_id
    statuses = {}
    for run in search_all(client, experiment, "tags.kind = 'trial'"):
        statuses.setdefault(run.info.status, []).append(run.data.tags["trial_id"])
    return statuses


def test_a_slow_mirror_is_waited_for_and_ends_with_every_run_finished(tmp_path, monkeypatch, plugins, shared_ray,
                                                                    capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "slow_mlflow.seconds").write_text("0.25")
    spec = _spec(tmp_path, "slow_mirror", seeds=12)
    assert main(["run", spec, "--sink", "slow_mlflow", "--max-workers", "2", "--no-progress"]) == 0
    trials = pd.read_parquet("results/slow_mirror/trials")
    statuses = _child_statuses(f"sqlite:///{tmp_path}/mlflow.db", "slow_mirror")
    assert sorted(statuses) == ["FINISHED"] and sorted(statuses["FINISHED"]) == sorted(trials["trial_id"])
    assert "the sinks lack" not in capsys.readouterr().err


@pytest.mark.slow   # a driver of its own (its own Ray) and a sink slowed to seconds per trial
def test_a_wait_for_the_mirror_cut_short_states_the_shortfall_and_leaves_nothing_running(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "slow_mlflow.seconds").write_text("1.5")
    spec = _spec(tmp_path, "cut_mirror", seeds=8)
    env = {**os.environ, "PYTHONPATH": f"{PLUGINS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "BANDITSWEEP_PLUGINS": "slow_mlflow"}
    # The driver gets Ctrl-C's SIGINT as from a terminal even where these tests run as a background
    # job (a shell's `cmd &` starts them with SIGINT ignored, which a child would inherit).
    driver = subprocess.Popen([sys.executable, "-m", "banditsweep", "run", spec, "--sink", "slow_mlflow",
                               "--no-progress", "--max-workers", "2"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    deadline = time.time() + 300
    while time.time() < deadline:
        line = driver.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "runs to write" in line:
            driver.send_signal(signal.SIGINT)
            break
    output = "".join(lines) + driver.communicate(timeout=120)[0]
    assert "runs to write" in output, output
    assert "stopped waiting for the sinks (Ctrl-C): the sinks lack" in output, output
    lacking = int(output.split("the sinks lack ")[1].split(" of ")[0].replace(",", ""))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    statuses = _child_statuses(uri, "cut_mirror")
    assert "RUNNING" not in statuses, statuses
    assert 0 < lacking <= 16 and len(statuses.get("FINISHED", [])) == 16 - lacking, (lacking, statuses)
    # The catch-up the message names brings MLflow to every trial, one FINISHED run each.
    caught_up = subprocess.run([sys.executable, "-m", "banditsweep", "sync-mlflow", spec], cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
    assert caught_up.returncode == 0, caught_up.stdout + caught_up.stderr
    statuses = _child_statuses(uri, "cut_mirror")
    assert sorted(statuses) == ["FINISHED"] and len(set(statuses["FINISHED"])) == 16 == len(statuses["FINISHED"])


def _record(index, final):
    return TrialRecord(trial_id=f"{index:020d}", sweep="bulk", algorithm="random", label="random", environment="env",
                       seed=index, horizon=4, params={"nu": 0.5}, environment_config={"dim": 3}, log_every=2,
                       status=FINISHED, attempts=1, final_regret=final, wall_seconds=0.5, seconds_per_round=0.125,
                       diagnostics={"eta": 0.25})


def test_the_bulk_writer_writes_what_the_client_writes(tmp_path):
    """The same trials through the bulk writer (SQLite) and through the client (a tracking server's
    path): the same runs, parameters, tags, metric histories and latest values."""
    seen = {}
    for mode in ("bulk", "client"):
        uri = f"sqlite:///{tmp_path}/{mode}.db"
        sink = MLflowSink(SinkContext("bulk", str(tmp_path / mode), sink_options=MLflowOptions(uri).sink_options()))
        if mode == "client":
            sink.use_client()
        assert isinstance(sink.writer, BulkWriter) == (mode == "bulk")
        records = [_record(i, 3.0 + i) for i in range(5)]
        sink.trials_started(records[:2])
        sink.progress({records[0].trial_id: [(2, 1.0)]})
        sink.trials_ended([(r, [(2, 1.0 + r.seed), (4, 3.0 + r.seed)]) for r in records])
        sink.close("FINISHED", {"trials_finished": 5})
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("bulk").experiment_id
        runs = {}
        for run in search_all(client, experiment, "tags.kind = 'trial'"):
            history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, regret_metric(run.data.params["environment"]))]
            tags = {k: v for k, v in run.data.tags.items() if k not in ("mlflow.parentRunId", "store")}
            runs[run.data.tags["trial_id"]] = (run.info.status, run.info.run_name, tags, run.data.params,
                                               run.data.metrics, history, run.info.end_time is not None)
        seen[mode] = runs
    assert len(seen["bulk"]) == 5 and seen["bulk"] == seen["client"]
    status, _, tags, params, metrics, history, ended = seen["bulk"]["0" * 20]
    assert status == "FINISHED" and ended and tags["status"] == "finished" and params["nu"] == "0.5"
    assert metrics == {"cum_regret/env": 3.0, "final_regret": 3.0, "seconds_per_round": 0.125}
    assert history == [(2, 1.0), (4, 3.0)]


def test_bulk_writes_keep_the_latest_value_rule(tmp_path):
    from banditsweep.workers.mirrors.mlflow.bulk import RunWrite, write_runs

    options = MLflowOptions(f"sqlite:///{tmp_path}/m.db").sink_options()
    sink = MLflowSink(SinkContext("latest", str(tmp_path / "r"), sink_options=options))
    (run_id,) = write_runs(sink.writer.store, sink.experiment_id,
                           [RunWrite(None, name="x", metrics=[Metric("m", 5.0, 10, 3), Metric("m", 1.0, 10, 1)])])
    write_runs(sink.writer.store, sink.experiment_id, [RunWrite(run_id, metrics=[Metric("m", 7.0, 5, 2)])])
    assert MlflowClient(f"sqlite:///{tmp_path}/m.db").get_run(run_id).data.metrics["m"] == 5.0
    write_runs(sink.writer.store, sink.experiment_id, [RunWrite(run_id, metrics=[Metric("m", 2.0, 1, 4)],
                                                                status="FINISHED")])
    run = MlflowClient(f"sqlite:///{tmp_path}/m.db").get_run(run_id)
    assert run.data.metrics["m"] == 2.0 and run.info.status == "FINISHED" and run.info.end_time is not None


def test_auto_mode_keeps_a_run_per_trial_up_to_2000_trials_and_a_run_per_cell_beyond():
    from banditsweep.workers.mirrors.mlflow.options import run_mode

    assert run_mode("auto", 2000) == "trials" and run_mode("auto", 2001) == "cells"


@pytest.fixture(scope="module")
def cell_runs(tmp_path_factory):
    """``mlflow_runs: cells``: two cells (A, B) of three seeds each, mirrored once for the module's
    tests below from the Parquet record (the sink opened, told the trials ended, closed): the sink's
    context, the store, the client and the experiment's id."""
    import numpy as np

    from banditsweep.workers.storage.record import TrialOutcome
    from banditsweep.workers.storage.store import SweepStore

    tmp_path = tmp_path_factory.mktemp("cells")
    store = SweepStore.for_sweep(tmp_path / "results", "cells")
    outcomes = []
    for cell, offset in (("A | env", 0.0), ("B | env", 10.0)):
        for seed in range(3):
            curve = np.cumsum(np.full(4, 1.0 + seed + offset))
            record = TrialRecord(trial_id=f"{cell[0]}{seed:019d}", sweep="cells", algorithm="random", label=cell[0],
                                 environment="env", seed=seed, horizon=4, params={}, environment_config={},
                                 log_every=2, group=cell, status=FINISHED, attempts=1, final_regret=float(curve[-1]),
                                 wall_seconds=0.1, seconds_per_round=0.025)
            arrays = {"arm": np.zeros(4, dtype=np.int64), "reward": np.zeros(4), "regret": np.diff(curve, prepend=0.0),
                      "cum_regret": curve, "seconds": np.full(4, 0.025)}
            outcomes.append(TrialOutcome(record, arrays))
    store.write_outcomes(outcomes)
    uri = f"sqlite:///{tmp_path}/m.db"
    context = SinkContext("cells", str(tmp_path / "results"), sink_options=MLflowOptions(uri, "cells").sink_options())
    sink = MLflowSink(context)
    sink.open(store.journal(), [])
    sink.trials_ended([(o.record, [(2, 1.0), (4, 2.0)]) for o in outcomes])   # no run per trial
    sink.close("FINISHED", {})
    client = MlflowClient(uri)
    return types.SimpleNamespace(context=context, store=store, client=client,
                                 experiment=client.get_experiment_by_name("cells").experiment_id)


def test_cell_runs_hold_their_seeds_mean_and_band(cell_runs):
    """One run per cell with the seeds' mean final regret, its spread and the band of the curves,
    rebuilt from the Parquet record; no run per trial."""
    import numpy as np

    client, experiment = cell_runs.client, cell_runs.experiment
    assert search_all(client, experiment, "tags.kind = 'trial'") == []
    cells = {run.data.tags["group"]: run for run in search_all(client, experiment, "tags.kind = 'cell'")}
    assert sorted(cells) == ["A | env", "B | env"]
    for group, offset in (("A | env", 0.0), ("B | env", 10.0)):
        run = cells[group]
        finals = np.array([4 * (1.0 + seed + offset) for seed in range(3)])
        assert run.data.metrics["final_regret_mean"] == finals.mean()
        assert abs(run.data.metrics["final_regret_std"] - finals.std()) < 1e-12
        assert run.data.metrics["seeds"] == 3 and run.data.tags["seeds"] == "0,1,2" and run.info.status == "FINISHED"
        means = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, regret_metric(run.data.params["environment"], "cum_regret_mean"))]
        assert means == [(2, 2 * (2.0 + offset)), (4, 4 * (2.0 + offset))]
        upper = {m.step: m.value for m in client.get_metric_history(run.info.run_id, regret_metric(run.data.params["environment"], "cum_regret_upper"))}
        assert abs(upper[4] - (finals.mean() + finals.std())) < 1e-12


def test_the_experiment_opens_on_its_runs_not_on_genai_traces(cell_runs):
    """MLflow 3's UI opens the experiment on its runs ("Model training"), not on GenAI traces."""
    tags = cell_runs.client.get_experiment(cell_runs.experiment).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_second_runs_end_replaces_the_cell_runs_never_adds_to_them(cell_runs):
    again = MLflowSink(cell_runs.context)
    again.open(cell_runs.store.journal(), [])
    again.close("FINISHED", {})
    assert len(search_all(cell_runs.client, cell_runs.experiment, "tags.kind = 'cell'")) == 2


def test_a_long_trials_curve_grows_in_mlflow_while_it_runs(tmp_path, monkeypatch, plugins, shared_ray):
    """T = 2000, log_every 100: the trial's MLflow run gets its regret points while it runs, not
    only when it ends."""
    import threading

    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "streamed", "horizon": 2000, "seeds": 1, "log_every": 100,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "slow_random", "params": {"pause": 0.005}}]}
    (tmp_path / "streamed.yaml").write_text(yaml.safe_dump(spec))
    codes = []
    runner = threading.Thread(target=lambda: codes.append(main(["run", "streamed.yaml", "--no-progress"])))
    runner.start()
    client, seen = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db"), []
    deadline = time.time() + 240
    while runner.is_alive() and time.time() < deadline and not seen:
        time.sleep(0.5)
        experiment = client.get_experiment_by_name("streamed") if (tmp_path / "mlflow.db").exists() else None
        if experiment is None:
            continue
        for run in search_all(client, experiment.experiment_id, "tags.kind = 'trial' and attributes.status = 'RUNNING'"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, regret_metric(run.data.params["environment"]))]
            if steps and max(steps) < 2000:
                seen.append(steps)
    runner.join(300)
    assert codes == [0]
    assert seen and all(step % 100 == 0 for step in seen[0]), seen


def test_without_a_terminal_progress_is_a_plain_line_every_interval(tmp_path, monkeypatch, plugins, shared_ray, capsys):
    """Piped to a log, `run` prints a progress line every LOG_LINE_SECONDS even while no trial ends."""
    from banditsweep.sweeps.cli.commands import progress

    monkeypatch.setattr(progress, "LOG_LINE_SECONDS", 1.0)
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "logged", "horizon": 400, "seeds": 2, "log_every": 100,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "slow_random", "params": {"pause": 0.01}}],
            "resources": {"batch_trials": 1}}
    (tmp_path / "logged.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "logged.yaml", "--sink", "none", "--max-workers", "1"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("logged: ")]
    assert len(lines) >= 3, lines
    assert lines[0].startswith("logged: 0/2 trials (0 done, 0 failed)") and "elapsed" in lines[0]
    assert any("1/2 trials (1 done, 0 failed)" in line and "left" in line for line in lines), lines
