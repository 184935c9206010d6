"""In-trial checkpoints on disk, the store behind core's checkpoint driver (core.engine.round_loop.play_out,
``Checkpoints``): the state of an unfinished round loop, saved every ``checkpoint_every`` rounds under
``<results root>/<sweep>/.checkpoints/<key>.state``. A sharded trial keeps its coordinator's state
there and each shard's part under ``<key>/`` (``shard-<start>.r<round>.state``), written by the
shard's own process.

A trial actor that dies (a preempted node, out of memory) leaves its batch's last state there; the
batch's next attempt resumes from it and ends bit-identical to a run never stopped. A finished
batch's state is removed. Files appear by atomic rename, so a crash mid-save leaves the previous
state. On a cluster the folder stays on the driver's node and processes on other nodes reach it
through the run's keeper (workers.execution.checkpoint_keeper): a retry on another node finds the
state without a filesystem the nodes share.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

# Checkpoint files are written as every result file is; workers.execution.sharded_trials writes its shards' states with it.
from banditsweep.workers.storage.atomic import write_atomically
from banditsweep.workers.storage.paths import SweepFolder
from banditsweep.workers.storage.set_aside import set_aside
from banditsweep.workers.storage.untrusted_files import json_value, open_regular, read_regular

__all__ = ["CheckpointFiles", "write_atomically"]

log = logging.getLogger(__name__)

# Seconds between two looks for the stop marker: a round costs no file-system call, a stop is seen
# within this (plus the round being played) of the driver's request.
STOP_POLL = 0.2
# The driver's note of which trials each handed-out batch holds, one JSON line a batch: a state is
# named by its batch (core.engine.trial.checkpoint_key), and the next run cuts its batches anew (from
# fewer trials, on another number of workers), so without the note a saved batch would not be formed
# again and its state never read.
BATCHES = "batches.jsonl"
# The note is read as hostile data: at most this many bytes.
BATCHES_LIMIT = 64 << 20


@dataclass
class CheckpointFiles:
    directory: Path
    every: int
    # The run's stop marker, ``.checkpoints/<stop_marker>`` (named by the run, so that one left by an
    # earlier run asks nothing of this one): while it exists the run's trials save and stop.
    stop_marker: str | None = None
    _stop_checked: float = field(default=-math.inf, init=False, repr=False, compare=False)
    _stopping: bool = field(default=False, init=False, repr=False, compare=False)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.state"

    def request_stop(self) -> bool:
        """Ask the run's running trials to save their state now and stop (the driver, on a
        SIGTERM or Ctrl-C); False when the marker cannot be written (they are then stopped as
        before, losing the rounds since their last periodic checkpoint)."""
        if self.stop_marker is None:
            return False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(self.directory / self.stop_marker, b"stop\n")
            return True
        except OSError as error:
            log.warning("stop marker %s not written: %s", self.directory / self.stop_marker, error)
            return False

    def clear_stop(self) -> None:
        if self.stop_marker is not None:
            try:
                (self.directory / self.stop_marker).unlink(missing_ok=True)
            except OSError as error:
                log.warning("stop marker %s not removed: %s", self.directory / self.stop_marker, error)

    def stop_requested(self) -> bool:
        """Whether the run's stop marker exists (core.engine.round_loop.play_out asks after every round; the
        file is looked at no more than every ``STOP_POLL`` seconds, and once seen the answer stays)."""
        if self.stop_marker is None or self._stopping:
            return self._stopping
        now = time.monotonic()
        if now - self._stop_checked >= STOP_POLL:
            self._stop_checked = now
            self._stopping = (self.directory / self.stop_marker).exists()
        return self._stopping

    def note_batches(self, batches: dict[str, list[str]]) -> None:
        """Note, for the next run, which trials (by id, in order) the batches named ``key`` hold: this
        run's batches replace the note (they include every earlier batch with a state whose trials
        are still to run: :func:`workers.execution.batches.make_batches` formed them again)."""
        if not batches:
            return
        lines = "".join(json.dumps({"key": key, "trials": trials}) + "\n" for key, trials in batches.items())
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(self.directory / BATCHES, lines.encode())
        except OSError as error:   # only a resume's help is lost: the trials start from round 1
            log.warning("checkpoint batches not noted in %s: %s", self.directory / BATCHES, error)

    def saved_batches(self) -> list[list[str]]:
        """The batches (their trial ids, in order) that have a saved state, as noted by the runs that
        handed them out; each once. A note that cannot be read is passed over, line by line."""
        try:
            text = read_regular(self.directory / BATCHES, BATCHES_LIMIT).decode("utf-8", errors="replace")
        except OSError:
            return []
        found: dict[str, list[str]] = {}
        for line in text.splitlines():
            try:
                entry = json_value(line)
            except (ValueError, RecursionError):
                continue
            if (isinstance(entry, dict) and isinstance(entry.get("key"), str) and isinstance(entry.get("trials"), list)
                    and entry["trials"] and all(isinstance(trial, str) for trial in entry["trials"])
                    and entry["key"] not in found and _is_key(entry["key"]) and self._path(entry["key"]).is_file()):
                found[entry["key"]] = entry["trials"]
        return list(found.values())

    def forget_batches(self) -> None:
        """Remove the note once no state is left to find by it."""
        try:
            if not any(self.directory.glob("*.state")):
                (self.directory / BATCHES).unlink(missing_ok=True)
        except OSError as error:
            log.warning("%s not removed: %s", self.directory / BATCHES, error)

    def load(self, key: str) -> bytes | None:
        """The state saved under ``key``, or None. One that is not a regular file (a link, a FIFO
        that would block the trial for ever, a device) raises ``NotARegularFile`` (an OSError: the
        round loop sets it aside)."""
        try:
            with open_regular(self._path(key)) as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def save(self, key: str, state: bytes) -> bool:
        """Save the state; False when the folder cannot take it (disk full, read-only, permissions):
        a checkpoint only saves time, so the trial goes on (a retry would resume from the previous
        one), and whether results can be written is the driver's to find and report."""
        try:
            write_atomically(self._path(key), state)
            return True
        except OSError as error:
            log.warning("checkpoint %s not saved: %s", self._path(key), error)
            return False

    def discard(self, key: str) -> None:
        """Remove the state under ``key`` and its parts."""
        try:
            self._path(key).unlink(missing_ok=True)
            shutil.rmtree(self.directory / key, ignore_errors=True)
        except OSError as error:   # the driver reports a folder it cannot write to
            log.warning("checkpoint %s not removed: %s", self._path(key), error)

    def reject(self, key: str, reason: str) -> None:
        """A state that cannot be used is moved, with its parts, to ``<sweep>/quarantine/`` with a
        note; never read again. Its loop starts from round 1 and records ``checkpoint_rejected``.

        Every checkpoint is read as hostile data (core.engine.state_codec, core.engine.round_loop.RoundLoop.
        saved_attributes). Refused: bytes that are not a state this project writes (garbage,
        truncated, pickle or another format, compressed or oversized entries, array headers that
        claim more than their entry holds, JSON nested deeper than ``state_codec.MAX_DEPTH``, any
        error reading them raises); classes outside ``banditsweep.core`` and the registered plugins
        (no other module is imported); states of other trials or another horizon; a next round
        outside 2..horizon (``play_out`` saves only after a round was played and while one is
        left: a "finished" state is never written); a recorder whose shape or dtypes are not the
        trials', whose recorded rounds are not finite (or hold a negative arm or time), whose rounds
        after the last played are not zero, or whose cumulative regret is not the running sum of
        its per-round regrets (to a relative 1e-9). Not detected: a state forged to be internally
        consistent (plausible rewards and regrets, a matching policy and environment state): it
        cannot be told apart from one the project wrote, so a results folder from someone else can
        still make its trials' recorded rounds say what its author chose. Only a folder one trusts
        (or one whose ``.checkpoints/`` is removed before ``run``) gives results one can trust."""
        quarantine = SweepFolder(self.directory.parent).quarantine_dir
        _set_aside(self._path(key), quarantine, reason)
        if (self.directory / key).is_dir():
            _set_aside(self.directory / key, quarantine, reason)


def _is_key(key: str) -> bool:
    """A checkpoint key as core.engine.trial.checkpoint_key makes them (never a path)."""
    return len(key) == 24 and all(c in "0123456789abcdef" for c in key)


def _set_aside(path: Path, quarantine: Path, reason: str) -> None:
    """An unusable checkpoint file or folder moved into ``quarantine`` with a note of why. If the
    folder takes nothing, it stays where it is: it is refused again on the next attempt (never read
    as a state), and the driver reports a folder that cannot be written."""
    try:
        target = set_aside(path, quarantine, f"checkpoint-{path.name}", note=f"{path}: {reason}\n")
    except OSError as error:
        log.warning("checkpoint %s (%s) not moved aside: %s", path, reason, error)
        return
    log.warning("checkpoint %s cannot be used (%s): moved to %s; its trials start from round 1", path, reason, target)
