"""GPU demand reaching an autoscaler: a head without GPUs whose autoscaler (Ray's fake multi-node
provider, which starts its "nodes" as Ray nodes on this machine) has a GPU node type at
``min_workers: 0``. A sweep with ``gpus_per_trial: 1`` makes it launch GPU nodes, the trials run
there, and once the sweep is done the idle nodes are given back.

The head is started as ``ray.cluster_utils.AutoscalingCluster`` starts it (RAY_FAKE_CLUSTER=1,
``ray start --head --autoscaling-config=...``) but by tests/local_ray.py: private temp dir, free
ports, ended by its own process session, never ``ray stop``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml
from local_ray import LocalHead

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

FAKE_HEAD_NODE_ID = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000"


def fake_provider_config(gcs_address: str) -> dict:
    """The fake multi-node provider's cluster config (its example.yaml, with our node types)."""
    return {
        "cluster_name": "banditsweep_fake",
        "max_workers": 2,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": gcs_address},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1, "GPU": 0}, "node_config": {}, "max_workers": 0},
            # As cluster.yaml's GPU nodes: none until a sweep asks for GPUs.
            "gpu_node": {"resources": {"CPU": 1, "GPU": 1, "object_store_memory": 200 * 1024 ** 2},
                         "node_config": {}, "min_workers": 0, "max_workers": 2},
        },
        "head_node_type": "ray.head.default",
        "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": 0.1, "docker": {},
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [],
    }


@pytest.fixture
def autoscaling_head():
    head = LocalHead(num_cpus=1, env={"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"})
    config = head.base / "autoscaling.yaml"
    config.write_text(yaml.safe_dump(fake_provider_config(head.address)))
    head.extra_args = [f"--autoscaling-config={config}"]
    try:
        yield head.start()
    finally:
        head.cleanup()


def gpu_nodes(head: LocalHead) -> list[str]:
    """The ids of the alive nodes with a GPU, as the cluster reports them."""
    listed = head.run(sys.executable, "-c", (
        "import json, ray; ray.init(address='%s', logging_level='ERROR', log_to_driver=False); "
        "print('gpu nodes:', json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive'] and n['Resources'].get('GPU')]))"
    ) % head.address, env={"RAY_AUTH_MODE": "token"})
    assert listed.returncode == 0, listed.stderr
    return json.loads(next(line for line in listed.stdout.splitlines() if line.startswith("gpu nodes:"))[10:])


def test_gpu_demand_makes_the_autoscaler_launch_gpu_nodes(autoscaling_head, tmp_path):
    head = autoscaling_head
    assert gpu_nodes(head) == []   # min_workers: 0: the cluster starts without GPUs
    spec = {"sweep": "scaled", "horizon": 30, "seeds": 4,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "linucb"}, {"name": "random"}],
            "resources": {"gpus_per_trial": 1, "cpus_per_trial": 1}}
    (tmp_path / "scaled.yaml").write_text(yaml.safe_dump(spec))
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "banditsweep", "run", "scaled.yaml", "--address", head.address,
                           "--results", str(tmp_path / "results"), "--sink", "none", "--no-progress"],
                          cwd=tmp_path, env=head.env, capture_output=True, text=True, timeout=400,
                          start_new_session=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # The run began on a cluster of the head alone (no GPU) and ran all its trials.
    assert f"Ray: cluster at {head.address}: 1 node(s), 1 CPU\n" in output and "8 finished, 0 failed" in output
    trials = pd.read_parquet(tmp_path / "results" / "scaled" / "trials")
    assert len(trials) == 8 and (trials["status"] == "finished").all()
    # Every trial ran on a node the autoscaler launched (the fake provider's ids), none on the head.
    launched = set(trials["node_id"])
    assert launched and all(n.startswith("fffff") and n != FAKE_HEAD_NODE_ID for n in launched), launched
    assert len(launched) <= 2
    print(f"sweep with autoscaling: {time.time() - started:.1f} s on {len(launched)} launched GPU node(s)")
    # The pool released its actors and its resource request: the idle GPU nodes go (idle timeout 6 s).
    deadline = time.time() + 120
    while gpu_nodes(head) and time.time() < deadline:
        time.sleep(3)
    assert gpu_nodes(head) == []
