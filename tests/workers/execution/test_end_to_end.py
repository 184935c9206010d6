"""A sweep through the CLI on an embedded local Ray with 2 workers, streaming to MLflow and Parquet."""

import json
import re

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.store import SweepStore
from banditsweep.workers.mirrors.mlflow.run_content import regret_metric

HORIZON = 60
SPEC = {
    "sweep": "e2e",
    "horizon": HORIZON,
    "seeds": 2,
    "environments": [{"kind": "synthetic", "function": "h1", "dim": 5}, {"kind": "synthetic", "function": "h3", "dim": 5}],
    "algorithms": [{"name": "linucb", "grid": {"nu": [0.1, 1.0]}}, {"name": "random"}],
    "log_every": 20,
}
TRIALS = 2 * (2 * 2 + 2)  # environments x (linucb grid x seeds + random seeds)


def _child_runs(client, sweep="e2e"):
    experiment = client.get_experiment_by_name(sweep)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("kind") == "trial"], [r for r in runs if r.data.tags.get("kind") == "sweep"]


def test_run_resume_report(tmp_path, monkeypatch, capsys, shared_ray):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e2e.yaml").write_text(yaml.safe_dump(SPEC))
    assert main(["run", "e2e.yaml", "--max-workers", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"{TRIALS} finished, 0 failed" in out
    assert re.search(r"on [12] CPU worker\(s\)", out)   # --max-workers 2: at most two at once

    trials = pd.read_parquet("results/e2e/trials")
    curves = pd.read_parquet("results/e2e/curves")
    assert len(trials) == TRIALS and trials["trial_id"].is_unique
    assert (trials["status"] == "finished").all()
    assert len(curves) == TRIALS * HORIZON
    assert set(curves.groupby("trial_id")["t"].max()) == {HORIZON}
    assert {"trial_id", "sweep", "algorithm", "environment", "seed", "horizon", "status", "final_regret",
            "wall_seconds", "seconds_per_round", "error", "params", "nu", "lam"} <= set(trials.columns)
    last = curves[curves["t"] == HORIZON].set_index("trial_id")["cum_regret"]
    pd.testing.assert_series_equal(trials.set_index("trial_id")["final_regret"], last.loc[trials["trial_id"]],
                                   check_names=False)

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")  # absolute: MLflow caches stores per URI
    children, parents = _child_runs(client)
    assert len(parents) == 1
    assert len(children) == TRIALS
    # The parent run holds what the run was asked to do.
    settings = parents[0].data.params
    assert settings["horizon"] == str(HORIZON) and settings["trials"] == str(TRIALS)
    assert json.loads(settings["seeds"]) == [0, 1] and settings["mlflow_runs"] == "trials"
    assert json.loads(settings["environments"]) == ["synthetic:h1,dim=5", "synthetic:h3,dim=5"]
    assert {r.data.tags["trial_id"] for r in children} == set(trials["trial_id"])
    assert all(r.info.status == "FINISHED" for r in children)
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in children)
    linucb = next(r for r in children if r.data.params["algorithm"] == "linucb")
    assert {"algorithm", "environment", "seed", "horizon", "nu", "lam"} <= set(linucb.data.params)
    history = client.get_metric_history(linucb.info.run_id, regret_metric(linucb.data.params["environment"]))
    assert [m.step for m in history] == [20, 40, 60]
    row = trials.set_index("trial_id").loc[linucb.data.tags["trial_id"]]
    assert linucb.data.metrics["final_regret"] == pytest.approx(row["final_regret"])
    # The code it ran on and where, as in the Parquet record (workers.provenance.code_identity).
    assert linucb.data.tags["code_digest"] == row["code_digest"]
    assert linucb.data.tags["code.core/baselines/linear.py"] == json.loads(row["code"])["core/baselines/linear.py"]
    assert linucb.data.tags["runtime.cpu"] == row["runtime_cpu"] and "runtime.numpy" in linucb.data.tags
    # Runs name their grid point; the seeds of one cell share a group; single values are parameters,
    # so the chart view holds the curves (cum_regret/<environment>, final_regret, seconds_per_round) only:
    # one regret key per environment, so no chart mixes the regrets of two problems.
    names = sorted(r.info.run_name for r in children if r.data.params["algorithm"] == "linucb")
    assert names[:2] == ["linucb nu=0.1 | synthetic:h1,dim=5 | seed 0", "linucb nu=0.1 | synthetic:h1,dim=5 | seed 1"]
    assert len(set(r.info.run_name for r in children)) == TRIALS
    groups = pd.Series([r.data.tags["group"] for r in children]).value_counts()
    assert len(groups) == 6 and set(groups) == {2}
    assert set(linucb.data.metrics) == {regret_metric(linucb.data.params["environment"]), "final_regret",
                                        "seconds_per_round"}
    assert {key for r in children for key in r.data.metrics if key.startswith("cum_regret")} == {
        "cum_regret/synthetic:h1_dim_5", "cum_regret/synthetic:h3_dim_5"}
    assert "wall_seconds" in linucb.data.params
    parent = parents[0]
    assert parent.data.tags["spec"] == "e2e.yaml" and "mlflow.source.git.commit" in parent.data.tags
    assert parent.data.metrics["best_final_regret.synthetic:h1_dim_5"] == pytest.approx(
        trials[trials["environment"] == "synthetic:h1,dim=5"].groupby(["algorithm", "nu"], dropna=False)
        ["final_regret"].mean().min())
    assert [a.path for a in client.list_artifacts(parent.info.run_id)] == ["spec"]
    assert client.get_experiment_by_name("e2e").tags["mlflow.note.content"].startswith("Sweep e2e")

    # A second run finds every trial done: zero trials run, zero rows or runs added.
    assert main(["run", "e2e.yaml", "--no-progress"]) == 0
    assert f"{TRIALS} finished, 0 failed, 0 to run" in capsys.readouterr().out
    assert len(pd.read_parquet("results/e2e/trials")) == TRIALS
    assert len(pd.read_parquet("results/e2e/curves")) == TRIALS * HORIZON
    children_again, parents_again = _child_runs(client)
    assert len(children_again) == TRIALS and len(parents_again) == 1

    # Growing the sweep by a seed runs only the new trials.
    assert main(["run", "e2e.yaml", "--set", "seeds=3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"{TRIALS * 3 // 2} trials, {TRIALS} finished, 0 failed, {TRIALS // 2} to run" in out
    assert len(pd.read_parquet("results/e2e/trials")) == TRIALS * 3 // 2
    children_grown, _ = _child_runs(client)
    assert len(children_grown) == TRIALS * 3 // 2

    assert main(["status", "e2e.yaml"]) == 0
    assert f"{TRIALS} trials: {TRIALS} done, 0 failed, 0 pending" in capsys.readouterr().out

    assert main(["report", "e2e.yaml"]) == 0
    report = tmp_path / "results" / "e2e" / "report"
    for name in ("final_regret_mean", "final_regret_std", "seconds_per_round"):
        for suffix in ("md", "csv", "tex"):
            assert (report / f"{name}.{suffix}").stat().st_size > 0
    pngs = sorted(p.name for p in report.glob("*.png"))
    # One figure per environment, and the performance profile across the two.
    assert pngs == ["performance_profile.png", "regret_synthetic_h1_dim_5.png", "regret_synthetic_h3_dim_5.png"]
    mean = pd.read_csv(report / "final_regret_mean.csv", index_col=0)
    assert list(mean.index) == ["linucb", "random"]
    # The tuning rule: the best grid point's mean over seeds.
    first_two = trials[trials["seed"] < 2]
    env = "synthetic:h1,dim=5"
    best = first_two[(first_two["algorithm"] == "linucb") & (first_two["environment"] == env)].groupby("nu")["final_regret"].mean().min()
    # All environments share one kind, so the table names them without it, as the papers do.
    assert list(mean.columns) == ["h1,dim=5", "h3,dim=5"]
    assert mean.loc["linucb", "h1,dim=5"] == pytest.approx(best)
    artifacts = client.list_artifacts(_child_runs(client)[1][0].info.run_id, "report")
    assert len(artifacts) >= 11

    # Display names are not part of a trial's identity: renaming in the spec renames in the report,
    # with nothing run again, and the new report replaces the old one (no stale figures).
    renamed = {**SPEC, "environments": [{**SPEC["environments"][0], "label": "quadratic"}, SPEC["environments"][1]],
               "algorithms": [{**SPEC["algorithms"][0], "label": "LinUCB"}, SPEC["algorithms"][1]]}
    (tmp_path / "e2e.yaml").write_text(yaml.safe_dump(renamed))
    assert main(["report", "e2e.yaml"]) == 0
    mean = pd.read_csv(report / "final_regret_mean.csv", index_col=0)
    assert list(mean.index) == ["LinUCB", "random"] and list(mean.columns) == ["quadratic", "synthetic:h3,dim=5"]
    assert sorted(p.name for p in report.glob("*.png")) == ["performance_profile.png", "regret_quadratic.png",
                                                            "regret_synthetic_h3_dim_5.png"]


def test_a_trial_that_kills_every_worker_fails_alone(tmp_path, monkeypatch, capsys, shared_ray, plugins):
    """A trial that kills its worker the moment it starts, queued among quick trials: the driver
    cannot always tell which of an actor's two calls was running, but once a trial's worker has died
    holding it, it runs alone; so the killer fails after its MAX_ATTEMPTS deaths and every other
    trial finishes, counted at most one death it did not cause."""
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "killer", "horizon": 10, "seeds": 3, "log_every": 5,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3},
                             {"kind": "synthetic", "function": "h1", "dim": 4}],
            "algorithms": [{"name": "random"}, {"name": "crash_always", "when": {"dim": 3}}]}
    (tmp_path / "killer.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "killer.yaml", "--max-workers", "2", "--no-progress", "--sink", "none"]) == 1
    trials = pd.read_parquet("results/killer/trials")
    assert len(trials) == 9 and trials["trial_id"].is_unique
    killers = trials[trials["algorithm"] == "crash_always"]
    assert (killers["status"] == "failed").all() and (killers["attempts"] == 3).all()
    assert killers["error"].str.startswith("worker died 3 times").all()
    others = trials[trials["algorithm"] == "random"]
    assert (others["status"] == "finished").all() and others["attempts"].between(1, 2).all()
    assert len(pd.read_parquet("results/killer/curves")) == 6 * 10


def test_failures_are_recorded_and_dead_workers_retried(tmp_path, monkeypatch, capsys, shared_ray, plugins):
    monkeypatch.chdir(tmp_path)
    markers = shared_ray.markers
    # The shared Ray's marker folder also holds other tests' markers: count the ones this sweep adds.
    earlier = set(markers.iterdir())
    spec = {"sweep": "faults", "horizon": 20, "seeds": 2, "log_every": 5,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "always_raises"}, {"name": "crash_once"}, {"name": "random"}]}
    (tmp_path / "faults.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "faults.yaml", "--max-workers", "2", "--no-progress"]) == 1
    trials = pd.read_parquet("results/faults/trials").set_index("algorithm")
    assert len(trials) == 6
    raised = trials.loc["always_raises"]
    assert (raised["status"] == "failed").all()
    assert raised["error"].str.contains("ValueError: deliberate failure in round 3").all()
    assert raised["traceback"].str.contains("faulty_algorithms.py").all()
    crashed = trials.loc["crash_once"]
    assert (crashed["status"] == "finished").all() and (crashed["attempts"] == 2).all()
    assert len(set(markers.iterdir()) - earlier) == 2
    assert (trials.loc["random"]["status"] == "finished").all()
    assert len(pd.read_parquet("results/faults/curves")) == 4 * 20

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")  # absolute: MLflow caches stores per URI
    experiment = client.get_experiment_by_name("faults")
    runs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("kind") == "trial"]
    by_status = pd.Series([r.info.status for r in runs]).value_counts().to_dict()
    assert by_status == {"FINISHED": 4, "FAILED": 2}
    capsys.readouterr()

    # Failed trials are skipped by a plain rerun and rerun with --retry-failed (still failing).
    assert main(["run", "faults.yaml", "--no-progress"]) == 1
    assert "0 to run" in capsys.readouterr().out
    assert main(["run", "faults.yaml", "--retry-failed", "--no-progress"]) == 1
    assert "2 to run" in capsys.readouterr().out
    runs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("kind") == "trial"]
    assert pd.Series([r.info.status for r in runs]).value_counts().to_dict() == {"FINISHED": 4, "FAILED": 2}
    assert len(pd.read_parquet("results/faults/trials")) == 6


def test_embedded_ray_listens_on_loopback_only(shared_ray):
    """The shared Ray of the tests is started as `run` starts an embedded one (RayConnection)."""
    import ray

    assert shared_ray.connection.started and shared_ray.connection.address is None
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")


def _start_a_long_sweep(folder, name: str, new_session: bool = False):
    """`banditsweep run` of 12 trials of a few seconds each as a subprocess, returned once 2 trials
    are durable, with the sweep's store."""
    import subprocess
    import sys
    import time

    spec = {"sweep": name, "horizon": 3000, "seeds": 6, "log_every": 500,
            "environments": [{"kind": "synthetic", "function": "h2", "dim": 30}],
            "algorithms": [{"name": "lints", "grid": {"nu": [0.1, 1.0]}}]}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    driver = subprocess.Popen([sys.executable, "-m", "banditsweep", "run", f"{name}.yaml", "--no-progress",
                               "--max-workers", "1"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=new_session)
    store = SweepStore.for_sweep(folder / "results", name)
    deadline = time.time() + 240
    while time.time() < deadline and len(store.journal()) < 2:
        time.sleep(0.1)
    return driver, store


def test_interrupted_sweep_is_completed_by_running_it_again(tmp_path, monkeypatch):
    """SIGTERM mid-sweep: exit 130, parent run KILLED, finished trials kept; the rerun completes the
    sweep with zero duplicate rows or runs."""
    import signal

    monkeypatch.chdir(tmp_path)
    driver, store = _start_a_long_sweep(tmp_path, "stop")
    driver.send_signal(signal.SIGTERM)
    output, _ = driver.communicate(timeout=120)
    assert driver.returncode == 130, output
    assert "run the same command again to resume" in output
    done_before = len(store.journal())
    assert 2 <= done_before < 12

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("stop")
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.kind = 'sweep'")
    assert [p.info.status for p in parents] == ["KILLED"]

    assert main(["run", "stop.yaml", "--no-progress"]) == 0
    trials = pd.read_parquet("results/stop/trials")
    assert len(trials) == 12 and trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    assert len(pd.read_parquet("results/stop/curves")) == 12 * 3000
    children, parents = _child_runs(client, "stop")
    assert len(children) == 12 and all(r.info.status == "FINISHED" for r in children)
    assert len({r.data.tags["trial_id"] for r in children}) == 12


def test_a_sigterm_to_the_whole_process_group_ends_the_run_promptly(tmp_path, monkeypatch):
    """A batch scheduler (or `kill -- -PGID`) signals the embedded Ray's processes with the driver.
    The driver must not wait on actors whose Ray is gone (Ray's failure detection takes ~90 s, past a
    scheduler's grace period): it ends within seconds (workers.execution.signals' deadline at the latest), exit
    130, finished trials kept; the rerun completes the sweep and its MLflow runs."""
    import os
    import signal
    import time

    from local_ray import end_session

    monkeypatch.chdir(tmp_path)
    driver, store = _start_a_long_sweep(tmp_path, "group", new_session=True)
    try:
        os.killpg(driver.pid, signal.SIGTERM)
        signalled = time.monotonic()
        output, _ = driver.communicate(timeout=150)
        took = time.monotonic() - signalled
    finally:
        end_session(driver)
    assert driver.returncode == 130, f"exit {driver.returncode} {took:.0f} s after the group's SIGTERM\n{output}"
    assert took < 45, f"the driver took {took:.0f} s to end after the group's SIGTERM\n{output}"
    assert "run the same command again to resume" in output
    done_before = len(store.journal())
    assert 2 <= done_before < 12

    assert main(["run", "group.yaml", "--no-progress"]) == 0
    trials = pd.read_parquet("results/group/trials")
    assert len(trials) == 12 and trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    children, _ = _child_runs(client, "group")
    assert len(children) == 12 and all(r.info.status == "FINISHED" for r in children)
