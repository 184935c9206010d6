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
``mlflow_runs``, or ``run --set mlflow_runs=...``) chooses what MLflow gets: ``trials`` (one run per trial, as
above), ``cells`` (one run per cell, i.e. label x grid point x environment, holding its seeds' mean
final regret and its band, and the curves ``cum_regret_mean/<environment>`` / ``cum_regret_lower/...`` /
``cum_regret_upper/...``: mean and mean -/+ one standard deviation over the seeds, at the logged rounds),
or ``both``. Cell runs are written from the Parquet record when the run ends (and by ``sync-mlflow``),
replacing the store's earlier cell runs.

Each Sink call says once what its runs get (:class:`~banditsweep.workers.mirrors.mlflow.bulk.RunWrite`
values, their contents from ``run_content``) and hands them to the writer chosen when the sink opened
(``writers``: bulk SQL transactions, or MLflow's client); the writer's notes of how far each write got
keep this sink's account of what is done.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from banditsweep.workers.mirrors.mlflow.bulk import RunWrite
from banditsweep.workers.mirrors.mlflow.cells import write_cell_runs
from banditsweep.workers.mirrors.mlflow.options import MLflowOptions, run_mode, trial_runs_seconds
from banditsweep.workers.mirrors.mlflow.queries import (adopt_unmarked_runs, child_runs_by_trial, get_experiment_id,
                                                        search_all)
from banditsweep.workers.mirrors.mlflow.run_content import (best_final_regret, param_value, parent_run_name,
                                                            parent_run_params, parent_run_tags, regret_metric,
                                                            run_name, run_tags, trial_end, trial_params)
from banditsweep.workers.mirrors.mlflow.tracking_store import sqlite_path, store_setup_lock
from banditsweep.workers.mirrors.mlflow.writers import (DONE, LOGGED, MADE, ClientWriter,
                                                        RunWriter, log_batch, run_writer)
from banditsweep.workers.mirrors.sinks import ENDED_PER_CALL, Points, SinkContext
from banditsweep.workers.storage.record import FINISHED, TrialRecord, thinned_curve

# The experiment tag MLflow 3's UI chooses an experiment's first page by, and the kind of ours.
# Through a tracking server, the mirror hands the sink about this many seconds of the server's work at a
# time (at the pace of the last call), at least one round of its concurrent calls; two rounds before
# the pace is known. Well inside the mirror's 120 s stall limit even behind a login (1.5 runs/s).
CLIENT_SECONDS_PER_CALL = 20.0
CLIENT_ROUNDS_FIRST_CALL = 2
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_DEVELOPMENT = "custom_model_development"


class MLflowSink:
    def __init__(self, context: SinkContext):
        self.context = context
        self.options = MLflowOptions.of(context.sink_options)
        self.mode = self.options.runs
        self.trial_runs = self.mode in ("trials", "both")
        if context.retried_by_mirror:
            # A tracking server that is down must cost seconds per try, not MLflow's minutes of
            # retries: the mirror retries on its own, with back-off.
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        # Ending a run through a tracking server would otherwise cost a request more (MLflow reads the
        # run back to print its URL) and two lines on the mirror's output per trial.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        tracking_uri = self.options.tracking_uri
        # MlflowClient opens the store when it is built, and that is when a new SQLite store gets its
        # tables: inside the lock, like the experiment.
        with store_setup_lock(tracking_uri) as note:
            self.client = MlflowClient(tracking_uri)
            self.experiment_id = get_experiment_id(self.client, context.sweep, tracking_uri, context.results_root,
                                                   self.options.artifacts)
        self.writer: RunWriter
        self.writer, passed_over = run_writer(self.client, self.experiment_id)
        # for the user, once the sink is open
        self.notices = [line for line in (note, passed_over) if line]
        self._parent_run_id: str | None = None
        self.open_runs: dict[str, str] = {}       # trial id -> run of its current attempt
        self.last_step: dict[str, int] = {}       # trial id -> last regret step logged to that run
        self.regret_keys: dict[str, str] = {}     # trial id -> its environment's regret metric
        # A call the mirror hands again after it failed part-way (a server that went away) must not
        # do twice what it did before: runs whose parameters are logged, trials whose run is closed
        # (with the attempt that ended: a trial ends once per run, and a start of that attempt or an
        # earlier one that comes after its end is late, never a new run). The client's writer also
        # keeps the runs a failed create call may have made.
        self.described: set[str] = set()
        self.ended: dict[str, int] = {}

    @property
    def ended_per_call(self) -> int:
        """Ended trials the mirror hands this sink at a time (workers.mirrors.sinks): a bulk transaction's
        worth on MLflow's own database; through a tracking server a few rounds of its concurrent calls,
        so that what is owed visibly falls even on a slow server (a wait for the mirror that sees no
        progress for minutes gives up) and a cut-short wait leaves few runs half-written."""
        if isinstance(self.writer, ClientWriter):
            pace, rounds = self.writer.runs_per_second, self.writer.concurrency
            if pace is None:
                return rounds * CLIENT_ROUNDS_FIRST_CALL
            return max(rounds, min(ENDED_PER_CALL, int(pace * CLIENT_SECONDS_PER_CALL)))
        return ENDED_PER_CALL

    def use_client(self, client: MlflowClient | None = None) -> None:
        """Write every run through MLflow's client (``client``, else the sink's own), as to a tracking
        server, whatever the store: the way to compare or measure the two writers on one store."""
        self.client = client or self.client
        self.writer = ClientWriter(self.client, self.experiment_id)

    @staticmethod
    def prepare(context: SinkContext) -> None:
        """A new local SQLite store gets its tables now (MLflow's migrations: ~4 s), under the same
        lock the sink takes when it opens (workers.mirrors.prepare). Only a new one: an existing store,
        healthy or not, is left to the sink's opening, which says what it had to do to it."""
        tracking_uri = MLflowOptions.of(context.sink_options).tracking_uri
        path = sqlite_path(tracking_uri)
        if path is None or (os.path.exists(path) and os.path.getsize(path) > 0):
            return
        with store_setup_lock(tracking_uri):
            MlflowClient(tracking_uri)

    @property
    def parent_run_id(self) -> str:
        """The parent run of this invocation, created when the first child run needs it: it carries
        the spec (as a tag and as the artifact ``spec/``), the run's sweep-level settings and command line
        (as parameters: horizon, seeds, overrides, selection..., and what this mirror writes), the
        code's commit and the store (run_content.parent_run_tags, parent_run_params)."""
        if self._parent_run_id is None:
            context = self.context
            self._parent_run_id = self.client.create_run(
                self.experiment_id, run_name=parent_run_name(context.sweep), tags=parent_run_tags(context),
            ).info.run_id
            log_batch(self.client, self._parent_run_id, params=parent_run_params(context, self.mode))
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
        self._pace_auto_runs(len(pending))
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

    def _pace_auto_runs(self, trials: int) -> None:
        """``mlflow_runs: auto`` through a tracking server: time it (a few requests, one at a time)
        and write runs per cell where runs per trial would keep it busy for long (options.run_mode)."""
        if not (self.options.auto and self.mode == "trials" and isinstance(self.writer, ClientWriter) and trials):
            return
        seconds = request_seconds(self.client)
        if run_mode("auto", trials, seconds) == "cells":
            self.mode, self.trial_runs = "cells", False
            self.notices.append(
                f"MLflow: the tracking server took {seconds * 1000:.0f} ms a request, so runs per trial for "
                f"{trials:,} trials would cost it about {trial_runs_seconds(trials, seconds):.0f} s of requests: "
                f"this run writes one run per cell (seeds' mean, spread and band) when it ends; "
                f"`--set mlflow_runs=trials` asks for runs per trial")

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
        writes = [self._new_run(record, "running", "RUNNING", trial_params(record)) for record in fresh]

        def noted(index: int, run_id: str, step: str) -> None:
            if step == DONE:
                self._opened(fresh[index], run_id)
        self.writer.write(writes, noted)

    def progress(self, points: dict[str, Points]) -> None:
        if not self.trial_runs:
            return
        running = [trial_id for trial_id in points if trial_id in self.open_runs]
        writes = [RunWrite(self.open_runs[trial_id], metrics=self._regret_metrics(trial_id, points[trial_id]))
                  for trial_id in running]

        def noted(index: int, run_id: str, step: str) -> None:
            if step == DONE:
                self._logged(running[index], writes[index].metrics)
        self.writer.write(writes, noted)

    def trials_ended(self, ended: list[tuple[TrialRecord, Points]]) -> None:
        if not self.trial_runs:
            return
        ended = [(record, curve) for record, curve in ended
                 if record.trial_id not in self.ended]   # delivered before this call failed part-way
        writes = [self._end_write(record, curve) for record, curve in ended]

        def noted(index: int, run_id: str, step: str) -> None:
            record = ended[index][0]
            if step == MADE:
                self._opened(record, run_id, described=False)
            elif step == LOGGED:
                self.described.add(run_id)
                self._logged(record.trial_id, writes[index].metrics)
            else:
                self._closed(record, run_id)
        self.writer.write(writes, noted, concurrent=True)

    def _end_write(self, record: TrialRecord, curve: Points) -> RunWrite:
        """What a trial's run gets when the trial ends (a new run when it has none)."""
        run_id = self.open_runs.get(record.trial_id)
        self.regret_keys[record.trial_id] = regret_metric(record.environment)
        end = trial_end(record)
        params = {**({} if run_id in self.described else trial_params(record)), **end.params}
        now = int(time.time() * 1000)
        metrics = self._regret_metrics(record.trial_id, curve) + [Metric(k, v, now, 0) for k, v in end.metrics.items()]
        if run_id is None:
            write = self._new_run(record, record.status, end.run_status, params)
            write.metrics, write.tags = metrics, {**write.tags, **end.tags}
            return write
        return RunWrite(run_id, tags=end.tags, params={k: param_value(v) for k, v in params.items()}, metrics=metrics,
                        status=end.run_status)

    def _new_run(self, record: TrialRecord, status_tag: str, status: str, params: dict[str, Any]) -> RunWrite:
        """A trial's new run under this invocation's parent."""
        return RunWrite(None, name=run_name(record),
                        tags=run_tags(record, self.context.sweep, self.context.store_id, status_tag),
                        params={k: param_value(v) for k, v in params.items()}, status=status,
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
        still_open = list(self.open_runs)   # their trials never ended in this run

        def noted(index: int, run_id: str, step: str) -> None:
            if step == DONE:
                self.open_runs.pop(still_open[index], None)
        self.writer.write([RunWrite(self.open_runs[trial_id], status="KILLED") for trial_id in still_open], noted)
        journal = None
        if self.mode in ("cells", "both"):
            journal = self.context.store.journal()
            if any(record.status == FINISHED for record in journal.values()):
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


# Requests timed to pace ``mlflow_runs: auto`` (the median is taken: one slow answer decides nothing).
PACE_REQUESTS = 3


def request_seconds(client: MlflowClient) -> float:
    """The median seconds of :data:`PACE_REQUESTS` small requests to ``client``'s store, one at a time."""
    times = []
    for _ in range(PACE_REQUESTS):
        started = time.perf_counter()
        client.search_experiments(max_results=1)
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]
