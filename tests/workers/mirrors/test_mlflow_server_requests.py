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
