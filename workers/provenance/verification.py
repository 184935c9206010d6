"""Does a store reproduce on today's code? The parts of ``banditsweep verify`` that know results:
which finished trials to re-run (a sample drawn from a printed seed, at least one of each code
version the store holds), how a re-run trial is compared with its stored record and curve, and the
records that ``verify --accept`` writes.

Comparison (the golden tests' rule): chosen arms and the adversary's choices exactly; every other
per-round value (reward, regret, cumulative regret, expected regret, other extras) relative to the
largest magnitude of its array at :data:`RTOL`, so that another CPU's last-bit rounding passes and a
real change does not; the final regret relative to itself; the diagnostics that are computed values
(not timings, batch sizes or memory) likewise. Timings are never compared.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from banditsweep.workers.provenance.code_identity import CodeIdentity
from banditsweep.workers.storage.record import FINISHED, TrialRecord

RTOL = 1e-9
EXACT_COLUMNS = ("arm", "adversary_choice")
VALUE_COLUMNS = ("reward", "regret", "cum_regret", "expected_regret")
# Diagnostics that describe how a trial was run, not what it computed.
EXECUTION_DIAGNOSTICS = ("batch_size", "batch_wall_seconds", "resumed_from_round", "checkpoint_rejected",
                         "shard_nodes")
EXECUTION_WORDS = ("seconds", "rss", "memory", "_mb")
# Runtime facts that can move a float's last bits (and so, rarely, an argmax).
MACHINE_FACTS = ("cpu", "device", "threads", "torch", "numpy", "scipy", "python", "float32_matmul")
DEFAULT_SAMPLE = 10


@dataclass
class Difference:
    """How one re-run trial differs from its stored results."""

    trial_id: str
    name: str                         # the trial's run name (label | environment | seed)
    what: str                         # "round 17: reward 0.25 (stored 0.5)", "failed: ...", ...
    horizon: int
    together: int | None = None       # rounds whose arms agree before they part (None: arms never part)
    final: tuple[float, float] | None = None   # final cumulative regret (stored, now)
    machine: list[str] = field(default_factory=list)   # runtime facts that differ ("threads 4 -> 1")
    at_arm: bool = False              # the first difference is a chosen arm (the values agree before it)

    def line(self) -> str:
        text = f"differs: {self.name} (trial {self.trial_id}): {self.what}"
        if self.together is not None:
            text += f"; the arms agree for {self.together} of {self.horizon} rounds"
        if self.final is not None:
            text += f", final cumulative regret {self.final[1]:.6g} (stored {self.final[0]:.6g})"
        if self.together is None and self.final is None:
            return text
        if self.at_arm and self.machine:
            text += (f"; recorded on another machine or library ({', '.join(self.machine)}): every value agreed "
                     "until an arm was chosen differently, which an argmax decided by rounding can do without "
                     "any change of code")
        elif self.at_arm:
            text += "; recorded with this machine's CPU, libraries and thread count: a change of what it computes"
        else:
            where = f" (recorded: {', '.join(self.machine)})" if self.machine else ""
            text += f"; a value differs beyond rounding before any arm does: a change of what it computes{where}"
        return text


def code_groups(records: list[TrialRecord], current: dict[str, CodeIdentity]) -> dict[tuple, list[str]]:
    """The finished trials by (algorithm, stored code digest, today's digest): one code version each."""
    groups: dict[tuple, list[str]] = {}
    for record in records:
        if record.status != FINISHED or record.trial_id not in current:
            continue
        key = (record.algorithm, record.code_digest or "unknown", current[record.trial_id].digest)
        groups.setdefault(key, []).append(record.trial_id)
    return groups


def draw_sample(groups: dict[tuple, list[str]], size: int, seed: int, seconds: dict[str, float] | None = None,
                most_seconds: float | None = None) -> list[str]:
    """``size`` trial ids drawn from ``seed``, taken in turn from each group, so that every group
    (code version) has at least one (the sample is larger than ``size`` where there are more groups).
    With ``most_seconds``, only trials whose recorded wall time (``seconds``) is at most that are
    drawn, and of a group without one its quickest trial."""
    rng = random.Random(seed)
    pools = []
    for _, ids in sorted(groups.items()):
        ids = sorted(ids)
        if most_seconds is not None and seconds is not None:
            quick = [i for i in ids if (seconds.get(i) or 0.0) <= most_seconds]
            ids = quick or [min(ids, key=lambda i: (seconds.get(i) or 0.0, i))]
        rng.shuffle(ids)
        pools.append(ids)
    chosen: list[str] = []
    first_pass = True
    while any(pools):
        for ids in pools:
            if len(chosen) >= size and not first_pass:
                return chosen
            if ids:
                chosen.append(ids.pop())
        first_pass = False
    return chosen


def compare_trial(stored: TrialRecord, stored_curve: pd.DataFrame, now: TrialRecord | None,
                  now_curve: pd.DataFrame) -> Difference | None:
    """None where the re-run ``now`` reproduces ``stored`` (records and per-round curves)."""
    name = stored.run_name or f"{stored.label} | {stored.environment} | seed {stored.seed}"
    diff = Difference(stored.trial_id, name, "", stored.horizon, machine=machine_differences(stored, now))
    if now is None:
        diff.what = "not re-run (its re-run left no record)"
        return diff
    if now.status != FINISHED:
        diff.what = f"failed on today's code: {(now.error or '')[:300]}"
        return diff
    a, b = _rounds(stored_curve), _rounds(now_curve)
    if len(a) != len(b):
        diff.what = f"{len(b)} rounds recorded now, {len(a)} stored"
        return diff
    first: tuple[int, str, Any, Any] | None = None
    for column in [*EXACT_COLUMNS, *VALUE_COLUMNS]:
        if column not in a.columns or column not in b.columns:
            continue
        x, y = a[column].to_numpy(dtype=float), b[column].to_numpy(dtype=float)
        if column in EXACT_COLUMNS:
            bad = ~((x == y) | (np.isnan(x) & np.isnan(y)))
        else:
            bad = ~_close(y, x)
        if bad.any():
            index = int(np.argmax(bad))
            if first is None or index < first[0]:
                first = (index, column, x[index], y[index])
    extras = _other_extras_difference(a, b)
    if extras is not None and (first is None or extras[0] < first[0]):
        first = extras
    arms = _first_mismatch(a, b, "arm")
    if first is not None:
        index, column, was, is_now = first
        diff.what = f"round {int(a['t'].iloc[index])}: {column} {_shown(is_now)} (stored {_shown(was)})"
        diff.together = arms
        diff.at_arm = column in EXACT_COLUMNS
        diff.final = (float(a["cum_regret"].iloc[-1]), float(b["cum_regret"].iloc[-1])) if len(a) else None
        return diff
    record = _record_difference(stored, now)
    if record:
        diff.what = record
        return diff
    return None


def machine_differences(stored: TrialRecord, now: TrialRecord | None) -> list[str]:
    if now is None or not stored.runtime:
        return [] if now is None else ["recorded before trials carried their runtime"]
    return [f"{key} {stored.runtime.get(key)} -> {now.runtime.get(key)}" for key in MACHINE_FACTS
            if stored.runtime.get(key) != now.runtime.get(key)]


def _rounds(curve: pd.DataFrame) -> pd.DataFrame:
    return curve.sort_values("t").reset_index(drop=True)


def _close(now: np.ndarray, before: np.ndarray) -> np.ndarray:
    both_nan = np.isnan(now) & np.isnan(before)
    finite = before[np.isfinite(before)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    return both_nan | (np.abs(now - before) <= RTOL * np.maximum(np.abs(before), max(scale, 1e-3)))


def _first_mismatch(a: pd.DataFrame, b: pd.DataFrame, column: str) -> int | None:
    bad = a[column].to_numpy() != b[column].to_numpy()
    return int(np.argmax(bad)) if bad.any() else None


def _other_extras_difference(a: pd.DataFrame, b: pd.DataFrame):
    if "other_extras" not in a.columns or "other_extras" not in b.columns:
        return None
    for index, (x, y) in enumerate(zip(a["other_extras"], b["other_extras"])):
        x, y = dict(x or []), dict(y or [])
        if set(x) != set(y):
            return (index, "extras", sorted(x), sorted(y))
        for key in x:
            if not _close(np.array([y[key]], float), np.array([x[key]], float))[0]:
                return (index, key, x[key], y[key])
    return None


def _record_difference(stored: TrialRecord, now: TrialRecord) -> str:
    if not _scalar_close(now.final_regret, stored.final_regret):
        return f"final regret {_shown(now.final_regret)} (stored {_shown(stored.final_regret)})"
    # A diagnostic the stored record lacks was added to the code after it was recorded (design_digest):
    # nothing to compare it with, which is no difference. One it has and today's run lacks is one.
    for key in sorted(stored.diagnostics):
        if key in EXECUTION_DIAGNOSTICS or any(word in key for word in EXECUTION_WORDS) or key.startswith("shard_"):
            continue
        if not _scalar_close(now.diagnostics.get(key), stored.diagnostics.get(key)):
            return f"diagnostic {key} {_shown(now.diagnostics.get(key))} (stored {_shown(stored.diagnostics.get(key))})"
    return ""


def _scalar_close(now: Any, before: Any) -> bool:
    if now is None or before is None:
        return now is before
    now, before = float(now), float(before)
    return math.isclose(now, before, rel_tol=RTOL, abs_tol=RTOL * 1e-3) or (math.isnan(now) and math.isnan(before))


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{int(value)}" if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
    return str(value)


def accepted_records(records: list[TrialRecord], current: dict[str, CodeIdentity], sample: list[str], seed: int
                     ) -> list[TrialRecord]:
    """``records`` (finished, computed by other or unknown code) re-stamped as computed by today's
    code, each naming what it was computed by, the sample that reproduced and the sample's seed."""
    now = time.time()
    out = []
    for record in records:
        code = current[record.trial_id]
        out.append(dataclasses.replace(record, code=dict(code.parts), code_digest=code.digest, code_accepted={
            "from": record.code_digest or "unknown", "changed": code.changed_since(record.code, record.code_digest) if record.code
            else ["(code unknown)"], "sample": sorted(sample), "seed": seed, "at": now}))
    return out
