"""RLS-Kernelized Exp3 (the kernel paper's Alg. 5, eqs. 6-7; SPEC 3.4) and its approximated-MVR
variant (Alg. 6, App. 14).

As Kernelized Exp3 (``kernel_exp3``: same eta, alpha, gamma_T, MVR exploration), but G_t is replaced
by its projection onto s_t landmark columns chosen each round by recursive RLS-Nystrom
(``core.nystrom``, SPEC 3.3) on the P_t-weighted kernel

    k~_t(x, x') = sqrt(P_t(x) P_t(x')) k(x, x')     with ridge mu = lambda / T.

With the Nystrom embedding phi_t(x) = [(S^T K~_t S)^{1/2}]^+ S^T k~_t(x) in R^{s_t} and
A_t = sum_x' phi_t(x') phi_t(x')^T + mu I:

    f~_t(x)       = y_t / sqrt(P_t(x) P_t(x_t)) phi_t(x)^T A_t^{-1} phi_t(x_t)                        (6)
    sigma~_t^2(x) = T / (lambda P_t(x)) (k~_t(x, x) - ||phi_t(x)||^2) + phi_t(x)^T A_t^{-1} phi_t(x) / P_t(x)   (7)
    u~_t = f~_t + beta sigma~_t,   beta = B (1 + sqrt 2) sqrt(lambda / T),   delta = 0.1

Every factor sqrt(P_t(x)) cancels: phi_t(x) = sqrt(P_t(x)) g_t(x) with
g_t(x) = [(S^T K~_t S)^{1/2}]^+ S^T D^{1/2} k(x) (the embedding of k, weighted on the landmark side
only), so (6)-(7) are computed as

    f~_t(x) = y_t g_t(x)^T A_t^{-1} g_t(x_t),   sigma~_t^2(x) = (k(x, x) - ||g_t(x)||^2) / mu + g_t(x)^T A_t^{-1} g_t(x),
    A_t = sum_x P_t(x) g_t(x) g_t(x)^T + mu I,

without dividing by probabilities that may be tiny. Cost per round: O(n s_t^2 + s_t^3) for the
embedding, A_t and the quadratic forms, plus the O(n s^2) sampler; no n x n object.
With the landmarks forced to all of X (``landmarks: all``) and beta set to the exact algorithm's
value, this is Kernelized Exp3 to rounding error (tested).

``sampler`` chooses the recursive RLS-Nystrom routine: ``practical`` (default, SPEC 3.3's fixed-ridge
variant: deterministic halving, oversampling ``oversample`` log(d_eff / delta), base level ``base_size``)
or ``theory`` (Musco & Musco's Algorithm 2 as analysed, with its factors and small-n rule; see
core.nystrom). ``oversample`` and ``base_size`` only apply to ``practical``.

``rls_kernel_exp3_amvr`` (paper Alg. 6): the MVR sequence is computed on a recursive RLS-Nystrom
approximation of k itself (ridge lambda, the GP noise), O(n s L) instead of O(n L^2) for length L.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field
from scipy import linalg

from banditsweep.core.algorithms.kernel_exp3 import Exp3ScheduleParams
from banditsweep.core.exp3 import RLS_BETA_FACTOR, Exp3Policy, Exp3Schedule, ExponentialWeights, empirical_distribution
from banditsweep.core.mvr import approximate_mvr_sequence, mvr_sequence
from banditsweep.core.nystrom import (NystromSample, nystrom_embedding, recursive_rls_nystrom,
                                      recursive_rls_nystrom_theory, weighted_kernel_block)

BETA_FACTOR = RLS_BETA_FACTOR  # Theorem 3: beta = B (1 + sqrt 2) sqrt(lambda / T)


class RLSKernelExp3Params(Exp3ScheduleParams):
    beta: float | None = Field(None, ge=0, description="confidence width; unset: B (1 + sqrt 2) sqrt(lambda / T)")
    delta: float = Field(0.1, gt=0, lt=1, description="failure probability of the Nystrom sampler")
    oversample: float = Field(1.0, gt=0, description="practical sampler: c in the oversampling q = c log(d_eff / delta)")
    base_size: int = Field(256, ge=2, description="practical sampler: size of the sampler's smallest level")
    landmarks: Literal["rls", "all"] = Field("rls", description="'all': S_t = X (reference check)")
    sampler: Literal["practical", "theory"] = Field(
        "practical", description="recursive RLS-Nystrom: practical (core.nystrom, fixed-ridge practical "
                                 "variant) or theory (Musco & Musco's Alg. 2 with its factors 3/2, 16 and "
                                 "the small-n rule m <= 192 log(1/delta))")


def nystrom_statistics(kernel, domain: np.ndarray, probabilities: np.ndarray, landmarks: np.ndarray,
                       mu: float, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(g^T A^{-1} g(x_t), sigma~^2) for every x: the two vectors of eqs. (6)-(7) with y_t = 1."""
    root = np.sqrt(probabilities[landmarks])
    columns = kernel.columns(domain, landmarks) * root[None, :]          # K D^{1/2} S: (n, s)
    landmark_block = columns[landmarks] * root[:, None]                  # S^T K~ S
    embedding = nystrom_embedding(columns, landmark_block)               # g_t: (n, r)
    system = embedding.T @ (probabilities[:, None] * embedding)
    system[np.diag_indices_from(system)] += mu
    factor = linalg.cho_factor(system, lower=True, check_finite=False)
    solved = linalg.cho_solve(factor, embedding.T, check_finite=False)   # A^{-1} g(x) as columns: (r, n)
    cross = embedding @ solved[:, index]
    quadratic = np.einsum("ij,ji->i", embedding, solved)
    residual = np.maximum(kernel.diag(domain) - np.einsum("ij,ij->i", embedding, embedding), 0.0)
    return cross, residual / mu + quadratic


class RLSKernelExp3(Exp3Policy):
    """RLS-Kernelized Exp3 (kernel paper, Alg. 5): Kernelized Exp3 on a Nystrom approximation."""

    Params = RLSKernelExp3Params
    label = "RLS-Kernelized Exp3"

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.schedule = Exp3Schedule(params, problem, beta_factor=BETA_FACTOR)
        self.landmark_counts: list[int] = []
        self.effective_dimensions: list[float] = []
        self.mvr_distinct = 0
        self.mvr_landmarks = 0

    def exploration_sequence(self, domain: np.ndarray) -> np.ndarray:
        """The exact MVR sequence (SPEC 3.2), as in Kernelized Exp3."""
        sequence, _ = mvr_sequence(self.problem.kernel, domain, self.schedule.design_length, self.params.lam)
        return sequence

    def prepare(self, domain: np.ndarray) -> ExponentialWeights:
        sequence = self.exploration_sequence(domain)
        self.mvr_distinct = len(np.unique(sequence))
        n = len(domain)
        return ExponentialWeights(n, self.schedule.eta, self.schedule.alpha, empirical_distribution(sequence, n))

    def sample_landmarks(self, block, diagonal: np.ndarray, ridge: float) -> NystromSample:
        """Recursive RLS-Nystrom by ``sampler`` (practical or Musco & Musco's Alg. 2) at ``ridge``."""
        if self.params.sampler == "theory":
            return recursive_rls_nystrom_theory(block, diagonal, self.rng, ridge=ridge, delta=self.params.delta)
        return recursive_rls_nystrom(block, diagonal, self.rng, ridge=ridge, delta=self.params.delta,
                                     oversample=self.params.oversample, base_size=self.params.base_size)

    def landmarks(self, probabilities: np.ndarray) -> np.ndarray:
        """S_t: recursive RLS-Nystrom on the P_t-weighted kernel with ridge mu (SPEC 3.3)."""
        domain, kernel = self._domain, self.problem.kernel
        if self.params.landmarks == "all":
            self.effective_dimensions.append(float("nan"))
            return np.arange(len(domain))
        sample = self.sample_landmarks(weighted_kernel_block(kernel, domain, probabilities),
                                       probabilities * kernel.diag(domain), self.schedule.mu)
        self.effective_dimensions.append(sample.effective_dimension)
        return np.sort(sample.landmarks)

    def estimate(self, probabilities: np.ndarray, arm: int, reward: float) -> np.ndarray:
        landmarks = self.landmarks(probabilities)
        self.landmark_counts.append(len(landmarks))
        cross, variance = nystrom_statistics(self.problem.kernel, self._domain, probabilities, landmarks,
                                             self.schedule.mu, arm)
        return reward * cross + self.schedule.beta * np.sqrt(variance)

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        # K D^{1/2} S, the embedding and a temporary, n x s each: s = n with every point a landmark,
        # else a few levels of the sampler (its size is only known once it has run).
        landmarks = arms if params.landmarks == "all" else min(arms, 4 * params.base_size)
        return super().footprint(params, arms, dim, horizon) + 3 * 8 * arms * landmarks

    def diagnostics(self) -> dict[str, float]:
        counts = np.asarray(self.landmark_counts or [0], dtype=np.float64)
        effective = np.asarray(self.effective_dimensions or [np.nan])
        finite = effective[np.isfinite(effective)]
        return {
            **self.schedule.as_dict(),
            "delta": self.params.delta,
            "s_t_mean": float(counts.mean()),
            "s_t_max": float(counts.max()),
            "s_t_min": float(counts.min()),
            "effective_dimension_mean": float(finite.mean()) if finite.size else float("nan"),
            "mvr_distinct_points": float(self.mvr_distinct),
            "mvr_landmarks": float(self.mvr_landmarks),
        }


class RLSKernelExp3AMVR(RLSKernelExp3):
    """RLS-Kernelized Exp3 with the approximated MVR exploration sequence (paper Alg. 6)."""

    label = "RLS-Kernelized Exp3 (approximated MVR)"

    def exploration_sequence(self, domain: np.ndarray) -> np.ndarray:
        kernel, lam = self.problem.kernel, self.params.lam
        diagonal = kernel.diag(domain)
        if self.params.landmarks == "all":
            landmarks = np.arange(len(domain))
        else:
            def block(rows, cols):
                return kernel(domain[rows], domain[cols])

            landmarks = np.sort(self.sample_landmarks(block, diagonal, lam).landmarks)
        self.mvr_landmarks = len(landmarks)
        columns = kernel.columns(domain, landmarks)
        features = nystrom_embedding(columns, columns[landmarks])
        sequence, _ = approximate_mvr_sequence(features, diagonal, self.schedule.design_length, lam)
        return sequence
