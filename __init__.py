"""banditsweep: distributed sweeps of bandit experiments.

Three layers, imports one way: ``banditsweep.core`` (the science) <- ``banditsweep.workers``
(Ray execution and result sinks) <- ``banditsweep.sweeps`` (specs, CLI, aggregation).
"""

__version__ = "0.1.0"
