"""A sweep on a cluster whose GPU nodes come later, two results folders on one MLflow store, and
the default results root."""

import os
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient
from module_results import command, results_folder

from banditsweep.sweeps.cli.main import main

SPEC = {"sweep": "twin", "horizon": 20, "seeds": 2,
        "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
        "algorithms": [{"name": "linucb"}, {"name": "random"}]}


def _trial_runs(client, sweep):
    experiment = client.get_experiment_by_name(sweep)
    return client.search_runs([experiment.experiment_id], "tags.kind = 'trial'")


@pytest.fixture(scope="module")
def twins(tmp_path_factory, shared_ray_session):
    """SPEC run into two results folders (first, second) on one MLflow store, then into the first
    again, once for the module's two tests below: the folder and the store's URI."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("twins")
    uri = f"sqlite:///{folder}/shared.db"
    with results_folder(folder):
        (folder / "twin.yaml").write_text(yaml.safe_dump(SPEC))
        for results in ("first", "second", "first"):
            code, _, err = command("run", "twin.yaml", "--results", results, "--mlflow-uri", uri, "--no-progress")
            assert code == 0, err
    return folder, uri


def test_two_results_folders_on_one_mlflow_store_keep_their_own_runs(twins):
    """Running the first again reconciles it: the second's runs stay, nothing is rebuilt or deleted."""
    _, uri = twins
    runs = _trial_runs(MlflowClient(uri), "twin")
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    by_store = pd.Series([r.data.tags["store"] for r in runs]).value_counts()
    assert sorted(by_store) == [4, 4]


def test_the_report_attaches_to_the_parent_run_of_the_results_it_read(twins, monkeypatch, capsys):
    folder, uri = twins
    monkeypatch.chdir(folder)
    assert main(["report", "twin.yaml", "--results", "second", "--mlflow-uri", uri]) == 0
    out = capsys.readouterr().out
    run_id = out.rsplit("logged to MLflow run ", 1)[1].split()[0]
    client = MlflowClient(uri)
    parent = client.get_run(run_id)
    assert parent.data.tags["results_root"] == str(folder / "second")
    assert client.list_artifacts(run_id, "report")


def test_results_go_to_one_absolute_default(tmp_path, monkeypatch, shared_ray, capsys):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("BANDITSWEEP_RESULTS")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    work = tmp_path / "job_working_dir"   # e.g. the copy a Ray job runs in
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "twin.yaml").write_text(yaml.safe_dump(SPEC))
    assert main(["run", "twin.yaml", "--no-progress"]) == 0
    root = home / "banditsweep-results"
    assert f"results: {root / 'twin'}" in capsys.readouterr().out
    assert len(pd.read_parquet(root / "twin" / "trials")) == 4
    assert (root / "mlflow.db").is_file()
    assert not [p for p in work.iterdir() if p.name != "twin.yaml"]


@pytest.fixture
def gpu_less_cluster(tmp_path, monkeypatch):
    """A head with one CPU and no GPU, on loopback, under a private RAY_TMPDIR (short: Ray's socket
    paths must fit), ended by its own handle."""
    import shutil
    import tempfile

    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()   # not the tests' shared Ray: this test's driver is a process of its own
    private = tempfile.mkdtemp(prefix="bs-ray-")
    monkeypatch.setenv("RAY_TMPDIR", private)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")   # tests/clusters/test_sharded_cluster.py says why
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    yield cluster
    cluster.shutdown()
    shutil.rmtree(private, ignore_errors=True)


def test_gpu_trials_wait_for_gpu_nodes_and_run_there_when_they_join(gpu_less_cluster, tmp_path):
    spec = {**SPEC, "sweep": "gpu", "resources": {"gpus_per_trial": 1}}
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(spec))
    driver = subprocess.Popen(
        [sys.executable, "-m", "banditsweep", "run", "gpu.yaml", "--address", gpu_less_cluster.address,
         "--no-progress"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "BANDITSWEEP_RESULTS": str(tmp_path / "results")})
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = driver.stdout.readline()
        lines.append(line)
        if "waiting for 1 GPU actor" in line:
            break
    assert "waiting for 1 GPU actor" in lines[-1], "".join(lines)
    time.sleep(2)
    assert not (tmp_path / "results" / "gpu" / "trials").exists()   # nothing ran on the head's CPU
    node = gpu_less_cluster.add_node(num_cpus=1, num_gpus=1)
    output, _ = driver.communicate(timeout=180)
    assert driver.returncode == 0, "".join(lines) + output
    trials = pd.read_parquet(tmp_path / "results" / "gpu" / "trials")
    assert len(trials) == 4 and (trials["status"] == "finished").all()
    assert set(trials["node"]) == {node.node_ip_address}
    # The node's GPU is one torch cannot see here: the trials ran on its CPU, and the run said so.
    assert set(trials["device"]) == {"cpu"} and "torch sees no CUDA device" in output
