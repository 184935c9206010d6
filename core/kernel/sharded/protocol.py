"""What crosses between a sharded trial's coordinator and its shards (SPEC 4), as typed messages.

Each request is a small frozen dataclass ``Request[R]``, R the type of the reply a shard gives: a
frozen dataclass with named fields, one value (its shape in the request's docstring), or None where
a request only moves the shard on. The shapes use n = |X|, w = the points of one slice, m = the
candidate functions, d = the dimension of X, D = the columns of the pivoted-Cholesky factors (the
Newton basis of APG-Exp3), s = the landmarks of RLS-Kernelized Exp3's sampler and r = the rank of
its embedding. Nothing |X|-sized (n or w) ever crosses: per round a few partial sums of m, D x D,
s x s or r x r numbers, and the draw.

A shard (core.kernel.sharded.shard.KernelShard) and its algorithm's slice
(core.kernel.sharded.algorithm) are :class:`Answering`: each method marked ``@answers(SomeRequest)``
answers that request, and :meth:`Answering.handle` is the one entry point a transport calls. A :class:`ShardGroup` carries a
request to every shard (``map``) or to one (``ask``): :class:`LocalShards` in this process,
``workers.execution.sharded_trials.RayShards`` to Ray actors.

Its length is the protocol's table: every request and reply, a few lines each, declared in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, Protocol, TypeVar

import numpy as np

R = TypeVar("R")


class Request(Generic[R]):
    """A message to a shard whose reply is an R."""


# ---- answering -------------------------------------------------------------------------------------


def answers(request: type[Request]) -> Callable:
    """Mark a method ``method(self, request) -> reply`` as the answer to requests of type ``request``."""
    def mark(method: Callable) -> Callable:
        method.answers_request = request
        return method
    return mark


class Answering:
    """What answers requests by their type: the methods marked with :func:`answers`, collected per
    class (a subclass adds to and may replace its bases' answers)."""

    answered: ClassVar[dict[type, str]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        table: dict[type, str] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                request = getattr(value, "answers_request", None)
                if isinstance(request, type):
                    table[request] = name
        cls.answered = table

    def handle(self, request: Request[R]) -> R:
        # Looked up on the instance at each call, so that the answering method is the class's current one.
        name = self.answered.get(type(request))
        if name is None:
            raise TypeError(f"{type(self).__name__} does not answer {type(request).__name__}")
        return getattr(self, name)(request)


# ---- the shards of one trial ----------------------------------------------------------------------


class ShardGroup(Protocol):
    """The shards of one trial, in order of their ranges [start, stop) of X."""

    ranges: list[tuple[int, int]]

    def map(self, request: Request[R]) -> list[R]:
        """``request`` answered by every shard; the replies in shard order."""

    def ask(self, shard: int, request: Request[R]) -> R:
        """``request`` answered by one shard."""


class LocalShards:
    """Shards held in this process (one machine, tests)."""

    def __init__(self, shards: list[Answering]):
        self.shards = shards
        self.ranges = [(shard.start, shard.stop) for shard in shards]

    def map(self, request: Request[R]) -> list[R]:
        return [shard.handle(request) for shard in self.shards]

    def ask(self, shard: int, request: Request[R]) -> R:
        return self.shards[shard].handle(request)


# ---- replies shared by several requests -----------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A slice's largest value of a quantity and its global index (where several are largest, the
    smallest: which of them is chosen is decided over X by core.engine.ties' rule, :class:`Tied`)."""

    value: float
    index: int


@dataclass(frozen=True)
class Tied:
    """A slice's part of a choice over X by the tie rule (core.engine.ties): among its points at or beyond the
    tied set's edge, the one of largest priority: the priority, its global index, its value and, where
    the choice needs them, its features. The choice is the largest priority over the slices."""

    priority: float
    index: int
    value: float
    features: np.ndarray | None = None


@dataclass(frozen=True)
class Ties(Request["Tied | None"]):
    """The slice's :class:`Tied` of ``quantity`` ("power": the pivots' residual variance; "leverage":
    the design's g(x); "scores": the Nystrom level's ridge leverage scores) at ``edge``, priorities
    keyed by ``key``; None where no point of the slice is tied."""

    quantity: str
    edge: float
    key: int


@dataclass(frozen=True)
class Partition:
    """The slice's part of log Z_t: its largest log-weight ``top`` and sum_x exp(L_t(x) - top)."""

    top: float
    total: float


@dataclass(frozen=True)
class Moved:
    """After S_t += f_t on the slice: the largest S_t(x) there, and f_t(x_t) if x_t is on the slice."""

    best: float
    reward: float | None


@dataclass(frozen=True)
class Updated:
    """After u_t is added to the log-weights and the environment moved on: both, for the next round."""

    partition: Partition
    moved: Moved


# ---- the environment (SPEC 2.3) --------------------------------------------------------------------


@dataclass(frozen=True)
class Description:
    """``maxima`` (m,): max_x f^(i)(x) over the slice; ``scaled_fraction``: the share of candidates
    scaled down to the norm bound (the same on every shard: all candidates are drawn on each)."""

    maxima: np.ndarray
    scaled_fraction: float


@dataclass(frozen=True)
class Describe(Request[Description]):
    """What the coordinator keeps of the environment's slice."""


@dataclass(frozen=True)
class UniformSums(Request[np.ndarray]):
    """F[:, slice] (1/n) (m,): the adversary's partial sums for the uniform P_t of Random."""


@dataclass(frozen=True)
class Play(Request[Moved]):
    """f_t = f^(candidate) added to S_t on the slice; x_t = X[arm]."""

    candidate: int
    arm: int


@dataclass(frozen=True)
class Value(Request[float]):
    """f^(candidate)(X[arm]), asked of the shard that holds ``arm``."""

    candidate: int
    arm: int


@dataclass(frozen=True)
class Point:
    """``coordinates`` (d,) of a point and P_t there."""

    coordinates: np.ndarray
    probability: float


@dataclass(frozen=True)
class PointAt(Request[Point]):
    index: int


# ---- pivoted Cholesky: MVR (SPEC 3.2) and the P-greedy Newton basis (SPEC 3.5) ------------------


@dataclass(frozen=True)
class PivotCandidate(Request[Candidate]):
    """The slice's largest residual variance (power) sigma_j^2(x)."""


@dataclass(frozen=True)
class Row:
    """The pivot x_pick (d,) and the j factor columns at it, v_1..v_j(x_pick) (j,)."""

    point: np.ndarray
    factors: np.ndarray


@dataclass(frozen=True)
class PivotRow(Request[Row]):
    index: int


@dataclass(frozen=True)
class PivotAdd(Request[Candidate]):
    """Add the column v_{j+1}(.) = [k(., x_pick) - sum_i v_i(.) v_i(x_pick)] / denominator (``point``
    and ``factors`` a :class:`Row`); the new largest power."""

    point: np.ndarray
    factors: np.ndarray
    denominator: float


@dataclass(frozen=True)
class PivotsDone(Request[None]):
    """Keep the factor columns (APG-Exp3's features N(x)) or drop them (MVR needs only its pivots)."""

    keep_factors: bool


@dataclass(frozen=True)
class SetExploration(Request[None]):
    """pi = the empirical distribution of ``sequence`` (L,) of global indices (the MVR design)."""

    sequence: np.ndarray


# ---- the G-optimal design of APG-Exp3 (SPEC 3.5, core.kernel.exp3.fedorov_wynn) -------------------


@dataclass(frozen=True)
class DesignStart(Request[np.ndarray]):
    """The uniform design pi = 1/n; the slice's sum_x pi(x) N(x) N(x)^T as exact fixed-point words
    (D, D, 2) at the scale ``bound`` (core.kernel.sharded.partition.to_fixed), added over the shards as integers."""

    bound: float


@dataclass(frozen=True)
class DesignInformation(Request[np.ndarray]):
    """The current design's information as :class:`DesignStart`'s, afresh."""


@dataclass(frozen=True)
class Leverage:
    """The slice's largest g(x) = N(x)^T V^{-1} N(x), its global index and its features (D,)."""

    value: float
    index: int
    features: np.ndarray


@dataclass(frozen=True)
class DesignLeverage(Request[Leverage]):
    """g(x) computed from ``inverse`` = V^{-1} (D, D)."""

    inverse: np.ndarray


@dataclass(frozen=True)
class DesignMove(Request[Leverage]):
    """The design and g moved by ``step`` (a core.kernel.exp3.DesignStep: D numbers) towards ``pick``."""

    step: Any
    pick: int


@dataclass(frozen=True)
class DesignDone(Request[np.ndarray]):
    """pi = the design; the global indices of the slice's points that carry mass."""


# ---- Exp3 rounds (core.kernel.exp3, SPEC 3.1) ------------------------------------------------------


@dataclass(frozen=True)
class LogPartition(Request[Partition]):
    """The slice's log-partition before round 1."""


@dataclass(frozen=True)
class Distributed:
    """P_t on the slice: its mass, the adversary's partial sums ``sums`` (m,) = F[:, slice] P_t[slice]
    and, when asked, ``information`` (D, D) = sum_x P_t(x) N(x) N(x)^T over the slice (Q_t's part)."""

    mass: float
    sums: np.ndarray
    information: np.ndarray | None


@dataclass(frozen=True)
class Distribution(Request[Distributed]):
    """P_t = (1 - alpha) exp(log-weights - shift - log_total) + alpha pi, the log-weights re-centred
    by the global maximum ``shift`` (``log_total``: log of the partition sum after that shift)."""

    shift: float
    log_total: float
    alpha: float
    information: bool


@dataclass(frozen=True)
class Located:
    """x_t's global index and, when asked, its features N(x_t) (D,)."""

    index: int
    features: np.ndarray | None


@dataclass(frozen=True)
class Locate(Request[Located]):
    """x_t inside the slice: where the slice's cumulative P_t passes ``target`` (core.kernel.exp3.invert)."""

    target: float
    features: bool


@dataclass(frozen=True)
class LinearEstimate(Request[Updated]):
    """APG-Exp3's u_t(x) = N(x)^T theta (theta (D,)) into the log-weights, then f^(candidate) played."""

    theta: np.ndarray
    eta: float
    candidate: int
    arm: int


# ---- RLS-Kernelized Exp3's sampler and embedding (SPEC 3.3, 3.4) -----------------------------------


@dataclass(frozen=True)
class LevelCounts(Request[np.ndarray]):
    """How many points of the slice lie in each level l = 0..62 of the halving draw ``key`` (63,)."""

    key: int


@dataclass(frozen=True)
class Members:
    """Points of the slice in a level or kept by it: global indices (k,), coordinates (k, d), P_t
    values (k,) and, for kept points, their weights 1 / sqrt(p_i) (k,)."""

    index: np.ndarray
    points: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None = None


@dataclass(frozen=True)
class LevelMembers(Request[Members]):
    """The slice's points of level ``level`` of the halving draw ``key``."""

    key: int
    level: int


@dataclass(frozen=True)
class Scores:
    """The sum of the slice's scores l~_i at a level and the largest (-inf at -1: no point there)."""

    total: float
    largest: Candidate


@dataclass(frozen=True)
class LevelScores(Request[Scores]):
    """l~_i of the level's points against the weighted landmarks: their coordinates ``points`` (s, d),
    sqrt(P_t) there ``roots`` (s,), ``block`` = S^T K~ S (s, s), ``weights`` (s,), ridge ``ridge``."""

    key: int
    level: int
    points: np.ndarray
    roots: np.ndarray
    block: np.ndarray
    weights: np.ndarray
    ridge: float


@dataclass(frozen=True)
class LevelKeep(Request[Members]):
    """Keep each scored point with probability p_i = min(1, q l~_i), q = ``oversampling`` (draw ``key``)."""

    key: int
    oversampling: float


@dataclass(frozen=True)
class Embedded:
    """The slice's part of A_t - mu I, sum_x P_t(x) g_t(x) g_t(x)^T (r, r); g_t(x_t) (r,) if x_t is here."""

    system: np.ndarray
    chosen: np.ndarray | None


@dataclass(frozen=True)
class Embed(Request[Embedded]):
    """g_t(x) = [(S^T K~ S)^{1/2}]^+ S^T D^{1/2} k(x) on the slice: landmark coordinates (s, d),
    sqrt(P_t) at them (s,), ``projection`` = [(S^T K~ S)^{1/2}]^+ as (s, r); x_t = X[arm]."""

    points: np.ndarray
    roots: np.ndarray
    projection: np.ndarray
    arm: int


@dataclass(frozen=True)
class NystromEstimate(Request[Updated]):
    """u~_t = f~_t + beta sigma~_t (eqs. 6-7 in g_t) into the log-weights, then f^(candidate) played:
    ``factor`` (r, r) the lower Cholesky factor of A_t, ``solved_chosen`` = A_t^{-1} g_t(x_t) (r,),
    y_t = ``reward``."""

    factor: np.ndarray
    solved_chosen: np.ndarray
    reward: float
    mu: float
    beta: float
    eta: float
    candidate: int
    arm: int


# ---- checkpoints: each shard keeps its part where it runs -----------------------------------------


@dataclass(frozen=True)
class Part:
    """The shard's part of round ``at``'s checkpoint under ``key`` in ``checkpoints`` (core.engine.round_loop)."""

    checkpoints: Any
    key: str
    at: int


@dataclass(frozen=True)
class SavePart(Part, Request[bool]):
    """Whether the part could be kept."""


@dataclass(frozen=True)
class CheckPart(Part, Request["str | None"]):
    """Why the part cannot be this shard's (None: it can); the shard is untouched."""


@dataclass(frozen=True)
class LoadPart(Part, Request[None]):
    """Take the part."""


@dataclass(frozen=True)
class DiscardPart(Part, Request[None]):
    """Remove the part."""
