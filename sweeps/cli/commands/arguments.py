"""The arguments every command shares, read and checked before the spec is read or anything is
written (a mistake is exit 2, one line naming the argument): the results root, the MLflow tracking
URI, a ``run``'s Ray address. Only light modules are imported here, so that bad input is refused
in about the time it takes to read the spec.
"""

from __future__ import annotations

import os
from pathlib import Path

from banditsweep.sweeps.cli.options import SweepRequest
from banditsweep.sweeps.cli.options import DEFAULT_RESULTS_ROOT, RESULTS_ENV_VAR  # noqa: F401,E402 (API)
from banditsweep.sweeps.spec.model import Sweep
from banditsweep.sweeps.spec.errors import SpecError, show
from banditsweep.workers import (InputError, MLFLOW_SINK, MLflowOptions, check_mlflow_version, check_tracking_server,
                                 run_mode)
from banditsweep.workers import check_directory
from banditsweep.workers import RAY_ADDRESS_FORMS, check_address, ray_address
from banditsweep.workers import (TRACKING_URI_ENV_VAR, check_tracking_uri, chosen_artifact_root, database_in,
                                 given_tracking_uri, redacted, resolve_tracking_uri)




def results_root(args: SweepRequest) -> Path:
    """``--results``, else ``$BANDITSWEEP_RESULTS``, else ``~/banditsweep-results``; absolute."""
    chosen = args.results or os.environ.get(RESULTS_ENV_VAR) or DEFAULT_RESULTS_ROOT
    return Path(chosen).expanduser().resolve()


def tracking_uri(args: SweepRequest) -> str:
    """The MLflow store the command uses (workers.mirrors.mlflow.tracking_store.resolve_tracking_uri)."""
    return resolve_tracking_uri(args.mlflow_uri, results_root(args))


def sink_options(args: SweepRequest, sweep: Sweep) -> dict[str, dict]:
    """The sinks' own options (SinkContext.sink_options): MLflow's store, what it gets of this sweep
    (``mlflow_runs``, ``auto`` by the sweep's size), and where this command's environment puts a new
    experiment's artifacts."""
    return MLflowOptions(tracking_uri(args), run_mode(sweep.spec.mlflow_runs, len(sweep.trials)),
                         auto=sweep.spec.mlflow_runs == "auto", artifacts=chosen_artifact_root()).sink_options()


def check_sink_stores(args: SweepRequest, sinks: list[str]) -> None:
    """Before a run starts, the stores of its sinks that a command line names are checked: MLflow's
    (a tracking server that does not answer, a SQLite file that is not a store) when the MLflow sink
    is among ``sinks``."""
    if MLFLOW_SINK in sinks:
        check_tracking_server(tracking_uri(args))


def _results_source(args: SweepRequest) -> str:
    if args.results:
        return "--results"
    return f"${RESULTS_ENV_VAR}" if os.environ.get(RESULTS_ENV_VAR) else f"results root {DEFAULT_RESULTS_ROOT}"


def uses_mlflow(args: SweepRequest) -> bool:
    return args.uses_mlflow


def check_arguments(args: SweepRequest) -> None:
    """Arguments found wrong before the spec is read or anything is written (exit 2)."""
    if args.results == "":
        raise InputError("--results: empty path; give the results directory, e.g. --results ~/banditsweep-results")
    writing = args.writes_results
    check_directory(_results_source(args), results_root(args), writing, "the results root")
    if uses_mlflow(args):
        check_mlflow_version()
        if args.mlflow_uri == "":
            raise InputError("--mlflow-uri: empty URI; give e.g. http://127.0.0.1:5000 or sqlite:///PATH/mlflow.db")
        uri = given_tracking_uri(args.mlflow_uri)
        if uri:   # the default is always fine
            shown = show(redacted(uri))   # a password in the URI is never shown
            source = f"--mlflow-uri {shown}" if args.mlflow_uri else f"${TRACKING_URI_ENV_VAR}={shown}"
            check_tracking_uri(uri, source, results_root(args), writing)
    if args.uses_ray:
        if args.data_dir == "":
            raise InputError("--data-dir: empty path; give the dataset directory")
        if args.address == "":
            raise InputError(f"--address: empty address; {RAY_ADDRESS_FORMS}")
        address = ray_address(args.address)
        if address:
            check_address(address, f"--address {show(address)}" if args.address else f"$RAY_ADDRESS={show(address)}")


def check_sweep_folder(args: SweepRequest, sweep: Sweep) -> None:
    """``<results root>/<sweep>`` is a directory we may write to, if it exists, and does not hold
    the MLflow store."""
    folder = results_root(args) / sweep.name
    if args.writes_results and os.path.lexists(folder):
        check_directory(_results_source(args), folder, True, "a sweep's results folder")
    database = database_in(folder, given_tracking_uri(args.mlflow_uri) or "")
    if database is not None:
        raise SpecError(args.spec, "sweep", f"the sweep's folder {folder} would hold the MLflow store {database}; "
                                            f"choose another sweep name or another --mlflow-uri")
