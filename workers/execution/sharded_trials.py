"""Sharded trials on Ray: one actor per shard of X, placed by a placement group spread over the
nodes, and the attempts of a trial whose shards die (core.kernel.sharded; SPEC 4).

The coordinator runs in the driver: per round it sends its shards a few small typed requests
(core.kernel.sharded.protocol lists them), each answered by the actor's one entry point,
:meth:`ShardActor.handle`. It is played out by core's one checkpoint driver
(core.engine.round_loop.play_out) over the run's checkpoints (``workers.storage.checkpoint_files``): every ``checkpoint_every``
rounds each shard writes its part of the state from its own process
(``<results>/<sweep>/.checkpoints/<trial key>/shard-<start>.r<round>.state``), then the coordinator
its own (``<trial key>.state``), which names the round; a round's checkpoint counts once that file
is there. A shard actor that dies (its node left, out of memory) ends the attempt: the shards are
placed again and the trial goes on from the last checkpoint, not from round 1, with the same final
result. On a cluster the shards on other nodes save and read their parts through the run's checkpoint
keeper on the driver's node (workers.execution.checkpoint_keeper): the nodes need share no disk.
"""

from __future__ import annotations

import resource
import time
import traceback
from dataclasses import fields
from typing import Callable, TypeVar

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from banditsweep.core.kernel.sharded.coordinator import run_sharded
from banditsweep.core.kernel.sharded.partition import shard_ranges
from banditsweep.core.kernel.sharded.protocol import Request
from banditsweep.core.kernel.sharded.shard import KernelShard, domain_shape
from banditsweep.core.engine.round_loop import Checkpoints
from banditsweep.core.engine.trial import TrialSpec
from banditsweep.workers.provenance.code_identity import note_loaded, running_code
from banditsweep.workers.provenance.load import LoadSampler
from banditsweep.workers.provenance.runtime import runtime_info
from banditsweep.workers.storage.record import MAX_ATTEMPTS, TrialOutcome, TrialRecord

# A sharded trial runs in the driver: its code is what the driver loaded (running_code), noted now.
note_loaded()

# Seconds to wait for the shards' placement group before saying that no node can hold it.
PLACEMENT_NOTICE = 30.0
# A request carrying more array bytes than this is put in the object store once for all shards.
SHARED_PAYLOAD = 1 << 16

R = TypeVar("R")


def payload_bytes(request: Request) -> int:
    """The bytes of the arrays a request carries."""
    return sum(getattr(getattr(request, field.name), "nbytes", 0) for field in fields(request))


@ray.remote
class ShardActor:
    """One shard of one trial (core.kernel.sharded.shard.KernelShard) in its own worker process."""

    def __init__(self, spec: TrialSpec, start: int, stop: int):
        self.shard = KernelShard(spec, start, stop)

    def where(self) -> tuple[str, str]:
        return ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()

    def handle(self, request: Request[R]) -> R:
        return self.shard.handle(request)

    def peak_memory_mb(self) -> float:
        """The peak resident memory of this shard's process (Linux reports KiB)."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class RayShards:
    """The shards of one trial as Ray actors in a placement group (strategy SPREAD: across nodes
    where there are several), one bundle of ``cpus`` CPUs (and ``gpus`` GPUs) per shard."""

    def __init__(self, spec: TrialSpec, count: int, cpus: float, gpus: float,
                 on_wait: Callable[[str], None] | None = None):
        n, _ = domain_shape(spec)
        self.ranges = shard_ranges(n, count)
        bundle = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
        self.group = placement_group([dict(bundle) for _ in range(count)], strategy="SPREAD")
        self.actors: list = []
        waited = 0.0
        while not ray.wait([self.group.ready()], timeout=5.0)[0]:
            waited += 5.0
            if on_wait is not None and waited % PLACEMENT_NOTICE == 0:
                on_wait(f"waiting for {count} shard bundles of {bundle} (the nodes cannot place them yet)")
        self.actors = [
            ShardActor.options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=i)).remote(spec, start, stop)
            for i, (start, stop) in enumerate(self.ranges)]
        self.nodes = ray.get([actor.where.remote() for actor in self.actors])

    def map(self, request: Request[R]) -> list[R]:
        sent = ray.put(request) if payload_bytes(request) > SHARED_PAYLOAD else request
        return ray.get([actor.handle.remote(sent) for actor in self.actors])

    def ask(self, shard: int, request: Request[R]) -> R:
        return ray.get(self.actors[shard].handle.remote(request))

    def peak_memory_mb(self) -> list[float]:
        return ray.get([actor.peak_memory_mb.remote() for actor in self.actors])

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        remove_placement_group(self.group)


def run_sharded_trial(spec: TrialSpec, record: TrialRecord, shards: int, cpus: float, gpus: float,
                      checkpoints: Checkpoints | None, on_progress: Callable[[int, float], None] | None = None,
                      on_message: Callable[[str], None] | None = None) -> TrialOutcome:
    """Run one sharded trial to its outcome; a shard that dies restarts the trial from its last
    checkpoint (up to MAX_ATTEMPTS placements); any other error fails the trial."""
    node = ray.util.get_node_ip_address()
    node_id = ray.get_runtime_context().get_node_id()
    last_error = ""
    code, runtime = running_code(spec), runtime_info("cpu", max(1, int(cpus)))
    for attempt in range(1, MAX_ATTEMPTS + 1):
        started = record.started(record.attempts + attempt - 1, node, node_id, "cpu", time.time()).ran_on(code, runtime)
        group = None
        try:
            group = RayShards(spec, shards, cpus, gpus, on_wait=on_message)
            load = LoadSampler()   # of the coordinator's machine (provenance.load)

            def callback(_index, t, value):
                load.tick()
                if on_progress is not None:
                    on_progress(t, value)
            result = run_sharded(spec, group, callback, record.log_every, checkpoints)
            memory = group.peak_memory_mb()
            nodes = {node_id for _, node_id in group.nodes}
            extra = {"shard_nodes": float(len(nodes)), "shard_peak_rss_mb_max": max(memory),
                     "shard_peak_rss_mb_mean": sum(memory) / len(memory),
                     **{f"shard_{i}_peak_rss_mb": value for i, value in enumerate(memory)}}
            return TrialOutcome.of(started.finished(result, time.time(), load.mean(), **extra), result)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as error:
            last_error = f"a shard actor died: {error}"
            if on_message is not None:
                on_message(f"{record.run_name}: {last_error.splitlines()[0]}; placing the shards again "
                           f"(attempt {attempt + 1} of {MAX_ATTEMPTS})")
            continue
        except Exception as error:
            return TrialOutcome.of(started.failed(f"{type(error).__name__}: {error}", traceback.format_exc(),
                                                  at=time.time()))
        finally:
            if group is not None:
                group.close()
    return TrialOutcome.of(started.failed(f"shards died {MAX_ATTEMPTS} times: {last_error}", None, at=time.time()))
