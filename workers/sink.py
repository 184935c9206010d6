"""The single writer of a sweep's results: MLflow runs and Parquet files.

An SQLite MLflow store must never be written by two processes, and Parquet files are never
appended, so exactly one :class:`ResultSink` (a Ray actor pinned to the driver's node, or a plain
object in tests) owns both. Trial actors send it small messages: a trial started, a thinned regret
point every ``log_every`` rounds, the trial's arrays when it ends.

Order of writes when a trial ends, so that nothing is lost or duplicated at any crash point:
curves file -> journal record -> trials table -> MLflow run FINISHED. At the start of every
``run`` the sink reconciles: a journal record without a FINISHED MLflow run gets its run rebuilt
from the Parquet files, and runs of trials about to run again (left RUNNING by a crash, or FAILED)
are deleted, so each trial id has exactly one FINISHED child run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from banditsweep.workers.store import FINISHED, SweepStore

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
TRIALS_TABLE_MIN_INTERVAL = 2.0  # seconds between rebuilds of trials.parquet while trials stream in


def resolve_tracking_uri(uri: str | None) -> str:
    """``--mlflow-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``; relative SQLite
    paths become absolute so that every process (and the report later) sees the same store."""
    import os

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return uri


def local_artifact_root(uri: str) -> str | None:
    """Artifacts of a local SQLite store go next to the database (``mlartifacts/``); a tracking
    server chooses its own artifact store (None)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").as_uri()
    return None


def get_experiment_id(client, sweep: str, tracking_uri: str) -> str:
    experiment = client.get_experiment_by_name(sweep)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    return client.create_experiment(sweep, artifact_location=local_artifact_root(tracking_uri))


def child_runs_by_trial(client, experiment_id: str) -> dict[str, list]:
    """Every (non-deleted) child run of the experiment, grouped by its ``trial_id`` tag."""
    from mlflow.entities import ViewType

    runs: dict[str, list] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string="tags.kind = 'trial'",
                                  run_view_type=ViewType.ACTIVE_ONLY, max_results=5000, page_token=token)
        for run in page:
            runs.setdefault(run.data.tags.get("trial_id"), []).append(run)
        token = page.token
        if not token:
            return runs


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:6000]


class ResultSink:
    def __init__(self, results_root: str, sweep: str, tracking_uri: str, command: str = "run"):
        from mlflow.tracking import MlflowClient

        self.store = SweepStore.for_sweep(results_root, sweep)
        self.store.root.mkdir(parents=True, exist_ok=True)
        self.sweep = sweep
        self.client = MlflowClient(tracking_uri)
        self.experiment_id = get_experiment_id(self.client, sweep, tracking_uri)
        self.command = command
        self._parent_run_id: str | None = None
        self.records = self.store.journal()
        self.open_runs: dict[str, str] = {}
        self.closed_runs: dict[str, str] = {}  # trial id -> run ended by this sink
        self._table_dirty = False
        self._table_written_at = 0.0

    @property
    def parent_run_id(self) -> str:
        """The parent run of this invocation, created when the first child run needs it."""
        if self._parent_run_id is None:
            self._parent_run_id = self.client.create_run(
                self.experiment_id, run_name=f"{self.sweep} {time.strftime('%Y-%m-%d %H:%M:%S')}",
                tags={"kind": "sweep", "sweep": self.sweep, "command": self.command},
            ).info.run_id
        return self._parent_run_id

    # -- start of a run ----------------------------------------------------------------------

    def reconcile(self, pending_trial_ids: list[str]) -> dict[str, int]:
        """Make MLflow agree with the journal; clear runs of trials about to run. Returns counts."""
        runs = child_runs_by_trial(self.client, self.experiment_id)
        pending = set(pending_trial_ids)
        deleted = rebuilt = 0
        for trial_id, trial_runs in runs.items():
            record = self.records.get(trial_id)
            if trial_id in pending:
                doomed = trial_runs  # it runs again now: a fresh run replaces whatever is there
            elif record is None:
                doomed = []  # a trial of another variant of this sweep that never ended: its own run fixes it
            else:
                wanted = "FINISHED" if record["status"] == FINISHED else "FAILED"
                matching = [r for r in trial_runs if r.info.status == wanted]
                doomed = [r for r in trial_runs if not matching or r is not matching[0]]
            for run in doomed:
                self.client.delete_run(run.info.run_id)
                deleted += 1
        for trial_id, record in self.records.items():
            if trial_id in pending or record["status"] != FINISHED:
                continue
            if any(r.info.status == "FINISHED" for r in runs.get(trial_id, [])):
                continue
            curve = self.store.read_curves([trial_id])
            self._start_run(record)
            self._log_curve_points(trial_id, curve["t"].to_numpy(), curve["cum_regret"].to_numpy(),
                                   record.get("log_every", 100))
            self._finish_run(record)
            rebuilt += 1
        self.write_trials_table(force=True)
        return {"deleted_runs": deleted, "rebuilt_runs": rebuilt}

    # -- trial lifecycle ---------------------------------------------------------------------

    def _start_run(self, record: dict[str, Any]) -> str:
        from mlflow.entities import Param

        run = self.client.create_run(
            self.experiment_id, run_name=f"{record['label']} | {record['environment']} | seed {record['seed']}",
            tags={"mlflow.parentRunId": self.parent_run_id, "kind": "trial", "trial_id": record["trial_id"],
                  "sweep": self.sweep, "status": "running"},
        )
        run_id = run.info.run_id
        params = {"algorithm": record["algorithm"], "label": record["label"],
                  "environment": record["environment"], "seed": record["seed"], "horizon": record["horizon"],
                  **{f"env.{k}": v for k, v in record["environment_config"].items()},
                  **record["params"]}
        items = [Param(k, _param_value(v)) for k, v in params.items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=items[start:start + MAX_PARAMS_PER_BATCH])
        self.open_runs[record["trial_id"]] = run_id
        return run_id

    def start_trial(self, record: dict[str, Any]) -> str:
        """A trial starts (again): any run of an earlier attempt of it is deleted — also a finished
        one, when a worker died after the trial ended but before it could report back."""
        for runs in (self.open_runs, self.closed_runs):
            previous = runs.pop(record["trial_id"], None)
            if previous is not None:
                self.client.delete_run(previous)
        return self._start_run(record)

    def log_progress(self, trial_id: str, points: list[tuple[int, float]]) -> None:
        from mlflow.entities import Metric

        run_id = self.open_runs.get(trial_id)
        if run_id is None:
            return
        now = int(time.time() * 1000)
        metrics = [Metric("regret", float(value), now, int(t)) for t, value in points]
        for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=metrics[start:start + MAX_METRICS_PER_BATCH])

    def _log_curve_points(self, trial_id: str, t: np.ndarray, cum_regret: np.ndarray, every: int) -> None:
        keep = (t % every == 0) | (t == t.max())
        self.log_progress(trial_id, list(zip(t[keep].tolist(), cum_regret[keep].tolist())))

    def _finish_run(self, record: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        run_id = self.open_runs.pop(record["trial_id"])
        self.closed_runs[record["trial_id"]] = run_id
        now = int(time.time() * 1000)
        if record["status"] == FINISHED:
            values = {"final_regret": record["final_regret"], "seconds_per_round": record["seconds_per_round"],
                      "wall_seconds": record["wall_seconds"],
                      **{f"diag.{k}": v for k, v in (record.get("diagnostics") or {}).items()}}
            metrics = [Metric(k, float(v), now, 0) for k, v in values.items()
                       if isinstance(v, (int, float)) and np.isfinite(v)]
            for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
                self.client.log_batch(run_id, metrics=metrics[start:start + MAX_METRICS_PER_BATCH])
        else:
            self.client.set_tag(run_id, "error", (record.get("error") or "")[:5000])
        self.client.set_tag(run_id, "status", record["status"])
        self.client.set_terminated(run_id, "FINISHED" if record["status"] == FINISHED else "FAILED")

    def finish_trial(self, record: dict[str, Any], arrays: dict[str, np.ndarray] | None) -> None:
        """A trial ended (``record['status']`` finished or failed). Idempotent per trial id."""
        if arrays is not None:
            self.store.write_curve(record["trial_id"], arrays)
        record = {**record, "finished_at": time.time()}
        self.store.write_journal(record)
        self.records[record["trial_id"]] = record
        self._table_dirty = True
        self.write_trials_table()
        if record["trial_id"] not in self.open_runs:
            self._start_run(record)
        self._finish_run(record)

    def write_trials_table(self, force: bool = False) -> None:
        """Rebuild trials.parquet from the journal (throttled while trials stream in)."""
        if not force and (not self._table_dirty or time.time() - self._table_written_at < TRIALS_TABLE_MIN_INTERVAL):
            return
        if self.records:
            self.store.write_trials_table(list(self.records.values()))
        self._table_dirty = False
        self._table_written_at = time.time()

    def close(self, status: str = "FINISHED", summary: dict[str, float] | None = None) -> str | None:
        """Flush the trials table, close left-over runs and the parent run; returns the parent id
        (None when this invocation logged nothing to MLflow)."""
        self.write_trials_table(force=True)
        for trial_id in list(self.open_runs):
            run_id = self.open_runs.pop(trial_id)
            self.client.set_terminated(run_id, "KILLED")
        if self._parent_run_id is None:
            return None
        if summary:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            self.client.log_batch(self.parent_run_id,
                                  metrics=[Metric(k, float(v), now, 0) for k, v in summary.items()])
        self.client.set_terminated(self.parent_run_id, status)
        return self.parent_run_id

    def ping(self) -> bool:
        return True
