"""A sweep submitted to an existing multi-node Ray cluster (`--address`): trial actors spread over
the worker nodes, the sink stays on the driver's node, and the cluster is left running."""

import pandas as pd
import pytest
import ray
import yaml
from ray.cluster_utils import Cluster

from banditsweep.sweeps.cli import main


@pytest.fixture
def cluster():
    ray.shutdown()   # this test's driver connects to its own cluster, not to the tests' shared Ray
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow  # starts a three-node cluster: about a minute
def test_run_on_an_existing_cluster(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "onc", "horizon": 30, "seeds": 3,
            "environments": [{"kind": "synthetic", "function": "h2", "dim": 4}],
            "algorithms": [{"name": "linucb"}, {"name": "lints"}]}
    (tmp_path / "onc.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "onc.yaml", "--address", cluster.address, "--no-progress",
                 "--mlflow-uri", f"sqlite:///{tmp_path}/mlflow.db"]) == 0
    out = capsys.readouterr().out
    assert "6 finished, 0 failed" in out and "on 2 CPU worker(s)" in out  # one actor per worker-node CPU
    trials = pd.read_parquet("results/onc/trials")
    assert len(trials) == 6 and (trials["status"] == "finished").all()
    # The driver only disconnected: the cluster still runs and accepts another driver.
    ray.init(address=cluster.address)
    assert ray.cluster_resources()["CPU"] == 2
