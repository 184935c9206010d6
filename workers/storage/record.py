"""The typed record of one trial, from plan to outcome: what the Parquet store writes, the MLflow
mirror logs, the store reads back and the report aggregates. Defined once, here.

A record is built by the CLI from a planned trial of the sweep spec (its fields up to ``group``),
stamped by the trial actor that runs it (:meth:`started`, then :meth:`finished` or :meth:`failed`),
and made durable by the store.
Times are epoch seconds in Python and UTC timestamps in Parquet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PENDING = "pending"
FINISHED = "finished"
FAILED = "failed"
# Tries of a trial whose worker died (its actor, or its shards' actors), counted in ``attempts``:
# a trial that kills its worker every time fails after these, alone.
MAX_ATTEMPTS = 3
# Bounds of what a journal record holds, each far above what a real record needs.
MAX_ERROR = 16 << 10          # characters of a failed trial's error message
MAX_TRACEBACK = 64 << 10      # characters of its traceback (the end kept)
MAX_DEPTH = 32                # nesting of a trial's settings (a domain's settings are 3 deep)
MAX_TIMESTAMP = 9e9           # seconds since 1970 (year 2255: pandas' last date is in 2262)


@dataclass(frozen=True)
class TrialRecord:
    # What the trial is (from the spec).
    trial_id: str
    sweep: str
    algorithm: str
    label: str                       # algorithm display name
    environment: str                 # environment display name
    seed: int
    horizon: int
    params: dict[str, Any]           # every hyperparameter, defaults written out
    environment_config: dict[str, Any]
    log_every: int = 100             # rounds between streamed regret points
    run_name: str = ""               # label, grid point, environment and seed, for run lists
    group: str = ""                  # label, grid point and environment: the seeds of one cell
    # How it went.
    status: str = PENDING
    attempts: int = 0
    final_regret: float | None = None
    wall_seconds: float | None = None
    seconds_per_round: float | None = None
    diagnostics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    # Where and when it ran.
    started_at: float | None = None
    finished_at: float | None = None
    node: str | None = None          # the Ray node's address
    node_id: str | None = None       # the Ray node's id (several nodes may share an address)
    device: str | None = None        # "cpu", or the GPU's name
    # The code it ran on (workers.provenance.code_identity): one digest per module it reaches, and their digest;
    # empty / None in records written before trials carried their code ("code unknown").
    code: dict[str, str] = field(default_factory=dict)
    code_digest: str | None = None
    # The libraries, CPU, device, threads and float settings it ran with (provenance.runtime.runtime_info).
    runtime: dict[str, Any] = field(default_factory=dict)
    # Set when `verify --accept` re-stamped a trial computed by other code as today's: the digest it
    # was computed by, the sample that reproduced, the sample's seed and when (workers.provenance.verification).
    code_accepted: dict[str, Any] | None = None

    def started(self, attempts: int, node: str | None, node_id: str | None, device: str | None,
                at: float) -> "TrialRecord":
        return dataclasses.replace(self, attempts=attempts, node=node, node_id=node_id, device=device,
                                   started_at=at)

    def ran_on(self, code, runtime: dict[str, Any]) -> "TrialRecord":
        """Stamped with the code (a workers.provenance.code_identity.CodeIdentity) and runtime it runs on."""
        return dataclasses.replace(self, code=dict(code.parts), code_digest=code.digest, runtime=dict(runtime),
                                   code_accepted=None)

    def finished(self, result, at: float, **extra_diagnostics: float) -> "TrialRecord":
        """The record of a trial that ran to its horizon (``result``: core.trial.TrialResult)."""
        return dataclasses.replace(
            self, status=FINISHED, final_regret=result.final_regret, wall_seconds=result.wall_seconds,
            seconds_per_round=result.seconds_per_round,
            diagnostics=_journal_diagnostics({**result.diagnostics, **extra_diagnostics}), error=None, traceback=None,
            finished_at=at)

    def failed(self, error: str, traceback: str | None, at: float) -> "TrialRecord":
        # Bounded: a journal line is at most MAX_LINE_BYTES (an exception's message may quote a
        # whole array); the start of the message and the end of the traceback say the most.
        message = plain_text(error)
        trace = plain_text(traceback)
        return dataclasses.replace(self, status=FAILED, final_regret=None, wall_seconds=None,
                                   seconds_per_round=None, diagnostics={},
                                   error=message if len(message) <= MAX_ERROR else message[:MAX_ERROR] + " …",
                                   traceback=trace if trace is None or len(trace) <= MAX_TRACEBACK
                                   else "… " + trace[-MAX_TRACEBACK:], finished_at=at)

    # ---- JSON (the journal) ----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, values: Any) -> "TrialRecord":
        """Read a journal entry, checking every field's type and range (:class:`RecordError` names
        the first that is wrong); fields a record of an older version lacks take their defaults."""
        if not isinstance(values, dict):
            raise RecordError(f"a record is a JSON object (got {_shown(values)})")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise RecordError(f"{unknown[0]}: unknown key (got {_shown(values[unknown[0]])}); "
                              "a record holds the fields of TrialRecord only")
        for name, spec in known.items():
            if name not in values:
                if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                    raise RecordError(f"{name}: missing key")
                continue
            problem = _FIELD_CHECKS[name](values[name])
            if problem:
                raise RecordError(f"{name}: {problem} (got {_shown(values[name])})")
        if values.get("status") == FINISHED and values.get("final_regret") is None:
            raise RecordError("final_regret: a finished trial has a final regret (got null)")
        return cls(**values)

    def content_ids(self) -> tuple[str, str]:
        """The ids a trial of this content has (core.trial.TrialSpec.trial_id), unsharded and
        sharded: a record whose ``trial_id`` is neither does not describe the trial it names."""
        from banditsweep.core.trial import TrialSpec

        try:   # the trial's own content rule (parameters added later are left out at their defaults)
            return tuple(TrialSpec(self.algorithm, self.params, self.environment_config, self.seed, self.horizon,
                                   sharded).trial_id for sharded in (False, True))
        except (KeyError, ValueError):   # an algorithm this process does not know (a plugin not loaded)
            content = {"algorithm": self.algorithm, "params": self.params, "environment": self.environment_config,
                       "seed": self.seed, "horizon": self.horizon}
            return (_content_id(content), _content_id({**content, "sharded": True}))


class RecordError(ValueError):
    """A journal entry that is not a valid :class:`TrialRecord` (the message names the field)."""


def _content_id(content: dict[str, Any]) -> str:
    # As core.trial.TrialSpec.trial_id (the canonical JSON of the content, hashed).
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:28] + "…" + text[-28:]


def _text(optional: bool = False):
    def check(value):
        if value is None and optional:
            return None
        return None if isinstance(value, str) else "must be a string" + (" or null" if optional else "")
    return check


def _integer(least: int):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        return None if least <= value <= 2**63 - 1 else f"must be an integer >= {least} and <= 2**63-1"
    return check


def _timestamp(value):
    """None or seconds since 1970 that a date can hold (a planted 1e300 ended every reader)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_TIMESTAMP:
        return f"must be seconds since 1970, from 0 to {MAX_TIMESTAMP:.0e}, or null"
    return None


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (without recursion: it may be planted)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


MAX_CODE_PARTS = 512          # modules of one trial's code (a neural trial reaches 13)
MAX_RUNTIME_KEYS = 64
MAX_VALUE_CHARS = 1024


def _flat(value: Any, most: int, kinds: tuple[type, ...]) -> str | None:
    """A JSON object of at most ``most`` short text keys, each value of ``kinds`` (short, if text)."""
    if not isinstance(value, dict):
        return "must be a JSON object"
    if len(value) > most:
        return f"holds more than {most} entries"
    for key, item in value.items():
        if len(key) > MAX_VALUE_CHARS or isinstance(item, bool) or not isinstance(item, kinds) \
                or isinstance(item, str) and len(item) > MAX_VALUE_CHARS:
            names = " or ".join("a string" if kind is str else "an integer" for kind in kinds)
            return f"value of {key[:60]!r} must be {names} (of at most {MAX_VALUE_CHARS} characters)"
    return None


def _digest_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and 0 < len(value) <= 64 and all(c in "0123456789abcdef" for c in value):
        return None
    return "must be a hexadecimal digest or null"


def _number(least: float | None = None):
    """None or a finite number (>= ``least``); JSON has no NaN, so neither has the journal."""
    def check(value):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return "must be a finite number or null"
        return None if least is None or value >= least else f"must be >= {least} or null"
    return check


def _journal_diagnostics(diagnostics: dict[str, Any]) -> dict[str, Any]:
    """The diagnostics a journal record can hold (finite numbers, booleans, null): a value of
    another kind (text, a list) is left out here, where the record is made, rather than making the
    whole record unreadable in the journal (and the finished trial lost with it)."""
    return {key: value for key, value in diagnostics.items()
            if value is None or (isinstance(value, (int, float)) and (not isinstance(value, float) or math.isfinite(value)))}


def _mapping(numbers: bool = False):
    def check(value):
        if not isinstance(value, dict):
            return "must be a JSON object"
        if _depth(value) > MAX_DEPTH:
            return f"nests lists and objects more than {MAX_DEPTH} deep"
        if numbers:
            for key, item in value.items():
                if item is not None and (not isinstance(item, (int, float)) or isinstance(item, float)
                                         and not math.isfinite(item)):
                    return f"value of {key!r} must be a finite number, a boolean or null"
        return None
    return check


_FIELD_CHECKS = {
    "trial_id": lambda v: None if isinstance(v, str) and v else "must be a non-empty string",
    "sweep": _text(), "algorithm": _text(), "label": _text(), "environment": _text(),
    "seed": _integer(0), "horizon": _integer(1), "params": _mapping(), "environment_config": _mapping(),
    "log_every": _integer(1), "run_name": _text(), "group": _text(),
    "status": lambda v: None if v in (PENDING, FINISHED, FAILED) else f"must be one of {PENDING}, {FINISHED}, {FAILED}",
    "attempts": _integer(0), "final_regret": _number(), "wall_seconds": _number(0.0),
    "seconds_per_round": _number(0.0), "diagnostics": _mapping(numbers=True), "error": _text(True),
    "traceback": _text(True), "started_at": _timestamp, "finished_at": _timestamp, "node": _text(True),
    "node_id": _text(True), "device": _text(True),
    "code": lambda v: _flat(v, MAX_CODE_PARTS, (str,)), "code_digest": _digest_text,
    "runtime": lambda v: _flat(v, MAX_RUNTIME_KEYS, (str, int)),
    "code_accepted": lambda v: None if v is None else _mapping()(v),
}
# A field added to TrialRecord needs its check here, or no journal could be read.
if set(_FIELD_CHECKS) != {f.name for f in dataclasses.fields(TrialRecord)}:
    raise ImportError("record.py: _FIELD_CHECKS and the fields of TrialRecord differ")


@dataclass
class TrialOutcome:
    """What a trial actor returns for one trial: its record and, when it finished, its per-round arrays."""

    record: TrialRecord
    arrays: dict[str, np.ndarray] | None = None

    @classmethod
    def of(cls, record: TrialRecord, result=None) -> "TrialOutcome":
        if result is None:
            return cls(record)
        arrays = {"arm": result.arm, "reward": result.reward, "regret": result.regret,
                  "cum_regret": result.cum_regret, "seconds": result.seconds, **result.extras}
        return cls(record, arrays)


_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain_text(text: str | None) -> str | None:
    """Without terminal colour and cursor codes (some libraries colour their exception messages)."""
    return None if text is None else _TERMINAL_CODES.sub("", text)


def thinned_curve(arrays: dict[str, np.ndarray], every: int) -> list[tuple[int, float]]:
    """(t, cumulative regret) every ``every`` rounds and at the last round: the curve MLflow shows."""
    cumulative = np.asarray(arrays["cum_regret"])
    t = np.arange(1, len(cumulative) + 1)
    keep = (t % every == 0) | (t == len(cumulative))
    return list(zip(t[keep].tolist(), cumulative[keep].tolist()))


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python numbers, NaN / inf to None (JSON has neither)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
