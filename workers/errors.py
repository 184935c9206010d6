"""Why a run cannot go on, as the CLI reports it (exit codes in sweeps/cli/commands/__init__.py), and an
error's text on one line. Kept free of heavy imports: the CLI maps them before anything runs."""


class InputError(ValueError):
    """Bad input found before anything runs: an argument, or what it names (a Ray address, a
    tracking URI, a folder), said in one line naming the argument."""


class ResultsNotFoundError(InputError, FileNotFoundError):
    """A results folder named by the user holds no sweep results: bad input (exit 2), and still the
    ``FileNotFoundError`` that code reading folders expects."""


class RayUnreachableError(ConnectionError):
    """``--address`` names a Ray head that does not answer."""


class ResourceRequestError(ValueError):
    """The spec asks for more per trial than the (fixed-size, embedded) Ray can ever give."""


class StoreWriteError(OSError):
    """The results folder cannot be written (disk full, read-only, permissions): the run stops, and
    no trial is recorded as failed for it."""


class DamagedResultError(RuntimeError):
    """A result file read back is damaged (a checksum that does not match, unreadable Parquet):
    ``status`` or ``run`` moves it aside and runs its trials again."""


class SweepBusyError(RuntimeError):
    """Another ``run`` of the same sweep holds its results folder."""


def one_line(error: BaseException | str, limit: int = 200) -> str:
    """An error's text on one line of printable characters, at most ``limit`` long (Parquet's
    messages may span lines and quote the damaged bytes)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in str(error)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
