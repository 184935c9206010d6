"""Files that appear whole or not at all, the one way every result, checkpoint and dataset file is
written.

The content goes into a hidden temporary file in the target's folder (its name starts with ``.``,
which Parquet readers and the store's listings skip), is fsynced, gets the mode a new file gets
under the process's umask (``mkstemp`` makes 0600 files whatever the umask says) and is renamed
into place. A crash at any point leaves the previous file (or none) and at most a hidden temporary
file, never a partial one under the real name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

# What to write: the bytes or text themselves, or a function that writes the file at the path it
# is given (pyarrow's writers take a path).
Content = bytes | str | Callable[[str], None]


def _file_mode() -> int:
    """The mode a new file gets under the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


@contextmanager
def _removed_on_failure(tmp: str):
    """Whatever fails inside takes the temporary file with it."""
    try:
        yield
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass   # never made, or a folder that takes nothing now: the error being raised says which
        raise


def written_temporary(directory: Path, prefix: str, content: Content) -> str:
    """A hidden temporary file in ``directory`` (made if missing) holding ``content``, fsynced and
    given the results' mode; removed again if anything fails. The caller renames it into place
    (:func:`move_into_place`): the store first names a file by the checksum of its bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    os.close(fd)
    with _removed_on_failure(tmp):
        if callable(content):
            content(tmp)
        else:
            Path(tmp).write_bytes(content.encode() if isinstance(content, str) else content)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
    return tmp


def move_into_place(tmp: str, path: Path) -> Path:
    """Rename a finished temporary file to ``path`` (replacing what was there), or remove it."""
    with _removed_on_failure(tmp):
        os.replace(tmp, path)
    return path


def write_atomically(path: Path, content: Content) -> None:
    """Write ``content`` to ``path``: a reader sees the previous file or the whole new one."""
    path = Path(path)
    move_into_place(written_temporary(path.parent, f".{path.name}.", content), path)
