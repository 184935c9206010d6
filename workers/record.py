"""The typed record of one trial, from plan to outcome: what the Parquet store writes, the MLflow
mirror logs, the store reads back and the report aggregates. Defined once, here.

A record is built from the sweep spec (:meth:`TrialRecord.planned`), stamped by the trial actor that
runs it (:meth:`started`, then :meth:`finished` or :meth:`failed`), and made durable by the store.
Times are epoch seconds in Python and UTC timestamps in Parquet.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PENDING = "pending"
FINISHED = "finished"
FAILED = "failed"


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

    def started(self, attempts: int, node: str | None, node_id: str | None, device: str | None,
                at: float) -> "TrialRecord":
        return dataclasses.replace(self, attempts=attempts, node=node, node_id=node_id, device=device,
                                   started_at=at)

    def finished(self, result, at: float, **extra_diagnostics: float) -> "TrialRecord":
        """The record of a trial that ran to its horizon (``result``: core.trial.TrialResult)."""
        return dataclasses.replace(
            self, status=FINISHED, final_regret=result.final_regret, wall_seconds=result.wall_seconds,
            seconds_per_round=result.seconds_per_round,
            diagnostics={**result.diagnostics, **extra_diagnostics}, error=None, traceback=None, finished_at=at)

    def failed(self, error: str, traceback: str | None, at: float) -> "TrialRecord":
        return dataclasses.replace(self, status=FAILED, final_regret=None, wall_seconds=None,
                                   seconds_per_round=None, diagnostics={}, error=plain_text(error),
                                   traceback=plain_text(traceback), finished_at=at)

    # ---- JSON (the journal) ----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> "TrialRecord":
        """Read a journal entry; fields a record of an older version lacks take their defaults."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


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
