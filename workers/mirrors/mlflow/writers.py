"""The two ways runs reach an MLflow store, behind one interface (:class:`RunWriter`), chosen once
when the sink opens (:func:`run_writer`): where the store is MLflow's own database, whole lists of
runs in one transaction each (:class:`BulkWriter`, workers.mirrors.mlflow.bulk); anywhere else (a
tracking server), MLflow's client, each run in as few calls as its limits allow, several runs at
once (:class:`ClientWriter`). The sink says what to write, as :class:`RunWrite` values, once for
both.

A writer tells the sink how far each write got (:data:`MADE`, :data:`LOGGED`, :data:`DONE`) as it
gets there, so that a call the mirror hands again after it failed part-way does only what is left:
a transaction is all or nothing, but the client's calls for one run are several.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Protocol

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from banditsweep.workers.mirrors.mlflow.bulk import RUNS_PER_TRANSACTION, RunWrite, bulk_mismatch, sql_store, write_runs
from banditsweep.workers.mirrors.mlflow.queries import search_all
from banditsweep.workers.mirrors.mlflow.store_checks import POOL_VARIABLE, pool_size_set

# How far a write got: a new run exists (its values may not be in yet); its tags, parameters and
# metrics are in; its status too (the write is done).
MADE, LOGGED, DONE = "made", "logged", "done"
# Called with (the write's index in the list, its run id, MADE / LOGGED / DONE).
Noted = Callable[[int, str, str], None]
# Concurrent client calls to a tracking server: a trial's run costs it three requests whatever we do
# (MLflow has no call that makes several runs, or makes one ended), so runs per second come from
# calls in flight, as many as the server keeps up with (:class:`CallsInFlight`): where the server
# shares a machine's few cores, 8-16 (docs/benchmarks.md, "A lab's tracking server"); a server with
# cores of its own takes more, up to 64. A 1-worker server on SQLite given 32 at once failed calls:
# each of its processes holds 15 database connections and fails a request that waits 30 s for one.
SERVER_FIRST_CONCURRENCY = 8
SERVER_CONCURRENCY = 64
# Through MLflow's client to its database store directly (where the bulk writer was passed over): no
# more at once than SQLAlchemy's pool holds (5).
DATABASE_CONCURRENCY = 4
# A round whose slowest run took longer than this (its three requests) is a server falling behind.
SLOW_RUN_SECONDS = 10.0
# A doubling of the calls in flight is kept only where it raised the runs per second this much.
WORTH_DOUBLING = 1.15
# MLflow's log_batch limits: 1000 entities in all, at most 100 params and 100 tags.
MAX_ENTITIES_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100


class RunWriter(Protocol):
    """Where the sink's runs go: one writer per sink, chosen when it opens (:func:`run_writer`)."""

    def write(self, writes: list[RunWrite], noted: Noted, concurrent: bool = False) -> None:
        """Apply ``writes`` (new runs, or more for existing ones), telling ``noted`` how far each
        got. ``concurrent``: the writes are of different runs and may go at once."""


def run_writer(client: MlflowClient, experiment_id: str) -> tuple[RunWriter, str | None]:
    """The bulk writer where the client's store is MLflow's database store and the installed MLflow's
    tables take its rows, else the client's; with, where the bulk writer was passed over for the
    tables, why (a line for the user)."""
    store = sql_store(client)
    if store is None:
        return ClientWriter(client, experiment_id), None
    mismatch = bulk_mismatch()
    if mismatch is not None:
        return ClientWriter(client, experiment_id), (
            f"MLflow: the installed MLflow's tables differ from those the bulk writer knows ({mismatch}): runs are "
            "written through MLflow's client instead (correct, slower on SQLite)")
    return BulkWriter(store, experiment_id), None


class BulkWriter:
    """Runs written into MLflow's own database store, :data:`RUNS_PER_TRANSACTION` to a transaction:
    each write of a transaction that commits is done whole, one that fails leaves nothing."""

    def __init__(self, store: Any, experiment_id: str):   # store: MLflow's SqlAlchemyStore (bulk.sql_store)
        self.store, self.experiment_id = store, experiment_id

    def write(self, writes: list[RunWrite], noted: Noted, concurrent: bool = False) -> None:
        for start in range(0, len(writes), RUNS_PER_TRANSACTION):
            chunk = writes[start:start + RUNS_PER_TRANSACTION]
            run_ids = write_runs(self.store, self.experiment_id, chunk)
            for index, (write, run_id) in enumerate(zip(chunk, run_ids), start):
                for step in ((MADE,) if write.run_id is None else ()) + (LOGGED, DONE):
                    noted(index, run_id, step)


class CallsInFlight:
    """How many runs go to a tracking server at once: start at ``first``; after each round that kept
    them all busy, double while the runs per second rose by :data:`WORTH_DOUBLING` over the level below,
    up to ``most``; go back to the level below where a doubling gained less, and halve (and stay at or
    under that) after a failed call or a run slower than :data:`SLOW_RUN_SECONDS`."""

    def __init__(self, first: int, most: int):
        self.now, self.ceiling = first, most
        self.rate_below: float | None = None   # runs/s at now // 2, measured just before the doubling
        # Runs a second of the last round that kept every call busy (None before one): how many ended
        # trials the mirror hands the sink at a time follows it (MLflowSink.ended_per_call).
        self.runs_per_second: float | None = None

    def after(self, runs: int, seconds: float, slowest: float, failed: bool) -> None:
        # A round that did not keep every call busy says nothing of the level or the pace.
        busy = runs >= self.now
        if busy and not failed:
            self.runs_per_second = runs / max(seconds, 1e-3)
        if failed or slowest > SLOW_RUN_SECONDS:
            self.now = self.ceiling = max(1, self.now // 2)
            self.rate_below = None
            return
        if not busy:
            return
        rate = self.runs_per_second
        if self.rate_below is not None and rate < WORTH_DOUBLING * self.rate_below:
            self.now = self.ceiling = max(1, self.now // 2)
            self.rate_below = None
        elif self.now * 2 <= self.ceiling:
            self.now, self.rate_below = self.now * 2, rate


def kept_connections() -> int:
    """Connections MLflow's HTTP session keeps to a server: :data:`SERVER_CONCURRENCY` unless the
    user set ``MLFLOW_HTTP_POOL_MAXSIZE`` (then the calls in flight stay within it: a call beyond the
    pool would open and discard a connection of its own). A session MLflow made earlier in this
    process (with its default pool of 10) is dropped, so that the next call's session keeps them."""
    size = pool_size_set() or SERVER_CONCURRENCY
    os.environ[POOL_VARIABLE] = str(size)
    try:   # MLflow caches its session per process (with the pool size of when it was made)
        from mlflow.utils.request_utils import _cached_get_request_session
        _cached_get_request_session.cache_clear()
    except (ImportError, AttributeError):   # an MLflow that does not: its next session is new anyway
        pass
    return size


class ClientWriter:
    """Runs written through MLflow's client, as to a tracking server: a new run is created with its
    tags, then gets its values in as few ``log_batch`` calls as MLflow's limits allow, then its end
    (a terminal status); writes the sink says may go at once (``concurrent``) go several at a time, as
    many as a tracking server keeps up with (:class:`CallsInFlight`; :data:`DATABASE_CONCURRENCY` to a
    database)."""

    def __init__(self, client: MlflowClient, experiment_id: str):
        self.client, self.experiment_id = client, experiment_id
        # Trials whose run a create call may have made although it failed (the store made the run and
        # the reply was lost): the next create of that trial's run looks for it first.
        self.unsure: set[str] = set()
        # Calls at once: as many as a tracking server keeps up with, a few to a database store the
        # client opens itself.
        if sql_store(client) is None:
            most = min(SERVER_CONCURRENCY, kept_connections())
            self.in_flight = CallsInFlight(min(SERVER_FIRST_CONCURRENCY, most), most)
        else:
            self.in_flight = CallsInFlight(DATABASE_CONCURRENCY, DATABASE_CONCURRENCY)

    @property
    def concurrency(self) -> int:
        return self.in_flight.now

    @property
    def runs_per_second(self) -> float | None:
        return self.in_flight.runs_per_second

    def write(self, writes: list[RunWrite], noted: Noted, concurrent: bool = False) -> None:
        if not (concurrent and len(writes) > 1):
            for index, write in enumerate(writes):
                self._write_one(index, write, noted)
            return
        # A tracking server serves several calls at once.
        level, started, slowest, failed = self.concurrency, time.perf_counter(), [0.0], True

        def timed(index: int) -> None:
            began = time.perf_counter()
            self._write_one(index, writes[index], noted)
            slowest[0] = max(slowest[0], time.perf_counter() - began)

        try:
            with ThreadPoolExecutor(level, thread_name_prefix="banditsweep-mlflow") as pool:
                list(pool.map(timed, range(len(writes))))
            failed = False
        finally:
            self.in_flight.after(len(writes), time.perf_counter() - started, slowest[0], failed)

    def _write_one(self, index: int, write: RunWrite, noted: Noted) -> None:
        run_id, tags = write.run_id, write.tags
        if run_id is None:
            run_id, tags = self._create(write), {}   # the new run's tags go with its creation
            noted(index, run_id, MADE)
        log_batch(self.client, run_id, write.metrics, write.params, tags)
        noted(index, run_id, LOGGED)
        if write.status != "RUNNING":
            self.client.set_terminated(run_id, write.status)
        noted(index, run_id, DONE)

    def _create(self, write: RunWrite) -> str:
        """A new run under its parent. Where an earlier call to create a trial's run failed, the store
        is asked first (by trial id and store) for the run that call may have made all the same: that
        one is used (and any more are deleted), not a second made."""
        trial_id = write.tags.get("trial_id")
        if trial_id is not None and trial_id in self.unsure:
            made = [run for run in search_all(self.client, self.experiment_id,
                                              f"tags.kind = 'trial' and tags.trial_id = '{trial_id}' and "
                                              f"tags.store = '{write.tags.get('store')}' and "
                                              "attributes.status = 'RUNNING'")
                    if run.data.tags.get("mlflow.parentRunId") == write.parent_run_id]
            for extra in made[1:]:
                self.client.delete_run(extra.info.run_id)
            if made:
                self.unsure.discard(trial_id)
                return made[0].info.run_id
        if trial_id is not None:
            self.unsure.add(trial_id)
        parent = {"mlflow.parentRunId": write.parent_run_id} if write.parent_run_id else {}
        run_id = self.client.create_run(self.experiment_id, run_name=write.name,
                                        tags={**parent, **write.tags}).info.run_id
        self.unsure.discard(trial_id)
        return run_id


def log_batch(client: MlflowClient, run_id: str, metrics: list[Metric] = (), params: dict[str, str] | None = None,
              tags: dict[str, str] | None = None) -> None:
    """One store call when everything fits in MLflow's limits, else as few as they allow (none when
    there is nothing to log)."""
    metrics = list(metrics)
    params = [Param(k, v) for k, v in (params or {}).items()]
    tags = [RunTag(k, v) for k, v in (tags or {}).items()]
    while metrics or params or tags:
        batch_params, params = params[:MAX_PARAMS_PER_BATCH], params[MAX_PARAMS_PER_BATCH:]
        batch_tags, tags = tags[:MAX_TAGS_PER_BATCH], tags[MAX_TAGS_PER_BATCH:]
        room = MAX_ENTITIES_PER_BATCH - len(batch_params) - len(batch_tags)
        batch_metrics, metrics = metrics[:room], metrics[room:]
        client.log_batch(run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags)
