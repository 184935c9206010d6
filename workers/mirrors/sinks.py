"""Result sinks: mirrors of a sweep's Parquet record of truth (MLflow, or a plugin's).

The Parquet store (workers.storage.store) is written by the driver and decides what is done. Every other
destination is a :class:`Sink`, a class registered by name (``registry.register_sink``) and chosen
with ``--sink NAME`` or a spec's ``sinks:`` list. Sinks are fed by a :class:`Mirror`: trial actors
and the driver hand it events without waiting, and a background thread delivers them in batches,
so a slow sink never slows the sweep. A sink that raises (a tracking server that is down) keeps
what it owes, in order, and is retried with back-off; the run says so once, and what is still owed
at the end is brought up to date by the next ``run`` or ``sync-mlflow`` through :meth:`Sink.open`.

Batching is what makes a mirror keep up with a cluster: the mirror drains its queue every
``interval`` seconds; a trial's start is held for ``hold_starts`` seconds, so a trial that ends
within them reaches the sinks as one ended trial (its start and streamed points folded into it: one
MLflow run written once, not created and then updated), and the streamed points of a running trial
arrive as one list per drain.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from banditsweep.core.engine import registry
from banditsweep.workers.errors import InputError
from banditsweep.workers.storage.record import TrialRecord

log = logging.getLogger(__name__)

def sink_names() -> list[str]:
    """Every registered sink: this package's and the plugins'."""
    return registry.sink_names()


# (t, cumulative regret) points of a trial's curve
Points = list[tuple[int, float]]
# Longest wait between two tries of a sink that fails (doubling from 1 s).
MAX_RETRY_DELAY = 30.0
# Ended trials per sink call (a sink may ask for fewer with an ``ended_per_call`` attribute): a
# transaction's worth for a sink that writes a call's trials together.
ENDED_PER_CALL = 500
# Seconds a trial runs before its start reaches the sinks (a shorter one reaches them once, ended).
HOLD_STARTS = 2.0
# Tries to open a sink (1 s, then 2 s apart) before a run goes on without it.
OPEN_ATTEMPTS = 3


@dataclass(frozen=True)
class SinkContext:
    """What a sink knows about the store it mirrors."""

    sweep: str
    results_root: str        # with ``sweep``, the store's identity
    command: str = "run"
    spec_path: str = ""      # the spec the run was started with, and its text
    spec_text: str = ""
    source_commit: str = ""  # the git commit of the code that ran, where known
    settings: dict[str, str] = field(default_factory=dict)   # the run's sweep-level settings (horizon, seeds...)
    # Each sink's own options, by the name of the sink that reads them, as plain JSON values (the
    # context reaches the mirror actor and the preparing process): this layer passes them through
    # unread, and a sink parses its own section into its typed options.
    sink_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Fed by a Mirror, which retries a failing call itself, with back-off: a sink's client need not
    # retry for long on its own (else: a command waiting on the sink, e.g. a catch-up).
    retried_by_mirror: bool = False

    @property
    def store_id(self) -> str:
        """The store's identity: every run a sink makes carries it, and a sink touches only its own
        store's runs (two results roots with the same sweep name share an MLflow experiment)."""
        return store_id(self.results_root, self.sweep)

    @property
    def store(self):
        """The sweep's Parquet store (imported here: trial actors load this module and need no pyarrow)."""
        from banditsweep.workers.storage.store import SweepStore

        return SweepStore.for_sweep(self.results_root, self.sweep)


@runtime_checkable
class Sink(Protocol):
    """A mirror of the record of truth. Constructed as ``cls(context)`` (its own options, if it takes
    any, in ``context.sink_options``); every call gets lists, in the order the events happened; a trial's ``trials_started`` may come again when it is retried
    (its earlier attempt's points are then void)."""

    def open(self, records: dict[str, TrialRecord], pending: list[str]) -> dict[str, int]:
        """Before a run: agree with the journal's ``records``; ``pending`` trials are about to run.
        Returns counts worth reporting (e.g. ``{"rebuilt_runs": 3}``)."""

    def trials_started(self, records: list[TrialRecord]) -> None: ...

    def progress(self, points: dict[str, Points]) -> None:
        """Streamed curve points of running trials, by trial id."""

    def trials_ended(self, ended: list[tuple[TrialRecord, Points]]) -> None:
        """Finished or failed trials, each with its thinned curve (empty when it failed); durable in
        the Parquet store when they get here."""

    def close(self, status: str, summary: dict[str, float]) -> str | None:
        """The run ended (``FINISHED``, ``KILLED``); ``summary`` counts its trials. May return one
        line for the user (where to look at the results)."""

    # Optional: ``prepare(context)``, a static method doing what opening the sink will need and Ray
    # does not (creating a new store), run while Ray starts (workers.mirrors.prepare).


@dataclass
class MirrorStatus:
    delivered: int = 0                                  # ended trials handed to every sink
    pending: int = 0                                    # events not delivered when the mirror closed
    errors: list[str] = field(default_factory=list)     # one line per failed sink call
    notes: list[str] = field(default_factory=list)      # what the sinks said when they closed


class Mirror:
    """Feeds sinks from a queue on a background thread (see the module docstring)."""

    def __init__(self, sinks: list[Sink], interval: float = 0.5, hold_starts: float = HOLD_STARTS):
        self.sinks = sinks
        self.interval = interval
        # trial id -> (record, when its start came, points since): a start is handed on only once the
        # trial has run ``hold_starts`` seconds, so a short trial costs its sinks one ended event.
        self.hold_starts = hold_starts
        self._held: dict[str, tuple[TrialRecord, float, Points]] = {}
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.status = MirrorStatus()
        self._backlog: dict[int, list] = {}      # per sink: calls not delivered yet (it failed)
        self._retry_at: dict[int, float] = {}
        self._delay: dict[int, float] = {}
        self._down: set[int] = set()
        # trial id -> the attempt whose end was handed on. A trial's start comes from its actor and
        # its end from the driver: Ray keeps the order of one caller's calls, not of two callers', so
        # a start may arrive after the end. Such a start (of that attempt or an earlier one) and any
        # points after the end are dropped: a trial ends once per run.
        self._ended: dict[str, int] = {}
        self._stop = threading.Event()
        self._abort = threading.Event()    # stop delivering ended trials (the user stopped waiting)
        # What is owed is counted by trial id: the trials handed on as ended, and per sink those it
        # has taken (a chunk in flight, or kept after a failure, is neither taken nor counted twice).
        self._handed: set[str] = set()
        self._taken: dict[int, set[str]] = {index: set() for index in range(len(sinks))}
        self._thread = threading.Thread(target=self._deliver_forever, name="banditsweep-mirror", daemon=True)
        self._thread.start()

    # ---- what producers call (never blocks) ---------------------------------------------------

    def started(self, records: list[TrialRecord]) -> None:
        self.events.put(("started", records))

    def progress(self, trial_id: str, points: Points) -> None:
        self.events.put(("progress", (trial_id, points)))

    def ended(self, ended: list[tuple[TrialRecord, Points]]) -> None:
        self._handed.update(record.trial_id for record, _ in ended)
        self.events.put(("ended", ended))

    def close(self, status: str, summary: dict[str, float], timeout: float = 60.0) -> MirrorStatus:
        """Deliver what is queued (waiting at most ``timeout`` seconds), then close every sink."""
        self.begin_close(status, summary)
        if not self.wait_closed(timeout):
            self.abort(f"the sinks were still busy after {timeout:.0f} s")
        return self.status

    def begin_close(self, status: str, summary: dict[str, float]) -> None:
        """Ask for the end: what is queued is delivered, then every sink is closed."""
        self.events.put(("close", (status, summary)))
        self._stop.set()

    def wait_closed(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the delivery thread to finish closing; whether it has."""
        self._thread.join(seconds)
        return not self._thread.is_alive()

    def owed(self) -> int:
        """Trials that ended in this run and that some sink has not taken yet (queued, in flight, or
        kept for a sink that failed): each counted once, so never more than the trials that ended."""
        handed = set(self._handed)
        return max((len(handed - set(taken)) for taken in list(self._taken.values())), default=0)

    def abort(self, reason: str, grace: float = 30.0) -> MirrorStatus:
        """Stop delivering ended trials (after the chunk in hand), close the sinks (a run still open
        is marked KILLED, never left RUNNING) and say exactly what the sinks lack and how to catch up."""
        self._abort.set()
        # The sinks are closed as KILLED unless the run's own close is queued already (which comes
        # first); either way the delivery thread ends with the first close it meets.
        self.events.put(("close", ("KILLED", {})))
        self._stop.set()
        self._thread.join(grace)
        missing = self.owed()
        if missing:
            self.status.pending = missing
            self.status.errors.insert(0,
                f"{reason}: the sinks lack {missing:,} of the {len(self._handed):,} trials that ended in this run (their "
                "results are in Parquet); `banditsweep sync-mlflow SPEC` (or the next run) writes them")
        if self._thread.is_alive():
            self.status.errors.append("a sink call was still in progress when the run ended")
        return self.status

    # ---- the delivery thread ------------------------------------------------------------------

    def _deliver_forever(self) -> None:
        while True:
            if self._stop.is_set():
                # Closing: the close is queued; a sink still in back-off is retried at a short pace,
                # never in a loop that would hold a core (and this process's other threads) for ever.
                time.sleep(min(self.interval, 0.05))
            else:
                self._stop.wait(self.interval)
            events = []
            while True:
                try:
                    events.append(self.events.get_nowait())
                except queue.Empty:
                    break
            closing = self._deliver(events)
            if closing:
                return

    def _deliver(self, events: list) -> bool:
        """Fold a drain's events (see the module docstring) and hand them to every sink."""
        started: dict[str, TrialRecord] = {}
        points: dict[str, Points] = {}
        ended: dict[str, tuple[TrialRecord, Points]] = {}
        close = None
        held = self._held
        for kind, payload in events:
            if kind == "started":
                for record in payload:
                    if self._ended.get(record.trial_id, -1) >= record.attempts:
                        continue
                    points.pop(record.trial_id, None)   # points of an earlier attempt are void
                    held[record.trial_id] = (record, time.monotonic(), [])
            elif kind == "progress":
                trial_id, new = payload
                if trial_id in held:
                    held[trial_id][2].extend(new)
                elif trial_id not in self._ended:
                    points.setdefault(trial_id, []).extend(new)
            elif kind == "ended":
                for record, curve in payload:
                    held.pop(record.trial_id, None)     # a short trial: its start is folded into its end
                    points.pop(record.trial_id, None)   # the ended trial carries its whole curve
                    ended[record.trial_id] = (record, curve)
                    self._ended[record.trial_id] = max(record.attempts, self._ended.get(record.trial_id, -1))
            elif kind == "close":
                close = payload
        # Starts held long enough go on, with the points that came meanwhile (at the close, a trial
        # that started less than that before and never ended gets no run: it is pending, and the
        # next run makes its run).
        due = [trial_id for trial_id, (_, since, _) in held.items() if time.monotonic() - since >= self.hold_starts]
        for trial_id in due:
            record, _, early = held.pop(trial_id)
            started[trial_id] = record
            if early:
                points[trial_id] = early + points.get(trial_id, [])
        if close is not None:
            held.clear()
        if started:
            self._call_all("trials_started", list(started.values()))
        if points:
            self._call_all("progress", points)
        # Ended trials go in chunks: the mirror's progress can be told (owed()) and a wait for it
        # cut short between two chunks (abort()).
        # The size is asked before each chunk: a sink may pace it by how fast its store took the last.
        ended_list, start = list(ended.values()), 0
        while start < len(ended_list) and not self._abort.is_set():
            size = min([getattr(sink, "ended_per_call", ENDED_PER_CALL) for sink in self.sinks] or [ENDED_PER_CALL])
            chunk = ended_list[start:start + max(1, size)]
            self._call_all("trials_ended", chunk)
            self.status.delivered += len(chunk)
            start += len(chunk)
        self._retry_backlogs()
        if close is not None:
            self.status.notes += [note for note in self._call_all("close", *close, final=True) if note]
            owed = sum(len(backlog) for backlog in self._backlog.values())
            if owed:
                self.status.pending = owed
                self.status.errors.append(f"{owed} deliveries to the sinks failed until the end; `banditsweep "
                                          "sync-mlflow SPEC` (or the next run) brings MLflow up to date")
            return True
        return False

    def _call_all(self, method: str, *arguments, final: bool = False) -> list:
        """Hand the call to every sink, after what it still owes from earlier calls that failed."""
        answers = []
        for index, sink in enumerate(self.sinks):
            self._backlog.setdefault(index, []).append((method, arguments))
            answers.append(self._drain(index, sink, final))
        return answers

    def _drain(self, index: int, sink: Sink, final: bool = False):
        """Deliver a sink's backlog in order; on a failure keep it and retry later, backing off."""
        backlog = self._backlog.get(index, [])
        if not backlog or (not final and time.monotonic() < self._retry_at.get(index, 0.0)):
            return None
        answer = None
        while backlog:
            method, arguments = backlog[0]
            try:
                answer = getattr(sink, method)(*arguments)
            except Exception as error:  # a mirror may fail; the record of truth is already written
                delay = min(2 * self._delay.get(index, 0.5), MAX_RETRY_DELAY)
                self._delay[index], self._retry_at[index] = delay, time.monotonic() + delay
                if index not in self._down:   # said once per outage
                    self._down.add(index)
                    first_line = f"{error}".splitlines()[0][:300] if f"{error}" else ""
                    message = (f"{type(sink).__name__} failed ({method}: {type(error).__name__}: {first_line}); "
                               "results are kept in Parquet and it is retried with back-off")
                    log.warning("%s\n%s", message, traceback.format_exc())
                    self.status.errors.append(message)
                return None
            backlog.pop(0)
            if method == "trials_ended":
                self._taken[index].update(record.trial_id for record, _ in arguments[0])
        if index in self._down:
            self._down.discard(index)
            self.status.notes.append(f"{type(sink).__name__} reachable again: caught up")
        self._delay.pop(index, None)
        return answer

    def _retry_backlogs(self) -> None:
        for index, sink in enumerate(self.sinks):
            self._drain(index, sink)


def store_id(results_root: str, sweep: str) -> str:
    from pathlib import Path

    text = f"{Path(results_root).resolve()}\n{sweep}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def open_sinks(names: list[str], context: SinkContext, records: dict[str, TrialRecord],
               pending: list[str]) -> tuple[list[Sink], dict[str, int], list[str]]:
    """Create the sinks and bring each up to date with the journal. Returns the sinks that opened,
    the summed counts they reported, and warnings: one line per sink that could not open (it is left
    out of this run; the record of truth does not need it), and what a sink had to say as it opened
    (its ``notices``, e.g. a broken store rebuilt)."""
    sinks: list[Sink] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    for name in names:
        sink = None
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                sink = registry.sink_class(name)(context)
                opened = sink.open(records, pending) or {}
                break
            except Exception as error:   # a store busy for a moment (SQLite locked by another run)
                sink = None
                if attempt < OPEN_ATTEMPTS and not isinstance(error, InputError):   # that one stays bad
                    time.sleep(attempt)
                    continue
                first_line = f"{error}".splitlines()[0][:300] if f"{error}" else ""
                errors.append(f"sink {name!r} could not open, left out of this run ({type(error).__name__}: "
                              f"{first_line}); results are kept in Parquet, and `banditsweep sync-mlflow SPEC` "
                              "(or the next run) brings it up to date")
                if not isinstance(error, InputError):   # its line says it all
                    log.warning("%s\n%s", errors[-1], traceback.format_exc())
                break
        if sink is None:
            continue
        sinks.append(sink)
        errors += getattr(sink, "notices", [])
        for key, value in opened.items():
            counts[key] = counts.get(key, 0) + value
    return sinks, counts, errors
