"""Mirrors of the record of truth: the sink protocol and the mirror that feeds sinks (``sinks``), a
sink's ``prepare`` run while Ray starts (``prepare``), and the MLflow sink (``mlflow``: the only room
that imports ``mlflow``). The generic modules know no sink by name: each sink room registers itself
when this package is imported, and takes its own options from ``SinkContext.sink_options``."""

import importlib

# The rooms of the sinks this package provides: each registers its sink when imported (a plugin
# registers its own the same way).
BUILTIN_SINK_ROOMS = ("banditsweep.workers.mirrors.mlflow",)
for _room in BUILTIN_SINK_ROOMS:
    importlib.import_module(_room)
