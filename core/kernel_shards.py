"""One adversarial-kernel trial (SPEC 2.3) with its domain X split over shards (SPEC 4): ``random``,
``apg_exp3`` and ``rls_kernel_exp3`` at sizes of X that no single process holds.

A :class:`KernelShard` holds a contiguous slice X[start:stop] and everything indexed by it: the points,
the candidate table's columns F[:, slice], the cumulative function S_t, the log-weights and P_t, the
exploration distribution, APG-Exp3's Newton-basis features, RLS-Kernelized Exp3's embedding. It
builds all of that itself from the trial's seed and its range: the candidates' centres and
coefficients are drawn from the environment's stream exactly as ``AdversarialKernelBandit`` draws
them, and its table columns are those of the unsharded table, bit for bit.

The trial's coordinator, ``core.sharded_trial.ShardedKernelTrial``, is a kind of the one round loop
(core.round_loop) that talks to its shards through a :class:`~banditsweep.core.sharding.ShardGroup`
by the methods of :class:`KernelShard`. What crosses between them per round (SPEC 4) is small: the
log-partition partials of P_t, the ``candidates`` partial sums F[:, slice] P_t[slice] and the slice
maxima of S_t for the adversary, the drawn point, the landmarks (points, P_t values and weights),
the s x s Gram partials of the Nystrom features and the leverage-score sums of each level of the
sampler; never an |X|-sized array. Each shard saves and checks its own part of a checkpoint where
it runs (:meth:`KernelShard.save_part`).

The algorithms are those of SPEC 3.5, 3.4 and 3.6 (``apg_exp3``, ``rls_kernel_exp3``, ``random``),
with two choices that make the result independent of the number of shards (core.sharding):

- Every argmax over X that may tie by the domain's symmetry (P-greedy and MVR pivots, the G-optimal
  design's leverage) is computed elementwise per point, and the design's information matrix is an
  exact sum; so 1, 2, 3 or 4 shards give bit-identical results.
- RLS-Kernelized Exp3's recursive RLS-Nystrom sampler (the ``practical`` fixed-ridge variant of
  core.nystrom) draws its random numbers per point from keyed streams: point i is in level l when
  its uniform number u_i of the round is below 2^-l (the random halvings of Musco & Musco's Alg. 2),
  and is kept at a level when a second keyed uniform is below min(1, q l~_i). The unsharded
  ``rls_kernel_exp3`` draws a permutation from the policy stream instead, so the sharded run is the
  same algorithm with another random stream: its trials are recorded with ``sharded: true`` in their
  content. ``random`` and ``apg_exp3`` agree with their unsharded runs to rounding.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg

from banditsweep.core import domains, seeding
from banditsweep.core.environments.adversarial_kernel import candidate_functions, grid_slice, table_columns
from banditsweep.core.exp3 import DesignStep
from banditsweep.core.kernels import Kernel
from banditsweep.core.nystrom import leverage_scores
from banditsweep.core.round_loop import Checkpoints
from banditsweep.core.sharding import block_sums, blocks_in, keyed_uniforms, rowwise_dot, rowwise_matmul
from banditsweep.core.state_codec import StateFormatError, decode_state, encode_state
from banditsweep.core.trial import TrialSpec, resolve_algorithm, resolve_environment

SHARDABLE_ALGORITHMS = ("random", "apg_exp3", "rls_kernel_exp3")
SHARDABLE_ENVIRONMENTS = ("adversarial_kernel",)
# Levels of the keyed halving: u < 2^-l for l = 0..62.
MAX_LEVELS = 63


def check_shardable(spec: TrialSpec) -> None:
    """Raise ValueError naming what cannot be sharded."""
    kind = spec.environment["kind"]
    if kind not in SHARDABLE_ENVIRONMENTS:
        raise ValueError(f"environment kind {kind!r} cannot be sharded; shardable: {', '.join(SHARDABLE_ENVIRONMENTS)}")
    if spec.algorithm not in SHARDABLE_ALGORITHMS:
        raise ValueError(f"algorithm {spec.algorithm!r} cannot be sharded; shardable: {', '.join(SHARDABLE_ALGORITHMS)}")
    if spec.algorithm == "rls_kernel_exp3":
        if spec.params.get("sampler") != "practical" or spec.params.get("landmarks") != "rls":
            raise ValueError("a sharded rls_kernel_exp3 runs the practical sampler with RLS landmarks "
                             "(sampler: practical, landmarks: rls)")


def domain_shape(spec: TrialSpec) -> tuple[int, int]:
    """(|X|, d) of a kernel trial, without building X."""
    config = resolve_environment(spec.environment)
    return domains.size(config.setting, config.domain, spec.horizon)


class KernelShard:
    """Everything of one sharded trial indexed by X[start:stop] (module docstring)."""

    def __init__(self, spec: TrialSpec, start: int, stop: int):
        check_shardable(spec)
        self.spec, self.start, self.stop = spec, int(start), int(stop)
        config = resolve_environment(spec.environment)
        self.n, dim = domains.size(config.setting, config.domain, spec.horizon)
        rng = seeding.stream(spec.seed, seeding.ENVIRONMENT_STREAM)
        # Draw from the environment stream in the unsharded environment's order: X (if seed-drawn),
        # then the candidates' centres and coefficients.
        whole = None
        if domains.grid_shape(config.setting, config.domain, spec.horizon) is None:
            whole = domains.build(config.setting, config.domain, rng, spec.horizon)

        def point_at(index: np.ndarray) -> np.ndarray:
            if whole is not None:
                return whole[index]
            return domains.points(config.setting, config.domain, None, spec.horizon, index)

        self.points = point_at(np.arange(self.start, self.stop))
        self.kernel = Kernel.create(config.kernel, dim, config.lengthscale, config.nu)
        functions = candidate_functions(self.kernel, self.n, point_at, config.candidates, config.centers,
                                        config.norm_bound, rng)
        self.scaled_fraction = float(np.mean(functions.norms > config.norm_bound))
        self.table = table_columns(functions, self.kernel, self.points,
                                   grid_slice(config, spec.horizon, self.start, self.stop))
        self.diagonal = self.kernel.diag(self.points)
        self.blocks = blocks_in(self.start, self.stop, self.n)
        self.params = resolve_algorithm(spec.algorithm, spec.params)
        size = self.stop - self.start
        self.cumulative = np.zeros(size)                  # S_t on the slice
        self.log_weights = np.zeros(size)                 # eta sum_{s<t} u_s
        self.exploration = np.zeros(size)                 # pi
        self.probabilities = np.zeros(size)               # P_t
        self.factors = np.zeros((size, 0), order="F")     # pivoted-Cholesky columns (MVR, Newton basis)
        self.power = self.diagonal.copy()                 # P-greedy / MVR residual variance
        self.design = np.zeros(size)                      # G-optimal design on the slice
        self.leverage = np.zeros(size)
        self.scores = np.zeros(0)                         # the sampler's current level: scores
        self.level_index = np.zeros(0, dtype=np.int64)    # ... and its points (local indices)
        self.embedding = np.zeros((size, 0))
        self.halving_key, self.halving = None, np.zeros(0)   # the round's halving draw (see _level_uniforms)

    # ---- environment (SPEC 2.3) ------------------------------------------------------------------

    def table_maxima(self) -> np.ndarray:
        return self.table.max(axis=1)

    def uniform_dots(self) -> np.ndarray:
        """F[:, slice] (1/n): the adversary's partial sums for the uniform P of ``random``."""
        return self.table @ np.full(self.stop - self.start, 1.0 / self.n)

    def candidates_scaled_fraction(self) -> float:
        return self.scaled_fraction

    def value(self, chosen: int, arm: int) -> float:
        """f^(chosen)(x_arm), x_arm on the slice."""
        return float(self.table[chosen, arm - self.start])

    def play(self, chosen: int, arm: int) -> tuple[float, float | None]:
        """S_t += f_t on the slice; (max of S_t on the slice, f_t(x_t) if x_t is here)."""
        self.cumulative += self.table[chosen]
        reward = float(self.table[chosen, arm - self.start]) if self.start <= arm < self.stop else None
        return float(self.cumulative.max()), reward

    def point(self, index: int) -> np.ndarray:
        return self.points[index - self.start]

    def probability(self, index: int) -> float:
        return float(self.probabilities[index - self.start])

    # ---- pivoted Cholesky: MVR (SPEC 3.2) and the P-greedy Newton basis (SPEC 3.5) ---------------

    def pivot_candidate(self) -> tuple[float, int]:
        local = int(np.argmax(self.power))
        return float(self.power[local]), self.start + local

    def pivot_row(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """The point x_pick and the factors' values at it."""
        local = index - self.start
        return self.points[local], self.factors[local].copy()

    def pivot_add(self, point: np.ndarray, values: np.ndarray, denominator: float) -> tuple[float, int]:
        """v(.) = [k(., x_pick) - sum_i v_i(.) v_i(x_pick)] / denominator; power -= v^2 (elementwise)."""
        column = self.kernel(self.points, point[None])[:, 0] - rowwise_dot(self.factors, values)
        new = column / denominator
        self.factors = np.asfortranarray(np.column_stack([self.factors, new]))
        self.power = np.maximum(self.power - new * new, 0.0)
        return self.pivot_candidate()

    def pivots_done(self, keep: bool) -> None:
        if not keep:
            self.factors = np.zeros((self.stop - self.start, 0), order="F")
        self.power = self.diagonal.copy()

    # ---- exploration distributions ---------------------------------------------------------------

    def set_exploration_sequence(self, sequence: np.ndarray) -> None:
        """pi = the empirical distribution of an index sequence (the MVR design)."""
        inside = sequence[(sequence >= self.start) & (sequence < self.stop)] - self.start
        self.exploration = np.bincount(inside, minlength=self.stop - self.start) / len(sequence)

    # The G-optimal design's points on the slice (core.exp3.DesignPoints, through ShardedDesign).

    def design_information(self) -> np.ndarray:
        """sum_x pi(x) N(x) N(x)^T on the slice, as exact fixed-point words (|entries| <= max k(x, x))."""
        features, design = self.factors, self.design
        return block_sums(self.blocks,
                          lambda a, b: features[a:b].T @ (design[a:b, None] * features[a:b]),
                          self.diagonal_bound)

    def design_start(self, bound: float) -> np.ndarray:
        self.diagonal_bound = bound
        self.design = np.full(self.stop - self.start, 1.0 / self.n)
        return self.design_information()

    def design_leverage(self, inverse: np.ndarray) -> tuple[float, int, np.ndarray]:
        """g(x) = N(x)^T V^{-1} N(x) (elementwise per point); the slice's largest with its features."""
        self.leverage = rowwise_dot(rowwise_matmul(self.factors, inverse) * self.factors, np.ones(len(inverse)))
        return self._design_candidate()

    def _design_candidate(self) -> tuple[float, int, np.ndarray]:
        local = int(np.argmax(self.leverage))
        return float(self.leverage[local]), self.start + local, self.factors[local].copy()

    def design_step(self, step: DesignStep, pick: int) -> tuple[float, int, np.ndarray]:
        """The Sherman-Morrison update of g (elementwise per point) and the design's move towards ``pick``."""
        self.leverage = step.leverage(self.leverage, rowwise_dot(self.factors, step.direction))
        step.move(self.design, pick - self.start if self.start <= pick < self.stop else None)
        return self._design_candidate()

    def design_done(self) -> int:
        """pi = the design; the number of its support points on the slice."""
        self.exploration = self.design.copy()
        self.design = np.zeros(0)
        return int(np.count_nonzero(self.exploration > 1e-12))

    # ---- Exp3 rounds (core.exp3, SPEC 3.1) -------------------------------------------------------

    def log_partition(self) -> tuple[float, float]:
        """(max of the log-weights on the slice, sum of exp(log-weights - that max))."""
        top = float(self.log_weights.max())
        return top, float(np.exp(self.log_weights - top).sum())

    def distribution(self, shift: float, log_total: float, alpha: float) -> tuple[float, np.ndarray, np.ndarray | None]:
        """P_t on the slice: re-centre the log-weights by the global maximum ``shift``, then
        P = (1 - alpha) exp(log-weights - log_total) + alpha pi. Returns the slice's mass, the
        adversary's partial sums F[:, slice] P[slice] and (APG-Exp3) the partial Q_t."""
        self.log_weights -= shift
        self.probabilities = (1.0 - alpha) * np.exp(self.log_weights - log_total) + alpha * self.exploration
        information = None
        if self.spec.algorithm == "apg_exp3":
            information = self.factors.T @ (self.probabilities[:, None] * self.factors)
        return float(self.probabilities.sum()), self.table @ self.probabilities, information

    def locate(self, target: float) -> tuple[int, np.ndarray | None]:
        """The point where the cumulative sum of P_t on the slice passes ``target`` (core.exp3.sample),
        and its features (APG-Exp3)."""
        cumulative = np.cumsum(self.probabilities)
        local = min(int(np.searchsorted(cumulative, target, side="right")), len(cumulative) - 1)
        features = self.factors[local].copy() if self.spec.algorithm == "apg_exp3" else None
        return self.start + local, features

    def apg_update(self, theta: np.ndarray, eta: float, chosen: int, arm: int) -> tuple[float, float, float, float | None]:
        """u_t = N(.)^T theta (SPEC 3.5); the weights and the environment move on."""
        return self._add_estimate(eta, self.factors @ theta, chosen, arm)

    def _add_estimate(self, eta: float, estimate: np.ndarray, chosen: int, arm: int):
        self.log_weights += eta * estimate
        top, total = self.log_partition()
        best, reward = self.play(chosen, arm)
        return top, total, best, reward

    # ---- RLS-Kernelized Exp3 (SPEC 3.3, 3.4) -----------------------------------------------------

    def _level_uniforms(self, key: int) -> np.ndarray:
        """The slice's uniform numbers of the round's halving draw, drawn once per round."""
        if self.halving_key != key:
            self.halving_key, self.halving = key, keyed_uniforms(key, self.start, self.stop)
        return self.halving

    def level_counts(self, key: int) -> np.ndarray:
        """How many points of the slice lie in each level l = 0..62 (u_i < 2^-l), in one pass: with
        u = m 2^e (m in [1/2, 1), exactly, by frexp), u < 2^-l holds for l = 0..-e."""
        u = self._level_uniforms(key)
        _, exponent = np.frexp(u)
        deepest = np.where(u > 0, np.clip(-exponent, 0, MAX_LEVELS - 1), MAX_LEVELS - 1)
        return np.cumsum(np.bincount(deepest, minlength=MAX_LEVELS)[::-1])[::-1].astype(np.int64)

    def level_members(self, key: int, level: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The slice's points of a level: global indices, coordinates, P_t values."""
        local = np.flatnonzero(self._level_uniforms(key) < 2.0 ** -level)
        return self.start + local, self.points[local], self.probabilities[local]

    def level_scores(self, key: int, level: int, landmark_points: np.ndarray, landmark_roots: np.ndarray,
                     landmark_block: np.ndarray, weights: np.ndarray, lam: float) -> tuple[float, float, int]:
        """Ridge leverage scores l~_i of the level's points on the slice against the weighted landmarks
        (core.nystrom.leverage_scores, on the P_t-weighted kernel); (their sum, the largest, its index)."""
        self.level_index = np.flatnonzero(self._level_uniforms(key) < 2.0 ** -level)
        roots = np.sqrt(self.probabilities[self.level_index])
        diagonal = self.probabilities[self.level_index] * self.diagonal[self.level_index]
        if len(landmark_points):
            cross = roots[:, None] * self.kernel(self.points[self.level_index], landmark_points) * landmark_roots[None, :]
            self.scores = leverage_scores(cross, landmark_block, weights, diagonal, lam)
        else:
            self.scores = np.maximum(diagonal, 0.0) / lam
        if not len(self.scores):
            return 0.0, -math.inf, -1
        local = int(np.argmax(self.scores))
        return float(self.scores.sum()), float(self.scores[local]), self.start + int(self.level_index[local])

    def level_keep(self, key: int, oversampling: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Keep each scored point with probability p_i = min(1, q l~_i) (keyed uniforms): global
        indices, coordinates, P_t values and weights 1/sqrt(p_i) of the kept ones."""
        keep_probability = np.minimum(1.0, oversampling * self.scores)
        global_index = self.start + self.level_index
        u = keyed_uniforms(key, self.start, self.stop)[self.level_index]
        kept = np.flatnonzero(u < keep_probability)
        local = self.level_index[kept]
        return (global_index[kept], self.points[local], self.probabilities[local],
                1.0 / np.sqrt(keep_probability[kept]))

    def embed(self, landmark_points: np.ndarray, landmark_roots: np.ndarray, projection: np.ndarray,
              arm: int) -> tuple[np.ndarray, np.ndarray | None]:
        """g_t(x) = [(S^T K~ S)^{1/2}]^+ S^T D^{1/2} k(x) on the slice (rls_kernel_exp3's module
        docstring): the partial A_t = sum_x P_t(x) g g^T and g_t(x_t) if x_t is here."""
        columns = self.kernel(self.points, landmark_points) * landmark_roots[None, :]
        self.embedding = columns @ projection
        system = self.embedding.T @ (self.probabilities[:, None] * self.embedding)
        chosen = self.embedding[arm - self.start].copy() if self.start <= arm < self.stop else None
        return system, chosen

    def rls_update(self, factor: np.ndarray, solved_chosen: np.ndarray, reward: float, mu: float, beta: float,
                   eta: float, chosen: int, arm: int) -> tuple[float, float, float, float | None]:
        """u~_t = f~_t + beta sigma~_t (eqs. 6-7, in the embedding g_t)."""
        g = self.embedding
        cross = g @ solved_chosen
        solved = linalg.cho_solve((factor, True), g.T, check_finite=False)
        quadratic = np.einsum("ij,ji->i", g, solved)
        residual = np.maximum(self.diagonal - np.einsum("ij,ij->i", g, g), 0.0)
        estimate = reward * cross + beta * np.sqrt(residual / mu + quadratic)
        self.embedding = np.zeros((len(g), 0))
        return self._add_estimate(eta, estimate, chosen, arm)

    # ---- checkpoints: each shard keeps its part of the trial's state --------------------------------

    STATE = ("cumulative", "log_weights", "exploration", "factors")

    def state(self) -> bytes:
        """What changes during the rounds (the table and the points are rebuilt from the seed), as
        data (core.state_codec)."""
        return encode_state({"trial_id": self.spec.trial_id, "range": [self.start, self.stop],
                             **{name: getattr(self, name) for name in self.STATE}})

    def check_state(self, state: bytes) -> dict:
        """The stored state if it is this shard's; :class:`StateFormatError` otherwise."""
        values = decode_state(state)
        if not isinstance(values, dict) or set(values) != {"trial_id", "range", *self.STATE}:
            raise StateFormatError("not the state of a shard")
        if values["trial_id"] != self.spec.trial_id or values["range"] != [self.start, self.stop]:
            raise StateFormatError(f"the state is of another trial or shard ({values['trial_id']}, {values['range']})")
        return values

    def restore(self, state: bytes) -> None:
        values = self.check_state(state)
        for name in self.STATE:
            setattr(self, name, values[name])

    # The shard's part of the checkpoint of round ``at`` is kept where the shard runs, under the trial's key.

    def part(self, key: str, at: int) -> str:
        return f"{key}/shard-{self.start}.r{at}"

    def save_part(self, checkpoints: Checkpoints, key: str, at: int) -> bool:
        return checkpoints.save(self.part(key, at), self.state())

    def check_part(self, checkpoints: Checkpoints, key: str, at: int) -> str | None:
        """Why the part of round ``at`` cannot be this shard's (None: it can); the shard is untouched."""
        try:
            state = checkpoints.load(self.part(key, at))
            if state is None:
                return f"{self.part(key, at)}: missing"
            self.check_state(state)
            return None
        except (OSError, StateFormatError) as error:
            return f"{self.part(key, at)}: {error}"

    def load_part(self, checkpoints: Checkpoints, key: str, at: int) -> None:
        self.restore(checkpoints.load(self.part(key, at)))

    def discard_part(self, checkpoints: Checkpoints, key: str, at: int) -> None:
        checkpoints.discard(self.part(key, at))
