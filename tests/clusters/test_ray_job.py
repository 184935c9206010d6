"""`ray job submit` as docs/cluster.md writes it, against a Ray head started with `ray start --head` (token
authentication on, as Ray starts it by default) on 127.0.0.1: the results land under the head's
documented results root, and the code that runs is the submitted tree, not the installed package.

The head has a HOME of its own (its ~/.ray/auth_token and ~/banditsweep-results); the submitting
user has another, without a token file: the token reaches `ray job submit` the way docs/cluster.md says,
`RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=<the head's ~/.ray/auth_token, copied>`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from local_ray import LocalHead, finished_trial_runs, ray_command
from paths import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def head():
    head = LocalHead(num_cpus=2)
    try:
        yield head.start()
    finally:
        head.cleanup()


def user_env(head: LocalHead, home: Path) -> dict[str, str]:
    """The submitting user's shell: a HOME without a Ray token, and the two variables docs/cluster.md
    exports, the token in a file copied off the head (`ray rsync-down cluster.yaml '~/.ray/auth_token'`)."""
    home.mkdir(exist_ok=True)
    shutil.copy(head.home / ".ray" / "auth_token", home / "cluster-token")
    return {**head.env, "HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(home / "cluster-token")}


def submit(head: LocalHead, cwd: Path, env: dict, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([ray_command(), "job", "submit", "--address", head.dashboard, "--working-dir", ".", "--",
                           *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          start_new_session=True)


def test_submit_needs_the_token(head, tmp_path):
    env = user_env(head, tmp_path / "user")
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name)
    refused = submit(head, tmp_path, env, "true")
    assert refused.returncode != 0 and "Missing authentication token" in refused.stdout + refused.stderr


def test_quickstart_as_a_ray_job_writes_to_the_heads_results_root(head, tmp_path):
    done = submit(head, REPO, user_env(head, tmp_path / "user"), "banditsweep", "run", "sweeps/quickstart.yaml")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "succeeded" in output and "42 finished, 0 failed" in output
    root = head.home / "banditsweep-results"
    assert f"results: {root / 'quickstart'}" in output
    trials = pd.read_parquet(root / "quickstart" / "trials")
    assert len(trials) == 42 and (trials["status"] == "finished").all()
    assert trials["trial_id"].nunique() == 42 and set(trials["node"]) == {"127.0.0.1"}
    curves = pd.read_parquet(root / "quickstart" / "curves")
    assert len(curves) == 42 * 2000
    assert finished_trial_runs(root / "mlflow.db", "quickstart") == 42
    # Nothing was written into Ray's copy of the submitted folder.
    copies = list((head.temp_dir / "session_latest" / "runtime_resources").glob("working_dir_files/*"))
    shipped = {"docs/results"}   # the repository's stored results travel with the submitted tree
    assert copies and not [p for copy in copies if copy.is_dir() for p in copy.rglob("*")
                           if p.name in ("mlflow.db", "mlruns", "mlartifacts")
                           and str(p.relative_to(copy)) not in shipped]


CHANGED_RANDOM = '''

import os as _os

import banditsweep as _banditsweep


class SubmittedRandomParams(Config):
    marker: int = 0   # only the submitted tree knows this parameter


class SubmittedRandomPolicy(RandomPolicy):
    Params = SubmittedRandomParams

    def select(self, t, contexts):
        return Decision(arm=0)   # the submitted tree's Random always plays arm 0

    def diagnostics(self):
        # Diagnostics are numbers; the package the worker imported is written beside the test instead.
        with open(PACKAGES_FILE, "a") as packages:
            packages.write(_os.path.dirname(_os.path.realpath(_banditsweep.__file__)) + "\\n")
        return {"marker": self.params.marker}


RandomPolicy = SubmittedRandomPolicy
'''


def test_the_submitted_tree_runs_not_the_installed_package(head, tmp_path):
    """A checkout whose Random differs from the installed one (a parameter of its own, checked by the
    driver's spec validation; always arm 0 on the workers) is what the job runs."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info",
                                                                   "__pycache__", ".pytest_cache"))
    policy = checkout / "core" / "kernel" / "algorithms" / "random_policy.py"
    packages_file = tmp_path / "packages.txt"
    policy.write_text(policy.read_text() + f"\nPACKAGES_FILE = {str(packages_file)!r}\n" + CHANGED_RANDOM)
    spec = {"sweep": "submitted", "horizon": 50, "seeds": 3,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
            "algorithms": [{"name": "random", "params": {"marker": 7}}]}
    (checkout / "submitted.yaml").write_text(yaml.safe_dump(spec))
    done = submit(head, checkout, user_env(head, tmp_path / "user"), "banditsweep", "run", "submitted.yaml",
                  "--sink", "none")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "3 finished, 0 failed" in output
    root = head.home / "banditsweep-results" / "submitted"
    trials = pd.read_parquet(root / "trials")
    assert len(trials) == 3 and (trials["status"] == "finished").all()
    diagnostics = [json.loads(d) for d in trials["diagnostics"]]
    assert {d["marker"] for d in diagnostics} == {7}
    packages = {Path(line) for line in packages_file.read_text().splitlines()}
    assert packages
    # The workers imported the copy Ray unpacked on the head from the submitted files.
    assert all(head.temp_dir in p.parents and "runtime_resources" in p.parts for p in packages), packages
    assert (pd.read_parquet(root / "curves")["arm"] == 0).all()
    installed = subprocess.run([str(Path(ray_command()).parent / "python"), "-c",
                                "import banditsweep, os; print(os.path.realpath(banditsweep.__file__))"],
                               capture_output=True, text=True, cwd=tmp_path, env=head.env)
    assert Path(installed.stdout.strip()).parent not in packages
