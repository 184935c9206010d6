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

Integrity: every Parquet page has a CRC (verified on read); every curves file and journal segment
has the SHA-256 of its bytes in its name, and every journal line the SHA-256 of its record, which
must also be a valid :class:`TrialRecord`. :meth:`SweepStore.verify` (``status``, ``run``,
``report``) checks them all and moves what fails to ``quarantine/``; the trials of a curves file
moved aside, and of a record moved aside, run again. Files and records written before checksums
are read and checked for everything else, and compaction rewrites them with checksums.

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
import hashlib
import json
import math
import os
import re
import socket
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

from banditsweep.workers.atomic import move_into_place, write_atomically, written_temporary
from banditsweep.workers.errors import DamagedResultError, SweepBusyError
from banditsweep.workers.record import FAILED, FINISHED, TrialOutcome, TrialRecord

__all__ = ["CURVE_SCHEMA", "FAILED", "FINISHED", "SweepBusyError", "SweepStore", "TrialsTable", "load"]


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


WRITE_OPTIONS = {"write_page_checksum": True}
_DIGEST = re.compile(r"-([0-9a-f]{64})$")
# Each journal line holds its record's fields and this key: the SHA-256 of the record's canonical
# JSON, so one damaged record is found (and named) while the others of its segment are kept.
RECORD_DIGEST = "sha256"


def _write_parquet(table: pa.Table, path: str, **options) -> None:
    pq.write_table(table, path, **WRITE_OPTIONS, **options)


def _read_parquet(path: Path | str, **options) -> pa.Table:
    return pq.read_table(path, page_checksum_verification=True, **options)


def named_digest(path: Path) -> str | None:
    """The SHA-256 a file's name gives for its bytes (None for files written before)."""
    match = _DIGEST.search(path.stem)
    return match.group(1) if match else None


def file_digest(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_digested(directory: Path, prefix: str, suffix: str, write: Callable[[str], None],
                    hidden: bool = False) -> Path:
    """Atomically (workers.atomic), into a new file named by its write time and the SHA-256 of its
    bytes; returns its (visible) path."""
    tmp = written_temporary(directory, f".tmp.{prefix}", write)
    name = f"{_unique_name(prefix, '')}-{file_digest(tmp)}{suffix}"
    move_into_place(tmp, directory / (("." if hidden else "") + name))
    return directory / name


def journal_text(records: Iterable[TrialRecord]) -> str:
    """Journal lines: each record's fields with the SHA-256 of their canonical JSON."""
    lines = []
    for record in records:
        values = record.to_json()
        lines.append(json.dumps({**values, RECORD_DIGEST: _record_digest(values)}, sort_keys=True,
                                allow_nan=False) + "\n")
    return "".join(lines)


def _record_digest(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":"),
                                     allow_nan=False).encode()).hexdigest()


def one_line(error: BaseException | str, limit: int = 200) -> str:
    """An error's text on one line of printable characters, at most ``limit`` long (Parquet's
    messages may span lines and quote the damaged bytes)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in line).strip()
                    for line in str(error).splitlines()).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
            write_atomically(path, text)

    def write_outcomes(self, outcomes: list[TrialOutcome]) -> None:
        """Make a group of trial outcomes durable: one curves part, then one journal segment."""
        if not outcomes:
            return
        finished = [o for o in outcomes if o.arrays is not None]
        if finished:
            table = curve_table(finished)
            _write_digested(self.curves_dir, "part-", ".parquet", lambda tmp: _write_parquet(table, tmp))
        text = journal_text(o.record for o in outcomes)
        _write_digested(self.journal_dir, "s", ".jsonl", lambda tmp: Path(tmp).write_text(text))

    def write_trials_table(self, records: list[TrialRecord]) -> None:
        # A view of the journal under a fixed name (readers read trials/), so no digest in its name:
        # its pages have CRCs and `status` compares its rows with the journal.
        table = trials_table(records)
        write_atomically(self.trials_dir / "trials.parquet", lambda tmp: _write_parquet(table, tmp))

    def compact(self) -> None:
        """Merge the curve parts into one file and the journal segments into one segment. A curve
        file joins the merge also when it shares a trial with another file (the trial ran again
        after its journal record was lost), holds rows of trials the journal does not hold as
        finished, lacks its trials' names (an earlier layout) or a checksum (written before files
        had them): after a compaction every finished trial's rows are in the folder once, so a
        plain ``pyarrow.dataset`` read of ``curves/`` gives one copy. A sweep with more than
        MAX_CURVE_FILES curve files is merged whole. Damaged files are left where they are, and
        what they would join is not merged: ``verify`` moves them aside first."""
        self.recover()
        segments = [*sorted(_visible(self.journal_dir, "*.json")), *self._segments()]
        read = [_read_records(path) for path in segments]
        if any(journal_file.damage for journal_file in read):
            return   # its records are not all known: nothing may be dropped or merged for want of them
        records = {record.trial_id: record for journal_file in read for record in journal_file.records}
        self._compact_curves(records)
        if len(segments) > 1 or any(named_digest(path) is None for path in segments):
            self._replace(segments, self.journal_dir, "s", ".jsonl",
                          lambda tmp: Path(tmp).write_text(journal_text(records.values())))

    def _compact_curves(self, records: dict[str, TrialRecord]) -> None:
        files = sorted(_visible(self.curves_dir, "*.parquet"), key=_write_order)
        if not files:
            return
        done = {tid for tid, r in records.items() if r.status == FINISHED}
        ids: dict[Path, set[str]] = {}
        for path in files:
            try:
                ids[path] = set(pc.unique(_read_parquet(path, columns=["trial_id"])["trial_id"]).to_pylist())
            except (pa.ArrowException, OSError):
                return   # unreadable: verify() moves it aside before anything is merged
        seen: dict[str, int] = {}
        for trial_ids in ids.values():
            for trial_id in trial_ids:
                seen[trial_id] = seen.get(trial_id, 0) + 1
        kept = [p for p in files if not p.name.startswith("part-")]
        if len(kept) + 1 > MAX_CURVE_FILES:
            merge = files
        else:
            merge = [p for p in files if p.name.startswith("part-") or named_digest(p) is None
                     or not _has_trial_columns(p) or ids[p] - done or any(seen[t] > 1 for t in ids[p])]
        rewrite = [p for p in merge if named_digest(p) is None or not _has_trial_columns(p) or ids[p] - done
                   or any(seen[t] > 1 for t in ids[p])]
        if len(merge) < 2 and not rewrite:
            return
        if any(_damage(p) for p in merge):
            return   # a damaged file merged would come out with a valid checksum: verify() first
        table = _latest_rows(pa.concat_tables([_read_parquet(p, schema=CURVE_SCHEMA) for p in merge]), records)
        table = with_trial_columns(table, records)
        self._replace(merge, self.curves_dir, "c-", ".parquet",
                      lambda tmp: _write_parquet(table, tmp, row_group_size=1 << 20))

    def _replace(self, parts: list[Path], directory: Path, prefix: str, suffix: str,
                 write: Callable[[str], None]) -> None:
        """Write the merged file hidden, note which parts it replaces, remove them, then show it."""
        target = _write_digested(directory, prefix, suffix, write, hidden=True)
        manifest = target.with_name("." + target.name + ".replaces")
        write_atomically(manifest, "\n".join(p.name for p in parts))
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
        """Every trial's latest valid record: per-trial files of earlier versions first, then the
        segments in write order. Records that are not valid are left out (``verify`` names them)."""
        records: dict[str, TrialRecord] = {}
        for path in [*sorted(_visible(self.journal_dir, "*.json")), *self._segments()]:
            for record in _read_records(path).records:
                records[record.trial_id] = record
        return records

    def verify(self, planned: Iterable[str] = ()) -> "StoreHealth":
        """Check every result file: each journal record is a valid TrialRecord with its checksum,
        each segment's bytes match the checksum in its name, and a record of a ``planned`` trial id
        describes that trial (its id is its content's); each curves file's bytes match the checksum
        in its name and every page its CRC; every trial the journal holds as finished has all its
        rounds in the curves. A file that fails is moved to ``quarantine/`` (named in the answer,
        never deleted); the good records of a damaged journal file are kept in a new segment.
        Trials left without their results are named, so that ``run`` runs them again."""
        health = StoreHealth()
        planned = set(planned)
        for path in [*_visible(self.journal_dir, "*.json"), *self._segments()]:
            read = _read_records(path, planned)
            if read.damage:
                if read.records:
                    text = journal_text(read.records)
                    _write_digested(self.journal_dir, "s", ".jsonl", lambda tmp: Path(tmp).write_text(text))
                health.quarantined.append(self._quarantine(path, read.damage))
        rows: dict[str, int] = {}
        for path in _visible(self.curves_dir, "*.parquet"):
            damage = _damage(path, rows)
            if damage:
                health.quarantined.append(self._quarantine(path, damage))
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
        it was written by an earlier version; rebuilt from the journal when it is not written yet
        or cannot be read (a page that fails its CRC: ``status`` names it, ``run`` rewrites it)."""
        path = self.trials_dir / "trials.parquet"
        try:
            table = _read_parquet(path)
        except (pa.ArrowException, OSError):
            return trials_table(list(self.journal().values())).to_pandas()
        frame = table.to_pandas()
        if (table.schema.metadata or {}).get(b"banditsweep.trials") != TRIALS_FORMAT[b"banditsweep.trials"]:
            frame = _upgrade_trials(frame)
        return frame

    def read_curves(self, trial_ids: list[str] | None = None) -> pd.DataFrame:
        """Curve rows (of ``trial_ids``, else of every trial), one copy per trial and round, with
        their trial's names (taken from the journal for files of an earlier layout). A page that
        fails its CRC raises :class:`DamagedResultError` naming the file."""
        files = sorted(_visible(self.curves_dir, "*.parquet"), key=_write_order)
        if not files:
            return CURVE_SCHEMA.empty_table().to_pandas()
        dataset = ds.dataset(files, schema=CURVE_SCHEMA, format=ds.ParquetFileFormat(
            default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)))
        wanted = None if trial_ids is None else ds.field("trial_id").isin(list(trial_ids))
        try:
            table = dataset.to_table(filter=wanted)
        except (pa.ArrowException, OSError) as error:
            damaged = next((p for p in files if _damage(p)), None)
            raise DamagedResultError(
                f"{damaged or self.curves_dir}: damaged curves ({type(error).__name__}: {one_line(error)}); "
                "`banditsweep status` moves it aside and `banditsweep run` runs its trials again") from None
        return with_trial_columns(_latest_rows(table, None), self.journal).to_pandas()


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
`banditsweep report`; quarantine/ the damaged files a check moved aside, if any. The name of each
file in curves/ and .journal/ ends with the SHA-256 of its bytes (`sha256sum` shows it); every
Parquet page has a CRC (pyarrow checks them with page_checksum_verification=True); `banditsweep
status` checks both.
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


@dataclass
class JournalFile:
    records: list[TrialRecord]   # its valid records
    damage: str = ""             # what is wrong with it ("" when nothing)


_TRIAL_ID = re.compile(r'"trial_id":\s*"([^"\\]{1,64})"')


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _read_records(path: Path, planned: set[str] = frozenset()) -> JournalFile:
    """The valid records of one journal file and what is wrong with the rest: a line that is not a
    JSON object, a record that is not a valid TrialRecord, one whose checksum does not match, one
    whose trial id (a ``planned`` one) is not its content's; and a segment whose bytes do not match
    the checksum in its name (a record lost or repeated). Records without a checksum (written
    before records had one) are checked for everything else."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return JournalFile([], f"not readable: {error.strerror or one_line(error)}")
    good, bad = [], []
    for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        named = _TRIAL_ID.search(line)   # to name the trial also when the line is not JSON
        trial = f" (trial {named.group(1)})" if named else ""
        try:
            values = json.loads(line, parse_constant=_no_constant)
            if isinstance(values, dict):
                digest = values.pop(RECORD_DIGEST, None)
                if digest is not None and digest != _record_digest(values):
                    raise ValueError("its content does not match its checksum")
            record = TrialRecord.from_json(values)
            if record.trial_id in planned and record.trial_id not in record.content_ids():
                raise ValueError(f"trial_id: {record.trial_id} is not the id of its content (algorithm, params, "
                                 f"environment_config, seed, horizon give {record.content_ids()[0]})")
            good.append(record)
        except ValueError as error:   # json's errors, RecordError and the checks above
            text = str(error) if not isinstance(error, json.JSONDecodeError) else f"not JSON ({error})"
            bad.append(f"line {number}{trial}: {one_line(text)}")
    if bad:
        more = f"; and {len(bad) - 1} more" if len(bad) > 1 else ""
        return JournalFile(good, f"{len(bad)} unreadable record(s): {bad[0]}{more}")
    expected = named_digest(path)
    if expected and hashlib.sha256(data).hexdigest() != expected:
        return JournalFile(good, f"its bytes do not match the SHA-256 in its name ({len(good)} record(s) kept)")
    return JournalFile(good)


def _damage(path: Path, rows: dict[str, int] | None = None) -> str:
    """What is wrong with a curves file ("" when nothing): bytes that do not match the checksum in
    its name, a page that fails its CRC, or not Parquet at all. Counts each trial's rows into
    ``rows``. A file without a checksum (written before) is decoded whole, every column."""
    expected = named_digest(path)
    try:
        matches = expected is not None and file_digest(path) == expected
        if expected is not None and not matches:
            pq.ParquetFile(path)   # a file cut short says so (below); one that still opens, the checksum
            return "its bytes do not match the SHA-256 in its name"
        counts: dict[str, int] = {}
        handle = pq.ParquetFile(path, page_checksum_verification=True)
        columns = ["trial_id"] if matches else None   # a matching checksum vouches for every byte
        for group in range(handle.num_row_groups):
            table = handle.read_row_group(group, columns=columns)
            for trial_id, count in zip(*pc.value_counts(table["trial_id"]).flatten()):
                counts[trial_id.as_py()] = counts.get(trial_id.as_py(), 0) + count.as_py()
    except (pa.ArrowException, OSError, KeyError) as error:
        return f"not readable Parquet: {one_line(error)}"
    if rows is not None:
        for trial_id, count in counts.items():
            rows[trial_id] = rows.get(trial_id, 0) + count
    return ""


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
