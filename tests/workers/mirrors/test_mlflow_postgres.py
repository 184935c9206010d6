"""An MLflow store in a PostgreSQL server, as a lab runs one (tests/postgres_server.py: Debian's
PostgreSQL started privately on loopback, ended by its process group): a plain ``postgresql://`` URI,
as people write it, mirrors every trial (the bulk writer, through the installed psycopg2); a store whose
schema is another MLflow's, older or newer, is refused before anything runs, naming both versions, and
left as it was (never migrated: its other users' MLflow would be locked out); a database that does
not answer is named without its password."""

import pytest
import yaml

from banditsweep.sweeps.cli.main import main
from postgres_server import PostgresServer, unavailable

pytestmark = pytest.mark.slow   # a PostgreSQL started for the module and two sweeps: about 40 s

SPEC = {"sweep": "lab", "horizon": 20, "seeds": 2, "environments": [{"kind": "synthetic", "function": "h1"}],
        "algorithms": [{"name": "linucb", "label": "LinUCB"}, {"name": "random", "label": "Random"}]}


@pytest.fixture(scope="module")
def postgres():
    why = unavailable()
    if why:
        pytest.skip(why)
    with PostgresServer() as server:
        yield server


def _run(tmp_path, uri, capsys, sweep="lab") -> tuple[int, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**SPEC, "sweep": sweep}))
    code = main(["run", str(tmp_path / "spec.yaml"), "--results", str(tmp_path / "results"), "--mlflow-uri", uri,
                 "--no-progress", "--max-workers", "1"])
    said = capsys.readouterr()
    return code, said.out + said.err


def test_a_plain_postgresql_uri_mirrors_every_trial(postgres, tmp_path, capsys, shared_ray, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, said = _run(tmp_path, postgres.uri, capsys)
    assert code == 0, said
    rows = postgres.sql("SELECT runs.status, COUNT(*) FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
                        "WHERE tags.key = 'kind' AND tags.value = 'trial' GROUP BY runs.status")
    assert rows == [("FINISHED", 4)]
    # Artifacts (the spec) go to the results root, not MLflow's ./mlruns of the folder the run started in.
    [(location,)] = postgres.sql("SELECT artifact_location FROM experiments WHERE name = 'lab'")
    assert location == (tmp_path / "results" / "mlartifacts").resolve().as_uri(), location
    assert list((tmp_path / "results" / "mlartifacts").rglob("spec.yaml")) and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("which", ["newer", "older"])
def test_a_store_of_another_mlflow_is_refused_and_left_as_it_was(postgres, tmp_path, capsys, which, shared_ray):
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config, _get_latest_schema_revision

    latest = _get_latest_schema_revision()
    if postgres.sql("SELECT to_regclass('alembic_version')") == [(None,)]:   # a store made first, as a lab's is
        assert _run(tmp_path / "first", postgres.uri, capsys)[0] == 0
    other = "ffffffffffff" if which == "newer" else \
        ScriptDirectory.from_config(_get_alembic_config("")).get_revision(latest).down_revision
    postgres.sql(f"UPDATE alembic_version SET version_num = '{other}'")
    try:
        code, said = _run(tmp_path, postgres.uri, capsys, sweep=f"refused_{which}")
        assert code == 2, said
        assert f"has schema revision {other}, made by an {which} MLflow" in said or \
            f"has schema revision {other}, made by a {which} MLflow" in said, said
        assert f"has schema {latest}" in said and "not migrated" in said and "upgrade" not in said
        assert not (tmp_path / "results" / f"refused_{which}").exists()
        assert postgres.sql("SELECT version_num FROM alembic_version") == [(other,)]
    finally:
        postgres.sql(f"UPDATE alembic_version SET version_num = '{latest}'")


def test_a_database_that_does_not_answer_is_named_without_its_password(tmp_path, capsys, postgres):
    uri = f"postgresql://lab:s3cret@127.0.0.1:{postgres.port + 1 if postgres.port < 65535 else 1}/mlflow"
    code, said = _run(tmp_path, uri, capsys, sweep="nowhere")
    assert code == 2 and "the MLflow database at postgresql" in said and "://lab:***@127.0.0.1:" in said, said
    assert "cannot be opened" in said
    assert "s3cret" not in said
