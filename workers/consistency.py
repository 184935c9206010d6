"""Do a sweep's result files agree with each other? The journal (the record of truth), the trials
table rebuilt from it (``trials/trials.parquet``) and the curves (one row per finished trial and
round ``1 … horizon``). Read by ``banditsweep status``; nothing is written here.

What is allowed, because a run that stopped between two writes leaves it and readers handle it:
curve rows of trials the journal does not hold as finished (they run again; readers drop those
rows), and a round written twice (readers keep the later copy). While a run is in progress its
trials table trails the journal by design (it is rebuilt at a bounded rate and at the end).
"""

from __future__ import annotations

import fcntl
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from banditsweep.workers.curves import CURVE_SCHEMA
from banditsweep.workers.errors import one_line
from banditsweep.workers.record import FINISHED, TrialRecord
from banditsweep.workers.trials_table import TRIAL_COLUMNS, trials_table

# Trial ids named in one line at most (a count says how many more).
SHOWN = 3


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


def run_in_progress(root: Path) -> bool:
    """Whether a `run` of this sweep folder holds its lock (``SweepStore.exclusive``) now."""
    try:
        handle = open(root / ".run.lock")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


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
    path = root / "trials" / "trials.parquet"
    if not path.exists():
        if records and not result.running:
            result.problems.append(f"{path} is missing but the journal holds {len(records)} trials; "
                                   "`run` rebuilds it")
        return
    try:
        # Every page against its CRC (files written before have none: nothing to check there).
        table = pq.read_table(path, page_checksum_verification=True)
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


def _copies_that_differ(files: list[Path], trial_ids: list[str]) -> dict[str, str]:
    """Of trials whose rounds are in the curves twice, those whose copies disagree on the
    cumulative regret of a round (a rerun of a trial reproduces it: same content, same seed)."""
    table = ds.dataset([str(p) for p in files], schema=CURVE_SCHEMA, format="parquet").to_table(
        columns=["trial_id", "t", "cum_regret"], filter=ds.field("trial_id").isin(trial_ids))
    spread = table.group_by(["trial_id", "t"]).aggregate([("cum_regret", "min"), ("cum_regret", "max")])
    differ: dict[str, str] = {}
    for row in spread.to_pylist():
        low, high = row["cum_regret_min"], row["cum_regret_max"]
        if low is not None and abs(high - low) > 1e-9 * max(1.0, abs(high)) and row["trial_id"] not in differ:
            differ[row["trial_id"]] = f"round {row['t']}: {low:g} and {high:g}"
    return differ


def _check_curves(root: Path, finished: dict[str, TrialRecord], result: Consistency) -> None:
    curves = root / "curves"
    files = sorted(p for p in curves.glob("*.parquet") if not p.name.startswith(".")) if curves.is_dir() else []
    rounds: dict[str, tuple[int, int, int, int]] = {}   # trial -> (rows, distinct rounds, first, last)
    if files:
        table = ds.dataset([str(p) for p in files], schema=CURVE_SCHEMA, format="parquet").to_table(columns=["trial_id", "t"])
        result.curve_rows = table.num_rows
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
        example = next(iter(sorted(short)))
        result.problems.append(
            f"{len(short)} finished trial(s) have curve rows for fewer rounds than their horizon "
            f"({_named(short)}; {example}: {short[example]}); `run` runs them again")
    if outside:
        example = next(iter(sorted(outside)))
        result.problems.append(
            f"{len(outside)} finished trial(s) have curve rows outside rounds 1…horizon "
            f"({_named(outside)}; {example}: {outside[example]})")
    twice = [tid for tid, (rows, distinct, _, _) in rounds.items() if tid in finished and rows > distinct]
    if twice:
        differ = _copies_that_differ(files, twice)
        if differ:
            example = next(iter(sorted(differ)))
            result.problems.append(
                f"{len(differ)} finished trial(s) have rounds written twice with different values "
                f"({_named(differ)}; {example}: {differ[example]}): a trial's rerun gives the same regret, so one "
                "copy is not this trial's (a file put in curves/ by hand?); readers would keep the later one")
        else:
            result.notes.append(f"{len(twice)} finished trial(s) have rounds written twice (a run stopped between its "
                                "curves and its journal, then ran them again); readers keep one copy")
    orphans = {tid: rows for tid, (rows, _, _, _) in rounds.items() if tid not in finished}
    if orphans:
        result.notes.append(f"{sum(orphans.values())} curve rows of {len(orphans)} trial(s) the journal does not "
                            "hold as finished (a run stopped between writes); readers leave them out")
