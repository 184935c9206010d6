"""banditsweep: distributed sweeps of bandit experiments.

Three layers, imports one way: ``banditsweep.core`` (the science) <- ``banditsweep.workers``
(Ray execution and result sinks) <- ``banditsweep.sweeps`` (specs, CLI, aggregation).

``banditsweep.load(results_root, sweep)`` reads a sweep's Parquet results as ``(trials, curves)``.
"""

__version__ = "0.1.0"
__all__ = ["load"]


def load(results_root, sweep=None):
    """The results of a sweep as pandas DataFrames ``(trials, curves)``; see
    :func:`banditsweep.workers.store.load`."""
    from banditsweep.workers.store import load as load_results

    return load_results(results_root, sweep)
