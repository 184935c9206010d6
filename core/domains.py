"""Finite domains X in [0, 1]^d (SPEC 2.2).

The paper's four settings:

    1: 400 grid points of [0, 1]          2: 20 x 20 grid of [0, 1]^2
    3: 10000 grid points of [0, 1]        4: 100 x 100 grid of [0, 1]^2

and, beyond the paper, any regular grid ``{grid: [n1, ..., nd]}`` (n_i equally spaced points of
[0, 1] per axis, endpoints included) or ``{uniform: n, dim: d}`` points drawn uniformly from [0, 1]^d
with the environment's random stream (so from the trial seed).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from banditsweep.core.contracts import Config

SETTINGS: dict[int, tuple[int, ...]] = {1: (400,), 2: (20, 20), 3: (10000,), 4: (100, 100)}


class GridDomain(Config):
    """A regular grid: ``grid[i]`` equally spaced points of [0, 1] on axis i."""

    grid: list[int] = Field(..., min_length=1, description="points per axis")

    def model_post_init(self, __context) -> None:
        if any(points < 1 for points in self.grid):
            raise ValueError(f"every grid axis needs at least one point, got {self.grid}")


class UniformDomain(Config):
    """``uniform`` points drawn i.i.d. uniformly from [0, 1]^dim (from the trial seed)."""

    uniform: int = Field(..., ge=1, description="number of points")
    dim: int = Field(..., ge=1, description="dimension d")


def grid(points_per_axis: tuple[int, ...] | list[int]) -> np.ndarray:
    """The cartesian grid, first axis slowest: shape (prod n_i, d)."""
    axes = [np.linspace(0.0, 1.0, n) if n > 1 else np.array([0.5]) for n in points_per_axis]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def setting(number: int) -> np.ndarray:
    """The domain of the paper's setting 1-4."""
    if number not in SETTINGS:
        raise ValueError(f"setting must be one of {sorted(SETTINGS)}, got {number}")
    return grid(SETTINGS[number])


def build(setting_number: int | None, domain: GridDomain | UniformDomain | None,
          rng: np.random.Generator) -> np.ndarray:
    """X as an (n, d) float64 array, from exactly one of a setting number and a domain description."""
    if (setting_number is None) == (domain is None):
        raise ValueError("give exactly one of 'setting' and 'domain'")
    if setting_number is not None:
        return setting(setting_number)
    if isinstance(domain, GridDomain):
        return grid(domain.grid)
    return rng.uniform(0.0, 1.0, size=(domain.uniform, domain.dim))
