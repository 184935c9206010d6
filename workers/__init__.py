"""The workers layer: Ray execution, the results folder (the record of truth), the code behind a
result, and the mirrors of the results. ``sweeps`` imports it through this front door only.

Rooms (each a sub-package with its own docstring):

- ``execution`` — Ray: the sweep loop, the trial actors, sharded trials' shard actors (the only
  importer of ``ray``);
- ``storage`` — the results folder: the store, its journal, curves and trials table, the typed trial
  record, checkpoints, ``running.json``, run notes (the only code that spells a result path; its
  ``untrusted_files`` the one place that opens files this process did not write);
- ``provenance`` — the code a trial runs on, finished trials against today's code, ``verify``;
- ``mirrors`` — the sink protocol and the mirror; ``mirrors.mlflow`` the MLflow sink (the only
  importer of ``mlflow``).

``errors`` (what the CLI maps to exit codes) is shared by all rooms.

Names are imported on first use (PEP 562), so that ``from banditsweep.workers import SweepStore``
loads neither Ray nor MLflow: the CLI refuses bad input before either is imported.
"""

from __future__ import annotations

import importlib

# name -> the module (under banditsweep.workers) that defines it; names in _MODULES are modules.
_EXPORTS = {
    # errors
    **dict.fromkeys(("DamagedResultError", "InputError", "RayUnreachableError", "ResourceRequestError",
                     "ResultsNotFoundError", "StoreWriteError", "SweepBusyError", "one_line"), "errors"),
    # execution
    "run_sweep": "execution.dispatcher", "check_fits": "execution.pool",
    **dict.fromkeys(("RAY_ADDRESS_FORMS", "check_address", "ray_address"), "execution.ray_address"),
    **dict.fromkeys(("Job", "RunOptions", "Progress", "SweepOutcome"), "execution.run_values"),
    **dict.fromkeys(("exit_now_if_ray_was_abandoned", "stop_cleanly_on_sigterm"), "execution.signals"),
    "signals": "execution.signals",
    # mirrors
    **dict.fromkeys(("SinkContext", "sink_names"), "mirrors.sinks"),
    **dict.fromkeys(("MLFLOW_SINK", "MLflowOptions", "run_mode"), "mirrors.mlflow.options"),
    **dict.fromkeys(("attach_report", "experiment_of"), "mirrors.mlflow.queries"),
    **dict.fromkeys(("TRACKING_URI_ENV_VAR", "check_tracking_uri", "chosen_artifact_root", "database_in",
                     "given_tracking_uri", "resolve_tracking_uri", "check_tracking_server", "mirror_plan"),
                    "mirrors.mlflow.tracking_store"),
    **dict.fromkeys(("redacted", "check_mlflow_version"), "mirrors.mlflow.store_checks"),
    # provenance
    **dict.fromkeys(("CodeComparison", "compare_code", "current_code"), "provenance.code_check"),
    "code_of": "provenance.code_identity",
    "content_digest_of": "provenance.legacy_identity",
    **dict.fromkeys(("ShippedClass", "ship", "shipped_classes"), "provenance.shipped"),
    **dict.fromkeys(("source_commit", "runtime_info"), "provenance.runtime"),
    **dict.fromkeys(("LoadSampler", "quiet_factor"), "provenance.load"),
    **dict.fromkeys(("accepted_records", "code_groups", "compare_trial", "draw_sample"), "provenance.verification"),
    # results
    "write_atomically": "storage.atomic",
    **dict.fromkeys(("STALE_SECONDS", "LiveTrial"), "storage.live_run"),
    **dict.fromkeys(("FAILED", "FINISHED", "PENDING", "TrialOutcome", "TrialRecord"), "storage.record"),
    **dict.fromkeys(("KEEP", "RERUN", "RERUN_ALL", "catch_up", "failed_records", "plan_resume"), "storage.resume"),
    "SweepFolder": "storage.paths",
    **dict.fromkeys(("RESULTS_ROOT_ENTRIES", "taken_by_the_results_root"), "storage.root_entries"),
    **dict.fromkeys(("record_run", "recorded_runs"), "storage.run_notes"),
    **dict.fromkeys(("StatusSummary", "status_summary"), "storage.status_counts"),
    **dict.fromkeys(("StoreHealth", "SweepStore", "load"), "storage.store"),
    "trials_table": "storage.trials_table",
    "check_directory": "storage.writable_folders",
}

_MODULES = {"signals"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    loaded = importlib.import_module(f"{__name__}.{module}")
    value = loaded if name in _MODULES else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
