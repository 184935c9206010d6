"""The Parquet results of a sweep, under ``<results root>/<sweep>/``: the record of truth.

- ``.journal/``: the durable outcome of every trial (:class:`~banditsweep.workers.storage.record.TrialRecord`
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
- ``.runs/``: one small JSON file per run with the ``--set`` overrides it was started with
  (workers.storage.run_notes); ``running.json``: what a run going on now is doing (workers.storage.live_run). Neither
  is part of the record of truth.

:func:`load` reads both tables into pandas, also from stores written before curves carried their
trial's names and before environment settings had columns of their own.

Integrity: every Parquet page has a CRC (verified on read); every curves file and journal segment
has the SHA-256 of its bytes in its name, and every journal line the SHA-256 of its record, which
must also be a valid :class:`TrialRecord`. :meth:`SweepStore.verify` (``status``, ``run``,
``report``) checks them all and moves what fails to ``quarantine/``; the trials of a curves file
moved aside, and of a record moved aside, run again. Files and records written before checksums
are read and checked for everything else, and compaction rewrites them with checksums.

The formats of the three parts are their own modules (workers.storage.journal, workers.storage.curves,
workers.storage.trials_table; file names with checksums: workers.storage.checksums); this module is the store
itself: where each part lives, writing a group of outcomes, the check of every file, reading
(compaction is workers.storage.compaction).

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
import os
import socket
import stat
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from banditsweep.workers.errors import DamagedResultError, InputError, ResultsNotFoundError, SweepBusyError, one_line
from banditsweep.workers.storage.atomic import write_atomically
from banditsweep.workers.storage.checksums import named_digest, visible, write_digested
from banditsweep.workers.storage.compaction import compact, recover
from banditsweep.workers.storage.curves import (CURVE_SCHEMA, CURVE_TRIAL_COLUMNS, MAX_CURVE_FILES, curve_table, curves_damage,
                                                latest_rows, read_curve_files, with_trial_columns, write_order,
                                                write_parquet)
from banditsweep.workers.storage.journal import journal_text, read_records
from banditsweep.workers.storage.paths import FILES, FOLDERS, SweepFolder
from banditsweep.workers.storage.set_aside import set_aside
from banditsweep.workers.storage.record import FAILED, FINISHED, TrialOutcome, TrialRecord
from banditsweep.workers.storage.trials_table import (TRIALS_FORMAT, names_as_categories, trials_table, upgrade_trials,
                                                      with_added_columns, with_name_dictionaries)
from banditsweep.workers.storage.untrusted_files import (open_regular, read_parquet, read_regular,
                                                         refuse_linked_or_misplaced, shown)

__all__ = ["CURVE_SCHEMA", "FAILED", "FINISHED", "MAX_CURVE_FILES", "StoreHealth", "SweepBusyError", "SweepStore",
           "TrialsTable", "load", "named_digest"]


# The store's format: a reader refuses a store of a later format (it would take the later records'
# new fields for damage and set them aside). 1: records carry their code and runtime (code_identity).
STORE_FORMAT = 1


def run_in_progress(root: Path) -> bool:
    """Whether a `run` of the sweep folder ``root`` holds its lock (``SweepStore.exclusive``) now."""
    try:
        handle = open_regular(SweepFolder(root).lock_file)   # a FIFO planted there would block an open for ever
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


@dataclass
class SweepStore(SweepFolder):
    """The store of the sweep folder ``root`` (<results root>/<sweep>; its paths: SweepFolder)."""

    @classmethod
    def for_sweep(cls, results_root: str | Path, sweep: str) -> "SweepStore":
        return cls(Path(results_root).resolve() / sweep)

    @contextmanager
    def exclusive(self):
        """Held by the driver of a ``run`` for its whole length: a second ``run`` of the same sweep on
        the same results folder is refused (two writers would each rebuild the trials table from
        their own records). The lock is the OS's (flock), so it ends with the process holding it."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.check_layout()
        with open_regular(self.lock_file, write=True) as handle:   # never through a link: it is truncated below
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = one_line(handle.read(200).decode(errors="replace")) or "another process"
                raise SweepBusyError(f"{self.root}: another `run` of this sweep is in progress ({holder}); "
                                     f"wait for it to end, or use another --results folder") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {socket.gethostname()}".encode())
            self.mark_format()
            self.remove_unfinished_writes()
            self.describe()
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- writing (only the driver of a run calls these) ------------------------------------------

    def remove_unfinished_writes(self) -> list[Path]:
        """Remove the hidden temporary files of writes that never finished (``.<name>.<random>.tmp``,
        workers.storage.atomic): a write stopped by a file system that turned read-only could not remove
        its own. Called with the run's lock held, so no write of another run is in flight; regular files
        only, found without following links (a planted link leads nowhere else)."""
        removed = []
        for folder, dirs, files in os.walk(self.root, followlinks=False):
            for name in files:
                path = Path(folder) / name
                if name.startswith(".") and name.endswith(".tmp") and stat.S_ISREG(os.lstat(path).st_mode):
                    path.unlink()
                    removed.append(path)
        return removed

    def describe(self) -> None:
        """Write ``README.txt``: what the folder holds and how to read it. Not being Parquet, it also
        makes a read of the whole sweep folder as one dataset fail with its name instead of silently
        reading the curves with the trials' columns (or the other way round)."""
        text = README.format(sweep=self.root.name, root=self.root, results=self.root.parent)
        path = self.readme_file
        try:
            current = read_regular(path, 64 << 10)
        except OSError:   # missing, or not a regular file of a sane size: replaced
            current = None
        if current != text.encode():
            write_atomically(path, text)

    def check_layout(self) -> None:
        """The sweep folder's own entries are what the project made them (no link, a folder where a
        folder belongs), and its format one this reader knows: refused with :class:`InputError`
        naming the entry otherwise, before anything is read or written through it."""
        refuse_linked_or_misplaced(self.root, FOLDERS, FILES)
        self.check_format()

    def check_format(self) -> int:
        """The store's format (0: written before stores said theirs); a later one than this reader's
        :data:`STORE_FORMAT`, or a format file this project did not write, is refused."""
        path = self.format_file
        if not os.path.lexists(path):
            return 0
        try:
            values = json.loads(read_regular(path, 4096))
            found = values["store_format"]
            if isinstance(found, bool) or not isinstance(found, int) or found < 0:
                raise ValueError(found)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(f"{shown(path)}: not a store-format file banditsweep writes ({one_line(error)[:80]}); "
                             f"it says which banditsweep can read the results folder: restore it, or remove it "
                             f"if the folder was written by this version") from None
        if found > STORE_FORMAT:
            writer = values.get("written_by") if isinstance(values.get("written_by"), str) else "a later banditsweep"
            raise InputError(f"{shown(self.root)}: the results were written in store format {found} ({shown(writer)}); "
                             f"this banditsweep reads formats up to {STORE_FORMAT}: upgrade banditsweep to read or "
                             f"extend them, or give another --results folder")
        return found

    def mark_format(self) -> None:
        """Say the store's format (before a run writes anything), where it does not say it yet."""
        if self.check_format() < STORE_FORMAT:
            from banditsweep import __version__

            write_atomically(self.format_file, json.dumps(
                {"store_format": STORE_FORMAT, "written_by": f"banditsweep {__version__}"}) + "\n")

    def write_outcomes(self, outcomes: list[TrialOutcome]) -> None:
        """Make a group of trial outcomes durable: one curves part, then one journal segment."""
        if not outcomes:
            return
        finished = [o for o in outcomes if o.arrays is not None]
        if finished:
            table = curve_table(finished)
            write_digested(self.curves_dir, "part-", ".parquet", lambda tmp: write_parquet(table, tmp))
        text = journal_text(o.record for o in outcomes)
        write_digested(self.journal_dir, "s", ".jsonl", lambda tmp: Path(tmp).write_text(text))

    def write_trials_table(self, records: list[TrialRecord]) -> None:
        # A view of the journal under a fixed name (readers read trials/), so no digest in its name:
        # its pages have CRCs and `status` compares its rows with the journal.
        table = with_name_dictionaries(trials_table(records))
        write_atomically(self.trials_file, lambda tmp: write_parquet(table, tmp))

    def compact(self) -> None:
        """Merge the curve parts into one file and the journal segments into one segment
        (workers.storage.compaction, which says how a crash in between is finished)."""
        compact(self)

    def recover(self) -> list[str]:
        """Finish compactions a crash interrupted; the lines of untrusted manifests moved aside."""
        return recover(self)

    def segments(self) -> list[Path]:
        return sorted(visible(self.journal_dir, "s*.jsonl"))

    def journal(self) -> dict[str, TrialRecord]:
        """Every trial's latest valid record: per-trial files of earlier versions first, then the
        segments in write order. Records that are not valid are left out (``verify`` names them)."""
        records: dict[str, TrialRecord] = {}
        for path in [*sorted(visible(self.journal_dir, "*.json")), *self.segments()]:
            for record in read_records(path).records:
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
        self.check_layout()
        health = StoreHealth()
        if not run_in_progress(self.root):   # a run's own compaction may be between its steps
            health.quarantined += self.recover()
        planned = set(planned)
        for path in [*visible(self.journal_dir, "*.json"), *self.segments()]:
            read = read_records(path, planned)
            if read.damage:
                if read.records:
                    text = journal_text(read.records)
                    write_digested(self.journal_dir, "s", ".jsonl", lambda tmp: Path(tmp).write_text(text))
                health.quarantined.append(self.quarantine(path, read.damage))
        rows: dict[str, int] = {}
        for path in visible(self.curves_dir, "*.parquet"):
            damage = curves_damage(path, rows)
            if damage:
                health.quarantined.append(self.quarantine(path, damage))
        for trial_id, record in self.journal().items():
            if record.status == FINISHED and rows.get(trial_id, 0) < record.horizon:
                health.missing_results.add(trial_id)
        return health

    def quarantine(self, path: Path, why: str) -> str:
        """Move ``path`` to ``quarantine/`` (never over a file moved there before); the line saying so."""
        target = set_aside(path, self.quarantine_dir, f"{path.parent.name.lstrip('.')}-{path.name}")
        return f"{shown(path)} ({why}) moved to {shown(target)}"

    def read_trials(self) -> pd.DataFrame:
        """The trials table (one row per finished or failed trial), in the current layout also when
        it was written by an earlier version; rebuilt from the journal when it is not written yet
        or cannot be read (a page that fails its CRC: ``status`` names it, ``run`` rewrites it)."""
        path = self.trials_file
        try:
            table = read_parquet(path)
        except (pa.ArrowException, OSError):
            return names_as_categories(trials_table(list(self.journal().values())).to_pandas())
        frame = table.to_pandas()
        if (table.schema.metadata or {}).get(b"banditsweep.trials") != TRIALS_FORMAT[b"banditsweep.trials"]:
            frame = upgrade_trials(frame)
        return names_as_categories(with_added_columns(frame))

    def read_curves(self, trial_ids: list[str] | None = None, columns: list[str] | None = None,
                    rounds: Iterable[int] | tuple[int, int] | None = None) -> pd.DataFrame:
        """Curve rows (of ``trial_ids``, else of every trial), one copy per trial and round, with
        their trial's names (taken from the journal for files of an earlier layout). ``columns``: only
        these (with ``trial_id`` and ``t``); ``rounds``: only these rounds t, or a ``(first, last)``
        range: filtered as the files are read, so the rest is never in memory. A page that fails its
        CRC raises :class:`DamagedResultError` naming the file."""
        files = sorted(visible(self.curves_dir, "*.parquet"), key=write_order)
        read = None if columns is None else list(dict.fromkeys(["trial_id", "t", *CURVE_TRIAL_COLUMNS, *columns]))
        if not files:
            empty = CURVE_SCHEMA.empty_table()
            return (empty if read is None else empty.select(read)).to_pandas()
        wanted = None if trial_ids is None else ds.field("trial_id").isin(list(trial_ids))
        if isinstance(rounds, tuple):
            first, last = rounds
            within = (ds.field("t") >= int(first)) & (ds.field("t") <= int(last))
        else:
            within = None if rounds is None else ds.field("t").isin([int(t) for t in rounds])
        if within is not None:
            wanted = within if wanted is None else wanted & within
        try:
            table = read_curve_files(files, columns=read, filter=wanted)
        except (pa.ArrowException, OSError) as error:
            damaged = next((p for p in files if curves_damage(p)), None)
            raise DamagedResultError(
                f"{damaged or self.curves_dir}: damaged curves ({type(error).__name__}: {one_line(error)}); "
                "`banditsweep status` moves it aside and `banditsweep run` runs its trials again") from None
        table = with_trial_columns(latest_rows(table, None), self.journal)
        return table.to_pandas() if columns is None else table.select(read).to_pandas()


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
`banditsweep report`; quarantine/ the damaged files a check moved aside, if any; .runs/ notes each
run's --set overrides; running.json what a run going on now is doing (`banditsweep status` shows it). The name of each
file in curves/ and .journal/ ends with the SHA-256 of its bytes (`sha256sum` shows it); every
Parquet page has a CRC (pyarrow checks them with page_checksum_verification=True); `banditsweep
status` checks both.
"""


def load(results_root: str | os.PathLike, sweep: str | None = None, *, algorithms: Iterable[str] | None = None,
         environments: Iterable[str] | None = None, rounds: Iterable[int] | tuple[int, int] | None = None,
         columns: Iterable[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The results of a sweep as pandas DataFrames ``(trials, curves)``.

    ``trials``: one row per finished or failed trial (``status``), with ``final_regret``,
    ``seconds_per_round``, ``started_at`` / ``finished_at`` (UTC timestamps), every parameter as a
    column, every environment setting as ``env_<name>`` and every diagnostic as ``diag_<name>``.
    ``curves``: one row per finished trial per round, with its trial's ``algorithm``, ``label``,
    ``environment`` and ``seed``; ``algorithm``, ``label`` and ``environment`` are categoricals in
    both tables. ``results_root`` is the folder that holds the sweep folders (``~`` is expanded);
    without ``sweep`` it is the sweep folder itself.

    A part, read without holding the rest: ``algorithms`` (labels or registry names), ``environments``
    (display names such as ``classification:mushroom``, or the part after the kind, ``mushroom``),
    ``rounds`` (the rounds t to keep, or a ``(first, last)`` range) and ``columns`` (the curve columns
    beyond ``trial_id``, ``t`` and the names)."""
    root = Path(results_root).expanduser()
    folder = root / sweep if sweep is not None else root
    store = SweepStore(folder.resolve())
    store.check_format()
    if not any(path.is_dir() for path in (store.trials_dir, store.curves_dir, store.journal_dir)):
        here = sorted(p.name for p in root.iterdir() if SweepFolder(p).trials_dir.is_dir()) if root.is_dir() else []
        raise ResultsNotFoundError(f"{folder}: no sweep results here" + (
            f" ({root} holds the sweeps {', '.join(here)})" if sweep is not None and here else ""))
    trials = store.read_trials()
    trials = _only(trials, "algorithms", algorithms, ("label", "algorithm"), lambda v: [v]) if algorithms is not None \
        else trials
    trials = _only(trials, "environments", environments, ("environment",),
                   lambda v: [v, v.split(":", 1)[-1]]) if environments is not None else trials
    if columns is not None:
        columns = list(columns)
        unknown = [name for name in columns if name not in CURVE_SCHEMA.names]
        if unknown:
            raise InputError(f"columns: {unknown[0]!r} is not a curves column; allowed: {', '.join(CURVE_SCHEMA.names)}")
    finished = trials.loc[trials["status"] == FINISHED, "trial_id"].tolist() if len(trials) else []
    curves = store.read_curves(finished, columns=columns, rounds=rounds)
    return trials.reset_index(drop=True), curves.reset_index(drop=True)


def _only(trials: pd.DataFrame, option: str, wanted: Iterable[str], fields: tuple[str, ...], names) -> pd.DataFrame:
    """The rows whose ``fields`` (or a form of them ``names`` gives) are among ``wanted``; a value that
    names no row is an error naming what the sweep holds (a typo should not load nothing)."""
    wanted = [wanted] if isinstance(wanted, str) else list(wanted)
    values = {field: trials[field].astype(str) for field in fields if field in trials.columns}
    keep = pd.Series(False, index=trials.index)
    for value in wanted:
        hits = pd.Series(False, index=trials.index)
        for column in values.values():
            hits |= column.map(lambda text, value=value: value in names(text))
        if not hits.any():
            held = sorted({text for column in values.values() for text in column})
            raise InputError(f"{option}: {value!r} names no trial of this sweep; it holds {', '.join(held)}")
        keep |= hits
    return trials[keep]


@dataclass
class StoreHealth:
    quarantined: list[str] = field(default_factory=list)   # one line per damaged file moved aside
    missing_results: set[str] = field(default_factory=set)  # finished trials whose curves are gone

    @property
    def ok(self) -> bool:
        return not self.quarantined and not self.missing_results


class TrialsTable:
    """``trials.parquet`` rebuilt from the journal at a bounded rate: at most every ``min_interval``
    seconds and never more than ``max_share`` of the time (a rebuild costs more as the sweep grows),
    and always on :meth:`flush`. It holds no record: each rebuild reads the journal again (as a resume
    does), so a driver's memory does not grow with the trials it has made durable."""

    def __init__(self, store: SweepStore, min_interval: float = 2.0, max_share: float = 0.05):
        self.store = store
        self.min_interval, self.max_share = min_interval, max_share
        self.dirty = False
        self.written_at = 0.0
        self.cost = 0.0

    def added(self) -> None:
        """Records were added to the journal: rebuild if it is time."""
        self.dirty = True
        if time.monotonic() - self.written_at >= max(self.min_interval, self.cost / self.max_share):
            self.flush()

    def flush(self) -> None:
        started = time.monotonic()
        records = self.store.journal()
        if records:
            self.store.write_trials_table(list(records.values()))
        self.dirty = False
        self.written_at = time.monotonic()
        self.cost = self.written_at - started
