"""The ``banditsweep`` commands, one module each: ``run``, ``plan``, ``status``, ``verify``, ``report``,
``sync-mlflow`` and ``ui`` (``mlflow``), ``list`` (``listing``). Each module's ``main(args, sweep)`` calls the workers
layer for what the store, Ray and the sinks do and prints what the user reads; the command line
itself (parsing, the checks of the arguments and the exit codes of errors) is ``sweeps.cli.main``.

The exit codes a command returns are named here, where every command and the CLI see them.
"""

from banditsweep.workers import signals

EXIT_FAILED_TRIALS = 1
EXIT_BAD_INPUT = 2
EXIT_STORE_UNWRITABLE = 3   # the results folder cannot be written (disk full, read-only): nothing marked failed
EXIT_INCONSISTENT = 4       # `status`: result files damaged or disagreeing with the journal (named)
EXIT_INTERRUPTED = signals.EXIT_INTERRUPTED   # Ctrl-C or SIGTERM (also when the stop's deadline ends it)

# The one table of what every command's exit code means (docs/commands.md's "Exit codes" and `banditsweep --help`
# say the same; tests/sweeps/cli/test_exit_codes.py holds them together).
EXIT_CODES = {
    0: "done",
    EXIT_FAILED_TRIALS: "some trials failed (their errors are in the trials table)",
    EXIT_BAD_INPUT: "bad input (spec, arguments, dataset, an MLflow server that does not answer), found before "
                    "anything is started or written",
    EXIT_STORE_UNWRITABLE: "the results folder stopped taking writes (disk full, read-only, permissions)",
    EXIT_INCONSISTENT: "`status` found result files damaged or disagreeing with the journal, `verify` a re-run "
                       "trial that differs, or `report` left damaged files out",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C or SIGTERM): finished trials are saved, the same command resumes",
}
