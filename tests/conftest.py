import os
from pathlib import Path

import pytest

# Where the suite's files are (the repository, the test plugins, the dataset copies): tests/paths.py.
from paths import PLUGINS, REPO, TEST_DATASETS
from module_results import PLUGIN_MODULES, load_test_plugins

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture
def repo() -> Path:
    return REPO


class SharedRay:
    """The embedded Ray the CLI tests share (starting one costs about 5 s): on loopback, two CPUs,
    its workers loading the test plugins and reading the test datasets."""

    def __init__(self, markers: Path):
        from banditsweep.workers.execution.ray_connection import RayConnection

        self.markers = markers   # where crash_once remembers the trials it crashed
        self.connection = RayConnection(None, {"PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])), "BANDITSWEEP_PLUGINS": PLUGIN_MODULES,
                                               "BANDITSWEEP_TEST_MARKERS": str(markers),
                                               "BANDITSWEEP_DATA": str(TEST_DATASETS)}, num_cpus=2)


    def ensure(self) -> "SharedRay":
        """Up, also after a test that needed a Ray of its own shut it down."""
        import ray

        if not ray.is_initialized():
            self.connection.__enter__()
        return self


@pytest.fixture(scope="session")
def shared_ray_session(tmp_path_factory):
    shared = SharedRay(tmp_path_factory.mktemp("crash_markers"))
    yield shared
    shared.connection.__exit__(None, None, None)


@pytest.fixture
def shared_ray(shared_ray_session):
    return shared_ray_session.ensure()


@pytest.fixture
def plugins(monkeypatch):
    """The driver loads the test plugins as the shared Ray's workers do."""
    load_test_plugins(monkeypatch)


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    """Results and the MLflow store of a test go to its own folder (``results/`` and ``mlflow.db`` in
    tmp_path), never to the user's default results root."""
    monkeypatch.setenv("BANDITSWEEP_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
