"""The trial actor: pulls batches of trials, runs them on its device, streams to the sink."""

from __future__ import annotations

import time
import traceback
from typing import Any

import ray

from banditsweep.core.batching import run_trials
from banditsweep.core.trial import TrialResult, TrialSpec
from banditsweep.workers.store import FAILED, FINISHED


def finished_record(record: dict[str, Any], result: TrialResult) -> dict[str, Any]:
    return {**record, "status": FINISHED, "final_regret": result.final_regret,
            "wall_seconds": result.wall_seconds, "seconds_per_round": result.seconds_per_round,
            "diagnostics": result.diagnostics, "error": None, "traceback": None}


def failed_record(record: dict[str, Any], error: str, trace: str | None) -> dict[str, Any]:
    return {**record, "status": FAILED, "final_regret": None, "wall_seconds": None,
            "seconds_per_round": None, "diagnostics": {}, "error": error, "traceback": trace}


def result_arrays(result: TrialResult) -> dict[str, Any]:
    arrays = {"arm": result.arm, "reward": result.reward, "regret": result.regret,
              "cum_regret": result.cum_regret, "seconds": result.seconds}
    if "expected_regret" in result.extras:
        arrays["expected_regret"] = result.extras["expected_regret"]
    return arrays


@ray.remote
class TrialActor:
    """One per GPU (or per ``cpus_per_trial`` CPUs). Runs a batch of compatible trials at a time."""

    def __init__(self, sink, log_every: int, threads: int):
        import torch

        torch.set_num_threads(max(1, threads))
        self.sink = sink
        self.log_every = log_every
        self.device = "cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"

    def device_name(self) -> str:
        return self.device

    def run(self, batch: list[tuple[TrialSpec, dict[str, Any]]]) -> list[tuple[str, str]]:
        """Run the batch; every trial's outcome reaches the sink before this returns."""
        for _, record in batch:
            self.sink.start_trial.remote(record)
        try:
            outcomes = self._run_together(batch)
        except Exception:
            if len(batch) == 1:
                failed = failed_record(batch[0][1], *self._describe_error())
                ray.get(self.sink.finish_trial.remote(failed, None))
                outcomes = [failed]
            else:
                # Isolate the trial that raised: run each alone.
                outcomes = [self._run_alone(spec, record) for spec, record in batch]
        return [(record["trial_id"], record["status"]) for record in outcomes]

    @staticmethod
    def _describe_error() -> tuple[str, str]:
        import sys

        error = sys.exc_info()[1]
        return f"{type(error).__name__}: {error}", traceback.format_exc()

    def _run_alone(self, spec: TrialSpec, record: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._run_together([(spec, record)])[0]
        except Exception:
            failed = failed_record(record, *self._describe_error())
            ray.get(self.sink.finish_trial.remote(failed, None))
            return failed

    def _run_together(self, batch) -> list[dict[str, Any]]:
        specs = [spec for spec, _ in batch]
        trial_ids = [record["trial_id"] for _, record in batch]

        def stream(index: int, t: int, cumulative_regret: float) -> None:
            self.sink.log_progress.remote(trial_ids[index], [(t, cumulative_regret)])

        started = time.perf_counter()
        results = run_trials(specs, self.device, on_progress=stream, progress_every=self.log_every)
        elapsed = time.perf_counter() - started
        records = []
        writes = []
        for (_, record), result in zip(batch, results):
            done = finished_record(record, result)
            done["diagnostics"] = {**done["diagnostics"], "batch_size": len(batch),
                                   "batch_wall_seconds": elapsed}
            records.append(done)
            writes.append(self.sink.finish_trial.remote(done, result_arrays(result)))
        ray.get(writes)
        return records


@ray.remote(num_cpus=0)
class SinkActor:
    """The single writer, as an actor (pinned to the driver's node by the dispatcher)."""

    def __init__(self, *args, **kwargs):
        from banditsweep.workers.sink import ResultSink

        self.sink = ResultSink(*args, **kwargs)

    def reconcile(self, pending):
        return self.sink.reconcile(pending)

    def start_trial(self, record):
        return self.sink.start_trial(record)

    def log_progress(self, trial_id, points):
        self.sink.log_progress(trial_id, points)

    def finish_trial(self, record, arrays):
        self.sink.finish_trial(record, arrays)

    def close(self, status="FINISHED", summary=None):
        return self.sink.close(status, summary)
