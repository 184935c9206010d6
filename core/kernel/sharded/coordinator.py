"""The coordinator of one sharded adversarial-kernel trial (SPEC 4): the kind of the one round loop
(core.engine.round_loop.RoundLoop) whose state is held by shards in other processes.

:class:`ShardedKernelTrial` differs from the in-process ``core.engine.trial.TrialRun`` only where the round
loop lets a kind differ: a round is played by a few small requests to the shards through the
trial's algorithm half (core.kernel.sharded.algorithm.sharded_half; the shards learn and move the
environment on while they reply, so the loop has nothing left to learn after its checks), and the
state is saved as each shard's part, written where the shard runs, and then the coordinator's own,
which names the round of the parts. The loop itself, the recording and its finiteness checks, the
results and the checkpoint driver are the round loop's.

The coordinator's checkpoint is its declared :attr:`ShardedKernelTrial.STATE` and its algorithm
half's ``STATE``; the domain, the kernel, the parameters and the candidates' maxima are rebuilt from
the spec and the shards when it resumes. A checkpoint of the landed release, which kept the
coordinator's attributes whole, is read into the same fields.

:func:`run_sharded` plays a trial out over a :class:`~banditsweep.core.kernel.sharded.protocol.ShardGroup`:
``LocalShards`` in one process, ``workers.execution.sharded_trials.RayShards`` over Ray actors.
"""

from __future__ import annotations

import numpy as np

from banditsweep.core.kernel import domains
from banditsweep.core.engine import seeding
from banditsweep.core.engine.contracts import Feedback
from banditsweep.core.kernel.adversarial_kernel import AdversarialKernelBandit, RegretTally
from banditsweep.core.kernel.kernels import Kernel
from banditsweep.core.engine.round_loop import Checkpoints, Played, ProgressCallback, RoundLoop, TrialResult, play_out
from banditsweep.core.kernel.sharded.algorithm import ShardedAlgorithm, sharded_half
from banditsweep.core.kernel.sharded.protocol import (CheckPart, Describe, DiscardPart, LoadPart, SavePart,
                                                      ShardGroup, Value)
from banditsweep.core.kernel.sharded.shard import check_shardable
from banditsweep.core.engine.state_codec import StateFormatError, encode_state
from banditsweep.core.engine.ties import RULE
from banditsweep.core.engine.trial import TrialSpec, checkpoint_key, resolve_algorithm, resolve_environment

# The attributes a checkpoint of the landed release could hold (it kept the coordinator's whole, the
# shard group among them, None in a saved state); today's fields are read out of them.
LANDED_ATTRIBUTES = frozenset({
    "specs", "horizon", "recorder", "next_round", "resumed_from", "checkpoint_rejected", "n", "dim", "kernel",
    "norm_bound", "params", "rng", "sampler_key", "tally", "choices", "landmark_counts", "effective_dimensions",
    "values", "saved_round", "group", "table_max", "dots", "schedule", "eta", "alpha", "log_totals"})


class ShardedKernelTrial(RoundLoop):
    """The coordinator of one sharded trial: the one round loop (core.engine.round_loop.RoundLoop) of a
    trial whose state is held by a group of shards (core.kernel.sharded.shard.KernelShard). A round is
    played by its algorithm half (:meth:`play`); the state is saved as the coordinator's own under
    the trial's key and each shard's part beside it (:meth:`save`), and taken back by :meth:`resume`."""

    # The coordinator's checkpoint (with its algorithm half's STATE under "algorithm"): the round
    # loop's progress and records, the policy stream, the regret tally and the adversary's choices,
    # and the round whose shard parts the state names.
    STATE = ("specs", "horizon", "recorder", "next_round", "checkpoint_rejected", "rng", "tally", "choices",
             "saved_round")
    # Rebuilt by build() from the spec and the shards (the domain's size, the kernel, the parameters,
    # the candidates' maxima, the algorithm half), and the group this process talks to.
    TRANSIENT = ("n", "dim", "kernel", "norm_bound", "params", "table_max", "scaled_fraction", "algorithm", "group")

    algorithm: ShardedAlgorithm
    saved_round: int | None

    def __init__(self, spec: TrialSpec, group: ShardGroup):
        self.build(spec, group)
        self.algorithm.prepare(self)

    def build(self, spec: TrialSpec, group: ShardGroup) -> None:
        """What follows from the spec and the shards: all but the STATE, which starts at round 1."""
        check_shardable(spec)
        self.begin([spec])
        config = resolve_environment(spec.environment)
        self.n, self.dim = domains.size(config.setting, config.domain, spec.horizon)
        self.kernel = Kernel.create(config.kernel, self.dim, config.lengthscale, config.nu)
        self.norm_bound = config.norm_bound
        self.params = resolve_algorithm(spec.algorithm, spec.params)
        self.rng = seeding.stream(spec.seed, seeding.POLICY_STREAM)
        self.tally = RegretTally()
        self.choices = np.zeros(config.candidates, dtype=np.int64)
        self.saved_round = None
        self.attach(group)
        described = group.map(Describe())
        self.table_max = np.max(np.stack([part.maxima for part in described]), axis=0)
        self.scaled_fraction = described[0].scaled_fraction
        self.algorithm = sharded_half(spec.policy_class)(self)

    @property
    def spec(self) -> TrialSpec:
        return self.specs[0]

    def attach(self, group: ShardGroup) -> None:
        expected_n = group.ranges[-1][1] if group.ranges else 0
        if expected_n != self.n or group.ranges[0][0] != 0:
            raise ValueError(f"the shards cover 0..{expected_n}, the domain has {self.n} points")
        self.group = group

    # ---- checkpoints: the coordinator's state, each shard's part beside it -----------------------

    def snapshot(self) -> bytes:
        """The coordinator's own state between two rounds (the shards keep theirs: KernelShard.state)."""
        return encode_state({**{name: getattr(self, name) for name in self.STATE},
                             "algorithm": self.algorithm.state()})

    def save(self, checkpoints: Checkpoints, key: str) -> bool:
        """Each shard saves its part of this round where it runs, then the coordinator its state: a
        round counts once the coordinator's state names it, and only then are the parts of the
        round saved before removed."""
        at = self.next_round - 1
        if not all(self.group.map(SavePart(checkpoints, key, at))):
            return False
        previous, self.saved_round = self.saved_round, at
        if not checkpoints.save(key, self.snapshot()):
            self.saved_round = previous
            return False
        if previous is not None and previous != at:
            self.group.map(DiscardPart(checkpoints, key, previous))
        return True

    @classmethod
    def check_state(cls, state: bytes, spec: TrialSpec) -> dict:
        """The coordinator's stored fields if they are ``spec``'s, with its algorithm half's under
        ``"algorithm"``; :class:`StateFormatError` otherwise."""
        # Not a stored object of this class but the layout snapshot() writes (the declared STATE and
        # the half's under "algorithm"), or the landed release's: checked here, name by name.
        values = cls.saved_attributes(state, [spec], declared=False)
        half = sharded_half(spec.policy_class)
        if "group" in values and set(values) <= LANDED_ATTRIBUTES:   # the landed release's layout
            try:
                values = {**{name: values[name] for name in cls.STATE}, "algorithm": half.from_landed(values)}
            except (KeyError, TypeError, ValueError) as error:
                raise StateFormatError(f"not the state of a sharded trial ({type(error).__name__}: {error})") from None
        elif set(values) != {*cls.STATE, "algorithm"}:
            raise StateFormatError("not the state of a sharded trial")
        if not isinstance(values["algorithm"], dict) or set(values["algorithm"]) != set(half.saved()):
            raise StateFormatError(f"not the state of a sharded {spec.algorithm}")
        if "tie_rule" in half.saved() and values["algorithm"].get("tie_rule") != RULE:
            raise StateFormatError("the state was saved before its design's ties were decided by core.ties' rule "
                                   "(its design would not be this code's): the trial starts again")
        if values["saved_round"] != values["next_round"] - 1:
            raise StateFormatError("the state names no shard parts of its round")
        return values

    @classmethod
    def resume(cls, state: bytes, group: ShardGroup, spec: TrialSpec, checkpoints: Checkpoints,
               key: str) -> "ShardedKernelTrial":
        """The trial saved under ``key`` (``state``: the coordinator's), on ``group``'s shards. Every
        shard checks its part before any takes it, so that a damaged, planted or foreign file is
        refused (:class:`StateFormatError`) and the trial starts from round 1 on untouched shards."""
        values = cls.check_state(state, spec)
        problems = [problem for problem in group.map(CheckPart(checkpoints, key, values["saved_round"])) if problem]
        if problems:
            raise StateFormatError("; ".join(problems))
        group.map(LoadPart(checkpoints, key, values["saved_round"]))
        trial = cls.__new__(cls)
        trial.build(spec, group)
        for name in cls.STATE:
            setattr(trial, name, values[name])
        trial.algorithm.restore(values["algorithm"])
        trial.resumed_from = trial.next_round
        return trial

    # ---- rounds ----------------------------------------------------------------------------------

    def play(self, t: int) -> Played:
        played = self.algorithm.play(self, t)
        # The shards have learnt and moved the environment on already: nothing is left to learn.
        return Played(np.array([played.arm]),
                      [self.feedback(played.candidate, played.reward, float(played.sums[played.candidate]),
                                     played.best)])

    def feedback(self, chosen: int, reward: float, expected: float, best: float) -> Feedback:
        """Both regret forms of SPEC 2.1, as AdversarialKernelBandit.step computes them."""
        self.choices[chosen] += 1
        increment, regret, expected_regret = self.tally.add(reward, expected, best)
        return Feedback(reward, increment, regret, {"expected_regret": expected_regret, "adversary_choice": float(chosen)})

    def reporter(self, trial: int) -> type[AdversarialKernelBandit]:
        return AdversarialKernelBandit

    def adversary(self, sums: np.ndarray) -> int:
        """argmax_i (max_x f^(i)(x) - sum_x P_t(x) f^(i)(x)), ties to the smallest i (SPEC 2.3)."""
        return int(np.argmax(self.table_max - sums))

    def reward_at(self, shard: int, candidate: int, arm: int) -> float:
        """y_t = f^(candidate)(X[arm]), from the shard that holds ``arm``."""
        return self.group.ask(shard, Value(candidate, arm))

    def diagnostics(self) -> list[dict[str, float]]:
        return [{"domain_size": float(self.n), "lengthscale": float(self.kernel.lengthscale),
                 "candidates_scaled_fraction": self.scaled_fraction,
                 "distinct_adversary_choices": float(np.count_nonzero(self.choices)),
                 "shards": float(len(self.group.ranges)), **self.algorithm.diagnostics()}]


def run_sharded(spec: TrialSpec, group: ShardGroup, on_progress: ProgressCallback | None = None,
                progress_every: int = 100, checkpoints: Checkpoints | None = None) -> TrialResult:
    """Run a sharded trial to the end over ``group``, through the one checkpoint driver
    (core.engine.round_loop.play_out): with ``checkpoints`` it resumes from the state saved under the
    trial's key, saves every ``checkpoints.every`` rounds and discards the state when finished."""
    key = checkpoint_key([spec])
    (result,) = play_out(lambda: ShardedKernelTrial(spec, group),
                         lambda state: ShardedKernelTrial.resume(state, group, spec, checkpoints, key),
                         key, checkpoints, on_progress, progress_every)
    return result
