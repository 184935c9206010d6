"""The user's side: sweep specs, what a run will cost, a sweep's results and report, the command line
and the Python API, in seven rooms by subject, and the YAML sweeps of both papers.

Rooms, each a sub-package whose ``__init__.py`` is its front door (what lives there, what it may
import), from the bottom up:

- ``sweeps.spec``: the spec: its schema, its expansion into planned trials and the checks of what
  it expands to, reading its file, its errors in one line, ``--set`` and ``--only``, the ``--set``
  of a stored run. Imports no other room.
- ``sweeps.analysis``: the statistics: intervals, paired tests, Holm, seeds needed, IQM; their use
  on a sweep's cells and pairs; the rule that chooses a cell's grid point; a paper's claims judged.
  Imports no other room.
- ``sweeps.publishing``: how results look: Markdown and LaTeX tables, regret figures, display names
  and grid points in math, the by-setting layout. Imports no other room.
- ``sweeps.results``: a sweep's results as every reader gets them (the report's summary,
  ``SweepResults``, ``banditsweep.compare``) and the report written from them, ours beside the
  papers' included. Imports the spec, analysis and publishing.
- ``sweeps.planning``: what a run will run, cost and need before it starts: the cost model, Slurm,
  a spec's held-out stage, dataset downloads. Imports the spec, publishing and results.
- ``sweeps.cli``: the command line (``banditsweep``: parser, request objects, exit codes) and one
  module per command; the only room that parses a command line or prints. Imports every room above.
- ``sweeps.api``: ``banditsweep.run``, ``plan``, ``status``, ``report``, ``verify`` and
  ``register_*``, each its command's code path, with typed results. Imports the command line's room
  (and the spec, planning and results); no room imports it.

``events`` (what a command says: the terminal for the command line, a collector for Python) is
shared by every room and imports none. ``quickstart.yaml``, ``neural_rbmle/``, ``kernel_exp3/``
are the sweeps of the quick start and both papers, ``papers/`` their published values. ``sweeps``
imports ``banditsweep.workers`` by its front door only, and core. Importing a room imports none of
its modules.
"""
