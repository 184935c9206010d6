"""A sweep submitted to an existing multi-node Ray cluster (`--address`): trial actors spread over
the worker nodes, the sink stays on the driver's node, and the cluster is left running."""

import shutil
import subprocess
import sys
import tempfile

import pandas as pd
import pytest
import ray
import yaml
from ray.cluster_utils import Cluster



@pytest.fixture
def cluster(monkeypatch):
    """A head without CPUs and two one-CPU nodes on loopback, under a private RAY_TMPDIR (a driver
    finds its node's session there), ended by its own handle."""
    ray.shutdown()   # this test's driver connects to its own cluster, not to the tests' shared Ray
    private = tempfile.mkdtemp(prefix="bs-ray-")
    monkeypatch.setenv("RAY_TMPDIR", private)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")   # tests/clusters/test_sharded_cluster.py says why
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(private, ignore_errors=True)


@pytest.mark.slow  # starts a three-node cluster: about a minute
def test_run_on_an_existing_cluster(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "onc", "horizon": 400, "seeds": 6,
            "environments": [{"kind": "synthetic", "function": "h2", "dim": 4}],
            "algorithms": [{"name": "linucb"}, {"name": "lints"}]}
    (tmp_path / "onc.yaml").write_text(yaml.safe_dump(spec))
    # The driver is a process of its own, as a user's `banditsweep run --address` is (a driver in the
    # process that also started the cluster's nodes has its actors cancelled by Ray 2.60's GCS).
    done = subprocess.run([sys.executable, "-m", "banditsweep", "run", "onc.yaml", "--address", cluster.address,
                           "--no-progress", "--mlflow-uri", f"sqlite:///{tmp_path}/mlflow.db",
                           "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "12 finished, 0 failed" in out and "on 2 CPU worker(s)" in out  # one actor per worker-node CPU
    trials = pd.read_parquet("results/onc/trials")
    assert len(trials) == 12 and (trials["status"] == "finished").all()
    # The driver only disconnected: the cluster still runs and accepts another driver.
    ray.init(address=cluster.address)
    assert ray.cluster_resources()["CPU"] == 2
