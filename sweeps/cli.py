"""The ``banditsweep`` command: ``run``, ``plan``, ``status``, ``verify``, ``report``, ``sync-mlflow`` and
``ui`` of a sweep spec, and ``list`` of the registered algorithms and environments.

Exit codes: 0 success; 1 some trials failed (their errors are in the trials table); 2 bad input
(spec, overrides, arguments, dataset) — reported in one line before anything is started or written;
3 the results folder cannot be written (disk full, read-only, permissions), no trial marked failed
for it; 4 (`status`) the result files disagree with each other; 130 interrupted.

This module parses the command line, checks the arguments and reads the spec (only light modules
imported, so that bad input is refused quickly), then hands over to the command's module in
``sweeps.commands``, and turns what went wrong into one line and an exit code.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from pathlib import Path

from banditsweep.core.datasets import DATA_ENV_VAR, DatasetError
from banditsweep.core.registry import PluginError
from banditsweep.sweeps.commands import EXIT_BAD_INPUT, EXIT_INCONSISTENT, EXIT_INTERRUPTED, EXIT_STORE_UNWRITABLE
from banditsweep.sweeps.commands.arguments import (DEFAULT_RESULTS_ROOT, RESULTS_ENV_VAR, check_arguments,
                                                   check_sweep_folder, results_root)
from banditsweep.sweeps import slurm
from banditsweep.sweeps.spec import Sweep, load_sweep
from banditsweep.sweeps.spec_errors import SpecError, one_line, show
from banditsweep.sweeps.selection import parse_selectors, select
from banditsweep.sweeps.spec_overrides import OVERRIDABLE, parse_overrides
from banditsweep.workers import (DamagedResultError, InputError, RayUnreachableError, ResourceRequestError,
                                        StoreWriteError, SweepBusyError)
from banditsweep.workers import exit_now_if_ray_was_abandoned, stop_cleanly_on_sigterm

# Bad input, found before anything is started or written: exit 2 with one line. PluginError: a module
# of $BANDITSWEEP_PLUGINS cannot be imported (found by the first registry lookup, in every command).
INPUT_ERRORS = (SpecError, DatasetError, SweepBusyError, InputError, RayUnreachableError, ResourceRequestError,
                PluginError)
UNWRITABLE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
MAX_WORKERS = 100_000   # trial actors of one run, at most

# command -> (module of sweeps.commands, its function); each is imported only when it runs.
COMMANDS = {"run": ("run", "main"), "status": ("status", "main"), "report": ("report", "main"),
            "sync-mlflow": ("mlflow", "sync"), "ui": ("mlflow", "ui"), "list": ("listing", "main"),
            "plan": ("plan", "main"), "verify": ("verify", "main")}


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
                        help=f"override a top-level spec value: {', '.join(OVERRIDABLE)} (repeatable)")
    parser.add_argument("--only", dest="selectors", action="append", default=[], metavar="KEY=VALUE[,VALUE]",
                        help="only the trials whose algorithm (name or label), environment (kind, name or "
                             "dataset), seed, environment setting or parameter has one of the values, e.g. "
                             "--only algorithm=linucb --only setting=1,2 (repeatable; every key must match)")


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
    changed = run.add_mutually_exclusive_group()
    changed.add_argument("--rerun-changed", action="store_true",
                         help="run finished trials computed by other code again on today's code (the default), "
                              "and also those recorded before trials carried their code (code unknown)")
    changed.add_argument("--keep-changed", action="store_true",
                         help="keep finished trials computed by other code (report marks their cells)")
    run.add_argument("--data-dir", default=None, help=f"dataset directory (default: ${DATA_ENV_VAR}, else "
                                                      "a per-user cache directory)")
    run.add_argument("--sink", dest="sinks", action="append", default=None, metavar="NAME",
                     help="a result sink mirroring the Parquet results (repeatable; default: the spec's "
                          "`sinks:`, else mlflow; `none`: Parquet only); `banditsweep list` names them")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    plan = commands.add_parser("plan", help="what a sweep will cost: trials, rounds, seconds per round, memory, "
                                            "wall time (a short timed probe per cell)")
    _common(plan)
    plan.add_argument("--data-dir", default=None, help=f"dataset directory (default: ${DATA_ENV_VAR}, else "
                                                       "a per-user cache directory)")
    plan.add_argument("--workers", type=_worker_count, default=None,
                      help="trials at once (default: this machine's CPUs / cpus_per_trial)")
    plan.add_argument("--gpus", type=_gpu_count, default=None,
                      help="GPUs of the cluster (for trials that ask for GPUs; 0: a cluster without GPUs)")
    plan.add_argument("--probe-seconds", type=_probe_seconds, default=3.0, help="at most this long timing each cell (default 3)")
    slurm.add_arguments(plan, _worker_count)
    verify = commands.add_parser("verify", help="re-run a sample of the finished trials on today's code and "
                                                "compare every stored value but timings")
    _common(verify)
    verify.add_argument("--sample", type=_sample_size, default=10,
                        help="trials to re-run (default 10; at least one of each code version the store holds)")
    verify.add_argument("--seed", type=_seed, default=None, help="the sample's seed (default: a new one, printed)")
    verify.add_argument("--max-trial-seconds", type=_probe_seconds, default=None, metavar="S",
                        help="sample only trials that took at most S seconds when recorded (of a code version "
                             "with none, its quickest)")
    verify.add_argument("--accept", action="store_true",
                        help="stamp the finished trials of each code version whose sampled trials reproduced as "
                             "computed by today's code (after a change that moves no number)")
    verify.add_argument("--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS, else an "
                                                        "embedded local Ray on 127.0.0.1)")
    verify.add_argument("--max-workers", type=_worker_count, default=None, help="at most this many trial actors")
    verify.add_argument("--data-dir", default=None, help=f"dataset directory (default: ${DATA_ENV_VAR}, else "
                                                         "a per-user cache directory)")
    verify.add_argument("--no-progress", action="store_true", help="no progress bar")
    status = commands.add_parser("status", help="done / failed / pending trial counts")
    _common(status)
    report = commands.add_parser("report", help="tables and figures of a sweep's results")
    _common(report)
    report.add_argument("--band", choices=["ci", "std"], default="ci",
                        help="what the regret figures' bands show: the 95%% confidence interval of the mean (ci, the "
                             "default) or ±1 standard deviation over the seeds (std)")
    chosen = report.add_mutually_exclusive_group()
    chosen.add_argument("--choose-on-seeds", type=_sample_size, default=None, metavar="N",
                        help="choose each cell's grid point on the first N seeds and judge every number on the "
                             "others (default: half of them where a cell has a grid and there are 4 seeds or more)")
    chosen.add_argument("--same-seeds", action="store_true",
                        help="choose and judge on every seed (an optimistic reading: it flatters the chosen points)")
    sync = commands.add_parser("sync-mlflow", help="bring MLflow up to date with the Parquet results "
                                                    "(after an outage, or a run with --sink none)")
    _common(sync)
    ui = commands.add_parser("ui", help="the MLflow UI of the sweep's store, on 127.0.0.1 (Ctrl-C stops it)")
    _common(ui)
    ui.add_argument("--port", type=_port, default=5000, help="port on 127.0.0.1, 1-65535 (default: 5000)")
    listing = commands.add_parser("list", help="the registered algorithms and environment kinds: their parameters, "
                                               "allowed values, defaults and descriptions")
    listing.add_argument("name", nargs="?", default=None, help="one algorithm or environment kind (default: all)")
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


# Longest a plan's probe may time one cell.
MAX_PROBE_SECONDS = 3600.0


def _probe_seconds(text: str) -> float:
    allowed = f"give seconds above 0 and at most {MAX_PROBE_SECONDS:g}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{show(text)} is not a number; {allowed}") from None
    if not 0 < value <= MAX_PROBE_SECONDS:   # NaN fails this too
        raise argparse.ArgumentTypeError(f"{show(text)} is not allowed: {allowed}")
    return value


def _worker_count(text: str) -> int:
    return _whole_number(text, 1, MAX_WORKERS)


def _sample_size(text: str) -> int:
    return _whole_number(text, 1, 100_000)


def _seed(text: str) -> int:
    return _whole_number(text, 0, 2**63 - 1)


def _gpu_count(text: str) -> int:
    return _whole_number(text, 0, MAX_WORKERS)


def _port(text: str) -> int:
    return _whole_number(text, 1, 65535)


def load(args: argparse.Namespace) -> Sweep:
    """The spec with its ``--set`` overrides, validated, and the sweep's folder checked."""
    sweep = select(load_sweep(args.spec, parse_overrides(args.overrides)), parse_selectors(args.selectors))
    check_sweep_folder(args, sweep)
    return sweep


def prepare(args: argparse.Namespace) -> Sweep:
    """The arguments checked and the spec read (what every command but ``list`` does first, the
    command line's and ``banditsweep.run``'s alike)."""
    check_arguments(args)
    return load(args)


def _dispatch(args: argparse.Namespace) -> int:
    module, function = COMMANDS[args.command]
    if args.command == "list":
        return getattr(importlib.import_module(f"banditsweep.sweeps.commands.{module}"), function)(args)
    sweep = prepare(args)   # before the command's module: a bad spec is refused without waiting for Ray's import
    return getattr(importlib.import_module(f"banditsweep.sweeps.commands.{module}"), function)(args, sweep)


def main(argv: list[str] | None = None) -> int:
    # Bad arguments: one line on stderr and SystemExit(2) from the parser.
    args = build_parser().parse_args(argv)
    stop_cleanly_on_sigterm()
    code = _main(args)
    exit_now_if_ray_was_abandoned(code)
    return code


def _main(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted: finished trials are saved; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except StoreWriteError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_STORE_UNWRITABLE
    except DamagedResultError as error:   # a file damaged after it was checked
        print(one_line(f"error: {error}"), file=sys.stderr)
        return EXIT_INCONSISTENT
    except INPUT_ERRORS as error:
        # Bad input: one line naming the file or argument, the key, the value and what is allowed.
        if getattr(args, "debug", False):
            traceback.print_exc()
        limit = getattr(error, "message_limit", None)
        print(one_line(f"error: {error}", limit) if limit else one_line(f"error: {error}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        if not _results_unwritable(args, error):
            raise
        # Found while checking or tidying the results (quarantine, compaction), not while a sweep ran.
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(one_line(f"error: cannot write to {error.filename or 'the results folder'}: {error.strerror}"),
              file=sys.stderr)
        return EXIT_STORE_UNWRITABLE


def _results_unwritable(args: argparse.Namespace, error: OSError) -> bool:
    """Disk full, read-only or no permission, on a file of the results root."""
    if error.errno not in UNWRITABLE_ERRNOS or not error.filename or not hasattr(args, "results"):
        return False
    try:
        return Path(os.fsdecode(error.filename)).resolve().is_relative_to(results_root(args))
    except (OSError, ValueError, TypeError):
        return False


if __name__ == "__main__":  # `ray submit cluster.yaml sweeps/cli.py -- run ...` runs this file as a script
    raise SystemExit(main())
