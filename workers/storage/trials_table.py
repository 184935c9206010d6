"""The trials table of a sweep (``<sweep>/trials/trials.parquet``): one row per finished or failed
trial, rebuilt from the journal. Every record field, every parameter, every environment setting
(``env_<name>``), every diagnostic (``diag_<name>``) and every runtime fact (``runtime_<name>``:
library versions, CPU, device, threads) is a typed column of its own, with one type
per column across the sweep (a directory of per-trial files would be read with the first file's
schema).
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Any

import pandas as pd
import pyarrow as pa

from banditsweep.workers.storage.record import TrialRecord

TIMESTAMP = pa.timestamp("us", tz="UTC")
# The trials table: one column per TrialRecord field (dicts also as JSON text), then one column per
# parameter name across the sweep, one per environment setting (``env_<name>``) and one per
# diagnostic (``diag_<name>``). Files of this layout say so in their schema metadata.
ENV_PREFIX, DIAG_PREFIX = "env_", "diag_"
TRIALS_FORMAT = {b"banditsweep.trials": b"2"}
_JSON_FIELDS = ("params", "environment_config", "diagnostics", "code", "runtime", "code_accepted")
# Where each trial ran (libraries, CPU, device, threads) also as columns of their own.
RUNTIME_PREFIX = "runtime_"
_FIELD_TYPES = {"seed": pa.int64(), "horizon": pa.int64(), "log_every": pa.int64(), "attempts": pa.int64(),
                "final_regret": pa.float64(), "wall_seconds": pa.float64(), "seconds_per_round": pa.float64(),
                "load_average": pa.float64(),
                "started_at": TIMESTAMP, "finished_at": TIMESTAMP}
TRIAL_COLUMNS = [f.name for f in fields(TrialRecord)]


def _column_array(values: list[Any]) -> pa.Array:
    """One typed column for a parameter name across all trials (int/float/bool/str; else JSON)."""
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


def _setting(value: Any) -> Any:
    """A setting as a column value: dicts and lists as canonical JSON text (``{"grid":[5,5]}``)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def _column(name: str, records: list[TrialRecord]) -> pa.Array:
    values = [getattr(r, name) for r in records]
    if name in _JSON_FIELDS:
        if name == "code_accepted":   # null where a trial was not re-stamped
            return pa.array([None if v is None else json.dumps(v, sort_keys=True) for v in values], pa.string())
        return pa.array([json.dumps(v or {}, sort_keys=True) for v in values], pa.string())
    kind = _FIELD_TYPES.get(name, pa.string())
    if kind == TIMESTAMP:
        return pa.array([None if v is None else round(v * 1e6) for v in values], pa.int64()).cast(TIMESTAMP)
    if kind == pa.float64():
        values = [_nullable_float(v) for v in values]
    return pa.array(values, kind)


def trials_table(records: list[TrialRecord]) -> pa.Table:
    records = sorted(records, key=lambda r: (r.label, r.environment, r.seed, r.trial_id))
    columns = {name: _column(name, records) for name in TRIAL_COLUMNS}
    for key in sorted({k for r in records for k in r.params} - set(columns)):
        columns[key] = _column_array([r.params.get(key) for r in records])
    for key in sorted({k for r in records for k in r.environment_config}):
        columns[ENV_PREFIX + key] = _column_array([_setting(r.environment_config.get(key)) for r in records])
    for key in sorted({k for r in records for k in r.diagnostics}):
        columns[DIAG_PREFIX + key] = _column_array([r.diagnostics.get(key) for r in records])
    for key in sorted({k for r in records for k in r.runtime}):
        columns[RUNTIME_PREFIX + key] = _column_array([r.runtime.get(key) for r in records])
    return pa.table(columns).replace_schema_metadata(TRIALS_FORMAT)


#: The trial's names, stored as dictionaries (categoricals) in the trials file as in the curves files,
#: so that the two tables join on them in polars, DuckDB or pandas without a cast.
NAME_COLUMNS = ("algorithm", "label", "environment")


def with_name_dictionaries(table: pa.Table) -> pa.Table:
    """``table`` with :data:`NAME_COLUMNS` dictionary-encoded (the curves files' type for them)."""
    for name in NAME_COLUMNS:
        if name in table.column_names:
            index = table.schema.get_field_index(name)
            table = table.set_column(index, pa.field(name, pa.dictionary(pa.int32(), pa.string())),
                                     table[name].cast(pa.string()).dictionary_encode())
    return table


def names_as_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """A trials frame with :data:`NAME_COLUMNS` as pandas categoricals, as ``load``'s curves hold them
    (a file written before they were stored so, too)."""
    names = {name: frame[name].astype("category") for name in NAME_COLUMNS
             if name in frame.columns and not isinstance(frame[name].dtype, pd.CategoricalDtype)}
    return frame.assign(**names) if names else frame


#: Columns of record fields added after trials tables were first written, as a table without them
#: reads: the value a record of that time had (NaN: not measured).
ADDED_COLUMNS = {"load_average": float("nan")}


def with_added_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every column of :data:`ADDED_COLUMNS` (a table written before one existed lacks it)."""
    missing = {name: value for name, value in ADDED_COLUMNS.items() if name not in frame.columns}
    return frame.assign(**missing) if missing else frame


def upgrade_trials(frame: pd.DataFrame) -> pd.DataFrame:
    """A trials table of an earlier layout (environment settings and diagnostics as JSON text only)
    with the columns of the current one."""
    if frame.empty:
        return frame
    extra = {}
    for source, prefix in (("environment_config", ENV_PREFIX), ("diagnostics", DIAG_PREFIX)):
        if source not in frame.columns:
            continue
        dicts = [json.loads(text) if isinstance(text, str) else {} for text in frame[source]]
        for key in sorted({k for d in dicts for k in d}):
            if prefix + key not in frame.columns:
                extra[prefix + key] = _column_array([_setting(d.get(key)) for d in dicts]).to_pandas().set_axis(frame.index)
    return pd.concat([frame, pd.DataFrame(extra, index=frame.index)], axis=1) if extra else frame
