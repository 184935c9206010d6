"""The record of truth (Parquet store and journal) and its mirrors (the sink protocol, MLflow)."""

import json
import os
import time

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from banditsweep.workers.storage import store as store_module
from banditsweep.workers.mirrors.mlflow.queries import child_runs_by_trial
from banditsweep.workers.mirrors.mlflow.run_content import regret_metric
from banditsweep.workers.mirrors.mlflow.sink import MLflowSink
from banditsweep.workers.storage.record import FAILED, FINISHED, TrialOutcome, TrialRecord
from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
from banditsweep.workers.mirrors.sinks import Mirror, SinkContext
from banditsweep.workers.storage.store import CURVE_SCHEMA, SweepStore, TrialsTable


def _record(trial_id, algorithm="linucb", params=None, seed=0, status=FINISHED, final=3.0):
    return TrialRecord(trial_id=trial_id, sweep="s", algorithm=algorithm, label=algorithm, environment="env",
                       seed=seed, horizon=4, params=params or {"nu": 1.0}, environment_config={"kind": "synthetic"},
                       log_every=2, status=status, attempts=1, final_regret=final if status == FINISHED else None,
                       wall_seconds=0.1, seconds_per_round=0.025, diagnostics={"eta": 0.5},
                       started_at=1.7e9, finished_at=1.7e9 + 0.1, node="127.0.0.1", device="cpu")


ARRAYS = {"arm": np.array([0, 1, 1, 0]), "reward": np.ones(4), "regret": np.array([1.0, 0, 2.0, 0]),
          "cum_regret": np.array([1.0, 1.0, 3.0, 3.0]), "seconds": np.full(4, 0.025)}


def _finished(record, **extras):
    return TrialOutcome(record, {**ARRAYS, **extras})


def test_groups_of_outcomes_are_durable_and_compact_into_one_file_each(tmp_path):
    store = SweepStore.for_sweep(tmp_path, "s")
    a = _record("a" * 20, "linucb", {"nu": 1, "lam": 1.0})
    b = _record("b" * 20, "neural", {"nu": 0.5, "form": "paper"}, seed=1)
    c = _record("c" * 20, status=FAILED)
    store.write_outcomes([_finished(a), TrialOutcome(c)])
    # b with per-round extras: a declared column and one no column exists for; a again (a crash fell
    # between its curves and its journal entry, and it ran again): one copy is kept.
    store.write_outcomes([_finished(b, expected_regret=np.arange(4.0), novel=np.full(4, 7.0)), _finished(a)])
    assert len(list(store.curves_dir.glob("*.parquet"))) == 2 and len(list(store.journal_dir.glob("*.jsonl"))) == 2
    journal = store.journal()
    assert sorted(journal) == ["a" * 20, "b" * 20, "c" * 20] and journal["a" * 20] == a
    TrialsTable(store).flush()
    store.compact()
    assert [p.name.startswith("c-") for p in store.curves_dir.iterdir()] == [True]
    assert len(list(store.journal_dir.iterdir())) == 1 and store.journal() == journal
    assert not [p for p in store.root.rglob(".*") if p.name != ".journal"]   # no temporary files left

    curves = pd.read_parquet(store.curves_dir)
    assert len(curves) == 8 and list(curves.columns) == CURVE_SCHEMA.names
    rows_b = curves[curves["trial_id"] == "b" * 20].sort_values("t")
    assert rows_b["expected_regret"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert [dict(x) for x in rows_b["other_extras"]] == [{"novel": 7.0}] * 4
    assert curves[curves["trial_id"] == "a" * 20]["expected_regret"].isna().all()

    trials = pd.read_parquet(store.trials_dir).set_index("trial_id")
    assert trials["nu"].dtype == np.float64 and sorted(trials["nu"]) == [0.5, 1.0, 1.0]
    assert trials.loc["b" * 20, "form"] == "paper" and pd.isna(trials.loc["a" * 20, "form"])
    assert trials.loc["c" * 20, "status"] == FAILED and pd.isna(trials.loc["c" * 20, "final_regret"])
    assert str(trials["started_at"].dtype) == "datetime64[us, UTC]"
    assert trials.loc["a" * 20, "finished_at"] == pd.Timestamp("2023-11-14 22:13:20.1", tz="UTC")
    assert trials.loc["a" * 20, "node"] == "127.0.0.1" and trials.loc["a" * 20, "device"] == "cpu"
    assert json.loads(trials.loc["b" * 20, "diagnostics"]) == {"eta": 0.5}


def test_a_compaction_cut_short_is_finished_by_the_next_open(tmp_path, monkeypatch):
    store = SweepStore.for_sweep(tmp_path, "s")
    for name in "abc":
        store.write_outcomes([_finished(_record(name * 20))])
    real_replace = os.replace

    def crash_on_show(source, target):
        if os.path.basename(str(source)).startswith(".c-"):
            raise OSError("the machine went down")
        return real_replace(source, target)

    monkeypatch.setattr(store_module.os, "replace", crash_on_show)
    with pytest.raises(OSError):
        store.compact()
    monkeypatch.undo()
    assert store.read_curves().empty or len(store.read_curves()) < 12   # parts gone, merged file hidden
    store.recover()
    curves = store.read_curves()
    assert len(curves) == 12 and sorted(curves["trial_id"].unique()) == ["a" * 20, "b" * 20, "c" * 20]
    assert len(list(store.curves_dir.glob("*.parquet"))) == 1


def test_journals_of_the_earlier_layout_are_read(tmp_path):
    store = SweepStore.for_sweep(tmp_path, "s")
    store.journal_dir.mkdir(parents=True)
    old = {"trial_id": "d" * 20, "sweep": "s", "algorithm": "random", "label": "random", "environment": "env",
           "seed": 0, "horizon": 4, "params": {}, "environment_config": {"kind": "synthetic"}, "log_every": 2,
           "status": "failed", "final_regret": None, "error": "boom", "attempts": 1, "finished_at": 1.7e9}
    (store.journal_dir / f"{'d' * 20}.json").write_text(json.dumps(old))
    assert store.journal()["d" * 20].error == "boom"
    # Run again and finished: the newer segment wins.
    store.write_outcomes([_finished(_record("d" * 20))])
    assert store.journal()["d" * 20].status == FINISHED


def _runs(uri, sink):
    return child_runs_by_trial(MlflowClient(uri), sink.experiment_id)


def test_mlflow_reconcile_rebuilds_lost_runs_and_clears_stale_ones(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    client = MlflowClient(uri)
    context = SinkContext("s", str(tmp_path / "results"), sink_options=MLflowOptions(uri).sink_options())
    store = context.store
    a, b, c = (_record(x * 20, seed=i) for i, x in enumerate("abc"))
    sink = MLflowSink(context)
    assert sink.open(store.journal(), []) == {"deleted_runs": 0, "rebuilt_runs": 0}
    store.write_outcomes([_finished(a), _finished(b)])
    sink.trials_ended([(a, [(2, 1.0), (4, 3.0)]), (b, [(2, 1.0), (4, 3.0)])])
    sink.trials_started([c])  # c was running when the driver died
    sink.close("KILLED", {})
    # A crash between the journal write and MLflow: a's run is gone.
    client.delete_run(_runs(uri, sink)["a" * 20][0].info.run_id)

    again = MLflowSink(context)
    assert again.open(store.journal(), pending=["c" * 20]) == {"deleted_runs": 1, "rebuilt_runs": 1}
    again.close("FINISHED", {})
    runs = _runs(uri, again)
    assert sorted(runs) == ["a" * 20, "b" * 20]
    rebuilt = runs["a" * 20][0]
    assert rebuilt.info.status == "FINISHED" and rebuilt.data.metrics["final_regret"] == 3.0
    assert rebuilt.data.params["nu"] == "1.0" and rebuilt.data.tags["status"] == FINISHED
    assert [m.step for m in client.get_metric_history(rebuilt.info.run_id, regret_metric(rebuilt.data.params["environment"]))] == [2, 4]


class Recording:
    """A sink that records what it is given."""

    def __init__(self, context=None):
        self.calls = []

    def open(self, records, pending):
        return {}

    def trials_started(self, records):
        self.calls.append(("started", [r.trial_id for r in records]))

    def progress(self, points):
        self.calls.append(("progress", {k: list(v) for k, v in points.items()}))

    def trials_ended(self, ended):
        self.calls.append(("ended", [(r.trial_id, list(curve)) for r, curve in ended]))

    def close(self, status, summary):
        self.calls.append(("close", status))
        return "closed"


def test_the_mirror_folds_events_of_one_delivery():
    sink = Recording()
    mirror = Mirror([sink], interval=30.0, hold_starts=0.0)   # nothing is delivered before close
    a, b = _record("a" * 20), _record("b" * 20)
    mirror.started([a, b])
    mirror.progress(a.trial_id, [(2, 1.0)])
    mirror.progress(b.trial_id, [(2, 5.0)])
    mirror.started([b])                      # b retried: its earlier points are void
    mirror.progress(b.trial_id, [(2, 6.0)])
    mirror.ended([(a, [(2, 1.0), (4, 3.0)])])
    status = mirror.close("FINISHED", {}, timeout=10)
    assert sink.calls == [("started", ["b" * 20]), ("progress", {"b" * 20: [(2, 6.0)]}),
                          ("ended", [("a" * 20, [(2, 1.0), (4, 3.0)])]), ("close", "FINISHED")]
    assert status.delivered == 1 and status.notes == ["closed"] and not status.errors


def test_a_start_is_held_so_a_short_trial_reaches_the_sinks_once():
    """A trial that ends within ``hold_starts`` of its start costs its sinks one ended event; one that
    runs longer gets its start (with the points streamed meanwhile) once it has run that long."""
    sink = Recording()
    mirror = Mirror([sink], interval=0.02, hold_starts=0.5)
    short, long_ = _record("a" * 20), _record("b" * 20)
    mirror.started([short, long_])
    mirror.progress(long_.trial_id, [(2, 5.0)])
    time.sleep(0.1)
    mirror.ended([(short, [(2, 1.0), (4, 3.0)])])
    time.sleep(0.2)
    assert sink.calls == [("ended", [("a" * 20, [(2, 1.0), (4, 3.0)])])]
    time.sleep(0.6)
    assert sink.calls[1:] == [("started", ["b" * 20]), ("progress", {"b" * 20: [(2, 5.0)]})]
    mirror.ended([(long_, [(2, 5.0), (4, 6.0)])])
    mirror.close("FINISHED", {}, timeout=10)
    assert sink.calls[3:] == [("ended", [("b" * 20, [(2, 5.0), (4, 6.0)])]), ("close", "FINISHED")]


def test_a_failing_sink_is_retried_in_order_said_once_and_the_others_still_get_everything(monkeypatch):
    from banditsweep.workers.mirrors import sinks

    monkeypatch.setattr(sinks, "MAX_RETRY_DELAY", 0.05)

    class Flaky(Recording):
        """Down for its first three calls (a tracking server restarting)."""

        failures = 3

        def trials_ended(self, ended):
            if Flaky.failures:
                Flaky.failures -= 1
                raise ConnectionError("tracking server unreachable\nsecond line")
            super().trials_ended(ended)

    class Down(Recording):
        def trials_ended(self, ended):
            raise ConnectionError("tracking server unreachable")

    good, flaky, down = Recording(), Flaky(), Down()
    mirror = Mirror([flaky, good, down], interval=0.02)
    for name in "abc":
        mirror.ended([(_record(name * 20), [])])
        time.sleep(0.05)
    status = mirror.close("FINISHED", {}, timeout=10)
    ended = [("ended", [(name * 20, [])]) for name in "abc"]
    assert [c for c in good.calls if c[0] == "ended"] == ended
    assert [c for c in flaky.calls if c[0] == "ended"] == ended          # each once, in order
    assert flaky.calls[-1] == ("close", "FINISHED") and down.calls == []  # down never got past its backlog
    assert status.errors[0].startswith("Flaky failed (trials_ended: ConnectionError: tracking server unreachable)")
    assert sum("Flaky failed" in e for e in status.errors) == 1           # said once
    assert "Flaky reachable again: caught up" in status.notes
    assert sum("Down failed" in e for e in status.errors) == 1
    assert status.pending == 4 and "sync-mlflow" in status.errors[-1]


def test_streamed_points_are_not_logged_twice(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    sink = MLflowSink(SinkContext("s", str(tmp_path / "results"), sink_options=MLflowOptions(uri).sink_options()))
    a = _record("a" * 20)
    sink.trials_started([a])
    sink.progress({a.trial_id: [(2, 1.0)]})
    sink.trials_started([a])              # retried: a fresh run
    sink.progress({a.trial_id: [(2, 1.5)]})
    sink.trials_ended([(a, [(2, 1.5), (4, 3.0)])])
    sink.close("FINISHED", {})
    runs = _runs(uri, sink)["a" * 20]
    assert len(runs) == 1
    history = MlflowClient(uri).get_metric_history(runs[0].info.run_id, regret_metric(runs[0].data.params["environment"]))
    assert [(m.step, m.value) for m in history] == [(2, 1.5), (4, 3.0)]


def test_a_start_that_reaches_the_mirror_after_the_end_is_dropped():
    """A trial's start comes from its actor, its end from the driver, and Ray does not order two
    callers' calls: a start (and points) arriving after the end, in the same delivery or a later one,
    must not reopen the trial; a later attempt's start still counts."""
    sink = Recording()
    mirror = Mirror([sink], interval=0.02, hold_starts=0.0)
    a, b = _record("a" * 20), _record("b" * 20)
    mirror.ended([(a, [(2, 1.0), (4, 3.0)])])
    time.sleep(0.3)                            # a's end delivered on its own
    mirror.started([a])                        # late: a later delivery
    mirror.progress(a.trial_id, [(2, 1.0)])
    mirror.ended([(b, [(2, 5.0), (4, 6.0)])])
    mirror.started([b])                        # late: the same delivery
    mirror.progress(b.trial_id, [(2, 5.0)])
    time.sleep(0.3)
    retried = TrialRecord(**{**_record("a" * 20).__dict__, "attempts": 2})
    mirror.started([retried])                  # a later attempt is a start
    status = mirror.close("FINISHED", {}, timeout=10)
    assert sink.calls == [("ended", [("a" * 20, [(2, 1.0), (4, 3.0)])]), ("ended", [("b" * 20, [(2, 5.0), (4, 6.0)])]),
                          ("started", ["a" * 20]), ("close", "FINISHED")], sink.calls
    assert status.delivered == 2 and not status.errors


def test_the_mlflow_sink_given_a_start_after_the_end_keeps_one_finished_run(tmp_path):
    """Fed out of order directly (as the mirror hands a backlog again): one FINISHED run per trial,
    none RUNNING or KILLED, and the late start logs nothing."""
    uri = f"sqlite:///{tmp_path}/m.db"
    sink = MLflowSink(SinkContext("s", str(tmp_path / "results"), sink_options=MLflowOptions(uri).sink_options()))
    a, b = _record("a" * 20), _record("b" * 20, seed=1, final=4.0)
    sink.trials_started([b])
    sink.trials_ended([(a, [(2, 1.0), (4, 3.0)]), (b, [(2, 2.0), (4, 4.0)])])
    sink.trials_started([a, b])                # both late
    sink.progress({a.trial_id: [(2, 9.0)]})
    assert sink.close("FINISHED", {}).startswith("MLflow parent run")
    runs = _runs(uri, sink)
    assert sorted(runs) == ["a" * 20, "b" * 20]
    client = MlflowClient(uri)
    for trial_id, final in (("a" * 20, 3.0), ("b" * 20, 4.0)):
        (run,) = runs[trial_id]
        assert run.info.status == "FINISHED" and run.data.metrics["final_regret"] == final
        assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, regret_metric(run.data.params["environment"]))] == \
            [(2, final - 2.0), (4, final)]


def test_a_run_whose_creation_failed_after_the_store_made_it_is_found_not_made_twice(tmp_path):
    """The store made the run but the reply was lost: the call handed again finds that run (by trial
    id and store) instead of making a second one."""
    uri = f"sqlite:///{tmp_path}/m.db"
    sink = MLflowSink(SinkContext("s", str(tmp_path / "results"), sink_options=MLflowOptions(uri).sink_options()))
    sink.use_client()   # the client's path, a tracking server's (a transaction is never half made)
    real = sink.client.create_run
    lost = {"replies": 1}

    def create_run(*arguments, **keywords):
        run = real(*arguments, **keywords)
        if lost["replies"] and keywords.get("tags", {}).get("kind") == "trial":
            lost["replies"] -= 1
            raise ConnectionError("connection reset by peer")
        return run

    sink.client.create_run = create_run
    a = _record("a" * 20)
    with pytest.raises(ConnectionError):
        sink.trials_ended([(a, [(2, 1.0), (4, 3.0)])])
    sink.trials_ended([(a, [(2, 1.0), (4, 3.0)])])
    sink.close("FINISHED", {})
    (run,) = _runs(uri, sink)["a" * 20]
    assert run.info.status == "FINISHED" and run.data.metrics["final_regret"] == 3.0


def test_a_diagnostic_the_journal_cannot_hold_is_left_out_not_the_trial(tmp_path):
    """An algorithm reporting a text diagnostic: the record keeps its numbers and stays readable
    (it was written whole, then refused by every reader: the finished trial lost)."""
    from types import SimpleNamespace

    store = SweepStore.for_sweep(tmp_path, "s")
    result = SimpleNamespace(final_regret=3.0, wall_seconds=0.1, seconds_per_round=0.025,
                             diagnostics={"eta": 0.5, "package": "/somewhere", "steps": 4})
    record = _record("t" * 20).finished(result, at=1.7e9, batch_size=1.0)
    store.write_outcomes([_finished(record)])
    assert store.journal()["t" * 20].diagnostics == {"eta": 0.5, "steps": 4, "batch_size": 1.0}


def test_a_failed_trial_with_a_huge_error_keeps_a_readable_record(tmp_path):
    """An exception's message may quote a whole array: the record keeps the start of the message and
    the end of the traceback, within a journal line's bound, and is read back."""
    from banditsweep.workers.storage.record import MAX_ERROR, MAX_TRACEBACK

    store = SweepStore.for_sweep(tmp_path, "s")
    failed = _record("e" * 20).failed("ValueError: " + "9" * (4 << 20), "Traceback\n" + "x\n" * (2 << 20), at=1.7e9)
    store.write_outcomes([TrialOutcome(failed)])
    record = store.journal()["e" * 20]
    assert record.status == FAILED and record.error.startswith("ValueError: 999") and record.error.endswith(" …")
    assert len(record.error) <= MAX_ERROR + 2 and len(record.traceback) <= MAX_TRACEBACK + 2
    assert record.traceback.startswith("… ") and record.traceback.endswith("x\n")


def test_what_the_sinks_owe_counts_each_trial_once_in_flight_kept_or_queued():
    """A chunk in flight to a slow sink, the same trials kept for a sink that is down, and trials still
    queued are each owed once: the count never exceeds the trials that ended, and an abort says so."""
    import threading

    release = threading.Event()

    class Slow(Recording):
        ended_per_call = 2

        def trials_ended(self, ended):
            release.wait(10)
            super().trials_ended(ended)

    class Down(Recording):
        def trials_ended(self, ended):
            raise ConnectionError("tracking server unreachable")

    slow, down = Slow(), Down()
    mirror = Mirror([slow, down], interval=0.02)
    records = [_record(name * 20) for name in "abcde"]
    mirror.ended([(record, []) for record in records])
    time.sleep(0.3)                                      # the first chunk of two is in flight to Slow
    assert mirror.owed() == 5
    mirror.ended([(records[0], [])])                     # the same trial handed again: still owed once
    assert mirror.owed() == 5
    release.set()
    time.sleep(0.5)                                      # Slow took all five; Down keeps them all
    assert {trial for call in slow.calls for trial, _ in call[1]} == {r.trial_id for r in records}
    assert mirror.owed() == 5
    status = mirror.abort("stopped waiting", grace=5)
    assert status.pending == 5
    assert "the sinks lack 5 of the 5 trials that ended in this run" in status.errors[0]
    # An abort closes the sinks and ends the delivery thread (it used to spin for ever, holding a
    # core and the process's other threads back, with a sink still in back-off).
    assert mirror.wait_closed(5) and slow.calls[-1] == ("close", "KILLED")


def test_a_mirror_whose_sinks_took_everything_owes_nothing():
    sink = Recording()
    mirror = Mirror([sink], interval=0.02)
    mirror.ended([(_record(name * 20), []) for name in "ab"])
    time.sleep(0.3)
    assert mirror.owed() == 0
    mirror.close("FINISHED", {}, timeout=10)


def test_auto_runs_through_a_slow_server_are_per_cell_and_say_why(tmp_path, monkeypatch):
    """``mlflow_runs: auto`` through a tracking server (MLflow's client writer) times the server when
    the sink opens: runs per trial where it answers quickly enough, per cell where 3 requests per
    trial would keep it busy for more than two minutes; the parent run records the mode used."""
    from banditsweep.workers.mirrors.mlflow import options, sink as sink_module

    assert options.run_mode("auto", 100, None) == "trials"          # a store written in bulk
    assert options.run_mode("auto", 100, 0.2) == "trials"           # 60 s of requests
    assert options.run_mode("auto", 300, 0.2) == "cells"            # 180 s
    assert options.run_mode("trials", 300, 0.2) == "trials"         # asked for: kept
    assert options.run_mode("auto", 2001, None) == "cells"
    uri = f"sqlite:///{tmp_path}/m.db"
    records = [_record(name * 20, seed=i) for i, name in enumerate("abcdefgh")]
    for pace, mode in ((0.004, "trials"), (6.0, "cells")):
        monkeypatch.setattr(sink_module, "request_seconds", lambda client: pace)
        context = SinkContext(f"s{mode}", str(tmp_path / "results"),
                              sink_options=MLflowOptions(uri, "trials", auto=True).sink_options())
        sink = MLflowSink(context)
        sink.use_client()                                            # as through a tracking server
        sink.open(context.store.journal(), [r.trial_id for r in records])
        assert sink.mode == mode and sink.trial_runs == (mode == "trials")
        assert bool(sink.notices) == (mode == "cells")
        if mode == "cells":
            assert "took 6000 ms a request" in sink.notices[0] and "about 144 s of requests" in sink.notices[0]
    # Not asked for auto: the mode stays whatever the server's pace.
    context = SinkContext("asked", str(tmp_path / "results"), sink_options=MLflowOptions(uri, "trials").sink_options())
    sink = MLflowSink(context)
    sink.use_client()
    sink.open(context.store.journal(), [r.trial_id for r in records])
    assert sink.mode == "trials"


def test_an_mlflow_whose_tables_differ_is_written_through_its_client_and_said(tmp_path, monkeypatch):
    """The bulk writer fills MLflow's tables through its internal models: where the installed MLflow's
    models lack a column it fills, or require one it does not, the sink writes through MLflow's public
    client instead, says so once, and the runs are the same."""
    from banditsweep.workers.mirrors.mlflow import bulk
    from banditsweep.workers.mirrors.mlflow.writers import BulkWriter, ClientWriter

    assert bulk.bulk_mismatch() is None
    uri = f"sqlite:///{tmp_path}/m.db"
    context = SinkContext("s", str(tmp_path / "results"), sink_options=MLflowOptions(uri).sink_options())
    assert isinstance(MLflowSink(context).writer, BulkWriter)
    known = dict(bulk.BULK_COLUMNS)
    for changed, reason in (({"SqlMetric": (*known["SqlMetric"], "dataset_uuid")}, "SqlMetric has no column dataset_uuid"),
                            ({"SqlTag": ("key", "value")}, "SqlTag requires column run_uuid")):
        monkeypatch.setattr(bulk, "BULK_COLUMNS", {**known, **changed})
        assert bulk.bulk_mismatch().startswith(reason)
    sink = MLflowSink(context)
    assert isinstance(sink.writer, ClientWriter)
    assert len(sink.notices) == 1 and "runs are written through MLflow's client instead" in sink.notices[0]
    a = _record("a" * 20)
    sink.open(context.store.journal(), [])
    sink.trials_ended([(a, [(2, 1.0), (4, 3.0)])])
    sink.close("FINISHED", {})
    [run] = _runs(uri, sink)["a" * 20]
    assert run.info.status == "FINISHED" and run.data.metrics["final_regret"] == 3.0


def test_through_a_tracking_server_the_mirror_hands_the_sink_about_20_seconds_of_its_pace(tmp_path):
    """A bulk transaction's worth (500) on MLflow's own database; through a tracking server (the
    client's writer) two rounds of its concurrent calls until a write has timed the server, then about
    20 s of runs at that pace (at least a round, at most 500), so that a slow server's progress shows
    within the mirror's stall limit and a cut-short wait leaves few runs half-written."""
    from banditsweep.workers.mirrors.mlflow.writers import DATABASE_CONCURRENCY, SERVER_CONCURRENCY, CallsInFlight

    uri = f"sqlite:///{tmp_path}/m.db"
    sink = MLflowSink(SinkContext("s", str(tmp_path / "results"), sink_options=MLflowOptions(uri).sink_options()))
    assert sink.ended_per_call == 500
    sink.use_client()
    # The client to MLflow's database directly (SQLAlchemy's pool holds 5): 4 calls at once.
    assert sink.writer.concurrency == DATABASE_CONCURRENCY == 4 and sink.ended_per_call == 8
    sink.open(sink.context.store.journal(), [])
    sink.trials_ended([(_record(f"{i:020d}"), [(2, 1.0), (4, 3.0)]) for i in range(8)])
    pace = sink.writer.runs_per_second
    assert pace > 0 and sink.ended_per_call == max(4, min(500, int(pace * 20)))
    sink.close("FINISHED", {})
    assert len(_runs(uri, sink)) == 8
    # To a tracking server: 8 at once at first, two rounds until timed; then 20 s at the pace, from a
    # round of the calls in flight to 500.
    sink.writer.in_flight = CallsInFlight(8, SERVER_CONCURRENCY)   # not yet timed
    assert sink.ended_per_call == 16
    for pace, handed in ((0.2, 8), (1.5, 30), (10.0, 200), (100.0, 500)):   # a login; a small server; a fast one
        sink.writer.in_flight.runs_per_second = pace
        assert sink.ended_per_call == handed


def test_calls_in_flight_double_while_they_pay_and_halve_when_the_server_falls_behind():
    from banditsweep.workers.mirrors.mlflow.writers import SLOW_RUN_SECONDS, CallsInFlight

    calls = CallsInFlight(8, 64)
    calls.after(16, 2.0, 1.0, False)            # 8 runs/s at 8: try 16
    assert calls.now == 16 and calls.runs_per_second == 8.0
    calls.after(7, 0.5, 1.0, False)             # a round short of 16 calls tells nothing
    assert calls.now == 16 and calls.runs_per_second == 8.0
    calls.after(32, 2.0, 1.0, False)            # 16 runs/s: doubling paid, try 32
    assert calls.now == 32
    calls.after(64, 3.8, 1.0, False)            # 16.8 runs/s: under 1.15x, back to 16 and stay there
    assert (calls.now, calls.ceiling) == (16, 16)
    calls.after(64, 1.0, 1.0, False)            # faster now, but 32 was tried: no higher
    assert calls.now == 16
    calls.after(64, 4.0, SLOW_RUN_SECONDS + 1, False)   # a run slower than the limit: halve
    assert (calls.now, calls.ceiling) == (8, 8)
    calls.after(3, 1.0, 0.5, True)              # a failed call: halve, whatever the round
    assert (calls.now, calls.ceiling) == (4, 4)
    for _ in range(5):
        calls.after(1, 1.0, 0.5, True)
    assert calls.now == 1                       # never below one
    fast = CallsInFlight(8, 64)
    for runs, seconds in ((16, 1.0), (32, 1.0), (64, 1.0), (128, 1.0)):   # every doubling pays, up to 64
        fast.after(runs, seconds, 0.5, False)
    assert fast.now == 64


def test_a_new_experiments_artifacts_go_where_the_commands_environment_chose(tmp_path, monkeypatch):
    """cluster-slurm.sbatch stages the SQLite store on the node's local disk and sets
    $BANDITSWEEP_MLFLOW_ARTIFACTS to the results root on the shared filesystem. The sink that creates
    the experiment runs in the mirror actor, whose environment on a cluster is its raylet's, without
    that variable: the command's choice travels in the sink options. Without it the artifacts would
    go next to the staged database, on a disk the job leaves behind."""
    from banditsweep.workers.mirrors.mlflow.tracking_store import chosen_artifact_root

    shared = tmp_path / "shared" / "mlartifacts"
    monkeypatch.setenv("BANDITSWEEP_MLFLOW_ARTIFACTS", str(shared))
    options = MLflowOptions(f"sqlite:///{tmp_path}/local/m.db", artifacts=chosen_artifact_root())
    (tmp_path / "local").mkdir()
    monkeypatch.delenv("BANDITSWEEP_MLFLOW_ARTIFACTS")   # the mirror actor's environment
    sink = MLflowSink(SinkContext("staged", str(tmp_path / "shared"), sink_options=options.sink_options()))
    location = MlflowClient(options.tracking_uri).get_experiment(sink.experiment_id).artifact_location
    assert location == shared.as_uri()
    # Without a choice, next to the database (the default for a store in the results root).
    plain = MLflowSink(SinkContext("plain", str(tmp_path / "shared"),
                                   sink_options=MLflowOptions(options.tracking_uri).sink_options()))
    assert (MlflowClient(options.tracking_uri).get_experiment(plain.experiment_id).artifact_location
            == (tmp_path / "local" / "mlartifacts").as_uri())
