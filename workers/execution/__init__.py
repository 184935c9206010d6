"""Execution on Ray: the only room that imports ``ray``.

The driver's sweep loop (``dispatcher``), the lockstep batches it hands out (``batches``), its writer
of outcomes (``result_writer``: durable first, then the mirror) and its pool of trial actors (``pool``, ``actors``), the
Ray it connects to (``ray_connection``, ``ray_address``), sharded trials' shard actors
(``sharded_trials``), the trial actor's device and threads (``trial_setup``), the driver's dataset files
for nodes that lack them (``shipped_datasets``), stopping on a signal
(``signals``), and the values a run is given and gives back (``run_values``).
"""

import logging as _logging
import warnings as _warnings

# `import ray` says two things in a Jupyter kernel without ipywidgets that are about Ray's own widgets,
# which a sweep never shows (its progress is its own, or none with progress=False): tqdm's
# "IProgress not found" warning (Ray imports tqdm.auto for its progress bars) and Ray's "Missing
# packages: ['ipywidgets']" log line (its objects' rich notebook output). Both are said once, while
# Ray is imported, wherever that happens in this room; outside a notebook neither is ever said.
_warnings.filterwarnings("ignore", message="IProgress not found")
_logging.getLogger("ray.widgets.util").setLevel(_logging.WARNING)
