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

import errno
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError, model_validator

from banditsweep.workers.storage.atomic import write_atomically
from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.paths import SweepFolder
from banditsweep.workers.storage.record import TrialRecord
from banditsweep.workers.storage.strict_models import STRICT, WORDS, Says, first_problem
from banditsweep.workers.storage.untrusted_files import NotARegularFile, json_value, read_regular, shown

FORMAT = 1
# The largest number of the file (a pid, a count, seconds since 1970): far above any a driver writes.
MAX_NUMBER = 1e15
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
        self.path = SweepFolder(Path(root)).running_file
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


def _shown_text(limit: int):
    """Text as printed to a terminal (no control characters), at most ``limit`` characters."""
    return AfterValidator(lambda text: one_line(text, limit))


def _listed(trials: Any) -> Any:
    """The trials listed, no more than a driver writes, each an object (said before their fields)."""
    if not isinstance(trials, list):
        raise ValueError("expected a list")
    for trial in trials[:MAX_LISTED]:
        if not isinstance(trial, dict):
            raise ValueError(f"expected objects, got {one_line(repr(trial), 40)}")
    return trials[:MAX_LISTED]


# What running.json holds: numbers of a driver's clock and counts, text shown as one line.
Whole = Annotated[int, Field(ge=0, le=MAX_NUMBER)]
Seconds = Annotated[float, Field(ge=0, le=MAX_NUMBER)]


class LiveTrial(BaseModel):
    model_config = STRICT

    trial_id: Annotated[str, Field(min_length=1), _shown_text(64)]
    run_name: Annotated[str, _shown_text(200)] = ""
    round: Whole
    horizon: Annotated[int, Field(ge=1, le=MAX_NUMBER)]
    started_at: Seconds | None = None
    updated_at: Seconds       # when its last progress event came (or its start)
    node: Annotated[str, _shown_text(100)] = ""
    batch: Annotated[Whole | None, AfterValidator(lambda batch: batch or 0)] = 0   # trials of one batch share rounds
    batch_size: Annotated[Annotated[int, Field(ge=1, le=MAX_NUMBER)] | None, AfterValidator(lambda size: size or 1)] = 1

    @model_validator(mode="after")
    def _round_within_horizon(self):
        if self.round > self.horizon:
            raise ValueError(f"round {self.round} beyond the horizon {self.horizon} (trial {self.trial_id})")
        return self


class LiveRun(BaseModel):
    """What ``running.json`` says of the run that wrote it."""

    model_config = STRICT

    format: Annotated[int, Field(ge=FORMAT, le=FORMAT), Says(f"expected {FORMAT}")]
    pid: Annotated[int, Field(ge=1, le=MAX_NUMBER)]
    host: Annotated[str, _shown_text(100)] = ""
    started_at: Seconds
    written_at: Seconds
    ended_at: Seconds | None = None
    status: Annotated[str, _shown_text(20)] = ""   # RUNNING, or how the run ended
    running: Whole                                  # trials running (the list may hold fewer)
    trials: Annotated[list[LiveTrial], BeforeValidator(_listed)]
    done: Whole | None = None                       # trials of this run done, failed, and in all
    failed: Whole | None = None
    total: Whole | None = None

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


# What a field of running.json that fails its check says: the words status has always printed.
_WORDS = {**WORDS, "int_type": "expected a whole number", "int_from_float": "expected a whole number",
          "float_type": "expected a number", "string_type": "expected text", "literal_error": "expected {expected}",
          "finite_number": "out of range", "greater_than_equal": "out of range", "less_than_equal": "out of range",
          "missing": "missing", "extra_forbidden": "not a field of a run's progress file"}


def _said(error: ValidationError) -> str:
    problem = first_problem(error, LiveRun, _WORDS)
    if problem.kind in ("value_error", "missing"):
        return f"{problem.field}: {problem.words}"
    return f"{problem.field}: {problem.words}, got {one_line(repr(problem.value), 40)}"


def read_heartbeat(root: Path, now: float | None = None) -> tuple[LiveRun | None, str | None]:
    """``running.json`` of a sweep folder: (what it says, None), (None, None) when there is none, or
    (None, why it is ignored) when it is not what a driver writes."""
    path = SweepFolder(Path(root)).running_file
    now = time.time() if now is None else now
    try:
        text = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        return None, None
    except NotARegularFile as error:
        if error.errno == errno.EFBIG:
            return None, f"{shown(path)}: larger than {MAX_BYTES >> 20} MiB, not a run's progress file; ignored"
        return None, f"{shown(path)}: not a regular file; ignored"
    except OSError as error:
        return None, f"{shown(path)}: {error.strerror or one_line(error, 120)}; ignored (not a run's progress file)"
    try:
        data = json_value(text)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        try:
            live = LiveRun.model_validate(data)
        except ValidationError as error:
            raise ValueError(_said(error)) from None
        if live.written_at > now + CLOCK_SLACK:
            raise ValueError(f"written_at lies {live.written_at - now:.0f} s in the future")
    except (UnicodeDecodeError, ValueError, RecursionError) as error:   # json's errors are ValueErrors
        text = one_line(error, 120)
        if isinstance(error, json.JSONDecodeError):
            text = f"not JSON ({one_line(error, 100)})"
        return None, f"{shown(path)}: {text}; ignored (not a run's progress file)"
    return live, None

