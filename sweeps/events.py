"""Where a command's output goes: the terminal for the command line, a collector for Python.

The commands say what they find with :func:`say` (``print``'s signature); what receives it is the
sink of the current context: :class:`Terminal` (stdout, and stderr for ``file=sys.stderr``: the
command line's output, unchanged) unless :func:`collecting` put a :class:`Collector` in place, as
the Python functions do. A collector keeps every line as data (``lines``, ``warnings``, ``notes``)
and, unless asked to be quiet, echoes them to the terminal too: ``banditsweep.run(..., quiet=True)``
prints nothing and loses nothing, without redirecting the process's stdout (another thread's output
is not swallowed, and a warning is not lost to a user who asked for quiet).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass, field
from typing import Iterator

OUT, ERR = "out", "err"


class Terminal:
    """The command line's sink: ``print`` itself."""

    def write(self, text: str, stream: str, flush: bool = False) -> None:
        print(text, end="", file=sys.stderr if stream == ERR else sys.stdout, flush=flush)


@dataclass
class Collector:
    """Every line a command said, in order, as (stream, text); ``echo``: also to this sink."""

    echo: Terminal | None = None
    lines: list[tuple[str, str]] = field(default_factory=list)
    _partial: dict[str, str] = field(default_factory=dict, repr=False)

    def write(self, text: str, stream: str, flush: bool = False) -> None:
        if self.echo is not None:
            self.echo.write(text, stream, flush)
        pending = self._partial.pop(stream, "") + text
        *complete, rest = pending.split("\n")
        self.lines.extend((stream, line) for line in complete)
        if rest:
            self._partial[stream] = rest

    @property
    def warnings(self) -> list[str]:
        """The lines that warn (``warning: ...``, ``failed: ...``, ``incomplete: ...``), without the word."""
        return [text.split(": ", 1)[1] if ": " in text else text for stream, text in self.lines
                if stream == ERR and text.split(":", 1)[0] in ("warning", "failed", "incomplete")]

    @property
    def notes(self) -> list[str]:
        return [text[len("note: "):] for _, text in self.lines if text.startswith("note: ")]

    @property
    def text(self) -> str:
        return "\n".join(text for _, text in self.lines)


_SINK: contextvars.ContextVar = contextvars.ContextVar("banditsweep_output", default=Terminal())


def say(*values, sep: str = " ", end: str = "\n", file=None, flush: bool = False) -> None:
    """``print`` to the current sink (``file=sys.stderr``: the error stream)."""
    _SINK.get().write(sep.join(str(value) for value in values) + end, ERR if file is sys.stderr else OUT, flush)


@contextlib.contextmanager
def collecting(quiet: bool = False) -> Iterator[Collector]:
    """Within: what the commands say is collected (and shown on the terminal unless ``quiet``)."""
    collector = Collector(None if quiet else Terminal())
    token = _SINK.set(collector)
    try:
        yield collector
    finally:
        _SINK.reset(token)
