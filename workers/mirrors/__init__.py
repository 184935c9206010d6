"""Mirrors of the record of truth: the sink protocol and the mirror that feeds sinks (``sinks``), a
sink's ``prepare`` run while Ray starts (``prepare``), and the MLflow sink (``mlflow``: the only room
that imports ``mlflow``)."""
