"""What lives directly in a results root besides the sweeps' folders, named in one place: the
default MLflow store and what SQLite and MLflow put next to it. A sweep may not be named like any
of them (its folder would take the store's path). Kept free of heavy imports: the spec validator
reads it."""

from __future__ import annotations

MLFLOW_DB = "mlflow.db"            # the default tracking store: sqlite:///<results root>/mlflow.db
MLFLOW_ARTIFACTS = "mlartifacts"   # a local SQLite store's artifacts, next to the database
# SQLite's rollback journal, write-ahead log and shared memory beside a database.
SQLITE_SIDE_FILES = ("-journal", "-wal", "-shm")

RESULTS_ROOT_ENTRIES = (MLFLOW_DB, *(MLFLOW_DB + suffix for suffix in SQLITE_SIDE_FILES), MLFLOW_ARTIFACTS)


def taken_by_the_results_root(name: str) -> bool:
    """Whether a sweep folder called ``name`` would collide with an entry of the results root
    (compared without case: a case-insensitive file system would collide too)."""
    return name.casefold() in {entry.casefold() for entry in RESULTS_ROOT_ENTRIES}
