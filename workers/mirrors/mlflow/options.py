"""What the MLflow sink is given: its section of a run's sink options (the tracking store, and what
the mirror writes there). Light: the CLI builds these options before anything imports MLflow.

A run's sinks share one :class:`~banditsweep.workers.mirrors.sinks.SinkContext`; its
``sink_options`` holds one plain mapping per sink, by the name of the sink that reads it (values
cross process boundaries as JSON). :class:`MLflowOptions` is this sink's, typed on both sides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from banditsweep.workers.errors import InputError

# The MLflow sink's registered name, and the key of its section of the sink options (a sink derived
# from it, a plugin's, reads the same section).
MLFLOW_SINK = "mlflow"
# What the mirror writes: a run per trial, per cell (the seeds of one label, grid point and
# environment), or both (workers.mirrors.mlflow.cells).
RUN_MODES = ("trials", "cells", "both")
# ``auto``: runs per trial up to this many trials in the sweep, else per cell.
MAX_TRIAL_RUNS_AUTO = 2000
# A trial's run through a tracking server: create (with its tags), log its values, end it.
REQUESTS_PER_TRIAL_RUN = 3
# ``auto`` through a tracking server: runs per trial only where the server, at the pace it answered
# when the sink opened (one request at a time, the slowest case), writes them within this many
# seconds; else per cell, a few requests per cell (a server behind a login checks the password on
# every request: 5-6 requests a second on a small machine, 25 minutes for 1,000 trial runs).
TRIAL_RUNS_SECONDS_AUTO = 120.0


def run_mode(requested: str, trials: int, request_seconds: float | None = None) -> str:
    """``trials`` / ``cells`` / ``both`` as asked, ``auto`` by the sweep's size and, through a
    tracking server, by the seconds one request took (``request_seconds``; None for a store the
    mirror writes in bulk)."""
    if requested == "auto":
        if trials > MAX_TRIAL_RUNS_AUTO:
            return "cells"
        if request_seconds is not None and trial_runs_seconds(trials, request_seconds) > TRIAL_RUNS_SECONDS_AUTO:
            return "cells"
        return "trials"
    if requested not in RUN_MODES:
        raise ValueError(f"mlflow runs {requested!r}: allowed are auto, {', '.join(RUN_MODES)}")
    return requested


def trial_runs_seconds(trials: int, request_seconds: float) -> float:
    """Seconds of requests that ``trials`` runs per trial cost a server answering in ``request_seconds``."""
    return trials * REQUESTS_PER_TRIAL_RUN * request_seconds


@dataclass(frozen=True)
class MLflowOptions:
    tracking_uri: str
    runs: str = "trials"    # one of RUN_MODES (the spec's ``mlflow_runs``, ``auto`` resolved by run_mode)
    # The spec asked for ``auto``: through a tracking server the sink may still choose runs per cell
    # once it has timed the server (run_mode's request_seconds).
    auto: bool = False
    # Where a new experiment's artifacts go, as the command's own environment chose it
    # ($BANDITSWEEP_MLFLOW_ARTIFACTS, an absolute file URI; "" for the store's default). Carried here
    # because the sink that creates the experiment runs in the mirror actor, whose environment on a
    # cluster is its raylet's, not the command's.
    artifacts: str = ""

    def sink_options(self) -> dict[str, dict[str, Any]]:
        """These options as a run's sink options (``SinkContext.sink_options``)."""
        return {MLFLOW_SINK: asdict(self)}

    @classmethod
    def of(cls, sink_options: dict[str, dict[str, Any]]) -> MLflowOptions:
        """The MLflow section of a run's sink options; a mode it does not know writes runs per trial."""
        given = sink_options.get(MLFLOW_SINK)
        if not given or not given.get("tracking_uri"):
            raise InputError("the MLflow sink was given no tracking URI (its sink options lack "
                             f"{MLFLOW_SINK!r}: tracking_uri)")
        options = cls(**{key: value for key, value in given.items() if key in cls.__dataclass_fields__})
        return options if options.runs in RUN_MODES else cls(options.tracking_uri)
