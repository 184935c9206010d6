"""The trial actors of a run and what they can be given: how much each asks of Ray, how many the
nodes that are up can place, and, before Ray starts, whether every trial fits the node it would run
on (its memory, and on an embedded Ray its CPUs and GPUs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import ray

from banditsweep.core.engine.memory import gib, trial_footprint
from banditsweep.workers.execution.actors import TrialActor
from banditsweep.workers.errors import InputError, ResourceRequestError
from banditsweep.workers.execution.run_values import Job, RunOptions
from banditsweep.workers.execution.ray_address import embedded
from banditsweep.workers.execution.ray_connection import local_node


def check_fits(jobs: list[Job], options: RunOptions, source: str) -> None:
    """Every trial fits the node it would run on, found before Ray starts or anything is written:
    its memory (core.engine.memory's estimate) within the largest node's (this machine's, for an embedded
    Ray and for a cluster, whose nodes are not known before joining it), and on an embedded Ray the
    CPUs and GPUs a trial (or a sharded trial's shards together) asks for within this machine's.
    ``source`` (the spec) begins each message."""
    node = local_node()
    where = ("this machine" if embedded(options.address)
             else "this machine (the cluster's nodes are not known before joining it)")
    estimates: dict = {}
    for job in jobs:
        spec = job.spec
        key = (spec.algorithm, repr(spec.params), repr(spec.environment), spec.horizon, job.shards)
        if key in estimates:
            continue
        parts = estimates[key] = trial_footprint(spec, job.shards)
        total = sum(parts.values())
        if total > node["memory"]:
            detail = ", ".join(f"{name} {gib(size)}" for name, size in parts.items())
            raise InputError(f"{source}: trial {job.record.run_name!r} (horizon {spec.horizon}) needs an estimated "
                             f"{gib(total)} of memory ({detail}), but the largest node, {where}, has "
                             f"{gib(node['memory'])}; lower the horizon or the sizes (arms, dim, width, domain), or "
                             f"split the domain over shards")
    if not embedded(options.address):
        return
    asked = {"CPU": options.cpus_per_trial, "GPU": options.gpus_per_trial or 0.0}
    for name, value in asked.items():
        if value > node[name]:
            key = "cpus_per_trial" if name == "CPU" else "gpus_per_trial"
            raise InputError(f"{source}: resources.{key}: each trial asks for {value:g} {name}, but the embedded "
                             f"Ray on this machine has {node[name]:g} {name}; allowed: at most {node[name]:g} (or run "
                             f"on a cluster with --address)")
    for job in jobs:
        if not job.shards:
            continue
        cpus, gpus = job.shards * options.cpus_per_shard, job.shards * options.gpus_per_shard
        if cpus > node["CPU"] or gpus > node["GPU"]:
            raise InputError(f"{source}: resources.cpus_per_shard: a sharded trial ({job.record.run_name}) asks for "
                             f"{job.shards} shards of {options.cpus_per_shard:g} CPU and "
                             f"{options.gpus_per_shard:g} GPU, but the embedded Ray on this machine has "
                             f"{node['CPU']:g} CPU and {node['GPU']:g} GPU; lower resources.cpus_per_shard (shards may "
                             f"share a CPU, e.g. 0.5), or run on a cluster with --address")


def autoscaler_max_resources() -> dict[str, float]:
    """What the cluster's autoscaler could provide at most (its node types x max counts), or {}
    where there is no autoscaler. Ray publishes this only through a private accessor, hence the
    guard: without it, the pool follows the nodes that are up."""
    try:
        from ray._private.state import state

        return dict(state.get_max_resources_from_cluster_config() or {})
    except Exception:
        return {}


def actor_resources(options: RunOptions) -> tuple[float, float]:
    """(CPUs, GPUs) each trial actor asks Ray for. An explicit request is kept as it is, also when
    no node can hold it yet (the actors wait for one, and an autoscaler sees the demand); by
    default, one GPU per actor when the cluster has GPUs or its autoscaler can launch some."""
    if options.gpus_per_trial is not None:
        return options.cpus_per_trial, float(options.gpus_per_trial)
    gpus = ray.cluster_resources().get("GPU", 0.0) or autoscaler_max_resources().get("GPU", 0.0)
    return options.cpus_per_trial, (1.0 if gpus else 0.0)


def placeable(cpus_each: float, gpus_each: float) -> int:
    """How many such actors the nodes that are up could hold (their total resources)."""
    resources = ray.cluster_resources()
    counts = []
    if cpus_each > 0:
        counts.append(int(resources.get("CPU", 0.0) // cpus_each))
    if gpus_each > 0:
        counts.append(int(resources.get("GPU", 0.0) // gpus_each))
    return min(counts) if counts else 1


@dataclass
class Slot:
    actor: Any
    ready_ref: Any                 # resolves when the actor is placed and built
    ready: bool = False
    queued: int = 0                # batches the actor holds
    isolated: bool = False         # it holds an isolated batch: nothing goes in its queue beside it
    placeable: bool = True         # a node that was up had room for it when it was asked for


class TrialPool:
    """The trial actors of a run, asked of Ray by what the spec requests and never sized once.

    The pool aims at ``wanted`` actors (the batches left, capped by ``--max-workers``) and holds as
    many as the nodes that are up can place, plus one waiting actor when none can be placed yet:
    actors Ray cannot place are the demand an autoscaler answers, and ``request_resources`` states
    the whole demand. Every few seconds the pool grows to what newly joined nodes hold; an actor
    whose node left is dropped (its batches run again elsewhere); once the queue is empty, idle
    actors are released so the autoscaler can remove their nodes.
    """

    CHECK_SECONDS = 2.0

    def __init__(self, mirror, cpus_each: float, gpus_each: float, cap: int | None, use_autoscaler: bool,
                 data_dir: str | None = None, shipped: tuple = (), datasets: tuple = ()):
        self.mirror, self.cpus_each, self.gpus_each = mirror, cpus_each, gpus_each
        self.data_dir, self.shipped, self.datasets = data_dir, shipped, datasets
        self.cap = cap if cap and cap > 0 else None
        self.use_autoscaler = use_autoscaler
        self.slots: list[Slot] = []
        self.checked_at = -math.inf
        self.most_ready = 0
        self.notes: list[str] = []

    @property
    def device(self) -> str:
        return "GPU" if self.gpus_each > 0 else "CPU"

    def ready_slots(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.ready]

    def waiting(self) -> int:
        return sum(1 for slot in self.slots if not slot.ready)

    def unplaced(self) -> int:
        """Actors not built whose asking found no node with room (the rest are only starting)."""
        if any(not slot.ready and not slot.placeable for slot in self.slots):
            room = placeable(self.cpus_each, self.gpus_each)   # a node may have joined since
            for slot in self.slots[:room]:
                slot.placeable = True
        return sum(1 for slot in self.slots if not slot.ready and not slot.placeable)

    def grow(self, wanted: int) -> None:
        """Aim at ``wanted`` actors (at most the cap), holding what the cluster can place now."""
        if time.monotonic() - self.checked_at < self.CHECK_SECONDS:
            return
        self.checked_at = time.monotonic()
        target = wanted if self.cap is None else min(wanted, self.cap)
        if self.use_autoscaler:
            self._request(target)
        room = placeable(self.cpus_each, self.gpus_each)
        target = min(target, max(room, 1))
        while len(self.slots) < target:
            actor = TrialActor.options(num_cpus=self.cpus_each, num_gpus=self.gpus_each).remote(
                self.mirror, max(1, int(self.cpus_each)), self.data_dir, self.shipped, self.datasets)
            self.slots.append(Slot(actor, actor.ready.remote(), placeable=len(self.slots) < room))

    def _request(self, count: int) -> None:
        from ray.autoscaler.sdk import request_resources

        bundle = {"CPU": self.cpus_each, **({"GPU": self.gpus_each} if self.gpus_each else {})}
        request_resources(bundles=[bundle] * count)

    def readiness(self) -> list:
        """The ready calls of the actors not yet placed."""
        return [slot.ready_ref for slot in self.slots if not slot.ready]

    def became_ready(self, ref) -> bool:
        """``ref`` was an actor's ready call: mark it (or drop the actor if it died first)."""
        for slot in self.slots:
            if slot.ready_ref is ref:
                try:
                    warning = ray.get(ref)
                except ray.exceptions.RayActorError:
                    self.slots.remove(slot)
                    return True
                slot.ready = True
                if warning and warning not in self.notes:
                    self.notes.append(warning)
                self.most_ready = max(self.most_ready, len(self.ready_slots()))
                return True
        return False

    def drop(self, actor) -> None:
        """The actor died: its slot goes (the next check adds actors where the cluster has room)."""
        self.slots = [slot for slot in self.slots if slot.actor is not actor]
        self.checked_at = -math.inf

    def release_idle(self) -> None:
        """Nothing left to hand out: let idle and still-waiting actors go."""
        for slot in [slot for slot in self.slots if slot.queued == 0]:
            ray.kill(slot.actor)
            self.slots.remove(slot)
        if self.use_autoscaler:
            self._request(0)

    def shutdown(self) -> None:
        for slot in self.slots:
            ray.kill(slot.actor)
        self.slots = []
        if self.use_autoscaler:
            self._request(0)


def check_shards_fit(sharded: list[Job], options: RunOptions) -> None:
    """On the embedded Ray every shard bundle sits on this machine: they must fit at once."""
    held = ray.cluster_resources()
    for job in sharded:
        cpus, gpus = job.shards * options.cpus_per_shard, job.shards * options.gpus_per_shard
        if cpus > held.get("CPU", 0) or gpus > held.get("GPU", 0):
            raise ResourceRequestError(
                f"a sharded trial ({job.record.run_name}) asks for {job.shards} shards of "
                f"{options.cpus_per_shard:g} CPU and {options.gpus_per_shard:g} GPU, but the embedded Ray on this "
                f"machine has {held.get('CPU', 0):g} CPU and {held.get('GPU', 0):g} GPU; lower "
                "resources.cpus_per_shard (shards may share a CPU, e.g. 0.5) or run on a cluster with --address")
