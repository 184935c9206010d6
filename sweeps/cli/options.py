"""Every command's options as one typed object per command, declared once.

A field of a request class is an option: its flag, help, default and check live in its declaration,
and both the command line (``sweeps.cli.main`` builds its parser from these classes) and Python
(``sweeps.api.functions`` builds the request from keyword arguments) read that one declaration. A new option
is one field here; the command's module reads it from the request it is handed, never from the
command line's parsing.

Checks take what either side gives (the command line's text, Python's number) and raise
:class:`~banditsweep.workers.InputError` naming the option and what is allowed; the command line
shows the same message as argparse's one-line error (exit 2).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from banditsweep.core.neural.datasets import DATA_ENV_VAR
from banditsweep.sweeps.spec.errors import show
from banditsweep.sweeps.spec.overrides import OVERRIDABLE
from banditsweep.workers import InputError

# One absolute default for results, wherever `run` is started from: a Ray job runs in a temporary
# copy of the submitted folder, so a relative default would write results there and lose them.
RESULTS_ENV_VAR = "BANDITSWEEP_RESULTS"
DEFAULT_RESULTS_ROOT = "~/banditsweep-results"
MAX_WORKERS = 100_000        # trial actors of one run, at most
MAX_PROBE_SECONDS = 3600.0   # longest a plan's probe may time one cell


class OptionTypeError(InputError, TypeError):
    """A Python value of the wrong type for an option (a number where a path goes): bad input, and the
    ``TypeError`` Python code expects."""


class OptionValueError(InputError):
    """An option's value is not allowed; the message says what is (without the option's name, which
    the command line's parser and :meth:`Request.create` put in front)."""


# ---- checks: the command line's text or Python's value ------------------------------------------


def whole_number(low: int, high: int) -> Callable[[Any], int]:
    allowed = f"give a whole number from {low} to {high}"

    def check(value) -> int:
        if isinstance(value, bool):
            raise OptionValueError(f"{value!r} is not a number")
        if isinstance(value, float):
            if not value.is_integer():
                raise OptionValueError(f"{value!r} is not a whole number; {allowed}")
            value = int(value)
        if isinstance(value, str):
            if len(value.strip()) > 20:
                raise OptionValueError(f"{show(value)} is not allowed: {allowed}")
            try:
                value = int(value)
            except ValueError:
                raise OptionValueError(f"{show(value)} is not a whole number; {allowed}") from None
        if not isinstance(value, int):
            raise OptionValueError(f"{value!r} is not a number")
        if not low <= value <= high:
            raise OptionValueError(f"{value} is not allowed: {allowed}")
        return value
    return check


def seconds(value) -> float:
    """Seconds above 0 and at most :data:`MAX_PROBE_SECONDS`."""
    allowed = f"give seconds above 0 and at most {MAX_PROBE_SECONDS:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise OptionValueError(f"{value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise OptionValueError(f"{show(value)} is not a number; {allowed}") from None
    if not 0 < number <= MAX_PROBE_SECONDS or math.isnan(number):
        raise OptionValueError(f"{show(value if isinstance(value, str) else repr(value))} is not allowed: {allowed}")
    return number


def slurm_time(value) -> int:
    """``plan --time``: a Slurm time limit, in seconds."""
    from banditsweep.sweeps.planning.slurm import TIME_FORMS, parse_time

    if not isinstance(value, str):
        raise OptionValueError(f"{value!r}: give a Slurm time such as '2-00:00:00' ({TIME_FORMS})")
    try:
        limit = parse_time(value)
    except ValueError as error:
        raise OptionValueError(str(error)) from None
    if limit <= 0:
        raise OptionValueError(f"{value!r}: give a time above 0 ({TIME_FORMS})")
    return limit


worker_count = whole_number(1, MAX_WORKERS)
gpu_count = whole_number(0, MAX_WORKERS)
sample_size = whole_number(1, 100_000)
seed = whole_number(0, 2**63 - 1)
port = whole_number(1, 65535)


def option(flag: str | None, default: Any = None, *, help: str, check: Callable | None = None,
           action: str | None = None, metavar: str | None = None, choices: tuple | None = None,
           exclusive: str | None = None, group: str | None = None) -> Any:
    """A field of a request: ``flag`` (``None``: positional), its default, help and check;
    ``action`` as argparse's (``store_true``, ``append``); ``exclusive``: the name of a group of
    which one may be given; ``group``: the heading of the help section it is listed under."""
    metadata = {"flag": flag, "help": help, "check": check, "action": action, "metavar": metavar,
                "choices": choices, "exclusive": exclusive, "group": group}
    if isinstance(default, list):
        return dataclasses.field(default_factory=list, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# ---- the requests -------------------------------------------------------------------------------


@dataclass
class Request:
    """A command's options. ``command`` is the command's name; ``create`` builds one from Python
    values, each checked as the command line checks it."""

    command: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    writes_results: ClassVar[bool] = False   # writes under the results root (its checks ask for write access)
    uses_ray: ClassVar[bool] = False         # starts or joins Ray (its address and data directory are checked)
    mlflow: ClassVar[bool] = False           # reads or writes the MLflow store

    @property
    def uses_mlflow(self) -> bool:
        return self.mlflow

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if "help" in f.metadata]

    @classmethod
    def create(cls, **values) -> "Request":
        """The request of ``values`` (field names), each checked (an ``InputError`` naming it)."""
        known = {f.name: f for f in cls.options()}
        checked = {}
        for name, value in values.items():
            field = known.get(name)
            if field is None:
                raise OptionTypeError(f"{cls.command}: no option {name!r}; the options: {', '.join(known)}")
            check = field.metadata["check"]
            if check is not None and value is not None:
                try:
                    value = check(repr(value) if isinstance(value, float) and check is not seconds else value)
                except OptionValueError as error:
                    raise InputError(f"{name}: {error}") from None
            choices = field.metadata["choices"]
            if choices and value not in choices:
                raise InputError(f"{name}: {value!r} is not allowed; allowed: {', '.join(map(str, choices))}")
            checked[name] = value
        for group in {f.metadata["exclusive"] for f in known.values() if f.metadata["exclusive"]}:
            given = [name for name, f in known.items() if f.metadata["exclusive"] == group and checked.get(name)]
            if len(given) > 1:
                raise InputError(f"{' and '.join(given)} exclude each other; give one")
        return cls(**checked)


@dataclass
class SweepRequest(Request):
    """What every command of a spec takes."""

    spec: Any = option(None, help="sweep spec (YAML), e.g. sweeps/quickstart.yaml")
    debug: bool = option("--debug", False, action="store_true", help="with an error, also print its traceback")
    results: str | None = option("--results", help=f"results root (default: ${RESULTS_ENV_VAR}, else "
                                                   f"{DEFAULT_RESULTS_ROOT})")
    mlflow_uri: str | None = option("--mlflow-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                                         "sqlite:///<results root>/mlflow.db)")
    overrides: list[str] = option("--set", [], action="append", metavar="KEY=VALUE",
                                  help=f"override a top-level spec value: {', '.join(OVERRIDABLE)} (repeatable)")
    selectors: list[str] = option("--only", [], action="append", metavar="KEY=VALUE[,VALUE]",
                                  help="only the trials whose algorithm (name or label), environment (kind, name or "
                                       "dataset), seed, environment setting or parameter has one of the values, e.g. "
                                       "--only algorithm=linucb --only setting=1,2 (repeatable; every key must match)")


_ADDRESS = "Ray cluster address (default: $RAY_ADDRESS, else an embedded local Ray on 127.0.0.1)"
_DATA_DIR = f"dataset directory (default: ${DATA_ENV_VAR}, else a per-user cache directory)"


@dataclass
class ExecutionRequest(SweepRequest):
    """What every command that runs trials takes: where (the cluster, its data) and how it shows it.
    A new option of running is declared here once and both ``run`` and ``verify`` take it."""

    uses_ray: ClassVar[bool] = True

    address: str | None = option("--address", help=_ADDRESS)
    max_workers: int | None = option("--max-workers", check=worker_count,
                                     help="at most this many trial actors (default: as many as the cluster can hold)")
    data_dir: str | None = option("--data-dir", help=_DATA_DIR)
    no_progress: bool = option("--no-progress", False, action="store_true", help="no progress bar")


@dataclass
class RunRequest(ExecutionRequest):
    command: ClassVar[str] = "run"
    summary: ClassVar[str] = "run every trial of a spec not yet finished"
    writes_results: ClassVar[bool] = True

    retry_failed: bool = option("--retry-failed", False, action="store_true", help="also rerun trials recorded as failed")
    rerun_changed: bool = option("--rerun-changed", False, action="store_true", exclusive="changed",
                                 help="run finished trials computed by other code again on today's code (the "
                                      "default), and also those recorded before trials carried their code (code "
                                      "unknown)")
    keep_changed: bool = option("--keep-changed", False, action="store_true", exclusive="changed",
                                help="keep finished trials computed by other code (report marks their cells)")
    sinks: list[str] | None = option("--sink", action="append", metavar="NAME",
                                     help="a result sink mirroring the Parquet results (repeatable; default: the "
                                          "spec's `sinks:`, else mlflow; `none`: Parquet only); `banditsweep list` "
                                          "names them")

    @property
    def uses_mlflow(self) -> bool:   # unless the run's only sink is `none`
        return [name.lower() for name in (self.sinks or [])] != ["none"]


_SLURM = "Slurm (with --slurm: the #SBATCH lines for cluster-slurm.sbatch)"


@dataclass
class PlanRequest(SweepRequest):
    command: ClassVar[str] = "plan"
    summary: ClassVar[str] = ("what a sweep will cost: trials, rounds, seconds per round, memory, wall time (a "
                              "short timed probe per cell)")

    data_dir: str | None = option("--data-dir", help=_DATA_DIR)
    workers: int | None = option("--workers", check=worker_count,
                                 help="trials at once (default: this machine's CPUs / cpus_per_trial)")
    gpus: int | None = option("--gpus", check=gpu_count,
                              help="GPUs of the cluster (for trials that ask for GPUs; 0: a cluster without GPUs)")
    probe_seconds: float = option("--probe-seconds", 3.0, check=seconds,
                                  help="at most this long timing each cell (default 3)")
    slurm: bool = option("--slurm", False, action="store_true", group=_SLURM,
                         help="print the #SBATCH lines this sweep needs")
    nodes: int = option("--nodes", 1, check=worker_count, group=_SLURM, help="nodes of the allocation (default 1)")
    gpus_per_node: int = option("--gpus-per-node", 0, check=gpu_count, metavar="G", group=_SLURM,
                                help="GPUs per node (default 0: CPU trials)")
    cpus_per_node: int | None = option("--cpus-per-node", check=worker_count, metavar="C", group=_SLURM,
                                       help="CPUs per node (default: what the trials on one node ask for; CPU "
                                            "trials: this machine's CPUs)")
    time_limit: int | None = option("--time", check=slurm_time, metavar="T", group=_SLURM,
                                    help="the longest --time the partition allows: a longer sweep runs as requeued "
                                         "jobs of T (and trials longer than T without checkpoints are named)")


@dataclass
class VerifyRequest(ExecutionRequest):
    command: ClassVar[str] = "verify"
    summary: ClassVar[str] = ("re-run a sample of the finished trials on today's code and compare every stored "
                              "value but timings")
    writes_results: ClassVar[bool] = True   # its scratch folder, and --accept's stamps

    sample: int = option("--sample", 10, check=sample_size,
                         help="trials to re-run (default 10; at least one of each code version the store holds)")
    seed: int | None = option("--seed", check=seed, help="the sample's seed (default: a new one, printed)")
    max_trial_seconds: float | None = option("--max-trial-seconds", check=seconds, metavar="S",
                                             help="sample only trials that took at most S seconds when recorded "
                                                  "(of a code version with none, its quickest)")
    accept: bool = option("--accept", False, action="store_true",
                          help="stamp the finished trials of each code version whose sampled trials reproduced as "
                               "computed by today's code (after a change that moves no number)")
    # What a verification's runs of the sampled trials use: no sink, nothing retried or re-run.
    sinks: ClassVar[list[str]] = ["none"]
    retry_failed: ClassVar[bool] = False
    rerun_changed: ClassVar[bool] = False
    keep_changed: ClassVar[bool] = False


@dataclass
class StatusRequest(SweepRequest):
    command: ClassVar[str] = "status"
    summary: ClassVar[str] = "done / failed / pending trial counts"


@dataclass
class ReportRequest(SweepRequest):
    command: ClassVar[str] = "report"
    summary: ClassVar[str] = "tables and figures of a sweep's results"
    writes_results: ClassVar[bool] = True
    mlflow: ClassVar[bool] = True

    band: str = option("--band", "ci", choices=("ci", "std"),
                       help="what the regret figures' bands show: the 95%% confidence interval of the mean (ci, "
                            "the default) or ±1 standard deviation over the seeds (std)")
    choose_on_seeds: int | None = option("--choose-on-seeds", check=sample_size, metavar="N", exclusive="chosen",
                                         help="choose each cell's grid point on the first N seeds and judge every "
                                              "number on the others (default: half of them where a cell has a grid "
                                              "and there are 4 seeds or more)")
    same_seeds: bool = option("--same-seeds", False, action="store_true", exclusive="chosen",
                              help="choose and judge on every seed (an optimistic reading: it flatters the chosen "
                                   "points)")


@dataclass
class SyncRequest(SweepRequest):
    command: ClassVar[str] = "sync-mlflow"
    summary: ClassVar[str] = ("bring MLflow up to date with the Parquet results (after an outage, or a run with "
                              "--sink none)")
    writes_results: ClassVar[bool] = True
    mlflow: ClassVar[bool] = True


@dataclass
class UiRequest(SweepRequest):
    command: ClassVar[str] = "ui"
    summary: ClassVar[str] = "the MLflow UI of the sweep's store, on 127.0.0.1 (Ctrl-C stops it)"
    mlflow: ClassVar[bool] = True

    port: int = option("--port", 5000, check=port, help="port on 127.0.0.1, 1-65535 (default: 5000)")


@dataclass
class ListRequest(Request):
    command: ClassVar[str] = "list"
    summary: ClassVar[str] = ("the registered algorithms and environment kinds: their parameters, allowed values, "
                              "defaults and descriptions")

    name: str | None = option(None, help="one algorithm or environment kind (default: all)")


REQUESTS: dict[str, type[Request]] = {cls.command: cls for cls in (
    RunRequest, PlanRequest, VerifyRequest, StatusRequest, ReportRequest, SyncRequest, UiRequest, ListRequest)}


def add_options(parser, cls: type[Request]) -> None:
    """``cls``'s options as arguments of the argparse ``parser`` (the command line's one use of them)."""
    import argparse

    def typed(check):
        def convert(text):
            try:
                return check(text)
            except OptionValueError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
        return convert

    exclusive: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    for field in cls.options():
        meta = field.metadata
        if meta["flag"] is None:
            optional = field.default is None and field.name != "spec"
            parser.add_argument(field.name, help=meta["help"], **({"nargs": "?", "default": None} if optional else {}))
            continue
        target = parser
        if meta["exclusive"]:
            if meta["exclusive"] not in exclusive:
                exclusive[meta["exclusive"]] = parser.add_mutually_exclusive_group()
            target = exclusive[meta["exclusive"]]
        elif meta["group"]:
            if meta["group"] not in groups:
                groups[meta["group"]] = parser.add_argument_group(meta["group"])
            target = groups[meta["group"]]
        kwargs: dict[str, Any] = {"dest": field.name, "help": meta["help"]}
        if meta["action"]:
            kwargs["action"] = meta["action"]
        if meta["action"] != "store_true":
            kwargs["default"] = [] if field.default_factory is list else field.default
            if meta["metavar"]:
                kwargs["metavar"] = meta["metavar"]
            if meta["check"]:
                kwargs["type"] = typed(meta["check"])
            if meta["choices"]:
                kwargs["choices"] = list(meta["choices"])
        target.add_argument(meta["flag"], **kwargs)


def request_of(namespace) -> Request:
    """The request the command line's parsed arguments describe."""
    cls = REQUESTS[namespace.command]
    return cls(**{field.name: getattr(namespace, field.name) for field in cls.options()})
