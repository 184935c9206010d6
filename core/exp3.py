"""Shared Exp3 machinery of APG-Exp3, Kernelized Exp3 and RLS-Kernelized Exp3 (SPEC 3.1, 3.4, 3.5).

Every one of them plays, in round t,

    P~_t(x) proportional to exp(eta sum_{s<t} u_s(x)),    P_t = (1 - alpha) P~_t + alpha pi,

draws x_t ~ P_t, observes y_t = f_t(x_t) and adds an estimate u_t of f_t to the scores. They differ
only in pi (MVR design, G-optimal design) and in the estimator u_t. :class:`ExponentialWeights`
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


class Exp3Policy(Policy):
    """Round skeleton of the Exp3 family on a finite domain (ADVERSARIAL_DOMAIN problems).

    Subclasses implement :meth:`prepare` (the exploration distribution and step sizes, run once
    on the domain at the first round) and :meth:`estimate` (the reward estimate u_t).
    ``select`` exposes P_t in the Decision: the adaptive adversary of SPEC 2.3 reads it.
    """

    supports = frozenset({ADVERSARIAL_DOMAIN})

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
        return Decision(arm=sample(self.probabilities, self.rng), probabilities=self.probabilities)

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
