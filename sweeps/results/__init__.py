"""A sweep's results, as every reader gets them, and the report written from them.

``report`` reads the trials the journal holds (``recorded_trials``), names them as the spec does
(``finished_trials``), chooses each cell's grid point and judges it (``summarise``,
``judged_summary``: the one ``Summary`` behind the report, ``run``'s table, ``banditsweep.compare``
and a result's ``.statistics`` and ``.plot()``), and writes the report's folder (``write_report``);
``report_comparisons`` writes the files of its intervals, pairs and aggregates; ``paper_comparison``
sets ours beside the papers' published values (``sweeps/papers/``) and judges their claims;
``sweep_results`` is ``SweepResults``, a sweep's results as its spec plans them, computed once;
``compare`` is ``banditsweep.compare``, the same statistics of any results folder without a spec.
Imports the spec, analysis and publishing rooms (and ``sweeps.events``); never planning, the
command line or the Python API. Importing this room imports none of its modules.
"""
