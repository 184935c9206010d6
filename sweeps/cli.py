"""The ``banditsweep`` command: ``run``, ``status`` and ``report`` of a sweep spec.

Exit codes: 0 success; 1 some trials failed (their errors are in the trials table); 2 bad input
(spec, overrides, arguments, dataset) — reported in one line before anything is started or written;
3 the results folder cannot be written (disk full, read-only, permissions), no trial marked failed
for it; 4 (`status`) the result files disagree with each other; 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sys
import time
from pathlib import Path

from banditsweep.sweeps.spec import SpecError, Sweep, load_sweep, one_line, parse_overrides, show
from banditsweep.workers.signals import stop_cleanly_on_sigterm

EXIT_FAILED_TRIALS = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_STORE_UNWRITABLE = 3   # the results folder cannot be written (disk full, read-only): nothing marked failed
EXIT_INCONSISTENT = 4       # `status`: result files damaged or disagreeing with the journal (named)
UNWRITABLE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)

# One absolute default for results, wherever `run` is started from: a Ray job runs in a temporary
# copy of the submitted folder, so a relative default would write results there and lose them.
# Seconds without a placed actor before `run --no-progress` says it is waiting for nodes.
WAIT_NOTICE_SECONDS = 5.0
RESULTS_ENV_VAR = "BANDITSWEEP_RESULTS"
DEFAULT_RESULTS_ROOT = "~/banditsweep-results"


def results_root(args) -> Path:
    """``--results``, else ``$BANDITSWEEP_RESULTS``, else ``~/banditsweep-results``; absolute."""
    chosen = args.results or os.environ.get(RESULTS_ENV_VAR) or DEFAULT_RESULTS_ROOT
    return Path(chosen).expanduser().resolve()


# Commands that write under the results root (`status` only reads).
WRITING_COMMANDS = ("run", "report", "sync-mlflow")


def _results_source(args) -> str:
    if args.results:
        return "--results"
    return f"${RESULTS_ENV_VAR}" if os.environ.get(RESULTS_ENV_VAR) else f"results root {DEFAULT_RESULTS_ROOT}"


def _first_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _why_not_writable(directory: Path) -> str:
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    except OSError:
        pass
    return "no write permission, or an immutable folder"


def _check_directory(source: str, path: Path, writing: bool, what: str) -> None:
    """``path`` is a directory, or can be made one (its first existing ancestor is a directory we
    may write to); nothing is created here."""
    existing = _first_existing(path)
    shown = str(path) if existing == path else f"{path}: {existing}"
    if not os.path.isdir(existing):
        kind = "a broken symbolic link" if os.path.islink(existing) else "a file"
        raise InputError(f"{source}: {shown} is {kind}, not a directory; {what} must be a directory "
                         f"(or a path that can be created)")
    if writing and not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{source}: {shown} is not writable ({_why_not_writable(existing)}); "
                         f"{what} must be a directory you can write to")


def _check_results_root(args) -> None:
    if args.results == "":
        raise InputError("--results: empty path; give the results directory, e.g. --results ~/banditsweep-results")
    _check_directory(_results_source(args), results_root(args), args.command in WRITING_COMMANDS,
                     "the results root")


def _check_sweep_folder(args, sweep: Sweep) -> None:
    """``<results root>/<sweep>`` is a directory we may write to, if it exists."""
    folder = results_root(args) / sweep.name
    if args.command in WRITING_COMMANDS and os.path.lexists(folder):
        _check_directory(_results_source(args), folder, True, "a sweep's results folder")
    uri = args.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if uri.startswith("sqlite:///"):
        database = Path(uri[len("sqlite:///"):]).expanduser().resolve()
        if database == folder or folder in database.parents:
            raise SpecError(args.spec, "sweep", f"the sweep's folder {folder} would hold the MLflow store {database}; "
                                                f"choose another sweep name or another --mlflow-uri")


# Tracking URI schemes MLflow knows (plugins add their own through the `mlflow.tracking_store`
# entry points); a bare path is a local file store.
TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "file", "databricks")


def _tracking_schemes() -> list[str]:
    from importlib.metadata import entry_points

    return [*TRACKING_SCHEMES, *(entry.name for entry in entry_points(group="mlflow.tracking_store"))]


def _check_tracking_uri(args) -> None:
    """The MLflow tracking URI (``--mlflow-uri`` or ``$MLFLOW_TRACKING_URI``; the default is always
    fine) has a scheme MLflow knows, and a local store's directory exists: nothing is created for it."""
    from urllib.parse import urlsplit

    if args.mlflow_uri == "":
        raise InputError("--mlflow-uri: empty URI; give e.g. http://127.0.0.1:5000 or sqlite:///PATH/mlflow.db")
    uri = args.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return
    source = f"--mlflow-uri {show(uri)}" if args.mlflow_uri else f"$MLFLOW_TRACKING_URI={show(uri)}"
    schemes = _tracking_schemes()
    allowed = ("allowed: http(s)://HOST:PORT, sqlite:///PATH, postgresql://, mysql://, mssql://, file:///PATH, "
               "databricks" + "".join(f", {name}" for name in schemes[len(TRACKING_SCHEMES):]))
    try:
        parts = urlsplit(uri)
        parts.port   # a port that is not a number from 0 to 65535 raises here
    except ValueError as error:
        raise InputError(f"{source}: not a valid URI ({error}); {allowed}") from None
    scheme = parts.scheme.lower()
    base = scheme.split("+", 1)[0]
    if not scheme:
        # A bare word or path would be a file store MLflow refuses: the sweep ran with MLflow left out.
        raise InputError(f"{source}: no scheme (a URI starts with one, e.g. sqlite:///{uri}); {allowed}")
    if base not in schemes and scheme not in schemes:
        raise InputError(f"{source}: unknown scheme {show(scheme)}; {allowed}")
    if base in ("http", "https") and not parts.hostname:
        raise InputError(f"{source}: no host; give e.g. http://127.0.0.1:5000")
    if base in ("http", "https") and parts.port == 0:
        raise InputError(f"{source}: port 0; a port is 1-65535")
    if base == "file" and not _file_store_allowed():
        raise InputError(f"{source}: this MLflow refuses file stores (file:///PATH) unless MLFLOW_ALLOW_FILE_STORE=true; "
                         f"give sqlite:///PATH/mlflow.db, or set MLFLOW_ALLOW_FILE_STORE=true")
    if base == "sqlite":
        if not uri.startswith("sqlite:///") or uri[len("sqlite:///"):] in ("", ":memory:"):
            raise InputError(f"{source}: no database file; give sqlite:///PATH/mlflow.db (an absolute PATH "
                             f"starts with a fourth slash)")
        database = Path(uri[len("sqlite:///"):]).expanduser().resolve()
    elif base in ("", "file"):
        database = Path(urlsplit(uri).path if base == "file" else uri).expanduser().resolve()
    else:
        return
    directory = database.parent
    if directory == results_root(args) and not os.path.lexists(directory):
        return   # the results root, made by the command
    if not os.path.isdir(directory):
        existing = _first_existing(directory)
        what = (f"{existing} is a file, not a directory" if not os.path.isdir(existing)
                else f"directory {directory} does not exist")
        raise InputError(f"{source}: {what}; create it first or choose another location (nothing is created "
                         f"for an explicit tracking URI)")
    if os.path.isdir(database) and base == "sqlite":
        raise InputError(f"{source}: {database} is a directory, not a database file; give sqlite:///PATH/mlflow.db")
    if args.command in WRITING_COMMANDS and not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{source}: {directory} is not writable ({_why_not_writable(directory)})")


def _file_store_allowed() -> bool:
    """Whether the installed MLflow opens a file store (since 3.x only with MLFLOW_ALLOW_FILE_STORE)."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:
        return True   # an MLflow from before the variable: file stores open
    return bool(MLFLOW_ALLOW_FILE_STORE.get())


RAY_ADDRESS_FORMS = ("allowed: HOST:PORT (a Ray head's address, e.g. 127.0.0.1:6379), ray://HOST:PORT (Ray Client), "
                     "auto (the Ray running on this machine) or local (a new Ray here)")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$")


def _ray_address(args) -> str | None:
    """The Ray address a `run` joins: --address, else $RAY_ADDRESS; None: an embedded Ray."""
    return args.address if args.address is not None else (os.environ.get("RAY_ADDRESS") or None)


def _check_address(args) -> None:
    """--address (or $RAY_ADDRESS) is a form Ray accepts and, for a host and port, a head answers
    there: checked before anything is written (Ray itself would retry for minutes, or fail with a
    traceback, after the results folder was locked)."""
    if args.address == "":
        raise InputError(f"--address: empty address; {RAY_ADDRESS_FORMS}")
    address = _ray_address(args)
    if not address or address == "local":
        return
    source = f"--address {show(address)}" if args.address else f"$RAY_ADDRESS={show(address)}"
    if address == "auto":
        try:
            from ray._private.services import get_ray_address_from_environment

            found = get_ray_address_from_environment("auto", None)
        except (ImportError, AttributeError):
            return   # Ray's lookup is private: without it, ray.init reports what it finds
        except ConnectionError:
            found = None
        if not found:
            raise InputError(f"{source}: no Ray is running on this machine (start one with `ray start --head`), "
                             f"or leave --address out to run on an embedded Ray")
        address = found
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    valid_host = bool(host) and (_HOST.match(host) is not None or _is_ip(host))
    if "://" in rest or not sep or not valid_host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"{source}: not a Ray address; {RAY_ADDRESS_FORMS}")
    from banditsweep.workers.dispatcher import _check_reachable

    _check_reachable(f"{'[' + host + ']' if ':' in host else host}:{port}")


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _check_data_dir(source: str, value: str) -> Path:
    directory = Path(value).expanduser().resolve()
    if os.path.lexists(directory) and not directory.is_dir():
        raise InputError(f"{source}: {directory} is a file, not a directory; give the directory that holds (or will "
                         f"hold) the <dataset>.parquet files")
    return directory


def _check_arguments(args) -> None:
    """Arguments found wrong before the spec is read or anything is written (exit 2)."""
    _check_results_root(args)
    uses_mlflow = args.command in ("report", "sync-mlflow", "ui") or (
        args.command == "run" and [name.lower() for name in (args.sinks or [])] != ["none"])
    if uses_mlflow:
        _check_tracking_uri(args)
    if args.command == "run" and args.data_dir == "":
        raise InputError("--data-dir: empty path; give the dataset directory")
    if args.command == "run":
        _check_address(args)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block): exit code 2."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, one_line(f"error: {self.prog}: {message} (see {self.prog} --help)") + "\n")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec (YAML), e.g. sweeps/quickstart.yaml")
    parser.add_argument("--debug", action="store_true", help="with an error, also print its traceback")
    parser.add_argument("--results", default=None,
                        help=f"results root (default: ${RESULTS_ENV_VAR}, else {DEFAULT_RESULTS_ROOT})")
    parser.add_argument("--mlflow-uri", default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<results root>/mlflow.db)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a top-level spec value: horizon, seeds, log_every, sweep, "
                             "resources.cpus_per_trial|gpus_per_trial|batch_trials (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="banditsweep", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run every trial of a spec not yet finished")
    _common(run)
    run.add_argument("--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS, else an "
                                                     "embedded local Ray on 127.0.0.1)")
    run.add_argument("--max-workers", type=_worker_count, default=None,
                     help="at most this many trial actors (default: as many as the cluster can hold)")
    run.add_argument("--retry-failed", action="store_true", help="also rerun trials recorded as failed")
    run.add_argument("--data-dir", default=None, help="dataset directory (default: $BANDITSWEEP_DATA, else "
                                                      "a per-user cache directory)")
    run.add_argument("--sink", dest="sinks", action="append", default=None, metavar="NAME",
                     help="a result sink mirroring the Parquet results (repeatable; default: the spec's "
                          "`sinks:`, else mlflow; `none`: Parquet only); `banditsweep list` names them")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    status = commands.add_parser("status", help="done / failed / pending trial counts")
    _common(status)
    report = commands.add_parser("report", help="tables and figures of a sweep's results")
    _common(report)
    sync = commands.add_parser("sync-mlflow", help="bring MLflow up to date with the Parquet results "
                                                    "(after an outage, or a run with --sink none)")
    _common(sync)
    ui = commands.add_parser("ui", help="the MLflow UI of the sweep's store, on 127.0.0.1 (Ctrl-C stops it)")
    _common(ui)
    ui.add_argument("--port", type=_port, default=5000, help="port on 127.0.0.1, 1-65535 (default: 5000)")
    commands.add_parser("list", help="the registered algorithms and environment kinds")
    return parser


def _whole_number(text: str, low: int, high: int) -> int:
    allowed = f"give a whole number from {low} to {high}"
    if len(text.strip()) > 20:
        raise argparse.ArgumentTypeError(f"{show(text)} is not allowed: {allowed}")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a whole number; {allowed}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: {allowed}")
    return value


MAX_WORKERS = 100_000   # trial actors of one run, at most


def _worker_count(text: str) -> int:
    return _whole_number(text, 1, MAX_WORKERS)


def _port(text: str) -> int:
    return _whole_number(text, 1, 65535)


def _check_tracking_server(uri: str) -> None:
    """A tracking server that does not answer is a clear error in seconds, not minutes of retries."""
    if not uri.startswith(("http://", "https://")):
        return
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5).close()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise InputError(f"--mlflow-uri: the MLflow tracking server at {one_line(uri, 200)} does not answer ({reason}); start it, "
                         f"or run with --sink none (Parquet only) and `banditsweep sync-mlflow SPEC` later") from None


class InputError(ValueError):
    """Bad input found before anything runs (exit 2)."""


def _load(args) -> Sweep:
    sweep = load_sweep(args.spec, parse_overrides(args.overrides))
    _check_sweep_folder(args, sweep)
    return sweep


def _store(args, sweep: Sweep):
    from banditsweep.workers.store import SweepStore

    return SweepStore.for_sweep(results_root(args), sweep.name)


def _print_results(store, sweep: Sweep) -> None:
    from banditsweep.sweeps.report import finished_trials, markdown_table, summarise

    trials = finished_trials(store, sweep.trials)
    if trials.empty:
        print("no finished trials yet")
        return
    summary = summarise(trials, _label_order(sweep), _env_order(sweep))
    print(f"\nMean final cumulative regret (best grid point per cell, {sweep.name}):")
    print(markdown_table(summary.mean, 1))


def _label_order(sweep: Sweep) -> list[str]:
    return list(dict.fromkeys(t.label for t in sweep.trials))


def _env_order(sweep: Sweep) -> list[str]:
    return list(dict.fromkeys(t.environment for t in sweep.trials))


def _ensure_data(args, sweep: Sweep) -> dict[str, str]:
    """Resolve the data directory and make sure every dataset the sweep needs is present."""
    env_vars = {}
    if args.data_dir:
        os.environ["BANDITSWEEP_DATA"] = str(_check_data_dir("--data-dir", args.data_dir))
    elif os.environ.get("BANDITSWEEP_DATA"):
        _check_data_dir("$BANDITSWEEP_DATA", os.environ["BANDITSWEEP_DATA"])
    if os.environ.get("BANDITSWEEP_DATA"):
        env_vars["BANDITSWEEP_DATA"] = os.environ["BANDITSWEEP_DATA"]
    horizons: dict[str, int] = {}
    for trial in sweep.trials:
        if trial.spec.environment["kind"] == "classification":
            name = trial.spec.environment["dataset"]
            horizons[name] = max(horizons.get(name, 0), trial.spec.horizon)
    if horizons:
        import pyarrow.parquet as pq

        from banditsweep.core.datasets import DatasetError
        from banditsweep.sweeps.datasets import ensure_dataset

        for name, horizon in horizons.items():
            path = ensure_dataset(name)
            rows = pq.ParquetFile(path).metadata.num_rows
            if horizon > rows:
                # Rows are drawn without replacement (SPEC 1.2): T cannot exceed the dataset.
                raise DatasetError(f"{args.spec}: horizon {horizon} exceeds the {rows} rows of {name} ({path}); "
                                   f"use a horizon <= {rows} for this dataset (e.g. an environment `horizon:`)")
    if os.environ.get("BANDITSWEEP_PLUGINS"):
        env_vars["BANDITSWEEP_PLUGINS"] = os.environ["BANDITSWEEP_PLUGINS"]
    return env_vars


def cmd_run(args) -> int:
    sweep = _load(args)   # first: a bad spec is refused without waiting for MLflow's import
    env_vars = _ensure_data(args, sweep)
    sinks = _sink_names(args, sweep)
    from banditsweep.workers.mlflow_sink import resolve_tracking_uri

    tracking_uri = resolve_tracking_uri(args.mlflow_uri, results_root(args))
    if "mlflow" in sinks:
        _check_tracking_server(tracking_uri)
    _check_fits(args, sweep)
    with _store(args, sweep).exclusive():
        return _run_locked(args, sweep, env_vars, sinks, tracking_uri)


def _check_fits(args, sweep: Sweep) -> None:
    """Every trial fits the node it would run on, found before Ray starts or anything is written:
    its memory (core.memory's estimate) within the largest node's (this machine's, for an embedded
    Ray and for a cluster, whose nodes are not known before joining it), and on an embedded Ray the
    CPUs and GPUs a trial (or a sharded trial's shards together) asks for within this machine's."""
    from banditsweep.core.memory import gib, trial_footprint
    from banditsweep.workers.dispatcher import local_node

    node = local_node()
    address = _ray_address(args)
    where = "this machine" if not address or address == "local" else "this machine (the cluster's nodes are not known before joining it)"
    estimates: dict = {}
    for trial in sweep.trials:
        spec = trial.spec
        key = (spec.algorithm, repr(spec.params), repr(spec.environment), spec.horizon, trial.shards)
        if key in estimates:
            continue
        parts = estimates[key] = trial_footprint(spec, trial.shards)
        total = sum(parts.values())
        if total > node["memory"]:
            detail = ", ".join(f"{name} {gib(size)}" for name, size in parts.items())
            raise InputError(f"{args.spec}: trial {trial.run_name!r} (horizon {spec.horizon}) needs an estimated "
                             f"{gib(total)} of memory ({detail}), but the largest node, {where}, has "
                             f"{gib(node['memory'])}; lower the horizon or the sizes (arms, dim, width, domain), or "
                             f"split the domain over shards")
    if address and address != "local":
        return
    resources = sweep.spec.resources
    asked = {"CPU": resources.cpus_per_trial, "GPU": resources.gpus_per_trial or 0.0}
    for name, value in asked.items():
        if value > node[name]:
            key = "cpus_per_trial" if name == "CPU" else "gpus_per_trial"
            raise InputError(f"{args.spec}: resources.{key}: each trial asks for {value:g} {name}, but the embedded "
                             f"Ray on this machine has {node[name]:g} {name}; allowed: at most {node[name]:g} (or run "
                             f"on a cluster with --address)")
    for trial in sweep.trials:
        if not trial.shards:
            continue
        cpus, gpus = trial.shards * resources.cpus_per_shard, trial.shards * resources.gpus_per_shard
        if cpus > node["CPU"] or gpus > node["GPU"]:
            raise InputError(f"{args.spec}: resources.cpus_per_shard: a sharded trial ({trial.run_name}) asks for "
                             f"{trial.shards} shards of {resources.cpus_per_shard:g} CPU and "
                             f"{resources.gpus_per_shard:g} GPU, but the embedded Ray on this machine has "
                             f"{node['CPU']:g} CPU and {node['GPU']:g} GPU; lower resources.cpus_per_shard (shards may "
                             f"share a CPU, e.g. 0.5), or run on a cluster with --address")


def _sink_names(args, sweep: Sweep) -> list[str]:
    """--sink, else the spec's ``sinks:``, else the default; each must be a registered sink."""
    from banditsweep.workers.sinks import DEFAULT_SINKS, sink_names

    names = args.sinks or sweep.spec.sinks or list(DEFAULT_SINKS)
    if names == ["none"]:
        return []
    known = sink_names()
    for name in names:
        if name not in known:
            source = "--sink" if args.sinks else f"{args.spec}: sinks"
            raise SpecError(source, name, f"unknown sink; allowed: {', '.join(known)} (or none alone)")
    return list(dict.fromkeys(names))


def _spec_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def _source_commit() -> str:
    """The git commit of the code that runs (with ``+dirty`` when it has changes), where it is a
    git checkout; else the installed version."""
    import subprocess

    import banditsweep

    package = Path(banditsweep.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(package), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    if commit:
        return commit + ("+dirty" if dirty else "")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"banditsweep {version('banditsweep')}"
    except PackageNotFoundError:
        return ""


def _verified(store, sweep: Sweep):
    """Check the result files, say what was wrong (damaged files are quarantined, trials without
    their results run again) and return the health report."""
    health = store.verify(planned=[trial.trial_id for trial in sweep.trials])
    for line in health.quarantined:
        print(f"warning: damaged result file {line}", file=sys.stderr)
    if health.missing_results:
        print(f"warning: {len(health.missing_results)} finished trial(s) have lost their per-round results; "
              "`run` runs them again", file=sys.stderr)
    return health


def _run_locked(args, sweep: Sweep, env_vars: dict[str, str], sinks: list[str], tracking_uri: str) -> int:
    from banditsweep.workers.dispatcher import Job, RunOptions, run_sweep
    from banditsweep.workers.record import FAILED, FINISHED
    from banditsweep.workers.sinks import SinkContext, open_sinks
    from banditsweep.workers.store import TrialsTable

    store = _store(args, sweep)
    health = _verified(store, sweep)
    journal = store.journal()
    state = {trial_id: record.status for trial_id, record in journal.items()
             if trial_id not in health.missing_results}
    skip = {FINISHED} if args.retry_failed else {FINISHED, FAILED}
    pending = [t for t in sweep.trials if state.get(t.trial_id) not in skip]
    finished = sum(1 for t in sweep.trials if state.get(t.trial_id) == FINISHED)
    failed_before = sum(1 for t in sweep.trials if state.get(t.trial_id) == FAILED)
    print(f"{sweep.name}: {len(sweep.trials)} trials, {finished} finished, {failed_before} failed, "
          f"{len(pending)} to run")
    if not pending:
        # Bring the trials table and the sinks up to date with the journal (a crash may have left
        # either behind), then show the results.
        store.compact()
        TrialsTable(store, journal).flush()
        context = SinkContext(sweep.name, str(store.root.parent), tracking_uri)
        opened, counts, errors = open_sinks(sinks, context, journal, [])
        for error in errors:
            print(f"warning: {error}", file=sys.stderr)
        if counts.get("rebuilt_runs"):
            print(f"restored {counts['rebuilt_runs']} MLflow runs from the Parquet results")
        for sink in opened:
            sink.close("FINISHED", {})
        _print_results(store, sweep)
        return EXIT_FAILED_TRIALS if failed_before else 0
    resources = sweep.spec.resources
    options = RunOptions(results_root=str(store.root.parent), tracking_uri=tracking_uri, sinks=sinks,
                         cpus_per_trial=resources.cpus_per_trial, gpus_per_trial=resources.gpus_per_trial,
                         batch_trials=resources.batch_trials, max_workers=args.max_workers,
                         checkpoint_every=sweep.spec.checkpoint_every, spec_path=args.spec,
                         spec_text=_spec_text(args.spec), source_commit=_source_commit(),
                         address=args.address, env_vars=env_vars, cpus_per_shard=resources.cpus_per_shard,
                         gpus_per_shard=resources.gpus_per_shard)
    jobs = [Job(spec=t.spec, record=_record(sweep, t), shards=t.shards) for t in pending]
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        # In a terminal the bar redraws in place; in a log (a Ray job's, a batch scheduler's) every
        # redraw is a line, so there it updates at most every 30 s.
        interactive = sys.stderr.isatty()
        bar = tqdm(total=len(jobs), unit="trial", desc=sweep.name, dynamic_ncols=True,
                   mininterval=0.1 if interactive else 30.0, maxinterval=10.0 if interactive else 300.0)

    shown: dict = {"state": None, "messages": set()}

    def show(progress) -> None:
        for message in progress.messages:
            if message not in shown["messages"]:
                shown["messages"].add(message)
                (bar.write if bar is not None else print)(message)
        if bar is None:
            # Without a bar, still say when the run has waited a while for actors no node can place
            # yet (starting an actor takes a second or two; that is not worth a line).
            waiting = progress.waiting_actors if not progress.actors else 0
            if not waiting:
                shown.pop("waiting_since", None)
            elif time.monotonic() - shown.setdefault("waiting_since", time.monotonic()) > WAIT_NOTICE_SECONDS \
                    and shown.get("said_waiting") != waiting:
                shown["said_waiting"] = waiting
                print(f"waiting for {waiting} {progress.device} actor(s): no node can place them yet", flush=True)
            return
        state = (progress.done, progress.failed, progress.running, progress.actors, progress.waiting_actors)
        if state == shown["state"]:
            return
        shown["state"] = state
        bar.n = progress.done + progress.failed
        postfix = {"done": progress.done, "failed": progress.failed, "running": progress.running,
                   "actors": progress.actors}
        if progress.waiting_actors:
            postfix["waiting for"] = f"{progress.waiting_actors} {progress.device} actor(s)"
        bar.set_postfix(postfix, refresh=False)
        if interactive:
            bar.refresh()
        else:
            bar.update(0)   # drawn only when mininterval has passed

    try:
        outcome = run_sweep(sweep.name, jobs, options, show)
    finally:
        if bar is not None:
            bar.close()
    sharded = f" and {outcome.sharded} sharded trial(s) over shard actors" if outcome.sharded else ""
    print(f"{outcome.finished} finished, {outcome.failed} failed in {outcome.seconds:.1f} s "
          f"on {outcome.workers} {outcome.device} worker(s){sharded}"
          + "".join(f"; {note}" for note in outcome.mirror.notes))
    for error in outcome.mirror.errors[:5]:
        print(f"warning: result sink: {error}", file=sys.stderr)
    for note in outcome.notes:
        print(f"warning: {note}", file=sys.stderr)
    print(f"results: {store.root}")
    _print_results(store, sweep)
    import shlex

    options = "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in
                      [("--results", args.results), ("--mlflow-uri", args.mlflow_uri),
                       *(("--set", item) for item in args.overrides or [])] if value is not None)
    print(f"\nnext: `banditsweep report {shlex.quote(args.spec)}{options}` for tables and figures, "
          f"`banditsweep ui {shlex.quote(args.spec)}{options}` to compare runs in MLflow; in Python: "
          f"`trials, curves = banditsweep.load({str(store.root.parent)!r}, {sweep.name!r})`")
    failures = store.read_trials()
    failures = failures[failures["trial_id"].isin({t.trial_id for t in sweep.trials}) & (failures["status"] == FAILED)]
    for row in failures.head(5).itertuples():
        print(f"failed: {row.label} | {row.environment} | seed {row.seed}: {row.error}", file=sys.stderr)
    return EXIT_FAILED_TRIALS if len(failures) else 0


def _record(sweep: Sweep, trial):
    from banditsweep.workers.record import TrialRecord

    spec = trial.spec
    return TrialRecord(trial_id=trial.trial_id, sweep=sweep.name, algorithm=spec.algorithm, label=trial.label,
                       environment=trial.environment, seed=spec.seed, horizon=spec.horizon, params=spec.params,
                       environment_config=spec.environment, log_every=sweep.spec.log_every,
                       run_name=trial.run_name, group=trial.group)


def cmd_sync_mlflow(args) -> int:
    """Rebuild the MLflow runs the Parquet results have and MLflow lacks (idempotent)."""
    from banditsweep.workers.mlflow_sink import resolve_tracking_uri
    from banditsweep.workers.sinks import SinkContext, open_sinks

    sweep = _load(args)
    store = _store(args, sweep)
    tracking_uri = resolve_tracking_uri(args.mlflow_uri, results_root(args))
    _check_tracking_server(tracking_uri)
    with store.exclusive():
        journal = store.journal()
        context = SinkContext(sweep.name, str(store.root.parent), tracking_uri, command="sync-mlflow")
        opened, counts, warnings = open_sinks(["mlflow"], context, journal, [])
        if not opened:
            print(f"error: {warnings[0]}", file=sys.stderr)
            return EXIT_FAILED_TRIALS
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        note = opened[0].close("FINISHED", {})
    print(f"{sweep.name}: {len(journal)} trials in the Parquet results; {counts.get('rebuilt_runs', 0)} MLflow runs "
          f"rebuilt, {counts.get('deleted_runs', 0)} stale runs deleted" + (f"; {note}" if note else ""))
    return 0


def cmd_ui(args) -> int:
    """Start ``mlflow ui`` on loopback for the sweep's tracking store and say where to look."""
    import subprocess

    from banditsweep.workers.mlflow_sink import resolve_tracking_uri

    sweep = _load(args)
    tracking_uri = resolve_tracking_uri(args.mlflow_uri, results_root(args))
    if tracking_uri.startswith(("http://", "https://")):
        print(f"{sweep.name}: the tracking server at {tracking_uri} serves the UI itself: open {tracking_uri}")
        return 0
    url = f"http://127.0.0.1:{args.port}"
    experiment = _experiment_id(tracking_uri, sweep.name)
    where = f"{url}/#/experiments/{experiment}" if experiment else url
    print(f"{sweep.name}: MLflow UI of {tracking_uri} at {where} (the \"Model training\" view shows the "
          "regret curves; runs with the same `group` tag are the seeds of one cell). Ctrl-C stops it.", flush=True)
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri,
                               "--host", "127.0.0.1", "--port", str(args.port)], start_new_session=True)
    try:
        return server.wait()
    except KeyboardInterrupt:   # Ctrl-C or SIGTERM: the way to stop the UI
        print(f"{sweep.name}: MLflow UI stopped", file=sys.stderr)
        return 0
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)   # the UI and the workers it started, nothing else
            server.wait(timeout=30)


def _experiment_id(tracking_uri: str, sweep: str) -> str | None:
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mlflow_sink import store_setup_lock

    with store_setup_lock(tracking_uri) as note:   # a new SQLite store gets its tables when the client opens it
        experiment = MlflowClient(tracking_uri).get_experiment_by_name(sweep)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    return experiment.experiment_id if experiment is not None else None


def cmd_status(args) -> int:
    import pandas as pd

    from banditsweep.workers.record import FAILED, FINISHED

    sweep = _load(args)
    store = _store(args, sweep)
    health = _verified(store, sweep) if store.root.is_dir() else None
    journal = store.journal()
    rows = []
    for trial in sweep.trials:
        state = journal[trial.trial_id].status if trial.trial_id in journal else None
        if health is not None and trial.trial_id in health.missing_results:
            state = None
        rows.append({"algorithm": trial.label, "environment": trial.environment,
                     "done": state == FINISHED, "failed": state == FAILED, "pending": state not in (FINISHED, FAILED)})
    frame = pd.DataFrame(rows)
    table = frame.groupby(["algorithm", "environment"], sort=False)[["done", "failed", "pending"]].sum()
    from banditsweep.sweeps.report import markdown_table

    print(markdown_table(table.reset_index(), index=False))
    totals = frame[["done", "failed", "pending"]].sum()
    print(f"\n{sweep.name}: {len(frame)} trials: {totals['done']} done, {totals['failed']} failed, "
          f"{totals['pending']} pending")
    if health is None:
        return 0
    from banditsweep.workers.consistency import check

    counts = check(store.root, journal)
    print(f"verified: {counts.summary()}")
    for note in counts.notes:
        print(f"note: {note}")
    for problem in counts.problems:
        print(f"inconsistent: {problem}", file=sys.stderr)
    return EXIT_INCONSISTENT if counts.problems or health.quarantined else 0


def cmd_report(args) -> int:
    from banditsweep.sweeps.report import finished_trials, log_report_to_mlflow, markdown_table, summarise, write_report
    from banditsweep.workers.mlflow_sink import resolve_tracking_uri

    sweep = _load(args)
    store = _store(args, sweep)
    if store.root.is_dir():
        _verified(store, sweep)
    trials = finished_trials(store, sweep.trials)
    if trials.empty:
        print(f"{sweep.name}: no finished trials under {store.root}; run `banditsweep run {args.spec}` first",
              file=sys.stderr)
        return EXIT_FAILED_TRIALS
    summary = summarise(trials, _label_order(sweep), _env_order(sweep))
    files = write_report(store, summary, sweep.name)
    run_id = log_report_to_mlflow(resolve_tracking_uri(args.mlflow_uri, results_root(args)), store, store.report_dir)
    print(f"Mean final cumulative regret ({sweep.name}, {len(trials)} finished trials):")
    print(markdown_table(summary.mean, 1))
    print(f"\nStandard deviation:\n{markdown_table(summary.std, 2)}")
    print(f"\nwrote {len(files)} files to {store.report_dir}"
          + (f"; logged to MLflow run {run_id}" if run_id else ""))
    return 0


def cmd_list(args) -> int:
    """Every registered algorithm and environment kind with its parameters and their defaults."""
    from banditsweep.core import registry

    import typing

    def kind(annotation) -> str:
        if typing.get_origin(annotation) is typing.Literal:
            return "|".join(str(a) for a in typing.get_args(annotation))
        return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")

    def describe(model) -> str:
        fields = []
        for name, field in model.model_fields.items():
            default = "required" if field.is_required() else repr(field.default)
            fields.append(f"{name}={default} ({kind(field.annotation)})")
        return ", ".join(fields) or "(no parameters)"

    print("algorithms:")
    for name in registry.algorithm_names():
        policy = registry.algorithm_class(name)
        print(f"  {name} [{', '.join(sorted(policy.supports))}]: {describe(policy.Params)}")
    print("environment kinds:")
    for name in registry.environment_names():
        environment = registry.environment_class(name)
        print(f"  {name} [{environment.interaction}]: {describe(environment.Config)}")
    from banditsweep.workers.sinks import DEFAULT_SINKS, sink_names

    print(f"result sinks (default: {', '.join(DEFAULT_SINKS)}): {', '.join(sink_names())}")
    from banditsweep.core.kernel_shards import SHARDABLE_ALGORITHMS, SHARDABLE_ENVIRONMENTS

    print(f"sharded trials (shards: N or shard_points: P on an environment or algorithm entry): "
          f"{', '.join(SHARDABLE_ALGORITHMS)} on {', '.join(SHARDABLE_ENVIRONMENTS)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    # Bad arguments: one line on stderr and SystemExit(2) from the parser.
    args = build_parser().parse_args(argv)
    handler = {"run": cmd_run, "status": cmd_status, "report": cmd_report, "list": cmd_list,
               "sync-mlflow": cmd_sync_mlflow, "ui": cmd_ui}[args.command]
    stop_cleanly_on_sigterm()
    try:
        if args.command != "list":
            _check_arguments(args)
        return handler(args)
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted: finished trials are saved; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _store_errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_STORE_UNWRITABLE
    except _damaged_errors() as error:   # a file damaged after it was checked
        print(one_line(f"error: {error}"), file=sys.stderr)
        return EXIT_INCONSISTENT
    except _input_errors() as error:
        # Bad input: one line naming the file or argument, the key, the value and what is allowed.
        if getattr(args, "debug", False):
            import traceback

            traceback.print_exc()
        print(one_line(f"error: {error}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        if not _results_unwritable(args, error):
            raise
        # Found while checking or tidying the results (quarantine, compaction), not while a sweep ran.
        if getattr(args, "debug", False):
            import traceback

            traceback.print_exc()
        print(one_line(f"error: cannot write to {error.filename or 'the results folder'}: {error.strerror}"),
              file=sys.stderr)
        return EXIT_STORE_UNWRITABLE


def _results_unwritable(args, error: OSError) -> bool:
    """Disk full, read-only or no permission, on a file of the results root."""
    if error.errno not in UNWRITABLE_ERRNOS or not error.filename or not hasattr(args, "results"):
        return False
    try:
        return Path(os.fsdecode(error.filename)).resolve().is_relative_to(results_root(args))
    except (OSError, ValueError, TypeError):
        return False


def _store_errors() -> tuple[type[BaseException], ...]:
    from banditsweep.workers.errors import StoreWriteError

    return (StoreWriteError,)


def _damaged_errors() -> tuple[type[BaseException], ...]:
    from banditsweep.workers.errors import DamagedResultError

    return (DamagedResultError,)


def _input_errors() -> tuple[type[BaseException], ...]:
    from banditsweep.core.datasets import DatasetError
    from banditsweep.workers.errors import RayUnreachableError, ResourceRequestError
    from banditsweep.workers.store import SweepBusyError

    return (SpecError, DatasetError, SweepBusyError, InputError, RayUnreachableError, ResourceRequestError)


if __name__ == "__main__":  # `ray submit cluster.yaml sweeps/cli.py -- run ...` runs this file as a script
    raise SystemExit(main())
