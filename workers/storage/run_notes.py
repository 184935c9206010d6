"""The runs a sweep's folder has seen, each with the ``--set`` overrides it was started with:
``<sweep>/.runs/``, one small JSON file per run (written atomically when the run starts).

A sweep run with ``--set horizon=100`` holds trials that the spec alone does not plan; ``status``
and ``report`` read these files to find (and name) the overrides that planned what the store
holds. The files are read as data: one that is not what a run writes is skipped and named.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from banditsweep.workers.storage.atomic import write_atomically
from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.untrusted_files import read_regular, shown

RUNS_DIR = ".runs"
# Run files read at most (the newest): a sweep run many times still reads quickly.
MAX_RUNS = 200
MAX_BYTES = 64 << 10
# --set pairs of one run at most, and the length of one.
MAX_PAIRS = 50
MAX_PAIR_LENGTH = 1000


@dataclass(frozen=True)
class RecordedRun:
    overrides: tuple[str, ...]    # the run's --set pairs (KEY=VALUE), as given
    started_at: float
    trials: int                   # trials of the sweep as that run planned it
    path: Path


def record_run(root: Path, overrides: list[str], trials: int) -> Path:
    """Note a run of the sweep in ``root`` started now with ``overrides`` (its --set pairs)."""
    now = time.time()
    path = Path(root) / RUNS_DIR / f"run-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}-{os.getpid()}.json"
    content = {"overrides": [pair.strip() for pair in overrides], "started_at": now, "trials": trials,
               "pid": os.getpid(), "host": socket.gethostname()}
    write_atomically(path, json.dumps(content, allow_nan=False))
    return path


def recorded_runs(root: Path) -> tuple[list[RecordedRun], list[str]]:
    """The runs noted in ``root``, newest first, and one line per file that was skipped (and why)."""
    folder = Path(root) / RUNS_DIR
    try:
        paths = sorted((p for p in folder.glob("run-*.json") if not p.name.startswith(".")), reverse=True)
    except OSError:
        return [], []
    runs, skipped = [], []
    for path in paths[:MAX_RUNS]:
        try:
            data = json.loads(read_regular(path, MAX_BYTES))   # not a link, FIFO or device; bounded
            runs.append(_run(data, path))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            text = error.strerror if isinstance(error, OSError) and error.strerror else one_line(error, 120)
            if isinstance(error, json.JSONDecodeError):
                text = f"not JSON ({text})"
            skipped.append(f"{shown(path)}: {text}; skipped (not a run's record)")
    runs.sort(key=lambda run: run.started_at, reverse=True)
    return runs, skipped


def _run(data, path: Path) -> RecordedRun:
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    pairs, started, trials = data.get("overrides"), data.get("started_at"), data.get("trials")
    if (not isinstance(pairs, list) or len(pairs) > MAX_PAIRS
            or not all(isinstance(p, str) and 0 < len(p) <= MAX_PAIR_LENGTH for p in pairs)):
        raise ValueError(f"overrides: expected a list of at most {MAX_PAIRS} KEY=VALUE texts")
    if isinstance(started, bool) or not isinstance(started, (int, float)) or not 0 <= started < 1e12:
        raise ValueError("started_at: expected a time in seconds")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise ValueError("trials: expected a whole number")
    return RecordedRun(tuple(pairs), float(started), trials, path)
