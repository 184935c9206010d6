"""A finished sweep for the tests of damaged and hostile results folders: 4 trials (Random and LinUCB
on a synthetic bandit, 2 seeds, horizon 50; Parquet only) run once per test module on the shared
Ray (``clean_sweep``), a copy of it in each test's folder (``swept``), and a command run on its spec
there (``command``). A test module imports the fixtures by name to use them."""

import shutil

import pytest
import yaml

import banditsweep
from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.store import SweepStore

HORIZON, SEEDS = 50, 2
SPEC = {"sweep": "flip", "horizon": HORIZON, "seeds": SEEDS,
        "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
        "algorithms": [{"name": "random"}, {"name": "linucb"}]}
TRIALS = 2 * SEEDS


@pytest.fixture(scope="module")
def clean_sweep(tmp_path_factory, shared_ray_session):
    """A finished 4-trial sweep (Parquet only), run once for the module, and its values."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("flip")
    (folder / "flip.yaml").write_text(yaml.safe_dump(SPEC))
    assert main(["run", str(folder / "flip.yaml"), "--no-progress", "--sink", "none",
                 "--results", str(folder / "results")]) == 0
    trials, curves = banditsweep.load(folder / "results", "flip")
    return folder, trials, curves


@pytest.fixture
def swept(clean_sweep, tmp_path, monkeypatch, capsys):
    """A copy of the clean sweep in this test's folder, and its store."""
    folder, _, _ = clean_sweep
    shutil.copytree(folder / "results", tmp_path / "results")
    shutil.copy(folder / "flip.yaml", tmp_path / "flip.yaml")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    return SweepStore.for_sweep(tmp_path / "results", "flip")


def command(capsys, *arguments) -> tuple[int, str, str]:
    code = main([arguments[0], "flip.yaml", *arguments[1:]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
