"""Stopping a driver cleanly."""

from __future__ import annotations

import signal
import threading


_terminated = threading.Event()

# Seconds from a SIGTERM to the process's end at the latest. A scheduler that sends SIGTERM sends
# SIGKILL after its grace period (often 30 s); a stop that waits on Ray calls that cannot return (the
# embedded Ray got the signal too) or on a long backlog of the sinks ends here instead, saying so.
STOP_DEADLINE = 20.0
EXIT_INTERRUPTED = 130


def _interrupt(signum, frame):
    if _terminated.is_set():
        # A batch scheduler signals every process of a job and its batch script forwards the signal
        # too: a second SIGTERM must not interrupt the stop the first one began.
        return
    _terminated.set()
    threading.Thread(target=_stop_by_the_deadline, name="sigterm-deadline", daemon=True).start()
    raise KeyboardInterrupt


def _stop_by_the_deadline() -> None:
    import sys
    import time

    time.sleep(STOP_DEADLINE)
    print(f"\nstopped {STOP_DEADLINE:.0f} s after SIGTERM: finished trials are saved (run the same command again "
          "to resume); the result sinks may lack the last ones: `banditsweep sync-mlflow SPEC` (or the next run) "
          "brings them up to date", file=sys.stderr, flush=True)
    _end_now(EXIT_INTERRUPTED)


def terminated() -> bool:
    """Whether this process got a SIGTERM (handled by :func:`stop_cleanly_on_sigterm`)."""
    return _terminated.is_set()


def stop_cleanly_on_sigterm() -> None:
    """`ray job stop`, a batch scheduler or `kill` send SIGTERM: stop as on Ctrl-C, so that the trial
    actors are released and the MLflow parent run is closed as KILLED. Finished trials are already
    saved; running one again completes the sweep."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


_abandoned = threading.Event()


def abandon_ray() -> None:
    """This process's embedded Ray ended under it (its processes got the SIGTERM too): Ray's own
    shutdown, also the one it registered to run at exit, would wait 60 s for a GCS that is gone, and
    then end the process itself. :func:`exit_now_if_ray_was_abandoned` ends the process instead."""
    _abandoned.set()


def exit_now_if_ray_was_abandoned(code: int) -> None:
    """End the process with ``code`` now (output flushed, no exit handlers) if :func:`abandon_ray`
    was called. Everything of the run is on disk by then: the results are written as they come."""
    if _abandoned.is_set():
        _end_now(code)


def _end_now(code: int) -> None:
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
