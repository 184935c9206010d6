"""The Parquet results of a sweep, under ``<results root>/<sweep>/``.

- ``trials/trials.parquet``: one row per finished or failed trial (``pd.read_parquet(".../trials")``).
- ``curves/<trial_id>.parquet``: one row per round of one trial (``pd.read_parquet(".../curves")``
  reads them all; every file has the same schema).
- ``.journal/<trial_id>.json``: the durable record of each trial's outcome. The trials table is a
  materialised view of the journal, rebuilt whenever a trial ends, so a crash between the two loses
  nothing: the next ``run`` rebuilds the table from the journal.

Every file appears by atomic rename of a temporary file whose name starts with ``.`` — Parquet
readers skip such names, so a reader never sees a half-written file — and nothing is ever appended
to a closed file. Files are keyed by trial id: writing a trial twice leaves one copy.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

class SweepBusyError(RuntimeError):
    """Another ``run`` of the same sweep holds its results folder."""


FINISHED = "finished"
FAILED = "failed"

# Fixed columns of the trials table; each grid/param key gets a column of its own after these.
TRIAL_COLUMNS = ["trial_id", "sweep", "algorithm", "label", "environment", "seed", "horizon", "status",
                 "final_regret", "wall_seconds", "seconds_per_round", "attempts", "error", "traceback",
                 "params", "environment_config", "diagnostics", "finished_at"]

CURVE_SCHEMA = pa.schema([
    ("trial_id", pa.string()),
    ("t", pa.int64()),
    ("arm", pa.int64()),
    ("reward", pa.float64()),
    ("regret", pa.float64()),
    ("cum_regret", pa.float64()),
    # The lower-variance expected form of adversarial regret (SPEC 2.1); NaN where not defined.
    ("expected_regret", pa.float64()),
    ("seconds", pa.float64()),
])


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass
class SweepStore:
    root: Path  # <results root>/<sweep>

    @classmethod
    def for_sweep(cls, results_root: str | Path, sweep: str) -> "SweepStore":
        return cls(Path(results_root).resolve() / sweep)

    @property
    def journal_dir(self) -> Path:
        return self.root / ".journal"

    @property
    def trials_dir(self) -> Path:
        return self.root / "trials"

    @property
    def curves_dir(self) -> Path:
        return self.root / "curves"

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    @contextmanager
    def exclusive(self):
        """Held by the driver of a ``run`` for its whole length: a second ``run`` of the same sweep on
        the same results folder is refused (two writers would each rebuild the trials table from
        their own records). The lock is the OS's (flock), so it ends with the process holding it."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".run.lock"
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise SweepBusyError(f"{self.root}: another `run` of this sweep is in progress ({holder}); "
                                     f"wait for it to end, or use another --results folder") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- writing (only the sink calls these) -------------------------------------------------

    def write_curve(self, trial_id: str, arrays: dict[str, np.ndarray]) -> None:
        horizon = len(arrays["cum_regret"])
        columns = {
            "trial_id": pa.array([trial_id] * horizon, pa.string()),
            "t": pa.array(np.arange(1, horizon + 1, dtype=np.int64)),
        }
        for field in CURVE_SCHEMA:
            if field.name in columns:
                continue
            values = arrays.get(field.name)
            if values is None:
                values = np.full(horizon, np.nan)
            columns[field.name] = pa.array(np.asarray(values), field.type)
        table = pa.Table.from_pydict(columns, schema=CURVE_SCHEMA)
        _atomic_write(self.curves_dir / f"{trial_id}.parquet", lambda tmp: pq.write_table(table, tmp))

    def write_journal(self, record: dict[str, Any]) -> None:
        text = json.dumps(record, sort_keys=True, default=_json_default)
        _atomic_write(self.journal_dir / f"{record['trial_id']}.json", lambda tmp: Path(tmp).write_text(text))

    def write_trials_table(self, records: list[dict[str, Any]]) -> None:
        table = trials_table(records)
        _atomic_write(self.trials_dir / "trials.parquet", lambda tmp: pq.write_table(table, tmp))

    # -- reading -------------------------------------------------------------------------------

    def journal(self) -> dict[str, dict[str, Any]]:
        records = {}
        if self.journal_dir.is_dir():
            for path in sorted(self.journal_dir.glob("*.json")):
                record = json.loads(path.read_text())
                records[record["trial_id"]] = record
        return records

    def read_trials(self) -> pd.DataFrame:
        path = self.trials_dir / "trials.parquet"
        if not path.exists():
            return pd.DataFrame(columns=TRIAL_COLUMNS)
        return pd.read_parquet(path)

    def read_curves(self, trial_ids: list[str] | None = None) -> pd.DataFrame:
        if not self.curves_dir.is_dir():
            return pd.DataFrame(columns=CURVE_SCHEMA.names)
        if trial_ids is None:
            return pd.read_parquet(self.curves_dir)
        paths = [self.curves_dir / f"{tid}.parquet" for tid in trial_ids]
        paths = [p for p in paths if p.exists()]
        if not paths:
            return pd.DataFrame(columns=CURVE_SCHEMA.names)
        return pa.concat_tables([pq.read_table(p) for p in paths]).to_pandas()


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _column_array(values: list[Any]) -> pa.Array:
    """One typed column for a grid/param key across all trials (int/float/bool/str; else JSON)."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, pa.bool_())
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.array(values, pa.int64())
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    return pa.array([None if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in values],
                    pa.string())


def _nullable_float(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def trials_table(records: list[dict[str, Any]]) -> pa.Table:
    records = sorted(records, key=lambda r: (r["label"], r["environment"], r["seed"], r["trial_id"]))
    columns: dict[str, pa.Array] = {
        "trial_id": pa.array([r["trial_id"] for r in records], pa.string()),
        "sweep": pa.array([r["sweep"] for r in records], pa.string()),
        "algorithm": pa.array([r["algorithm"] for r in records], pa.string()),
        "label": pa.array([r["label"] for r in records], pa.string()),
        "environment": pa.array([r["environment"] for r in records], pa.string()),
        "seed": pa.array([r["seed"] for r in records], pa.int64()),
        "horizon": pa.array([r["horizon"] for r in records], pa.int64()),
        "status": pa.array([r["status"] for r in records], pa.string()),
        "final_regret": pa.array([_nullable_float(r.get("final_regret")) for r in records], pa.float64()),
        "wall_seconds": pa.array([_nullable_float(r.get("wall_seconds")) for r in records], pa.float64()),
        "seconds_per_round": pa.array([_nullable_float(r.get("seconds_per_round")) for r in records], pa.float64()),
        "attempts": pa.array([r.get("attempts", 1) for r in records], pa.int64()),
        "error": pa.array([r.get("error") for r in records], pa.string()),
        "traceback": pa.array([r.get("traceback") for r in records], pa.string()),
        "params": pa.array([json.dumps(r["params"], sort_keys=True) for r in records], pa.string()),
        "environment_config": pa.array([json.dumps(r["environment_config"], sort_keys=True) for r in records],
                                       pa.string()),
        "diagnostics": pa.array([json.dumps(r.get("diagnostics") or {}, sort_keys=True) for r in records],
                                pa.string()),
        "finished_at": pa.array([r.get("finished_at") for r in records], pa.float64()),
    }
    keys = sorted({k for r in records for k in r["params"]} - set(columns))
    for key in keys:
        columns[key] = _column_array([r["params"].get(key) for r in records])
    return pa.table(columns)
