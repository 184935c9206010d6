"""What is checked of a tracking store before a run writes to it, and how its URI is shown: the
MLflow installed (its version against the tested floor), a database URI's driver, the login a server
asks for (sent as MLflow's client will send it, and handed to the mirror's own process), the schema of
a store the user named (never upgraded under its other users), and a URI with its password redacted.
Without importing MLflow, except to read a store's expected schema revision.
"""

from __future__ import annotations

import base64
import os
import re
import sqlite3
import time
import urllib.error
import urllib.request
from contextlib import closing, suppress
from pathlib import Path
from urllib.parse import urlsplit

from banditsweep.workers.errors import InputError


# The oldest MLflow the sink was tested with (pyproject.toml's floor says the same; MLflow 3.10 lacks
# the SQLAlchemy models the bulk writer and the store's setup use, 3.0 fails on SQLAlchemy 2.1).
MLFLOW_FLOOR = (3, 17)


def check_mlflow_version() -> None:
    """An MLflow older than :data:`MLFLOW_FLOOR` is refused before anything runs (it would fail in the
    middle of the mirror); read from the package's metadata, without importing MLflow."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("mlflow")
    except PackageNotFoundError:
        raise InputError("MLflow is not installed; pip install 'mlflow>={}.{}', or run with --sink none".format(
            *MLFLOW_FLOOR)) from None
    numbers = tuple(int(part) for part in re.findall(r"\d+", installed)[:2])
    if numbers < MLFLOW_FLOOR:
        floor = ".".join(map(str, MLFLOW_FLOOR))
        raise InputError(f"MLflow {installed} is installed; banditsweep's MLflow sink needs {floor} or newer "
                         f"(pip install 'mlflow>={floor}'), or run with --sink none (Parquet only)")


# A database URI's drivers (SQLAlchemy's names, the module each imports, what installs it), in the order
# one is taken for a plain scheme whose SQLAlchemy default is not installed.
DRIVERS = {
    "postgresql": [("psycopg", "psycopg", "'psycopg[binary]'"), ("psycopg2", "psycopg2", "psycopg2-binary"),
                   ("pg8000", "pg8000", "pg8000")],
    "mysql": [("mysqldb", "MySQLdb", "mysqlclient"), ("pymysql", "pymysql", "PyMySQL"),
              ("mysqlconnector", "mysql.connector", "mysql-connector-python")],
    "mssql": [("pyodbc", "pyodbc", "pyodbc"), ("pymssql", "pymssql", "pymssql")],
}


def _installed(module: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def with_installed_driver(uri: str, source: str = "--mlflow-uri") -> str:
    """A database URI as the people who run the database write it (``postgresql://``) with a driver
    that is installed: the scheme's SQLAlchemy default where it is, else the first installed of
    :data:`DRIVERS` (``postgresql+psycopg2://``). A driver named, or none installed, that cannot be
    imported is bad input naming what to install; any other URI is returned as it is."""
    scheme = urlsplit(uri).scheme.lower()
    base, _, named = scheme.partition("+")
    if base not in DRIVERS:
        return uri
    drivers = {name: (module, package) for name, module, package in DRIVERS[base]}
    if named:
        wanted = named
    else:
        from sqlalchemy.engine import make_url   # the dialect's module only, not its driver
        from sqlalchemy.exc import ArgumentError

        try:
            wanted = make_url(uri).get_dialect().driver
        except (ArgumentError, ValueError, ImportError):
            return uri   # SQLAlchemy itself says what is wrong when MLflow opens it
    module, package = drivers.get(wanted, (None, None))
    if module is None or _installed(module):
        return uri
    if not named:
        for name, other, _ in DRIVERS[base]:
            if _installed(other):
                return f"{base}+{name}" + uri[len(scheme):]
    options = ", ".join(f"{package} ({base}+{name}://)" for name, (module, package) in drivers.items())
    if named:
        raise InputError(f"{source}: the {base} driver {wanted!r} is not installed; install {package}, or name "
                         f"an installed one: {options}")
    raise InputError(f"{source}: the {base} driver {wanted!r} ({scheme}://) is not installed, nor any other; "
                     f"install one of {options}")


# MLflow's setting of the connections its HTTP session keeps per host (10 unless set); the sink sets it
# to its most calls in flight where the user has not (workers.mirrors.mlflow.writers).
POOL_VARIABLE = "MLFLOW_HTTP_POOL_MAXSIZE"


def pool_size_set() -> int | None:
    """The connections the user told MLflow's HTTP session to keep (``$MLFLOW_HTTP_POOL_MAXSIZE``), or
    None; a value that is not a whole number of at least 1 is refused naming the variable."""
    value = os.environ.get(POOL_VARIABLE)
    if value is None:
        return None
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise InputError(f"environment variable {POOL_VARIABLE}={value!r}: MLflow's HTTP connection pool size "
                         "must be a whole number of at least 1; set one, or unset it")
    return size


def redacted(uri: str) -> str:
    """``uri`` as it may be shown or logged: a password in it (``postgresql://user:PASSWORD@host/db``,
    ``https://user:PASSWORD@host``) replaced by ``***``."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{netloc[1]}").geturl()


# Where MLflow's client finds a login (mlflow.utils.credentials): the environment first, then this file.
CREDENTIALS_FILE = "~/.mlflow/credentials"


def tracking_login() -> tuple[str | None, str | None, str | None, str]:
    """(username, password, token, where they come from) as MLflow's client will send them: the
    environment's MLFLOW_TRACKING_USERNAME / _PASSWORD / _TOKEN, else the credentials file's
    ``mlflow_tracking_username`` / ``_password``. Read here without importing MLflow."""
    import configparser

    token = os.environ.get("MLFLOW_TRACKING_TOKEN") or None
    username = os.environ.get("MLFLOW_TRACKING_USERNAME") or None
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD") or None
    source = "the environment"
    path = Path(CREDENTIALS_FILE).expanduser()
    if (username is None or password is None) and path.is_file():
        config = configparser.ConfigParser(interpolation=None)
        with suppress(configparser.Error, OSError, UnicodeDecodeError):
            config.read(path)
            if "mlflow" in config:
                username = username or config["mlflow"].get("mlflow_tracking_username")
                password = password or config["mlflow"].get("mlflow_tracking_password")
                source = f"{CREDENTIALS_FILE}" if not os.environ.get("MLFLOW_TRACKING_USERNAME") else source
    return username, password, token, source


def mlflow_login(sinks: list[str]) -> dict[str, str]:
    """The login MLflow's client would send from this process, as the environment variables that say
    it (for the mirror's own process: workers.execution.actors.MirrorActor); {} without one, or
    without the MLflow sink among ``sinks``."""
    from banditsweep.workers.mirrors.mlflow.options import MLFLOW_SINK

    if MLFLOW_SINK not in sinks:
        return {}
    username, password, token, _ = tracking_login()
    login = {"MLFLOW_TRACKING_TOKEN": token} if token else {}
    if username and password:
        login |= {"MLFLOW_TRACKING_USERNAME": username, "MLFLOW_TRACKING_PASSWORD": password}
    return login


def _small_request(uri: str) -> urllib.request.Request:
    """A small request to the server at ``uri`` that needs its login (with the login, where one is set)."""
    username, password, token, _ = tracking_login()
    request = urllib.request.Request(uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    elif username and password:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode())
    return request


def server_request_seconds(uri: str, requests: int = 3) -> float:
    """The median seconds of ``requests`` small authenticated requests to the server, one at a time
    (raises what urllib raises where it does not answer)."""
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        urllib.request.urlopen(_small_request(uri), timeout=10).close()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def check_login(uri: str, shown: str) -> None:
    """A server behind a login (MLflow's basic-auth app, a proxy) refuses the mirror's every request
    when the login is missing or wrong: found here, by a request that needs it (its /health does
    not), before the first trial. The password is never shown."""
    username, password, token, source = tracking_login()
    request = _small_request(uri)
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.HTTPError as error:
        if error.code == 401 and not (token or (username and password)):
            raise InputError(f"--mlflow-uri: the MLflow tracking server at {shown} asks for a login; set "
                             f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN, or "
                             f"{CREDENTIALS_FILE}) where this command runs, or run with --sink none and "
                             f"`banditsweep sync-mlflow SPEC` later") from None
        if error.code == 401:
            who = "the token of MLFLOW_TRACKING_TOKEN" if token else f"the login of user {username!r} (from {source})"
            raise InputError(f"--mlflow-uri: the MLflow tracking server at {shown} refuses {who}; check it, or run "
                             f"with --sink none and `banditsweep sync-mlflow SPEC` later") from None
        if error.code == 403:
            who = "the token's user" if token else f"user {username!r}"
            raise InputError(f"--mlflow-uri: the MLflow tracking server at {shown} does not let {who} read "
                             f"experiments; ask its administrator for access") from None
        # Another answer (an old server without this endpoint, a proxy's page): the mirror says more.
    except (urllib.error.URLError, OSError):
        pass   # it answered /health a moment ago: an outage now is the mirror's to ride out


def schema_revision(path: str) -> str | None:
    """The MLflow schema revision (alembic's) of the SQLite store at ``path``; None where it has none yet."""
    if not os.path.isfile(path):
        return None
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as database:
            row = database.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def database_schema_revision(uri: str, source: str = "--mlflow-uri") -> str | None:
    """The MLflow schema revision of the store in the database server at ``uri`` (PostgreSQL, MySQL,
    SQL Server), None where the database holds no MLflow store yet; a server that does not answer,
    or refuses the login, is bad input naming it (the password never shown)."""
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.exc import SQLAlchemyError

    engine = create_engine(with_installed_driver(uri, source), pool_pre_ping=False)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return None
            row = connection.execute(text("SELECT version_num FROM alembic_version")).fetchone()
    except SQLAlchemyError as error:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0][:300]
        raise InputError(f"{source}: the MLflow database at {redacted(uri)} cannot be opened ({reason}); check "
                         "that it runs, its address and its login, or run with --sink none and `banditsweep "
                         "sync-mlflow SPEC` later") from None
    finally:
        engine.dispose()
    return row[0] if row else None


def refuse_another_database_schema(uri: str, source: str = "--mlflow-uri") -> None:
    """A store in a database server is a lab's, shared by its users' MLflow: one whose schema is not
    exactly this MLflow's is refused before anything runs, naming both versions. Never migrated:
    upgrading it (what MLflow's own message advises) would lock out every older MLflow that shares it,
    and a newer schema this MLflow cannot read."""
    found = database_schema_revision(uri, source)
    if found is None:
        return
    from importlib.metadata import version

    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config, _get_latest_schema_revision

    latest = _get_latest_schema_revision()
    if found == latest:
        return
    known = {script.revision for script in ScriptDirectory.from_config(_get_alembic_config("")).walk_revisions()}
    made = "an older MLflow" if found in known else "a newer MLflow"
    raise InputError(f"{source}: the MLflow store at {redacted(uri)} has schema revision {found}, made by {made}; "
                     f"this MLflow ({version('mlflow')}) has schema {latest}. The store is shared: it is not "
                     f"migrated, which would lock out its other users' MLflow. Run banditsweep with the MLflow "
                     f"version of the store's other users, or give a store of its own")


def refuse_another_schema(path: str, source: str = "--mlflow-uri") -> None:
    """A SQLite store the user named whose schema this MLflow does not know (a newer MLflow made it:
    possibly a lab's store, shared with other users) is refused before anything runs, naming both
    versions: this MLflow cannot open it, and must not try to rewrite it. A store of an older schema
    this MLflow knows is migrated as MLflow migrates it (a user's own file; the results root's
    ``mlflow.db`` likewise)."""
    found = schema_revision(path)
    if found is None:
        return
    from importlib.metadata import version

    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config, _get_latest_schema_revision

    known = {script.revision for script in ScriptDirectory.from_config(_get_alembic_config("")).walk_revisions()}
    if found in known:
        return
    raise InputError(f"{source}: the MLflow store {path} has schema revision {found}, which this MLflow "
                     f"({version('mlflow')}, schema {_get_latest_schema_revision()}) does not know: a newer MLflow "
                     f"made it; run banditsweep with the MLflow version of the store's other users, or give a store "
                     f"of its own (this MLflow would have to rewrite the store, and its other users' could no "
                     f"longer open it)")
