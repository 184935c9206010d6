"""A tracking server behind MLflow's basic-auth app (``mlflow server --app-name basic-auth``, started
here on loopback): a run without a login, or with a wrong one, is refused before anything starts or
is written (exit 2, one line saying what to set; the password never shown); with the login it mirrors
every trial, and the password is in no file the run writes and no MLflow tag or param."""

import os
from pathlib import Path

import pytest
import yaml

from banditsweep.sweeps.cli.main import main
from mlflow_server import TrackingServer

pytestmark = pytest.mark.slow   # a server started once and one sweep: about 40 s

PASSWORD = "s3cret-Pa55word-of-the-lab"
SPEC = {"sweep": "behind_login", "horizon": 20, "seeds": 2, "environments": [{"kind": "synthetic", "function": "h1"}],
        "algorithms": [{"name": "linucb", "label": "LinUCB"}, {"name": "random", "label": "Random"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("server")
    tracking = TrackingServer(folder, auth_password=PASSWORD)
    tracking.start()
    yield tracking
    tracking.stop()


def _run(tmp_path, server, capsys) -> tuple[int, str]:
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    code = main(["run", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--mlflow-uri",
                 server.uri, "--no-progress", "--max-workers", "1"])
    said = capsys.readouterr()
    return code, said.out + said.err


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))   # no ~/.mlflow/credentials of the machine's user
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def test_no_login_is_refused_before_anything_is_written(server, home, tmp_path, capsys):
    code, said = _run(tmp_path, server, capsys)
    assert code == 2 and "asks for a login; set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in said, said
    assert not (tmp_path / "results" / "behind_login").exists()


def test_a_wrong_password_is_refused_and_not_shown(server, home, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "not-" + PASSWORD)
    code, said = _run(tmp_path, server, capsys)
    assert code == 2 and "refuses the login of user 'admin' (from the environment)" in said, said
    assert PASSWORD not in said
    assert not (tmp_path / "results" / "behind_login").exists()
    # The credentials file is read as MLflow's client reads it.
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    (home / ".mlflow").mkdir(parents=True)
    (home / ".mlflow" / "credentials").write_text("[mlflow]\nmlflow_tracking_username = admin\n"
                                                  "mlflow_tracking_password = wrong\n")
    code, said = _run(tmp_path, server, capsys)
    assert code == 2 and "refuses the login of user 'admin' (from ~/.mlflow/credentials)" in said, said


def test_with_the_login_every_trial_is_mirrored_and_the_password_is_nowhere(server, home, tmp_path, capsys,
                                                                           monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    code, said = _run(tmp_path, server, capsys)
    assert code == 0, said
    assert PASSWORD not in said
    client = MlflowClient(server.uri)
    experiment = client.get_experiment_by_name("behind_login")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'trial'")
    assert sorted(run.info.status for run in runs) == ["FINISHED"] * 4
    for run in client.search_runs([experiment.experiment_id]):
        assert PASSWORD not in repr(run.data.tags) + repr(run.data.params)
    for path in Path(tmp_path / "results").rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == PASSWORD


def test_on_a_joined_cluster_the_login_reaches_the_mirror_and_no_job_metadata(server, home, tmp_path, monkeypatch):
    """A cluster whose nodes never saw the login (a head started with `ray start` before it was set,
    tests/local_ray.py), a driver with it in its shell: every trial mirrored, and the password in no
    job's runtime environment or metadata. Ray runs only in processes of their own: the driver and
    the job listing are subprocesses, as on a user's machine."""
    import subprocess
    import sys

    from local_ray import LocalHead
    from mlflow.tracking import MlflowClient

    head = LocalHead(num_cpus=2)
    try:
        head.start()
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**SPEC, "sweep": "joined"}))
        env = {**os.environ, **head.submit_env, "MLFLOW_TRACKING_USERNAME": "admin",
               "MLFLOW_TRACKING_PASSWORD": PASSWORD}
        done = subprocess.run([sys.executable, "-m", "banditsweep", "run", "spec.yaml", "--address", head.address,
                               "--no-progress", "--mlflow-uri", server.uri, "--results", str(tmp_path / "results")],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert PASSWORD not in done.stdout + done.stderr
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
        client = MlflowClient(server.uri)
        experiment = client.get_experiment_by_name("joined")
        runs = client.search_runs([experiment.experiment_id], "tags.kind = 'trial'")
        assert sorted(run.info.status for run in runs) == ["FINISHED"] * 4
        listed = head.run(sys.executable, "-c", (
            "from ray.util.state import list_jobs; "
            "jobs = list_jobs(address='%s', detail=True); print('jobs:', len(jobs)); print(repr(jobs))") % head.dashboard,
            env=head.submit_env, timeout=120)
        assert listed.returncode == 0, listed.stderr
        assert "jobs: 0" not in listed.stdout and "jobs:" in listed.stdout
        assert PASSWORD not in listed.stdout + listed.stderr
    finally:
        head.cleanup()


def test_plan_times_the_server_and_says_what_the_mirror_will_write(server, home, tmp_path, capsys, monkeypatch):
    """`plan` asks the server with the login, as the mirror will: how long a request takes, and what
    the mirror writes for this spec (runs per trial, or per cell where they would be too many
    requests for this server), and what that costs; without the login it says the server refuses."""
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    args = ["plan", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--mlflow-uri", server.uri,
            "--probe-seconds", "0.2"]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert f"MLflow: the tracking server at {server.uri} refuses a request (401: the login is missing or wrong)" in said, said
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    assert main(args) == 0
    said = capsys.readouterr().out
    assert f"MLflow: the tracking server at {server.uri} took " in said and " ms a request" in said, said
    assert "MLflow: 4 run(s) per trial: about " in said and "s of requests (3 a run)" in said, said
    assert PASSWORD not in said
