"""Finite domains X in [0, 1]^d (SPEC 2.2).

The paper's four settings:

    1: 400 grid points of [0, 1]          2: 20 x 20 grid of [0, 1]^2
    3: 10000 grid points of [0, 1]        4: 100 x 100 grid of [0, 1]^2

and, beyond the paper, any regular grid ``{grid: [n1, ..., nd]}`` (n_i equally spaced points of
[0, 1] per axis, endpoints included) or ``{uniform: n, dim: d}`` points drawn uniformly from [0, 1]^d
with the environment's random stream (so from the trial seed).

The paper's continuous setting (Sec. 3, "Extension to a continuous domain", Cor. 2): X = [0, 1]^d is
played on a Theta(1/sqrt(T))-net of it. ``{continuous: d}`` builds that net from T and d, so a user
asks for the continuous problem without choosing a grid: the regular grid with endpoints and

    m = 1 + ceil(sqrt(d T) / (2 c))  points per axis,   covering radius  sqrt(d) / (2 (m - 1))  <=  c / sqrt(T),

i.e. an epsilon-net in ||.||_2 with epsilon = c / sqrt(T) (every x in [0, 1]^d lies within sqrt(d) h / 2 of
a grid point, h = 1 / (m - 1) the spacing), with m^d = O(T^{d/2}) points as Cor. 2 requires
(|X~| = O(T^{d/2})). The constant is c = ``NET_CONSTANT`` = 1 (epsilon = 1 / sqrt(T)), a project choice:
the paper fixes only the rate. Under its Assumption 2 (f_t L(B)-Lipschitz) the discretisation costs
at most L(B) epsilon T = L(B) c sqrt(T) regret. E.g. T = 1000: d = 1, 17 points; d = 2, 24 x 24 = 576
points; T = 10^4: d = 1, 51 points; d = 2, 72 x 72 = 5184 points.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from banditsweep.core.engine.contracts import Config

SETTINGS: dict[int, tuple[int, ...]] = {1: (400,), 2: (20, 20), 3: (10000,), 4: (100, 100)}


class GridDomain(Config):
    """A regular grid: ``grid[i]`` equally spaced points of [0, 1] on axis i."""

    grid: list[int] = Field(..., min_length=1, description="points per axis")

    def model_post_init(self, __context) -> None:
        if any(points < 1 for points in self.grid):
            raise ValueError(f"every grid axis needs at least one point, got {self.grid}")


NET_CONSTANT = 1.0  # c in the net's covering radius epsilon = c / sqrt(T)


class ContinuousDomain(Config):
    """[0, 1]^``continuous`` played on its (1 / sqrt(T))-net (paper Sec. 3, Cor. 2): :func:`net_points`."""

    continuous: int = Field(..., ge=1, description="dimension d of the continuous domain [0, 1]^d")


class UniformDomain(Config):
    """``uniform`` points drawn i.i.d. uniformly from [0, 1]^dim (from the trial seed)."""

    uniform: int = Field(..., ge=1, description="number of points")
    dim: int = Field(..., ge=1, description="dimension d")


def axes(points_per_axis: tuple[int, ...] | list[int]) -> list[np.ndarray]:
    """The values of a grid along each axis."""
    return [np.linspace(0.0, 1.0, n) if n > 1 else np.array([0.5]) for n in points_per_axis]


def grid(points_per_axis: tuple[int, ...] | list[int]) -> np.ndarray:
    """The cartesian grid, first axis slowest: shape (prod n_i, d)."""
    axes_values = axes(points_per_axis)
    mesh = np.meshgrid(*axes_values, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def net_points(dim: int, horizon: int, constant: float = NET_CONSTANT) -> int:
    """Points per axis m of the (c / sqrt(T))-net of [0, 1]^d: m = 1 + ceil(sqrt(d T) / (2 c))."""
    if horizon < 1 or dim < 1 or not constant > 0:
        raise ValueError(f"the net needs T >= 1, d >= 1 and c > 0, got T={horizon}, d={dim}, c={constant}")
    return 1 + math.ceil(math.sqrt(dim * horizon) / (2.0 * constant))


def net_radius(dim: int, points_per_axis: int) -> float:
    """Covering radius in ||.||_2 of the regular grid with endpoints: sqrt(d) / (2 (m - 1))."""
    return math.sqrt(dim) / (2.0 * (points_per_axis - 1))


def setting(number: int) -> np.ndarray:
    """The domain of the paper's setting 1-4."""
    if number not in SETTINGS:
        raise ValueError(f"setting must be one of {sorted(SETTINGS)}, got {number}")
    return grid(SETTINGS[number])


def grid_shape(setting_number: int | None, domain: dict | Config | None, horizon: int | None = None) -> tuple[int, ...] | None:
    """Points per axis of a grid-like X (a setting, a grid, a continuous domain's net for the horizon),
    without building it; None for a seed-drawn domain ({uniform: n, dim: d})."""
    if setting_number is not None:
        return SETTINGS[setting_number]
    values = domain.model_dump() if isinstance(domain, Config) else dict(domain or {})
    if "grid" in values:
        return tuple(values["grid"])
    if "continuous" in values and horizon is not None:
        dim = int(values["continuous"])
        return (net_points(dim, horizon),) * dim
    return None


def build(setting_number: int | None, domain: GridDomain | UniformDomain | ContinuousDomain | None,
          rng: np.random.Generator, horizon: int | None = None) -> np.ndarray:
    """X as an (n, d) float64 array, from exactly one of a setting number and a domain description
    (a continuous domain needs the horizon T for its net)."""
    if (setting_number is None) == (domain is None):
        raise ValueError("give exactly one of 'setting' and 'domain'")
    if setting_number is not None:
        return setting(setting_number)
    if isinstance(domain, GridDomain):
        return grid(domain.grid)
    if isinstance(domain, ContinuousDomain):
        if horizon is None:
            raise ValueError("a continuous domain is discretised from the horizon T: pass it")
        return grid((net_points(domain.continuous, horizon),) * domain.continuous)
    return rng.uniform(0.0, 1.0, size=(domain.uniform, domain.dim))


def size(setting_number: int | None, domain: GridDomain | UniformDomain | ContinuousDomain | None,
         horizon: int | None = None) -> tuple[int, int]:
    """(|X|, d) without building X."""
    shape = grid_shape(setting_number, domain, horizon)
    if shape is None:
        return domain.uniform, domain.dim
    return math.prod(shape), len(shape)


def points(setting_number: int | None, domain: GridDomain | UniformDomain | ContinuousDomain | None,
           rng: np.random.Generator, horizon: int | None, index: np.ndarray) -> np.ndarray:
    """The points X[index], bit-identical to ``build(...)[index]`` and drawing from ``rng`` exactly as
    :func:`build` does. A grid's points are computed from their indices (no |X|-sized array); a
    seed-drawn domain is drawn whole, since its points come from one stream in order."""
    shape = grid_shape(setting_number, domain, horizon)
    if shape is None:
        return build(setting_number, domain, rng, horizon)[index]
    coordinates = np.unravel_index(np.asarray(index, dtype=np.int64), shape)
    return np.stack([axis[c] for axis, c in zip(axes(shape), coordinates)], axis=1).reshape(-1, len(shape))
