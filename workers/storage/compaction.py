"""Compaction of a results folder: the curve parts merged into one file (a sweep of more than
:data:`MAX_CURVE_FILES` into one whole) and the journal segments into one segment, at the end of a
run.

Each merge writes the merged file under a hidden name, then a manifest naming the parts it replaces
(``.<merged>.replaces``), removes the parts, then shows the merged file; a crash in between is
finished by :func:`recover` (the next ``run`` or ``status``). A manifest found on disk is read as
hostile data: trusted only when every name is a result file of its own folder and its merged file
is whole and holds every trial of the parts it replaces; otherwise it is quarantined and nothing it
names is touched (a planted list would delete any file, the journal included).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.atomic import write_atomically
from banditsweep.workers.storage.checksums import named_digest, visible, write_digested
from banditsweep.workers.storage.curves import (CURVE_SCHEMA, MAX_CURVE_FILES, curves_damage, has_trial_columns,
                                                latest_rows, only_of, with_trial_columns, write_order,
                                                write_parquet, write_parts_parquet)
from banditsweep.workers.storage.journal import journal_text, read_records
from banditsweep.workers.storage.paths import CURVES
from banditsweep.workers.storage.record import FINISHED, TrialRecord
from banditsweep.workers.storage.untrusted_files import not_regular, read_parquet, read_regular, shown

if TYPE_CHECKING:
    from banditsweep.workers.storage.store import SweepStore


def compact(store: "SweepStore") -> None:
    """Merge the curve parts into one file and the journal segments into one segment. A curve
    file joins the merge also when it shares a trial with another file (the trial ran again
    after its journal record was lost), holds rows of trials the journal does not hold as
    finished, lacks its trials' names (an earlier layout) or a checksum (written before files
    had them): after a compaction every finished trial's rows are in the folder once, so a
    plain ``pyarrow.dataset`` read of ``curves/`` gives one copy. A sweep with more than
    MAX_CURVE_FILES curve files is merged whole. Damaged files are left where they are, and
    what they would join is not merged: ``verify`` moves them aside first."""
    store.recover()
    segments = [*sorted(visible(store.journal_dir, "*.json")), *store.segments()]
    read = [read_records(path) for path in segments]
    if any(journal_file.damage for journal_file in read):
        return   # its records are not all known: nothing may be dropped or merged for want of them
    records = {record.trial_id: record for journal_file in read for record in journal_file.records}
    _compact_curves(store, records)
    # Arrow's allocator keeps what a large merge freed; a driver that goes on running gives it back.
    pa.default_memory_pool().release_unused()
    if len(segments) > 1 or any(named_digest(path) is None for path in segments):
        _replace(store, segments, store.journal_dir, "s", ".jsonl",
                      lambda tmp: Path(tmp).write_text(journal_text(records.values())))


def _compact_curves(store: "SweepStore", records: dict[str, TrialRecord]) -> None:
    files = sorted(visible(store.curves_dir, "*.parquet"), key=write_order)
    if not files:
        return
    done = {tid for tid, r in records.items() if r.status == FINISHED}
    ids: dict[Path, set[str]] = {}
    for path in files:
        try:
            ids[path] = set(pc.unique(read_parquet(path, columns=["trial_id"])["trial_id"]).to_pylist())
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
                 or not has_trial_columns(p) or ids[p] - done or any(seen[t] > 1 for t in ids[p])]
    rewrite = [p for p in merge if named_digest(p) is None or not has_trial_columns(p) or ids[p] - done
               or any(seen[t] > 1 for t in ids[p])]
    if len(merge) < 2 and not rewrite:
        return
    if any(curves_damage(p) for p in merge):
        return   # a damaged file merged would come out with a valid checksum: verify() first
    if any(seen[t] > 1 for p in merge for t in ids[p]):   # a trial's rows twice: the last write wins
        table = latest_rows(pa.concat_tables([read_parquet(p, schema=CURVE_SCHEMA) for p in merge]), records)
        table = with_trial_columns(table, records)
        _replace(store, merge, store.curves_dir, "c-", ".parquet",
                      lambda tmp: write_parquet(table, tmp, row_group_size=1 << 20))
        return
    # Else file by file, never all of them in memory (a sweep of 10^5 trials has millions of rows).
    parts = (with_trial_columns(_finished_rows(p, ids[p], done), records) for p in merge)
    _replace(store, merge, store.curves_dir, "c-", ".parquet", lambda tmp: write_parts_parquet(parts, tmp, CURVE_SCHEMA))


def _finished_rows(path: Path, trial_ids: set[str], done: set[str]) -> pa.Table:
    """The rows of the curves file ``path`` (of ``trial_ids``) whose trials are ``done``."""
    table = read_parquet(path, schema=CURVE_SCHEMA)
    if trial_ids <= done:
        return table
    return only_of(table, pa.array(sorted(trial_ids & done), pa.string()))


def _replace(store: "SweepStore", parts: list[Path], directory: Path, prefix: str, suffix: str,
         write: Callable[[str], None]) -> None:
    """Write the merged file hidden, note which parts it replaces, remove them, then show it."""
    target = write_digested(directory, prefix, suffix, write, hidden=True)
    manifest = target.with_name("." + target.name + ".replaces")
    write_atomically(manifest, "\n".join(p.name for p in parts))
    finish_replace(store, manifest)


def finish_replace(store: "SweepStore", manifest: Path, found: bool = False) -> str:
    """Remove the parts ``manifest`` names and show the merged file it goes with; "" when done,
    else (the manifest not one this project wrote) the line saying where it was moved aside.
    A part is only ever a result file of the manifest's own folder, named as the project names
    them: a name with a separator, a hidden or unknown one, or one that is not a regular file
    makes the whole manifest suspect, and nothing it names is touched. A manifest ``found`` on
    disk (not the one just written) also has its merged file checked to hold every trial of its
    parts."""
    hidden = manifest.with_name(manifest.name[: -len(".replaces")])
    suffixes = (".parquet",) if manifest.parent.name == CURVES else (".jsonl", ".json")
    try:
        names = read_regular(manifest, 1 << 20).decode().split("\n")
        problem = not_regular(hidden) and f"its merged file {shown(hidden.name)} is {not_regular(hidden)}"
        for name in names:
            if problem:
                break
            if (not name or name.startswith(".") or os.sep in name or (os.altsep and os.altsep in name)
                    or not name.endswith(suffixes) or not name.isprintable()):
                problem = f"it names {shown(name)!r}, not a result file of {manifest.parent.name}/"
            elif not_regular(manifest.parent / name) not in ("", "missing"):
                problem = f"it names {shown(name)}, which is {not_regular(manifest.parent / name)}"
        if found and not problem:
            problem = _merge_problem(store, hidden, [manifest.parent / name for name in names])
    except (OSError, UnicodeDecodeError, pa.ArrowException) as error:
        problem = f"not readable: {one_line(error)}"
    if problem:
        return store.quarantine(manifest, f"a compaction's list of files to remove that cannot be trusted: "
                                          f"{problem}; nothing it names was removed")
    for name in names:
        (manifest.parent / name).unlink(missing_ok=True)
    os.replace(hidden, manifest.parent / hidden.name[1:])
    manifest.unlink()
    return ""


def _merge_problem(store: "SweepStore", merged: Path, parts: list[Path]) -> str:
    """"" when ``merged`` is whole and holds every trial of the ``parts`` still there (as the
    merge a compaction wrote does: every record of a journal's parts; the rows of each trial the
    journal holds as finished of a curves file's parts); else what is wrong. A planted list
    naming the real journal beside an empty file would otherwise have the record of truth removed."""
    if merged.suffix == ".parquet":
        damage = curves_damage(merged)
        done = {trial_id for trial_id, record in store.journal().items() if record.status == FINISHED}
        ids = lambda path: done & set(read_parquet(path, columns=["trial_id"])["trial_id"].to_pylist())  # noqa: E731
    else:
        read = read_records(merged)
        damage = read.damage
        ids = lambda path: {record.trial_id for record in read_records(path).records}  # noqa: E731
    if damage:
        return f"its merged file {shown(merged.name)} is damaged ({damage})"
    held = ids(merged)
    for part in parts:
        if part.exists() and not ids(part) <= held:
            return f"its merged file {shown(merged.name)} lacks trials of {shown(part.name)}"
    return ""


def recover(store: "SweepStore") -> list[str]:
    """Finish compactions a crash interrupted (their merged file is complete: only the removal
    of the parts and the final rename may be missing); the lines of manifests moved aside."""
    moved = []
    for directory in (store.curves_dir, store.journal_dir):
        if directory.is_dir():
            for manifest in directory.glob(".*.replaces"):
                moved.append(finish_replace(store, manifest, found=True))
    return [line for line in moved if line]

# -- reading -------------------------------------------------------------------------------
