"""The MLflow tracking store of a sweep, apart from what the MLflow sink logs into it: which store a
command uses, whether a URI the user gave can be one (checked before anything is written, without
importing MLflow), whether a server answers, and the setup of a local SQLite store (created by one
process at a time; one whose creation was cut short moved aside and made anew).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import sqlite3
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, suppress
from importlib.metadata import entry_points
from pathlib import Path
from urllib.parse import urlsplit

from banditsweep.workers.errors import InputError
from banditsweep.workers.mirrors.mlflow.options import REQUESTS_PER_TRIAL_RUN, run_mode, trial_runs_seconds
from banditsweep.workers.mirrors.mlflow.store_checks import (DRIVERS, check_login, pool_size_set, redacted,
                                                          refuse_another_database_schema, refuse_another_schema,
                                                          server_request_seconds, with_installed_driver)
from banditsweep.workers.storage.writable_folders import first_existing, why_not_writable
from banditsweep.workers.storage.root_entries import MLFLOW_ARTIFACTS, MLFLOW_DB, SQLITE_SIDE_FILES
from banditsweep.workers.storage.set_aside import set_aside
from banditsweep.workers.storage.untrusted_files import NotARegularFile, read_head

# Tracking URI schemes MLflow knows (plugins add their own through the `mlflow.tracking_store`
# entry points); a bare path is a local file store.
TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "file", "databricks")
TRACKING_URI_ENV_VAR = "MLFLOW_TRACKING_URI"


def given_tracking_uri(uri: str | None) -> str | None:
    """The URI the user gave: ``--mlflow-uri``, else ``$MLFLOW_TRACKING_URI``; None: the default."""
    return uri or os.environ.get(TRACKING_URI_ENV_VAR) or None


def resolve_tracking_uri(uri: str | None, results_root: str | Path) -> str:
    """``--mlflow-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///<results root>/mlflow.db``;
    relative SQLite paths become absolute so that every process (and the report later) sees the
    same store."""
    uri = given_tracking_uri(uri) or f"sqlite:///{Path(results_root).resolve() / MLFLOW_DB}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return with_installed_driver(uri)


# Where a local SQLite store's artifacts go instead of next to the database: a store staged on a
# node's local disk for a batch job (cluster-slurm.sbatch) keeps its artifacts in the results root
# on the shared filesystem, where the store is copied back to when the job ends.
ARTIFACTS_ENV_VAR = "BANDITSWEEP_MLFLOW_ARTIFACTS"


def chosen_artifact_root() -> str:
    """``$BANDITSWEEP_MLFLOW_ARTIFACTS`` of this process as an absolute file URI ("": not set)."""
    chosen = os.environ.get(ARTIFACTS_ENV_VAR)
    return Path(chosen).expanduser().resolve().as_uri() if chosen else ""


def local_artifact_root(uri: str, results_root: str | Path | None = None, chosen: str = "") -> str | None:
    """Where a new experiment's artifacts go when no tracking server chooses: ``chosen`` (the command's
    :func:`chosen_artifact_root`, handed to the process that creates the experiment), else this
    process's ``$BANDITSWEEP_MLFLOW_ARTIFACTS``; else, for a local SQLite store, next to the database
    (``mlartifacts/``); for a database server named directly (``postgresql://``, ``mysql://``,
    ``mssql://``), the results root's ``mlartifacts/`` (MLflow's own default, ``./mlruns``, is
    whatever folder the run was started from). A tracking server chooses its own artifact store (None)."""
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in ("sqlite", "postgresql", "mysql", "mssql"):
        return None
    chosen = chosen or chosen_artifact_root()
    if chosen:
        return chosen
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / MLFLOW_ARTIFACTS).as_uri()
    if results_root is not None:
        return (Path(results_root).resolve() / MLFLOW_ARTIFACTS).as_uri()
    return None


def tracking_schemes() -> list[str]:
    return [*TRACKING_SCHEMES, *(entry.name for entry in entry_points(group="mlflow.tracking_store"))]


def check_tracking_uri(uri: str, source: str, results_root: Path, writing: bool) -> None:
    """``uri`` has a scheme MLflow knows, and a local store's directory exists (and, for a command
    that writes, may be written): nothing is created for it. ``source`` names where it came from."""
    schemes = tracking_schemes()
    allowed = ("allowed: http(s)://HOST:PORT, sqlite:///PATH, postgresql://, mysql://, mssql://, file:///PATH, "
               "databricks" + "".join(f", {name}" for name in schemes[len(TRACKING_SCHEMES):]))
    try:
        parts = urlsplit(uri)
        _ = parts.port   # a port that is not a number from 0 to 65535 raises here
    except ValueError as error:
        raise InputError(f"{source}: not a valid URI ({error}); {allowed}") from None
    scheme = parts.scheme.lower()
    base = scheme.split("+", 1)[0]
    if not scheme:
        # A bare word or path would be a file store MLflow refuses: the sweep ran with MLflow left out.
        raise InputError(f"{source}: no scheme (a URI starts with one, e.g. sqlite:///{uri}); {allowed}")
    if base not in schemes and scheme not in schemes:
        raise InputError(f"{source}: unknown scheme {_show(scheme)}; {allowed}")
    if base in ("http", "https") and not parts.hostname:
        raise InputError(f"{source}: no host; give e.g. http://127.0.0.1:5000")
    if base in ("http", "https") and parts.port == 0:
        raise InputError(f"{source}: port 0; a port is 1-65535")
    if base in DRIVERS:
        with_installed_driver(uri, source)
    if base == "file" and not file_store_allowed():
        raise InputError(f"{source}: this MLflow refuses file stores (file:///PATH) unless MLFLOW_ALLOW_FILE_STORE=true; "
                         f"give sqlite:///PATH/mlflow.db, or set MLFLOW_ALLOW_FILE_STORE=true")
    if base == "sqlite":
        if not uri.startswith("sqlite:///") or uri[len("sqlite:///"):] in ("", ":memory:"):
            raise InputError(f"{source}: no database file; give sqlite:///PATH/mlflow.db (an absolute PATH "
                             f"starts with a fourth slash)")
        database = Path(uri[len("sqlite:///"):]).expanduser().resolve()
    elif base in ("", "file"):
        database = Path(urlsplit(uri).path if base == "file" else uri).expanduser().resolve()
    else:
        return
    directory = database.parent
    if directory == results_root and not os.path.lexists(directory):
        return   # the results root, made by the command
    if not os.path.isdir(directory):
        existing = first_existing(directory)
        what = (f"{existing} is a file, not a directory" if not os.path.isdir(existing)
                else f"directory {directory} does not exist")
        raise InputError(f"{source}: {what}; create it first or choose another location (nothing is created "
                         f"for an explicit tracking URI)")
    if os.path.isdir(database) and base == "sqlite":
        raise InputError(f"{source}: {database} is a directory, not a database file; give sqlite:///PATH/mlflow.db")
    if base == "sqlite":
        refuse_if_not_a_store(uri[len("sqlite:///"):], source)
        refuse_another_schema(uri[len("sqlite:///"):], source)
    if writing and not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{source}: {directory} is not writable ({why_not_writable(directory)})")


def _show(value: str) -> str:
    return repr(value) if len(value) <= 80 else repr(value[:77] + "...")


def file_store_allowed() -> bool:
    """Whether the installed MLflow opens a file store (since 3.x only with MLFLOW_ALLOW_FILE_STORE)."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:
        return True   # an MLflow from before the variable: file stores open
    return bool(MLFLOW_ALLOW_FILE_STORE.get())


def check_tracking_server(uri: str) -> None:
    """A tracking server that does not answer is a clear error in seconds, not minutes of retries;
    a local SQLite URI naming a file that is not an MLflow store is refused before anything runs."""
    path = sqlite_path(uri)
    if path is not None:
        refuse_if_not_a_store(path)
        return
    if urlsplit(uri).scheme.lower().split("+", 1)[0] in DRIVERS:
        refuse_another_database_schema(uri)
        return
    if not uri.startswith(("http://", "https://")):
        return
    pool_size_set()   # the sink's HTTP pool: a bad setting stops the run here, not in the mirror
    shown = redacted(uri)
    shown = shown if len(shown) <= 200 else shown[:199] + "…"
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5).close()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise InputError(f"--mlflow-uri: the MLflow tracking server at {shown} does not answer ({reason}); start it, "
                         f"or run with --sink none (Parquet only) and `banditsweep sync-mlflow SPEC` later") from None
    check_login(uri, shown)


def mirror_plan(uri: str, requested: str, trials: int, cells: int) -> list[str]:
    """What ``plan`` says of the MLflow mirror: the store, what it will get (``requested``: the
    spec's ``mlflow_runs``) and what that costs it. A tracking server is timed as the sink will time
    it when it opens (options.run_mode)."""
    shown = redacted(uri)
    server = uri.startswith(("http://", "https://"))
    seconds = None
    if server:
        try:
            seconds = server_request_seconds(uri)
        except urllib.error.HTTPError as error:
            why = {401: ": the login is missing or wrong", 403: ": the login may not read experiments"}.get(error.code, "")
            return [f"MLflow: the tracking server at {shown} refuses a request ({error.code}{why}): `run` refuses "
                    "to start until it accepts it (--sink none runs without it; `sync-mlflow` catches up)"]
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            return [f"MLflow: the tracking server at {shown} does not answer a request now ({reason}): `run` "
                    "refuses to start until it does (--sink none runs without it; `sync-mlflow` catches up)"]
    mode = run_mode(requested, trials, seconds)
    per_cell = f"{cells:,} run(s) per cell, written when the run ends"
    per_trial = f"{trials:,} run(s) per trial"
    what = {"trials": per_trial, "cells": per_cell, "both": f"{per_trial} and {per_cell}"}[mode]
    if not server:
        return [f"MLflow: {what}, to {shown} (written in bulk transactions, a few seconds at most)"]
    lines = [f"MLflow: the tracking server at {shown} took {seconds * 1000:.0f} ms a request"]
    if mode in ("trials", "both"):
        lines.append(f"MLflow: {what}: about {trial_runs_seconds(trials, seconds):.0f} s of requests "
                     f"({REQUESTS_PER_TRIAL_RUN} a run), written beside the trials at the lowest CPU priority; "
                     "what is left when they end is written then")
    else:
        lines.append(f"MLflow: {what}" + (f" (runs per trial would be about {trial_runs_seconds(trials, seconds):.0f} s "
                                          "of requests: too many for this server; `--set mlflow_runs=trials` asks "
                                          "for them)" if requested == "auto" else ""))
    return lines


def database_in(folder: Path, uri: str) -> Path | None:
    """The SQLite database of ``uri`` when it lies in ``folder`` (a sweep's folder would then hold
    the MLflow store, and a run would move it with its results); else None."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri[len("sqlite:///"):]).expanduser().resolve()
    return database if database == folder or folder in database.parents else None


def sqlite_path(tracking_uri: str) -> str | None:
    """The database file of a local SQLite store (None for any other store)."""
    return tracking_uri[len("sqlite:///"):] if tracking_uri.startswith("sqlite:///") else None


@contextmanager
def store_setup_lock(tracking_uri: str):
    """Held while a local SQLite store is opened: the first process to open a new store creates its
    tables (MLflow's migrations), and two doing that at once fail ("Online migration expected to
    match one row"). An OS lock (flock) on the database file itself, so it ends with the process;
    SQLite's own locks are of another kind and do not interact with it.

    Under the lock (so never while another process creates it) a store MLflow cannot open because
    its creation was cut short (the process killed, the disk full) is moved aside and created anew:
    the context yields one line saying so, else None."""
    path = sqlite_path(tracking_uri)
    if path is None or not os.path.isdir(os.path.dirname(path) or "."):
        yield None   # not a local SQLite file, or one MLflow will refuse anyway (with its own error)
        return
    refuse_if_not_a_store(path)
    handle = _lock(path)
    try:
        note = None
        problem = store_problem(path)
        if problem is not None:
            aside = move_aside(path)
            fresh = _lock(path)   # the new (empty) file: MLflow creates its tables under this lock
            _unlock(handle)
            handle = fresh
            note = (f"the MLflow store {path} could not be opened ({problem}: its creation was cut short, or the "
                    f"disk filled); moved aside to {aside} (its data kept there) and created anew; a run restores "
                    "its sweep's runs from the Parquet results, `banditsweep sync-mlflow SPEC` those of any sweep")
        yield note
    finally:
        _unlock(handle)


class NotAStoreError(InputError):
    """The file a tracking URI names is something else than an MLflow store (a typo, a hostile
    ``$MLFLOW_TRACKING_URI``): it is never written to, moved or replaced."""


def refuse_if_not_a_store(path: str, source: str = "--mlflow-uri") -> None:
    """Raise :class:`NotAStoreError` naming ``source`` when the file at ``path`` is not an MLflow store."""
    what = foreign_file(path)
    if what:
        raise NotAStoreError(f"{source}: the MLflow store {path} is {what}: banditsweep leaves it as it is; give "
                             "--mlflow-uri (or $MLFLOW_TRACKING_URI) the path of an MLflow store or of a new file")


def foreign_file(path: str) -> str:
    """What the file at ``path`` is when it is neither absent, empty, nor an SQLite database with at
    least one of MLflow's tables (or none yet): "not a regular file", "not an SQLite database", "an
    SQLite database of something else (tables: ...)"; "" when it may be a store. A store whose
    creation was cut short holds MLflow's first tables; a file that never held them is not one."""
    if not os.path.lexists(path):
        return ""
    try:   # a link is judged by what it leads to: the user named the store
        header = read_head(path, 16, follow_links=True)
    except NotARegularFile:
        return "not a regular file (a folder, a device, or a link to one)"
    except OSError:
        return ""   # not readable: MLflow's own error stands
    if not header:
        return ""
    if header != b"SQLite format 3\x00":
        return "not an SQLite database"
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=20)
        try:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            connection.close()
    except sqlite3.Error:
        return ""   # damaged or busy: store_problem judges it
    if not tables or tables & (MLFLOW_TABLES | {"alembic_version"}):
        return ""
    listed = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    return f"an SQLite database of something else (tables: {listed})"


# Tables of MLflow's first schema: a store cut short while being created holds some of them.
MLFLOW_TABLES = frozenset({"experiments", "runs", "metrics", "params", "tags", "experiment_tags",
                           "latest_metrics", "registered_models", "model_versions"})


def _lock(path: str):
    """The file at ``path``, opened (created if missing) and locked. A waiter whose file was moved
    aside meanwhile (a broken store set aside) locks the new file instead."""
    while True:
        handle = open(path, "ab")
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            held, there = os.fstat(handle.fileno()), os.stat(path)
            if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino):
                return handle
        except FileNotFoundError:
            pass
        _unlock(handle)


def _unlock(handle) -> None:
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


def store_problem(path: str) -> str | None:
    """Why MLflow cannot open the SQLite store at ``path`` (one line), or None: it can (a new or
    empty file, a current store, an older one MLflow migrates), or it cannot be told now (the file
    busy or unreadable: MLflow's own error then stands). Called under the setup lock."""
    try:
        header = read_head(path, 16, follow_links=True)
    except OSError:
        return None
    if not header:
        return None   # new: MLflow creates its tables
    if header != b"SQLite format 3\x00":
        return "not an SQLite database"
    try:
        connection = sqlite3.connect(path, timeout=20, isolation_level=None)
        try:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            revision = (connection.execute("SELECT version_num FROM alembic_version").fetchone()
                        if "alembic_version" in tables else None)
        finally:
            connection.close()
    except sqlite3.OperationalError:
        return None   # locked for longer than the timeout, or unreadable: not for us to judge
    except sqlite3.DatabaseError as error:   # "database disk image is malformed", "file is not a database"
        return f"{error}"
    revision = revision[0] if revision else None
    if not tables - {"alembic_version"}:
        return None   # no tables yet: MLflow creates them all
    from mlflow.store.db import utils

    head = utils._get_latest_schema_revision()
    if revision == head and set(utils.Base.metadata.tables) <= tables:
        return None   # current and whole (the cheap answer for every store but a broken or older one)
    if revision is not None and revision not in _known_revisions():
        return None   # made by a newer MLflow: its own message says what to do
    return _migration_problem(path)


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory
    from mlflow.store.db import utils

    return {script.revision for script in ScriptDirectory.from_config(utils._get_alembic_config("")).walk_revisions()}


def _migration_problem(path: str) -> str | None:
    """Whether MLflow brings a copy of the store to its current schema with every table, as it does
    an older store it opens (the copy in the same folder; the store is not touched). A store whose
    creation was cut short fails there: its schema is ahead of its recorded revision ("table ...
    already exists") or lacks tables the revision promises."""
    import sqlalchemy
    from mlflow.store.db import utils

    copy = f"{path}.check-{os.getpid()}"
    quiet = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
    levels = [logger.level for logger in quiet]
    engine = None
    try:
        source, target = sqlite3.connect(path, timeout=20), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        for logger in quiet:
            logger.setLevel(logging.WARNING)
        engine = sqlalchemy.create_engine(f"sqlite:///{copy}")
        utils._initialize_tables(engine)   # what MLflow does with a store that lacks tables
        if not utils._all_tables_exist(engine):
            return "tables missing after MLflow's migrations"
        if utils._get_schema_version(engine) != utils._get_latest_schema_revision():
            return f"schema revision {utils._get_schema_version(engine)} after MLflow's migrations"
        return None
    except Exception as error:
        cause = getattr(error, "orig", None) or error
        if isinstance(cause, OSError) or (isinstance(cause, sqlite3.OperationalError) and re.search(
                r"full|locked|busy|I/O|unable to open|readonly", f"{cause}")):
            return None   # the copy could not be made or written here: nothing learnt
        return f"{type(cause).__name__}: {f'{cause}'.splitlines()[0][:200] if f'{cause}' else ''}"
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
        if engine is not None:
            engine.dispose()
        for leftover in (copy, f"{copy}-journal"):
            with suppress(FileNotFoundError):
                os.remove(leftover)


def move_aside(path: str) -> str:
    """Move the store (and SQLite's journal files, which belong to it) to ``<path>.broken-<time>``."""
    name = f"{os.path.basename(path)}.broken-{time.strftime('%Y%m%d-%H%M%S')}"
    return str(set_aside(path, os.path.dirname(path) or ".", name, companions=SQLITE_SIDE_FILES))
