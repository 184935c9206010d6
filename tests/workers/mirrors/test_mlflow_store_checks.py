"""A store the user names that a newer MLflow made (a lab's, shared) is refused before any trial,
naming both versions, and left as it was; an MLflow older than the tested floor is refused."""

import sqlite3

import yaml
from paths import REPO

from banditsweep.sweeps.cli.main import main

SPEC = {"sweep": "shared", "horizon": 10, "seeds": 1, "environments": [{"kind": "synthetic", "function": "h1"}],
        "algorithms": [{"name": "random"}]}
NEWER_REVISION = "ffeeddccbbaa"   # a revision this MLflow does not know: a newer one's


def test_a_store_of_a_newer_mlflow_is_refused_and_left_as_it_was(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    store = tmp_path / "lab.db"
    MlflowClient(f"sqlite:///{store}").search_experiments()   # a store made by this MLflow
    with sqlite3.connect(store) as database:
        database.execute("UPDATE alembic_version SET version_num = ?", (NEWER_REVISION,))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    code = main(["run", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"),
                 "--mlflow-uri", f"sqlite:///{store}", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"has schema revision {NEWER_REVISION}, which this MLflow" in err and "a newer MLflow made it" in err
    assert "mlflow db upgrade" not in err
    with sqlite3.connect(store) as database:
        assert database.execute("SELECT version_num FROM alembic_version").fetchone()[0] == NEWER_REVISION
    assert not (tmp_path / "results" / "shared").exists()


def test_an_mlflow_older_than_the_tested_floor_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    import importlib.metadata
    import tomllib

    from banditsweep.workers.mirrors.mlflow import store_checks as tracking_store

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    floor = ".".join(map(str, tracking_store.MLFLOW_FLOOR))
    assert f"mlflow>={floor}" in pyproject["project"]["dependencies"]   # one floor, said alike
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.10.0" if name == "mlflow" else real(name))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    code = main(["run", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"MLflow 3.10.0 is installed; banditsweep's MLflow sink needs {floor} or newer" in err, err
    assert not (tmp_path / "results" / "shared").exists()
    # Parquet only needs no MLflow at all.
    assert main(["plan", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--probe-seconds",
                 "0.1"]) == 0
