"""One adversarial-kernel trial (SPEC 2.3) with its domain X split over shards (SPEC 4): ``random``,
``apg_exp3`` and ``rls_kernel_exp3`` at sizes of X that no single process holds.

A :class:`KernelShard` holds a contiguous slice X[start:stop] and everything indexed by it: the points,
the candidate table's columns F[:, slice], the cumulative function S_t, the log-weights and P_t, the
exploration distribution, APG-Exp3's Newton-basis features, RLS-Kernelized Exp3's embedding. It
builds all of that itself from the trial's seed and its range: the candidates' centres and
coefficients are drawn from the environment's stream exactly as ``AdversarialKernelBandit`` draws
them, and its table columns are those of the unsharded table, bit for bit.

The :class:`ShardedKernelTrial` coordinator runs the round loop of ``core.trial`` over a
:class:`~banditsweep.core.sharding.ShardGroup`. What crosses between them per round (SPEC 4) is
small: the log-partition partials of P_t, the ``candidates`` partial sums F[:, slice] P_t[slice] and
the slice maxima of S_t for the adversary, the drawn point, the landmarks (points, P_t values and
weights), the s x s Gram partials of the Nystrom features and the leverage-score sums of each level
of the sampler; never an |X|-sized array.

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
import time
from dataclasses import dataclass
import numpy as np
from scipy import linalg

from banditsweep.core import domains, seeding
from banditsweep.core.contracts import Feedback
from banditsweep.core.environments.adversarial_kernel import (AdversarialKernelBandit, RegretTally, candidate_functions,
                                                              grid_slice, kernel_problem, table_columns)
from banditsweep.core.exp3 import (RLS_BETA_FACTOR, APGSchedule, DesignStep, Exp3Schedule, fedorov_wynn,
                                   pgreedy_tolerance)
from banditsweep.core.kernels import Kernel
from banditsweep.core.nystrom import leverage_scores
from banditsweep.core.state_codec import StateFormatError, decode_state, encode_state
from banditsweep.core.sharding import (ShardGroup, block_sums, blocks_in, derive_key, fixed_bound, from_fixed,
                                       global_argmax, keyed_uniforms, owner, rowwise_dot, rowwise_matmul)
from banditsweep.core.trial import (TrialRecorder, TrialResult, TrialSpec, check_feedback, check_values,
                                    resolve_algorithm, resolve_environment)

SHARDABLE_ALGORITHMS = ("random", "apg_exp3", "rls_kernel_exp3")
SHARDABLE_ENVIRONMENTS = ("adversarial_kernel",)
# The seeding stream of the sampler's keyed draws (core.seeding has 0: environment, 1: policy).
SAMPLER_STREAM = 2
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

    # ---- checkpoints -----------------------------------------------------------------------------

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


@dataclass
class Landmarks:
    index: np.ndarray      # global indices, increasing
    points: np.ndarray
    roots: np.ndarray      # sqrt(P_t) at the landmarks
    weights: np.ndarray    # 1 / sqrt(p_i)

    @classmethod
    def gather(cls, parts) -> "Landmarks":
        index, points, probabilities, *weights = (np.concatenate(column) for column in zip(*parts))
        return cls(index, points, np.sqrt(probabilities), weights[0] if weights else np.ones(len(index)))

    def block(self, kernel: Kernel) -> np.ndarray:
        """S^T K~ S, with K~ the P_t-weighted kernel."""
        return self.roots[:, None] * kernel(self.points, self.points) * self.roots[None, :]


class ShardedKernelTrial:
    """The coordinator of one sharded trial: the round loop of ``core.trial.TrialRun`` over a group
    of :class:`KernelShard`; its state (with the shards' :meth:`KernelShard.state`) can be captured
    between rounds."""

    def __init__(self, spec: TrialSpec, group: ShardGroup):
        check_shardable(spec)
        self.spec = spec
        config = resolve_environment(spec.environment)
        self.n, self.dim = domains.size(config.setting, config.domain, spec.horizon)
        self.kernel = Kernel.create(config.kernel, self.dim, config.lengthscale, config.nu)
        self.norm_bound = config.norm_bound
        self.params = resolve_algorithm(spec.algorithm, spec.params)
        self.horizon = spec.horizon
        self.rng = seeding.stream(spec.seed, seeding.POLICY_STREAM)
        self.sampler_key = derive_key(spec.seed, SAMPLER_STREAM)
        self.recorder = TrialRecorder(1, self.horizon)
        self.next_round = 1
        self.resumed_from: int | None = None
        self.shift = 0.0
        self.tally = RegretTally()
        self.choices = np.zeros(config.candidates, dtype=np.int64)
        self.landmark_counts: list[int] = []
        self.effective_dimensions: list[float] = []
        self.values: dict[str, float] = {}
        self.group: ShardGroup | None = None
        self.attach(group)
        maxima = self.group.map("table_maxima")
        self.table_max = np.max(np.stack(maxima), axis=0)
        self.prepare()

    # ---- the group -------------------------------------------------------------------------------

    def attach(self, group: ShardGroup) -> None:
        expected_n = group.ranges[-1][1] if group.ranges else 0
        if expected_n != self.n or group.ranges[0][0] != 0:
            raise ValueError(f"the shards cover 0..{expected_n}, the domain has {self.n} points")
        self.group = group

    @property
    def done(self) -> bool:
        return self.next_round > self.horizon

    def coordinator_state(self) -> bytes:
        """The coordinator's own state between two rounds (the shards keep theirs: KernelShard.state)."""
        group, self.group = self.group, None
        try:
            return encode_state(self.__dict__)
        finally:
            self.group = group

    def snapshot(self) -> tuple[bytes, list[bytes]]:
        """(the coordinator's state, each shard's state) between two rounds."""
        return self.coordinator_state(), self.group.map("state")

    @classmethod
    def check_state(cls, state: bytes, spec: TrialSpec) -> dict:
        """The coordinator's stored attributes if they are ``spec``'s; :class:`StateFormatError` otherwise."""
        values = decode_state(state)
        if not isinstance(values, dict) or not isinstance(values.get("spec"), TrialSpec):
            raise StateFormatError("not the state of a sharded trial")
        if values["spec"].trial_id != spec.trial_id:
            raise StateFormatError(f"the state is of trial {values['spec'].trial_id}, not {spec.trial_id}")
        if type(values.get("next_round")) is not int or not 1 <= values["next_round"] <= spec.horizon + 1:
            raise StateFormatError(f"the state's next round {values.get('next_round')!r} is outside 1..{spec.horizon + 1}")
        return values

    @classmethod
    def restore(cls, state: bytes, group: ShardGroup, spec: TrialSpec) -> "ShardedKernelTrial":
        """A coordinator from its state, attached to ``group``, whose shards were restored already."""
        trial = cls.__new__(cls)
        trial.__dict__.update(cls.check_state(state, spec))
        trial.attach(group)
        trial.resumed_from = trial.next_round
        return trial

    # ---- preparation -----------------------------------------------------------------------------

    def pivots(self, length: int, noise: float | None, tolerance: float | None) -> tuple[list[int], float]:
        """Distributed pivoted Cholesky: MVR (``noise`` = lambda, fixed ``length``) or P-greedy (stop
        when max sqrt(power) <= ``tolerance``). Returns the pivots and the final largest power."""
        candidate = global_argmax(self.group.map("pivot_candidate"))
        sequence: list[int] = []
        while len(sequence) < length:
            value, pick = candidate
            if tolerance is not None and math.sqrt(max(value, 0.0)) <= tolerance:
                break
            sequence.append(pick)
            point, values = self.group.call(owner(self.group.ranges, pick), "pivot_row", pick)
            denominator = math.sqrt(value + noise) if noise is not None else math.sqrt(value)
            candidate = global_argmax(self.group.map("pivot_add", point, values, denominator))
        return sequence, candidate[0]

    def prepare(self) -> None:
        algorithm = self.spec.algorithm
        if algorithm == "random":
            self.dots = np.sum(np.stack(self.group.map("uniform_dots")), axis=0)
            return
        problem = kernel_problem(self.n, self.dim, self.horizon, self.kernel, self.norm_bound)
        if algorithm == "rls_kernel_exp3":
            self.schedule = Exp3Schedule(self.params, problem, beta_factor=RLS_BETA_FACTOR)
            sequence, _ = self.pivots(self.schedule.design_length, self.params.lam, None)
            self.group.map("pivots_done", False)
            self.group.map("set_exploration_sequence", np.asarray(sequence, dtype=np.int64))
            self.eta, self.alpha = self.schedule.eta, self.schedule.alpha
            self.values = {**self.schedule.as_dict(), "delta": self.params.delta,
                           "mvr_distinct_points": float(len(set(sequence))), "mvr_landmarks": 0.0}
        else:
            self.prepare_apg()
        self.log_totals = self.group.map("log_partition")

    def prepare_apg(self) -> None:
        """Newton basis by P-greedy, G-optimal design by Frank-Wolfe (SPEC 3.5; the schedule and the
        design's iteration are core.exp3's, as for the unsharded APG-Exp3)."""
        params = self.params
        pivots, max_power = self.pivots(self.n, None, pgreedy_tolerance(params, self.n, self.horizon))
        self.group.map("pivots_done", True)
        schedule = APGSchedule(params, self.n, self.horizon, len(pivots), math.sqrt(max(max_power, 0.0)))
        bound = fixed_bound(max(float(np.max(self.kernel.diag(np.zeros((1, self.dim))))), 1.0)
                            if self.kernel.name != "linear" else float(self.dim) / self.kernel.lengthscale ** 2)
        g_max, iterations = fedorov_wynn(ShardedDesign(self.group, bound), len(pivots), params.epsilon,
                                         params.max_iterations)
        support = sum(self.group.map("design_done"))
        self.eta, self.alpha = schedule.eta, schedule.alpha
        self.values = schedule.values(g_max, iterations, support)

    # ---- rounds ----------------------------------------------------------------------------------

    def play_round(self) -> None:
        t, index = self.next_round, self.next_round - 1
        started = time.perf_counter()
        if self.spec.algorithm == "random":
            arm = int(self.rng.integers(self.n))
            dots = self.dots
            chosen = self.adversary(dots)
            results = self.group.map("play", chosen, arm)
            best = max(result[0] for result in results)
            reward = next(result[1] for result in results if result[1] is not None)
        else:
            arm, chosen, dots, reward, best = self.exp3_round(t)
        self.record(index, arm, chosen, reward, float(dots[chosen]), best)
        self.recorder.seconds[0, index] = time.perf_counter() - started
        self.next_round += 1

    def adversary(self, dots: np.ndarray) -> int:
        """argmax_i (max_x f^(i)(x) - sum_x P_t(x) f^(i)(x)), ties to the smallest i (SPEC 2.3)."""
        return int(np.argmax(self.table_max - dots))

    def exp3_round(self, t: int):
        # P_t from the log-partition partials, re-centred on the global maximum of the log-weights.
        shift = max(top for top, _ in self.log_totals)
        total = sum(part * math.exp(top - shift) for top, part in self.log_totals)
        parts = self.group.map("distribution", shift, math.log(total), self.alpha)
        masses = [mass for mass, _, _ in parts]
        # The round loop's check of P_t (core.trial.check_decision), on what reaches the coordinator: a
        # NaN or infinite P_t anywhere makes its shard's mass so.
        check_values(t, np.array([masses]), f"{self.spec.policy_class.quantity()} mass", entry="shard")
        dots = np.sum(np.stack([d for _, d, _ in parts]), axis=0)
        chosen = self.adversary(dots)
        # x_t ~ P_t by inversion (core.exp3.sample): one uniform number of the policy stream.
        target = self.rng.random() * sum(masses)
        shard, offset = len(masses) - 1, 0.0
        for i, mass in enumerate(masses):
            if target < offset + mass or i == len(masses) - 1:
                shard = i
                break
            offset += mass
        arm, features = self.group.call(shard, "locate", target - offset)
        if self.spec.algorithm == "apg_exp3":
            information = np.sum(np.stack([q for _, _, q in parts]), axis=0)
            reward_value = self.reward_at(shard, chosen, arm)
            try:
                theta = linalg.cho_solve(linalg.cho_factor(information, lower=True, check_finite=False),
                                         features * reward_value, check_finite=False)
            except linalg.LinAlgError:
                theta = np.linalg.lstsq(information, features * reward_value, rcond=None)[0]
            results = self.group.map("apg_update", theta, self.eta, chosen, arm)
        else:
            reward_value = self.reward_at(shard, chosen, arm)
            results = self.rls_estimate(t, chosen, arm, reward_value)
        self.log_totals = [(top, part) for top, part, _, _ in results]
        best = max(result[2] for result in results)
        return arm, chosen, dots, reward_value, best

    def reward_at(self, shard: int, chosen: int, arm: int) -> float:
        return float(self.group.call(shard, "value", chosen, arm))

    def landmarks(self, t: int) -> Landmarks:
        """S_t: recursive RLS-Nystrom (the practical fixed-ridge variant, core.nystrom) with the
        halvings and keep decisions drawn from keyed streams (module docstring)."""
        params, mu = self.params, self.schedule.mu
        level_key = derive_key(self.sampler_key, t, 0)
        counts = np.sum(np.stack(self.group.map("level_counts", level_key)), axis=0)
        smallest = next((level for level in range(MAX_LEVELS) if counts[level] <= params.base_size), MAX_LEVELS - 1)
        current = Landmarks.gather(self.group.map("level_members", level_key, smallest))
        effective = 0.0
        for level in range(smallest - 1, -1, -1) if smallest > 0 else [0]:
            block = current.block(self.kernel)
            parts = self.group.map("level_scores", level_key, level, current.points, current.roots, block,
                                   current.weights, mu)
            effective = float(sum(part[0] for part in parts))
            q = params.oversample * max(1.0, math.log(max(effective, 1e-300) / params.delta))
            kept = Landmarks.gather(self.group.map("level_keep", derive_key(self.sampler_key, t, level + 1), q))
            if not len(kept.index):
                # Project choice (core.nystrom.keep_columns): keep the point of largest score.
                _, best, where = max((part[1], -part[2], part[2]) for part in parts)
                del best
                shard = owner(self.group.ranges, where)
                point = self.group.call(shard, "point", where)
                root = math.sqrt(self.group.call(shard, "probability", where))
                kept = Landmarks(np.array([where]), point[None], np.array([root]), np.ones(1))
            current = kept
        self.effective_dimensions.append(effective)
        return current

    def rls_estimate(self, t: int, chosen: int, arm: int, reward: float):
        """eqs. (6)-(7) in the embedding g_t, A_t summed over the shards."""
        landmarks = self.landmarks(t)
        self.landmark_counts.append(len(landmarks.index))
        block = landmarks.block(self.kernel)
        eigenvalues, vectors = np.linalg.eigh(block)
        keep = eigenvalues > 1e-12 * max(eigenvalues.max(), 0.0)
        projection = vectors[:, keep] / np.sqrt(eigenvalues[keep])
        parts = self.group.map("embed", landmarks.points, landmarks.roots, projection, arm)
        system = np.sum(np.stack([p for p, _ in parts]), axis=0)
        system[np.diag_indices_from(system)] += self.schedule.mu
        chosen_row = next(row for _, row in parts if row is not None)
        factor = linalg.cholesky(system, lower=True, check_finite=False)
        solved_chosen = linalg.cho_solve((factor, True), chosen_row, check_finite=False)
        return self.group.map("rls_update", factor, solved_chosen, reward, self.schedule.mu, self.schedule.beta,
                              self.eta, chosen, arm)

    def record(self, index: int, arm: int, chosen: int, reward: float, expected: float, best: float) -> None:
        """Both regret forms of SPEC 2.1, as AdversarialKernelBandit.step computes them."""
        self.choices[chosen] += 1
        increment, regret, expected_regret = self.tally.add(reward, expected, best)
        extras = {"expected_regret": expected_regret, "adversary_choice": float(chosen)}
        check_feedback(index + 1, 0, Feedback(reward, increment, regret, extras), AdversarialKernelBandit)
        recorder = self.recorder
        recorder.arm[0, index] = arm
        recorder.reward[0, index] = reward
        recorder.regret[0, index] = increment
        recorder.cum_regret[0, index] = regret
        for key, value in extras.items():
            recorder.extras[0].setdefault(key, np.zeros(self.horizon))[index] = value

    def advance(self, rounds: int | None = None, on_progress=None, progress_every: int = 100) -> None:
        last = self.horizon if rounds is None else min(self.horizon, self.next_round + rounds - 1)
        while self.next_round <= last:
            self.play_round()
            t = self.next_round - 1
            if on_progress is not None and (t % progress_every == 0 or t == self.horizon):
                on_progress(0, t, float(self.recorder.cum_regret[0, t - 1]))

    def results(self) -> TrialResult:
        if not self.done:
            raise RuntimeError(f"the trial has played {self.next_round - 1} of {self.horizon} rounds")
        diagnostics = {"domain_size": float(self.n), "lengthscale": float(self.kernel.lengthscale),
                       "candidates_scaled_fraction": self.group.call(0, "candidates_scaled_fraction"),
                       "distinct_adversary_choices": float(np.count_nonzero(self.choices)),
                       "shards": float(len(self.group.ranges)), **self.values}
        if self.landmark_counts:
            counts = np.asarray(self.landmark_counts, dtype=np.float64)
            diagnostics.update({"s_t_mean": float(counts.mean()), "s_t_max": float(counts.max()),
                                "s_t_min": float(counts.min()),
                                "effective_dimension_mean": float(np.mean(self.effective_dimensions))})
        if self.resumed_from:
            diagnostics["resumed_from_round"] = float(self.resumed_from)
        return self.recorder.results([diagnostics])[0]


class ShardedDesign:
    """The G-optimal design's points on the shards (core.exp3.DesignPoints): the information matrix
    V(pi) as an exact fixed-point sum over the shards' blocks (scale ``bound``), g(x) and the
    design's moves on each slice."""

    def __init__(self, group: ShardGroup, bound: float):
        self.group, self.bound = group, bound

    def _inverse(self, words) -> np.ndarray:
        return np.linalg.inv(from_fixed(np.sum(np.stack(words), axis=0), self.bound))

    def start(self) -> np.ndarray:
        return self._inverse(self.group.map("design_start", self.bound))

    def inverse(self) -> np.ndarray:
        return self._inverse(self.group.map("design_information"))

    def largest(self, inverse: np.ndarray) -> tuple[float, int, np.ndarray]:
        return global_argmax_with_row(self.group.map("design_leverage", inverse))

    def move(self, step: DesignStep, pick: int) -> tuple[float, int, np.ndarray]:
        return global_argmax_with_row(self.group.map("design_step", step, pick))


def global_argmax_with_row(partials) -> tuple[float, int, np.ndarray]:
    """global_argmax over (value, index, row) triples."""
    value, index = global_argmax([(v, i) for v, i, _ in partials])
    return next(item for item in partials if item[1] == index)


def run_sharded(spec: TrialSpec, group: ShardGroup, on_progress=None, progress_every: int = 100) -> TrialResult:
    """Run a sharded trial to the end over ``group`` (no checkpoints)."""
    trial = ShardedKernelTrial(spec, group)
    trial.advance(on_progress=on_progress, progress_every=progress_every)
    return trial.results()
