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
from typing import Annotated

from pydantic import BaseModel, Field, ValidationError

from banditsweep.workers.storage.atomic import write_atomically
from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.paths import SweepFolder
from banditsweep.workers.storage.strict_models import STRICT, Says, first_problem
from banditsweep.workers.storage.untrusted_files import json_value, read_regular, shown

# Run files read at most (the newest): a sweep run many times still reads quickly.
MAX_RUNS = 200
MAX_BYTES = 64 << 10
# --set pairs of one run at most, and the length of one.
MAX_PAIRS = 50
MAX_PAIR_LENGTH = 1000


class RunNote(BaseModel):
    """A run's file as the run writes it."""

    model_config = STRICT

    overrides: Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_PAIR_LENGTH)]],
                         Field(max_length=MAX_PAIRS), Says(f"expected a list of at most {MAX_PAIRS} KEY=VALUE texts")]
    started_at: Annotated[float, Field(ge=0, lt=1e12), Says("expected a time in seconds")]
    trials: Annotated[int, Field(ge=0), Says("expected a whole number")]
    pid: Annotated[int, Field(ge=0)] | None = None
    host: str | None = None


@dataclass(frozen=True)
class RecordedRun:
    overrides: tuple[str, ...]    # the run's --set pairs (KEY=VALUE), as given
    started_at: float
    trials: int                   # trials of the sweep as that run planned it
    path: Path


def record_run(root: Path, overrides: list[str], trials: int) -> Path:
    """Note a run of the sweep in ``root`` started now with ``overrides`` (its --set pairs)."""
    now = time.time()
    path = SweepFolder(Path(root)).runs_dir / f"run-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}-{os.getpid()}.json"
    content = {"overrides": [pair.strip() for pair in overrides], "started_at": now, "trials": trials,
               "pid": os.getpid(), "host": socket.gethostname()}
    write_atomically(path, json.dumps(content, allow_nan=False))
    return path


def recorded_runs(root: Path) -> tuple[list[RecordedRun], list[str]]:
    """The runs noted in ``root``, newest first, and one line per file that was skipped (and why)."""
    folder = SweepFolder(Path(root)).runs_dir
    try:
        paths = sorted((p for p in folder.glob("run-*.json") if not p.name.startswith(".")), reverse=True)
    except OSError:
        return [], []
    runs, skipped = [], []
    for path in paths[:MAX_RUNS]:
        try:
            note = RunNote.model_validate(json_value(read_regular(path, MAX_BYTES)))   # not a link, FIFO or device
            runs.append(RecordedRun(tuple(note.overrides), note.started_at, note.trials, path))
        except ValidationError as error:
            problem = first_problem(error, RunNote)
            skipped.append(f"{shown(path)}: {problem.field or 'the file'}: {problem.words}; skipped (not a run's record)")
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            text = error.strerror if isinstance(error, OSError) and error.strerror else one_line(error, 120)
            if isinstance(error, json.JSONDecodeError):
                text = f"not JSON ({text})"
            skipped.append(f"{shown(path)}: {text}; skipped (not a run's record)")
    runs.sort(key=lambda run: run.started_at, reverse=True)
    return runs, skipped

