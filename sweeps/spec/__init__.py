"""The spec: what a sweep spec may say, and the trials it plans.

``model`` holds the schema (pydantic models), the expansion of a spec into its planned trials
(``load_sweep``, ``parse_sweep``, ``Sweep``, ``PlannedTrial``) and the checks of what it expands to
(a grid value given twice, entries that make the same trials, an entry that makes none);
``reading`` reads the file and its YAML values, ``errors`` says a mistake in one line,
``overrides`` takes ``--set``, ``selection`` takes ``--only``, and ``stored_runs`` finds the
``--set`` of a run whose trials a store holds. Imports no other room of ``sweeps`` (core's engine
and registry, and ``banditsweep.workers`` by its front door); every other room builds on it.
Importing this room imports none of its modules.
"""
