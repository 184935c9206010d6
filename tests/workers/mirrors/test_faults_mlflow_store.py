"""A local SQLite MLflow store whose creation was cut short (the process killed part-way through
MLflow's migrations, or the disk full then) is found on the next open, moved aside with its data,
and created anew, and the Parquet results fill it again; a healthy store, new, current or of an
older MLflow schema (MLflow migrates those), is left alone.

The faults are real: MLflow creates the store in a process of its own, killed with SIGKILL right
after the migrations' fifth table is made, or under a file size limit (RLIMIT_FSIZE, the disk full
for that process) that stops it part-way through the migrations."""

import glob
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy
import yaml

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.mirrors.mlflow.tracking_store import store_problem

SPEC = {"horizon": 20, "seeds": 2, "log_every": 10, "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
        "algorithms": [{"name": "linucb", "grid": {"nu": [0.1, 1.0]}}]}

CUT_SHORT = r"""
import os, resource, signal, sys
path, how, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
if how == "kill":   # SIGKILL right after the migrations' `at`-th table is made
    from alembic.ddl.impl import DefaultImpl
    create_table, made = DefaultImpl.create_table, []
    def counted(self, table, **keywords):
        create_table(self, table, **keywords)
        made.append(table.name)
        if len(made) == at:
            os.kill(os.getpid(), signal.SIGKILL)
    DefaultImpl.create_table = counted
else:               # the disk full: no file grows past `at` bytes
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (at, at))
from mlflow.tracking import MlflowClient
MlflowClient(f"sqlite:///{path}").search_experiments()
"""


def cut_short_store(path: Path, how: str, at: int) -> bytes:
    """A store whose creation by MLflow was cut short; returns its bytes."""
    made = subprocess.run([sys.executable, "-c", CUT_SHORT, str(path), how, str(at)], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode != 0 and path.stat().st_size > 0, made.stderr[-2000:]
    return path.read_bytes()


def trial_runs(uri: str, sweep: str) -> tuple[dict[str, list[str]], list[str]]:
    """Child runs' statuses by trial id, and the parent runs' statuses."""
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.queries import search_all

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(sweep).experiment_id
    children: dict[str, list[str]] = {}
    for run in search_all(client, experiment, "tags.kind = 'trial'"):
        children.setdefault(run.data.tags["trial_id"], []).append(run.info.status)
    return children, [run.info.status for run in search_all(client, experiment, "tags.kind = 'sweep'")]


def revision(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    finally:
        connection.close()


@pytest.mark.slow  # two stores cut short and made again, two sweeps: about 60 s
def test_a_store_left_half_created_by_a_kill_or_a_full_disk_is_moved_aside_and_made_anew(
        tmp_path, monkeypatch, plugins, shared_ray, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("kept", "fresh"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"sweep": name, **SPEC}))
    assert main(["run", "kept.yaml", "--sink", "none", "--no-progress"]) == 0
    kept = sorted(pd.read_parquet("results/kept/trials")["trial_id"])
    capsys.readouterr()

    # Killed: `sync-mlflow` rebuilds the store and fills it from the Parquet results.
    killed = tmp_path / "killed.db"
    before = cut_short_store(killed, "kill", 5)
    uri = f"sqlite:///{killed}"
    assert main(["sync-mlflow", "kept.yaml", "--mlflow-uri", uri]) == 0
    out, err = capsys.readouterr()
    (aside,) = glob.glob(f"{killed}.broken-*")
    assert f"warning: the MLflow store {killed} could not be opened (" in err and f"moved aside to {aside} " in err
    assert "kept: 4 trials in the Parquet results; 4 MLflow runs rebuilt" in out
    assert Path(aside).read_bytes() == before   # its data kept
    children, parents = trial_runs(uri, "kept")
    assert sorted(children) == kept and all(statuses == ["FINISHED"] for statuses in children.values())
    assert parents == ["FINISHED"]
    assert main(["sync-mlflow", "kept.yaml", "--mlflow-uri", uri]) == 0   # healthy now: left alone
    out, err = capsys.readouterr()
    assert "0 MLflow runs rebuilt" in out and "warning" not in err and len(glob.glob(f"{killed}.broken-*")) == 1

    # The disk full: the next `run` rebuilds it and mirrors its trials.
    full = tmp_path / "full.db"
    before = cut_short_store(full, "disk", 150_000)
    uri = f"sqlite:///{full}"
    assert main(["run", "fresh.yaml", "--mlflow-uri", uri, "--no-progress"]) == 0
    out, err = capsys.readouterr()
    (aside,) = glob.glob(f"{full}.broken-*")
    assert f"the MLflow store {full} could not be opened (" in err and f"moved aside to {aside} " in err
    assert "4 finished, 0 failed" in out and Path(aside).read_bytes() == before
    children, parents = trial_runs(uri, "fresh")
    fresh = sorted(pd.read_parquet("results/fresh/trials")["trial_id"])
    assert sorted(children) == fresh and all(statuses == ["FINISHED"] for statuses in children.values())
    assert parents == ["FINISHED"]


def test_a_healthy_store_new_or_of_an_older_schema_is_left_alone(tmp_path, capsys):
    """An empty file (a store about to be made) and a store of an older MLflow schema are opened
    as they are: MLflow makes the one and migrates the other; nothing is moved aside."""
    from alembic import command
    from alembic.script import ScriptDirectory
    from mlflow.store.db import utils

    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"sweep": "s", **SPEC}))
    older = tmp_path / "older.db"
    config = utils._get_alembic_config(f"sqlite:///{older}")
    revisions = [script.revision for script in ScriptDirectory.from_config(config).walk_revisions()][::-1]
    middle = revisions[len(revisions) // 2]
    engine = sqlalchemy.create_engine(f"sqlite:///{older}")
    utils.InitialBase.metadata.create_all(engine)
    with engine.begin() as connection:   # as an MLflow of that schema left it
        config.attributes["connection"] = connection
        command.upgrade(config, middle)
    engine.dispose()
    assert revision(older) == middle and store_problem(str(older)) is None
    empty = tmp_path / "empty.db"
    empty.touch()
    for store in (older, empty):
        assert main(["sync-mlflow", str(tmp_path / "s.yaml"), "--mlflow-uri", f"sqlite:///{store}"]) == 0
        out, err = capsys.readouterr()
        assert "s: 0 trials in the Parquet results" in out and "warning" not in err, err
        assert revision(store) == revisions[-1]   # migrated, or made
    assert not glob.glob(f"{tmp_path}/*.broken-*")


def test_what_makes_a_store_broken(tmp_path):
    """Garbage (the disk full while a page was written), a truncated file, a store whose recorded
    schema revision promises tables it lacks are broken."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(os.urandom(8192))
    assert store_problem(str(garbage)) == "not an SQLite database"
    truncated = tmp_path / "truncated.db"
    connection = sqlite3.connect(truncated)
    connection.execute("CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)")
    connection.executemany("INSERT INTO experiments (name) VALUES (?)", [("x" * 200,)] * 200)
    connection.commit()
    connection.close()
    os.truncate(truncated, truncated.stat().st_size // 2)
    assert store_problem(str(truncated)) == "database disk image is malformed"
    from mlflow.store.db import utils

    ahead = tmp_path / "ahead.db"
    connection = sqlite3.connect(ahead)
    connection.execute("CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)")
    connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    connection.execute("INSERT INTO alembic_version VALUES (?)", (utils._get_latest_schema_revision(),))
    connection.commit()
    connection.close()
    assert store_problem(str(ahead)) == "tables missing after MLflow's migrations"


def test_a_uri_naming_something_else_than_a_store_is_refused_and_the_file_left_alone(tmp_path, capsys):
    """A typo in --mlflow-uri, or a hostile $MLFLOW_TRACKING_URI, naming a file that is not an MLflow
    store (text, another program's SQLite database, a link to one, a folder): every command that
    would open it refuses with exit 2 naming it, and the file is neither moved, nor replaced, nor
    written to. (Only a file that holds MLflow's tables, or none yet, is a store that may be set aside.)"""
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"sweep": "s", **SPEC}))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    other = tmp_path / "other.db"
    connection = sqlite3.connect(other)
    connection.execute("CREATE TABLE patients (id INTEGER)")
    connection.commit()
    connection.close()
    link = tmp_path / "link.db"
    link.symlink_to(notes)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    before = {path: path.read_bytes() for path in (notes, other)}
    store = "the MLflow store"
    cases = [(notes, f"{store} {notes} is not an SQLite database"),
             (other, f"{store} {other} is an SQLite database of something else (tables: patients)"),
             (link, f"{store} {link} is not an SQLite database"), (folder, f"{folder} is a directory, not a database file")]
    for path, message in cases:
        for command in (["sync-mlflow"], ["run", "--no-progress"], ["ui"]):
            spec = str(tmp_path / "s.yaml")
            assert main([command[0], spec, *command[1:], "--mlflow-uri", f"sqlite:///{path}"]) == 2, (path, command)
            err = capsys.readouterr().err
            assert err.startswith("error: --mlflow-uri "), err
            assert message in err.replace("\n", " ") and "Traceback" not in err, err
    assert {path: path.read_bytes() for path in (notes, other)} == before
    assert link.is_symlink() and folder.is_dir() and not glob.glob(f"{tmp_path}/*.broken-*")
    assert not (tmp_path / "results").exists()   # refused before anything ran
