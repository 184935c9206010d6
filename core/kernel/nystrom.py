"""Recursive ridge-leverage-score Nystrom sampling (Musco & Musco 2017, practical Alg. 3; SPEC 3.3).

The sampler sees the kernel only through ``block(rows, cols)`` (a small block of the kernel
matrix, here usually the P_t-weighted kernel k~(x, x') = sqrt(P(x) P(x')) k(x, x')) and its
diagonal, so no n x n object is ever formed: the cost is O(n s^2) for s landmarks.

    perm = a random permutation of the n points; level sizes n, ceil(n/2), ..., down to <= base_size
    S = all points of the smallest level (a uniform sample, weights 1)
    for each larger level, up to the full set:
        ridge leverage scores of the level's points against the weighted landmarks S:
            l~_i = (1/lam) max(0, k_ii - K_iS (K_SS + lam W^{-2})^{-1} K_Si)
        keep point i with probability p_i = min(1, q l~_i), weight 1/sqrt(p_i)

Two ways to choose lam and the final sample (both SPEC 3.3, "project choice" where noted):

- **target size s** (Musco & Musco's practical code): lam is set adaptively per level,
  lam = (sum_i K_ii w_i^2 - sum of the top-k eigenvalues of W K_SS W) / k with k = ceil(s / (4 log s)),
  q = log s, and the top level takes exactly s points without replacement with probability
  proportional to min(1, l~_i).
- **fixed ridge mu** (what RLS-Kernelized Exp3 needs: accuracy at the ridge mu = lambda / T of G_t,
  paper Alg. 5): lam = mu at every level, q = oversample * max(1, log(d~ / delta)) with d~ = sum_i l~_i
  the level's estimated effective dimension (Musco & Musco's Theorem 3 oversampling c log(d_eff / delta),
  with c = ``oversample``), and the top level keeps each point independently with p_i = min(1, q l~_i),
  so the number of landmarks s_t is decided by the data, as in the paper (s_t = O~(gamma_T)).
  Project choice: if no point survives a level, the point of largest score is kept.

With probability >= 1 - delta the result satisfies the spectral approximation of SPEC 3.3 / paper
eq. (81) at ridge lam:  K_nys <= K <= K_nys + lam I  (K_nys = K_{.S} K_SS^+ K_{S.}), i.e.
||K - K_nys||_2 <= lam; the tests measure how often on random instances.

:func:`recursive_rls_nystrom_theory` is Musco & Musco's Algorithm 2 (RecursiveRLS-Nystrom, the
algorithm their Theorem 7 analyses and the kernel paper's Alg. 3 restates) with its own factors, at a
fixed ridge lam and failure probability delta:

    if m <= 192 log(1/delta): return all m points, weights 1            (the small-n rule)
    S_bar = each point kept independently with probability 1/2
    S~ = the algorithm on S_bar with (lam, delta / 3); S^ = S_bar S~     (recursion)
    l~_i = 3 / (2 lam) (K - K S^ (S^T K S^ + lam I)^{-1} S^T K)_ii       (overestimates: factor 3/2)
    p_i = min{1, 16 l~_i log(sum_i l~_i / delta)}; keep i with probability p_i, weight 1/sqrt(p_i)

(the recursion is unrolled: the nested halvings are drawn top-down, then sampled bottom-up). Its
constants are the worst-case ones of the proof: on settings 1-2 (|X| = 400 < 192 log 10 = 442 at
delta = 0.1) the small-n rule returns all of X, and at |X| = 10^4 the recursion stops at about 625
points and keeps thousands of landmarks. ``practical`` (:func:`recursive_rls_nystrom` above) is what
RLS-Kernelized Exp3 runs by default; ``sampler: theory`` selects this one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import linalg

from banditsweep.core.engine.ties import tied_argmax

Block = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class NystromSample:
    landmarks: np.ndarray        # indices of the selected points (distinct)
    weights: np.ndarray          # 1 / sqrt(p_i) of each landmark
    ridge: float                 # lam used at the top level
    effective_dimension: float   # sum of the top level's estimated ridge leverage scores
    levels: int



def keep_columns(points: np.ndarray, keep_probability: np.ndarray, scores: np.ndarray,
                 rng: np.random.Generator, tie_key: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Keep each point independently with its probability (at least the top-scored one: among tied
    scores by core.engine.ties' rule, priorities of the points' indices keyed by ``tie_key``), and the
    weights 1/sqrt(p) that make the sampled Nystrom approximation unbiased."""
    kept = np.flatnonzero(rng.random(len(points)) < keep_probability)
    if kept.size == 0:
        kept = np.array([tied_argmax(scores, tie_key, indices=points)])
        keep_probability = keep_probability.copy()
        keep_probability[kept] = 1.0
    return points[kept], 1.0 / np.sqrt(keep_probability[kept])

def leverage_scores(cross: np.ndarray, landmark_block: np.ndarray, weights: np.ndarray,
                    diagonal: np.ndarray, lam: float) -> np.ndarray:
    """l~_i = (1/lam) max(0, k_ii - K_iS (K_SS + lam W^{-2})^{-1} K_Si) for the rows of ``cross`` = K_{.S}."""
    system = landmark_block + np.diag(lam / (weights * weights))
    try:
        factor = linalg.cho_factor(system, lower=True, check_finite=False)
        solved = linalg.cho_solve(factor, cross.T, check_finite=False)
    except linalg.LinAlgError:
        solved = np.linalg.lstsq(system, cross.T, rcond=None)[0]
    explained = np.einsum("ij,ji->i", cross, solved)
    return np.maximum(diagonal - explained, 0.0) / lam


def _adaptive_ridge(landmark_block: np.ndarray, weights: np.ndarray, size: int) -> float:
    """Musco & Musco's lam for a target of O(s log s) samples."""
    k = math.ceil(size / (4.0 * math.log(size)))
    if k >= len(weights):
        return 1e-5   # recursiveNystrom.m's fallback (written there as 10e-6)
    weighted = landmark_block * weights[:, None] * weights[None, :]
    eigenvalues = np.linalg.eigvalsh(weighted)
    top = np.abs(eigenvalues[-k:]).sum()
    return max(float(np.trace(weighted) - top) / k, 1e-12)


def recursive_rls_nystrom(block: Block, diagonal: np.ndarray, rng: np.random.Generator, *,
                          ridge: float | None = None, size: int | None = None, delta: float = 0.1,
                          oversample: float = 1.0, base_size: int = 256, tie_key: int | None = None) -> NystromSample:
    """Recursive RLS-Nystrom landmarks for the kernel given by ``block`` and ``diagonal``.

    Give exactly one of ``ridge`` (fixed lam, data-driven number of landmarks) and ``size``
    (target number of landmarks, adaptive lam).
    """
    if (ridge is None) == (size is None):
        raise ValueError("give exactly one of ridge (fixed lam) and size (target number of landmarks)")
    if ridge is not None and ridge <= 0:
        raise ValueError(f"ridge must be positive, got {ridge}")
    if size is not None and size < 2:
        raise ValueError(f"target size must be at least 2, got {size}")
    n = len(diagonal)
    if size is not None and size >= n:
        everything = np.arange(n)
        return NystromSample(everything, np.ones(n), 0.0, float(n), 0)
    base = max(int(base_size), 2 if size is None else int(size))
    perm = rng.permutation(n)
    sizes = [n]
    while sizes[-1] > base:
        sizes.append(math.ceil(sizes[-1] / 2))
    current = perm[:sizes[-1]]
    weights = np.ones(len(current))
    lam = float(ridge) if ridge is not None else 0.0
    effective = 0.0
    # Levels from the second smallest up to the full set (level 0); with a single level the
    # smallest level is the full set and serves as its own landmark set.
    for level in range(len(sizes) - 2, -1, -1) if len(sizes) > 1 else [0]:
        points = perm[:sizes[level]]
        top = level == 0
        cross = block(points, current)
        landmark_block = block(current, current)
        if size is not None:
            lam = _adaptive_ridge(landmark_block, weights, size)
        scores = leverage_scores(cross, landmark_block, weights, diagonal[points], lam)
        effective = float(scores.sum())
        if size is not None and top:
            bounded = np.minimum(1.0, scores)
            if bounded.sum() <= 0:
                bounded = np.ones_like(bounded)
            probabilities = bounded / bounded.sum()
            count = min(size, int(np.count_nonzero(probabilities)))
            chosen = rng.choice(len(points), size=count, replace=False, p=probabilities)
            current, weights = points[chosen], np.ones(count)
            break
        q = math.log(size) if size is not None else oversample * max(1.0, math.log(max(effective, 1e-300) / delta))
        current, weights = keep_columns(points, np.minimum(1.0, q * scores), scores, rng, tie_key)
    return NystromSample(np.asarray(current), weights, lam, effective, len(sizes))


def weighted_kernel_block(kernel, domain: np.ndarray, probabilities: np.ndarray) -> Block:
    """``block`` for the P-weighted kernel k~(x, x') = sqrt(P(x) P(x')) k(x, x') (paper Sec. 4)."""
    root = np.sqrt(probabilities)

    def block(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return root[rows, None] * kernel(domain[rows], domain[cols]) * root[None, cols]

    return block


def nystrom_embedding(columns: np.ndarray, landmark_block: np.ndarray, relative_tolerance: float = 1e-12) -> np.ndarray:
    """phi(x) = [(K_SS)^{1/2}]^+ K_Sx as rows: ``columns`` = K_{.S} (n, s), ``landmark_block`` = K_SS.

    The pseudo-inverse square root drops eigenvalues below ``relative_tolerance`` times the largest,
    so phi(x)^T phi(x') = K_xS K_SS^+ K_Sx' (the Nystrom approximation of k).
    """
    return columns @ nystrom_projection(landmark_block, relative_tolerance)


def nystrom_projection(landmark_block: np.ndarray, relative_tolerance: float = 1e-12) -> np.ndarray:
    """[(K_SS)^{1/2}]^+ as an (s, r) matrix V Lambda^{-1/2} over the r eigenvalues of K_SS above
    ``relative_tolerance`` times the largest (:func:`nystrom_embedding`: phi(x) = K_xS times it)."""
    eigenvalues, vectors = np.linalg.eigh(landmark_block)
    keep = eigenvalues > relative_tolerance * max(eigenvalues.max(), 0.0)
    return vectors[:, keep] / np.sqrt(eigenvalues[keep])


# Musco & Musco (2017), Algorithm 2: the small-n rule m <= SMALL_N_FACTOR log(1/delta), the
# overestimate factor of the leverage scores, the oversampling factor, and delta's split per level.
SMALL_N_FACTOR = 192.0
SCORE_FACTOR = 1.5
OVERSAMPLING_FACTOR = 16.0
DELTA_SPLIT = 3.0


def recursive_rls_nystrom_theory(block: Block, diagonal: np.ndarray, rng: np.random.Generator, *,
                                 ridge: float, delta: float = 0.1, tie_key: int | None = None) -> NystromSample:
    """Musco & Musco's Algorithm 2 with their factors (module docstring), for the kernel given by
    ``block`` and ``diagonal`` at ridge ``ridge`` with failure probability ``delta``.

    Project choice, as in :func:`recursive_rls_nystrom`: if no point survives a level, the point of
    largest score is kept (weight 1), so that the embedding is never empty. ``effective_dimension`` is
    the top level's sum of the (3/2-inflated) score estimates; NaN when the small-n rule returns all
    points (nothing estimated).
    """
    if not ridge > 0:
        raise ValueError(f"ridge must be positive, got {ridge}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    n = len(diagonal)
    # Top-down: the nested random halvings and each level's failure probability, until the small-n rule.
    levels = [np.arange(n)]
    deltas = [float(delta)]
    while len(levels[-1]) > SMALL_N_FACTOR * math.log(1.0 / deltas[-1]):
        current = levels[-1]
        levels.append(current[rng.random(len(current)) < 0.5])
        deltas.append(deltas[-1] / DELTA_SPLIT)
    landmarks, weights = levels[-1], np.ones(len(levels[-1]))
    effective = float("nan")   # no scores are estimated when the small-n rule returns every point
    # Bottom-up: each level samples its points by their scores against the level below's landmarks.
    for level in range(len(levels) - 2, -1, -1):
        points, level_delta = levels[level], deltas[level]
        if len(landmarks):
            scores = leverage_scores(block(points, landmarks), block(landmarks, landmarks), weights,
                                     diagonal[points], ridge)
        else:
            scores = np.maximum(diagonal[points], 0.0) / ridge
        scores = SCORE_FACTOR * scores
        effective = float(scores.sum())
        oversampling = OVERSAMPLING_FACTOR * math.log(effective / level_delta) if effective > 0 else 0.0
        landmarks, weights = keep_columns(points, np.clip(oversampling * scores, 0.0, 1.0), scores, rng, tie_key)
    return NystromSample(np.asarray(landmarks), weights, float(ridge), effective, len(levels))
