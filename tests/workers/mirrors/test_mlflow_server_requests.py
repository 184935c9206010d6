"""What a trial's run costs a tracking server (a real ``mlflow server`` on loopback, no login): three
requests (create with its tags, one batch of its values, its end), none reading the run back, nothing
printed; the runs all FINISHED with their values."""

import pytest

from mlflow_server import TrackingServer

pytestmark = pytest.mark.slow   # a server started for the module: about 20 s


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tracking = TrackingServer(tmp_path_factory.mktemp("server"))
    tracking.start()
    yield tracking
    tracking.stop()


def test_a_trial_run_costs_the_server_three_requests(server, tmp_path, monkeypatch, capfd):
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
    from banditsweep.workers.mirrors.mlflow.sink import MLflowSink
    from banditsweep.workers.mirrors.sinks import SinkContext
    from banditsweep.workers.storage.record import FINISHED, TrialRecord

    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    calls = []
    original = RestStore._call_endpoint

    def counted(self, api, *args, **kwargs):
        calls.append(api.__name__)
        return original(self, api, *args, **kwargs)

    monkeypatch.setattr(RestStore, "_call_endpoint", counted)
    context = SinkContext("requests", str(tmp_path / "results"),
                          sink_options=MLflowOptions(server.uri, "trials").sink_options())
    sink = MLflowSink(context)
    sink.open(context.store.journal(), [])
    records = [TrialRecord(trial_id=name * 20, sweep="requests", algorithm="linucb", label="LinUCB",
                           environment="synthetic:h1", params={"nu": 1.0}, environment_config={}, seed=seed,
                           horizon=4, status=FINISHED,
                           final_regret=3.0 + seed, log_every=2) for seed, name in enumerate("abcdef")]
    sink.trials_ended([(record, [(2, 1.0), (4, 3.0 + record.seed)]) for record in records[:1]])   # the parent run
    calls.clear()
    sink.trials_ended([(record, [(2, 1.0), (4, 3.0 + record.seed)]) for record in records[1:]])
    assert sorted(calls) == sorted(["CreateRun", "LogBatch", "UpdateRun"] * 5), calls
    sink.close("FINISHED", {})
    assert "View run" not in capfd.readouterr().out
    client = MlflowClient(server.uri)
    runs = client.search_runs([sink.experiment_id], "tags.kind = 'trial'")
    assert sorted((run.info.status, run.data.metrics["final_regret"]) for run in runs) == \
        [("FINISHED", 3.0 + seed) for seed in range(6)]


def test_runs_go_to_a_server_several_at_a_time_over_kept_connections(server, tmp_path, monkeypatch, caplog):
    """A trial's run costs three requests whatever the writer does, so runs per second come from calls in
    flight: 8 at first, more while the server keeps up (writers.CallsInFlight), each on a kept
    connection (MLflow's pool keeps 10 unless told: more calls than that would each open their own);
    every run FINISHED with its values and no call failed."""
    import threading

    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.options import MLflowOptions
    from banditsweep.workers.mirrors.mlflow.sink import MLflowSink
    from banditsweep.workers.mirrors.mlflow.writers import SERVER_CONCURRENCY
    from banditsweep.workers.mirrors.sinks import SinkContext
    from banditsweep.workers.storage.record import FINISHED, TrialRecord

    lock, in_flight, peak, levels = threading.Lock(), [0], [0], []
    original = RestStore._call_endpoint

    def counted(self, api, *args, **kwargs):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        try:
            return original(self, api, *args, **kwargs)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(RestStore, "_call_endpoint", counted)
    # MLflow made its HTTP session (keeping 10 connections) before the sink, as in a process that
    # spoke to the server earlier: the sink's pool must still be the one that is used.
    monkeypatch.delenv("MLFLOW_HTTP_POOL_MAXSIZE", raising=False)
    MlflowClient(server.uri).search_experiments()
    context = SinkContext("in_flight", str(tmp_path / "results"),
                          sink_options=MLflowOptions(server.uri, "trials").sink_options())
    sink = MLflowSink(context)
    assert sink.writer.concurrency == 8 and sink.writer.in_flight.ceiling == SERVER_CONCURRENCY == 64
    sink.open(context.store.journal(), [])
    records = [TrialRecord(trial_id=f"{seed:020d}", sweep="in_flight", algorithm="linucb", label="LinUCB",
                           environment="synthetic:h1", params={"nu": 1.0}, environment_config={}, seed=seed,
                           horizon=4, status=FINISHED, final_regret=float(seed), log_every=2) for seed in range(96)]
    caplog.set_level("WARNING", logger="urllib3.connectionpool")
    for first in range(0, 96, 16):   # as the mirror hands them: a few rounds at a time
        levels.append(sink.writer.concurrency)
        sink.trials_ended([(record, [(2, 1.0), (4, float(record.seed))]) for record in records[first:first + 16]])
    sink.close("FINISHED", {})
    assert levels[:2] == [8, 16] and 8 < peak[0] <= max(levels), (levels, peak)
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()], caplog.text
    runs = MlflowClient(server.uri).search_runs([sink.experiment_id], "tags.kind = 'trial'", max_results=200)
    assert sorted((run.info.status, run.data.metrics["final_regret"]) for run in runs) == \
        [("FINISHED", float(seed)) for seed in range(96)]


@pytest.mark.parametrize("pool, first, most", [("4", 4, 4), ("12", 8, 12), ("500", 8, 64)])
def test_calls_in_flight_stay_within_a_pool_size_the_user_set(pool, first, most, monkeypatch):
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.writers import ClientWriter

    monkeypatch.setenv("MLFLOW_HTTP_POOL_MAXSIZE", pool)
    writer = ClientWriter(MlflowClient("http://127.0.0.1:9"), "0")   # no request is made
    assert (writer.concurrency, writer.in_flight.ceiling) == (first, most)


@pytest.mark.parametrize("pool", ["0", "ten", ""])
def test_a_pool_size_that_is_not_a_count_is_refused_naming_the_variable(pool, monkeypatch):
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mirrors.mlflow.writers import ClientWriter

    monkeypatch.setenv("MLFLOW_HTTP_POOL_MAXSIZE", pool)
    with pytest.raises(ValueError, match=f"MLFLOW_HTTP_POOL_MAXSIZE={pool!r}.*at least 1"):
        ClientWriter(MlflowClient("http://127.0.0.1:9"), "0")
