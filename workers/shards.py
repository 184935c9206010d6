"""Sharded trials on Ray: one actor per shard of X, placed by a placement group spread over the
nodes, and the coordinator's loop with checkpoints and restarts (core.kernel_shards; SPEC 4).

The coordinator runs in the driver: per round it exchanges a few small messages with the shards
(core.kernel_shards lists them). Every ``checkpoint_every`` rounds each shard writes its state next
to the results (``<results>/<sweep>/.checkpoints/<trial key>/shard-<i>.r<round>.state``), then the
coordinator writes its own (``coordinator.r<round>.state``) and removes the older round's files; a
round's checkpoint counts once the coordinator's file is there. A shard actor that dies (its node
left, out of memory) ends the attempt: the shards are placed again and the trial goes on from the
last checkpoint, not from round 1, with the same final result. On several nodes the checkpoint
folder must be on a filesystem they share.
"""

from __future__ import annotations

import re
import resource
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from banditsweep.core.kernel_shards import KernelShard, ShardedKernelTrial, domain_shape
from banditsweep.core.sharding import shard_ranges
from banditsweep.core.trial import TrialSpec, checkpoint_key
from banditsweep.core.state_codec import StateFormatError
from banditsweep.workers.checkpoints import QUARANTINE, set_aside, write_atomically
from banditsweep.workers.record import TrialOutcome, TrialRecord

# Seconds to wait for the shards' placement group before saying that no node can hold it.
PLACEMENT_NOTICE = 30.0
MAX_ATTEMPTS = 3


@ray.remote
class ShardActor:
    """One shard of one trial (core.kernel_shards.KernelShard) in its own worker process."""

    def __init__(self, spec: TrialSpec, start: int, stop: int):
        self.shard = KernelShard(spec, start, stop)

    def where(self) -> tuple[str, str]:
        return ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.shard, method)(*args)

    def peak_memory_mb(self) -> float:
        """The peak resident memory of this shard's process (Linux reports KiB)."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    def save_state(self, path: str) -> None:
        write_atomically(Path(path), self.shard.state())

    def check_state(self, path: str) -> str | None:
        """Why the state file at ``path`` cannot be this shard's (None: it can)."""
        try:
            self.shard.check_state(Path(path).read_bytes())
            return None
        except (OSError, StateFormatError) as error:
            return f"{Path(path).name}: {error}"

    def load_state(self, path: str) -> None:
        self.shard.restore(Path(path).read_bytes())


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

    def map(self, method: str, *args: Any) -> list[Any]:
        if any(hasattr(arg, "nbytes") and arg.nbytes > 1 << 16 for arg in args):
            args = tuple(ray.put(arg) if hasattr(arg, "nbytes") and arg.nbytes > 1 << 16 else arg for arg in args)
        return ray.get([actor.call.remote(method, *args) for actor in self.actors])

    def call(self, shard: int, method: str, *args: Any) -> Any:
        return ray.get(self.actors[shard].call.remote(method, *args))

    def peak_memory_mb(self) -> list[float]:
        return ray.get([actor.peak_memory_mb.remote() for actor in self.actors])

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        remove_placement_group(self.group)


class ShardCheckpoints:
    """A sharded trial's checkpoint files (module docstring)."""

    def __init__(self, root: Path, spec: TrialSpec, every: int):
        self.directory = root / checkpoint_key([spec])
        self.every = every

    def latest(self) -> int | None:
        rounds = [int(m.group(1)) for p in self.directory.glob("coordinator.r*.state")
                  if (m := re.fullmatch(r"coordinator\.r(\d+)\.state", p.name))]
        return max(rounds) if rounds else None

    def coordinator(self, at: int) -> Path:
        return self.directory / f"coordinator.r{at}.state"

    def shard(self, index: int, at: int) -> Path:
        return self.directory / f"shard-{index}.r{at}.state"

    def save(self, trial: ShardedKernelTrial, shards: RayShards) -> None:
        at = trial.next_round - 1
        mine = trial.coordinator_state()
        ray.get([actor.save_state.remote(str(self.shard(i, at))) for i, actor in enumerate(shards.actors)])
        write_atomically(self.coordinator(at), mine)
        for path in self.directory.glob("*.state"):
            match = re.search(r"\.r(\d+)\.state$", path.name)
            if match and int(match.group(1)) != at:
                path.unlink(missing_ok=True)

    def load(self, shards: RayShards, spec: TrialSpec,
             on_message: Callable[[str], None] | None = None) -> ShardedKernelTrial | None:
        """The trial from its latest checkpoint, or None. Every file is checked before any shard
        takes its state, so that a damaged, planted or foreign one is set aside (with a note) and
        the trial starts from round 1 on untouched shards."""
        at = self.latest()
        if at is None:
            return None
        problems = [p for p in ray.get([actor.check_state.remote(str(self.shard(i, at)))
                                        for i, actor in enumerate(shards.actors)]) if p]
        try:
            coordinator = self.coordinator(at).read_bytes()
            ShardedKernelTrial.check_state(coordinator, spec)
        except (OSError, StateFormatError) as error:
            problems.append(f"{self.coordinator(at).name}: {error}")
        if problems:
            if on_message is not None:
                on_message(f"warning: checkpoint {self.directory} cannot be used ({problems[0]}): moved to "
                           f"quarantine/, the trial starts from round 1")
            set_aside(self.directory, self.directory.parent.parent / QUARANTINE, "; ".join(problems))
            return None
        ray.get([actor.load_state.remote(str(self.shard(i, at))) for i, actor in enumerate(shards.actors)])
        return ShardedKernelTrial.restore(coordinator, shards, spec)

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def run_sharded_trial(spec: TrialSpec, record: TrialRecord, shards: int, cpus: float, gpus: float,
                      checkpoint_root: Path | None, checkpoint_every: int | None,
                      on_progress: Callable[[int, float], None] | None = None,
                      on_message: Callable[[str], None] | None = None) -> TrialOutcome:
    """Run one sharded trial to its outcome; a shard that dies restarts the trial from its last
    checkpoint (up to MAX_ATTEMPTS placements); any other error fails the trial."""
    node = ray.util.get_node_ip_address()
    node_id = ray.get_runtime_context().get_node_id()
    checkpoints = ShardCheckpoints(checkpoint_root, spec, checkpoint_every) if checkpoint_every else None
    last_error = ""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        started = record.started(record.attempts + attempt - 1, node, node_id, "cpu", time.time())
        group = None
        try:
            group = RayShards(spec, shards, cpus, gpus, on_wait=on_message)
            trial = checkpoints.load(group, spec, on_message) if checkpoints is not None else None
            if trial is None:
                trial = ShardedKernelTrial(spec, group)
            callback = None if on_progress is None else (lambda _i, t, value: on_progress(t, value))
            while not trial.done:
                trial.advance(checkpoint_every, on_progress=callback, progress_every=record.log_every)
                if checkpoints is not None and not trial.done:
                    try:
                        checkpoints.save(trial, group)
                    except (OSError, ray.exceptions.RayTaskError) as error:
                        # A checkpoint only saves time: the trial goes on; the driver finds and
                        # reports a results folder that takes nothing when it writes the outcome.
                        if on_message is not None:
                            on_message(f"warning: {record.run_name}: checkpoint not saved: "
                                       f"{str(error).splitlines()[-1]}")
            result = trial.results()
            memory = group.peak_memory_mb()
            nodes = {node_id for _, node_id in group.nodes}
            extra = {"shard_nodes": float(len(nodes)), "shard_peak_rss_mb_max": max(memory),
                     "shard_peak_rss_mb_mean": sum(memory) / len(memory),
                     **{f"shard_{i}_peak_rss_mb": value for i, value in enumerate(memory)}}
            if checkpoints is not None:
                checkpoints.discard()
            return TrialOutcome.of(started.finished(result, time.time(), **extra), result)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as error:
            last_error = f"a shard actor died: {error}"
            if on_message is not None:
                on_message(f"{record.run_name}: {last_error.splitlines()[0]}; placing the shards again "
                           f"(attempt {attempt + 1} of {MAX_ATTEMPTS})")
            continue
        except Exception as error:
            import traceback

            return TrialOutcome.of(started.failed(f"{type(error).__name__}: {error}", traceback.format_exc(),
                                                  at=time.time()))
        finally:
            if group is not None:
                group.close()
    return TrialOutcome.of(started.failed(f"shards died {MAX_ATTEMPTS} times: {last_error}", None, at=time.time()))
