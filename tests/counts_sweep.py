"""A finished sweep for the tests of ``banditsweep status``'s checks: 4 Random trials on a synthetic
bandit (horizon 10; Parquet only) run once per test module on the shared Ray (``finished_sweep``),
a copy of it in each test's folder (``swept``), and ``status`` of its spec there (``status``). A test
module imports the fixtures by name to use them."""

import shutil

import pytest
import yaml

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.store import SweepStore

SPEC = {"sweep": "counts", "horizon": 10, "seeds": 4,
        "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}], "algorithms": [{"name": "random"}]}


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory, shared_ray_session):
    """A finished 4-trial sweep (Parquet only), run once for the module."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("counts")
    (folder / "counts.yaml").write_text(yaml.safe_dump(SPEC))
    assert main(["run", str(folder / "counts.yaml"), "--no-progress", "--sink", "none",
                 "--results", str(folder / "results")]) == 0
    return folder


@pytest.fixture
def swept(finished_sweep, tmp_path, monkeypatch, capsys):
    """A copy of the finished sweep in this test's folder, and its store."""
    shutil.copytree(finished_sweep / "results", tmp_path / "results")
    shutil.copy(finished_sweep / "counts.yaml", tmp_path / "counts.yaml")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    return SweepStore.for_sweep(tmp_path / "results", "counts")


def status(capsys) -> tuple[int, str, str]:
    code = main(["status", "counts.yaml"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
