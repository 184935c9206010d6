"""A sweep through the CLI on an embedded local Ray with 2 workers, streaming to MLflow and Parquet.
The sweeps that several tests read (``e2e``, ``faults``) run once for the module, with the runs,
status and report that follow them; each test checks one thing one of those steps did."""

import json
import re
import types

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient
from module_results import command, results_folder

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


@pytest.fixture(scope="module")
def e2e(tmp_path_factory, shared_ray_session):
    """SPEC run once for the module's tests below, then again (nothing to run), grown by a seed, its
    status, its report, and its report again after display names were given in the spec. What each
    step printed and what the store and MLflow held right after it is kept, for the test of that step."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("e2e")
    seen = types.SimpleNamespace(folder=folder)
    with results_folder(folder):
        (folder / "e2e.yaml").write_text(yaml.safe_dump(SPEC))
        seen.first = command("run", "e2e.yaml", "--max-workers", "2", "--no-progress")
        seen.trials = pd.read_parquet("results/e2e/trials")
        seen.curves = pd.read_parquet("results/e2e/curves")
        client = MlflowClient(f"sqlite:///{folder}/mlflow.db")  # absolute: MLflow caches stores per URI
        seen.children, seen.parents = _child_runs(client)
        seen.linucb = next(r for r in seen.children if r.data.params["algorithm"] == "linucb")
        seen.linucb_history = client.get_metric_history(seen.linucb.info.run_id,
                                                        regret_metric(seen.linucb.data.params["environment"]))
        seen.parent_artifacts = [a.path for a in client.list_artifacts(seen.parents[0].info.run_id)]
        seen.experiment_tags = client.get_experiment_by_name("e2e").tags

        seen.again = command("run", "e2e.yaml", "--no-progress")
        seen.trials_again = pd.read_parquet("results/e2e/trials")
        seen.curves_again = pd.read_parquet("results/e2e/curves")
        seen.children_again, seen.parents_again = _child_runs(client)

        seen.grown = command("run", "e2e.yaml", "--set", "seeds=3", "--no-progress")
        seen.trials_grown = pd.read_parquet("results/e2e/trials")
        seen.children_grown, _ = _child_runs(client)
        seen.run_notes = [json.loads(p.read_text()) for p in sorted((folder / "results" / "e2e" / ".runs").iterdir())]

        seen.status = command("status", "e2e.yaml")

        seen.report = command("report", "e2e.yaml")
        report = folder / "results" / "e2e" / "report"
        seen.report_sizes = {p.name: p.stat().st_size for p in report.iterdir()}
        seen.report_mean = pd.read_csv(report / "final_regret_mean.csv", index_col=0)
        seen.report_artifacts = client.list_artifacts(_child_runs(client)[1][0].info.run_id, "report")

        renamed = {**SPEC, "environments": [{**SPEC["environments"][0], "label": "quadratic"}, SPEC["environments"][1]],
                   "algorithms": [{**SPEC["algorithms"][0], "label": "LinUCB"}, SPEC["algorithms"][1]]}
        (folder / "e2e.yaml").write_text(yaml.safe_dump(renamed))
        seen.renamed = command("report", "e2e.yaml")
        seen.renamed_mean = pd.read_csv(report / "final_regret_mean.csv", index_col=0)
        seen.renamed_pngs = sorted(p.name for p in report.glob("*.png"))
    return seen


def test_a_run_finishes_every_trial_on_at_most_the_workers_asked_for(e2e):
    code, out, _ = e2e.first
    assert code == 0
    assert f"{TRIALS} finished, 0 failed" in out
    assert re.search(r"on [12] CPU worker\(s\)", out)   # --max-workers 2: at most two at once


def test_the_parquet_tables_hold_every_trial_and_its_whole_curve(e2e):
    trials, curves = e2e.trials, e2e.curves
    assert len(trials) == TRIALS and trials["trial_id"].is_unique
    assert (trials["status"] == "finished").all()
    assert len(curves) == TRIALS * HORIZON
    assert set(curves.groupby("trial_id")["t"].max()) == {HORIZON}
    assert {"trial_id", "sweep", "algorithm", "environment", "seed", "horizon", "status", "final_regret",
            "wall_seconds", "seconds_per_round", "error", "params", "nu", "lam"} <= set(trials.columns)
    last = curves[curves["t"] == HORIZON].set_index("trial_id")["cum_regret"]
    pd.testing.assert_series_equal(trials.set_index("trial_id")["final_regret"], last.loc[trials["trial_id"]],
                                   check_names=False)


def test_mlflow_holds_a_parent_run_with_the_runs_settings_and_a_child_run_per_trial(e2e):
    children, parents = e2e.children, e2e.parents
    assert len(parents) == 1
    assert len(children) == TRIALS
    # The parent run holds what the run was asked to do.
    settings = parents[0].data.params
    assert settings["horizon"] == str(HORIZON) and settings["trials"] == str(TRIALS)
    assert json.loads(settings["seeds"]) == [0, 1] and settings["mlflow_runs"] == "trials"
    assert json.loads(settings["environments"]) == ["synthetic:h1,dim=5", "synthetic:h3,dim=5"]
    assert {r.data.tags["trial_id"] for r in children} == set(e2e.trials["trial_id"])
    assert all(r.info.status == "FINISHED" for r in children)
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in children)


def test_a_trial_run_holds_its_parameters_its_curve_and_the_code_it_ran_on(e2e):
    linucb = e2e.linucb
    assert {"algorithm", "environment", "seed", "horizon", "nu", "lam"} <= set(linucb.data.params)
    assert [m.step for m in e2e.linucb_history] == [20, 40, 60]
    row = e2e.trials.set_index("trial_id").loc[linucb.data.tags["trial_id"]]
    assert linucb.data.metrics["final_regret"] == pytest.approx(row["final_regret"])
    # The code it ran on and where, as in the Parquet record (workers.provenance.code_identity).
    assert linucb.data.tags["code_digest"] == row["code_digest"]
    assert linucb.data.tags["code.core/baselines/linear.py"] == json.loads(row["code"])["core/baselines/linear.py"]
    assert linucb.data.tags["runtime.cpu"] == row["runtime_cpu"] and "runtime.numpy" in linucb.data.tags


def test_trial_runs_are_named_by_grid_point_grouped_by_cell_and_charted_per_environment(e2e):
    """Runs name their grid point; the seeds of one cell share a group; single values are parameters,
    so the chart view holds the curves (cum_regret/<environment>, final_regret, seconds_per_round) only:
    one regret key per environment, so no chart mixes the regrets of two problems."""
    children, linucb = e2e.children, e2e.linucb
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


def test_the_parent_run_holds_the_spec_and_the_best_final_regret_per_environment(e2e):
    parent, trials = e2e.parents[0], e2e.trials
    assert parent.data.tags["spec"] == "e2e.yaml" and "mlflow.source.git.commit" in parent.data.tags
    assert parent.data.metrics["best_final_regret.synthetic:h1_dim_5"] == pytest.approx(
        trials[trials["environment"] == "synthetic:h1,dim=5"].groupby(["algorithm", "nu"], dropna=False)
        ["final_regret"].mean().min())
    assert e2e.parent_artifacts == ["spec"]
    assert e2e.experiment_tags["mlflow.note.content"].startswith("Sweep e2e")


def test_a_second_run_finds_every_trial_done_and_adds_nothing(e2e):
    """Zero trials run, zero rows or runs added."""
    code, out, _ = e2e.again
    assert code == 0
    assert f"{TRIALS} finished, 0 failed, 0 to run" in out
    assert len(e2e.trials_again) == TRIALS
    assert len(e2e.curves_again) == TRIALS * HORIZON
    assert len(e2e.children_again) == TRIALS and len(e2e.parents_again) == 1


def test_growing_the_sweep_by_a_seed_runs_only_the_new_trials(e2e):
    code, out, _ = e2e.grown
    assert code == 0
    assert f"{TRIALS * 3 // 2} trials, {TRIALS} finished, 0 failed, {TRIALS // 2} to run" in out
    assert len(e2e.trials_grown) == TRIALS * 3 // 2
    assert len(e2e.children_grown) == TRIALS * 3 // 2


def test_each_run_that_ran_trials_notes_its_set_in_the_store(e2e):
    """What `status` and `report` without the --set of a run read to find its trials
    (tests/workers/storage/test_status_watch.py checks them on notes written directly); the second
    run, with nothing to run, notes nothing."""
    assert [(note["overrides"], note["trials"]) for note in e2e.run_notes] == [([], TRIALS),
                                                                                (["seeds=3"], TRIALS * 3 // 2)]


def test_status_counts_the_specs_trials(e2e):
    code, out, _ = e2e.status
    assert code == 0
    assert f"{TRIALS} trials: {TRIALS} done, 0 failed, 0 pending" in out


def test_the_report_writes_its_tables_and_a_figure_per_environment(e2e):
    assert e2e.report[0] == 0
    sizes = e2e.report_sizes
    for name in ("final_regret_mean", "final_regret_std", "seconds_per_round"):
        for suffix in ("md", "csv", "tex"):
            assert sizes[f"{name}.{suffix}"] > 0
    pngs = sorted(name for name in sizes if name.endswith(".png"))
    # One figure per environment, and the performance profile across the two.
    assert pngs == ["performance_profile.png", "regret_synthetic_h1_dim_5.png", "regret_synthetic_h3_dim_5.png"]
    assert list(e2e.report_mean.index) == ["linucb", "random"]
    # All environments share one kind, so the table names them without it, as the papers do.
    assert list(e2e.report_mean.columns) == ["h1,dim=5", "h3,dim=5"]


def test_the_report_shows_each_algorithms_best_grid_point(e2e):
    """The tuning rule: the best grid point's mean over seeds."""
    trials = e2e.trials
    first_two = trials[trials["seed"] < 2]
    env = "synthetic:h1,dim=5"
    best = first_two[(first_two["algorithm"] == "linucb") & (first_two["environment"] == env)].groupby("nu")["final_regret"].mean().min()
    assert e2e.report_mean.loc["linucb", "h1,dim=5"] == pytest.approx(best)


def test_the_report_is_attached_to_the_sweeps_mlflow_run(e2e):
    assert len(e2e.report_artifacts) >= 11


def test_display_names_given_in_the_spec_rename_the_report_and_leave_no_stale_figures(e2e):
    """Display names are not part of a trial's identity: renaming in the spec renames in the report,
    with nothing run again, and the new report replaces the old one (no stale figures)."""
    assert e2e.renamed[0] == 0
    mean = e2e.renamed_mean
    assert list(mean.index) == ["LinUCB", "random"] and list(mean.columns) == ["quadratic", "synthetic:h3,dim=5"]
    assert e2e.renamed_pngs == ["performance_profile.png", "regret_quadratic.png", "regret_synthetic_h3_dim_5.png"]


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


@pytest.fixture(scope="module")
def faults(tmp_path_factory, shared_ray_session):
    """A sweep of a failing algorithm, one whose worker dies once and a healthy one, run once for the
    module's tests below, then run again plainly and with --retry-failed. What each run printed, the
    store and MLflow right after the first, and the crash markers that run added are kept."""
    shared = shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("faults")
    seen = types.SimpleNamespace()
    # The shared Ray's marker folder also holds other tests' markers: count the ones this sweep adds.
    earlier = set(shared.markers.iterdir())
    spec = {"sweep": "faults", "horizon": 20, "seeds": 2, "log_every": 5,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "always_raises"}, {"name": "crash_once"}, {"name": "random"}]}
    with results_folder(folder, plugins=True):
        (folder / "faults.yaml").write_text(yaml.safe_dump(spec))
        seen.first = command("run", "faults.yaml", "--max-workers", "2", "--no-progress")
        seen.markers = set(shared.markers.iterdir()) - earlier
        seen.trials = pd.read_parquet("results/faults/trials").set_index("algorithm")
        seen.curves = pd.read_parquet("results/faults/curves")
        client = MlflowClient(f"sqlite:///{folder}/mlflow.db")  # absolute: MLflow caches stores per URI
        experiment = client.get_experiment_by_name("faults")

        def statuses():
            runs = client.search_runs([experiment.experiment_id])
            return pd.Series([r.info.status for r in runs if r.data.tags.get("kind") == "trial"]).value_counts().to_dict()

        seen.statuses = statuses()

        seen.plain = command("run", "faults.yaml", "--no-progress")
        seen.retried = command("run", "faults.yaml", "--retry-failed", "--no-progress")
        seen.statuses_after = statuses()
        seen.trials_after = pd.read_parquet("results/faults/trials")
    return seen


def test_a_failing_trial_is_recorded_failed_with_its_error_and_traceback(faults):
    code, _, _ = faults.first
    assert code == 1
    trials = faults.trials
    assert len(trials) == 6
    raised = trials.loc["always_raises"]
    assert (raised["status"] == "failed").all()
    assert raised["error"].str.contains("ValueError: deliberate failure in round 3").all()
    assert raised["traceback"].str.contains("faulty_algorithms.py").all()
    assert (trials.loc["random"]["status"] == "finished").all()
    assert len(faults.curves) == 4 * 20


def test_a_trial_whose_worker_died_is_retried_and_finishes(faults):
    crashed = faults.trials.loc["crash_once"]
    assert (crashed["status"] == "finished").all() and (crashed["attempts"] == 2).all()
    assert len(faults.markers) == 2


def test_mlflow_runs_of_failed_trials_are_failed(faults):
    assert faults.statuses == {"FINISHED": 4, "FAILED": 2}


def test_failed_trials_are_skipped_by_a_plain_rerun_and_rerun_with_retry_failed(faults):
    """Still failing, and neither rerun adds a row or an MLflow run."""
    code, out, _ = faults.plain
    assert code == 1 and "0 to run" in out
    code, out, _ = faults.retried
    assert code == 1 and "2 to run" in out
    assert faults.statuses_after == {"FINISHED": 4, "FAILED": 2}
    assert len(faults.trials_after) == 6


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
