"""Sharded trials through `banditsweep run`: on the embedded Ray, and on a local multi-node cluster
where the shards spread one per node and a node lost mid-trial costs only the rounds since the last
checkpoint."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import pytest
import yaml

from banditsweep.core.kernel.sharded.coordinator import run_sharded
from banditsweep.core.kernel.sharded.partition import shard_ranges
from banditsweep.core.kernel.sharded.protocol import LocalShards
from banditsweep.core.kernel.sharded.shard import KernelShard, domain_shape
from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.spec.model import load_sweep

ENVIRONMENT = {"kind": "adversarial_kernel", "setting": 2, "candidates": 40, "centers": 8}


def _write(tmp_path, name, horizon, shards, algorithms, **extra):
    spec = {"sweep": name, "horizon": horizon, "seeds": 1,
            "environments": [{**ENVIRONMENT, "shards": shards}],
            "algorithms": [{"name": a} for a in algorithms], **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _reference(planned, shards=1):
    spec = planned.spec
    n, _ = domain_shape(spec)
    return run_sharded(spec, LocalShards([KernelShard(spec, a, b) for a, b in shard_ranges(n, shards)]))


def _trials(root, sweep):
    return pd.read_parquet(root / sweep / "trials").set_index("trial_id")


def test_a_sharded_sweep_runs_on_the_embedded_ray_with_the_local_answer(tmp_path, shared_ray, capsys):
    path = _write(tmp_path, "sharded", 20, 2, ["random", "rls_kernel_exp3"],
                  resources={"cpus_per_shard": 0.5}, checkpoint_every=5)
    root = tmp_path / "results"
    assert main(["run", str(path), "--results", str(root), "--no-progress"]) == 0
    trials = _trials(root, "sharded")
    sweep = load_sweep(path)
    assert len(trials) == 2 and (trials["status"] == "finished").all()
    for planned in sweep.trials:
        row = trials.loc[planned.trial_id]
        expected = _reference(planned)
        assert row["final_regret"] == pytest.approx(expected.final_regret, rel=1e-9)
        diagnostics = yaml.safe_load(row["diagnostics"])
        assert diagnostics["shards"] == 2 and diagnostics["shard_peak_rss_mb_max"] > 10
        curve = pd.read_parquet(root / "sharded" / "curves", filters=[("trial_id", "==", planned.trial_id)])
        np.testing.assert_allclose(curve.sort_values("t")["cum_regret"].to_numpy(), expected.cum_regret, rtol=1e-9)
    assert not any((root / "sharded" / ".checkpoints").iterdir())   # finished trials leave no state
    # The MLflow mirror has a run per sharded trial, like any trial's, with the shards recorded.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("sharded")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'trial'")
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.params["diag.shards"] for r in runs} == {"2.0"}
    assert all(r.data.metrics["final_regret"] == pytest.approx(trials.loc[r.data.tags["trial_id"], "final_regret"])
               for r in runs)
    assert main(["run", str(path), "--results", str(root), "--no-progress"]) == 0
    assert "0 to run" in capsys.readouterr().out


def test_too_many_shards_for_this_machine_is_a_clear_error(tmp_path, shared_ray, capsys):
    path = _write(tmp_path, "wide", 5, 8, ["random"])
    assert main(["run", str(path), "--results", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "asks for 8 shards of 1 CPU" in err and "cpus_per_shard" in err


@pytest.fixture(scope="module")
def three_node_cluster():
    """A head without CPUs and three one-CPU worker nodes, on loopback, under a private RAY_TMPDIR,
    ended by its own handle (shared by this module's tests: each leaves three worker nodes up)."""
    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()
    private = tempfile.mkdtemp(prefix="bs-ray-")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_TMPDIR", private)
        # ray.cluster_utils.Cluster starts its nodes without token authentication, while a driver that finds
        # a token at hand (~/.ray/auth_token) turns it on, and the two cannot talk (the driver's actors are
        # cancelled): these private loopback clusters run without tokens on both sides.
        patch.setenv("RAY_AUTH_MODE", "disabled")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        workers = [cluster.add_node(num_cpus=1) for _ in range(3)]
        cluster.wait_for_nodes()
        yield cluster, workers
        cluster.shutdown()
    shutil.rmtree(private, ignore_errors=True)


@pytest.mark.slow   # a local three-node cluster: about 2 minutes with the next test
def test_three_shards_land_one_per_worker_node(three_node_cluster, tmp_path):
    cluster, _ = three_node_cluster
    path = _write(tmp_path, "placed", 15, 3, ["random", "apg_exp3"])
    root = tmp_path / "results"
    result = subprocess.run(
        [sys.executable, "-m", "banditsweep", "run", str(path), "--address", cluster.address, "--results", str(root),
         "--no-progress"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = _trials(root, "placed")
    for planned in load_sweep(path).trials:
        diagnostics = yaml.safe_load(trials.loc[planned.trial_id, "diagnostics"])
        assert diagnostics["shard_nodes"] == 3 and diagnostics["shards"] == 3
        assert trials.loc[planned.trial_id, "final_regret"] == pytest.approx(_reference(planned).final_regret, rel=1e-9)


@pytest.mark.slow
def test_shards_spread_over_nodes_and_survive_a_lost_node(three_node_cluster, tmp_path):
    cluster, workers = three_node_cluster
    path = _write(tmp_path, "spread", 120, 3, ["rls_kernel_exp3"], checkpoint_every=10)
    root = tmp_path / "results"
    driver = subprocess.Popen(
        [sys.executable, "-m", "banditsweep", "run", str(path), "--address", cluster.address, "--results", str(root),
         "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    checkpoints = root / "spread" / ".checkpoints"
    deadline = time.time() + 240
    while time.time() < deadline and not list(checkpoints.glob("*.state")):
        assert driver.poll() is None, driver.stdout.read()
        time.sleep(0.2)
    saved = list(checkpoints.glob("*.state"))
    assert saved, "no checkpoint within the deadline"
    cluster.remove_node(workers[0])          # a preempted node: its shard dies with it
    cluster.add_node(num_cpus=1)             # and the autoscaler's replacement
    output, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, output
    assert "a shard actor died" in output
    [planned] = load_sweep(path).trials
    row = _trials(root, "spread").loc[planned.trial_id]
    diagnostics = yaml.safe_load(row["diagnostics"])
    assert diagnostics["resumed_from_round"] >= 11          # from the checkpoint, not from round 1
    assert row["attempts"] == 2
    expected = _reference(planned)
    assert row["final_regret"] == pytest.approx(expected.final_regret, rel=1e-9)
