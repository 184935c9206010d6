"""Result files named by the SHA-256 of their bytes (curves files and journal segments): written
atomically (workers.storage.atomic) under a name that sorts in write order and ends with the checksum, so
that a damaged file is told from a whole one by its name alone; files still hidden (temporary, or
not yet complete) are left out of every listing.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from banditsweep.workers.storage.atomic import move_into_place, written_temporary
from banditsweep.workers.storage.untrusted_files import open_regular

_DIGEST = re.compile(r"-([0-9a-f]{64})$")

def named_digest(path: Path) -> str | None:
    """The SHA-256 a file's name gives for its bytes (None for files written before)."""
    match = _DIGEST.search(path.stem)
    return match.group(1) if match else None


def file_digest(path: Path | str) -> str:
    with open_regular(path) as handle:   # a FIFO or a device planted under a result file's name is refused
        return handle_digest(handle)


def handle_digest(handle: BinaryIO) -> str:
    """The SHA-256 of what is left to read in ``handle``."""
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def write_digested(directory: Path, prefix: str, suffix: str, write: Callable[[str], None],
                    hidden: bool = False) -> Path:
    """Atomically (workers.storage.atomic), into a new file named by its write time and the SHA-256 of its
    bytes; returns its (visible) path."""
    tmp = written_temporary(directory, f".tmp.{prefix}", write)
    name = f"{unique_name(prefix, '')}-{file_digest(tmp)}{suffix}"
    move_into_place(tmp, directory / (("." if hidden else "") + name))
    return directory / name


def visible(directory: Path, pattern: str) -> list[Path]:
    """Files matching ``pattern``, without hidden ones (temporary or not yet complete; pathlib's glob
    would match them)."""
    return [p for p in directory.glob(pattern) if not p.name.startswith(".")] if directory.is_dir() else []


def unique_name(prefix: str, suffix: str) -> str:
    """Names that sort in write order (nanoseconds first) and never collide between processes."""
    return f"{prefix}{time.time_ns():020d}-{os.getpid()}{suffix}"
