"""banditsweep from Python and notebooks: ``banditsweep.run(spec, ...)``, ``plan``, ``status``, ``report``
and ``verify`` (their results: :mod:`banditsweep.sweeps.api.command_results`), and
``register_algorithm`` / ``register_environment`` for classes defined where they run (a notebook's
cells, a script).

Each function is its command's code path (sweeps.cli.commands): the options are the command line's, by
their Python names (``--set`` is ``overrides``, ``--only`` is ``only``, ``--sink`` is ``sinks``, ``--no-progress``
is ``progress=False``), checked as the command line checks them, and the command prints what it
prints (``quiet=True``: nothing on stdout). What the command line says in one line and an exit code
of 2 or 3 is raised instead, with the same message (SpecError, InputError, ... of
``banditsweep.workers.errors``); failed trials are not an error: the result counts them. The spec
is a path, YAML text, or the spec's data as a dict.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Mapping

import pandas as pd

from banditsweep.sweeps.api.command_results import PlanResult, ReportResult, RunResult, StatusResult, VerifyResult
from banditsweep.sweeps.events import collecting
from banditsweep.sweeps.cli.options import REQUESTS, OptionTypeError, SweepRequest
from banditsweep.sweeps.spec.errors import SpecError
from banditsweep.sweeps.spec.reading import SpecText
from banditsweep.workers import InputError

__all__ = ["PlanResult", "ReportResult", "RunResult", "StatusResult", "VerifyResult", "plan", "register_algorithm",
           "register_environment", "report", "run", "status", "verify"]


# ---- the commands -------------------------------------------------------------------------------


def run(spec, *, results=None, mlflow_uri: str | None = None, sinks=None, overrides=None, only=None,
        address: str | None = None, max_workers: int | None = None, retry_failed: bool = False,
        rerun_changed: bool = False, keep_changed: bool = False, data_dir=None, progress: bool = True,
        quiet: bool = False) -> RunResult:
    """Run every trial of ``spec`` not yet finished (``banditsweep run``), on an embedded local Ray or
    the cluster at ``address``; the trials of this process's :func:`register_algorithm` classes too.

    ``spec``: a path, YAML text, or a dict of the spec's data. ``results``: the results root (default
    ``$BANDITSWEEP_RESULTS``, else ``~/banditsweep-results``); ``mlflow_uri``: the MLflow store; ``sinks``:
    the result sinks (a name or a list; ``"none"`` or ``[]``: Parquet only); ``overrides``: the ``--set``
    values (``{"horizon": 200, "seeds": 2}`` or ``["horizon=200"]``); ``only``: the ``--only`` selection
    (``{"algorithm": ["linucb", "lints"]}`` or ``["algorithm=linucb,lints"]``); ``max_workers``,
    ``retry_failed``, ``rerun_changed`` / ``keep_changed``, ``data_dir``, ``progress`` as the command line's."""
    from banditsweep.sweeps.cli.commands import run as command

    if rerun_changed and keep_changed:
        raise InputError("keep_changed and rerun_changed exclude each other; give one")
    args = _arguments("run", spec, results, mlflow_uri, overrides, only, address=_text("address", address),
                      max_workers=max_workers, retry_failed=bool(retry_failed), rerun_changed=bool(rerun_changed),
                      keep_changed=bool(keep_changed), data_dir=_path("data_dir", data_dir), sinks=_sinks(sinks),
                      no_progress=not progress or quiet)
    with collecting(quiet) as output:
        report = _execute(command, args)
    return RunResult(report.sweep.name, report.store_root, report.total, report.finished_before,
                     report.failed_before, report.ran, report.finished, report.failed, report.seconds,
                     report.workers, report.device, report.exit_code, report.failures, report.sweep, output)


def plan(spec, *, results=None, mlflow_uri: str | None = None, overrides=None, only=None, data_dir=None,
         workers: int | None = None, gpus: int | None = None, probe_seconds: float = 3.0,
         quiet: bool = False) -> PlanResult:
    """What running ``spec`` will cost (``banditsweep plan``): trials, rounds, seconds per round,
    memory per cell, wall time on this machine's CPUs or on ``workers`` / ``gpus``; the options as
    :func:`run`'s."""
    from banditsweep.sweeps.cli.commands import plan as command

    args = _arguments("plan", spec, results, mlflow_uri, overrides, only, data_dir=_path("data_dir", data_dir),
                      workers=workers, gpus=gpus, probe_seconds=probe_seconds)
    with collecting(quiet) as output:
        report = _execute(command, args)
    found = report.plan
    cells = pd.DataFrame([{"algorithm": cell.label, "environment": cell.environment, "horizon": cell.horizon,
                           "trials": cell.trials, "trial_rounds": cell.trial_rounds,
                           "seconds_per_round": cell.seconds_per_round, "seconds": cell.seconds,
                           "memory_bytes": cell.memory_bytes, "gpus_per_trial": cell.gpus_per_trial,
                           "source": cell.source} for cell in found.cells],
                         columns=["algorithm", "environment", "horizon", "trials", "trial_rounds", "seconds_per_round",
                                  "seconds", "memory_bytes", "gpus_per_trial", "source"])
    return PlanResult(report.sweep.name, cells, found.trials, found.trial_rounds, found.serial_seconds,
                      found.wall_seconds, found.workers, found.unknown, len(report.done), report.other_code,
                      found.lines(), found, output)


def status(spec, *, results=None, mlflow_uri: str | None = None, overrides=None, only=None,
           quiet: bool = False) -> StatusResult:
    """Where ``spec``'s trials stand (``banditsweep status``): per cell done / failed / running / pending
    / other code, and the check of every result file; the options as :func:`run`'s."""
    from dataclasses import asdict

    from banditsweep.sweeps.cli.commands import status as command

    args = _arguments("status", spec, results, mlflow_uri, overrides, only)
    with collecting(quiet) as output:
        report = _execute(command, args)
    summary = report.summary
    cells = pd.DataFrame([asdict(cell) for cell in summary.cells],
                         columns=["algorithm", "environment", "done", "failed", "running", "pending", "other_code"])
    consistency = summary.consistency
    return StatusResult(report.sweep.name, report.store_root, cells, len(report.sweep.trials),
                        None if consistency is None else not summary.inconsistent,
                        [] if consistency is None else list(consistency.problems),
                        report.notes + ([] if consistency is None else list(consistency.notes)),
                        report.exit_code, summary, report.sweep, output)


def report(spec, *, results=None, mlflow_uri: str | None = None, overrides=None, only=None, band: str = "ci",
           choose_on_seeds: int | None = None, same_seeds: bool = False, quiet: bool = False) -> ReportResult:
    """The report of ``spec``'s finished trials (``banditsweep report``): tables and figures written to
    ``<results>/<sweep>/report/``, attached to the sweep's MLflow run; ``band``, ``choose_on_seeds`` and
    ``same_seeds`` as the command line's, the other options as :func:`run`'s."""
    from banditsweep.sweeps.cli.commands import report as command

    args = _arguments("report", spec, results, mlflow_uri, overrides, only, band=band,
                      choose_on_seeds=choose_on_seeds, same_seeds=bool(same_seeds))
    with collecting(quiet) as output:
        outcome = _execute(command, args)
    return ReportResult(outcome.sweep.name, outcome.store_root, outcome.files, outcome.run_id, outcome.exit_code,
                        outcome.sweep, output, outcome.results)


def verify(spec, *, results=None, mlflow_uri: str | None = None, overrides=None, only=None, sample: int = 10,
           seed: int | None = None, max_trial_seconds: float | None = None, accept: bool = False,
           address: str | None = None, max_workers: int | None = None, data_dir=None, quiet: bool = False
           ) -> VerifyResult:
    """Re-run a sample of ``spec``'s finished trials on today's code and compare every stored value but
    timings (``banditsweep verify``); the options as the command line's and :func:`run`'s."""
    from banditsweep.sweeps.cli.commands import verify as command

    args = _arguments("verify", spec, results, mlflow_uri, overrides, only, sample=sample, seed=seed,
                      max_trial_seconds=max_trial_seconds, accept=bool(accept), address=_text("address", address),
                      max_workers=max_workers, data_dir=_path("data_dir", data_dir), no_progress=quiet)
    with collecting(quiet) as output:
        outcome = _execute(command, args)
    return VerifyResult(outcome.sweep.name, outcome.sample, outcome.reproduced, dict(outcome.differences),
                        outcome.seed, outcome.accepted, outcome.exit_code, output)


# ---- registering classes defined here -----------------------------------------------------------


def register_algorithm(name: str, cls: type) -> None:
    """Make ``cls`` (a ``banditsweep.core.engine.contracts.Policy`` with its ``Params`` model) the
    algorithm ``name`` of the specs run from this process, on every Ray worker of their runs too: a class
    defined in a notebook or a script's ``__main__`` travels by value with each run, with its source
    (its trials' ``code`` digests it: a change to the class marks its finished trials as computed by
    other code). A class of an importable module travels by name: the workers must import it."""
    from banditsweep.core.engine.contracts import Config, Policy

    _check_registration(name, cls, Policy, "Params", Config, "algorithm")
    _ship("algorithm", name, cls)


def register_environment(name: str, cls: type) -> None:
    """Make ``cls`` (a ``banditsweep.core.engine.contracts.Environment`` with its ``Config`` model) the
    environment kind ``name``, as :func:`register_algorithm` does for an algorithm."""
    from banditsweep.core.engine.contracts import Config, Environment

    _check_registration(name, cls, Environment, "Config", Config, "environment")
    _ship("environment", name, cls)


def _check_registration(name, cls, base: type, model: str, config: type, kind: str) -> None:
    from banditsweep.core.engine import registry

    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"register_{kind}: {name!r} is not a name; give letters, digits, - and _, "
                         f"e.g. 'eps_greedy'")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise OptionTypeError(f"register_{kind}({name!r}, ...): {cls!r} is not a subclass of "
                        f"banditsweep.core.engine.contracts.{base.__name__}")
    declared = getattr(cls, model, None)
    if not (isinstance(declared, type) and issubclass(declared, config)):
        raise OptionTypeError(f"register_{kind}({name!r}, ...): {cls.__qualname__}.{model} must be a "
                              f"banditsweep.core.engine.contracts.Config model "
                              f"(its {'parameters' if kind == 'algorithm' else 'settings'})")
    if registry.is_builtin(kind, name):
        raise ValueError(f"register_{kind}: {name!r} is banditsweep's own {kind}; choose another name")


def _ship(kind: str, name: str, cls: type) -> None:
    from banditsweep.workers import ship

    ship(kind, name, cls)


# ---- the options, as the command line's ---------------------------------------------------------


def _spec_source(spec) -> str:
    """A path as itself; YAML text or a dict as a :class:`SpecText`."""
    if isinstance(spec, Mapping):
        import yaml

        try:
            return SpecText(yaml.safe_dump(dict(spec), sort_keys=False))
        except yaml.YAMLError as error:
            raise SpecError("<spec>", "", f"the spec's data cannot be written as YAML ({' '.join(str(error).split())}); "
                                          "give plain values: dicts, lists, strings, numbers, booleans") from None
    if isinstance(spec, os.PathLike):
        return os.fspath(spec)
    if isinstance(spec, str):
        if "\n" in spec or spec.lstrip().startswith("{"):
            return SpecText(spec)
        return spec
    raise OptionTypeError(f"spec: give a path, YAML text or a dict, not {type(spec).__name__}")


def _arguments(command: str, spec, results, mlflow_uri, overrides, only, **options) -> SweepRequest:
    """The request of ``command`` (sweeps.cli.options), every value checked as the command line checks it."""
    return REQUESTS[command].create(spec=_spec_source(spec), results=_path("results", results),
                                    mlflow_uri=_text("mlflow_uri", mlflow_uri),
                                    overrides=_pairs("overrides", overrides, _yaml_scalar),
                                    selectors=_pairs("only", only, _alternatives), **options)


def _execute(command, args: SweepRequest):
    from banditsweep.sweeps.cli.main import prepare

    return command.execute(args, prepare(args))


def _text(name: str, value) -> str | None:
    if value is not None and not isinstance(value, str):
        raise OptionTypeError(f"{name}: give a string, not {type(value).__name__}")
    return value


def _path(name: str, value) -> str | None:
    return os.fspath(value) if isinstance(value, os.PathLike) else _text(name, value)


def _sinks(sinks) -> list[str] | None:
    if sinks is None:
        return None
    if isinstance(sinks, str):
        return [sinks]
    names = list(sinks)
    if not all(isinstance(name, str) for name in names):
        raise OptionTypeError("sinks: give a sink's name or a list of names")
    return names or ["none"]


def _yaml_scalar(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)   # JSON is YAML


def _alternatives(value) -> str:
    values = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
    return ",".join(_yaml_scalar(item) if not isinstance(item, str) else item for item in values)


def _pairs(name: str, given, value_text) -> list[str]:
    """``KEY=VALUE`` texts of the command line from a dict (``{"horizon": 200}``), a list of such
    texts, or one."""
    if given is None:
        return []
    if isinstance(given, str):
        return [given]
    if isinstance(given, Mapping):
        return [f"{key}={value_text(value)}" for key, value in given.items()]
    if isinstance(given, Iterable):
        items = list(given)
        if all(isinstance(item, str) for item in items):
            return items
    raise OptionTypeError(f"{name}: give a dict of key: value, or a list of 'key=value' texts")
