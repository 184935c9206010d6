"""The command line: ``banditsweep`` (and ``python -m banditsweep``), and the commands it runs.

``main`` is the command: it builds its parser from the request classes of ``options`` (every
command's options declared once, with flag, default, help and check; ``banditsweep.run`` and the
other Python functions build the same requests), checks the arguments and reads the spec with only
light modules imported, so that bad input is refused quickly, hands over to the command's module,
and turns what went wrong into one line and an exit code. ``commands`` holds one module per command
(``run``, ``plan``, ``status``, ``verify``, ``report``, ``sync-mlflow`` and ``ui`` in ``mlflow``,
``list`` in ``listing``), each handed a request and a spec and saying what it finds through
``sweeps.events``; with them the checks of the arguments (``arguments``), what several commands
share (``shared``), ``run``'s progress bar (``progress``) and the exit codes (``commands/__init__``).
The only room of ``sweeps`` that parses a command line or prints. Imports the spec, planning, analysis,
publishing and results rooms; never the Python API, which builds on it. Importing this room
imports none of its modules.
"""
