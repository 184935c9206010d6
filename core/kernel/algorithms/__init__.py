"""The kernel paper's algorithms and its Random baseline, one module per algorithm, each with its
sharded half where it has one (registry names in ``core.engine.registry``)."""
