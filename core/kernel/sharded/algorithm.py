"""An algorithm's two halves in a sharded trial (SPEC 4), and the Exp3 round both Exp3 halves share.

An algorithm is sharded by its :class:`ShardedAlgorithm`, the coordinator's half (what the
algorithm keeps that is not indexed by X: step sizes, the log-partition partials, diagnostics), which
names the algorithm's class it shards (``class ShardedAPGExp3(ShardedExp3, shards=APGExp3)``) and its
``Slice``, the :class:`AlgorithmSlice` on the shards (what it computes on X[start:stop] beyond the
shard's own requests). :func:`sharded_half` finds it from the trial's algorithm class, that class
exactly: a subclass, which may compute otherwise, is not sharded by its base's half.
``core.kernel.algorithms.random_policy``, ``apg_exp3`` and ``rls_kernel_exp3`` define theirs beside the
unsharded algorithm. A trial's code identity (workers.provenance.code_identity) counts the half as
code of its sharded trials only.

The coordinator's half saves exactly its declared ``STATE`` in the trial's checkpoint; everything
else it holds is rebuilt from the spec when the trial resumes.

:class:`ShardedExp3` is the round of core.kernel.exp3 on shards, in round t:

    P_t(x) = (1 - alpha) exp(L_t(x) - log Z_t) + alpha pi(x),   Z_t = sum_x exp(L_t(x)),

with L_t the log-weights (shifted by their global maximum) and log Z_t from the shards' partials
(:class:`~banditsweep.core.kernel.sharded.protocol.Partition`); the adversary from the shards' sums
F[:, slice] P_t[slice]; x_t by inversion (core.kernel.exp3.draw over the slices' masses, then
core.kernel.exp3.invert inside the slice drawn); and the algorithm's estimate u_t added by the shards
(:meth:`ShardedExp3.update`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from banditsweep.core.kernel.exp3 import draw
from banditsweep.core.engine.round_loop import check_values
from banditsweep.core.kernel.sharded.partition import global_argmax, global_choice, owner
from banditsweep.core.engine.ties import RULE
from banditsweep.core.kernel.sharded.protocol import (Answering, Distributed, Distribution, Locate, Located,
                                                      LogPartition, Partition, PivotAdd, PivotCandidate, PivotRow,
                                                      ShardGroup, Updated)
from banditsweep.core.engine.state_declaration import declaration

if TYPE_CHECKING:
    from banditsweep.core.kernel.sharded.coordinator import ShardedKernelTrial
    from banditsweep.core.kernel.sharded.shard import KernelShard


@dataclass(frozen=True)
class Round:
    """One round as an algorithm played it on the shards: x_t = X[arm], f_t = f^(candidate), the
    adversary's sums (m,) = sum_x P_t(x) f^(i)(x), y_t = f_t(x_t) and max_x S_t(x) after the round."""

    arm: int
    candidate: int
    sums: np.ndarray
    reward: float
    best: float


class AlgorithmSlice(Answering):
    """An algorithm's part of one shard: the requests it answers on the shard's slice. What it holds
    lasts a round or the preparation only (the shard's ``STATE`` is what lasts between rounds)."""

    def __init__(self, shard: KernelShard):
        self.shard = shard


class ShardedAlgorithm(ABC):
    """An algorithm's half on the coordinator's side (module docstring)."""

    Slice: ClassVar[type[AlgorithmSlice]] = AlgorithmSlice
    STATE: ClassVar[tuple[str, ...]] = ()
    shards: ClassVar[type]   # the algorithm class it shards

    def __init_subclass__(cls, shards: type | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if shards is not None:
            cls.shards = shards
            _HALVES[shards] = cls

    def __init__(self, trial: ShardedKernelTrial):
        """What follows from the spec alone (a resumed trial rebuilds it)."""

    @classmethod
    def check(cls, params) -> None:
        """Raise ValueError where the algorithm's parameters ``params`` cannot be sharded."""

    @abstractmethod
    def prepare(self, trial: ShardedKernelTrial) -> None:
        """Once, before round 1: the exploration design and the step sizes, on the shards."""

    @abstractmethod
    def play(self, trial: ShardedKernelTrial, t: int) -> Round:
        """Round t: choose, let the adversary choose, observe; the shards learn and move S_t on."""

    def diagnostics(self) -> dict[str, float]:
        return {}

    @classmethod
    def saved(cls) -> list[str]:
        """The attributes the checkpoint holds: ``STATE`` of the class and its bases
        (core.engine.state_declaration), in a fixed order."""
        return sorted(declaration(cls).saved)

    def state(self) -> dict:
        return {name: getattr(self, name) for name in self.saved()}

    def restore(self, values: dict) -> None:
        for name in self.saved():
            setattr(self, name, values[name])

    @classmethod
    def from_landed(cls, attributes: dict) -> dict:
        """The saved values in a checkpoint of the landed release, which kept the coordinator's
        attributes whole (KeyError: not there)."""
        return {name: attributes[name] for name in cls.saved()}


# Each algorithm class that can be sharded, and its half.
_HALVES: dict[type, type[ShardedAlgorithm]] = {}


def sharded_half(policy_class: type) -> type[ShardedAlgorithm] | None:
    """The half that shards ``policy_class`` (the class itself, not a base), None if none does."""
    return _HALVES.get(policy_class)


def pivoted_cholesky(group: ShardGroup, length: int, noise: float | None,
                     tolerance: float | None, key: int) -> tuple[list[int], float]:
    """Pivoted Cholesky on the shards: MVR (SPEC 3.2: ``noise`` = lambda, ``length`` pivots) or
    P-greedy (SPEC 3.5: no noise, stop when max_x sqrt(power(x)) <= ``tolerance``), with
    v_{j+1}(.) = [k(., x_pick) - sum_i v_i(.) v_i(x_pick)] / sqrt(power(x_pick) + noise) and
    power -= v_{j+1}^2. The pivots and the final largest power. Each pivot among the points of
    largest power by core.engine.ties' rule at the scale of the first (max_x k(x, x)), priorities keyed by
    ``key``: the same choice as core.kernel.mvr's and core.kernel.algorithms.apg_exp3's
    on the whole of X."""
    maxima = group.map(PivotCandidate())
    scale = global_argmax(maxima).value
    sequence: list[int] = []
    while True:
        largest = global_argmax(maxima)
        if len(sequence) >= length or tolerance is not None and math.sqrt(max(largest.value, 0.0)) <= tolerance:
            return sequence, largest.value
        chosen = global_choice(group, maxima, "power", key, scale)
        sequence.append(chosen.index)
        row = group.ask(owner(group.ranges, chosen.index), PivotRow(chosen.index))
        denominator = math.sqrt(chosen.value + noise) if noise is not None else math.sqrt(chosen.value)
        maxima = group.map(PivotAdd(row.point, row.factors, denominator))


class ShardedExp3(ShardedAlgorithm):
    """The Exp3 round on shards (module docstring); a subclass sets the exploration design and the
    step sizes (:meth:`explore`) and adds its estimate (:meth:`update`)."""

    STATE = ("eta", "alpha", "log_totals", "tie_rule")
    # The round asks the shards for Q_t's parts and N(x_t) (APG-Exp3's linear estimate).
    linear: ClassVar[bool] = False
    # Which rule decided the design's ties (core.engine.ties.RULE), saved: a state saved under another (the
    # smallest index before it) lacks it or differs, and is refused rather than resumed under this one.
    tie_rule: int

    eta: float
    alpha: float
    log_totals: list[Partition]   # the shards' partials of the log-partition, for the next round

    @abstractmethod
    def explore(self, trial: ShardedKernelTrial) -> None:
        """pi on the shards, eta and alpha."""

    @abstractmethod
    def update(self, trial: ShardedKernelTrial, t: int, parts: list[Distributed], located: Located,
               candidate: int, reward: float) -> list[Updated]:
        """u_t added to the shards' log-weights, f_t played there; each shard's reply."""

    def prepare(self, trial: ShardedKernelTrial) -> None:
        self.tie_rule = RULE
        self.explore(trial)
        self.log_totals = trial.group.map(LogPartition())

    def play(self, trial: ShardedKernelTrial, t: int) -> Round:
        shift = max(part.top for part in self.log_totals)
        total = sum(part.total * math.exp(part.top - shift) for part in self.log_totals)
        parts = trial.group.map(Distribution(shift, math.log(total), self.alpha, self.linear))
        masses = np.array([part.mass for part in parts])
        # The round loop's check of P_t (core.engine.round_loop.check_decision), on what reaches the coordinator:
        # a NaN or infinite P_t anywhere makes its shard's mass so.
        check_values(t, masses[None], f"{trial.spec.policy_class.quantity()} mass", entry="shard")
        sums = np.sum(np.stack([part.sums for part in parts]), axis=0)
        candidate = trial.adversary(sums)
        drawn = draw(masses, trial.rng)   # one uniform number of the policy stream, as core.kernel.exp3.sample
        located = trial.group.ask(drawn.index, Locate(drawn.rest, self.linear))
        reward = trial.reward_at(drawn.index, candidate, located.index)
        updated = self.update(trial, t, parts, located, candidate, reward)
        self.log_totals = [reply.partition for reply in updated]
        return Round(located.index, candidate, sums, reward, max(reply.moved.best for reply in updated))

    @classmethod
    def from_landed(cls, attributes: dict) -> dict:
        # The landed release decided ties by the smallest index and saved no rule: refused by
        # core.kernel.sharded.coordinator's check, saying so.
        values = super().from_landed({**attributes, "tie_rule": attributes.get("tie_rule")})
        # The landed release kept the partials as (top, total) pairs.
        values["log_totals"] = [Partition(float(top), float(total)) for top, total in values["log_totals"]]
        return values
