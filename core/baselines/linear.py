"""Linear baselines: LinUCB, LinTS and LinRBMLE (SPEC 1.5).

All three keep the ridge statistics V = lam I + sum_s x_s x_s^T and b = sum_s r_s x_s, with
theta_hat = V^{-1} b, and differ only in the index they maximise:

- LinUCB (Li et al. 2010):        theta_hat^T x + nu sqrt(x^T V^{-1} x)
- LinTS (Agrawal & Goyal 2013):   theta~^T x, theta~ ~ N(theta_hat, nu^2 V^{-1})
- LinRBMLE (Hung et al. 2021):    theta_hat^T x + (alpha(t) / 2) x^T V^{-1} x, alpha(t) = nu sqrt(t)

With the disjoint encoding of the classification bandits (SPEC 1.2) every context lives in one
block of d' columns, so V is block diagonal: the statistics are kept per block (K blocks of
d' x d' instead of one d'K x d'K matrix). This is exact, not an approximation.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
from pydantic import Field

from banditsweep.core.engine.contracts import Config, Decision, NonFiniteError, Policy, Problem


class RidgeStatistics:
    """V^{-1} and b, per block when contexts are disjoint; rank-one Sherman-Morrison updates."""

    STATE = ("block", "v_inv", "b")

    def __init__(self, problem: Problem, lam: float):
        self.block = problem.disjoint_block
        width = self.block or problem.dim
        blocks = problem.num_arms if self.block else 1
        self.v_inv = np.repeat(np.eye(width)[None] / lam, blocks, axis=0)
        self.b = np.zeros((blocks, width))

    def active(self, contexts: np.ndarray) -> np.ndarray:
        """Each arm's context restricted to its block: (K, width)."""
        if not self.block:
            return contexts
        k = contexts.shape[0]
        return contexts.reshape(k, k, self.block)[np.arange(k), np.arange(k)]

    def block_of(self, arm: int) -> int:
        return arm if self.block else 0

    def theta(self) -> np.ndarray:
        return np.einsum("bij,bj->bi", self.v_inv, self.b)

    def mean_and_variance(self, contexts: np.ndarray, theta: np.ndarray | None = None):
        """theta^T x_a and x_a^T V^{-1} x_a for every arm a."""
        x = self.active(contexts)
        theta = self.theta() if theta is None else theta
        if self.block:
            v_x = np.einsum("kij,kj->ki", self.v_inv, x)
            mean = np.einsum("ki,ki->k", x, theta)
        else:
            v_x = x @ self.v_inv[0]
            mean = x @ theta[0]
        return mean, np.einsum("ki,ki->k", x, v_x)

    def update(self, contexts: np.ndarray, arm: int, reward: float) -> None:
        x = self.active(contexts)[arm]
        block = self.block_of(arm)
        v_x = self.v_inv[block] @ x
        self.v_inv[block] -= np.outer(v_x, v_x) / (1.0 + x @ v_x)
        self.b[block] += reward * x


class LinearParams(Config):
    nu: float = Field(1.0, ge=0.0, description="exploration scale")
    lam: float = Field(1.0, gt=0.0, description="ridge regulariser lambda (V_0 = lambda I)")


class _LinearPolicy(Policy):
    STATE = ("stats",)

    Params = LinearParams

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        return 8 * (3 * dim * dim + 2 * arms * dim)   # A, its inverse, a product; the round's contexts

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.stats = RidgeStatistics(problem, params.lam)

    @abstractmethod
    def index(self, t: int, contexts: np.ndarray) -> np.ndarray:
        """The score each arm is ranked by in round t."""

    def select(self, t: int, contexts: np.ndarray) -> Decision:
        index = self.index(t, contexts)
        return Decision(arm=int(np.argmax(index)), scores=index)   # the round loop checks the index

    def update(self, t: int, contexts: np.ndarray, arm: int, reward: float) -> None:
        self.stats.update(contexts, arm, reward)


class LinUCB(_LinearPolicy):
    """LinUCB (Li et al. 2010): ridge estimate plus nu sqrt(x^T V^-1 x)."""

    STATE = ()

    score_name = "index"

    def index(self, t, contexts):
        mean, variance = self.stats.mean_and_variance(contexts)
        return mean + self.params.nu * np.sqrt(np.maximum(variance, 0.0))


class LinTS(_LinearPolicy):
    """LinTS (Agrawal & Goyal 2013): a draw from N(theta_hat, nu^2 V^-1)."""

    STATE = ()

    score_name = "sampled reward"

    def index(self, t, contexts):
        theta = self.stats.theta()
        noise = self.rng.standard_normal(theta.shape)
        # theta~ = theta_hat + nu L z with L L^T = V^{-1}, per block.
        try:
            factor = np.linalg.cholesky(self.stats.v_inv)
        except np.linalg.LinAlgError:
            # Diverged statistics (e.g. lam = 1e-300: V^{-1} = 1e300 I overflows in the first update)
            # are named as such, not as a matrix that is not positive definite.
            if not np.isfinite(self.stats.v_inv).all():
                raise NonFiniteError("the LinTS ridge statistics V^{-1} are not finite") from None
            raise
        sampled = theta + self.params.nu * np.einsum("bij,bj->bi", factor, noise)
        mean, _ = self.stats.mean_and_variance(contexts, theta=sampled)
        return mean


class LinRBMLE(_LinearPolicy):
    """LinRBMLE (Hung et al. 2021): ridge estimate plus a reward bias alpha(t) / 2 x^T V^-1 x."""

    STATE = ()

    score_name = "index"

    def index(self, t, contexts):
        mean, variance = self.stats.mean_and_variance(contexts)
        alpha = self.params.nu * np.sqrt(t)
        return mean + 0.5 * alpha * variance
