"""Maximum variance reduction (SPEC 3.2), exact and on a Nystrom approximation (paper Alg. 6).

Exact MVR on a finite X with GP noise lambda:

    x_1 = argmax_x k(x, x);   x_{j+1} = argmax_x sigma_j^2(x),
    sigma_j^2(x) = k(x, x) - k_j(x)^T (K_j + lambda I)^{-1} k_j(x),

computed incrementally (a Cholesky factor of K_j + lambda I grown one row at a time, read column-wise):

    v_j(.) = [k(., x_j) - sum_{i<j} v_i(.) v_i(x_j)] / sqrt(sigma_{j-1}^2(x_j) + lambda),
    sigma_j^2 = sigma_{j-1}^2 - v_j^2,

O(n j) per step and O(n L) memory for a sequence of length L. Repeated points are allowed (the noise
lambda keeps the system regular). Which of several maximisers is chosen is core.engine.ties' rule: values
within RTOL of the largest (at the scale of the prior variance max_x k(x, x)) are tied, and the tie
goes to the point of largest keyed priority (``key``; None: the smallest index).

Approximated MVR (paper App. 14): the same greedy rule with the Nystrom posterior variance

    sigma~_j^2(x) = k(x, x) - ||phi(x)||^2 + lambda phi(x)^T (Phi_j^T Phi_j + lambda I)^{-1} phi(x),

where phi is a Nystrom embedding with s landmarks (so k(x, x') ~ phi(x)^T phi(x')) and Phi_j stacks
phi of the points chosen so far: O(n s) per step instead of O(n j). With phi exact (phi phi^T = K)
this is the exact posterior variance (push-through identity), which the tests check.
"""

from __future__ import annotations

import numpy as np

from banditsweep.core.kernel.kernels import Kernel
from banditsweep.core.engine.ties import tied_argmax


def mvr_sequence(kernel: Kernel, domain: np.ndarray, length: int, lam: float,
                 key: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact MVR sequence (indices into ``domain``) and the final posterior variance sigma_L^2;
    ``key``: the tie priorities' (core.engine.ties)."""
    if lam <= 0:
        raise ValueError(f"MVR noise lambda must be positive, got {lam}")
    n = len(domain)
    variance = kernel.diag(domain).astype(np.float64)
    scale = float(variance.max()) if n else 0.0
    factors = np.empty((length, n))  # v_j(.) as rows
    sequence = np.empty(length, dtype=np.int64)
    for j in range(length):
        pick = tied_argmax(variance, key, scale)
        sequence[j] = pick
        column = kernel(domain, domain[pick:pick + 1])[:, 0]
        if j:
            column -= factors[:j].T @ factors[:j, pick]
        factors[j] = column / np.sqrt(variance[pick] + lam)
        variance = np.maximum(variance - factors[j] ** 2, 0.0)
    return sequence, variance


def approximate_mvr_sequence(features: np.ndarray, diagonal: np.ndarray, length: int,
                             lam: float, key: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """MVR on the Nystrom approximation: ``features`` is phi (n, s), ``diagonal`` is k(x, x).

    Keeps A_j^{-1} = (Phi_j^T Phi_j + lambda I)^{-1} by Sherman-Morrison and the quadratic forms
    q(x) = phi(x)^T A_j^{-1} phi(x) by rank-one downdates: O(n s + s^2) per step.
    """
    if lam <= 0:
        raise ValueError(f"MVR noise lambda must be positive, got {lam}")
    n, s = features.shape
    residual = np.maximum(diagonal - np.einsum("ij,ij->i", features, features), 0.0)
    inverse = np.eye(s) / lam
    quadratic = np.einsum("ij,ij->i", features, features) / lam
    sequence = np.empty(length, dtype=np.int64)
    variance = residual + lam * quadratic
    scale = float(variance.max()) if n else 0.0
    for j in range(length):
        pick = tied_argmax(variance, key, scale)
        sequence[j] = pick
        direction = inverse @ features[pick]                 # A^{-1} phi(x_j)
        denominator = 1.0 + features[pick] @ direction
        inverse -= np.outer(direction, direction) / denominator
        quadratic -= (features @ direction) ** 2 / denominator
        variance = residual + lam * np.maximum(quadratic, 0.0)
    return sequence, variance
