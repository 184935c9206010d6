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
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, Field, ValidationError, create_model, model_validator

from banditsweep.workers.storage.strict_models import STRICT, Says, fields_of, first_problem

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
MAX_CODE_PARTS = 512          # modules of one trial's code (a neural trial reaches 13)
MAX_RUNTIME_KEYS = 64
MAX_VALUE_CHARS = 1024
LARGEST = 2**63 - 1           # Parquet's int64 columns


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


def _shallow(value: dict) -> dict:
    if _depth(value) > MAX_DEPTH:
        raise ValueError(f"nests lists and objects more than {MAX_DEPTH} deep")
    return value


def _diagnostic(value: Any) -> Any:
    # Integers and booleans stay what they are (a column's type follows them), so no union of types.
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, float)
                              and not math.isfinite(value)):
        raise ValueError("must be a finite number, a boolean or null")
    return value


def _short_text_or_integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or isinstance(value, str) \
            and len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"must be a string (of at most {MAX_VALUE_CHARS} characters) or an integer")
    return value


# The types of a record's fields, each with its bounds: the journal's reader checks a record
# against them (JournalRecord), nothing else is asked of a value read back.
Name = Annotated[str, Field(min_length=1)]
Count = Annotated[int, Field(ge=0, le=LARGEST)]
Positive = Annotated[int, Field(ge=1, le=LARGEST)]
Number = float | None                                          # finite (STRICT): JSON has no NaN
Seconds = Annotated[float, Field(ge=0.0)] | None
Timestamp = Annotated[float | None, Field(ge=0, le=MAX_TIMESTAMP),  # a planted 1e300 ended every reader
                      Says(f"must be seconds since 1970, from 0 to {MAX_TIMESTAMP:.0e}, or null")]
Settings = Annotated[dict[str, Any], AfterValidator(_shallow)]
Diagnostics = Annotated[dict[str, Annotated[Any, AfterValidator(_diagnostic)]], AfterValidator(_shallow)]
ShortText = Annotated[str, Field(max_length=MAX_VALUE_CHARS)]
CodeParts = Annotated[dict[ShortText, ShortText], Field(max_length=MAX_CODE_PARTS)]
Runtime = Annotated[dict[ShortText, Annotated[Any, AfterValidator(_short_text_or_integer)]],
                    Field(max_length=MAX_RUNTIME_KEYS)]
Digest = Annotated[str | None, Field(pattern="^[0-9a-f]{1,64}$"), Says("must be a hexadecimal digest or null")]
Status = Literal[PENDING, FINISHED, FAILED]


@dataclass(frozen=True)
class TrialRecord:
    # What the trial is (from the spec).
    trial_id: Name
    sweep: str
    algorithm: str
    label: str                       # algorithm display name
    environment: str                 # environment display name
    seed: Count
    horizon: Positive
    params: Settings                 # every hyperparameter, defaults written out
    environment_config: Settings
    log_every: Positive = 100        # rounds between streamed regret points
    run_name: str = ""               # label, grid point, environment and seed, for run lists
    group: str = ""                  # label, grid point and environment: the seeds of one cell
    # How it went.
    status: Status = PENDING
    attempts: Count = 0
    final_regret: Number = None
    wall_seconds: Seconds = None
    seconds_per_round: Seconds = None
    diagnostics: Diagnostics = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    # Where and when it ran.
    started_at: Timestamp = None
    finished_at: Timestamp = None
    node: str | None = None          # the Ray node's address
    node_id: str | None = None       # the Ray node's id (several nodes may share an address)
    device: str | None = None        # "cpu", or the GPU's name
    # Mean 1-minute load average of the machine while it ran (workers.provenance.load); None in records
    # written before trials carried it, or where the OS has no load average.
    load_average: Annotated[float, Field(ge=0.0)] | None = None
    # The code it ran on (workers.provenance.code_identity): one digest per module it reaches, and their digest;
    # empty / None in records written before trials carried their code ("code unknown").
    code: CodeParts = field(default_factory=dict)
    code_digest: Digest = None
    # The libraries, CPU, device, threads and float settings it ran with (provenance.runtime.runtime_info).
    runtime: Runtime = field(default_factory=dict)
    # Set when `verify --accept` re-stamped a trial computed by other code as today's: the digest it
    # was computed by, the sample that reproduced, the sample's seed and when (workers.provenance.verification).
    code_accepted: Settings | None = None

    def started(self, attempts: int, node: str | None, node_id: str | None, device: str | None,
                at: float) -> "TrialRecord":
        return dataclasses.replace(self, attempts=attempts, node=node, node_id=node_id, device=device,
                                   started_at=at)

    def ran_on(self, code, runtime: dict[str, Any]) -> "TrialRecord":
        """Stamped with the code (a workers.provenance.code_identity.CodeIdentity) and runtime it runs on."""
        return dataclasses.replace(self, code=dict(code.parts), code_digest=code.digest, runtime=dict(runtime),
                                   code_accepted=None)

    def finished(self, result, at: float, load_average: float | None = None,
                 **extra_diagnostics: float) -> "TrialRecord":
        """The record of a trial that ran to its horizon (``result``: core.engine.trial.TrialResult), measured
        at ``load_average`` (workers.provenance.load.LoadSampler)."""
        return dataclasses.replace(
            self, status=FINISHED, final_regret=result.final_regret, wall_seconds=result.wall_seconds,
            seconds_per_round=result.seconds_per_round, load_average=load_average,
            diagnostics=_journal_diagnostics({**result.diagnostics, **extra_diagnostics}), error=None, traceback=None,
            finished_at=at)

    def failed(self, error: str, traceback: str | None, at: float) -> "TrialRecord":
        # Bounded: a journal line is at most MAX_LINE_BYTES (an exception's message may quote a
        # whole array); the start of the message and the end of the traceback say the most.
        message = plain_text(error)
        trace = plain_text(traceback)
        return dataclasses.replace(self, status=FAILED, final_regret=None, wall_seconds=None,
                                   seconds_per_round=None, load_average=None, diagnostics={},
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
        try:
            JournalRecord.model_validate(values)
        except ValidationError as error:
            raise RecordError(_said(first_problem(error, JournalRecord))) from None
        return cls(**values)   # the values as read: a checked 3 stays the integer it was

    def content_ids(self) -> tuple[str, str]:
        """The ids a trial of this content has (core.engine.trial.TrialSpec.trial_id), unsharded and
        sharded: a record whose ``trial_id`` is neither does not describe the trial it names."""
        from banditsweep.core.engine.trial import TrialSpec

        try:   # the trial's own content rule (parameters added later are left out at their defaults)
            return tuple(TrialSpec(self.algorithm, self.params, self.environment_config, self.seed, self.horizon,
                                   sharded).trial_id for sharded in (False, True))
        except (KeyError, ValueError):   # an algorithm this process does not know (a plugin not loaded)
            content = {"algorithm": self.algorithm, "params": self.params, "environment": self.environment_config,
                       "seed": self.seed, "horizon": self.horizon}
            return (_content_id(content), _content_id({**content, "sharded": True}))


class RecordError(ValueError):
    """A journal entry that is not a valid :class:`TrialRecord` (the message names the field)."""


class _JournalRules(BaseModel):
    model_config = STRICT

    @model_validator(mode="after")
    def _finished_with_a_final_regret(self):
        if self.status == FINISHED and self.final_regret is None:
            raise ValueError("final_regret: a finished trial has a final regret (got null)")
        return self


# A journal line's record: TrialRecord's fields, types and defaults as a strict model.
JournalRecord = create_model("JournalRecord", __base__=_JournalRules, **fields_of(TrialRecord))


def _said(problem) -> str:
    if problem.kind == "missing":
        return f"{problem.field}: missing key"
    if problem.kind == "extra_forbidden":
        return (f"{problem.field}: unknown key (got {_shown(problem.value)}); "
                "a record holds the fields of TrialRecord only")
    if not problem.field:
        return problem.words
    return f"{problem.field}: {problem.words} (got {_shown(problem.value)})"


def _content_id(content: dict[str, Any]) -> str:
    # As core.engine.trial.TrialSpec.trial_id (the canonical JSON of the content, hashed).
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:28] + "…" + text[-28:]


def _journal_diagnostics(diagnostics: dict[str, Any]) -> dict[str, Any]:
    """The diagnostics a journal record can hold (finite numbers, booleans, null): a value of
    another kind (text, a list) is left out here, where the record is made, rather than making the
    whole record unreadable in the journal (and the finished trial lost with it)."""
    return {key: value for key, value in diagnostics.items()
            if value is None or (isinstance(value, (int, float)) and (not isinstance(value, float) or math.isfinite(value)))}


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
