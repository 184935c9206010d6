"""One shard of a sharded adversarial-kernel trial (SPEC 2.3, 4): everything indexed by X[start:stop].

A :class:`KernelShard` holds the slice's points, the candidate table's columns F[:, slice], the
cumulative function S_t, the log-weights and P_t, the exploration distribution pi and the columns of
a pivoted Cholesky factorisation (MVR's, or APG-Exp3's Newton basis N(x)). It builds all of that
itself from the trial's seed and its range: the candidates' centres and coefficients are drawn from
the environment's stream exactly as ``AdversarialKernelBandit`` draws them, and its table columns
are those of the unsharded table, bit for bit.

It answers the requests of core.kernel.sharded.protocol that any algorithm's round needs (the environment,
the pivots, P_t and the draw, its part of the checkpoint); its algorithm's slice
(the ``Slice`` of the algorithm's sharded half, core.kernel.sharded.algorithm) answers the rest. Every choice
among tied points is decided over X by core.engine.ties' rule (:class:`Ties`). Every argmax over the slice
that may tie by the domain's symmetry is computed elementwise per point (core.kernel.sharded.partition), so
1, 2, 3 or 4 shards give bit-identical results.

Which trials can be sharded: an environment whose class is ``AdversarialKernelBandit`` and an
algorithm whose class has a sharded half (:func:`check_shardable`).
"""

from __future__ import annotations

import numpy as np

from banditsweep.core.kernel import domains
from banditsweep.core.engine import registry, seeding
from banditsweep.core.kernel.adversarial_kernel import (AdversarialKernelBandit, candidate_functions,
                                                        grid_slice, table_columns)
from banditsweep.core.kernel.exp3 import invert
from banditsweep.core.kernel.kernels import Kernel
from banditsweep.core.kernel.sharded.algorithm import sharded_half
from banditsweep.core.kernel.sharded.partition import blocks_in, rowwise_dot
from banditsweep.core.kernel.sharded.protocol import (Answering, Candidate, CheckPart, Describe, Description,
                                                      DiscardPart, Distributed, Distribution, Located, LoadPart,
                                                      Locate, LogPartition, Moved, Partition, PivotAdd,
                                                      PivotCandidate, PivotRow, PivotsDone, Play, Point, PointAt,
                                                      Request, Row, SavePart, SetExploration, Tied, Ties, UniformSums,
                                                      Updated, Value, answers)
from banditsweep.core.engine.ties import tied_among
from banditsweep.core.engine.state_codec import StateFormatError, decode_state, encode_state
from banditsweep.core.engine.trial import TrialSpec, resolve_algorithm, resolve_environment


def shardable_environment(kind: str) -> bool:
    try:
        return registry.environment_class(kind) is AdversarialKernelBandit
    except (KeyError, ImportError):
        return False


def shardable_environments() -> list[str]:
    return [kind for kind in registry.environment_names() if shardable_environment(kind)]


def shardable_algorithms() -> list[str]:
    """The registered algorithms whose class has a sharded half, in the order they were registered."""
    names = []
    for name in registry.registered_algorithms():
        try:
            if sharded_half(registry.algorithm_class(name)) is not None:
                names.append(name)
        except ImportError:   # a plugin that cannot be loaded shards nothing
            continue
    return names


def check_shardable(spec: TrialSpec) -> None:
    """Raise ValueError naming what cannot be sharded."""
    kind = spec.environment["kind"]
    if not shardable_environment(kind):
        raise ValueError(f"environment kind {kind!r} cannot be sharded; shardable: {', '.join(shardable_environments())}")
    half = sharded_half(spec.policy_class)
    if half is None:
        raise ValueError(f"algorithm {spec.algorithm!r} cannot be sharded; shardable: {', '.join(shardable_algorithms())}")
    half.check(resolve_algorithm(spec.algorithm, spec.params))


def domain_shape(spec: TrialSpec) -> tuple[int, int]:
    """(|X|, d) of a kernel trial, without building X."""
    config = resolve_environment(spec.environment)
    return domains.size(config.setting, config.domain, spec.horizon)


class KernelShard(Answering):
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
        self.algorithm = sharded_half(spec.policy_class).Slice(self)

    def handle(self, request: Request):
        """The reply to ``request``: the shard's own, else its algorithm's slice's."""
        if type(request) in self.answered:
            return super().handle(request)
        return self.algorithm.handle(request)

    def local(self, index: int) -> int | None:
        """Where global point ``index`` is in the slice (None: not on it)."""
        return index - self.start if self.start <= index < self.stop else None

    # ---- environment (SPEC 2.3) ------------------------------------------------------------------

    @answers(Describe)
    def describe(self, request: Describe) -> Description:
        return Description(self.table.max(axis=1), self.scaled_fraction)

    @answers(UniformSums)
    def uniform_sums(self, request: UniformSums) -> np.ndarray:
        return self.table @ np.full(self.stop - self.start, 1.0 / self.n)

    @answers(Value)
    def value(self, request: Value) -> float:
        return float(self.table[request.candidate, request.arm - self.start])

    @answers(Play)
    def play(self, request: Play) -> Moved:
        self.cumulative += self.table[request.candidate]
        local = self.local(request.arm)
        reward = float(self.table[request.candidate, local]) if local is not None else None
        return Moved(float(self.cumulative.max()), reward)

    @answers(PointAt)
    def point(self, request: PointAt) -> Point:
        local = request.index - self.start
        return Point(self.points[local], float(self.probabilities[local]))

    # ---- pivoted Cholesky: MVR (SPEC 3.2) and the P-greedy Newton basis (SPEC 3.5) ---------------

    @answers(PivotCandidate)
    def pivot_candidate(self, request: PivotCandidate | None = None) -> Candidate:
        local = int(np.argmax(self.power))
        return Candidate(float(self.power[local]), self.start + local)

    @answers(Ties)
    def ties(self, request: Ties) -> Tied | None:
        """The slice's part of a pivot's choice among the points of largest power (core.engine.ties); another
        quantity is its algorithm slice's."""
        if request.quantity != "power":
            return self.algorithm.handle(request)
        found = tied_among(self.power, request.edge, request.key, np.arange(self.start, self.stop))
        if found is None:
            return None
        priority, local = found
        return Tied(priority, self.start + local, float(self.power[local]))

    @answers(PivotRow)
    def pivot_row(self, request: PivotRow) -> Row:
        local = request.index - self.start
        return Row(self.points[local], self.factors[local].copy())

    @answers(PivotAdd)
    def pivot_add(self, request: PivotAdd) -> Candidate:
        """v(.) = [k(., x_pick) - sum_i v_i(.) v_i(x_pick)] / denominator; power -= v^2 (elementwise)."""
        column = self.kernel(self.points, request.point[None])[:, 0] - rowwise_dot(self.factors, request.factors)
        new = column / request.denominator
        self.factors = np.asfortranarray(np.column_stack([self.factors, new]))
        self.power = np.maximum(self.power - new * new, 0.0)
        return self.pivot_candidate()

    @answers(PivotsDone)
    def pivots_done(self, request: PivotsDone) -> None:
        if not request.keep_factors:
            self.factors = np.zeros((self.stop - self.start, 0), order="F")
        self.power = self.diagonal.copy()

    @answers(SetExploration)
    def set_exploration(self, request: SetExploration) -> None:
        """pi = the empirical distribution of an index sequence (the MVR design)."""
        sequence = request.sequence
        inside = sequence[(sequence >= self.start) & (sequence < self.stop)] - self.start
        self.exploration = np.bincount(inside, minlength=self.stop - self.start) / len(sequence)

    # ---- Exp3 rounds (core.kernel.exp3, SPEC 3.1) ------------------------------------------------

    @answers(LogPartition)
    def log_partition(self, request: LogPartition | None = None) -> Partition:
        top = float(self.log_weights.max())
        return Partition(top, float(np.exp(self.log_weights - top).sum()))

    @answers(Distribution)
    def distribution(self, request: Distribution) -> Distributed:
        self.log_weights -= request.shift
        self.probabilities = ((1.0 - request.alpha) * np.exp(self.log_weights - request.log_total)
                              + request.alpha * self.exploration)
        information = None
        if request.information:
            information = self.factors.T @ (self.probabilities[:, None] * self.factors)
        return Distributed(float(self.probabilities.sum()), self.table @ self.probabilities, information)

    @answers(Locate)
    def locate(self, request: Locate) -> Located:
        local = invert(np.cumsum(self.probabilities), request.target).index
        return Located(self.start + local, self.factors[local].copy() if request.features else None)

    def add_estimate(self, eta: float, estimate: np.ndarray, candidate: int, arm: int) -> Updated:
        """Log-weights += eta u_t, then the environment moves on: what an algorithm's update replies."""
        self.log_weights += eta * estimate
        partition = self.log_partition()
        return Updated(partition, self.play(Play(candidate, arm)))

    # ---- checkpoints: each shard keeps its part of the trial's state --------------------------------

    STATE = ("cumulative", "log_weights", "exploration", "factors")
    # Rebuilt from the spec and the range by __init__ (the points, the candidates' table, the kernel),
    # or lasting one round or the preparation only (P_t, the pivots' residual power).
    TRANSIENT = ("spec", "start", "stop", "n", "points", "kernel", "scaled_fraction", "table", "diagonal", "blocks",
                 "params", "probabilities", "power", "algorithm")

    def state(self) -> bytes:
        """What changes during the rounds (the table and the points are rebuilt from the seed), as
        data (core.engine.state_codec)."""
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

    def part(self, key: str, at: int) -> str:
        """The name of the shard's part of the checkpoint of round ``at``, kept where the shard runs."""
        return f"{key}/shard-{self.start}.r{at}"

    @answers(SavePart)
    def save_part(self, request: SavePart) -> bool:
        return request.checkpoints.save(self.part(request.key, request.at), self.state())

    @answers(CheckPart)
    def check_part(self, request: CheckPart) -> str | None:
        name = self.part(request.key, request.at)
        try:
            state = request.checkpoints.load(name)
            if state is None:
                return f"{name}: missing"
            self.check_state(state)
            return None
        except (OSError, StateFormatError) as error:
            return f"{name}: {error}"

    @answers(LoadPart)
    def load_part(self, request: LoadPart) -> None:
        self.restore(request.checkpoints.load(self.part(request.key, request.at)))

    @answers(DiscardPart)
    def discard_part(self, request: DiscardPart) -> None:
        request.checkpoints.discard(self.part(request.key, request.at))
