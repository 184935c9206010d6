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
   :func:`banditsweep.core.kernel.exp3.g_optimal_design` (ridge 0), shared with Kernelized Exp3's
   ``exploration: g_optimal`` (the regularised design of the kernel paper's App. 16).
3. **Linear Exp3**: P_t = (1 - alpha) exp-weights + alpha pi~ (core.kernel.exp3); Q_t = sum_x P_t(x) N(x) N(x)^T;
   theta^_t = Q_t^{-1} N(x_t) y_t; the estimate of f_t is u_t(x) = N(x)^T theta^_t.
   eta = c1 / sqrt(D_T T), alpha = c2 eta D_T (capped at 1, project choice): :class:`core.kernel.exp3.APGSchedule`.

Defaults (c1, c2) = (0.5, 0.1): the paper's selected constants for all three kernels.

On a sharded domain (SPEC 4, core.kernel.sharded) :class:`ShardedAPGExp3` runs the same three steps: the
P-greedy basis as the shards' pivoted Cholesky (core.kernel.sharded.algorithm.pivoted_cholesky), the design by the
same Fedorov-Wynn iteration (core.kernel.exp3.fedorov_wynn) over :class:`ShardedDesign`, whose information
matrix V(pi) is an exact fixed-point sum over the shards' blocks, and Q_t summed over the shards'
parts; :class:`APGExp3Slice` is its part on each shard. It agrees with the unsharded run to rounding.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field
from scipy import linalg

from banditsweep.core.engine.contracts import Config
from banditsweep.core.kernel.exp3 import (APGSchedule, DesignStep, Exp3Policy, ExponentialWeights, fedorov_wynn,
                                          g_optimal_design, pgreedy_tolerance)
from banditsweep.core.kernel.kernels import Kernel
from banditsweep.core.kernel.sharded.algorithm import AlgorithmSlice, ShardedExp3, pivoted_cholesky
from banditsweep.core.kernel.sharded.partition import (block_sums, fixed_bound, from_fixed, global_choice, rowwise_dot,
                                                       rowwise_matmul)
from banditsweep.core.kernel.sharded.protocol import (DesignDone, DesignInformation, DesignLeverage, DesignMove,
                                                      DesignStart, Leverage, LinearEstimate, PivotsDone, ShardGroup,
                                                      Tied, Ties, Updated, answers)
from banditsweep.core.engine.ties import (DESIGN, P_GREEDY, design_digest, tie_key, tied_among, tied_argmax,
                                          trial_seed_words)

__all__ = ["APGExp3", "APGExp3Params", "g_optimal_design", "newton_basis"]


class APGExp3Params(Config):
    c1: float = Field(0.5, gt=0, description="eta = c1 / sqrt(D_T T)")
    c2: float = Field(0.1, gt=0, description="alpha = c2 eta D_T")
    epsilon: float = Field(0.1, gt=0, description="Frank-Wolfe stops at max ||N(x)||^2_{V^-1} <= (1 + eps) D")
    max_iterations: int = Field(100_000, ge=1, description="Frank-Wolfe iteration cap")
    tolerance: float | None = Field(None, gt=0, description="P-greedy admissible error e; unset: log|X| / T")


def newton_basis(kernel: Kernel, domain: np.ndarray, tolerance: float, max_size: int | None = None,
                 key: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P-greedy: (N (n, D), pivots, final power function P_D(x)). Ties: core.engine.ties' rule at the scale
    of max_x k(x, x), priorities keyed by ``key`` (None: the smallest index)."""
    n = len(domain)
    max_size = n if max_size is None else min(n, max_size)
    power = kernel.diag(domain).astype(np.float64)   # P_j^2(x)
    scale = float(power.max()) if n else 0.0
    basis = np.empty((max_size, n))                  # N_j(.) as rows
    pivots = []
    for j in range(max_size):
        if math.sqrt(max(float(power.max()), 0.0)) <= tolerance:
            break
        pick = tied_argmax(power, key, scale)
        pivots.append(pick)
        column = kernel(domain, domain[pick:pick + 1])[:, 0]
        if j:
            column -= basis[:j].T @ basis[:j, pick]
        basis[j] = column / math.sqrt(power[pick])
        power = np.maximum(power - basis[j] ** 2, 0.0)
    size = len(pivots)
    return basis[:size].T.copy(), np.asarray(pivots, dtype=np.int64), np.sqrt(power)


def linear_estimate(information: np.ndarray, features: np.ndarray, reward: float) -> np.ndarray:
    """theta^_t = Q_t^{-1} N(x_t) y_t (D,), from Q_t (D, D) and N(x_t) (D,); least squares where Q_t
    is numerically singular."""
    try:
        return linalg.cho_solve(linalg.cho_factor(information, lower=True, check_finite=False),
                                features * reward, check_finite=False)
    except linalg.LinAlgError:
        return np.linalg.lstsq(information, features * reward, rcond=None)[0]


class APGExp3(Exp3Policy):
    """APG-Exp3 (Takemori & Sato 2021): linear Exp3 on a P-greedy Newton basis of the kernel."""

    STATE = ("features", "values")

    Params = APGExp3Params
    label = "APG-Exp3"

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.features: np.ndarray | None = None
        self.values: dict[str, float] = {}

    def prepare(self, domain: np.ndarray) -> ExponentialWeights:
        n, horizon = len(domain), self.problem.horizon
        tolerance = pgreedy_tolerance(self.params, n, horizon)
        self.features, pivots, power = newton_basis(self.problem.kernel, domain, tolerance,
                                                    key=self.tie_key(P_GREEDY))
        schedule = APGSchedule(self.params, n, horizon, self.features.shape[1], float(power.max()))
        design, g_max, iterations = g_optimal_design(self.features, self.params.epsilon, self.params.max_iterations,
                                                     key=self.tie_key(DESIGN))
        self.values = {**schedule.values(g_max, iterations, np.count_nonzero(design > 1e-12)),
                       "design_digest": design_digest(pivots, np.flatnonzero(design > 1e-12))}
        return ExponentialWeights(n, schedule.eta, schedule.alpha, design)

    def estimate(self, probabilities: np.ndarray, arm: int, reward: float) -> np.ndarray:
        features = self.features
        information = features.T @ (probabilities[:, None] * features)   # Q_t
        return features @ linear_estimate(information, features[arm], reward)

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        # P-greedy reserves an n x n basis (newton_basis) before it knows how many rows it keeps.
        return super().footprint(params, arms, dim, horizon) + 8 * arms * arms

    def diagnostics(self) -> dict[str, float]:
        return dict(self.values)


# ---- on a sharded domain (SPEC 4, core.kernel.sharded) -------------------------------------------


class APGExp3Slice(AlgorithmSlice):
    """APG-Exp3's part of one shard: the G-optimal design pi on the slice, with g(x) computed
    elementwise per point (core.kernel.sharded.partition), and the linear estimate N(x)^T theta."""

    def __init__(self, shard):
        super().__init__(shard)
        self.design = np.zeros(0)     # pi on the slice while Fedorov-Wynn runs
        self.leverage = np.zeros(0)   # g(x) on the slice
        self.bound = 1.0              # the fixed-point scale of V(pi)'s entries (>= max k(x, x))

    @answers(DesignInformation)
    def information(self, request: DesignInformation | None = None) -> np.ndarray:
        """sum_x pi(x) N(x) N(x)^T on the slice, as exact fixed-point words."""
        features, design = self.shard.factors, self.design
        return block_sums(self.shard.blocks, lambda a, b: features[a:b].T @ (design[a:b, None] * features[a:b]),
                          self.bound)

    @answers(DesignStart)
    def start(self, request: DesignStart) -> np.ndarray:
        self.bound = request.bound
        self.design = np.full(self.shard.stop - self.shard.start, 1.0 / self.shard.n)
        return self.information()

    @answers(DesignLeverage)
    def largest(self, request: DesignLeverage) -> Leverage:
        """g(x) = N(x)^T V^{-1} N(x) (elementwise per point); the slice's largest with its features."""
        features = self.shard.factors
        self.leverage = rowwise_dot(rowwise_matmul(features, request.inverse) * features, np.ones(len(request.inverse)))
        return self._largest()

    @answers(DesignMove)
    def move(self, request: DesignMove) -> Leverage:
        """The Sherman-Morrison update of g (elementwise per point) and the design's move towards the pick."""
        step = request.step
        self.leverage = step.leverage(self.leverage, rowwise_dot(self.shard.factors, step.direction))
        step.move(self.design, self.shard.local(request.pick))
        return self._largest()

    def _largest(self) -> Leverage:
        local = int(np.argmax(self.leverage))
        return Leverage(float(self.leverage[local]), self.shard.start + local, self.shard.factors[local].copy())

    @answers(Ties)
    def ties(self, request: Ties) -> Tied | None:
        """The slice's part of the design's choice among the points of largest g (core.engine.ties)."""
        if request.quantity != "leverage":
            raise TypeError(f"APG-Exp3's slice has no {request.quantity!r}")
        shard = self.shard
        found = tied_among(self.leverage, request.edge, request.key, np.arange(shard.start, shard.stop))
        if found is None:
            return None
        priority, local = found
        return Tied(priority, shard.start + local, float(self.leverage[local]), shard.factors[local].copy())

    @answers(DesignDone)
    def done(self, request: DesignDone) -> np.ndarray:
        """pi = the design; the global indices of its support points on the slice."""
        self.shard.exploration = self.design.copy()
        self.design = np.zeros(0)
        return self.shard.start + np.flatnonzero(self.shard.exploration > 1e-12)

    @answers(LinearEstimate)
    def estimate(self, request: LinearEstimate) -> Updated:
        """u_t = N(.)^T theta (SPEC 3.5); the weights and the environment move on."""
        return self.shard.add_estimate(request.eta, self.shard.factors @ request.theta, request.candidate, request.arm)


class ShardedDesign:
    """The G-optimal design's points on the shards (core.kernel.exp3.DesignPoints): V(pi) as an exact
    fixed-point sum over the shards' blocks (scale ``bound``), g(x) and the design's moves on each slice."""

    def __init__(self, group: ShardGroup, bound: float, key: int):
        self.group, self.bound, self.key = group, bound, key

    def _inverse(self, words: list[np.ndarray]) -> np.ndarray:
        return np.linalg.inv(from_fixed(np.sum(np.stack(words), axis=0), self.bound))

    def start(self) -> np.ndarray:
        return self._inverse(self.group.map(DesignStart(self.bound)))

    def inverse(self) -> np.ndarray:
        return self._inverse(self.group.map(DesignInformation()))

    def largest(self, inverse: np.ndarray) -> tuple[float, int, np.ndarray]:
        return self._largest(self.group.map(DesignLeverage(inverse)))

    def move(self, step: DesignStep, pick: int) -> tuple[float, int, np.ndarray]:
        return self._largest(self.group.map(DesignMove(step, pick)))

    def _largest(self, parts: list[Leverage]) -> tuple[float, int, np.ndarray]:
        best = global_choice(self.group, parts, "leverage", self.key)
        return best.value, best.index, best.features


class ShardedAPGExp3(ShardedExp3, shards=APGExp3):
    """APG-Exp3 on shards (module docstring)."""

    Slice = APGExp3Slice
    STATE = ("values",)
    linear = True

    values: dict[str, float]   # the schedule's and the design's diagnostics

    def explore(self, trial) -> None:
        """Newton basis by P-greedy, G-optimal design by Fedorov-Wynn (SPEC 3.5)."""
        params, group = trial.params, trial.group
        words = trial_seed_words(trial)
        basis, max_power = pivoted_cholesky(group, trial.n, None, pgreedy_tolerance(params, trial.n, trial.horizon),
                                            tie_key(words, P_GREEDY))
        group.map(PivotsDone(keep_factors=True))
        schedule = APGSchedule(params, trial.n, trial.horizon, len(basis), math.sqrt(max(max_power, 0.0)))
        kernel = trial.kernel
        # |V(pi)'s entries| <= max_x k(x, x): k(0, 0) for a stationary kernel, d / l^2 for the linear one on [0, 1]^d.
        bound = fixed_bound(max(float(np.max(kernel.diag(np.zeros((1, trial.dim))))), 1.0)
                            if kernel.name != "linear" else float(trial.dim) / kernel.lengthscale ** 2)
        g_max, iterations = fedorov_wynn(ShardedDesign(group, bound, tie_key(words, DESIGN)), len(basis),
                                         params.epsilon, params.max_iterations)
        support = np.concatenate(group.map(DesignDone()))
        self.eta, self.alpha = schedule.eta, schedule.alpha
        self.values = {**schedule.values(g_max, iterations, len(support)),
                       "design_digest": design_digest(np.asarray(basis), support)}

    def update(self, trial, t, parts, located, candidate, reward) -> list[Updated]:
        information = np.sum(np.stack([part.information for part in parts]), axis=0)   # Q_t
        theta = linear_estimate(information, located.features, reward)
        return trial.group.map(LinearEstimate(theta, self.eta, candidate, located.index))

    def diagnostics(self) -> dict[str, float]:
        return dict(self.values)
