"""APG-Exp3 (Takemori & Sato 2021; the kernel paper's baseline, SPEC 3.5).

The kernel bandit is reduced to a (misspecified) linear bandit on Newton-basis features:

1. **P-greedy Newton basis** on X: x_1 = argmax_x k(x, x); x_{j+1} = argmax_x P_j^2(x) with the power
   function P_j^2(x) = k(x, x) - sum_{i<=j} N_i(x)^2 and
   N_{j+1}(.) = [k(., x_{j+1}) - sum_{i<=j} N_i(x_{j+1}) N_i(.)] / P_j(x_{j+1});
   stop when max_x P_j(x) <= e, e = log|X| / T. D_T = number of basis functions; N(x) in R^{D_T}.
   On a finite X this is the pivoted partial Cholesky factorisation of K (columns N_i = L[:, i]).
2. **G-optimal design** pi~ on {N(x)} by Frank-Wolfe (Fedorov-Wynn): g_k = max_x ||N(x)||^2_{V(pi)^{-1}},
   step gamma_k = (g_k / D - 1) / (g_k - 1) towards the maximiser; stop at g_k <= (1 + eps) D
   (Kiefer-Wolfowitz: the optimum is D). V^{-1} and the g(x) are updated by Sherman-Morrison, O(n D)
   per iteration, and recomputed from scratch every ``REFRESH`` iterations. The routine is
   :func:`banditsweep.core.exp3.g_optimal_design` (ridge 0), shared with Kernelized Exp3's
   ``exploration: g_optimal`` (the regularised design of the kernel paper's App. 16).
3. **Linear Exp3**: P_t = (1 - alpha) exp-weights + alpha pi~ (core.exp3); Q_t = sum_x P_t(x) N(x) N(x)^T;
   theta^_t = Q_t^{-1} N(x_t) y_t; the estimate of f_t is u_t(x) = N(x)^T theta^_t.
   eta = c1 / sqrt(D_T T), alpha = c2 eta D_T (capped at 1, project choice): :class:`core.exp3.APGSchedule`,
   shared with the sharded trial (core.kernel_shards), as is the design's iteration (core.exp3.fedorov_wynn).

Defaults (c1, c2) = (0.5, 0.1): the paper's selected constants for all three kernels.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field
from scipy import linalg

from banditsweep.core.contracts import Config
from banditsweep.core.exp3 import APGSchedule, Exp3Policy, ExponentialWeights, g_optimal_design, pgreedy_tolerance
from banditsweep.core.kernels import Kernel

__all__ = ["APGExp3", "APGExp3Params", "g_optimal_design", "newton_basis"]


class APGExp3Params(Config):
    c1: float = Field(0.5, gt=0, description="eta = c1 / sqrt(D_T T)")
    c2: float = Field(0.1, gt=0, description="alpha = c2 eta D_T")
    epsilon: float = Field(0.1, gt=0, description="Frank-Wolfe stops at max ||N(x)||^2_{V^-1} <= (1 + eps) D")
    max_iterations: int = Field(100_000, ge=1, description="Frank-Wolfe iteration cap")
    tolerance: float | None = Field(None, gt=0, description="P-greedy admissible error e; unset: log|X| / T")


def newton_basis(kernel: Kernel, domain: np.ndarray, tolerance: float,
                 max_size: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P-greedy: (N (n, D), pivots, final power function P_D(x)). Ties go to the smallest index."""
    n = len(domain)
    max_size = n if max_size is None else min(n, max_size)
    power = kernel.diag(domain).astype(np.float64)   # P_j^2(x)
    basis = np.empty((max_size, n))                  # N_j(.) as rows
    pivots = []
    for j in range(max_size):
        pick = int(np.argmax(power))
        if math.sqrt(max(power[pick], 0.0)) <= tolerance:
            break
        pivots.append(pick)
        column = kernel(domain, domain[pick:pick + 1])[:, 0]
        if j:
            column -= basis[:j].T @ basis[:j, pick]
        basis[j] = column / math.sqrt(power[pick])
        power = np.maximum(power - basis[j] ** 2, 0.0)
    size = len(pivots)
    return basis[:size].T.copy(), np.asarray(pivots, dtype=np.int64), np.sqrt(power)


class APGExp3(Exp3Policy):
    """APG-Exp3 (Takemori & Sato 2021): linear Exp3 on a P-greedy Newton basis of the kernel."""

    Params = APGExp3Params
    label = "APG-Exp3"

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.features: np.ndarray | None = None
        self.values: dict[str, float] = {}

    def prepare(self, domain: np.ndarray) -> ExponentialWeights:
        n, horizon = len(domain), self.problem.horizon
        tolerance = pgreedy_tolerance(self.params, n, horizon)
        self.features, _, power = newton_basis(self.problem.kernel, domain, tolerance)
        schedule = APGSchedule(self.params, n, horizon, self.features.shape[1], float(power.max()))
        design, g_max, iterations = g_optimal_design(self.features, self.params.epsilon, self.params.max_iterations)
        self.values = schedule.values(g_max, iterations, np.count_nonzero(design > 1e-12))
        return ExponentialWeights(n, schedule.eta, schedule.alpha, design)

    def estimate(self, probabilities: np.ndarray, arm: int, reward: float) -> np.ndarray:
        features = self.features
        information = features.T @ (probabilities[:, None] * features)   # Q_t
        try:
            theta = linalg.cho_solve(linalg.cho_factor(information, lower=True, check_finite=False),
                                     features[arm] * reward, check_finite=False)
        except linalg.LinAlgError:
            theta = np.linalg.lstsq(information, features[arm] * reward, rcond=None)[0]
        return features @ theta

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        # P-greedy reserves an n x n basis (newton_basis) before it knows how many rows it keeps.
        return super().footprint(params, arms, dim, horizon) + 8 * arms * arms

    def diagnostics(self) -> dict[str, float]:
        return dict(self.values)
