"""The MLflow mirror's runs per cell (``mlflow_runs: cells`` or ``both``; workers.mirrors.mlflow.sink): one run
per label x grid point x environment with its seeds' mean final regret, their spread, the seed list,
and the band of their curves (``cum_regret_mean`` / ``cum_regret_lower`` / ``cum_regret_upper``: mean
and mean -/+ one standard deviation at the rounds every seed logged), written from the Parquet record."""

from __future__ import annotations

import time

import numpy as np
from mlflow.entities import Metric

from banditsweep.workers.mirrors.mlflow.bulk import RunWrite
from banditsweep.workers.mirrors.mlflow.queries import search_all
from banditsweep.workers.mirrors.mlflow.run_content import cell_params, cell_tags, regret_metric
from banditsweep.workers.storage.record import FINISHED, TrialRecord, thinned_curve


def cell_summaries(records, curves) -> list[dict]:
    """Per cell (the seeds of one label, grid point and environment: ``record.group``) of finished
    trials: its name, a representative record, the seeds' final regrets and the band of their curves
    at the rounds every seed logged. ``curves`` is the store's curve rows of those trials."""
    cells: dict[str, list[TrialRecord]] = {}
    for record in records:
        if record.status == FINISHED and record.final_regret is not None:
            cells.setdefault(record.group or f"{record.label} | {record.environment}", []).append(record)
    by_trial = {tid: frame for tid, frame in curves.groupby("trial_id")} if len(curves) else {}
    summaries = []
    for group, members in sorted(cells.items()):
        members.sort(key=lambda r: r.seed)
        finals = np.array([r.final_regret for r in members], dtype=float)
        logged = [dict(thinned_curve({"cum_regret": by_trial[r.trial_id].sort_values("t")["cum_regret"].to_numpy()},
                                     r.log_every)) for r in members if r.trial_id in by_trial]
        steps = sorted(set.intersection(*(set(c) for c in logged))) if logged else []
        values = np.array([[c[t] for t in steps] for c in logged]) if steps else np.zeros((0, 0))
        summaries.append({"group": group, "record": members[0], "seeds": [r.seed for r in members],
                          "finals": finals, "steps": steps,
                          "mean": values.mean(axis=0) if steps else [], "std": values.std(axis=0) if steps else []})
    return summaries


def write_cell_runs(sink, records) -> int:
    """One run per cell under ``sink``'s parent run (workers.mirrors.mlflow.sink), replacing the store's
    earlier cell runs. Returns how many were written."""
    finished = [record for record in records if record.status == FINISHED]
    curves = sink.context.store.read_curves([record.trial_id for record in finished])
    writes = []
    for cell in cell_summaries(finished, curves):
        record, finals = cell["record"], cell["finals"]
        now = int(time.time() * 1000)
        metrics = [Metric("final_regret_mean", float(finals.mean()), now, 0),
                   Metric("final_regret_std", float(finals.std()), now, 0),
                   Metric("seeds", float(len(finals)), now, 0)]
        keys = [regret_metric(record.environment, f"cum_regret_{band}") for band in ("mean", "lower", "upper")]
        for step, mean, std in zip(cell["steps"], cell["mean"], cell["std"]):
            metrics += [Metric(key, float(value), now, int(step))
                        for key, value in zip(keys, (mean, mean - std, mean + std))]
        tags = cell_tags(cell["group"], cell["seeds"], sink.context.sweep, sink.context.store_id)
        writes.append(RunWrite(None, name=cell["group"], tags=tags, params=cell_params(record), metrics=metrics,
                               status="FINISHED", parent_run_id=sink.parent_run_id))
    for old in search_all(sink.client, sink.experiment_id,
                          f"tags.kind = 'cell' and tags.store = '{sink.context.store_id}'"):
        sink.client.delete_run(old.info.run_id)
    sink.writer.write(writes, lambda index, run_id, step: None)   # a call handed again writes them all anew
    return len(writes)

