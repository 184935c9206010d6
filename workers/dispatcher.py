"""The driver side of a sweep: connect to Ray, start the mirror and the trial actors, hand out
batches of trials until none is left, make every outcome durable, re-queue the trials of actors
that died.

Ray Core does the scheduling (actors placed by their resource requests); this module keeps a queue
and a pool. One trial actor per GPU when the cluster has GPUs, else one per ``cpus_per_trial``
CPUs, capped by ``max_workers``. Each actor holds up to two batches (the one it runs and the next),
so it never waits for the driver; the driver writes the outcomes that arrive together as one group
(workers.store) and only then counts them done.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from banditsweep.core.trial import TrialSpec, batch_key
from banditsweep.workers.actors import MirrorActor, TrialActor
from banditsweep.workers.record import FINISHED, TrialOutcome, TrialRecord, thinned_curve
from banditsweep.workers.signals import stop_cleanly_on_sigterm
from banditsweep.workers.sinks import MirrorStatus, SinkContext
from banditsweep.workers.store import SweepStore, TrialsTable

MAX_ATTEMPTS = 3
# Batches an actor holds at once: the one it runs and the next one, queued on the actor.
ACTOR_QUEUE = 2
# Seconds the end of a run waits for the sinks to catch up before it reports how far behind they are.
MIRROR_CLOSE_TIMEOUT = 120.0
# Worker processes an embedded Ray starts at once. Ray's default is its CPU count, so a pool of many
# light actors (cpus_per_trial < 1) came up a few at a time and the first ones ran alone for seconds
# (16 actors on 2 CPUs: the last started 3.9 s after the first; all within 0.5 s with this,
# docs/benchmarks.md). The environment variable, where set, wins.
WORKER_STARTUP_CONCURRENCY = 64

# Lockstep batch sizes when neither the spec (resources.batch_trials) nor the algorithm says otherwise.
# On a GPU, batching trials is what fills the device. On a CPU slot it pays little for the neural
# algorithms (0.8-2.1x throughput for 10 trials with both cores, docs/benchmarks.md: every trial has
# its own weights, so a batch only saves per-operation overhead), and a one-CPU trial actor would
# hold ten trials' results back until the slowest finishes, so trials run one at a time there.
CPU_BATCH = 1
GPU_BATCH = 32


@dataclass
class RunOptions:
    results_root: str
    tracking_uri: str
    sinks: list[str] = field(default_factory=lambda: ["mlflow"])
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    batch_trials: int | None = None
    max_workers: int | None = None
    address: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)


@dataclass
class Job:
    """One trial to run: its spec, its record, how often it was tried."""

    spec: TrialSpec
    record: TrialRecord
    attempts: int = 0


@dataclass
class Progress:
    total: int
    done: int = 0
    failed: int = 0
    running: int = 0


@dataclass
class SweepOutcome:
    finished: int
    failed: int
    workers: int
    device: str
    reconcile: dict[str, int]
    mirror: MirrorStatus
    seconds: float


def _keep_local_ray_on_loopback() -> None:
    """An embedded Ray must listen on 127.0.0.1 only. On Linux Ray resolves "127.0.0.1" to the
    machine's external address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which it reads when it is
    first imported; set it for the processes Ray starts and for this already-imported Ray."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


class RayConnection:
    """``ray.init`` to ``address`` (or ``RAY_ADDRESS``), or an embedded local Ray on loopback."""

    def __init__(self, address: str | None, env_vars: dict[str, str], num_cpus: int | None = None):
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.env_vars = {k: v for k, v in env_vars.items() if v is not None}
        self.num_cpus = num_cpus
        self.started = False

    def __enter__(self) -> "RayConnection":
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        runtime_env = {"env_vars": self.env_vars} if self.env_vars else None
        if ray.is_initialized():
            return self
        if self.address:
            ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False,
                     logging_level=logging.WARNING)
        else:
            _keep_local_ray_on_loopback()
            os.environ.setdefault("RAY_worker_maximum_startup_concurrency", str(WORKER_STARTUP_CONCURRENCY))
            ray.init(num_cpus=self.num_cpus, include_dashboard=False, runtime_env=runtime_env,
                     log_to_driver=False, logging_level=logging.WARNING, _node_ip_address="127.0.0.1")
        self.started = True
        stop_cleanly_on_sigterm()  # ray.init installs a SIGTERM handler that aborts the driver
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            ray.shutdown()


def preferred_batch_size(spec: TrialSpec, on_gpu: bool) -> int:
    """How many trials like ``spec`` to run in one lockstep batch on this kind of device: the
    algorithm's ``preferred_batch_size`` where it states one, else the defaults above."""
    preferred = spec.policy_class.preferred_batch_size(spec, on_gpu)
    if preferred is None:
        return GPU_BATCH if on_gpu else CPU_BATCH
    return max(1, int(preferred))


def default_batch_size(spec: TrialSpec, on_gpu: bool, group_size: int, workers: int) -> int:
    """What the algorithm prefers on this device, but small enough that every worker gets a batch."""
    return max(1, min(preferred_batch_size(spec, on_gpu), math.ceil(group_size / max(1, workers))))


def make_batches(jobs: list[Job], batch_trials: int | None, on_gpu: bool, workers: int) -> list[list[Job]]:
    groups: dict[Any, list[Job]] = {}
    singles: list[list[Job]] = []
    for job in jobs:
        key = batch_key(job.spec)
        if key is None:
            singles.append([job])
        else:
            groups.setdefault(key, []).append(job)
    batches = []
    for group in groups.values():
        size = batch_trials or default_batch_size(group[0].spec, on_gpu, len(group), workers)
        batches.extend(group[i:i + size] for i in range(0, len(group), size))
    return batches + singles


def worker_plan(options: RunOptions) -> tuple[int, float, float]:
    """(number of trial actors, CPUs each, GPUs each) from the cluster's resources."""
    resources = ray.cluster_resources()
    gpus = resources.get("GPU", 0.0)
    cpus = resources.get("CPU", 1.0)
    gpus_each = options.gpus_per_trial if options.gpus_per_trial is not None else (1.0 if gpus else 0.0)
    if gpus and gpus_each > 0:
        count = int(gpus // gpus_each)
        cpus_each = min(options.cpus_per_trial, max(cpus / max(count, 1), 0.0))
    else:
        gpus_each = 0.0
        cpus_each = options.cpus_per_trial
        count = int(cpus // cpus_each)
    count = max(1, count)
    if options.max_workers:
        count = min(count, options.max_workers)
    return count, cpus_each, gpus_each


class ResultWriter:
    """The driver's side of the record of truth: durable groups of outcomes, the trials table, and
    the mirror told once they are durable."""

    def __init__(self, store: SweepStore, mirror, progress: Progress):
        self.store, self.mirror, self.progress = store, mirror, progress
        self.table = TrialsTable(store, store.journal())

    def write(self, outcomes: list[TrialOutcome]) -> None:
        if not outcomes:
            return
        self.store.write_outcomes(outcomes)
        self.table.add(outcome.record for outcome in outcomes)
        self.mirror.ended.remote([(o.record, thinned_curve(o.arrays, o.record.log_every) if o.arrays else [])
                                  for o in outcomes])
        for outcome in outcomes:
            if outcome.record.status == FINISHED:
                self.progress.done += 1
            else:
                self.progress.failed += 1

    def close(self) -> None:
        self.store.compact()
        self.table.flush()


def run_sweep(sweep_name: str, jobs: list[Job], options: RunOptions,
              on_progress: Callable[[Progress], None] | None = None) -> SweepOutcome:
    """Run ``jobs`` (trials not yet finished) on Ray; every outcome is made durable by the driver."""
    started = time.perf_counter()
    store = SweepStore.for_sweep(options.results_root, sweep_name)
    context = SinkContext(sweep_name, str(store.root.parent), options.tracking_uri)
    with RayConnection(options.address, options.env_vars):
        here = ray.get_runtime_context().get_node_id()
        mirror = MirrorActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote(options.sinks, context, [job.record.trial_id for job in jobs])
        progress = Progress(total=len(jobs))
        writer = ResultWriter(store, mirror, progress)
        if on_progress:
            on_progress(progress)
        count, cpus_each, gpus_each = worker_plan(options)
        batches = deque(make_batches(jobs, options.batch_trials, gpus_each > 0, count))
        count = min(count, len(batches)) if batches else 0

        def new_actor():
            return TrialActor.options(num_cpus=cpus_each, num_gpus=gpus_each).remote(mirror, max(1, int(cpus_each)))

        actors = [new_actor() for _ in range(count)]
        queued = [0] * count                                  # batches each actor holds
        in_flight: dict[Any, tuple[int, Any, list[Job]]] = {}  # ref -> (slot, actor, batch)
        status = "FINISHED"

        def hand_out() -> None:
            # Every idle actor gets a batch first; a second one only while there is more work than actors.
            for depth in range(1, ACTOR_QUEUE + 1):
                for slot in range(count):
                    if not batches or (depth > 1 and len(batches) <= count):
                        return
                    if queued[slot] < depth:
                        batch = batches.popleft()
                        for job in batch:
                            job.attempts += 1
                        items = [(job.spec, replace(job.record, attempts=job.attempts)) for job in batch]
                        in_flight[actors[slot].run.remote(items)] = (slot, actors[slot], batch)
                        queued[slot] += 1
                        progress.running += len(batch)

        try:
            while batches or in_flight:
                hand_out()
                if on_progress:
                    on_progress(progress)
                ready, rest = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                if ready and rest:
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready += more
                arrived: list[TrialOutcome] = []
                for ref in ready:
                    slot, actor, batch = in_flight.pop(ref)
                    queued[slot] -= 1
                    progress.running -= len(batch)
                    try:
                        arrived += ray.get(ref)
                    except ray.exceptions.RayActorError as error:
                        # The actor died (node lost, out of memory, a crash in native code): a fresh
                        # actor takes its slot and its batches are tried again, one trial at a time.
                        if actors[slot] is actor:
                            actors[slot] = new_actor()
                        for job in batch:
                            if job.attempts >= MAX_ATTEMPTS:
                                record = replace(job.record, attempts=job.attempts)
                                arrived.append(TrialOutcome.of(record.failed(
                                    f"worker died {job.attempts} times: {error}", None, at=time.time())))
                            else:
                                batches.appendleft([job])
                hand_out()   # the actors get their next batch before the driver writes
                writer.write(arrived)
                if on_progress and ready:
                    on_progress(progress)
        except BaseException:
            status = "KILLED"
            raise
        finally:
            for actor in actors:
                ray.kill(actor)
            summary = {"trials_finished": progress.done, "trials_failed": progress.failed}
            closing = mirror.close.remote(status, summary, MIRROR_CLOSE_TIMEOUT)  # the sinks drain meanwhile
            writer.close()
            reconcile = ray.get(mirror.reconciled.remote())
            mirrored = ray.get(closing)
        device = "GPU" if gpus_each > 0 else "CPU"
        return SweepOutcome(progress.done, progress.failed, count, device, reconcile, mirrored,
                            time.perf_counter() - started)
