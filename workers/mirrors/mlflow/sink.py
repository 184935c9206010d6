"""The MLflow mirror of a sweep: experiment = sweep, one parent run per ``run`` command, one child
run per trial named by its label, grid point, environment and seed, with its parameters, tags
``trial_id``, ``status`` and ``group`` (the seeds of one cell: MLflow's Group-by aggregates them),
the stepped metric ``cum_regret/<environment>`` (the cumulative regret every ``log_every`` rounds, as
the Parquet column ``cum_regret``; a key per environment, so that a chart never mixes regrets of
different problems), the metrics ``final_regret`` and ``seconds_per_round``, and the single values
``wall_seconds`` and ``diag.*`` as parameters (so the chart view shows the curves).

A trial costs three store calls when it starts and ends between two deliveries of the mirror
(create the run, one ``log_batch`` of everything, close it); a long trial's run is created when it
starts and gets its streamed points as they come. Every run is keyed by ``trial_id``: :meth:`open`
makes MLflow agree with the journal before a run starts (a lost run is rebuilt from the Parquet
files; runs of trials about to run again, or left RUNNING by a crash, are deleted), so each trial
has exactly one FINISHED (or FAILED) child run.

At ten thousand trials one run per trial is more than the UI can browse. ``runs`` (the spec's
``mlflow_runs``, ``run --mlflow-runs``) chooses what MLflow gets: ``trials`` (one run per trial, as
above), ``cells`` (one run per cell, i.e. label x grid point x environment, holding its seeds' mean
final regret and its band, and the curves ``cum_regret_mean/<environment>`` / ``cum_regret_lower/...`` /
``cum_regret_upper/...``: mean and mean -/+ one standard deviation over the seeds, at the logged rounds),
or ``both``. Cell runs are written from the Parquet record when the run ends (and by ``sync-mlflow``),
replacing the store's earlier cell runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.entities import Metric, Param, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from banditsweep.workers.mirrors.mlflow.bulk import RUNS_PER_TRANSACTION, SERVER_CONCURRENCY, RunWrite, sql_store, write_runs
from banditsweep.workers.storage.record import FINISHED, TrialRecord, thinned_curve
from banditsweep.workers.mirrors.sinks import RUN_MODES, Points, SinkContext, store_id
from banditsweep.workers.mirrors.mlflow.tracking_store import local_artifact_root, sqlite_path, store_setup_lock

# A new SQLite store's creation logs its schema migrations at INFO ("Creating initial MLflow database
# tables...", alembic's steps) to the terminal of `report`, `sync-mlflow` or `ui`: not the user's concern.
for _chatty in ("mlflow.store.db.utils", "alembic"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)

# The experiment tag MLflow 3's UI chooses an experiment's first page by, and the kind of ours.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_DEVELOPMENT = "custom_model_development"
# The stepped metric: the cumulative regret, named as the Parquet column it mirrors (`regret` there is
# the per-round increment).
REGRET_METRIC = "cum_regret"
# MLflow's log_batch limits: 1000 entities in all, at most 100 params and 100 tags.
MAX_ENTITIES_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100


def get_experiment_id(client: MlflowClient, sweep: str, tracking_uri: str) -> str:
    experiment = client.get_experiment_by_name(sweep)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    try:
        return client.create_experiment(sweep, artifact_location=local_artifact_root(tracking_uri))
    except MlflowException:
        # Another process (a run of the same sweep into another results folder) created it first.
        experiment = client.get_experiment_by_name(sweep)
        if experiment is None:
            raise
        return experiment.experiment_id


def experiment_of(tracking_uri: str, sweep: str) -> tuple[str | None, str | None]:
    """The id of the sweep's experiment (None: there is none yet), and a line about the store when
    opening it meant setting a broken one aside (else None)."""
    with store_setup_lock(tracking_uri) as note:   # a new SQLite store gets its tables when the client opens it
        experiment = MlflowClient(tracking_uri).get_experiment_by_name(sweep)
    return (experiment.experiment_id if experiment is not None else None), note


def attach_report(tracking_uri: str, results_root: str, sweep: str, directory: Path) -> tuple[str | None, str | None]:
    """Attach the report files to the latest parent run of the store the report read (not of another
    results folder of the same sweep). Returns that run's id (None: there is none) and a line about
    the tracking store as :func:`experiment_of` does."""
    with store_setup_lock(tracking_uri) as note:
        client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(sweep)
    if experiment is None:
        return None, note
    run_id = latest_parent_run(client, experiment.experiment_id, store_id(results_root, sweep))
    if run_id is not None:
        client.log_artifacts(run_id, str(directory), artifact_path="report")
    return run_id, note


def search_all(client: MlflowClient, experiment_id: str, filter_string: str) -> list:
    """Every active run of the experiment matching ``filter_string`` (all pages)."""
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string,
                                  run_view_type=ViewType.ACTIVE_ONLY, max_results=5000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


def child_runs_by_trial(client: MlflowClient, experiment_id: str, store: str | None = None) -> dict[str, list]:
    """The (non-deleted) child runs of the experiment, of one store when ``store`` is given,
    grouped by their ``trial_id`` tag."""
    query = "tags.kind = 'trial'" + (f" and tags.store = '{store}'" if store else "")
    runs: dict[str, list] = {}
    for run in search_all(client, experiment_id, query):
        runs.setdefault(run.data.tags.get("trial_id"), []).append(run)
    return runs


def adopt_unmarked_runs(client: MlflowClient, experiment_id: str, store: str, trial_ids: set[str]) -> int:
    """Runs written before runs carried their store's id have no ``store`` tag: those of this
    store's trials become this store's (another store's trials are left as they are)."""
    adopted = 0
    for run in search_all(client, experiment_id, "tags.kind = 'trial'"):
        if "store" not in run.data.tags and run.data.tags.get("trial_id") in trial_ids:
            client.set_tag(run.info.run_id, "store", store)
            adopted += 1
    return adopted


def latest_parent_run(client: MlflowClient, experiment_id: str, store: str) -> str | None:
    """The newest parent run of this store (the run of the results a report reads)."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.kind = 'sweep' and tags.store = '{store}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def metric_name(text: str) -> str:
    """``text`` with the characters MLflow refuses in a metric name replaced by ``_``."""
    return re.sub(r"[^/\w.\- :]", "_", text)


def regret_metric(environment: str, curve: str = REGRET_METRIC) -> str:
    """The stepped metric of one environment (``cum_regret/classification:mushroom``): MLflow charts a
    metric key across runs, so one key per environment keeps regrets of different scales apart (and
    its chart view groups the keys under ``cum_regret``)."""
    return metric_name(f"{curve}/{environment}")


def best_final_regret(records) -> dict[str, float]:
    """Per environment, the lowest mean final regret over the seeds of one (label, grid point): the
    paper's tuning rule, as the parent run's summary (``best_final_regret.<environment>``)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for record in records:
        if record.status == FINISHED and record.final_regret is not None:
            cells.setdefault((record.environment, record.group or record.label), []).append(record.final_regret)
    best: dict[str, float] = {}
    for (environment, _), values in cells.items():
        key = metric_name(f"best_final_regret.{environment}")
        best[key] = min(best.get(key, math.inf), sum(values) / len(values))
    return best


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:6000]


def trial_params(record: TrialRecord) -> dict[str, Any]:
    return {"algorithm": record.algorithm, "label": record.label, "environment": record.environment,
            "seed": record.seed, "horizon": record.horizon,
            **{f"env.{k}": v for k, v in record.environment_config.items()}, **record.params}


def code_tags(record: TrialRecord) -> dict[str, str]:
    """The code a trial ran on and where (workers.provenance.code_identity), as tags: ``code_digest``, one
    ``code.<module>`` per module it reaches, one ``runtime.<fact>`` per library version, the CPU,
    device and threads; a trial recorded before trials carried their code says ``code_digest: unknown``."""
    tags = {"code_digest": record.code_digest or "unknown"}
    tags.update({_tag_key(f"code.{module}"): digest[:5000] for module, digest in record.code.items()})
    tags.update({_tag_key(f"runtime.{key}"): str(value)[:5000] for key, value in record.runtime.items()})
    if record.code_accepted:
        tags["code_accepted"] = json.dumps(record.code_accepted, sort_keys=True)[:5000]
    return tags


def _tag_key(name: str) -> str:
    """A tag name MLflow takes (letters, digits, ``_-./`` and spaces; at most 250 characters)."""
    return re.sub(r"[^\w./ -]", "_", name)[:250]


def final_metrics(record: TrialRecord) -> dict[str, float]:
    """The values worth a chart or a column in the compare view."""
    values = {"final_regret": record.final_regret, "seconds_per_round": record.seconds_per_round}
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and np.isfinite(v)}


def final_params(record: TrialRecord) -> dict[str, Any]:
    """Single values that are not worth a chart of their own (one bar each would bury the regret
    curve in the chart view): the trial's wall time and diagnostics, as parameters."""
    return {"wall_seconds": record.wall_seconds, **{f"diag.{k}": v for k, v in record.diagnostics.items()}}


class MLflowSink:
    def __init__(self, context: SinkContext):
        self.context = context
        self.mode = context.mlflow_runs if context.mlflow_runs in RUN_MODES else "trials"
        self.trial_runs = self.mode in ("trials", "both")
        # MlflowClient opens the store when it is built, and that is when a new SQLite store gets its
        # tables: inside the lock, like the experiment.
        with store_setup_lock(context.tracking_uri) as note:
            self.client = MlflowClient(context.tracking_uri)
            self.experiment_id = get_experiment_id(self.client, context.sweep, context.tracking_uri)
        self.notices = [note] if note else []   # for the user, once the sink is open
        # MLflow's own database store: many runs per transaction (workers.mirrors.mlflow.bulk); else the client.
        self.bulk_store = sql_store(self.client)
        self._parent_run_id: str | None = None
        self.open_runs: dict[str, str] = {}       # trial id -> run of its current attempt
        self.last_step: dict[str, int] = {}       # trial id -> last regret step logged to that run
        self.regret_keys: dict[str, str] = {}     # trial id -> its environment's regret metric
        # A call the mirror hands again after it failed part-way (a server that went away) must not
        # do twice what it did before: runs whose parameters are logged, trials whose run is closed
        # (with the attempt that ended: a trial ends once per run, and a start of that attempt or an
        # earlier one that comes after its end is late, never a new run), runs maybe made by a
        # create call that failed (the store may have made the run and lost the reply).
        self.described: set[str] = set()
        self.ended: dict[str, int] = {}
        self.unsure: set[str] = set()

    @staticmethod
    def prepare(context: SinkContext) -> None:
        """A new local SQLite store gets its tables now (MLflow's migrations: ~4 s), under the same
        lock the sink takes when it opens (workers.mirrors.prepare). Only a new one: an existing store,
        healthy or not, is left to the sink's opening, which says what it had to do to it."""
        path = sqlite_path(context.tracking_uri)
        if path is None or (os.path.exists(path) and os.path.getsize(path) > 0):
            return
        with store_setup_lock(context.tracking_uri):
            MlflowClient(context.tracking_uri)

    @property
    def parent_run_id(self) -> str:
        """The parent run of this invocation, created when the first child run needs it: it carries
        the spec (as a tag and as the artifact ``spec/``), the run's sweep-level settings and command line
        (as parameters: horizon, seeds, overrides, selection...), the code's commit and the store."""
        if self._parent_run_id is None:
            context = self.context
            tags = {"kind": "sweep", "sweep": context.sweep, "command": context.command,
                    "store": context.store_id, "results_root": context.results_root}
            if context.spec_path:
                tags.update({"spec": context.spec_path, "mlflow.source.name": context.spec_path})
            if context.source_commit:
                tags["mlflow.source.git.commit"] = context.source_commit
            self._parent_run_id = self.client.create_run(
                self.experiment_id, run_name=f"{context.sweep} {time.strftime('%Y-%m-%d %H:%M:%S')}", tags=tags,
            ).info.run_id
            if context.settings:
                self._log_batch(self._parent_run_id, params=context.settings)
            if context.spec_text:
                self.client.log_text(self._parent_run_id, context.spec_text,
                                     f"spec/{Path(context.spec_path).name or 'spec.yaml'}")
        return self._parent_run_id

    # ---- the Sink protocol ----------------------------------------------------------------------

    def open(self, records: dict[str, TrialRecord], pending: list[str]) -> dict[str, int]:
        store = self.context.store_id
        # MLflow 3's UI opens an experiment on its GenAI traces page unless the experiment says it is
        # model development: then on its runs, with the "Model training" charts.
        self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, MODEL_DEVELOPMENT)
        if self.context.spec_path:
            self.client.set_experiment_tag(
                self.experiment_id, "mlflow.note.content",
                f"Sweep {self.context.sweep} (spec {self.context.spec_path}); one parent run per `banditsweep "
                f"run`, one child run per trial; the record of truth is the Parquet store under "
                f"{self.context.results_root}/{self.context.sweep}.")
        if not self.trial_runs:   # cells only: the cell runs are written when the run ends
            self._kill_abandoned_parents()
            return {}
        pending_ids = set(pending)
        adopt_unmarked_runs(self.client, self.experiment_id, store, set(records) | pending_ids)
        self._kill_abandoned_parents()
        runs = child_runs_by_trial(self.client, self.experiment_id, store)
        deleted = 0
        for trial_id, trial_runs in runs.items():
            record = records.get(trial_id)
            if trial_id in pending_ids:
                doomed = trial_runs  # it runs again now: a fresh run replaces whatever is there
            elif record is None:
                doomed = []  # a trial of another variant of this sweep that never ended: its own run fixes it
            else:
                wanted = "FINISHED" if record.status == FINISHED else "FAILED"
                matching = [r for r in trial_runs if r.info.status == wanted]
                doomed = [r for r in trial_runs if not matching or r is not matching[0]]
            for run in doomed:
                self.client.delete_run(run.info.run_id)
                deleted += 1
        lost = [record for trial_id, record in records.items()
                if trial_id not in pending_ids and record.status == FINISHED
                and not any(r.info.status == "FINISHED" for r in runs.get(trial_id, []))]
        if lost:
            curves = self.context.store.read_curves([record.trial_id for record in lost])
            by_trial = {tid: frame for tid, frame in curves.groupby("trial_id")}
            self.trials_ended([(record, thinned_curve({"cum_regret": by_trial[record.trial_id]
                                                       .sort_values("t")["cum_regret"].to_numpy()},
                                                      record.log_every))
                               for record in lost if record.trial_id in by_trial])
        return {"deleted_runs": deleted, "rebuilt_runs": len(lost)}

    def _kill_abandoned_parents(self) -> None:
        """Parent runs left RUNNING by a driver that died (killed, out of memory, machine lost): only
        one run of a store goes on at a time (the run lock), so they are over."""
        for parent in search_all(self.client, self.experiment_id, f"tags.kind = 'sweep' and tags.store = "
                                 f"'{self.context.store_id}' and attributes.status = 'RUNNING'"):
            self.client.set_terminated(parent.info.run_id, "KILLED")

    def trials_started(self, records: list[TrialRecord]) -> None:
        if not self.trial_runs:
            return
        fresh = []
        for record in records:
            if self.ended.get(record.trial_id, -1) >= record.attempts:
                continue   # late (events come from the trial's actor and the driver, in no set order)
            previous = self.open_runs.get(record.trial_id)
            if previous is not None:   # a retry: the earlier attempt's run and points go
                self.client.delete_run(previous)
                del self.open_runs[record.trial_id]
            self.ended.pop(record.trial_id, None)
            fresh.append(record)
        if self.bulk_store is not None:
            for chunk in _chunks(fresh):
                run_ids = write_runs(self.bulk_store, self.experiment_id,
                                     [self._new_run(record, "running", "RUNNING", trial_params(record))
                                      for record in chunk])
                for record, run_id in zip(chunk, run_ids):
                    self._opened(record, run_id)
            return
        for record in fresh:
            run_id = self._create_run(record, "running")
            self._log_batch(run_id, params=trial_params(record))
            self._opened(record, run_id)

    def progress(self, points: dict[str, Points]) -> None:
        if not self.trial_runs:
            return
        updates = []
        for trial_id, new in points.items():
            run_id = self.open_runs.get(trial_id)
            if run_id is not None:
                updates.append((trial_id, run_id, self._regret_metrics(trial_id, new)))
        if self.bulk_store is not None:
            for chunk in _chunks(updates):
                write_runs(self.bulk_store, self.experiment_id,
                           [RunWrite(run_id, metrics=metrics) for _, run_id, metrics in chunk])
                for trial_id, _, metrics in chunk:
                    self._logged(trial_id, metrics)
            return
        for trial_id, run_id, metrics in updates:
            self._log_batch(run_id, metrics=metrics)
            self._logged(trial_id, metrics)

    def trials_ended(self, ended: list[tuple[TrialRecord, Points]]) -> None:
        if not self.trial_runs:
            return
        ended = [(record, curve) for record, curve in ended
                 if record.trial_id not in self.ended]   # delivered before this call failed part-way
        if self.bulk_store is not None:
            for chunk in _chunks(ended):
                writes = [self._end_write(record, curve) for record, curve in chunk]
                run_ids = write_runs(self.bulk_store, self.experiment_id, writes)
                for (record, _), write, run_id in zip(chunk, writes, run_ids):
                    self._logged(record.trial_id, write.metrics)
                    self._closed(record, run_id)
            return
        if len(ended) > 1:   # a tracking server serves several calls at once
            self.parent_run_id   # made here, once: the threads below would each make one
            with ThreadPoolExecutor(SERVER_CONCURRENCY, thread_name_prefix="banditsweep-mlflow") as pool:
                list(pool.map(lambda item: self._end_one(*item), ended))
        else:
            for record, curve in ended:
                self._end_one(record, curve)

    def _end_one(self, record: TrialRecord, curve: Points) -> None:
        """A trial's end through the client: its run (created now if it has none), its values, its status."""
        run_id = self.open_runs.get(record.trial_id)
        if run_id is None:
            run_id = self._create_run(record, record.status)
            self._opened(record, run_id, described=False)
        write = self._end_write(record, curve, run_id)
        self._log_batch(run_id, metrics=write.metrics, params=write.params, tags=write.tags)
        self.described.add(run_id)
        self._logged(record.trial_id, write.metrics)
        self.client.set_terminated(run_id, write.status)
        self._closed(record, run_id)

    def _end_write(self, record: TrialRecord, curve: Points, run_id: str | None = None) -> RunWrite:
        """What a trial's run gets when the trial ends (a new run when it has none)."""
        run_id = run_id or self.open_runs.get(record.trial_id)
        self.regret_keys[record.trial_id] = regret_metric(record.environment)
        params = {} if run_id in self.described else trial_params(record)
        metrics = self._regret_metrics(record.trial_id, curve)
        tags = {"status": record.status, **code_tags(record)}
        if record.status == FINISHED:
            now = int(time.time() * 1000)
            metrics += [Metric(k, v, now, 0) for k, v in final_metrics(record).items()]
            params = {**params, **final_params(record)}
        else:
            tags["error"] = (record.error or "")[:5000]
        status = "FINISHED" if record.status == FINISHED else "FAILED"
        if run_id is None:
            write = self._new_run(record, record.status, status, params)
            write.metrics, write.tags = metrics, {**write.tags, **tags}
            return write
        return RunWrite(run_id, tags=tags, params={k: _param_value(v) for k, v in params.items()}, metrics=metrics,
                        status=status)

    def _new_run(self, record: TrialRecord, status_tag: str, status: str, params: dict[str, Any]) -> RunWrite:
        """A trial's new run under this invocation's parent (the bulk path; see _create_run)."""
        return RunWrite(None, name=self._run_name(record), tags=self._run_tags(record, status_tag),
                        params={k: _param_value(v) for k, v in params.items()}, status=status,
                        parent_run_id=self.parent_run_id)

    def _opened(self, record: TrialRecord, run_id: str, described: bool = True) -> None:
        self.open_runs[record.trial_id] = run_id
        self.regret_keys[record.trial_id] = regret_metric(record.environment)
        self.last_step[record.trial_id] = 0
        if described:
            self.described.add(run_id)

    def _closed(self, record: TrialRecord, run_id: str) -> None:
        self.described.add(run_id)
        self.open_runs.pop(record.trial_id, None)
        self.last_step.pop(record.trial_id, None)
        self.regret_keys.pop(record.trial_id, None)
        self.ended[record.trial_id] = record.attempts

    def close(self, status: str, summary: dict[str, float]) -> str | None:
        if self.bulk_store is not None and self.open_runs:
            for chunk in _chunks(list(self.open_runs.values())):
                write_runs(self.bulk_store, self.experiment_id, [RunWrite(run_id, status="KILLED") for run_id in chunk])
            self.open_runs.clear()
        for trial_id in list(self.open_runs):
            self.client.set_terminated(self.open_runs[trial_id], "KILLED")
            del self.open_runs[trial_id]
        journal = None
        if self.mode in ("cells", "both"):
            journal = self.context.store.journal()
            if any(record.status == FINISHED for record in journal.values()):
                # (imported here: the cells module builds on this one's helpers)
                from banditsweep.workers.mirrors.mlflow.cells import write_cell_runs

                write_cell_runs(self, journal.values())
        if self._parent_run_id is None:
            return None
        journal = self.context.store.journal() if journal is None else journal
        summary = {**summary, **best_final_regret(journal.values())}
        if summary:
            now = int(time.time() * 1000)
            self.client.log_batch(self.parent_run_id, metrics=[Metric(k, float(v), now, 0) for k, v in summary.items()])
        self.client.set_terminated(self.parent_run_id, status)
        return f"MLflow parent run {self.parent_run_id}"

    # ---- helpers -------------------------------------------------------------------------------

    def _create_run(self, record: TrialRecord, status: str) -> str:
        """A new run for the trial, under this invocation's parent run. Where an earlier call to
        create it failed, the store is asked first (by trial id and store) for the run that call may
        have made all the same: that one is used (and any more are deleted), not a second made."""
        if record.trial_id in self.unsure:
            made = [run for run in search_all(self.client, self.experiment_id,
                                              f"tags.kind = 'trial' and tags.trial_id = '{record.trial_id}' and "
                                              f"tags.store = '{self.context.store_id}' and attributes.status = 'RUNNING'")
                    if run.data.tags.get("mlflow.parentRunId") == self.parent_run_id]
            for extra in made[1:]:
                self.client.delete_run(extra.info.run_id)
            if made:
                self.unsure.discard(record.trial_id)
                return made[0].info.run_id
        self.unsure.add(record.trial_id)
        run_id = self.client.create_run(
            self.experiment_id, run_name=self._run_name(record),
            tags={"mlflow.parentRunId": self.parent_run_id, **self._run_tags(record, status)},
        ).info.run_id
        self.unsure.discard(record.trial_id)
        return run_id

    @staticmethod
    def _run_name(record: TrialRecord) -> str:
        return record.run_name or f"{record.label} | {record.environment} | seed {record.seed}"

    def _run_tags(self, record: TrialRecord, status: str) -> dict[str, str]:
        return {"kind": "trial", "trial_id": record.trial_id, "sweep": self.context.sweep, "status": status,
                "store": self.context.store_id, "group": record.group or f"{record.label} | {record.environment}"}

    def _regret_metrics(self, trial_id: str, points: Points) -> list[Metric]:
        """The points not yet logged to the trial's run (streamed points are not logged twice)."""
        last = self.last_step.get(trial_id, 0)
        now = int(time.time() * 1000)
        key = self.regret_keys[trial_id]
        return [Metric(key, float(value), now, int(t)) for t, value in points if t > last]

    def _logged(self, trial_id: str, metrics: list[Metric]) -> None:
        """Note the regret points a store call took (only once it succeeded: a call that failed is
        handed again, and its points must go with it)."""
        steps = [m.step for m in metrics if m.key == self.regret_keys.get(trial_id)]
        if steps:
            self.last_step[trial_id] = max(self.last_step.get(trial_id, 0), max(steps))

    def _log_batch(self, run_id: str, metrics: list[Metric] = (), params: dict[str, Any] | None = None,
                   tags: dict[str, str] | None = None) -> None:
        """One store call when everything fits in MLflow's limits, else as few as they allow."""
        metrics = list(metrics)
        params = [Param(k, _param_value(v)) for k, v in (params or {}).items()]
        tags = [RunTag(k, v) for k, v in (tags or {}).items()]
        while metrics or params or tags:
            batch_params, params = params[:MAX_PARAMS_PER_BATCH], params[MAX_PARAMS_PER_BATCH:]
            batch_tags, tags = tags[:MAX_TAGS_PER_BATCH], tags[MAX_TAGS_PER_BATCH:]
            room = MAX_ENTITIES_PER_BATCH - len(batch_params) - len(batch_tags)
            batch_metrics, metrics = metrics[:room], metrics[room:]
            self.client.log_batch(run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags)


def _chunks(items: list) -> list[list]:
    """``items`` in lists of at most RUNS_PER_TRANSACTION."""
    return [items[i:i + RUNS_PER_TRANSACTION] for i in range(0, len(items), RUNS_PER_TRANSACTION)]
