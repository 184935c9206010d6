"""Getting the sinks ready while Ray starts.

Opening a sink can cost seconds that have nothing to do with Ray: MLflow's import and, for a new
SQLite store, its tables (MLflow's migrations: ~8 s together on a 2-core machine). The mirror actor
opens its sinks only once Ray is up, so for a short sweep those seconds came after the trials, as the
mirror caught up. A sink class with a static ``prepare(context)`` gets it called here, in a process of
its own started before ``ray.init`` at the lowest CPU priority: the work fills the gaps of Ray's start
(much of it is waiting), and the driver never imports the sink's client (MLflow's modules alone add
~1.5 s to a process's exit). Whatever goes wrong here is left for the sink's own opening to meet and
report.

Run as ``python -m banditsweep.workers.mirrors.prepare``, with ``{"names": [...], "context": {...}}`` as
JSON on its standard input.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading

from banditsweep.workers.mirrors.sinks import SinkContext


def start_preparing(names: list[str], context: SinkContext, env_vars: dict[str, str]) -> subprocess.Popen | None:
    """The process preparing the sinks ``names`` (None: no sink to prepare). In a session of its own,
    so that a Ctrl-C meant for the run does not cut a new store's creation short; wait for it before
    the run ends (:func:`finish_preparing`)."""
    if not names:
        return None
    request = json.dumps({"names": names, "context": dataclasses.asdict(context)}).encode()
    process = subprocess.Popen([sys.executable, "-m", __name__], env={**os.environ, **env_vars},
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    # On its standard input, not its command line: the context holds the spec's text and the run's
    # settings, which for a large sweep pass the system's limit on arguments. Written by a thread,
    # so that the driver goes on while the process starts (a pipe holds 64 KiB until it reads).
    threading.Thread(target=_hand_over, args=(process, request), name="sink-prepare-request", daemon=True).start()
    return process


def _hand_over(process: subprocess.Popen, request: bytes) -> None:
    try:
        process.stdin.write(request)
        process.stdin.close()
    except OSError:   # it ended before reading: the sinks' own opening meets what it met
        pass


def finish_preparing(process: subprocess.Popen | None) -> None:
    if process is not None:
        process.wait()


def prepare(names: list[str], context: SinkContext) -> None:
    from banditsweep.core.engine import registry

    for name in names:
        try:
            hook = getattr(registry.sink_class(name), "prepare", None)
            if hook is not None:
                hook(context)
        except Exception:   # the sink's opening in the mirror meets the same trouble and says so
            pass


if __name__ == "__main__":
    # Only the CPU that Ray's start and the trials leave idle: on a small machine this work would
    # otherwise delay the first trial by as much as it saves at the end.
    os.nice(19)
    request = json.loads(sys.stdin.buffer.read())
    prepare(request["names"], SinkContext(**request["context"]))
