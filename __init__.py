"""banditsweep: distributed sweeps of bandit experiments.

Three layers, imports one way: ``banditsweep.core`` (the science) <- ``banditsweep.workers``
(Ray execution and result sinks) <- ``banditsweep.sweeps`` (specs, CLI, aggregation).

``banditsweep.load(results_root, sweep)`` reads a sweep's Parquet results as ``(trials, curves)``.
"""

import os as _os

__version__ = "0.1.0"
__all__ = ["load"]


def _submitted_tree() -> str | None:
    """The checkout of this project that a Ray job was submitted with, when this process is that
    job's entrypoint: ``ray job submit --working-dir <checkout> -- banditsweep run ...`` runs the
    entrypoint in a copy of the checkout (its working directory). None anywhere else."""
    if "RAY_JOB_CONFIG_JSON_ENV_VAR" not in _os.environ:   # set by Ray for a job's entrypoint only
        return None
    tree = _os.getcwd()
    try:
        with open(_os.path.join(tree, "pyproject.toml"), encoding="utf-8") as file:
            named = 'name = "banditsweep"' in file.read()
    except OSError:
        return None
    if not (named and _os.path.isfile(_os.path.join(tree, "__init__.py"))):
        return None
    return _os.path.realpath(tree)


# The submitted code is the code that runs: a job's entrypoint imports the submitted copy's modules,
# not the installed package's (the job's workers get the same copy as the runtime env's py_modules,
# workers.execution.ray_connection.RayConnection).
SUBMITTED_TREE = _submitted_tree()
if SUBMITTED_TREE and SUBMITTED_TREE != _os.path.dirname(_os.path.realpath(__file__)):
    __path__ = [SUBMITTED_TREE]
    __file__ = _os.path.join(SUBMITTED_TREE, "__init__.py")
else:
    SUBMITTED_TREE = None


def load(results_root, sweep=None):
    """The results of a sweep as pandas DataFrames ``(trials, curves)``; see
    :func:`banditsweep.workers.storage.store.load`."""
    from banditsweep.workers import load as load_results

    return load_results(results_root, sweep)
