"""Bandit algorithms, one module per paper algorithm (registry names in ``core.engine.registry``)."""
