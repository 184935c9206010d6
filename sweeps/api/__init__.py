"""The Python API: ``banditsweep.run``, ``plan``, ``status``, ``report``, ``verify`` and
``register_algorithm`` / ``register_environment``, re-exported by the package's own ``__init__``.

``functions`` holds them: each is its command's code path in the command line's room (the options
by their Python names, checked as the command line checks them, into the same request objects;
what the command says collected through ``sweeps.events``, ``quiet=True`` printing nothing and
losing nothing), with errors raised instead of turned into exit codes; ``command_results`` the
typed result each returns (``RunResult``, ``PlanResult``, ``StatusResult``, ``ReportResult``,
``VerifyResult``), with the output said as data. The top room: imports the command line's room
(the commands and their requests), the spec, planning and results rooms; no room imports it, and it
prints nothing itself. Importing this room imports none of its modules.
"""
