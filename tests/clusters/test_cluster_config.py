"""cluster.yaml is a valid Ray cluster-launcher config (checked by Ray's own validation)."""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml
from paths import REPO
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER_YAML = REPO / "cluster.yaml"


def launcher_check(config: dict) -> dict:
    """What `ray up` does before touching the cloud: fill in the provider defaults, merge the setup
    commands, then validate against Ray's schema and consistency rules."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_cluster_yaml_passes_ray_validation(config):
    prepared = launcher_check(config)
    assert prepared["provider"]["type"] == "aws"
    assert prepared["head_node_type"] in prepared["available_node_types"]


def test_head_runs_ray_and_mlflow(config):
    start = "\n".join(config["head_start_ray_commands"])
    assert "ray start --head" in start
    assert "mlflow server" in start and "--host 127.0.0.1" in start
    assert "sqlite:///" in start


def test_workers_have_gpus_and_the_project(config):
    prepared = launcher_check(config)
    workers = {name: node for name, node in prepared["available_node_types"].items()
               if name != prepared["head_node_type"]}
    assert workers and all(node["resources"].get("GPU", 0) >= 1 for node in workers.values())
    assert prepared["file_mounts"] == {"~/banditsweep": "."}
    assert any("pip install" in c and "$HOME/banditsweep" in c for c in prepared["worker_setup_commands"])
    assert any("torch" in c for c in prepared["worker_setup_commands"])
    assert any("ray start --address" in c for c in prepared["worker_start_ray_commands"])


@pytest.mark.parametrize("break_it, error, message", [
    (lambda c: c.update(max_wokers=4), jsonschema.ValidationError, "'max_wokers' was unexpected"),
    (lambda c: c["available_node_types"]["gpu_g5"].update(resources={"GPU": "one"}),
     jsonschema.ValidationError, "'one' is not of type 'integer'"),
    (lambda c: c["available_node_types"]["gpu_g5"].pop("node_config"),
     jsonschema.ValidationError, "'node_config' is a required property"),
    (lambda c: c.update(head_node_type="cpu_head"), ValueError, "head_node_type"),
    (lambda c: c["available_node_types"]["gpu_g5"].update(min_workers=20), ValueError, "max_workers"),
])
def test_broken_copies_are_rejected(config, break_it, error, message):
    broken = copy.deepcopy(config)
    break_it(broken)
    with pytest.raises(error, match=message):
        launcher_check(broken)


CLUSTER_LOCAL_YAML = CLUSTER_YAML.parent / "cluster-local.yaml"


def test_cluster_local_yaml_passes_ray_validation_and_shares_the_commands(config):
    local = yaml.safe_load(CLUSTER_LOCAL_YAML.read_text())
    prepared = launcher_check(local)
    assert prepared["provider"]["type"] == "local" and prepared["file_mounts"] == {"~/banditsweep": "."}
    for commands in ("setup_commands", "head_start_ray_commands", "worker_start_ray_commands"):
        assert local[commands] == config[commands], commands
    # The head's setup is cluster.yaml's but for boto3 (the AWS autoscaler's client).
    assert local["head_setup_commands"] == [c for c in config["head_setup_commands"] if "boto3" not in c]
    assert local["cluster_synced_files"] == config["cluster_synced_files"]


def test_no_command_ends_every_ray_on_a_machine(config):
    """`ray stop` ends every Ray process of the machine; the start commands end only their own."""
    for commands in ("setup_commands", "head_setup_commands", "head_start_ray_commands", "worker_start_ray_commands"):
        assert not [c for c in config[commands] if "ray stop" in c], commands
    start = "\n".join(config["head_start_ray_commands"])
    assert "setsid ray start --head --block" in start and "kill -- -$g" in start


def test_the_slurm_template_keeps_the_mlflow_login_from_ray():
    """The MLflow login reaches the run's mirror only (the run hands it over): the template starts Ray's
    head and its other nodes without MLFLOW_TRACKING_* in their environment, so no raylet, worker or
    trial holds it (docs/reliability.md, "Credentials")."""
    template = (CLUSTER_YAML.parent / "cluster-slurm.sbatch").read_text()
    head = next(line for line in template.splitlines() if " start --head" in line and not line.startswith("#"))
    assert head.startswith('setsid "${NO_LOGIN[@]}" ')
    assert "NO_LOGIN=(env -u MLFLOW_TRACKING_USERNAME -u MLFLOW_TRACKING_PASSWORD -u MLFLOW_TRACKING_TOKEN)" in template
    workers = template[template.index("--export=ALL bash -c '"):]
    assert workers.splitlines()[1].strip() == "unset MLFLOW_TRACKING_USERNAME MLFLOW_TRACKING_PASSWORD MLFLOW_TRACKING_TOKEN"
    assert workers.index("unset MLFLOW_TRACKING_") < workers.index(" start \\")
