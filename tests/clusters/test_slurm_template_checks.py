"""cluster-slurm.sbatch checks what it is given before it starts Ray or makes anything: a spec that
cannot be read or expanded, a local folder too long for Ray's socket paths, a results root that
cannot be made. Each is one line naming what to fix, a non-zero exit, and nothing left behind. The
template is run as Slurm runs it (bash, with the job's variables), without Slurm: the checks come
before its first Slurm command."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paths import REPO

SPEC = {"sweep": "checked", "horizon": 20, "seeds": 1, "environments": [{"kind": "synthetic", "function": "h1"}],
        "algorithms": [{"name": "random"}]}


def _job(tmp_path: Path, *args: str, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_SUBMIT_DIR": str(tmp_path), "BANDITSWEEP_PYTHON": sys.executable,
           "TMPDIR": str(tmpdir or tmp_path / "local"), "HOME": str(tmp_path / "home")}
    env.pop("BANDITSWEEP_RESULTS", None)
    return subprocess.run(["bash", str(REPO / "cluster-slurm.sbatch"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "local").mkdir()
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    return "spec.yaml"


def _made(tmp_path: Path) -> list[str]:
    return sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.name not in ("spec.yaml", "local", "home", "blocker") and "__pycache__" not in p.parts)


def test_a_spec_that_does_not_exist_is_named_before_ray_starts(tmp_path, spec):
    done = _job(tmp_path, "missing.yaml", "--results", str(tmp_path / "results"))
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("cluster-slurm:")]
    assert len(lines) == 1 and "the spec cannot be run: error: missing.yaml: cannot read the spec file" in lines[0]
    assert "ray" not in done.stderr.lower().replace("cluster-slurm", "")
    assert _made(tmp_path) == []


def test_a_bad_override_of_the_run_is_named_before_ray_starts(tmp_path, spec):
    done = _job(tmp_path, spec, "--results", str(tmp_path / "results"), "--set", "horizon=-3", "--max-workers", "1")
    assert done.returncode == 2 and "the spec cannot be run: error:" in done.stderr and "horizon" in done.stderr
    assert _made(tmp_path) == []


def test_a_local_folder_too_long_for_rays_sockets_is_named_with_the_length_allowed(tmp_path, spec):
    deep = tmp_path / "local" / ("x" * 60)
    deep.mkdir()
    done = _job(tmp_path, spec, "--results", str(tmp_path / "results"), tmpdir=deep)
    assert done.returncode == 2, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("cluster-slurm:")]
    assert "Ray's socket paths under" in line and "more than the 107 a socket path may have" in line
    assert "set BANDITSWEEP_LOCAL_DIR (or TMPDIR)" in line
    assert list(deep.iterdir()) == [] and not (tmp_path / "results").exists()


def test_a_results_root_that_cannot_be_made_is_named(tmp_path, spec):
    (tmp_path / "blocker").write_text("a file where the results root's parent should be")
    done = _job(tmp_path, spec, "--results", str(tmp_path / "blocker" / "results"))
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if line.startswith("cluster-slurm:")]
    assert f"{tmp_path / 'blocker'} is a file, not a directory; the results root must be a directory" in line
    assert list((tmp_path / "local").iterdir()) == []
