"""The single writer: idempotent per trial id, and MLflow reconciled with the Parquet journal."""

import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient

from banditsweep.workers.sink import ResultSink, child_runs_by_trial
from banditsweep.workers.store import SweepStore


def _record(trial_id, algorithm, params, seed=0):
    return {"trial_id": trial_id, "sweep": "s", "algorithm": algorithm, "label": algorithm, "environment": "env",
            "seed": seed, "horizon": 4, "params": params, "environment_config": {"kind": "synthetic"},
            "log_every": 2, "status": "finished", "final_regret": 3.0, "wall_seconds": 0.1,
            "seconds_per_round": 0.025, "diagnostics": {"eta": 0.5}, "attempts": 1}


ARRAYS = {"arm": np.array([0, 1, 1, 0]), "reward": np.ones(4), "regret": np.array([1.0, 0, 2.0, 0]),
          "cum_regret": np.array([1.0, 1.0, 3.0, 3.0]), "seconds": np.full(4, 0.025)}


def test_finish_is_idempotent_and_the_table_unifies_param_columns(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    sink = ResultSink(str(tmp_path / "results"), "s", uri)
    a = _record("a" * 20, "linucb", {"nu": 1, "lam": 1.0})
    b = _record("b" * 20, "neural", {"nu": 0.5, "form": "paper"}, seed=1)
    for record in (a, b, a):  # a written twice: one copy
        sink.start_trial(record)
        sink.finish_trial(record, ARRAYS)
    sink.close()
    trials = pd.read_parquet(tmp_path / "results" / "s" / "trials")
    assert sorted(trials["trial_id"]) == ["a" * 20, "b" * 20]
    assert trials["nu"].dtype == np.float64 and sorted(trials["nu"]) == [0.5, 1.0]
    assert trials.set_index("algorithm").loc["neural", "form"] == "paper"
    assert pd.isna(trials.set_index("algorithm").loc["linucb", "form"])
    curves = pd.read_parquet(tmp_path / "results" / "s" / "curves")
    assert len(curves) == 8 and curves["expected_regret"].isna().all()
    # No temporary files are left behind, and readers skip them by name anyway.
    assert not [p for p in (tmp_path / "results" / "s").rglob(".*.tmp")]
    runs = child_runs_by_trial(MlflowClient(uri), sink.experiment_id)
    assert {k: [r.info.status for r in v] for k, v in runs.items()} == {"a" * 20: ["FINISHED"], "b" * 20: ["FINISHED"]}


def test_reconcile_rebuilds_lost_runs_and_clears_stale_ones(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    client = MlflowClient(uri)
    sink = ResultSink(str(tmp_path / "results"), "s", uri)
    a, b, c = (_record(x * 20, "linucb", {"nu": 1.0}, seed=i) for i, x in enumerate("abc"))
    for record in (a, b):
        sink.start_trial(record)
        sink.finish_trial(record, ARRAYS)
    sink.start_trial(c)  # c was running when the driver died
    sink.close(status="KILLED")
    # A crash between the journal write and MLflow: a's run is gone.
    client.delete_run(child_runs_by_trial(client, sink.experiment_id)["a" * 20][0].info.run_id)

    again = ResultSink(str(tmp_path / "results"), "s", uri)
    counts = again.reconcile(pending_trial_ids=["c" * 20])
    assert counts == {"deleted_runs": 1, "rebuilt_runs": 1}
    again.close()
    runs = child_runs_by_trial(client, again.experiment_id)
    assert sorted(runs) == ["a" * 20, "b" * 20]
    rebuilt = runs["a" * 20][0]
    assert rebuilt.info.status == "FINISHED" and rebuilt.data.metrics["final_regret"] == 3.0
    assert [m.step for m in client.get_metric_history(rebuilt.info.run_id, "regret")] == [2, 4]
    assert SweepStore.for_sweep(tmp_path / "results", "s").read_trials()["trial_id"].tolist() == ["a" * 20, "b" * 20]
