"""Many MLflow runs in one transaction, for a store that is a database MLflow opens itself (SQLite).

MLflow's client writes a run in at least three transactions (create it, ``log_batch``, terminate
it); on SQLite each is a commit with its fsyncs, ~10-30 ms, so a mirror of a sweep that finishes
dozens of short trials a second falls behind by minutes. Where the tracking store is MLflow's own
SQLAlchemy store, :func:`write_runs` writes a whole list of runs (new or open, with their tags,
parameters, metric points and latest values, and their end) as one transaction of bulk inserts
through MLflow's own table models; the rows are those its API writes, so the UI, ``search_runs``
and ``get_metric_history`` read them as any others. A failed transaction writes nothing: the
mirror hands the same list again.

A tracking server (``http://...``) has no such call: there, runs are written through the client
(workers.mirrors.mlflow.writers, where the sink's writer is chosen).
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field

from mlflow.entities import Metric

# Runs per transaction: a few hundred keep one commit short (another process may wait on SQLite's
# lock) while making the per-commit cost negligible.
RUNS_PER_TRANSACTION = 500
TERMINAL = ("FINISHED", "FAILED", "KILLED")


@dataclass
class RunWrite:
    """What one run gets: a new run when ``run_id`` is None, else more for an existing one."""

    run_id: str | None
    name: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    status: str = "RUNNING"           # a terminal status also sets the end time
    parent_run_id: str | None = None  # for a new run (the tag mlflow.parentRunId)


# The columns write_runs fills, per MLflow table model: checked against the installed MLflow's
# models before the bulk writer is used (bulk_mismatch), so that another MLflow's tables fall back to
# its public client rather than failing (or writing rows its API would not) at the first trial.
BULK_COLUMNS = {
    "SqlRun": ("run_uuid", "name", "source_type", "source_name", "entry_point_name", "user_id", "status",
               "start_time", "end_time", "deleted_time", "source_version", "lifecycle_stage", "experiment_id",
               "artifact_uri"),
    "SqlTag": ("key", "value", "run_uuid"),
    "SqlParam": ("key", "value", "run_uuid"),
    "SqlMetric": ("key", "value", "timestamp", "step", "is_nan", "run_uuid"),
    "SqlLatestMetric": ("key", "value", "timestamp", "step", "is_nan", "run_uuid"),
}


def bulk_mismatch() -> str | None:
    """Why the installed MLflow's table models do not take write_runs' rows (a model or a column
    missing, or a required column it does not fill); None where they do."""
    try:
        from mlflow.store.tracking.dbmodels import models
    except ImportError as error:
        return f"MLflow's table models cannot be imported ({error})"
    for name, written in BULK_COLUMNS.items():
        model = getattr(models, name, None)
        if model is None or not hasattr(model, "__table__"):
            return f"MLflow has no table model {name}"
        columns = model.__table__.columns
        missing = [column for column in written if column not in columns]
        if missing:
            return f"{name} has no column {', '.join(missing)}"
        required = [column.name for column in columns if column.name not in written and not column.nullable
                    and column.default is None and column.server_default is None and column.autoincrement is not True]
        if required:
            return f"{name} requires column {', '.join(required)}, which the bulk writer does not fill"
    if not hasattr(getattr(models, "SqlExperiment", None), "artifact_location"):
        return "SqlExperiment has no artifact_location"
    return None


def sql_store(client):
    """The client's store when it is MLflow's SQLAlchemy store (SQLite, or a database URI), else None."""
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    except ImportError:   # an MLflow without it: the client path serves
        return None
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    return store if isinstance(store, SqlAlchemyStore) else None


def write_runs(store, experiment_id: str, writes: list[RunWrite]) -> list[str]:
    """Apply ``writes`` in one transaction; the run id of each (new runs get theirs here)."""
    from mlflow.store.tracking.dbmodels.models import (SqlExperiment, SqlLatestMetric, SqlMetric, SqlParam, SqlRun,
                                                       SqlTag)

    now = int(time.time() * 1000)
    user = _user()
    run_ids: list[str] = []
    runs, tags, params, metrics = [], [], [], []
    latest: dict[tuple[str, str], dict] = {}
    with store.ManagedSessionMaker(read_only=False) as session:
        experiment = session.query(SqlExperiment).filter(SqlExperiment.experiment_id == int(experiment_id)).one()
        existing = [w.run_id for w in writes if w.run_id is not None]
        open_runs = {run.run_uuid: run for run in session.query(SqlRun).filter(SqlRun.run_uuid.in_(existing))} \
            if existing else {}
        for write in writes:
            ended = now if write.status in TERMINAL else None
            if write.run_id is None:
                run_id = uuid.uuid4().hex
                runs.append({"run_uuid": run_id, "name": write.name, "source_type": "UNKNOWN", "source_name": "",
                             "entry_point_name": "", "user_id": user, "status": write.status, "start_time": now,
                             "end_time": ended, "deleted_time": None, "source_version": "",
                             "lifecycle_stage": "active", "experiment_id": int(experiment_id),
                             "artifact_uri": f"{experiment.artifact_location.rstrip('/')}/{run_id}/artifacts"})
                run_tags = {"mlflow.runName": write.name, **write.tags}
                if write.parent_run_id:
                    run_tags["mlflow.parentRunId"] = write.parent_run_id
            else:
                run_id = write.run_id
                run = open_runs.get(run_id)
                if run is None:
                    raise LookupError(f"MLflow run {run_id} is not in the store")
                if write.status != run.status:
                    run.status = write.status
                    run.end_time = ended
                run_tags = write.tags
            run_ids.append(run_id)
            if write.run_id is not None and run_tags:   # tags of an open run may change (status)
                session.query(SqlTag).filter(SqlTag.run_uuid == run_id, SqlTag.key.in_(list(run_tags))).delete(
                    synchronize_session=False)
            tags += [{"key": k, "value": str(v)[:8000], "run_uuid": run_id} for k, v in run_tags.items()]
            params += [{"key": k, "value": str(v)[:8000], "run_uuid": run_id} for k, v in write.params.items()]
            seen = set()
            for metric in write.metrics:
                nan = math.isnan(metric.value)
                row = {"key": metric.key, "value": 0.0 if nan else float(metric.value), "timestamp": metric.timestamp,
                       "step": int(metric.step), "is_nan": nan, "run_uuid": run_id}
                identity = (row["key"], row["timestamp"], row["step"], row["value"], nan)
                if identity in seen:
                    continue
                seen.add(identity)
                metrics.append(row)
                key = (run_id, metric.key)
                if key not in latest or _newer(row, latest[key]):
                    latest[key] = row
        session.flush()
        if runs:
            session.execute(SqlRun.__table__.insert(), runs)
        for table, rows in ((SqlTag, tags), (SqlParam, params), (SqlMetric, metrics)):
            if rows:
                session.execute(table.__table__.insert(), rows)
        if latest:
            _merge_latest(session, SqlLatestMetric, latest)
    return run_ids


def _user() -> str:
    """The user MLflow's client records with the runs it creates."""
    try:
        from mlflow.tracking.context.default_context import _get_user
        return _get_user() or "unknown"
    except ImportError:
        return "unknown"


def _newer(row: dict, than: dict) -> bool:
    """MLflow's rule for a run's latest value of a metric: the largest (step, timestamp, value)."""
    return (row["step"], row["timestamp"], row["value"]) > (than["step"], than["timestamp"], than["value"])


def _merge_latest(session, SqlLatestMetric, latest: dict[tuple[str, str], dict]) -> None:
    run_ids = sorted({run_id for run_id, _ in latest})
    stored = {(m.run_uuid, m.key): m for m in
              session.query(SqlLatestMetric).filter(SqlLatestMetric.run_uuid.in_(run_ids))}
    fresh = []
    for key, row in latest.items():
        current = stored.get(key)
        if current is None:
            fresh.append(row)
        elif _newer(row, {"step": current.step, "timestamp": current.timestamp, "value": current.value}):
            current.value, current.timestamp, current.step, current.is_nan = (
                row["value"], row["timestamp"], row["step"], row["is_nan"])
    session.flush()
    if fresh:
        session.execute(SqlLatestMetric.__table__.insert(), fresh)
