"""Stopping a driver cleanly."""

from __future__ import annotations

import signal
import threading


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def stop_cleanly_on_sigterm() -> None:
    """`ray job stop`, a batch scheduler or `kill` send SIGTERM: stop as on Ctrl-C, so that the trial
    actors are released and the MLflow parent run is closed as KILLED. Finished trials are already
    saved; running one again completes the sweep."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
