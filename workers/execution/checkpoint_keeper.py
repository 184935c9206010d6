"""Checkpoints on a cluster whose nodes share no disk: the run's checkpoint folder stays on the
driver's node, and trials on other nodes reach it through Ray.

A trial's state is saved every ``checkpoint_every`` rounds by the process that plays it: a trial
actor, or a sharded trial's shard actor saving its part. On one machine, or on nodes that share a
filesystem, that process can write ``<results>/<sweep>/.checkpoints/`` itself. On a cluster started
with ``ray up`` on cloud machines each node has a disk of its own: a state written there is lost with
the node, a retry on another node starts from round 1, and the run's stop marker (a file the driver
writes on a SIGTERM) is never seen. So on a cluster every checkpoint call of a process on another
node goes to :class:`CheckpointKeeper`, an actor pinned to the driver's node (no CPU of its own),
which reads and writes the driver's folder with :class:`~banditsweep.workers.storage.checkpoint_files.CheckpointFiles`:

    trial actor on node 1 --save(key, state)--> keeper on node 0 --> <results>/<sweep>/.checkpoints/key.state
    trial actor on node 2 --load(key)---------> keeper on node 0 --> the state node 1 saved

A process on the driver's node uses the folder directly, as without a cluster. The state travels
through Ray's object store once per save (sizes measured in docs/reliability.md, "Separate hosts"),
and a save the keeper cannot take within
``KEEPER_SECONDS`` counts as not saved: a checkpoint only saves time, the trial goes on.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from banditsweep.workers.storage.checkpoint_files import STOP_POLL, CheckpointFiles
from banditsweep.workers.storage.untrusted_files import NotARegularFile

__all__ = ["CheckpointKeeper", "ClusterCheckpoints", "run_checkpoints"]

log = logging.getLogger(__name__)

# Seconds a process on another node waits for the keeper to take or give a state before it goes on
# without (a node cut off from the driver's: the trial is not held up by its checkpoint).
KEEPER_SECONDS = 60.0
# Seconds it waits for the answer to "is the run stopping?" before it answers no for now.
STOP_ASK_SECONDS = 5.0


@ray.remote(num_cpus=0)
class CheckpointKeeper:
    """The run's checkpoint folder on the driver's node, for processes on other nodes."""

    def __init__(self, files: CheckpointFiles):
        self.files = files

    def load(self, key: str) -> tuple[str, bytes | str | None]:
        """``("state", bytes or None)``, or ``("unreadable", why)`` for a file that is not a regular
        one or cannot be read (raised again as an OSError where the state was asked for)."""
        try:
            return "state", self.files.load(key)
        except OSError as error:
            return "unreadable", f"{type(error).__name__}: {error.strerror or error}"

    def save(self, key: str, state: bytes) -> bool:
        return self.files.save(key, state)

    def discard(self, key: str) -> None:
        self.files.discard(key)

    def reject(self, key: str, reason: str) -> None:
        self.files.reject(key, reason)

    def stop_requested(self) -> bool:
        return self.files.stop_requested()


@dataclass
class ClusterCheckpoints:
    """The run's checkpoints as every process of it sees them (core.engine.round_loop.Checkpoints):
    the folder itself on the driver's node ``node_id``, the keeper on any other node. Sent to trial
    and shard actors with their work; the driver requests and clears the stop itself."""

    files: CheckpointFiles
    keeper: object
    node_id: str
    _here: bool | None = field(default=None, init=False, repr=False, compare=False)
    _stop_checked: float = field(default=-math.inf, init=False, repr=False, compare=False)
    _stopping: bool = field(default=False, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        # Where the process runs is decided where it unpickles; a stop seen by the sender is not the receiver's.
        return {"files": self.files, "keeper": self.keeper, "node_id": self.node_id}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    @property
    def every(self) -> int:
        return self.files.every

    @property
    def directory(self):
        return self.files.directory

    def local(self) -> bool:
        """Whether this process runs on the driver's node (and so reaches the folder itself)."""
        if self._here is None:
            self._here = ray.get_runtime_context().get_node_id() == self.node_id
        return self._here

    def _ask(self, call, seconds: float = KEEPER_SECONDS):
        return ray.get(call, timeout=seconds)

    def load(self, key: str) -> bytes | None:
        if self.local():
            return self.files.load(key)
        kind, value = self._ask(self.keeper.load.remote(key))
        if kind == "unreadable":
            raise NotARegularFile(f"{self.files.directory / key}.state (on the driver's node): {value}")
        return value

    def save(self, key: str, state: bytes) -> bool:
        if self.local():
            return self.files.save(key, state)
        try:
            return self._ask(self.keeper.save.remote(key, state))
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as error:
            # Not kept: a later attempt resumes from the previous checkpoint (said in the worker's log).
            log.warning("checkpoint %s not saved: the driver's node did not take it: %s", key, error)
            return False

    def discard(self, key: str) -> None:
        if self.local():
            self.files.discard(key)
        else:
            self._ask(self.keeper.discard.remote(key))

    def reject(self, key: str, reason: str) -> None:
        if self.local():
            self.files.reject(key, reason)
        else:
            self._ask(self.keeper.reject.remote(key, reason))

    def stop_requested(self) -> bool:
        """As :meth:`CheckpointFiles.stop_requested`: asked of the keeper no more than every
        ``STOP_POLL`` seconds, and once seen the answer stays."""
        if self.local():
            return self.files.stop_requested()
        if self._stopping:
            return True
        now = time.monotonic()
        if now - self._stop_checked >= STOP_POLL:
            self._stop_checked = now
            try:
                self._stopping = bool(self._ask(self.keeper.stop_requested.remote(), STOP_ASK_SECONDS))
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as error:
                # The driver's node is out of reach: asked again at the next poll.
                log.warning("the run's stop could not be asked of the driver's node: %s", error)
        return self._stopping

    # The driver's side (it runs on the folder's node).
    def request_stop(self) -> bool:
        return self.files.request_stop()

    def clear_stop(self) -> None:
        self.files.clear_stop()

    def forget_batches(self) -> None:
        self.files.forget_batches()

    def close(self) -> None:
        ray.kill(self.keeper)


def run_checkpoints(files: CheckpointFiles, cluster: bool) -> CheckpointFiles | ClusterCheckpoints:
    """The checkpoints a run hands its actors: ``files`` as they are on one machine (the embedded
    Ray), else behind a keeper on this, the driver's, node."""
    if not cluster:
        return files
    here = ray.get_runtime_context().get_node_id()
    keeper = CheckpointKeeper.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote(files)
    return ClusterCheckpoints(files, keeper, here)
