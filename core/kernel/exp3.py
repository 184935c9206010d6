"""Shared Exp3 machinery of APG-Exp3, Kernelized Exp3 and RLS-Kernelized Exp3 (SPEC 3.1, 3.4, 3.5).

Every one of them plays, in round t,

    P~_t(x) proportional to exp(eta sum_{s<t} u_s(x)),    P_t = (1 - alpha) P~_t + alpha pi,

draws x_t ~ P_t, observes y_t = f_t(x_t) and adds an estimate u_t of f_t to the scores. They differ
only in pi (MVR design, G-optimal design, uniform) and in the estimator u_t. :class:`ExponentialWeights`
keeps the scores in log space (eta times the cumulative estimates), so that exp never overflows
however large the importance-weighted estimates get; :class:`Exp3Policy` is the round skeleton.

What the unsharded algorithms and the sharded trial (core.kernel.sharded) share is here, once: the draw
of x_t ~ P_t by inversion (:func:`sample`, :func:`draw` and :func:`invert`), the
step sizes (:class:`Exp3Schedule` of Kernelized and RLS-Kernelized Exp3, :class:`APGSchedule` of
APG-Exp3) and the Fedorov-Wynn iteration of the G-optimal design (:func:`fedorov_wynn` over the
:class:`DesignPoints` of one array or of the shards, each move a :class:`DesignStep`).

Lockstep trial batching (:class:`Exp3Batch`, stepped by core.engine.trial.TrialRun): each trial
keeps its own policy, weights and random stream and selects exactly as alone, exposing its P_t to
its adversary (SPEC 2.3); only the estimate is computed for all trials at once, by
:meth:`Exp3Policy.estimate_batch`. An algorithm opts in by defining ``batch_key`` (Kernelized Exp3:
one batched Cholesky of the B weighted kernel systems per round) and overriding ``estimate_batch``.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp

from banditsweep.core.engine.contracts import ADVERSARIAL_DOMAIN, Decision, Policy, PolicyBatch
from banditsweep.core.kernel.kernels import growth_rate
from banditsweep.core.engine.ties import DESIGN_AWAY, seed_words, tie_key, tied_argmax


class ExponentialWeights:
    """Log-space exponential weights over n points, mixed with an exploration distribution."""

    STATE = ("eta", "alpha", "exploration", "log_weights")

    def __init__(self, size: int, eta: float, alpha: float, exploration: np.ndarray):
        if exploration.shape != (size,) or not np.isclose(exploration.sum(), 1.0) or exploration.min() < 0:
            raise ValueError("the exploration distribution must be a probability vector over the domain")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"mixing weight alpha must lie in [0, 1], got {alpha}")
        self.eta = float(eta)
        self.alpha = float(alpha)
        self.exploration = exploration
        self.log_weights = np.zeros(size)  # eta * sum_{s<t} u_s(x)

    def exponential_part(self) -> np.ndarray:
        """P~_t = softmax(log weights), computed with the log-sum-exp shift."""
        return np.exp(self.log_weights - logsumexp(self.log_weights))

    def distribution(self) -> np.ndarray:
        """P_t = (1 - alpha) P~_t + alpha pi."""
        return (1.0 - self.alpha) * self.exponential_part() + self.alpha * self.exploration

    def add(self, estimate: np.ndarray) -> None:
        """Scores += eta u_t."""
        self.log_weights += self.eta * estimate
        # Re-centre: softmax is shift invariant and this keeps the scores near zero.
        self.log_weights -= self.log_weights.max()


def sample(probabilities: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from P by inversion of the cumulative sum (one uniform number per round)."""
    return draw(probabilities, rng).index


@dataclass(frozen=True)
class Inversion:
    """Where a target u C_n falls in the cumulative sums C_i = p_1 + ... + p_i: the first i with
    C_i > target (the last where rounding leaves none), and ``rest`` = target - C_{i-1}, how far
    into p_i's mass it falls."""

    index: int
    rest: float


def draw(masses: np.ndarray, rng: np.random.Generator) -> Inversion:
    """The inversion of u C_n, u one uniform number: a draw from the masses p (:func:`sample`). A
    sharded trial draws with the masses of its slices, then inverts ``rest`` inside the slice drawn
    (:func:`invert`): the point :func:`sample` finds on the whole P, up to the rounding of the masses."""
    cumulative = np.cumsum(masses)
    return invert(cumulative, rng.random() * cumulative[-1])


def invert(cumulative: np.ndarray, target: float) -> Inversion:
    """The :class:`Inversion` of ``target`` in the cumulative sums ``cumulative`` (increasing)."""
    index = min(int(np.searchsorted(cumulative, target, side="right")), len(cumulative) - 1)
    return Inversion(index, float(target - cumulative[index - 1]) if index else float(target))


def empirical_distribution(sequence: np.ndarray, size: int) -> np.ndarray:
    """The empirical distribution of a sequence of indices (repeats counted), as a vector of length n."""
    counts = np.bincount(np.asarray(sequence, dtype=np.int64), minlength=size).astype(np.float64)
    return counts / counts.sum()


# ---- step sizes ----------------------------------------------------------------------------------

# Theorem 3's confidence width is (1 + sqrt 2) times Theorem 1's: beta = B (1 + sqrt 2) sqrt(lambda / T).
RLS_BETA_FACTOR = 1.0 + math.sqrt(2.0)


class Exp3Schedule:
    """The derived constants shared by Kernelized Exp3 and RLS-Kernelized Exp3 (SPEC 3.1, 3.4), from
    their parameters ``c3``, ``c4``, ``lam``, ``beta`` (kernel_exp3.Exp3ScheduleParams)."""

    STATE = ("gamma_T", "eta", "alpha_formula", "alpha", "mu", "beta_formula", "beta", "design_length")

    def __init__(self, params, problem, beta_factor: float = 1.0):
        horizon, dim = problem.horizon, problem.dim
        self.gamma_T = growth_rate(problem.kernel, horizon, dim)
        self.eta = params.c3 / math.sqrt(horizon * self.gamma_T)
        self.alpha_formula = params.c4 * self.eta * self.gamma_T
        self.alpha = min(1.0, self.alpha_formula)
        self.mu = params.lam / horizon
        self.beta_formula = beta_factor * problem.norm_bound * math.sqrt(params.lam / horizon)
        self.beta = self.beta_formula if params.beta is None else float(params.beta)
        self.design_length = max(1, math.ceil(horizon * self.alpha))

    def as_dict(self) -> dict[str, float]:
        return {"gamma_T": self.gamma_T, "eta": self.eta, "alpha": self.alpha,
                "alpha_formula": self.alpha_formula, "beta": self.beta, "beta_formula": self.beta_formula,
                "mu": self.mu, "mvr_length": float(self.design_length)}


def pgreedy_tolerance(params, n: int, horizon: int) -> float:
    """APG-Exp3's P-greedy admissible error e: ``params.tolerance``, else log|X| / T (SPEC 3.5)."""
    return params.tolerance or math.log(n) / horizon


class APGSchedule:
    """APG-Exp3's constants (SPEC 3.5) from its parameters ``c1``, ``c2``, ``tolerance``
    (apg_exp3.APGExp3Params) and the Newton basis P-greedy found on |X| = n points: D_T, its final
    largest sqrt(power) ``max_power``, eta = c1 / sqrt(D_T T), alpha = c2 eta D_T (capped at 1,
    project choice)."""

    def __init__(self, params, n: int, horizon: int, dim: int, max_power: float):
        self.tolerance = pgreedy_tolerance(params, n, horizon)
        if dim == 0:
            # P-greedy admits no basis function when the tolerance reaches every sqrt(k(x, x)): APG-Exp3
            # (eta = c1 / sqrt(D_T T)) is not defined there; say so rather than divide by zero.
            raise ValueError(f"APG-Exp3: the P-greedy tolerance {self.tolerance:.3g} (log|X| / T = log {n} / "
                             f"{horizon} unless `tolerance` is set) is not below max sqrt(k(x, x)) = {max_power:.3g}, "
                             f"so the Newton basis is empty; use a horizon T > log|X| = {math.log(n):.3g} or a "
                             "smaller `tolerance`")
        self.dim, self.max_power = dim, max_power
        self.eta = params.c1 / math.sqrt(dim * horizon)
        self.alpha_formula = params.c2 * self.eta * dim
        self.alpha = min(1.0, self.alpha_formula)

    def values(self, g_max: float, iterations: int, support: int) -> dict[str, float]:
        """The diagnostics of the schedule and of the design (its final max g, iterations, support)."""
        return {"D_T": float(self.dim), "pgreedy_tolerance": self.tolerance, "pgreedy_max_power": self.max_power,
                "design_g_max": g_max, "design_g_ratio": g_max / self.dim, "design_iterations": float(iterations),
                "design_support": float(support), "eta": self.eta, "alpha": self.alpha,
                "alpha_formula": self.alpha_formula}


# ---- exploration designs ----------------------------------------------------------------------------

# Frank-Wolfe with ridge 0 keeps V^{-1} by Sherman-Morrison and recomputes it every REFRESH iterations.
REFRESH = 256


class DesignStep:
    """One Fedorov-Wynn move (ridge 0) of the design towards the point of largest g(x) = g, whose
    features are ``row`` (D of them): the step gamma = (g / D - 1) / (g - 1) and Sherman-Morrison's
    direction V^{-1} psi and coefficient. Small (D numbers): it is what the shards are sent."""

    def __init__(self, inverse: np.ndarray, row: np.ndarray, g: float, dim: int):
        self.step = (g / dim - 1.0) / (g - 1.0)
        self.direction = inverse @ row
        self.coefficient = self.step / ((1.0 - self.step) + self.step * g)

    def inverse(self, inverse: np.ndarray) -> np.ndarray:
        """V^{-1} after the move, from V^{-1} before."""
        return (inverse - self.coefficient * np.outer(self.direction, self.direction)) / (1.0 - self.step)

    def leverage(self, leverage: np.ndarray, projection: np.ndarray) -> np.ndarray:
        """g(x) after the move, from g(x) before and ``projection`` = psi(x)^T direction."""
        return (leverage - self.coefficient * projection ** 2) / (1.0 - self.step)

    def move(self, design: np.ndarray, pick: int | None) -> None:
        """pi <- (1 - gamma) pi + gamma e_pick (``pick`` None: the point is not in ``design``)."""
        design *= 1.0 - self.step
        if pick is not None:
            design[pick] += self.step


class DesignPoints(Protocol):
    """The points of a ridge-0 design and the design on them: one array of features
    (:func:`g_optimal_design`) or the slices of a sharded trial (core.kernel.algorithms.apg_exp3.ShardedDesign)."""

    def start(self) -> np.ndarray:
        """Set the uniform design; its V(pi)^{-1}."""

    def inverse(self) -> np.ndarray:
        """V(pi)^{-1} of the current design, computed afresh."""

    def largest(self, inverse: np.ndarray) -> tuple[float, int, np.ndarray]:
        """g(x) = psi(x)^T V^{-1} psi(x) for every x from ``inverse``; the largest (among tied ones by
        core.engine.ties' rule), its index and its features."""

    def move(self, step: DesignStep, pick: int) -> tuple[float, int, np.ndarray]:
        """Move the design and g by ``step`` towards ``pick``; the largest g as :meth:`largest`."""


def fedorov_wynn(points: DesignPoints, dim: int, epsilon: float, max_iterations: int) -> tuple[float, int]:
    """The G-optimal design on ``points`` (D = ``dim`` features, ridge 0; APG-Exp3, SPEC 3.5) by
    Fedorov-Wynn from the uniform design: stop at max g <= (1 + eps) D (Kiefer-Wolfowitz: the optimum
    is D). V^{-1} and g are updated by Sherman-Morrison and recomputed every REFRESH iterations.
    Returns (the final max g, computed afresh, and the iterations); the design stays on ``points``."""
    inverse = points.start()
    candidate = points.largest(inverse)
    iterations = 0
    while iterations < max_iterations:
        g, pick, row = candidate
        if g <= (1.0 + epsilon) * dim:
            break
        step = DesignStep(inverse, row, g, dim)
        inverse = step.inverse(inverse)
        candidate = points.move(step, pick)
        iterations += 1
        if iterations % REFRESH == 0:
            inverse = points.inverse()
            candidate = points.largest(inverse)
    return float(points.largest(points.inverse())[0]), iterations


class _Features:
    """The points of :func:`g_optimal_design` (ridge 0): rows psi(x) of one array."""

    def __init__(self, features: np.ndarray, key: int | None):
        self.features, self.key = features, key
        self.design = np.zeros(0)
        self.leverage = np.zeros(0)

    def start(self) -> np.ndarray:
        self.design = np.full(len(self.features), 1.0 / len(self.features))
        return self.inverse()

    def inverse(self) -> np.ndarray:
        return np.linalg.inv(self.features.T @ (self.design[:, None] * self.features))

    def largest(self, inverse: np.ndarray) -> tuple[float, int, np.ndarray]:
        self.leverage = np.einsum("ij,jk,ik->i", self.features, inverse, self.features)
        return self._candidate()

    def move(self, step: DesignStep, pick: int) -> tuple[float, int, np.ndarray]:
        self.leverage = step.leverage(self.leverage, self.features @ step.direction)
        step.move(self.design, pick)
        return self._candidate()

    def _candidate(self) -> tuple[float, int, np.ndarray]:
        pick = tied_argmax(self.leverage, self.key)
        return self.leverage[pick], pick, self.features[pick]


def _regularised_state(features: np.ndarray, design: np.ndarray, ridge: float
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenvalues v of V(pi) = sum_x pi(x) psi(x) psi(x)^T + ridge I, the features in its eigenbasis,
    and g(x) = psi(x)^T V^{-1} psi(x)."""
    information = features.T @ (design[:, None] * features)
    information[np.diag_indices_from(information)] += ridge
    values, vectors = np.linalg.eigh(information)
    rotated = features @ vectors
    return values, rotated, (rotated * rotated) @ (1.0 / values)


def _log_det_step(values: np.ndarray, direction: np.ndarray, ridge: float, low: float, high: float) -> float:
    """The exact line search of Frank-Wolfe on log det V: s in [low, high] maximising

        h(s) = log det((1 - s) V + s (psi psi^T + ridge I))
             = sum_i log d_i + log(1 + s q),   d_i = (1 - s) v_i + s ridge,   q = sum_i psi~_i^2 / d_i,

    in V's eigenbasis (v: eigenvalues, psi~ = ``direction`` rotated), O(r) per point. h is concave, so
    its derivative h'(s) = sum_i (ridge - v_i) / d_i + (q + s q') / (1 + s q), q' = sum_i psi~_i^2 (v_i - ridge) / d_i^2,
    is decreasing: the maximiser is ``low`` or ``high`` when h' keeps one sign on the interval, else its
    root (Brent). s > 0 moves mass towards the point of ``direction``, s < 0 away from it."""
    squared = direction * direction

    def slope(step: float) -> float:
        scaled = (1.0 - step) * values + step * ridge
        q = float((squared / scaled).sum())
        q_prime = float((squared * (values - ridge) / (scaled * scaled)).sum())
        return float(((ridge - values) / scaled).sum()) + (q + step * q_prime) / (1.0 + step * q)

    if slope(high) >= 0:
        return high
    if slope(low) <= 0:
        return low
    return float(brentq(slope, low, high, xtol=1e-15, rtol=1e-12))


def g_optimal_design(features: np.ndarray, epsilon: float, max_iterations: int,
                     ridge: float = 0.0, key: int | None = None) -> tuple[np.ndarray, float, int]:
    """Frank-Wolfe G-optimal design on the rows psi(x) of ``features`` from the uniform start:
    (pi, final max_x g(x), iterations), with g(x) = psi(x)^T V(pi)^{-1} psi(x) and
    V(pi) = sum_x pi(x) psi(x) psi(x)^T + ridge I.

    Each iteration moves pi towards the point of largest g by the step that maximises log det V
    (Kiefer-Wolfowitz: the maximiser of log det is the G-optimal design):

    - ``ridge = 0`` (APG-Exp3, SPEC 3.5): the closed-form Fedorov-Wynn step
      gamma = (g / D - 1) / (g - 1); stop at max g <= (1 + eps) D, D = number of features (the optimum
      is D). V^{-1} and g by Sherman-Morrison, O(n D) per iteration.
    - ``ridge > 0`` (Kernelized Exp3's ``exploration: g_optimal``, the generalised G-optimal design of
      the kernel paper's App. 16 with ridge lambda / (T alpha)): the exact line search of
      :func:`_log_det_step`, with away steps (Wolfe; Todd & Yildirim's variant for optimal designs):
      when the support point of smallest g is further below sum_x pi(x) g(x) than the largest g is
      above it, mass moves away from that point instead (possibly all of it), which keeps the
      convergence linear when the optimum leaves points out. Stop at max g <= (1 + eps) sum_x pi(x) g(x):
      the right side is tr(V^{-1} sum pi psi psi^T), the design's effective dimension, and the condition
      is the equivalence theorem of the regularised problem; max g - sum pi g is Frank-Wolfe's duality
      gap, which bounds the distance of log det V to its maximum. O(n r^2 + r^3) per iteration (one
      eigendecomposition of the r x r matrix V), r = number of features.

    The point of largest g (and the away step's of smallest) is chosen among tied ones by core.engine.ties'
    rule, priorities keyed by ``key`` (the away step's by a key derived from it; None: the smallest index).
    """
    away_key = None if key is None else tie_key((key,), DESIGN_AWAY)
    if ridge <= 0:
        points = _Features(features, key)
        g_max, iterations = fedorov_wynn(points, features.shape[1], epsilon, max_iterations)
        return points.design, g_max, iterations
    n = len(features)
    design = np.full(n, 1.0 / n)
    values, rotated, leverage = _regularised_state(features, design, ridge)
    iterations = 0
    while iterations < max_iterations:
        pick = tied_argmax(leverage, key)
        g = leverage[pick]
        target = float(design @ leverage)
        if g <= (1.0 + epsilon) * target:
            break
        support = np.flatnonzero(design > 0)
        away = int(support[tied_argmax(leverage[support], away_key, indices=support, lowest=True)])
        mass = design[away]
        step = 0.0
        if target - leverage[away] > g - target and mass < 1.0:
            drop = -mass / (1.0 - mass)
            step = _log_det_step(values, rotated[away], ridge, drop, 0.0)
        if step < 0:                        # an away step; at the bound, the point leaves the support
            design *= 1.0 - step
            design[away] = 0.0 if step == drop else design[away] + step
        else:
            step = _log_det_step(values, rotated[pick], ridge, 0.0, 1.0)
            design *= 1.0 - step
            design[pick] += step
        values, rotated, leverage = _regularised_state(features, design, ridge)
        iterations += 1
    _, _, leverage = _regularised_state(features, design, ridge)
    return design, float(leverage.max()), iterations


class Exp3Policy(Policy):
    """Round skeleton of the Exp3 family on a finite domain (ADVERSARIAL_DOMAIN problems).

    Subclasses implement :meth:`prepare` (the exploration distribution and step sizes, run once
    on the domain at the first round) and :meth:`estimate` (the reward estimate u_t).
    ``select`` exposes P_t in the Decision: the adaptive adversary of SPEC 2.3 reads it.
    """

    STATE = ("weights", "probabilities", "_domain", "tie_words")

    supports = frozenset({ADVERSARIAL_DOMAIN})
    score_name = "sampling distribution P_t"

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        return 8 * 6 * arms   # weights, P_t, pi, the estimate u_t and temporaries over the n points

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        if problem.kernel is None or problem.norm_bound is None:
            raise ValueError(f"{type(self).__name__} needs a kernel problem (Problem.kernel and norm_bound)")
        self.weights: ExponentialWeights | None = None
        self.probabilities: np.ndarray | None = None  # P_t of the current round
        self._domain: np.ndarray | None = None
        # The words the policy stream was seeded with (core.engine.ties: the keys of the design's tie
        # priorities), read now, without a draw: a stream restored from a checkpoint has no seed.
        self.tie_words = seed_words(rng)

    def tie_key(self, purpose: int) -> int:
        """The key of this trial's tie priorities for ``purpose`` (core.engine.ties)."""
        return tie_key(self.tie_words, purpose)

    @abstractmethod
    def prepare(self, domain: np.ndarray) -> ExponentialWeights:
        """Once, before the first round: the exploration design, eta and alpha."""

    @abstractmethod
    def estimate(self, probabilities: np.ndarray, arm: int, reward: float) -> np.ndarray:
        """u_t(x) for every x, from P_t, the drawn point x_t and y_t = f_t(x_t)."""

    def select(self, t: int, contexts: np.ndarray) -> Decision:
        if self.weights is None:
            self._domain = contexts
            self.weights = self.prepare(contexts)
        self.probabilities = self.weights.distribution()
        return Decision(arm=sample(self.probabilities, self.rng), probabilities=self.probabilities,
                        scores=self.probabilities)

    def update(self, t: int, contexts: np.ndarray, arm: int, reward: float) -> None:
        self.weights.add(self.estimate(self.probabilities, arm, float(reward)))

    # ---- lockstep trial batching ---------------------------------------------------------------------

    @classmethod
    def estimate_batch(cls, policies: list["Exp3Policy"], probabilities: np.ndarray, arms: np.ndarray,
                       rewards: np.ndarray) -> np.ndarray:
        """u_t of every trial of a batch: (B, n) from P_t (B, n), x_t (B,) and y_t (B,).
        By default one :meth:`estimate` per trial; batched algorithms override it."""
        return np.stack([policy.estimate(probabilities[i], int(arms[i]), float(rewards[i]))
                         for i, policy in enumerate(policies)])

    @classmethod
    def create_batch(cls, params, problem, rngs, environments, device="cpu") -> "Exp3Batch":
        return Exp3Batch([cls(p, problem, rng, device) for p, rng in zip(params, rngs)])


class Exp3Batch(PolicyBatch):
    """Exp3 trials in lockstep: each selects alone; the estimates u_t of all are one batched call."""

    STATE = ()

    policies: list[Exp3Policy]

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        probabilities = np.stack([policy.probabilities for policy in self.policies])
        estimates = type(self.policies[0]).estimate_batch(self.policies, probabilities, arms, rewards)
        for policy, estimate in zip(self.policies, estimates):
            policy.weights.add(estimate)
