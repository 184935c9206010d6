"""Finding what an MLflow store holds of a sweep: its experiment (made when there is none), the runs
of one results store (by the tags every run carries: ``kind``, ``store``, ``trial_id``), the latest
parent run, and the report attached to it. The sink reconciles with these; ``ui`` and ``report``
use them without a sink."""

from __future__ import annotations

import logging
from pathlib import Path

from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from banditsweep.workers.mirrors.mlflow.tracking_store import local_artifact_root, store_setup_lock
from banditsweep.workers.mirrors.sinks import store_id
from banditsweep.workers.storage.paths import REPORT

# A new SQLite store's creation logs its schema migrations at INFO ("Creating initial MLflow database
# tables...", alembic's steps) to the terminal of `report`, `sync-mlflow` or `ui`: not the user's concern.
for _chatty in ("mlflow.store.db.utils", "alembic"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)


def get_experiment_id(client: MlflowClient, sweep: str, tracking_uri: str, results_root=None, artifacts: str = "") -> str:
    """The sweep's experiment, restored if deleted, created if there is none (its artifacts where
    tracking_store.local_artifact_root says, ``artifacts`` first)."""
    experiment = client.get_experiment_by_name(sweep)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    try:
        return client.create_experiment(sweep, artifact_location=local_artifact_root(tracking_uri, results_root, artifacts))
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
        client.log_artifacts(run_id, str(directory), artifact_path=REPORT)
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
