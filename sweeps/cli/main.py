"""The ``banditsweep`` command: ``run``, ``plan``, ``status``, ``verify``, ``report``, ``sync-mlflow`` and
``ui`` of a sweep spec, and ``list`` of the registered algorithms and environments.

Exit codes (sweeps.cli.commands.EXIT_CODES): 0 done; 1 some trials failed (their errors are in the trials
table); 2 bad input (spec, overrides, arguments, dataset) — reported in one line before anything is
started or written; 3 the results folder cannot be written (disk full, read-only, permissions), no
trial marked failed for it; 4 result files damaged or disagreeing (`status`), a re-run that differs
(`verify`); 130 interrupted.

This module parses the command line, checks the arguments and reads the spec (only light modules
imported, so that bad input is refused quickly), then hands over to the command's module in
``sweeps.cli.commands``, and turns what went wrong into one line and an exit code.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from pathlib import Path

from banditsweep.core.neural.datasets import DatasetError
from banditsweep.core.engine.registry import PluginError
from banditsweep.sweeps.cli.commands import EXIT_BAD_INPUT, EXIT_INCONSISTENT, EXIT_INTERRUPTED, EXIT_STORE_UNWRITABLE
from banditsweep.sweeps.cli.commands.arguments import check_arguments, check_sweep_folder, results_root
from banditsweep.sweeps.cli.options import REQUESTS, Request, SweepRequest, add_options, request_of
from banditsweep.sweeps.spec.model import Sweep, load_sweep
from banditsweep.sweeps.spec.errors import SpecError, one_line
from banditsweep.sweeps.spec.selection import parse_selectors, select
from banditsweep.sweeps.spec.overrides import parse_overrides
from banditsweep.workers import (DamagedResultError, InputError, RayUnreachableError, ResourceRequestError,
                                        StoreWriteError, SweepBusyError)
from banditsweep.workers import exit_now_if_ray_was_abandoned, stop_cleanly_on_sigterm

# Bad input, found before anything is started or written: exit 2 with one line. PluginError: a module
# of $BANDITSWEEP_PLUGINS cannot be imported (found by the first registry lookup, in every command).
INPUT_ERRORS = (SpecError, DatasetError, SweepBusyError, InputError, RayUnreachableError, ResourceRequestError,
                PluginError)
UNWRITABLE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)

# What `banditsweep --help` says above the commands: whole sentences, not the docstring's first lines
# (a docstring is None under `python -OO`, and its markup is not for a terminal).
DESCRIPTION = ("Run every trial of a bandit experiment (each algorithm, environment, seed and grid point of a "
               "sweep spec) on Ray, keep the results in Parquet and MLflow, and turn them into the tables and "
               "figures a paper needs. Start with `banditsweep plan SPEC` (what it will cost), then "
               "`banditsweep run SPEC`; `banditsweep COMMAND --help` gives a command's options.")


def epilog() -> str:
    """The exit codes, as sweeps.cli.commands.EXIT_CODES names them."""
    from banditsweep.sweeps.cli.commands import EXIT_CODES

    return "exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()) + "."


# command -> (module of sweeps.cli.commands, its function); each is imported only when it runs.
COMMANDS = {"run": ("run", "main"), "status": ("status", "main"), "report": ("report", "main"),
            "sync-mlflow": ("mlflow", "sync"), "ui": ("mlflow", "ui"), "list": ("listing", "main"),
            "plan": ("plan", "main"), "verify": ("verify", "main")}


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block): exit code 2."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, one_line(f"error: {self.prog}: {message} (see {self.prog} --help)") + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line of every request of :mod:`banditsweep.sweeps.cli.options` (their one declaration)."""
    parser = _Parser(prog="banditsweep", description=DESCRIPTION, epilog=epilog())
    commands = parser.add_subparsers(dest="command", required=True)
    for name, request in REQUESTS.items():
        add_options(commands.add_parser(name, help=request.summary), request)
    return parser


def load(args: SweepRequest) -> Sweep:
    """The spec with its ``--set`` overrides, validated, and the sweep's folder checked."""
    sweep = select(load_sweep(args.spec, parse_overrides(args.overrides)), parse_selectors(args.selectors))
    check_sweep_folder(args, sweep)
    return sweep


def prepare(args: SweepRequest) -> Sweep:
    """The arguments checked and the spec read (what every command but ``list`` does first, the
    command line's and ``banditsweep.run``'s alike)."""
    check_arguments(args)
    return load(args)


def _dispatch(args: Request) -> int:
    module, function = COMMANDS[args.command]
    if args.command == "list":
        return getattr(importlib.import_module(f"banditsweep.sweeps.cli.commands.{module}"), function)(args)
    sweep = prepare(args)   # before the command's module: a bad spec is refused without waiting for Ray's import
    return getattr(importlib.import_module(f"banditsweep.sweeps.cli.commands.{module}"), function)(args, sweep)


def main(argv: list[str] | None = None) -> int:
    # Bad arguments: one line on stderr and SystemExit(2) from the parser.
    args = request_of(build_parser().parse_args(argv))
    stop_cleanly_on_sigterm()
    code = _main(args)
    exit_now_if_ray_was_abandoned(code)
    return code


def _main(args: Request) -> int:
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


def _results_unwritable(args: Request, error: OSError) -> bool:
    """Disk full, read-only or no permission, on a file of the results root."""
    if error.errno not in UNWRITABLE_ERRNOS or not error.filename or not hasattr(args, "results"):
        return False
    try:
        return Path(os.fsdecode(error.filename)).resolve().is_relative_to(results_root(args))
    except (OSError, ValueError, TypeError):
        return False


if __name__ == "__main__":  # `ray submit cluster.yaml sweeps/cli/main.py -- run ...` runs this file as a script
    raise SystemExit(main())
