"""Reading a sweep folder's files as data that may be hostile.

A results folder can come from someone else (an archive, a shared disk), and anything in it may have
been put there by hand: a link where a file was, a FIFO that blocks the reader for ever, a device
that never ends, a sparse file of 20 GB, a name holding a newline or a terminal's escape codes. Every
file the project reads back goes through here: only a regular file is opened (never through a link,
never blocking), what is checked is the descriptor then read, no more than a stated number of bytes
is read (of a Parquet file, the pages its footer names), and its name is shown escaped.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from banditsweep.workers.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# The longest line a journal record may take: records are a few KB (a domain's settings included).
MAX_LINE_BYTES = 1 << 20


class NotARegularFile(OSError):
    """A path of the folder that is a link, a FIFO, a device or a folder where a file belongs."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a regular file" if stat.S_ISREG(mode) else "not a file"


def not_regular(path: Path) -> str:
    """"" when ``path`` is a regular file (not through a link); else what it is."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    return "" if stat.S_ISREG(mode) else kind_of(mode)


def open_regular(path: Path | str, write: bool = False, follow_links: bool = False) -> BinaryIO:
    """``path`` opened for reading (or reading and writing, created if missing) when it is a regular
    file: never through a link (O_NOFOLLOW; ``follow_links`` for a file the user named, which may be
    a link to it), never waiting on a FIFO (O_NONBLOCK until checked). What is checked is the
    descriptor that is then read (fstat), so the file cannot be swapped between the two."""
    flags = (os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
             | ((os.O_RDWR | os.O_CREAT) if write else os.O_RDONLY))
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise NotARegularFile(errno.ELOOP, "a symbolic link, not a file", str(path)) from None
        if error.errno == errno.EISDIR:
            raise NotARegularFile(errno.EISDIR, "a folder, not a file", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotARegularFile(errno.EINVAL, f"{kind_of(mode)}, not a file", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "r+b" if write else "rb")


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused (``NotARegularFile``) when it holds more than
    ``limit`` (checked as read: a file's size can lie, or change)."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise NotARegularFile(errno.EFBIG, f"larger than {limit:,} bytes", str(path))
    return data


def json_value(text: str | bytes) -> Any:
    """JSON read as data: NaN and Infinity, which JSON does not have (Python's reader takes them),
    refused as a ValueError; a nesting too deep for the reader is a RecursionError."""
    return json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def read_head(path: Path | str, size: int, follow_links: bool = False) -> bytes:
    """The first ``size`` bytes (or fewer) of the regular file ``path`` (a file's header)."""
    with open_regular(path, follow_links=follow_links) as handle:
        return handle.read(size)


# A Parquet file is not read whole and needs no bound of its own: its reader reads the footer at
# the end and then the pages the footer names, each inside the file's size (a curves file of a large
# sweep holds gigabytes). What must not be read is a link, a FIFO or a device: hence one descriptor.
@contextmanager
def parquet_file(path: Path | str, **options) -> Iterator["pq.ParquetFile"]:
    """The Parquet file ``path`` (a regular file, opened once), every page checked against its CRC."""
    import pyarrow.parquet as pq

    with open_regular(path) as handle:
        yield pq.ParquetFile(handle, page_checksum_verification=True, **options)


def read_parquet(path: Path | str, **options) -> "pa.Table":
    """The table of the Parquet file ``path`` (a regular file, opened once; ``options`` as
    ``pyarrow.parquet.read_table``'s: columns, schema, filters), every page checked against its CRC."""
    import pyarrow.parquet as pq

    with open_regular(path) as handle:
        return pq.read_table(handle, page_checksum_verification=True, **options)


def shown(path: Path | str) -> str:
    """A path as printed: a character that is not printable (a newline, a terminal escape) escaped,
    so that a file's name cannot forge a line of the output or colour the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))


def refuse_linked_or_misplaced(root: Path, folders: tuple[str, ...], files: tuple[str, ...]) -> None:
    """A sweep folder's own entries must be what they are: ``folders`` folders and ``files``
    regular files, none a link (a link would carry the sweep's writes, a quarantine or a rewrite,
    out of its folder). Missing ones are fine. Raises :class:`InputError` naming the entry."""
    for name, want in [*((n, "folder") for n in folders), *((n, "file") for n in files)]:
        path = root / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise InputError(f"{shown(path)} is a link to {shown(os.readlink(path))}: a sweep's files are written only "
                             f"inside its folder; put the {want} itself there (or move the link away)")
        ok = stat.S_ISDIR(mode) if want == "folder" else stat.S_ISREG(mode)
        if not ok:
            raise InputError(f"{shown(path)} is {kind_of(mode)}; the sweep writes a {want} there: "
                             f"move it away and run the command again")
