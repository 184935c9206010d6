"""Result sinks through the CLI: a plugin sink gets every trial exactly once, a sink the command line
names must be one, and a batch that raised and ran again one trial at a time logs each regret point
once."""

import json
import os

import pandas as pd
import yaml
from mlflow.tracking import MlflowClient

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.mirrors.mlflow.run_content import regret_metric


def _events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_plugin_sink_receives_every_trial_exactly_once(tmp_path, monkeypatch, plugins, shared_ray, capsys):
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "plug", "horizon": 30, "seeds": 3, "log_every": 10, "sinks": ["jsonl", "mlflow"],
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "linucb", "grid": {"nu": [0.1, 1.0]}}, {"name": "random"}]}
    (tmp_path / "plug.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "plug.yaml", "--max-workers", "2", "--no-progress"]) == 0
    assert "events in" in capsys.readouterr().out
    trials = pd.read_parquet("results/plug/trials").set_index("trial_id")
    events = _events(tmp_path / "results" / "plug.events.jsonl")
    ended = [e for e in events if e["event"] == "ended"]
    assert sorted(e["trial"] for e in ended) == sorted(trials.index) and len(ended) == 9
    for event in ended:
        assert event["final_regret"] == trials.loc[event["trial"], "final_regret"]
        assert [t for t, _ in event["curve"]] == [10, 20, 30]
    # The sink's preparation ran once, in a process of its own (neither this driver nor the mirror
    # actor that opened the sink); the events the sink then received came after it opened.
    prepared = [e for e in events if e["event"] == "prepare"]
    received = [e for e in events if e["event"] != "prepare"]
    assert len(prepared) == 1 and prepared[0]["pid"] not in (os.getpid(), received[0]["pid"])
    assert received[0]["event"] == "open" and received[0]["pid"] != os.getpid() and events[-1]["event"] == "close"
    assert events[-1]["status"] == "FINISHED"
    # The sinks work at the lowest CPU priority: only the CPU the trials leave idle.
    assert received[0]["niceness"] == 19
    # MLflow, the other sink of the spec, got them too.
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("plug").experiment_id], "tags.kind = 'trial'")
    assert len(runs) == 9

    # --sink on the command line replaces the spec's list; nothing left to run sends nothing more.
    assert main(["run", "plug.yaml", "--sink", "jsonl", "--no-progress"]) == 0
    again = _events(tmp_path / "results" / "plug.events.jsonl")
    assert len([e for e in again if e["event"] == "ended"]) == 9


def test_an_unknown_sink_or_none_beside_another_is_refused(tmp_path, monkeypatch, plugins, capsys):
    """Refused before anything runs (the jsonl sink is a test plugin's)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plug.yaml").write_text(yaml.safe_dump(
        {"sweep": "plug", "horizon": 30, "seeds": 3, "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
         "algorithms": [{"name": "random"}]}))
    assert main(["run", "plug.yaml", "--sink", "nope", "--no-progress"]) == 2
    assert "--sink: nope: unknown sink; allowed: jsonl, mlflow" in capsys.readouterr().err
    assert main(["run", "plug.yaml", "--sink", "none", "--sink", "mlflow", "--no-progress"]) == 2
    assert "--sink: none: means no sink, so it stands alone (got none, mlflow)" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_batch_that_raised_logs_each_regret_point_once(tmp_path, monkeypatch, plugins, shared_ray):
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "rerun", "horizon": 12, "seeds": 2, "log_every": 1,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "raises_in_batch", "grid": {"fail": [False, True]}}]}
    (tmp_path / "rerun.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "rerun.yaml", "--max-workers", "1", "--no-progress"]) == 1
    trials = pd.read_parquet("results/rerun/trials").set_index("trial_id")
    assert len(trials) == 4
    assert (trials.loc[trials["fail"], "status"] == "failed").all()
    assert trials.loc[trials["fail"], "error"].str.contains("deliberate failure of one trial").all()
    finished = trials[~trials["fail"]]
    assert (finished["status"] == "finished").all()
    # They ran in a batch of four first (that raised), then alone.
    assert all(json.loads(d)["batch_size"] == 1.0 for d in finished["diagnostics"])
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("rerun").experiment_id], "tags.kind = 'trial'")
    assert len(runs) == 4
    for run in runs:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, regret_metric(run.data.params["environment"]))]
        if run.data.tags["status"] == "finished":
            assert sorted(steps) == list(range(1, 13)), run.data.tags["trial_id"]
        else:
            assert len(steps) == len(set(steps)) and run.info.status == "FAILED"


def test_starts_that_reach_the_mirror_after_their_trials_ended_leave_one_finished_run_each(
        tmp_path, monkeypatch, plugins, shared_ray):
    """A real sweep whose every start reaches the mirror after the trial's end (the `late_starts`
    test plugin holds them back): still exactly one MLflow run per trial, FINISHED, none RUNNING or
    KILLED beside it, and the parent run FINISHED."""
    from banditsweep.workers.mirrors.mlflow.queries import search_all

    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "late_starts", "horizon": 20, "seeds": 3, "log_every": 10,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "linucb", "grid": {"nu": [0.1, 1.0]}}]}
    (tmp_path / "late.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "late.yaml", "--max-workers", "2", "--no-progress"]) == 0
    trials = pd.read_parquet("results/late_starts/trials").set_index("trial_id")
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("late_starts").experiment_id
    runs = {}
    for run in search_all(client, experiment, "tags.kind = 'trial'"):
        runs.setdefault(run.data.tags["trial_id"], []).append(run)
    assert sorted(runs) == sorted(trials.index) and len(runs) == 6
    for trial_id, trial_runs in runs.items():
        assert [run.info.status for run in trial_runs] == ["FINISHED"], trial_id
        assert trial_runs[0].data.metrics["final_regret"] == trials.loc[trial_id, "final_regret"]
    assert [run.info.status for run in search_all(client, experiment, "tags.kind = 'sweep'")] == ["FINISHED"]


def test_a_sinks_preparation_gets_a_context_past_the_limit_of_a_command_line(tmp_path, plugins):
    """The context (the spec's text, the run's settings) reaches the preparing process whole, also
    when it is larger than one command-line argument may be (128 KiB on Linux): a 10^5-trial sweep's
    settings are."""
    from banditsweep.workers.mirrors.prepare import finish_preparing, start_preparing
    from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
    from banditsweep.workers.mirrors.sinks import SinkContext

    context = SinkContext("big", str(tmp_path), sink_options=MLflowOptions(f"sqlite:///{tmp_path}/mlflow.db").sink_options(),
                          spec_text="# a long spec\n" * 40_000, settings={"seeds": json.dumps(list(range(50_000)))})
    finish_preparing(start_preparing(["jsonl"], context, {}))
    events = _events(tmp_path / "big.events.jsonl")
    assert [e["event"] for e in events] == ["prepare"]
