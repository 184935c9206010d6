"""The Parquet results of a sweep, under ``<results root>/<sweep>/``: the record of truth.

- ``.journal/``: the durable outcome of every trial (:class:`~banditsweep.workers.record.TrialRecord`
  as JSON lines). Each write appends one new segment file holding the outcomes of a group of
  trials; a later segment's record of a trial replaces an earlier one (a failed trial run again).
  A trial is *done* once its segment exists.
- ``curves/``: one row per trial per round (:data:`CURVE_SCHEMA`: the round's values and the
  trial's algorithm, label, environment and seed, dictionary-encoded), written in the same groups,
  one Parquet part per group, and compacted at the end of a run into one file per run (and into one
  file when a sweep has gathered more than :data:`MAX_CURVE_FILES`), so ``pd.read_parquet(".../curves")``
  or ``pyarrow.dataset.dataset(".../curves")`` reads them all: every file has the same schema.
- ``trials/trials.parquet``: one row per finished or failed trial, a materialised view of the
  journal rebuilt at a bounded rate while trials stream in and at the end of a run
  (``pd.read_parquet(".../trials")``): every record field, every parameter, every environment
  setting (``env_<name>``) and every diagnostic (``diag_<name>``) a typed column.
- ``README.txt``: what the folder holds. It is not Parquet, so reading the sweep folder itself as
  one dataset fails with its name instead of silently mixing the two tables.

:func:`load` reads both tables into pandas, also from stores written before curves carried their
trial's names and before environment settings had columns of their own.

Order of writes for a group: curves part, then journal segment. A crash between the two leaves
curves of trials that are not done; they run again and :meth:`SweepStore.read_curves` keeps the
rows of the journal's record only. Every file appears by atomic rename of a fully written, fsynced
temporary file whose name starts with ``.`` (Parquet readers skip such names), so a reader never
sees half a file, and nothing is ever appended to a closed file. Compaction first writes the merged
file under a hidden name, then removes the parts it replaces, then makes it visible; a crash in
between is finished by the next :meth:`SweepStore.recover`.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from banditsweep.workers.record import FAILED, FINISHED, TrialOutcome, TrialRecord

__all__ = ["CURVE_SCHEMA", "FAILED", "FINISHED", "SweepBusyError", "SweepStore", "TrialsTable", "load"]


class SweepBusyError(RuntimeError):
    """Another ``run`` of the same sweep holds its results folder."""


# Per-round values every environment of the project may report (``Environment.round_extras``) get
# a column of their own (NaN where a trial has none); any other reported value goes into
# ``other_extras``. Nothing a trial reports per round is dropped.
CURVE_EXTRA_COLUMNS = ("expected_regret", "adversary_choice")
# What a curve row says about its trial, so that an analysis needs no join: dictionary-encoded
# (one copy of each name per file; pandas reads them as categoricals).
NAME = pa.dictionary(pa.int32(), pa.string())
CURVE_TRIAL_COLUMNS = ("algorithm", "label", "environment", "seed")
CURVE_SCHEMA = pa.schema([
    ("trial_id", pa.string()),
    ("algorithm", NAME),
    ("label", NAME),
    ("environment", NAME),
    ("seed", pa.int64()),
    ("t", pa.int64()),
    ("arm", pa.int64()),
    ("reward", pa.float64()),
    ("regret", pa.float64()),          # per-round regret increment
    ("cum_regret", pa.float64()),      # cumulative regret after round t
    ("seconds", pa.float64()),
    *[(name, pa.float64()) for name in CURVE_EXTRA_COLUMNS],
    ("other_extras", pa.map_(pa.string(), pa.float64())),
])

# Curve files are compacted into one when a sweep has more (each `run` leaves one).
MAX_CURVE_FILES = 8

TIMESTAMP = pa.timestamp("us", tz="UTC")
# The trials table: one column per TrialRecord field (dicts also as JSON text), then one column per
# parameter name across the sweep, one per environment setting (``env_<name>``) and one per
# diagnostic (``diag_<name>``). Files of this layout say so in their schema metadata.
ENV_PREFIX, DIAG_PREFIX = "env_", "diag_"
TRIALS_FORMAT = {b"banditsweep.trials": b"2"}
_JSON_FIELDS = ("params", "environment_config", "diagnostics")
_FIELD_TYPES = {"seed": pa.int64(), "horizon": pa.int64(), "log_every": pa.int64(), "attempts": pa.int64(),
                "final_regret": pa.float64(), "wall_seconds": pa.float64(), "seconds_per_round": pa.float64(),
                "started_at": TIMESTAMP, "finished_at": TIMESTAMP}
TRIAL_COLUMNS = [f.name for f in fields(TrialRecord)]


def _file_mode() -> int:
    """The mode a new file gets under the process's umask (mkstemp's files are 0600 whatever it is)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


def _fsync_write(path: Path, write: Callable[[str], None]) -> None:
    """Write through a hidden temporary file, fsync it and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _visible(directory: Path, pattern: str) -> list[Path]:
    """Files matching ``pattern``, without hidden ones (temporary or not yet complete; pathlib's glob
    would match them)."""
    return [p for p in directory.glob(pattern) if not p.name.startswith(".")] if directory.is_dir() else []


def _unique_name(prefix: str, suffix: str) -> str:
    """Names that sort in write order (nanoseconds first) and never collide between processes."""
    return f"{prefix}{time.time_ns():020d}-{os.getpid()}{suffix}"


def curve_table(outcomes: Iterable[TrialOutcome]) -> pa.Table:
    """The curve rows of finished trials, in CURVE_SCHEMA."""
    columns: dict[str, list] = {name: [] for name in CURVE_SCHEMA.names}
    for outcome in outcomes:
        arrays = outcome.arrays
        horizon = len(arrays["cum_regret"])
        record = outcome.record
        columns["trial_id"].append(pa.array([record.trial_id] * horizon, pa.string()))
        for name in ("algorithm", "label", "environment"):
            columns[name].append(pa.DictionaryArray.from_arrays(pa.array(np.zeros(horizon, np.int32)),
                                                                pa.array([getattr(record, name)], pa.string())))
        columns["seed"].append(pa.array(np.full(horizon, record.seed, dtype=np.int64)))
        columns["t"].append(pa.array(np.arange(1, horizon + 1, dtype=np.int64)))
        for name in ("arm", "reward", "regret", "cum_regret", "seconds", *CURVE_EXTRA_COLUMNS):
            values = arrays.get(name)
            values = np.full(horizon, np.nan) if values is None else np.asarray(values)
            columns[name].append(pa.array(values, CURVE_SCHEMA.field(name).type))
        other = sorted(set(arrays) - set(CURVE_SCHEMA.names))
        columns["other_extras"].append(pa.array(
            [[(name, float(arrays[name][i])) for name in other] for i in range(horizon)],
            CURVE_SCHEMA.field("other_extras").type))
    return pa.table({name: _concat(parts, CURVE_SCHEMA.field(name).type) for name, parts in columns.items()},
                    schema=CURVE_SCHEMA)


def _concat(parts: list[pa.Array], kind: pa.DataType) -> pa.Array:
    if not parts:
        return pa.array([], kind)
    if pa.types.is_dictionary(kind):   # one dictionary for the whole column
        return pa.chunked_array(parts, kind).unify_dictionaries().combine_chunks()
    return pa.concat_arrays(parts)


def with_trial_columns(table: pa.Table, records: dict[str, TrialRecord] | Callable[[], dict[str, TrialRecord]]
                       ) -> pa.Table:
    """Curve rows in :data:`CURVE_SCHEMA` with their trial's algorithm, label, environment and seed
    filled in from ``records`` where a file of an earlier layout left them empty."""
    if table.num_rows == 0 or all(table[name].null_count == 0 for name in CURVE_TRIAL_COLUMNS):
        return table
    records = records() if callable(records) else records
    ids = pc.unique(table["trial_id"]).to_pylist()
    known = [records.get(tid) for tid in ids]
    index = pc.index_in(table["trial_id"], value_set=pa.array(ids, pa.string()))
    for name in CURVE_TRIAL_COLUMNS:
        column = table[name]
        if column.null_count == 0:
            continue
        values = pa.array([None if r is None else getattr(r, name) for r in known],
                          pa.int64() if name == "seed" else pa.string())
        filled = values.take(index)
        if name != "seed":
            filled = pc.coalesce(column.cast(pa.string()), filled).combine_chunks().dictionary_encode()
        else:
            filled = pc.coalesce(column, filled)
        table = table.set_column(table.schema.get_field_index(name), CURVE_SCHEMA.field(name), filled)
    return table


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
    return pa.table(columns).replace_schema_metadata(TRIALS_FORMAT)


def _upgrade_trials(frame: pd.DataFrame) -> pd.DataFrame:
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
            self.describe()
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- writing (only the driver of a run calls these) ------------------------------------------

    def describe(self) -> None:
        """Write ``README.txt``: what the folder holds and how to read it. Not being Parquet, it also
        makes a read of the whole sweep folder as one dataset fail with its name instead of silently
        reading the curves with the trials' columns (or the other way round)."""
        text = README.format(sweep=self.root.name, root=self.root, results=self.root.parent)
        path = self.root / "README.txt"
        if not path.exists() or path.read_text() != text:
            _fsync_write(path, lambda tmp: Path(tmp).write_text(text))

    def write_outcomes(self, outcomes: list[TrialOutcome]) -> None:
        """Make a group of trial outcomes durable: one curves part, then one journal segment."""
        if not outcomes:
            return
        finished = [o for o in outcomes if o.arrays is not None]
        if finished:
            table = curve_table(finished)
            _fsync_write(self.curves_dir / _unique_name("part-", ".parquet"),
                         lambda tmp: pq.write_table(table, tmp))
        text = "".join(json.dumps(o.record.to_json(), sort_keys=True, allow_nan=False) + "\n" for o in outcomes)
        _fsync_write(self.journal_dir / _unique_name("s", ".jsonl"), lambda tmp: Path(tmp).write_text(text))

    def write_trials_table(self, records: list[TrialRecord]) -> None:
        table = trials_table(records)
        _fsync_write(self.trials_dir / "trials.parquet", lambda tmp: pq.write_table(table, tmp))

    def compact(self) -> None:
        """Merge the curve parts into one file and the journal segments into one segment. Curve files
        of an earlier layout (without their trials' names) join the merge, so that every curve file
        has the current schema; a sweep with more than MAX_CURVE_FILES curve files is merged whole."""
        self.recover()
        files = sorted(_visible(self.curves_dir, "*.parquet"), key=_write_order)
        parts = [p for p in files if p.name.startswith("part-")]
        kept = [p for p in files if not p.name.startswith("part-")]
        earlier = [p for p in kept if not _has_trial_columns(p)]
        merge = files if len(kept) + 1 > MAX_CURVE_FILES else sorted([*earlier, *parts], key=_write_order)
        if len(merge) > 1 or earlier:
            records = self.journal()
            table = _latest_rows(pa.concat_tables([pq.read_table(p, schema=CURVE_SCHEMA) for p in merge]), records)
            table = with_trial_columns(table, records)
            self._replace(merge, self.curves_dir / _unique_name("c-", ".parquet"),
                          lambda tmp: pq.write_table(table, tmp, row_group_size=1 << 20))
        segments = self._segments()
        if len(segments) > 1:
            lines = [json.dumps(record.to_json(), sort_keys=True, allow_nan=False) + "\n"
                     for record in self.journal().values()]
            self._replace(segments, self.journal_dir / _unique_name("s", ".jsonl"),
                          lambda tmp: Path(tmp).write_text("".join(lines)))

    def _replace(self, parts: list[Path], target: Path, write: Callable[[str], None]) -> None:
        """Write ``target`` hidden, note which parts it replaces, remove them, then show ``target``."""
        hidden = target.with_name("." + target.name)
        _fsync_write(hidden, write)
        manifest = target.with_name("." + target.name + ".replaces")
        _fsync_write(manifest, lambda tmp: Path(tmp).write_text("\n".join(p.name for p in parts)))
        self._finish_replace(manifest)

    @staticmethod
    def _finish_replace(manifest: Path) -> None:
        hidden = manifest.with_name(manifest.name[: -len(".replaces")])
        for name in manifest.read_text().split("\n"):
            (manifest.parent / name).unlink(missing_ok=True)
        os.replace(hidden, manifest.parent / hidden.name[1:])
        manifest.unlink()

    def recover(self) -> None:
        """Finish compactions a crash interrupted (their merged file is complete: only the removal
        of the parts and the final rename may be missing)."""
        for directory in (self.curves_dir, self.journal_dir):
            if directory.is_dir():
                for manifest in directory.glob(".*.replaces"):
                    self._finish_replace(manifest)

    # -- reading -------------------------------------------------------------------------------

    def _segments(self) -> list[Path]:
        return sorted(_visible(self.journal_dir, "s*.jsonl"))

    def journal(self) -> dict[str, TrialRecord]:
        """Every trial's latest record: per-trial files of earlier versions first, then the segments
        in write order."""
        records: dict[str, TrialRecord] = {}
        for path in [*sorted(_visible(self.journal_dir, "*.json")), *self._segments()]:
            for record in _read_records(path)[0]:
                records[record.trial_id] = record
        return records

    def verify(self) -> "StoreHealth":
        """Check every result file: journal files parse, curve files are readable Parquet, and every
        trial the journal holds as finished has all its rounds in the curves. A file that fails is
        moved to ``quarantine/`` (named in the answer, never deleted); the good records of a
        damaged journal file are kept in a new segment. Trials left without their results are
        named, so that ``run`` runs them again."""
        health = StoreHealth()
        for path in [*_visible(self.journal_dir, "*.json"), *self._segments()]:
            good, bad = _read_records(path)
            if bad:
                if good:
                    text = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in good)
                    _fsync_write(self.journal_dir / _unique_name("s", ".jsonl"), lambda tmp: Path(tmp).write_text(text))
                health.quarantined.append(self._quarantine(path, f"{bad} unreadable record(s)"))
        rows: dict[str, int] = {}
        for path in _visible(self.curves_dir, "*.parquet"):
            try:
                table = pq.read_table(path, columns=["trial_id", "t"])
            except (pa.ArrowException, OSError) as error:
                health.quarantined.append(self._quarantine(path, f"not readable Parquet: {error}"))
                continue
            for trial_id, count in zip(*pc.value_counts(table["trial_id"]).flatten()):
                rows[trial_id.as_py()] = rows.get(trial_id.as_py(), 0) + count.as_py()
        for trial_id, record in self.journal().items():
            if record.status == FINISHED and rows.get(trial_id, 0) < record.horizon:
                health.missing_results.add(trial_id)
        return health

    def _quarantine(self, path: Path, why: str) -> str:
        target = self.root / "quarantine" / f"{path.parent.name.lstrip('.')}-{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        return f"{path} ({why}) moved to {target}"

    def read_trials(self) -> pd.DataFrame:
        """The trials table (one row per finished or failed trial), in the current layout also when
        it was written by an earlier version; rebuilt from the journal when it is not written yet."""
        path = self.trials_dir / "trials.parquet"
        if not path.exists():
            return trials_table(list(self.journal().values())).to_pandas()
        frame = pd.read_parquet(path)
        if (pq.read_schema(path).metadata or {}).get(b"banditsweep.trials") != TRIALS_FORMAT[b"banditsweep.trials"]:
            frame = _upgrade_trials(frame)
        return frame

    def read_curves(self, trial_ids: list[str] | None = None) -> pd.DataFrame:
        """Curve rows (of ``trial_ids``, else of every trial), one copy per trial and round, with
        their trial's names (taken from the journal for files of an earlier layout)."""
        files = sorted(_visible(self.curves_dir, "*.parquet"), key=_write_order)
        if not files:
            return CURVE_SCHEMA.empty_table().to_pandas()
        dataset = ds.dataset(files, schema=CURVE_SCHEMA, format="parquet")
        wanted = None if trial_ids is None else ds.field("trial_id").isin(list(trial_ids))
        table = _latest_rows(dataset.to_table(filter=wanted), None)
        return with_trial_columns(table, self.journal).to_pandas()


README = """\
Results of the sweep {sweep}, written by banditsweep: two Parquet tables with different columns.

  trials/   one row per finished or failed trial: status, final_regret, seconds_per_round, times,
            every parameter, every environment setting (env_*) and diagnostic (diag_*) as a column
  curves/   one row per trial per round: t, arm, reward, regret (per round), cum_regret, seconds,
            and the trial's trial_id, algorithm, label, environment and seed

Read each folder on its own (this file is not Parquet, so a read of this whole folder fails):

  import banditsweep
  trials, curves = banditsweep.load("{results}", "{sweep}")

  import pyarrow.dataset as ds
  ds.dataset("{root}/curves").to_table(filter=ds.field("t") == 100).to_pandas()

.journal/ is the record of truth that `banditsweep run` resumes from; report/ holds the files of
`banditsweep report`; quarantine/ the damaged files a check moved aside, if any.
"""


def load(results_root: str | os.PathLike, sweep: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The results of a sweep as pandas DataFrames ``(trials, curves)``.

    ``trials``: one row per finished or failed trial (``status``), with ``final_regret``,
    ``seconds_per_round``, ``started_at`` / ``finished_at`` (UTC timestamps), every parameter as a
    column, every environment setting as ``env_<name>`` and every diagnostic as ``diag_<name>``.
    ``curves``: one row per finished trial per round, with its trial's ``algorithm``, ``label``,
    ``environment`` (categoricals) and ``seed``. ``results_root`` is the folder that holds the sweep
    folders (``~`` is expanded); without ``sweep`` it is the sweep folder itself."""
    root = Path(results_root).expanduser()
    folder = root / sweep if sweep is not None else root
    store = SweepStore(folder.resolve())
    if not any(path.is_dir() for path in (store.trials_dir, store.curves_dir, store.journal_dir)):
        here = sorted(p.name for p in root.iterdir() if (p / "trials").is_dir()) if root.is_dir() else []
        raise FileNotFoundError(f"{folder}: no sweep results here" + (
            f" ({root} holds the sweeps {', '.join(here)})" if sweep is not None and here else ""))
    trials = store.read_trials()
    finished = trials.loc[trials["status"] == FINISHED, "trial_id"].tolist() if len(trials) else []
    curves = store.read_curves(finished)
    return trials.reset_index(drop=True), curves.reset_index(drop=True)


def _read_records(path: Path) -> tuple[list[TrialRecord], int]:
    """The records of one journal file, and how many of its lines could not be read (a damaged
    file: ``verify`` quarantines it; readers skip what they cannot read)."""
    good, bad = [], 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            good.append(TrialRecord.from_json(json.loads(line)))
        except (ValueError, TypeError, KeyError):
            bad += 1
    return good, bad


def _has_trial_columns(path: Path) -> bool:
    try:
        return "label" in pq.read_schema(path).names
    except (pa.ArrowException, OSError):
        return True   # unreadable: verify() moves it aside, compaction leaves it alone


def _write_order(path: Path) -> tuple:
    """Files of earlier versions (one per trial, named by trial id) first, then parts and merged
    files by the time in their names."""
    stem = path.stem
    if stem.startswith(("part-", "c-")):
        return (1, stem.split("-", 1)[1])
    return (0, stem)


def _latest_rows(table: pa.Table, records: dict[str, TrialRecord] | None) -> pa.Table:
    """One row per (trial, round): a trial's curves can be on disk twice only when a crash fell
    between its curves and its journal entry and it then ran again; the rows of the last write win
    (files are read in write order). With ``records``, rows of trials the journal does not hold as
    finished are dropped."""
    if table.num_rows == 0:
        return table
    frame = pa.table({"trial_id": table["trial_id"], "t": table["t"],
                      "order": pa.array(np.arange(table.num_rows))})
    keep = frame.group_by(["trial_id", "t"]).aggregate([("order", "max")])["order_max"]
    table = table.take(pa.array(np.sort(keep.to_numpy())))
    if records is not None:
        done = [tid for tid, r in records.items() if r.status == FINISHED]
        table = table.filter(pc.is_in(table["trial_id"], pa.array(done, pa.string())))
    return table


@dataclass
class StoreHealth:
    quarantined: list[str] = field(default_factory=list)   # one line per damaged file moved aside
    missing_results: set[str] = field(default_factory=set)  # finished trials whose curves are gone

    @property
    def ok(self) -> bool:
        return not self.quarantined and not self.missing_results


class TrialsTable:
    """The journal's records in memory and ``trials.parquet`` rebuilt from them at a bounded rate:
    at most every ``min_interval`` seconds and never more than ``max_share`` of the time (a rebuild
    costs more as the sweep grows), and always on :meth:`flush`."""

    def __init__(self, store: SweepStore, records: dict[str, TrialRecord], min_interval: float = 2.0,
                 max_share: float = 0.05):
        self.store, self.records = store, records
        self.min_interval, self.max_share = min_interval, max_share
        self.dirty = False
        self.written_at = 0.0
        self.cost = 0.0

    def add(self, records: Iterable[TrialRecord]) -> None:
        for record in records:
            self.records[record.trial_id] = record
            self.dirty = True
        wait = max(self.min_interval, self.cost / self.max_share)
        if self.dirty and time.monotonic() - self.written_at >= wait:
            self.flush()

    def flush(self) -> None:
        started = time.monotonic()
        if self.records:
            self.store.write_trials_table(list(self.records.values()))
        self.dirty = False
        self.written_at = time.monotonic()
        self.cost = self.written_at - started
