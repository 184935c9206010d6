"""What a sweep that runs right now is doing, for ``banditsweep status`` in another process (or on
another machine that sees the results folder): ``<sweep>/running.json``.

The driver of a ``run`` rewrites the file (atomically, workers.storage.atomic) every
:data:`WRITE_EVERY` seconds from a thread of its own, also while it waits for a long sharded round
or for its sinks: each trial running now with its round of T and when its last progress event came
(the trial actors stream them to the mirror, :class:`RunningTrials` keeps the latest of each), and
the driver's pid, host and ``written_at``. At the end of the run the file is rewritten once more
with no trials, ``ended_at`` and the run's status. A driver killed outright leaves the file as it
was: a ``written_at`` older than :data:`STALE_SECONDS` says so.

The file is read as data, checked field by field (:func:`read_heartbeat`); one that is not what a
driver writes is set aside with a one-line reason, never trusted in part.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from banditsweep.workers.storage.atomic import write_atomically
from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.record import TrialRecord

HEARTBEAT_FILE = "running.json"
FORMAT = 1
# Seconds between two writes of the file while a run is going on.
WRITE_EVERY = 2.0
# Seconds after which a file not rewritten says its driver is gone (killed, or its machine lost):
# many writes missed, not a slow disk.
STALE_SECONDS = 60.0
# Trials listed in the file at most (a big cluster runs thousands at once; the count says all).
MAX_LISTED = 1000
# A file larger than this is not one a driver wrote.
MAX_BYTES = 4 << 20
# Seconds a ``written_at`` may lie ahead of the reader's clock (clocks of two machines differ a little).
CLOCK_SLACK = 60.0


class RunningTrials:
    """The trials of a run that started and have not ended, each with its latest round, fed by the
    same events as the mirror (a start from the trial actor, progress from it, the end from the
    driver). Ray keeps no order between two callers' calls, so a start may come after its trial's
    end: a start of an attempt that already ended is dropped, as the mirror drops it."""

    def __init__(self):
        self.trials: dict[str, dict[str, Any]] = {}
        self.ended_attempts: dict[str, int] = {}
        self.batches = 0

    def started(self, records: list[TrialRecord]) -> None:
        self.batches += 1
        now = time.time()
        for record in records:
            if self.ended_attempts.get(record.trial_id, -1) >= record.attempts:
                continue
            self.trials[record.trial_id] = {
                "trial_id": record.trial_id, "run_name": record.run_name, "round": 0, "horizon": record.horizon,
                "started_at": record.started_at or now, "updated_at": now, "node": record.node or "",
                "batch": self.batches, "batch_size": len(records)}

    def progress(self, trial_id: str, points: list[tuple[int, float]]) -> None:
        trial = self.trials.get(trial_id)
        if trial is not None and points:
            trial["round"] = max(trial["round"], max(int(t) for t, _ in points))
            trial["updated_at"] = time.time()

    def ended(self, records: list[TrialRecord]) -> None:
        for record in records:
            self.trials.pop(record.trial_id, None)
            self.ended_attempts[record.trial_id] = max(record.attempts, self.ended_attempts.get(record.trial_id, -1))

    def snapshot(self) -> list[dict[str, Any]]:
        return [dict(trial) for trial in self.trials.values()]


class Heartbeat:
    """The driver's writer of ``running.json``: :meth:`update` hands it the latest picture, a thread
    of its own writes it every ``every`` seconds (so a driver busy in a long call still says it is
    alive), :meth:`end` writes the last one. A file that cannot be written costs the run nothing:
    the record of truth is the journal."""

    def __init__(self, root: Path, every: float = WRITE_EVERY):
        self.path = Path(root) / HEARTBEAT_FILE
        self.every = every
        self.started_at = time.time()
        self.trials: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.error: str | None = None   # why the last write failed, if it did

    def start(self) -> "Heartbeat":
        self._write(None, None)
        self.thread = threading.Thread(target=self._beat, name="banditsweep-heartbeat", daemon=True)
        self.thread.start()
        return self

    def update(self, trials: list[dict[str, Any]] | None = None, **counts: int) -> None:
        with self.lock:
            if trials is not None:
                self.trials = trials
            self.counts.update(counts)

    def drop(self, trial_ids: set[str]) -> None:
        """Trials that ended (written to the store) before the next picture comes."""
        if trial_ids:
            with self.lock:
                self.trials = [trial for trial in self.trials if trial["trial_id"] not in trial_ids]

    def end(self, status: str) -> None:
        """Stop the thread and write the file of a run that has ended (no trials running)."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(self.every + 5.0)
        with self.lock:
            self.trials = []
        self._write(time.time(), status)

    def _beat(self) -> None:
        while not self.stop.wait(self.every):
            self._write(None, None)

    def _write(self, ended_at: float | None, status: str | None) -> None:
        with self.lock:
            trials = sorted(self.trials, key=lambda trial: (trial["batch"], trial["run_name"]))
            counts = dict(self.counts)
        content = {"format": FORMAT, "pid": os.getpid(), "host": socket.gethostname(), "started_at": self.started_at,
                   "written_at": time.time(), "ended_at": ended_at, "status": status or "RUNNING",
                   "running": len(trials), "trials": trials[:MAX_LISTED], **counts}
        try:
            write_atomically(self.path, json.dumps(content, allow_nan=False, default=str))
            self.error = None
        except (OSError, ValueError) as error:
            self.error = one_line(error)


# ---- reading ------------------------------------------------------------------------------------


@dataclass
class LiveTrial:
    trial_id: str
    run_name: str
    round: int
    horizon: int
    updated_at: float         # when its last progress event came (or its start)
    node: str = ""
    batch: int = 0            # the lockstep batch it runs in (trials of one batch share their rounds)
    batch_size: int = 1


@dataclass
class LiveRun:
    """What ``running.json`` says of the run that wrote it."""

    pid: int
    host: str
    started_at: float
    written_at: float
    ended_at: float | None
    status: str                     # RUNNING, or how the run ended
    running: int                    # trials running (the list may hold fewer)
    trials: list[LiveTrial] = field(default_factory=list)
    done: int | None = None         # trials of this run done, failed, and in all
    failed: int | None = None
    total: int | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.written_at)

    def stale(self, now: float | None = None) -> bool:
        """Not rewritten for longer than a live driver leaves it: the driver is gone."""
        return not self.ended and self.age(now) > STALE_SECONDS

    @property
    def running_ids(self) -> set[str]:
        return {trial.trial_id for trial in self.trials}


class _Malformed(ValueError):
    pass


def _number(data: dict, key: str, optional: bool = False, whole: bool = False, low: float = 0.0) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int if whole else (int, float))):
        raise _Malformed(f"{key}: expected {'a whole number' if whole else 'a number'}, got {one_line(repr(value), 40)}")
    if not math.isfinite(value) or value < low or value > 1e15:
        raise _Malformed(f"{key}: {one_line(repr(value), 40)} is out of range")
    return value


def _text(data: dict, key: str, limit: int = 200) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise _Malformed(f"{key}: expected text, got {one_line(repr(value), 40)}")
    return one_line(value, limit)   # printed to a terminal: no control characters


def _trial(data: Any) -> LiveTrial:
    if not isinstance(data, dict):
        raise _Malformed(f"trials: expected objects, got {one_line(repr(data), 40)}")
    trial_id = _text(data, "trial_id", 64)
    if not trial_id:
        raise _Malformed("trials: a trial without trial_id")
    horizon = _number(data, "horizon", whole=True, low=1)
    step = _number(data, "round", whole=True)
    if step > horizon:
        raise _Malformed(f"trials: round {step} beyond the horizon {horizon} (trial {trial_id})")
    return LiveTrial(trial_id, _text(data, "run_name"), step, horizon, _number(data, "updated_at"),
                     _text(data, "node", 100), _number(data, "batch", optional=True, whole=True) or 0,
                     _number(data, "batch_size", optional=True, whole=True, low=1) or 1)


def read_heartbeat(root: Path, now: float | None = None) -> tuple[LiveRun | None, str | None]:
    """``running.json`` of a sweep folder: (what it says, None), (None, None) when there is none, or
    (None, why it is ignored) when it is not what a driver writes."""
    path = Path(root) / HEARTBEAT_FILE
    now = time.time() if now is None else now
    try:
        if not path.is_file():
            return (None, f"{path}: not a regular file; ignored") if os.path.lexists(path) else (None, None)
        if path.stat().st_size > MAX_BYTES:
            return None, f"{path}: larger than {MAX_BYTES >> 20} MiB, not a run's progress file; ignored"
        data = json.loads(path.read_bytes(), parse_constant=lambda name: _no_constant(name))
        if not isinstance(data, dict):
            raise _Malformed(f"expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise _Malformed(f"format: expected {FORMAT}, got {one_line(repr(data.get('format')), 40)}")
        trials = data.get("trials")
        if not isinstance(trials, list):
            raise _Malformed("trials: expected a list")
        live = LiveRun(pid=_number(data, "pid", whole=True, low=1), host=_text(data, "host", 100),
                       started_at=_number(data, "started_at"), written_at=_number(data, "written_at"),
                       ended_at=_number(data, "ended_at", optional=True), status=_text(data, "status", 20),
                       running=_number(data, "running", whole=True), trials=[_trial(t) for t in trials[:MAX_LISTED]],
                       done=_number(data, "done", optional=True, whole=True),
                       failed=_number(data, "failed", optional=True, whole=True),
                       total=_number(data, "total", optional=True, whole=True))
        if live.written_at > now + CLOCK_SLACK:
            raise _Malformed(f"written_at lies {live.written_at - now:.0f} s in the future")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        # json's errors are ValueErrors; so are _Malformed's
        text = error.strerror if isinstance(error, OSError) and error.strerror else one_line(error, 120)
        if isinstance(error, json.JSONDecodeError):
            text = f"not JSON ({one_line(error, 100)})"
        return None, f"{path}: {text}; ignored (not a run's progress file)"
    return live, None


def _no_constant(name: str):
    raise _Malformed(f"{name} is not a JSON number")
