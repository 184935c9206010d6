"""The Ray actors of a sweep: trial actors that run batches of trials, and the mirror that feeds the
result sinks.

A trial actor returns its trials' outcomes (records and per-round arrays) to the driver, which makes
them durable in the Parquet store; it streams a thinned regret curve of running trials to the mirror
without waiting for it.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import ray

from banditsweep.core.engine.round_loop import TrialStopped
from banditsweep.core.engine.trial import TrialSpec, run_trials
from banditsweep.workers.storage.checkpoint_files import CheckpointFiles
from banditsweep.workers.provenance.code_identity import note_loaded, running_code
from banditsweep.workers.provenance.load import LoadSampler
from banditsweep.workers.provenance.runtime import runtime_info
from banditsweep.workers.provenance.shipped import install_all
from banditsweep.workers.storage.live_run import RunningTrials
from banditsweep.workers.storage.record import TrialOutcome, TrialRecord
from banditsweep.workers.mirrors.sinks import Mirror, MirrorStatus, SinkContext, open_sinks
from banditsweep.workers.execution.shipped_datasets import provide_datasets
from banditsweep.workers.execution.trial_setup import configure_threads, trial_device


def _describe_error() -> tuple[str, str]:
    error = sys.exc_info()[1]
    return f"{type(error).__name__}: {error}", traceback.format_exc()


# The key of a TrialStopped for a batch that saw the run's stop before its first round.
NOT_STARTED = "not started"


@ray.remote
class TrialActor:
    """One per GPU (or per ``cpus_per_trial`` CPUs). Runs a batch of compatible trials at a time.
    ``data_dir``: where the trials' dataset files are (None: where this worker's environment says);
    ``shipped``: the classes the driver registered that this process registers too, before any trial
    (workers.provenance.shipped: a notebook's policy arrives by value, with its source);
    ``datasets``: the driver's dataset files, read where this node lacks them (workers.execution.shipped_datasets)."""

    def __init__(self, mirror, threads: int, data_dir: str | None = None, shipped: tuple = (),
                 datasets: tuple = ()):
        self.mirror = mirror
        self.datasets = datasets
        install_all(shipped)
        self.threads = max(1, threads)
        if data_dir:
            # The environments a trial builds read their dataset files from the data directory of the
            # process they run in (core.neural.datasets); this process is this actor's alone. Imported here:
            # core.neural.datasets loads pyarrow, which actors of trials without datasets never need.
            from banditsweep.core.neural.datasets import DATA_ENV_VAR

            os.environ[DATA_ENV_VAR] = data_dir
        self.node = ray.util.get_node_ip_address()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.device, self.device_label, self.warning = trial_device(ray.get_gpu_ids(), self.node)

    def ready(self) -> str | None:
        """Answers once the actor is placed and built; a warning about its device, if any."""
        return self.warning

    def run(self, batch: list[tuple[TrialSpec, TrialRecord]], checkpoints: CheckpointFiles | None = None,
            known_code=None) -> list[TrialOutcome]:
        """Run the batch (resuming from its checkpoint, if it has one); a trial that raises is
        recorded as failed (a batch that raised is run again one trial at a time, so that only the
        trial at fault fails)."""
        if checkpoints is not None and checkpoints.stop_requested():
            # Queued here when the run began to stop: nothing played, nothing to save (a state saved
            # before round 1 would only be refused by the next run).
            raise TrialStopped(NOT_STARTED, 1, False)
        self.checkpoints = checkpoints
        self.known_code = known_code   # the driver's code identity of the batch's trials (code_of)
        specs = [spec for spec, _ in batch]
        now = time.time()
        records = [record.started(record.attempts, self.node, self.node_id, self.device_label, now) for _, record in batch]
        try:
            # Inside the guard: an algorithm whose module cannot be imported (or a dataset that cannot be
            # fetched) fails its trials, not the sweep.
            provide_datasets(specs, self.datasets)
            self._configure_threads(specs[0])
            records = self._stamped(specs, records)
            return self._run_together(specs, records)
        except TrialStopped:   # the run is stopping and asked for the state (not a failure: no result)
            raise
        except Exception:
            if len(batch) == 1:
                return [TrialOutcome.of(records[0].failed(*_describe_error(), at=time.time()))]
        outcomes = []
        for spec, record in zip(specs, records):
            record = record.started(record.attempts, self.node, self.node_id, self.device_label, time.time())
            try:
                [record] = self._stamped([spec], [record])
                outcomes.extend(self._run_together([spec], [record]))
            except TrialStopped:
                raise
            except Exception:
                outcomes.append(TrialOutcome.of(record.failed(*_describe_error(), at=time.time())))
        return outcomes

    def _configure_threads(self, spec: TrialSpec) -> None:
        spec.policy_class   # imports the algorithm's module (and torch, where it uses it) first
        note_loaded()       # the sources of what this process has loaded, as loaded (running_code)
        configure_threads(self.threads)

    def _stamped(self, specs: list[TrialSpec], records: list[TrialRecord]) -> list[TrialRecord]:
        """The records stamped with the code this process runs them on and where it runs them."""
        runtime = runtime_info(self.device_label, self.threads)
        return [record.ran_on(running_code(spec, self.known_code), runtime) for spec, record in zip(specs, records)]

    def _run_together(self, specs: list[TrialSpec], records: list[TrialRecord]) -> list[TrialOutcome]:
        self.mirror.started.remote(records)

        load = LoadSampler()   # the machine's load while the batch runs (provenance.load)

        def stream(index: int, t: int, cumulative_regret: float) -> None:
            self.mirror.progress.remote(records[index].trial_id, [(t, cumulative_regret)])
            load.tick()

        started = time.perf_counter()
        results = run_trials(specs, self.device, on_progress=stream, progress_every=records[0].log_every,
                             checkpoints=self.checkpoints)
        elapsed = time.perf_counter() - started
        now, load_average = time.time(), load.mean()
        return [TrialOutcome.of(record.finished(result, now, load_average, batch_size=float(len(specs)),
                                                batch_wall_seconds=elapsed), result)
                for record, result in zip(records, results)]


# The mirror actor's niceness (the most Linux allows: it yields to every trial).
MIRROR_NICENESS = 19


def lower_priority(niceness: int) -> int:
    """Lower this process's CPU priority to ``niceness`` (never raise it); the niceness it has."""
    try:
        now = os.nice(0)
        return os.nice(niceness - now) if niceness > now else now
    except OSError:   # not allowed here: the mirror runs at the priority it has
        return os.nice(0)


@ray.remote(num_cpus=0)
class MirrorActor:
    """The sinks of a run, fed by a :class:`~banditsweep.workers.mirrors.sinks.Mirror` (pinned by the
    dispatcher to the driver's node: a SQLite MLflow store is a file there). The sinks are opened
    (reconciled with the journal) when the actor is built, before any event reaches it, so the
    driver need not wait for that."""

    def __init__(self, names: list[str], context: SinkContext, pending: list[str], login: dict[str, str] | None = None):
        # The tracking server's login, handed over by the driver: on a cluster joined with --address this
        # process is the raylet's child, not the user shell's, and would have none. Set in this actor's
        # own process (its environment is no one else's), never in a runtime_env, which Ray shows to
        # everyone with access to the cluster (docs/reliability.md, "Credentials").
        os.environ.update(login or {})
        # The mirror gets only the CPU the trials leave idle: on a machine the trials fill, a slow
        # server's replies (MLflow's client work, each request's encoding) would otherwise take cores
        # from the trials; what it owes then waits for the end of the run, where it catches up.
        lower_priority(MIRROR_NICENESS)
        sinks, self.counts, errors = open_sinks(names, context, context.store.journal(), pending)
        self.mirror = Mirror(sinks)
        self.mirror.status.errors += errors
        # The trials running now, for the driver's running.json (kept here: progress comes only here).
        self.running_trials = RunningTrials()

    def reconciled(self) -> dict[str, int]:
        return self.counts

    def niceness(self) -> int:
        return os.nice(0)

    def problems(self) -> list[str]:
        """What went wrong with the sinks so far (each outage said once)."""
        return list(self.mirror.status.errors)

    def running(self) -> list[dict]:
        """The trials started and not ended, each with its latest round (workers.storage.live_run)."""
        return self.running_trials.snapshot()

    def started(self, records):
        self.running_trials.started(records)
        self.mirror.started(records)

    def progress(self, trial_id, points):
        self.running_trials.progress(trial_id, points)
        self.mirror.progress(trial_id, points)

    def ended(self, ended):
        self.running_trials.ended([record for record, _ in ended])
        self.mirror.ended(ended)

    def close(self, status: str, summary: dict[str, float], timeout: float) -> MirrorStatus:
        return self.mirror.close(status, summary, timeout)

    def begin_close(self, status: str, summary: dict[str, float]) -> None:
        self.mirror.begin_close(status, summary)

    def wait_closed(self, seconds: float) -> bool:
        return self.mirror.wait_closed(seconds)

    def owed(self) -> int:
        return self.mirror.owed()

    def abort(self, reason: str) -> MirrorStatus:
        return self.mirror.abort(reason)

    def status(self) -> MirrorStatus:
        return self.mirror.status


# Seconds without one ended trial written before a run stops waiting for its sinks (a sink that is
# down or cannot keep up): the run then says what they lack.
MIRROR_STALL_SECONDS = 120.0
# Seconds between two lines about the sinks catching up.
MIRROR_SAY_EVERY = 5.0


def drain_mirror(mirror, status: str, summary: dict[str, float], say, stall: float = MIRROR_STALL_SECONDS
                 ) -> MirrorStatus:
    """End a run's mirror: wait while its sinks write what they still owe, saying how much is left
    and for about how long; a Ctrl-C, or ``stall`` seconds without progress, stops the wait and the
    mirror's status then says exactly what the sinks lack (and how to catch up)."""
    ray.get(mirror.begin_close.remote(status, summary))
    started = last_change = last_said = time.monotonic()
    first = last = ray.get(mirror.owed.remote())
    try:
        while not ray.get(mirror.wait_closed.remote(1.0)):
            owed, now = ray.get(mirror.owed.remote()), time.monotonic()
            if owed != last:
                last, last_change = owed, now
            if now - last_change > stall:
                return ray.get(mirror.abort.remote(f"the sinks wrote nothing for {stall:.0f} s"))
            if owed and now - last_said >= MIRROR_SAY_EVERY:
                rate = (first - owed) / (now - started)
                eta = f", ~{_duration(owed / rate)}" if rate > 0 else ""
                say(f"MLflow: {owed:,} runs to write{eta} (Ctrl-C stops waiting; `sync-mlflow` catches up later)")
                last_said = now
    except KeyboardInterrupt:
        return ray.get(mirror.abort.remote("stopped waiting for the sinks (Ctrl-C)"))
    return ray.get(mirror.status.remote())


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
