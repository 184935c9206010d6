"""The driver side of a sweep: connect to Ray, start the sink and the trial actors, hand out
batches of trials until none is left, re-queue the trials of actors that died.

Ray Core does the scheduling (actors placed by their resource requests); this module only keeps
a queue and a pool. One trial actor per GPU when the cluster has GPUs, else one per
``cpus_per_trial`` CPUs, capped by ``max_workers``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from banditsweep.core.batching import batch_key, preferred_batch_size
from banditsweep.core.trial import TrialSpec
from banditsweep.workers.signals import stop_cleanly_on_sigterm
from banditsweep.workers.actors import SinkActor, TrialActor, failed_record

MAX_ATTEMPTS = 3


@dataclass
class RunOptions:
    results_root: str
    tracking_uri: str
    log_every: int = 100
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    batch_trials: int | None = None
    max_workers: int | None = None
    address: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)


@dataclass
class Job:
    """One trial to run: its spec, its record for the sink, how often it was tried."""

    spec: TrialSpec
    record: dict[str, Any]
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
    parent_run_id: str
    workers: int
    device: str
    reconcile: dict[str, int]
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
            ray.init(num_cpus=self.num_cpus, include_dashboard=False, runtime_env=runtime_env,
                     log_to_driver=False, logging_level=logging.WARNING, _node_ip_address="127.0.0.1")
        self.started = True
        stop_cleanly_on_sigterm()  # ray.init installs a SIGTERM handler that aborts the driver
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            ray.shutdown()


def default_batch_size(spec: TrialSpec, on_gpu: bool, group_size: int, workers: int) -> int:
    """What the algorithm prefers on this device (core.batching.preferred_batch_size), but small
    enough that every worker gets a batch."""
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


def run_sweep(sweep_name: str, jobs: list[Job], options: RunOptions,
              on_progress: Callable[[Progress], None] | None = None) -> SweepOutcome:
    """Run ``jobs`` (trials not yet finished) on Ray; every outcome is written by the sink."""
    started = time.perf_counter()
    with RayConnection(options.address, options.env_vars):
        here = ray.get_runtime_context().get_node_id()
        sink = SinkActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote(options.results_root, sweep_name, options.tracking_uri)
        reconcile = ray.get(sink.reconcile.remote([job.record["trial_id"] for job in jobs]))
        progress = Progress(total=len(jobs))
        if on_progress:
            on_progress(progress)
        count, cpus_each, gpus_each = worker_plan(options)
        batches = deque(make_batches(jobs, options.batch_trials, gpus_each > 0, count))
        count = min(count, len(batches)) if batches else 0

        def new_actor():
            return TrialActor.options(num_cpus=cpus_each, num_gpus=gpus_each).remote(
                sink, options.log_every, max(1, int(cpus_each)))

        actors = [new_actor() for _ in range(count)]
        idle = list(range(count))
        in_flight: dict[Any, tuple[int, list[Job]]] = {}
        status = "FINISHED"
        try:
            while batches or in_flight:
                while idle and batches:
                    slot = idle.pop()
                    batch = batches.popleft()
                    for job in batch:
                        job.attempts += 1
                        job.record["attempts"] = job.attempts
                    in_flight[actors[slot].run.remote([(job.spec, job.record) for job in batch])] = (slot, batch)
                    progress.running += len(batch)
                if on_progress:
                    on_progress(progress)
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                for ref in ready:
                    slot, batch = in_flight.pop(ref)
                    progress.running -= len(batch)
                    try:
                        outcomes = ray.get(ref)
                    except ray.exceptions.RayActorError as error:
                        # The actor died (node lost, out of memory, a crash in native code): a fresh
                        # actor takes its slot and the batch is tried again, one trial at a time.
                        actors[slot] = new_actor()
                        for job in batch:
                            if job.attempts >= MAX_ATTEMPTS:
                                failed = failed_record(job.record, f"worker died {job.attempts} times: {error}", None)
                                ray.get(sink.finish_trial.remote(failed, None))
                                progress.failed += 1
                            else:
                                batches.appendleft([job])
                    else:
                        for _, trial_status in outcomes:
                            if trial_status == "finished":
                                progress.done += 1
                            else:
                                progress.failed += 1
                    idle.append(slot)
                    if on_progress:
                        on_progress(progress)
        except BaseException:
            status = "KILLED"
            raise
        finally:
            for actor in actors:
                ray.kill(actor)
            summary = {"trials_finished": progress.done, "trials_failed": progress.failed}
            parent_run_id = ray.get(sink.close.remote(status, summary))
        device = "GPU" if gpus_each > 0 else "CPU"
        return SweepOutcome(progress.done, progress.failed, parent_run_id, count, device, reconcile,
                            time.perf_counter() - started)
