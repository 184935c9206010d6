"""Kernels of the adversarial kernelized-bandit paper (SPEC 2.2) and the growth rate gamma_T (SPEC 3.1).

- SE:            k(x, x') = exp(-r^2 / (2 l^2))
- Matern 5/2:    k = (1 + sqrt(5) r/l + 5 r^2 / (3 l^2)) exp(-sqrt(5) r/l)
- Matern 3/2:    k = (1 + sqrt(3) r/l) exp(-sqrt(3) r/l)
- Matern nu:     k = 2^{1-nu} / Gamma(nu) (sqrt(2 nu) r/l)^nu K_nu(sqrt(2 nu) r/l)   (K_nu: modified Bessel)
- linear:        k(x, x') = x^T x' / l^2   (paper Sec. 3, after Cor. 2: gamma_T = O(log T), regret O(sqrt(T) log T))

with r = ||x - x'|| and default lengthscale l = 0.3 sqrt(d). SE and Matern are stationary with
k(x, x) = 1. The linear kernel is not stationary; its "lengthscale" scales the inputs and defaults to
sqrt(d) (project choice), so that k(x, x) = ||x||^2 / d <= 1 on [0, 1]^d, the condition k(x, x) <= 1
under which the paper's information-gain inequality (eq. 2, footnote 10) holds.

Kernel matrices are produced in tiles (:meth:`Kernel.tiles`): no caller needs the |X| x |X| matrix in
memory unless it asks for it with :meth:`Kernel.matrix` (only the exact Kernelized Exp3 does, after a
memory check). Squared distances are accumulated coordinate by coordinate from exact differences,
so that k(x, x) is exactly 1 and nearby points do not suffer the cancellation of ||x||^2 + ||y||^2 - 2 x.y.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from scipy import special

KERNEL_NAMES = ("se", "matern52", "matern32", "matern", "linear")

# Elements of one kernel tile (float64): 2^22 elements = 32 MiB.
DEFAULT_TILE_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Kernel:
    """A kernel on R^d: stationary (SE, Matern) or linear. ``nu`` is the Matern smoothness (2.5 / 1.5
    for the closed forms)."""

    name: str
    lengthscale: float
    nu: float | None = None

    def __post_init__(self):
        if self.name not in KERNEL_NAMES:
            raise ValueError(f"unknown kernel {self.name!r}; known: {', '.join(KERNEL_NAMES)}")
        if not self.lengthscale > 0:
            raise ValueError(f"kernel lengthscale must be positive, got {self.lengthscale}")
        if self.name == "matern" and (self.nu is None or not self.nu > 0):
            raise ValueError("kernel 'matern' needs a positive smoothness nu")

    @classmethod
    def create(cls, name: str, dim: int, lengthscale: float | None = None, nu: float | None = None) -> "Kernel":
        """The paper's kernel: lengthscale 0.3 sqrt(d) unless given (linear: sqrt(d)); nu fixed by the
        closed forms."""
        if lengthscale is not None:
            scale = float(lengthscale)
        else:
            scale = math.sqrt(dim) if name == "linear" else 0.3 * math.sqrt(dim)
        smoothness = {"matern52": 2.5, "matern32": 1.5}.get(name, nu)
        return cls(name, scale, None if name in ("se", "linear") else
                   float(smoothness) if smoothness is not None else None)

    # ------------------------------------------------------------------ evaluation
    def profile(self, distance: np.ndarray) -> np.ndarray:
        """k as a function of r = ||x - x'|| (float64, same shape); stationary kernels only."""
        if self.name == "linear":
            raise ValueError("the linear kernel is not a function of ||x - x'||")
        r = np.asarray(distance, dtype=np.float64) / self.lengthscale
        if self.name == "se":
            return np.exp(-0.5 * r * r)
        if self.name == "matern52":
            s = math.sqrt(5.0) * r
            return (1.0 + s + s * s / 3.0) * np.exp(-s)
        if self.name == "matern32":
            s = math.sqrt(3.0) * r
            return (1.0 + s) * np.exp(-s)
        nu = self.nu
        s = math.sqrt(2.0 * nu) * r
        out = np.ones_like(s)
        positive = s > 0
        sp = s[positive]
        out[positive] = (2.0 ** (1.0 - nu) / special.gamma(nu)) * sp ** nu * special.kv(nu, sp)
        return out

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The block k(x_i, y_j): (len(x), len(y)). Callers keep blocks small (see :meth:`tiles`)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        y = np.atleast_2d(np.asarray(y, dtype=np.float64))
        if self.name == "linear":
            return (x / self.lengthscale) @ (y / self.lengthscale).T
        squared = np.zeros((x.shape[0], y.shape[0]))
        for coordinate in range(x.shape[1]):
            difference = x[:, coordinate, None] - y[None, :, coordinate]
            squared += difference * difference
        if self.name == "se":
            return np.exp(-0.5 * squared / (self.lengthscale * self.lengthscale))
        return self.profile(np.sqrt(squared))

    def diag(self, x: np.ndarray) -> np.ndarray:
        """k(x_i, x_i) for every row: all ones for the stationary kernels (normalised); ||x||^2 / l^2 for
        the linear kernel."""
        x = np.atleast_2d(x)
        if self.name == "linear":
            scaled = np.asarray(x, dtype=np.float64) / self.lengthscale
            return np.einsum("ij,ij->i", scaled, scaled)
        return np.ones(x.shape[0])

    def tiles(self, x: np.ndarray, y: np.ndarray | None = None,
              tile_elements: int = DEFAULT_TILE_ELEMENTS) -> Iterator[tuple[slice, np.ndarray]]:
        """Row tiles of k(x, y): yields (rows, block) with block = k(x[rows], y), each at most
        ``tile_elements`` entries (one row at least)."""
        y = x if y is None else y
        rows_per_tile = max(1, tile_elements // max(1, len(y)))
        for start in range(0, len(x), rows_per_tile):
            rows = slice(start, min(len(x), start + rows_per_tile))
            yield rows, self(x[rows], y)

    def columns(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        """K[:, index] = k(x, x[index]) as an (n, len(index)) array, assembled in tiles."""
        out = np.empty((len(x), len(index)))
        for rows, block in self.tiles(x, x[np.asarray(index)]):
            out[rows] = block
        return out

    def matrix(self, x: np.ndarray) -> np.ndarray:
        """The full |X| x |X| matrix. Only for small X and for the exact Kernelized Exp3 (SPEC 3.1),
        which checks the memory first (:func:`check_memory`)."""
        out = np.empty((len(x), len(x)))
        for rows, block in self.tiles(x):
            out[rows] = block
        return out


def growth_rate(kernel: Kernel, horizon: int, dim: int) -> float:
    """gamma_T, the known growth-rate bound of the maximum information gain (SPEC 3.1):

        SE:      (log T)^{d+1} (log log T)^{-d}
        Matern:  T^{d / (2 nu + d)} (log T)^{(4 nu + d) / (2 nu + d)}
        linear:  d log T        (Srinivas et al. 2010, Thm. 5: gamma_T = O(d log T); the kernel paper,
                                 Sec. 3 after Cor. 2, uses gamma_T = O(log T) for fixed d)

    Project choice: for T < e^e (about 15.2) the SE formula's log log T is below 1 and becomes 0 or
    negative at T <= e, so both formulas are evaluated at T = max(T, e^e); horizons of 16 and more
    are unaffected.
    """
    t = max(float(horizon), math.exp(math.e))
    log_t = math.log(t)
    if kernel.name == "linear":
        return dim * log_t
    if kernel.name == "se":
        return log_t ** (dim + 1) * math.log(log_t) ** (-dim)
    nu = kernel.nu
    return t ** (dim / (2 * nu + dim)) * log_t ** ((4 * nu + dim) / (2 * nu + dim))


def available_memory_bytes(device: str = "cpu") -> int:
    """Free memory on ``device``: CUDA's free memory, or the host's MemAvailable."""
    if str(device).startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def check_memory(required_bytes: int, device: str, what: str) -> None:
    """Raise MemoryError (before any work) when ``what`` needs more than the free memory of ``device``."""
    available = available_memory_bytes(device)
    if required_bytes > available:
        raise MemoryError(
            f"{what} needs about {required_bytes / 2**30:.1f} GiB on {device}, but only "
            f"{available / 2**30:.1f} GiB is free; use rls_kernel_exp3 for a domain this large"
        )

