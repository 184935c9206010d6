"""RLS-Kernelized Exp3 (the kernel paper's Alg. 5, eqs. 6-7; SPEC 3.4) and its approximated-MVR
variant (Alg. 6, App. 14).

As Kernelized Exp3 (``kernel_exp3``: same eta, alpha, gamma_T, MVR exploration), but G_t is replaced
by its projection onto s_t landmark columns chosen each round by recursive RLS-Nystrom
(``core.kernel.nystrom``, SPEC 3.3) on the P_t-weighted kernel

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
core.kernel.nystrom). ``oversample`` and ``base_size`` only apply to ``practical``.

``rls_kernel_exp3_amvr`` (paper Alg. 6): the MVR sequence is computed on a recursive RLS-Nystrom
approximation of k itself (ridge lambda, the GP noise), O(n s L) instead of O(n L^2) for length L.

On a sharded domain (SPEC 4, core.kernel.sharded) :class:`ShardedRLSKernelExp3` runs the practical sampler
with its random numbers drawn per point from keyed streams (core.kernel.sharded.partition.keyed_uniforms),
so that no shard needs another's: point i is in level l when its uniform number u_i of the round is
below 2^-l (the random halvings of Musco & Musco's Alg. 2), and is kept at a level when a second
keyed uniform is below min(1, q l~_i). The unsharded trial draws a permutation from the policy
stream instead, so the sharded run is the same algorithm with another random stream (its trials
are recorded with ``sharded: true`` in their content). :class:`RLSKernelExp3Slice` is its part on
each shard: the levels, the scores and g_t on the slice, and A_t's part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field
from scipy import linalg

from banditsweep.core.kernel.algorithms.kernel_exp3 import Exp3ScheduleParams
from banditsweep.core.kernel.adversarial_kernel import kernel_problem
from banditsweep.core.kernel.exp3 import (RLS_BETA_FACTOR, Exp3Policy, Exp3Schedule, ExponentialWeights,
                                          empirical_distribution)
from banditsweep.core.kernel.kernels import Kernel
from banditsweep.core.kernel.mvr import approximate_mvr_sequence, mvr_sequence
from banditsweep.core.kernel.nystrom import (NystromSample, leverage_scores, nystrom_embedding, nystrom_projection,
                                             recursive_rls_nystrom, recursive_rls_nystrom_theory, weighted_kernel_block)
from banditsweep.core.kernel.sharded.algorithm import AlgorithmSlice, ShardedExp3, pivoted_cholesky
from banditsweep.core.kernel.sharded.partition import derive_key, global_choice, keyed_uniforms, owner
from banditsweep.core.kernel.sharded.protocol import (Candidate, Embed, Embedded, LevelCounts, LevelKeep,
                                                      LevelMembers, LevelScores, Members, NystromEstimate, PivotsDone,
                                                      PointAt, Scores, SetExploration, Tied, Ties, Updated, answers)
from banditsweep.core.engine.ties import (APPROXIMATE_MVR, LANDMARK, MVR, design_digest, tie_key, tied_among,
                                          trial_seed_words)

BETA_FACTOR = RLS_BETA_FACTOR  # Theorem 3: beta = B (1 + sqrt 2) sqrt(lambda / T)
# The seeding stream of the sharded sampler's keyed draws (core.engine.seeding has 0: environment, 1: policy).
SAMPLER_STREAM = 2
# Levels of the keyed halving: u < 2^-l for l = 0..62.
MAX_LEVELS = 63


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
    return cross, nystrom_variance(embedding, solved, kernel.diag(domain), mu)


def nystrom_variance(embedding: np.ndarray, solved: np.ndarray, diagonal: np.ndarray, mu: float) -> np.ndarray:
    """sigma~_t^2(x) = (k(x, x) - ||g_t(x)||^2) / mu + g_t(x)^T A_t^{-1} g_t(x) (n,), from g_t (n, r),
    A_t^{-1} g_t(x) as columns (r, n) and k(x, x) (n,)."""
    quadratic = np.einsum("ij,ji->i", embedding, solved)
    residual = np.maximum(diagonal - np.einsum("ij,ij->i", embedding, embedding), 0.0)
    return residual / mu + quadratic


class RLSKernelExp3(Exp3Policy):
    """RLS-Kernelized Exp3 (kernel paper, Alg. 5): Kernelized Exp3 on a Nystrom approximation."""

    STATE = ("schedule", "landmark_counts", "effective_dimensions", "mvr_distinct", "mvr_landmarks", "design")

    Params = RLSKernelExp3Params
    label = "RLS-Kernelized Exp3"

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.schedule = Exp3Schedule(params, problem, beta_factor=BETA_FACTOR)
        self.landmark_counts: list[int] = []
        self.effective_dimensions: list[float] = []
        self.mvr_distinct = 0
        self.mvr_landmarks = 0
        self.design = float("nan")   # design_digest of the exploration sequence (core.engine.ties)

    def exploration_sequence(self, domain: np.ndarray) -> np.ndarray:
        """The exact MVR sequence (SPEC 3.2), as in Kernelized Exp3."""
        sequence, _ = mvr_sequence(self.problem.kernel, domain, self.schedule.design_length, self.params.lam,
                                   self.tie_key(MVR))
        return sequence

    def prepare(self, domain: np.ndarray) -> ExponentialWeights:
        sequence = self.exploration_sequence(domain)
        self.mvr_distinct = len(np.unique(sequence))
        self.design = design_digest(sequence)
        n = len(domain)
        return ExponentialWeights(n, self.schedule.eta, self.schedule.alpha, empirical_distribution(sequence, n))

    def sample_landmarks(self, block, diagonal: np.ndarray, ridge: float) -> NystromSample:
        """Recursive RLS-Nystrom by ``sampler`` (practical or Musco & Musco's Alg. 2) at ``ridge``."""
        if self.params.sampler == "theory":
            return recursive_rls_nystrom_theory(block, diagonal, self.rng, ridge=ridge, delta=self.params.delta,
                                                tie_key=self.tie_key(LANDMARK))
        return recursive_rls_nystrom(block, diagonal, self.rng, ridge=ridge, delta=self.params.delta,
                                     oversample=self.params.oversample, base_size=self.params.base_size,
                                     tie_key=self.tie_key(LANDMARK))

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
            "design_digest": self.design,
        }


class RLSKernelExp3AMVR(RLSKernelExp3):
    """RLS-Kernelized Exp3 with the approximated MVR exploration sequence (paper Alg. 6)."""

    STATE = ()

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
        sequence, _ = approximate_mvr_sequence(features, diagonal, self.schedule.design_length, lam,
                                               self.tie_key(APPROXIMATE_MVR))
        return sequence


# ---- on a sharded domain (SPEC 4, core.kernel.sharded) -------------------------------------------


@dataclass
class Landmarks:
    """The landmarks S_t of the sharded sampler, gathered from the shards' :class:`Members`."""

    index: np.ndarray      # global indices, increasing
    points: np.ndarray     # (s, d)
    roots: np.ndarray      # sqrt(P_t) at the landmarks
    weights: np.ndarray    # 1 / sqrt(p_i)

    @classmethod
    def gather(cls, parts: list[Members]) -> "Landmarks":
        index = np.concatenate([part.index for part in parts])
        weighted = parts[0].weights is not None
        return cls(index, np.concatenate([part.points for part in parts]),
                   np.sqrt(np.concatenate([part.probabilities for part in parts])),
                   np.concatenate([part.weights for part in parts]) if weighted else np.ones(len(index)))

    def block(self, kernel: Kernel) -> np.ndarray:
        """S^T K~ S, with K~ the P_t-weighted kernel."""
        return self.roots[:, None] * kernel(self.points, self.points) * self.roots[None, :]


class RLSKernelExp3Slice(AlgorithmSlice):
    """RLS-Kernelized Exp3's part of one shard: the keyed halving's levels, the ridge leverage scores
    and keep decisions of the level being sampled, and the embedding g_t on the slice."""

    def __init__(self, shard):
        super().__init__(shard)
        self.halving_key, self.halving = None, np.zeros(0)   # the round's halving draw on the slice
        self.scores = np.zeros(0)                            # the level's scores l~_i ...
        self.level_index = np.zeros(0, dtype=np.int64)       # ... and its points (local indices)
        self.embedding = np.zeros((0, 0))                    # g_t on the slice (w, r)

    def _level_uniforms(self, key: int) -> np.ndarray:
        """The slice's uniform numbers of the round's halving draw, drawn once per round."""
        if self.halving_key != key:
            self.halving_key, self.halving = key, keyed_uniforms(key, self.shard.start, self.shard.stop)
        return self.halving

    @answers(LevelCounts)
    def counts(self, request: LevelCounts) -> np.ndarray:
        """How many points of the slice lie in each level, in one pass: with u = m 2^e (m in [1/2, 1),
        exactly, by frexp), u < 2^-l holds for l = 0..-e."""
        u = self._level_uniforms(request.key)
        _, exponent = np.frexp(u)
        deepest = np.where(u > 0, np.clip(-exponent, 0, MAX_LEVELS - 1), MAX_LEVELS - 1)
        return np.cumsum(np.bincount(deepest, minlength=MAX_LEVELS)[::-1])[::-1].astype(np.int64)

    def _level(self, key: int, level: int) -> np.ndarray:
        return np.flatnonzero(self._level_uniforms(key) < 2.0 ** -level)

    @answers(LevelMembers)
    def members(self, request: LevelMembers) -> Members:
        local, shard = self._level(request.key, request.level), self.shard
        return Members(shard.start + local, shard.points[local], shard.probabilities[local])

    @answers(LevelScores)
    def score(self, request: LevelScores) -> Scores:
        """Ridge leverage scores of the level's points on the P_t-weighted kernel
        (core.kernel.nystrom.leverage_scores)."""
        shard = self.shard
        self.level_index = self._level(request.key, request.level)
        probabilities = shard.probabilities[self.level_index]
        roots, diagonal = np.sqrt(probabilities), probabilities * shard.diagonal[self.level_index]
        if len(request.points):
            cross = (roots[:, None] * shard.kernel(shard.points[self.level_index], request.points)
                     * request.roots[None, :])
            self.scores = leverage_scores(cross, request.block, request.weights, diagonal, request.ridge)
        else:
            self.scores = np.maximum(diagonal, 0.0) / request.ridge
        if not len(self.scores):
            return Scores(0.0, Candidate(-math.inf, -1))
        local = int(np.argmax(self.scores))
        return Scores(float(self.scores.sum()), Candidate(float(self.scores[local]),
                                                          shard.start + int(self.level_index[local])))

    @answers(Ties)
    def ties(self, request: Ties) -> Tied | None:
        """The slice's part of the choice among the level's points of largest score (core.engine.ties)."""
        if request.quantity != "scores":
            raise TypeError(f"RLS-Kernelized Exp3's slice has no {request.quantity!r}")
        indices = self.shard.start + np.asarray(self.level_index)
        found = tied_among(self.scores, request.edge, request.key, indices) if len(self.scores) else None
        if found is None:
            return None
        priority, local = found
        return Tied(priority, int(indices[local]), float(self.scores[local]))

    @answers(LevelKeep)
    def keep(self, request: LevelKeep) -> Members:
        shard = self.shard
        keep_probability = np.minimum(1.0, request.oversampling * self.scores)
        u = keyed_uniforms(request.key, shard.start, shard.stop)[self.level_index]
        kept = np.flatnonzero(u < keep_probability)
        local = self.level_index[kept]
        return Members(shard.start + local, shard.points[local], shard.probabilities[local],
                       1.0 / np.sqrt(keep_probability[kept]))

    @answers(Embed)
    def embed(self, request: Embed) -> Embedded:
        shard = self.shard
        columns = shard.kernel(shard.points, request.points) * request.roots[None, :]
        self.embedding = columns @ request.projection
        system = self.embedding.T @ (shard.probabilities[:, None] * self.embedding)
        local = shard.local(request.arm)
        return Embedded(system, self.embedding[local].copy() if local is not None else None)

    @answers(NystromEstimate)
    def estimate(self, request: NystromEstimate) -> Updated:
        """u~_t = f~_t + beta sigma~_t (eqs. 6-7, in the embedding g_t)."""
        g = self.embedding
        solved = linalg.cho_solve((request.factor, True), g.T, check_finite=False)
        estimate = (request.reward * (g @ request.solved_chosen)
                    + request.beta * np.sqrt(nystrom_variance(g, solved, self.shard.diagonal, request.mu)))
        self.embedding = np.zeros((len(g), 0))
        return self.shard.add_estimate(request.eta, estimate, request.candidate, request.arm)


class ShardedRLSKernelExp3(ShardedExp3, shards=RLSKernelExp3):
    """RLS-Kernelized Exp3 on shards (module docstring): the exact MVR design as the shards' pivoted
    Cholesky, the keyed practical sampler each round, and eqs. (6)-(7) with A_t summed over the shards."""

    Slice = RLSKernelExp3Slice
    STATE = ("values", "landmark_counts", "effective_dimensions")
    TRANSIENT = ("params", "schedule", "sampler_key", "tie_words")   # rebuilt from the spec by __init__

    values: dict[str, float]
    landmark_counts: list[int]
    effective_dimensions: list[float]

    def __init__(self, trial):
        super().__init__(trial)
        self.params = trial.params
        problem = kernel_problem(trial.n, trial.dim, trial.horizon, trial.kernel, trial.norm_bound)
        self.schedule = Exp3Schedule(self.params, problem, beta_factor=BETA_FACTOR)
        self.sampler_key = derive_key(trial.spec.seed, SAMPLER_STREAM)
        self.tie_words = trial_seed_words(trial)
        self.landmark_counts, self.effective_dimensions = [], []

    @classmethod
    def check(cls, params) -> None:
        if params.sampler != "practical" or params.landmarks != "rls":
            raise ValueError("a sharded rls_kernel_exp3 runs the practical sampler with RLS landmarks "
                             "(sampler: practical, landmarks: rls)")

    def explore(self, trial) -> None:
        sequence, _ = pivoted_cholesky(trial.group, self.schedule.design_length, self.params.lam, None,
                                       tie_key(self.tie_words, MVR))
        trial.group.map(PivotsDone(keep_factors=False))
        trial.group.map(SetExploration(np.asarray(sequence, dtype=np.int64)))
        self.eta, self.alpha = self.schedule.eta, self.schedule.alpha
        self.values = {**self.schedule.as_dict(), "delta": self.params.delta,
                       "mvr_distinct_points": float(len(set(sequence))), "mvr_landmarks": 0.0,
                       "design_digest": design_digest(sequence)}

    def landmarks(self, trial, t: int) -> Landmarks:
        """S_t: recursive RLS-Nystrom (the practical fixed-ridge variant, core.kernel.nystrom) with the
        halvings and keep decisions drawn from keyed streams (module docstring)."""
        params, group = self.params, trial.group
        level_key = derive_key(self.sampler_key, t, 0)
        counts = np.sum(np.stack(group.map(LevelCounts(level_key))), axis=0)
        smallest = next((level for level in range(MAX_LEVELS) if counts[level] <= params.base_size), MAX_LEVELS - 1)
        current = Landmarks.gather(group.map(LevelMembers(level_key, smallest)))
        effective = 0.0
        for level in range(smallest - 1, -1, -1) if smallest > 0 else [0]:
            parts = group.map(LevelScores(level_key, level, current.points, current.roots, current.block(trial.kernel),
                                          current.weights, self.schedule.mu))
            effective = float(sum(part.total for part in parts))
            q = params.oversample * max(1.0, math.log(max(effective, 1e-300) / params.delta))
            kept = Landmarks.gather(group.map(LevelKeep(derive_key(self.sampler_key, t, level + 1), q)))
            if not len(kept.index):
                # Project choice (core.kernel.nystrom.keep_columns): keep the point of largest score.
                where = global_choice(group, [part.largest for part in parts], "scores",
                                      tie_key(self.tie_words, LANDMARK)).index
                point = group.ask(owner(group.ranges, where), PointAt(where))
                kept = Landmarks(np.array([where]), point.coordinates[None], np.array([math.sqrt(point.probability)]),
                                 np.ones(1))
            current = kept
        self.effective_dimensions.append(effective)
        return current

    def update(self, trial, t, parts, located, candidate, reward) -> list[Updated]:
        """eqs. (6)-(7) in the embedding g_t, A_t summed over the shards."""
        landmarks = self.landmarks(trial, t)
        self.landmark_counts.append(len(landmarks.index))
        projection = nystrom_projection(landmarks.block(trial.kernel))
        embedded = trial.group.map(Embed(landmarks.points, landmarks.roots, projection, located.index))
        system = np.sum(np.stack([part.system for part in embedded]), axis=0)
        system[np.diag_indices_from(system)] += self.schedule.mu
        chosen = next(part.chosen for part in embedded if part.chosen is not None)
        factor = linalg.cholesky(system, lower=True, check_finite=False)
        solved_chosen = linalg.cho_solve((factor, True), chosen, check_finite=False)
        return trial.group.map(NystromEstimate(factor, solved_chosen, reward, self.schedule.mu, self.schedule.beta,
                                               self.eta, candidate, located.index))

    def diagnostics(self) -> dict[str, float]:
        diagnostics = dict(self.values)
        if self.landmark_counts:
            counts = np.asarray(self.landmark_counts, dtype=np.float64)
            diagnostics.update({"s_t_mean": float(counts.mean()), "s_t_max": float(counts.max()),
                                "s_t_min": float(counts.min()),
                                "effective_dimension_mean": float(np.mean(self.effective_dimensions))})
        return diagnostics
