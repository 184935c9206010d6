"""The statistics: the numbers a report's claims rest on, computed from plain values and tables.

``statistics`` holds the methods (a mean's interval, paired tests by seed, Welch from a table's
means, Holm's adjustment, the seeds a difference needs, the IQM and its stratified bootstrap);
``comparisons`` applies them to a sweep's cells and pairs (``pair_table``, the significantly best
of a column, the aggregates across environments); ``grid_choice`` is the rule that chooses each
cell's grid point (lowest mean final regret, failed points left out, ties to the grid's order) and
when seeds are held out; ``claims`` judges a paper's claim from its parts. numpy, scipy and pandas
only: imports no other room of ``sweeps`` and nothing of ``workers`` (core's dataset catalogue
alone, for the random policy's reference regret). Importing this room imports none of its modules.
"""
