"""The curves table of a sweep (``<sweep>/curves/``): one row per trial per round in
:data:`CURVE_SCHEMA`, in Parquet files with a CRC on every page; how rows are built from outcomes,
how a file is checked, and which copy of a round wins when a trial's rows were written twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from banditsweep.workers.storage.checksums import handle_digest, named_digest
from banditsweep.workers.storage.untrusted_files import NotARegularFile, open_regular, parquet_file, read_parquet
from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.record import FINISHED, TrialOutcome, TrialRecord

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

# The columns every layout of the curves table has had. A file of an earlier version may lack the
# others (the trial's names and seed, filled in from the journal; the extras, read as missing).
CURVE_REQUIRED_COLUMNS = ("trial_id", "t", "arm", "reward", "regret", "cum_regret", "seconds")


def _is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _reads_as(kind: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a column of type ``kind`` reads into :data:`CURVE_SCHEMA`'s ``wanted`` as it is:
    the same type, or one Arrow casts to it without parsing text or losing values (text plain or
    dictionary-encoded, a narrower integer or float, a map's entries named otherwise)."""
    if kind == wanted:
        return True
    if _is_text(wanted):
        return _is_text(kind)
    if pa.types.is_integer(wanted):
        return pa.types.is_signed_integer(kind) or kind in (pa.uint8(), pa.uint16(), pa.uint32())
    if pa.types.is_floating(wanted):
        return kind in (pa.float32(), pa.float64())
    if pa.types.is_map(wanted):
        return (pa.types.is_map(kind) and _is_text(kind.key_type)
                and _reads_as(kind.item_type, wanted.item_type))
    return False


def schema_damage(schema: pa.Schema) -> str:
    """What keeps a file of ``schema`` from being read as curve rows ("" when nothing): a column
    every layout has that it lacks, or a column of :data:`CURVE_SCHEMA` of another type (a ``t`` of
    text would end every read of curves/ in a cast error). Columns of no layout are left unread."""
    missing = [name for name in CURVE_REQUIRED_COLUMNS if name not in schema.names]
    if missing:
        return f"not a curves table: no column {', '.join(missing)}"
    for field in CURVE_SCHEMA:
        if field.name not in schema.names:
            continue
        if schema.get_all_field_indices(field.name) != [schema.get_field_index(field.name)]:
            return f"not a curves table: column {field.name} twice"
        kind = schema.field(field.name).type
        if not _reads_as(kind, field.type):
            return f"not a curves table: column {field.name} is {kind} (the curves table's is {field.type})"
    return ""


# Curve files are compacted into one when a sweep has more (each `run` leaves one).
MAX_CURVE_FILES = 8

WRITE_OPTIONS = {"write_page_checksum": True}

def write_parquet(table: pa.Table, path: str, **options) -> None:
    pq.write_table(table, path, **WRITE_OPTIONS, **options)


# Rows per row group of a merged curves file written part by part (workers.storage.store's compaction):
# what a merge holds in memory at once, whatever the sweep's size.
MERGE_ROW_GROUP = 1 << 18


def write_parts_parquet(parts: Iterable[pa.Table], path: str, schema: pa.Schema) -> None:
    """One Parquet file of the tables ``parts`` gives, in order, written as they come in row groups
    of about MERGE_ROW_GROUP rows: the parts are never all in memory together."""
    with pq.ParquetWriter(path, schema, **WRITE_OPTIONS) as writer:
        pending: list[pa.Table] = []
        rows = 0
        for part in parts:
            pending.append(part)
            rows += part.num_rows
            if rows >= MERGE_ROW_GROUP:
                writer.write_table(pa.concat_tables(pending), row_group_size=MERGE_ROW_GROUP)
                pending, rows = [], 0
        if pending:
            writer.write_table(pa.concat_tables(pending), row_group_size=MERGE_ROW_GROUP)


def read_curve_files(files: list[Path], columns: list[str] | None = None, filter=None) -> pa.Table:
    """The rows of the curves ``files`` in :data:`CURVE_SCHEMA` (``columns`` of it), in the order
    given (the last copy of a round wins), each file opened once as the hostile data it may be."""
    if not files:
        empty = CURVE_SCHEMA.empty_table()
        return empty if columns is None else empty.select(columns)
    return pa.concat_tables([read_parquet(path, schema=CURVE_SCHEMA, columns=columns, filters=filter)
                             for path in files])


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


def curves_damage(path: Path, rows: dict[str, int] | None = None) -> str:
    """What is wrong with a curves file ("" when nothing): bytes that do not match the checksum in
    its name, a page that fails its CRC, not Parquet at all, or Parquet that is not a curves table
    (:func:`schema_damage`: a file named with its right checksum may still have been put there by
    hand). Counts each trial's rows into ``rows``. A file without a checksum (written before) is
    decoded whole, every column."""
    expected = named_digest(path)
    counts: dict[str, int] = {}
    try:
        # One descriptor for the checksum and the pages: the bytes checked are the bytes decoded.
        with open_regular(path) as source:
            matches = expected is not None and handle_digest(source) == expected
            source.seek(0)
            parquet = pq.ParquetFile(source, page_checksum_verification=True)
            if expected is not None and not matches:   # a file cut short said so above; one that opens, here
                return "its bytes do not match the SHA-256 in its name"
            wrong = schema_damage(parquet.schema_arrow)
            if wrong:
                return wrong
            columns = ["trial_id"] if matches else None   # a matching checksum vouches for every byte
            for group in range(parquet.num_row_groups):
                table = parquet.read_row_group(group, columns=columns)
                for trial_id, count in zip(*pc.value_counts(table["trial_id"]).flatten()):
                    counts[trial_id.as_py()] = counts.get(trial_id.as_py(), 0) + count.as_py()
    except NotARegularFile as error:   # a FIFO would block Parquet's reader for ever, a link lead out of the folder
        return f"not readable: {error.strerror}"
    except FileNotFoundError:
        return "not readable: missing, not a file"
    except (pa.ArrowException, OSError, KeyError) as error:
        return f"not readable Parquet: {one_line(error)}"
    if rows is not None:
        for trial_id, count in counts.items():
            rows[trial_id] = rows.get(trial_id, 0) + count
    return ""


def has_trial_columns(path: Path) -> bool:
    try:
        with parquet_file(path) as parquet:
            return "label" in parquet.schema_arrow.names
    except (pa.ArrowException, OSError):
        return True   # unreadable: verify() moves it aside, compaction leaves it alone


def write_order(path: Path) -> tuple:
    """Files of earlier versions (one per trial, named by trial id) first, then parts and merged
    files by the time in their names."""
    stem = path.stem
    if stem.startswith(("part-", "c-")):
        return (1, stem.split("-", 1)[1])
    return (0, stem)


def only_of(table: pa.Table, trial_ids: pa.Array) -> pa.Table:
    """The rows of ``table`` whose trial is one of ``trial_ids``."""
    return table.filter(pc.is_in(table["trial_id"], value_set=trial_ids))


def latest_rows(table: pa.Table, records: dict[str, TrialRecord] | None) -> pa.Table:
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
