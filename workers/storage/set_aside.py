"""Setting a file aside: what cannot be trusted or used (a damaged result file, an unusable
checkpoint, an MLflow store whose creation was cut short) is moved, never deleted, under a name no
earlier one holds, with what belongs to it and a note of why where the caller gives one."""

from __future__ import annotations

import os
from pathlib import Path

from banditsweep.workers.storage.atomic import write_atomically

NOTE_SUFFIX = ".reason.txt"


def set_aside(path: Path | str, folder: Path | str, name: str, note: str | None = None,
              companions: tuple[str, ...] = ()) -> Path:
    """Move ``path`` (a file or a folder; a link is moved, not followed) into ``folder`` (made if
    missing) as ``name``, or ``name.1``, ``name.2``, ... where an earlier one was set aside: nothing
    set aside is ever replaced. The files beside ``path`` named by it and one of ``companions``
    (SQLite's journal of a database) go with it, and ``note`` beside it as ``<name>.reason.txt``.
    Returns where it went; an ``OSError`` (a folder that takes nothing) is the caller's to judge."""
    path, folder = Path(path), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target, copy = folder / name, 1
    while os.path.lexists(target):
        target, copy = folder / f"{name}.{copy}", copy + 1
    os.replace(path, target)
    for suffix in companions:
        if os.path.lexists(f"{path}{suffix}"):
            os.replace(f"{path}{suffix}", f"{target}{suffix}")
    if note is not None:
        # Atomically: a link planted under the note's name is replaced, never written through.
        write_atomically(target.with_name(target.name + NOTE_SUFFIX), note)
    return target
