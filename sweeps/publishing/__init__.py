"""Publishing: how results look in a paper and on a terminal, whatever they say.

``tables`` writes Markdown and LaTeX tables (booktabs, caption, ``\\label``, the bold of a best value,
the marks of cells computed by other code and their legend) and the slugs of file names;
``figures`` draws the regret curves (matplotlib, imported where a figure is drawn: one colour, line
style and marker per algorithm, the band of a mean over seeds); ``display`` names algorithms as the
papers do (``LinUCB``) and writes grid points in math (``ν = 10⁻³``, ``$\\nu = 10^{-3}$``);
``by_setting`` lays a report's cells out one row per environment setting (the kernel paper's
table). Imports no other room of ``sweeps`` (``banditsweep.workers`` by its front door: a figure
reads the curves from the store); what a report holds is the results room's. Importing this room
imports none of its modules.
"""
