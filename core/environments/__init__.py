"""Bandit environments (SPEC 1.2, 2.3)."""
