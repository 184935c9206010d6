"""A finished sweep for the tests of ``banditsweep status``'s checks: 4 Random trials on a synthetic
bandit (horizon 10; Parquet only) written once per test module as a run leaves them, without
running them (``finished_sweep``: the checks read files, whatever wrote them), a copy of it in each
test's folder (``swept``), and ``status`` of its spec there (``status``). A test module imports the
fixtures by name to use them; a test that runs trials again asks for the shared Ray itself."""

import shutil

import pytest
from store_builders import write_spec_results

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.store import SweepStore

SPEC = {"sweep": "counts", "horizon": 10, "seeds": 4,
        "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}], "algorithms": [{"name": "random"}]}


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """A finished 4-trial sweep (Parquet only), written once for the module."""
    folder = tmp_path_factory.mktemp("counts")
    write_spec_results(folder, SPEC, name="counts.yaml")
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
