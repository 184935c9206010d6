"""Do a sweep's result files agree with each other? The journal (the record of truth), the trials
table rebuilt from it (``trials/trials.parquet``) and the curves (one row per finished trial and
round ``1 … horizon``, whose ``cum_regret`` at round horizon is the journal's ``final_regret``).
Read by ``banditsweep status``; nothing is written here.

What is allowed, because a run that stopped between two writes leaves it and readers handle it:
curve rows of trials the journal does not hold as finished (they run again; readers drop those
rows), and a round written twice with the same values (readers keep the later copy). While a run
is in progress its trials table trails the journal by design (it is rebuilt at a bounded rate and
at the end).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from banditsweep.workers.storage.curves import CURVE_EXTRA_COLUMNS, CURVE_REQUIRED_COLUMNS, read_curve_files
from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.paths import SweepFolder
from banditsweep.workers.storage.record import FINISHED, TrialRecord
from banditsweep.workers.storage.store import run_in_progress
from banditsweep.workers.storage.trials_table import TRIAL_COLUMNS, trials_table
from banditsweep.workers.storage.untrusted_files import parquet_file

# Trial ids named in one line at most (a count says how many more).
SHOWN = 3
# Rows of the trials table beyond the journal's trials past which its rows are not read: it is a
# view of the journal (a row per trial), and a small file can hold 10^8 dictionary-encoded rows.
TABLE_ROWS_OVER = 1000
# The values of a round that a rerun of its trial reproduces (same seed, same code): every column
# of the curves but the trial's names and seed (the same in each row of a trial) and ``seconds``
# (the round's wall time, never the same twice).
ROUND_VALUES = ("arm", "reward", "regret", "cum_regret", *CURVE_EXTRA_COLUMNS)
# Floats of two copies, or of the journal and the curves, are the same number: a tolerance for the
# last bits only.
RELATIVE = 1e-9


@dataclass
class Consistency:
    journal: int = 0                      # trials the journal holds
    finished: int = 0                     # ... of them finished
    table_rows: int | None = None         # rows of the trials table (None: there is none)
    complete_curves: int = 0              # finished trials with each round 1 … horizon once or more
    curve_rows: int = 0                   # rows in the curve files
    running: bool = False                 # a `run` of the sweep holds its lock now
    problems: list[str] = field(default_factory=list)   # disagreements: the store is inconsistent
    notes: list[str] = field(default_factory=list)      # allowed states worth a word

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        table = "no trials table" if self.table_rows is None else f"trials table {self.table_rows} rows"
        return (f"journal {self.journal} trials ({self.finished} finished), {table}, curves {self.curve_rows} rows: "
                f"{self.complete_curves} of {self.finished} finished trials have every round")


def _named(ids, total: int | None = None) -> str:
    ids = sorted(ids)
    total = len(ids) if total is None else total
    more = f" and {total - SHOWN} more" if total > SHOWN else ""
    return ", ".join(ids[:SHOWN]) + more


def check(root: Path, records: dict[str, TrialRecord]) -> Consistency:
    """Compare the trials table and the curves of the sweep folder ``root`` with the journal's
    ``records``."""
    result = Consistency(journal=len(records), running=run_in_progress(root))
    finished = {tid: r for tid, r in records.items() if r.status == FINISHED}
    result.finished = len(finished)
    _check_table(root, records, result)
    _check_curves(root, finished, result)
    return result


def _check_table(root: Path, records: dict[str, TrialRecord], result: Consistency) -> None:
    path = SweepFolder(root).trials_file
    if not path.exists():
        if records and not result.running:
            result.problems.append(f"{path} is missing but the journal holds {len(records)} trials; "
                                   "`run` rebuilds it")
        return
    try:
        with parquet_file(path) as parquet:
            # Its size from its footer first: rows far beyond the journal's trials are not read at all.
            rows = parquet.metadata.num_rows
            if rows > len(records) + TABLE_ROWS_OVER:
                result.table_rows = rows
                result.problems.append(
                    f"{path}: {rows} rows, the journal {len(records)} trials: over {TABLE_ROWS_OVER} rows more than "
                    "the journal has trials (its rows were not read); `run` rebuilds it from the journal")
                return
            # Every page against its CRC (files written before have none: nothing to check there).
            table = parquet.read()
    except (pa.ArrowException, OSError, KeyError) as error:
        result.problems.append(f"{path} is not readable ({type(error).__name__}: {one_line(error)}); "
                               "`run` rebuilds it from the journal")
        return
    result.table_rows = table.num_rows
    ids = table["trial_id"].to_pylist()
    statuses = dict(zip(ids, table["status"].to_pylist()))
    repeated = len(ids) - len(statuses)
    missing = set(records) - set(statuses)
    extra = set(statuses) - set(records)
    differ = {tid for tid in set(records) & set(statuses) if statuses[tid] != records[tid].status}
    changed = {tid: names for tid, names in _other_values(table, records).items() if tid not in differ}
    lines = []
    if repeated:
        lines.append(f"{repeated} trial(s) twice")
    if missing:
        lines.append(f"{len(missing)} trial(s) of the journal missing ({_named(missing)})")
    if extra:
        lines.append(f"{len(extra)} trial(s) the journal does not hold ({_named(extra)})")
    if differ:
        lines.append(f"{len(differ)} trial(s) with another status than the journal's ({_named(differ)})")
    if changed:
        lines.append(f"{len(changed)} trial(s) with other values than the journal's ({_named(changed)}; "
                     f"{min(changed)}: {', '.join(sorted(changed[min(changed)]))})")
    if not lines:
        return
    text = (f"{path}: {len(ids)} rows, the journal {len(records)} trials: " + "; ".join(lines))
    if result.running and not repeated and not extra:
        result.notes.append(text + " (a run is in progress: the table is rebuilt as it goes and at its end)")
    else:
        result.problems.append(text + "; `run` rebuilds it from the journal")


def _other_values(table: pa.Table, records: dict[str, TrialRecord]) -> dict[str, set[str]]:
    """Trials of both the table and the journal whose record fields differ, with the columns: the
    table is a view of the journal, so each value should be the journal's, bit for bit. Columns of
    another type than the current layout's (an earlier layout) are compared where they cast."""
    ids = table["trial_id"].to_pylist()
    if len(set(ids)) != len(ids):
        return {}   # a trial twice: named as such
    common = [tid for tid in ids if tid in records]
    if not common:
        return {}
    expected = trials_table([records[tid] for tid in common])
    order = {tid: i for i, tid in enumerate(expected["trial_id"].to_pylist())}
    expected = expected.take(pa.array([order[tid] for tid in common]))
    present = table.filter(pa.array([tid in records for tid in ids]))
    changed: dict[str, set[str]] = {}
    for name in TRIAL_COLUMNS:
        if name not in present.column_names:
            continue
        try:
            actual = present[name].cast(expected.schema.field(name).type).to_pylist()
        except (pa.ArrowException, ValueError):
            continue
        for tid, have, want in zip(common, actual, expected[name].to_pylist()):
            if have != want:
                changed.setdefault(tid, set()).add(name)
    return changed


def _named_problem(found: dict[str, str], what: str, why: str = "") -> str:
    """``found`` (trial id -> what is wrong with it) as one line: the count, what, the first ids, an example."""
    example = min(found)
    return f"{len(found)} finished trial(s) {what} ({_named(found)}; {example}: {found[example]}){why}"


def _copies_that_differ(files: list[Path], trial_ids: list[str]) -> dict[str, str]:
    """Of trials whose rounds are in the curves twice, those whose copies disagree on a value of a
    round (:data:`ROUND_VALUES` and ``other_extras``: a rerun of a trial reproduces each, same
    content, same seed), with the first such round and value. Floats agree to the last bits
    (RELATIVE); a column that a file of an earlier layout lacks (an extra, read as missing) is
    compared where both copies have it."""
    table = read_curve_files(files, columns=["trial_id", "t", *ROUND_VALUES, "other_extras"],
                             filter=ds.field("trial_id").isin(trial_ids))
    if table.num_rows == 0:
        return {}
    trial = pc.dictionary_encode(table["trial_id"]).unify_dictionaries()   # a code per trial id
    codes = np.concatenate([chunk.indices.to_numpy() for chunk in trial.chunks])
    rounds = table["t"].to_numpy()
    order = np.lexsort((rounds, codes))                 # by trial, then round (copies in the order read)
    codes, rounds = codes[order], rounds[order]
    repeat = (codes[1:] == codes[:-1]) & (rounds[1:] == rounds[:-1])
    pair = np.flatnonzero(repeat)                       # order[pair], order[pair + 1]: two copies of a round
    earlier, later = order[pair], order[pair + 1]
    found: dict[int, tuple[int, int, str]] = {}         # trial's code -> (round, column's place, what differs)

    def keep_first(apart: np.ndarray, place: int, describe) -> None:
        # Pairs are in (trial, round) order: a trial's first flagged pair is its first round that differs.
        flagged = np.flatnonzero(apart)
        _, first = np.unique(codes[pair[flagged]], return_index=True)
        for index in flagged[first]:
            code, t = int(codes[pair[index]]), int(rounds[pair[index]])
            if code not in found or (t, place) < found[code][:2]:
                found[code] = (t, place, describe(index))

    for place, name in enumerate(ROUND_VALUES):
        column = table[name]
        valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
        values = pc.fill_null(column, 0).to_numpy()
        a, b, both = values[earlier], values[later], valid[earlier] & valid[later]
        with np.errstate(invalid="ignore"):
            same = a == b
            if pa.types.is_floating(column.type):
                same |= (np.isnan(a) & np.isnan(b)) | (
                    np.abs(a - b) <= RELATIVE * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b))))
        apart = both & ~same
        if name in CURVE_REQUIRED_COLUMNS:   # every layout has it: missing from one copy is a difference
            apart |= valid[earlier] != valid[later]
        if apart.any():
            keep_first(apart, place, lambda i, name=name, a=a, b=b, both=both:
                       _two_values(name, a[i], b[i]) if both[i] else f"{name} missing in a copy")
    groups = np.empty(len(order), np.int64)             # each row's (trial, round), numbered
    groups[order] = np.concatenate([[0], np.cumsum(~repeat)])
    extras, describe = _extras_that_differ(table["other_extras"], groups)
    if len(extras):
        keep_first(np.isin(groups[earlier], extras), len(ROUND_VALUES), lambda i: describe(groups[earlier[i]]))
    names = trial.chunks[0].dictionary.to_pylist()
    return {names[code]: f"round {t}: {what}" for code, (t, _, what) in found.items()}


def _two_values(name: str, a, b) -> str:
    if isinstance(a, np.floating) and np.isnan(a) != np.isnan(b):
        return f"{name} NaN and {b if np.isnan(a) else a:g}"
    return f"{name} {min(a, b):g} and {max(a, b):g}"


def _extras_that_differ(extras: pa.ChunkedArray, groups: np.ndarray) -> tuple[np.ndarray, Callable[[int], str]]:
    """The rounds (``groups``: a number per row, the same for the copies of one round) whose copies
    disagree on ``other_extras``, and what differs in one of them: a value apart by more than the
    last bits, or a key in some copies only (copies without the column, of an earlier layout, are
    left out)."""
    extras = extras.combine_chunks()
    offsets = extras.offsets.to_numpy()
    if offsets[-1] == offsets[0]:
        return np.empty(0, np.int64), str   # no round has extras (most environments report none)
    valid = pc.is_valid(extras).to_numpy(zero_copy_only=False)
    owner = np.repeat(np.arange(len(extras)), np.diff(offsets))
    entries = pa.table({"group": pa.array(groups[owner]),
                        "key": extras.keys.slice(offsets[0], offsets[-1] - offsets[0]),
                        "value": extras.items.slice(offsets[0], offsets[-1] - offsets[0]).cast(pa.float64()),
                        "valid": pa.array(valid[owner])})
    entries = entries.filter(entries["valid"])
    entries = entries.append_column("nan", pc.is_nan(entries["value"]).cast(pa.int64()))
    per_key = entries.group_by(["group", "key"]).aggregate(
        [("value", "min"), ("value", "max"), ("value", "count"), ("nan", "sum")]).sort_by(
        [("group", "ascending"), ("key", "ascending")])
    group = per_key["group"].to_numpy()
    low, high = (pc.fill_null(per_key[f"value_{f}"], np.nan).to_numpy() for f in ("min", "max"))
    count, nans = per_key["value_count"].to_numpy(), pc.fill_null(per_key["nan_sum"], 0).to_numpy()
    copies = np.bincount(groups, weights=valid).astype(np.int64)   # per round: its copies with the column
    with np.errstate(invalid="ignore"):
        apart = (count != copies[group]) | ((nans > 0) & (nans < count)) | (
            np.abs(high - low) > RELATIVE * np.maximum(1.0, np.maximum(np.abs(high), np.abs(low))))
    apart &= copies[group] > 1
    flagged = per_key.filter(pa.array(apart))
    starts = flagged["group"].to_numpy()

    def describe(gid: int) -> str:
        row = flagged.slice(int(np.searchsorted(starts, gid)), 1).to_pylist()[0]   # its first key that differs
        key = row["key"]
        if row["value_count"] != copies[gid]:
            return f"other_extras {key} in some copies only"
        if row["nan_sum"]:
            return f"other_extras {key} NaN and {row['value_min']:g}"
        return f"other_extras {key} {row['value_min']:g} and {row['value_max']:g}"

    return np.unique(starts), describe


def _finals_that_differ(table: pa.Table, finished: dict[str, TrialRecord]) -> dict[str, str]:
    """Finished trials whose final regret in the journal is not the cumulative regret of their last
    round in the curves (``table``: trial_id, t, cum_regret), each copy of that round compared. The
    two are the same number (core.engine.round_loop.TrialResult.final_regret is ``cum_regret[-1]``, the
    curve's row of t = horizon), so they agree to the last bits (RELATIVE)."""
    if not finished or table.num_rows == 0:
        return {}
    horizons = pa.array(sorted({record.horizon for record in finished.values()}), pa.int64())
    last = table.filter(pc.is_in(table["t"], value_set=horizons))
    if last.num_rows == 0:
        return {}
    journal = pa.table({"trial_id": pa.array(list(finished), pa.string()),
                        "horizon": pa.array([r.horizon for r in finished.values()], pa.int64()),
                        "final_regret": pa.array([r.final_regret for r in finished.values()], pa.float64())})
    last = last.join(journal, "trial_id", join_type="inner")
    last = last.filter(pc.equal(last["t"], last["horizon"]))
    final, curve = last["final_regret"], last["cum_regret"]
    agree = pc.less_equal(pc.abs(pc.subtract(curve, final)),
                          pc.multiply(pc.max_element_wise(pc.abs(final), 1.0), RELATIVE))
    differ: dict[str, str] = {}
    for row in last.filter(pc.invert(pc.fill_null(agree, False))).to_pylist():
        differ.setdefault(row["trial_id"], f"journal {row['final_regret']!r}, curves {row['cum_regret']!r} "
                                           f"at round {row['t']}")
    return differ


def _check_curves(root: Path, finished: dict[str, TrialRecord], result: Consistency) -> None:
    curves = SweepFolder(root).curves_dir
    files = sorted(p for p in curves.glob("*.parquet") if not p.name.startswith(".")) if curves.is_dir() else []
    rounds: dict[str, tuple[int, int, int, int]] = {}   # trial -> (rows, distinct rounds, first, last)
    finals: dict[str, str] = {}
    if files:
        try:
            table = read_curve_files(files, columns=["trial_id", "t", "cum_regret"])
        except (pa.ArrowException, OSError) as error:   # verify() moved damaged files aside: one put there since
            result.problems.append(f"{curves}: the curve files are not readable ({type(error).__name__}: "
                                   f"{one_line(error)}); `status` moves a damaged file aside when run again")
            return
        result.curve_rows = table.num_rows
        finals = _finals_that_differ(table, finished)
        if table.num_rows:
            grouped = table.group_by("trial_id").aggregate(
                [("t", "count"), ("t", "count_distinct"), ("t", "min"), ("t", "max")])
            for row in grouped.to_pylist():
                rounds[row["trial_id"]] = (row["t_count"], row["t_count_distinct"], row["t_min"], row["t_max"])
    short, outside = {}, {}
    for trial_id, record in finished.items():
        rows, distinct, first, last = rounds.get(trial_id, (0, 0, None, None))
        if distinct and (first < 1 or last > record.horizon):
            outside[trial_id] = f"rounds {first}…{last}, horizon {record.horizon}"
        elif distinct < record.horizon:
            short[trial_id] = f"{distinct} of {record.horizon} rounds"
        else:
            result.complete_curves += 1
    if short:
        result.problems.append(_named_problem(short, "have curve rows for fewer rounds than their horizon",
                                              "; `run` runs them again"))
    if outside:
        result.problems.append(_named_problem(outside, "have curve rows outside rounds 1…horizon"))
    if finals:
        result.problems.append(_named_problem(
            finals, "have a final regret in the journal other than the cumulative regret of their last round in "
                    "the curves", ": the two are one number, so the record or the curve is not this trial's "
                                  "(edited by hand?)"))
    twice = [tid for tid, (rows, distinct, _, _) in rounds.items() if tid in finished and rows > distinct]
    if twice:
        differ = _copies_that_differ(files, twice)
        if differ:
            result.problems.append(_named_problem(
                differ, "have rounds written twice with different values", ": a trial's rerun gives the same "
                "values, so one copy is not this trial's (a file put in curves/ by hand?); readers would keep the "
                "later one"))
        else:
            result.notes.append(f"{len(twice)} finished trial(s) have rounds written twice (a run stopped between its "
                                "curves and its journal, then ran them again); readers keep one copy")
    orphans = {tid: rows for tid, (rows, _, _, _) in rounds.items() if tid not in finished}
    if orphans:
        result.notes.append(f"{sum(orphans.values())} curve rows of {len(orphans)} trial(s) the journal does not "
                            "hold as finished (a run stopped between writes); readers leave them out")
