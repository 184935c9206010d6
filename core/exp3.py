"""Shared Exp3 machinery of APG-Exp3, Kernelized Exp3 and RLS-Kernelized Exp3 (SPEC 3.1, 3.4, 3.5).

Every one of them plays, in round t,

    P~_t(x) proportional to exp(eta sum_{s<t} u_s(x)),    P_t = (1 - alpha) P~_t + alpha pi,

draws x_t ~ P_t, observes y_t = f_t(x_t) and adds an estimate u_t of f_t to the scores. They differ
only in pi (MVR design, G-optimal design, uniform) and in the estimator u_t. :class:`ExponentialWeights`
keeps the scores in log space (eta times the cumulative estimates), so that exp never overflows
however large the importance-weighted estimates get; :class:`Exp3Policy` is the round skeleton.

Lockstep trial batching (:class:`Exp3Batch`, stepped by the round loop of core.trial): each trial
keeps its own policy, weights and random stream and selects exactly as alone, exposing its P_t to
its adversary (SPEC 2.3); only the estimate is computed for all trials at once, by
:meth:`Exp3Policy.estimate_batch`. An algorithm opts in by defining ``batch_key`` (Kernelized Exp3:
one batched Cholesky of the B weighted kernel systems per round) and overriding ``estimate_batch``.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp

from banditsweep.core.contracts import ADVERSARIAL_DOMAIN, Decision, Policy, PolicyBatch


class ExponentialWeights:
    """Log-space exponential weights over n points, mixed with an exploration distribution."""

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
    cumulative = np.cumsum(probabilities)
    index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(index, len(probabilities) - 1)


def empirical_distribution(sequence: np.ndarray, size: int) -> np.ndarray:
    """The empirical distribution of a sequence of indices (repeats counted), as a vector of length n."""
    counts = np.bincount(np.asarray(sequence, dtype=np.int64), minlength=size).astype(np.float64)
    return counts / counts.sum()


# ---- exploration designs ----------------------------------------------------------------------------

# Frank-Wolfe with ridge 0 keeps V^{-1} by Sherman-Morrison and recomputes it every REFRESH iterations.
REFRESH = 256


def _design_inverse(features: np.ndarray, design: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V(pi)^{-1} and g(x) = N(x)^T V^{-1} N(x), computed directly (ridge 0)."""
    information = features.T @ (design[:, None] * features)
    inverse = np.linalg.inv(information)
    return inverse, np.einsum("ij,jk,ik->i", features, inverse, features)


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
                     ridge: float = 0.0) -> tuple[np.ndarray, float, int]:
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
    """
    n, dim = features.shape
    design = np.full(n, 1.0 / n)
    if ridge > 0:
        values, rotated, leverage = _regularised_state(features, design, ridge)
    else:
        inverse, leverage = _design_inverse(features, design)
    iterations = 0
    while iterations < max_iterations:
        pick = int(np.argmax(leverage))
        g = leverage[pick]
        target = dim if ridge <= 0 else float(design @ leverage)
        if g <= (1.0 + epsilon) * target:
            break
        if ridge > 0:
            support = np.flatnonzero(design > 0)
            away = int(support[np.argmin(leverage[support])])
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
            continue
        step = (g / dim - 1.0) / (g - 1.0)
        direction = inverse @ features[pick]
        coefficient = step / ((1.0 - step) + step * g)
        inverse = (inverse - coefficient * np.outer(direction, direction)) / (1.0 - step)
        leverage = (leverage - coefficient * (features @ direction) ** 2) / (1.0 - step)
        design *= 1.0 - step
        design[pick] += step
        iterations += 1
        if iterations % REFRESH == 0:
            inverse, leverage = _design_inverse(features, design)
    if ridge > 0:
        _, _, leverage = _regularised_state(features, design, ridge)
    else:
        _, leverage = _design_inverse(features, design)
    return design, float(leverage.max()), iterations


class Exp3Policy(Policy):
    """Round skeleton of the Exp3 family on a finite domain (ADVERSARIAL_DOMAIN problems).

    Subclasses implement :meth:`prepare` (the exploration distribution and step sizes, run once
    on the domain at the first round) and :meth:`estimate` (the reward estimate u_t).
    ``select`` exposes P_t in the Decision: the adaptive adversary of SPEC 2.3 reads it.
    """

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

    policies: list[Exp3Policy]

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        probabilities = np.stack([policy.probabilities for policy in self.policies])
        estimates = type(self.policies[0]).estimate_batch(self.policies, probabilities, arms, rewards)
        for policy, estimate in zip(self.policies, estimates):
            policy.weights.add(estimate)
