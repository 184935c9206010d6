"""Whether a folder the user names can hold what a command writes there: a directory (or a path that
can be made one) that this process may write to. Checked before anything is created; the message
names the argument the folder came from."""

from __future__ import annotations

import os
from pathlib import Path

from banditsweep.workers.errors import InputError


def first_existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def why_not_writable(directory: Path) -> str:
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    except OSError:
        pass
    return "no write permission, or an immutable folder"


def check_directory(source: str, path: Path, writing: bool, what: str) -> None:
    """``path`` is a directory, or can be made one (its first existing ancestor is a directory we
    may write to); nothing is created here. ``source`` names the argument, ``what`` the folder."""
    existing = first_existing(path)
    shown = str(path) if existing == path else f"{path}: {existing}"
    if not os.path.isdir(existing):
        kind = "a broken symbolic link" if os.path.islink(existing) else "a file"
        raise InputError(f"{source}: {shown} is {kind}, not a directory; {what} must be a directory "
                         f"(or a path that can be created)")
    if writing and not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{source}: {shown} is not writable ({why_not_writable(existing)}); "
                         f"{what} must be a directory you can write to")
