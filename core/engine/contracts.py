"""The small contracts every environment and policy honours.

A trial runs one :class:`Policy` against one :class:`Environment` for ``horizon`` rounds:

    for t in 1..T:
        contexts = env.contexts(t)                 # K x d context vectors (or the domain X)
        decision = policy.select(t, contexts)      # the arm, the scores it was chosen by, P_t for Exp3
        feedback = env.step(t, decision)           # reward, regret increment, cumulative regret
        policy.update(t, contexts, decision.arm, feedback.reward)

Exp3-type policies expose their sampling distribution P_t in ``Decision.probabilities``:
the adaptive adversary of the kernel paper (SPEC 2.3) is allowed to read it before it picks f_t.

Every decision also carries ``scores``: the per-arm values the arm was chosen by (the indices it
took the argmax of, or the distribution it drew from). The round loop checks them every round, as
it checks the environment's values: a policy whose numbers diverged (NaN or infinite indices, whose
argmax is arm 0 every round) fails its trial, naming the round and the quantity
(:class:`NonFiniteError`), instead of finishing with a plausible regret.

The in-process kind of the one round loop (``core.engine.trial.TrialRun``; core.engine.round_loop) always steps a
:class:`BatchedPolicy`: B >= 1 trials of one *batch key*, each with its own environment and random
streams, in lockstep. A plain
:class:`Policy` is a batch of one through :class:`PolicyBatch`; an algorithm that computes several
trials as one batched program (the neural methods, exact Kernelized Exp3) overrides
:meth:`Policy.batch_key` and :meth:`Policy.create_batch`. Either way each trial's result equals
running it alone.

Hyperparameters and environment settings are :class:`Config` models (pydantic): typed, immutable,
unknown keys rejected, validated on construction — the policy contract of Open Bandit Pipeline with
exact error locations for the sweep-spec validator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Hashable, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict


class TrialContent(Protocol):
    """What a policy's batching hooks read of a trial: its canonical content. ``core.engine.trial.TrialSpec``
    is one; naming it here would make this module, which the registry and the trial build on, import
    them back."""

    algorithm: str
    params: dict[str, Any]
    environment: dict[str, Any]   # includes "kind"
    seed: int
    horizon: int


class Config(BaseModel):
    """Base of every hyperparameter set and environment setting: typed, frozen, no unknown keys."""

    # allow_inf_nan=False: "1e400", "Infinity" or "nan" written in a spec are refused naming the key
    # (YAML reads them as text, which pydantic would turn into numbers that are not finite).
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


# What an environment offers a policy each round.
CONTEXTUAL = "contextual"          # K context vectors per round, stochastic rewards (SPEC 1)
ADVERSARIAL_DOMAIN = "adversarial_domain"  # a fixed finite domain X, adaptive adversary (SPEC 2)


@dataclass(frozen=True)
class Problem:
    """What a policy may know about its environment before the first round."""

    num_arms: int
    dim: int
    horizon: int
    interaction: str = CONTEXTUAL
    # Disjoint encoding (SPEC 1.2): arm a's context is zero outside columns [a*block, (a+1)*block).
    disjoint_block: int | None = None
    # For kernel bandits: the environment's kernel and its bound B on ||f||_k (SPEC 2.3).
    kernel: object | None = None
    norm_bound: float | None = None


class NonFiniteError(ArithmeticError):
    """A trial's numbers stopped being numbers (NaN or infinite): the trial is recorded as failed,
    naming the round and the quantity, instead of going on with meaningless choices.

    Raised inside a policy (which knows the quantity but not always the round), ``trial`` is the
    index of the offending trial in its lockstep batch; the round loop adds the round and the trial."""

    def __init__(self, message: str, trial: int | None = None):
        super().__init__(message)
        self.trial = trial


def first_non_finite(values) -> tuple[tuple[int, ...], float] | None:
    """None when every entry of ``values`` (a NumPy array or a torch tensor) is finite; else the
    index and value of the first entry that is not. One ``isfinite().all()`` when all is well."""
    if isinstance(values, np.ndarray):
        finite = np.isfinite(values)
        if finite.all():
            return None
    else:   # a torch tensor, on any device: one reduction, one scalar back
        finite = values.isfinite()
        if bool(finite.all()):
            return None
        finite, values = finite.cpu().numpy(), values.detach().cpu().numpy()
    index = tuple(int(i) for i in np.argwhere(~finite)[0])
    return index, float(values[index])


@dataclass
class Decision:
    arm: int
    probabilities: np.ndarray | None = None  # P_t over the arms, for Exp3-type policies
    scores: np.ndarray | None = None         # (K,) what the arm was chosen by (module docstring)


@dataclass
class BatchDecision:
    """The decisions of the B trials of a batch in one round."""

    arms: np.ndarray                          # (B,) one arm per trial
    probabilities: np.ndarray | None = None   # (B, n) each trial's P_t, for Exp3-type policies
    # (B, K) the per-arm values each trial's arm was chosen by (a NumPy array or a torch tensor,
    # left where it was computed) and what they are, for the round loop's finiteness check.
    scores: Any = None
    quantity: str = "score"

    def __post_init__(self):
        self.arms = np.asarray(self.arms, dtype=np.int64)

    def of(self, trial: int) -> Decision:
        return Decision(arm=int(self.arms[trial]),
                        probabilities=None if self.probabilities is None else self.probabilities[trial])


@dataclass
class Feedback:
    reward: float
    regret: float  # increment of the cumulative regret this round
    cumulative_regret: float
    # Per-round values beyond reward and regret; each name must be declared in the environment's
    # ``round_extras`` (they are persisted as curve columns).
    extras: dict[str, float] = field(default_factory=dict)


class Environment(ABC):
    """A bandit environment; every random draw comes from ``rng`` (derived from the trial seed).

    Declared beside the class: ``Config`` (its settings), ``interaction`` (what a policy sees each
    round), ``round_extras`` (name -> meaning of every per-round value ``step`` reports in
    ``Feedback.extras``; each is stored as a column of the curves table), and how trials name it:
    ``label_field`` (the setting shown right after the kind, e.g. the dataset) and ``label_always``
    (settings always shown as key=value). Other settings appear in a name when they differ from
    their default.
    """

    STATE = ("config", "horizon", "rng")

    Config: ClassVar[type[Config]]
    interaction: ClassVar[str] = CONTEXTUAL
    round_extras: ClassVar[dict[str, str]] = {}
    label_field: ClassVar[str | None] = None
    label_always: ClassVar[tuple[str, ...]] = ()
    #: The settings :meth:`title` names; a figure shows the others beside it when not at their default.
    title_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def title(cls, config: Config) -> str | None:
        """The environment as a figure or a paper names it ("Mushroom", "kernel setting 1, Matérn-5/2");
        None: by its trials' name (kind and settings)."""
        return None

    def __init__(self, config: Config, horizon: int, rng: np.random.Generator):
        self.config = config
        self.horizon = horizon
        self.rng = rng

    @property
    @abstractmethod
    def problem(self) -> Problem: ...

    @abstractmethod
    def contexts(self, t: int) -> np.ndarray:
        """The (K, d) contexts of round t (1-based)."""

    @abstractmethod
    def step(self, t: int, decision: Decision) -> Feedback:
        """Play ``decision`` in round t; return the reward and the regret bookkeeping."""

    def diagnostics(self) -> dict[str, float]:
        """Derived values worth recording with the trial (e.g. the realised norm bound); finite
        numbers, booleans or None (any other value is left out of the trial's record)."""
        return {}

    @classmethod
    def footprint(cls, config: Config, horizon: int) -> tuple[int, int, int]:
        """(arms, dim, bytes), estimated before the environment is built: the problem's size as a
        policy will see it, and the bytes of the environment's own arrays (core.engine.memory). 0 where
        unknown or negligible."""
        return 0, 0, 0


class BatchedPolicy(ABC):
    """The policy of B trials stepped in lockstep (B >= 1). Trial i sees only ``contexts[i]`` and its
    own random stream, so its result equals running it alone."""

    @abstractmethod
    def select_batch(self, t: int, contexts: np.ndarray) -> BatchDecision:
        """Contexts (B, K, d) of round t -> one arm per trial (and P_t for Exp3-type policies)."""

    @abstractmethod
    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        """Feedback of round t: arms (B,) and rewards (B,)."""

    @abstractmethod
    def diagnostics_batch(self) -> list[dict[str, float]]:
        """Per-trial diagnostics (times shared by the batch are divided by its size)."""


class Policy(ABC):
    """A bandit algorithm. ``Params`` is its typed hyperparameter model.

    Lockstep batching is opt-in through the class methods below; the defaults run every trial alone.
    ``label`` (its display name) and ``score_name`` say what ``Decision.scores`` are in messages.
    """

    STATE = ("params", "problem", "rng", "device")

    Params: ClassVar[type[Config]]
    supports: ClassVar[frozenset[str]] = frozenset({CONTEXTUAL})
    label: ClassVar[str | None] = None       # None: the class name
    score_name: ClassVar[str] = "score"

    @classmethod
    def quantity(cls) -> str:
        """What the decision's scores are, e.g. "NeuralUCB index"."""
        return f"{cls.label or cls.__name__} {cls.score_name}"

    def __init__(self, params: Config, problem: Problem, rng: np.random.Generator, device: str = "cpu"):
        self.params = params
        self.problem = problem
        self.rng = rng
        self.device = device

    @abstractmethod
    def select(self, t: int, contexts: np.ndarray) -> Decision: ...

    @abstractmethod
    def update(self, t: int, contexts: np.ndarray, arm: int, reward: float) -> None: ...

    def diagnostics(self) -> dict[str, float]:
        """Derived values recorded per trial (step sizes, design sizes, time spent inverting Z...).
        Values are finite numbers, booleans or None; one of another kind (text, a list) is left out of
        the trial's record."""
        return {}

    @classmethod
    def footprint(cls, params: Config, arms: int, dim: int, horizon: int) -> int:
        """Bytes of one trial's policy state on a problem of ``arms`` x ``dim`` over ``horizon`` rounds,
        estimated before anything runs (core.engine.memory). 0: negligible."""
        return 0

    # ---- lockstep trial batching --------------------------------------------------------------

    @classmethod
    def batch_key(cls, spec: TrialContent) -> Hashable | None:
        """Trials with equal non-None keys may run in one batch; None: the trial runs alone."""
        return None

    @classmethod
    def preferred_batch_size(cls, spec: TrialContent, on_gpu: bool) -> int | None:
        """How many trials like ``spec`` to batch on this kind of device; None: the framework's default."""
        return None

    @classmethod
    def largest_batch(cls, specs: Sequence[TrialContent], device: str) -> int:
        """The most of ``specs`` that fit in one batch on ``device`` (memory); the runner splits."""
        return len(specs)

    @classmethod
    def create_batch(cls, params: list[Config], problem: Problem, rngs: list[np.random.Generator],
                     environments: Sequence[Environment], device: str = "cpu") -> BatchedPolicy:
        """The batched policy of several trials of one batch key (one per entry of ``params``)."""
        return PolicyBatch([cls(p, problem, rng, device) for p, rng in zip(params, rngs)])


class PolicyBatch(BatchedPolicy):
    """Plain policies as a batch: each trial's policy selects and updates on its own."""

    STATE = ("policies",)

    def __init__(self, policies: list[Policy]):
        self.policies = policies

    def select_batch(self, t: int, contexts: np.ndarray) -> BatchDecision:
        decisions = [policy.select(t, contexts[i]) for i, policy in enumerate(self.policies)]
        arms = np.array([decision.arm for decision in decisions], dtype=np.int64)
        probabilities = scores = None
        if all(decision.probabilities is not None for decision in decisions):
            probabilities = np.stack([decision.probabilities for decision in decisions])
        if all(decision.scores is not None for decision in decisions):
            # A policy that draws from P_t gives P_t as its scores: stacked once, checked once.
            same = probabilities is not None and all(d.scores is d.probabilities for d in decisions)
            scores = probabilities if same else np.stack([decision.scores for decision in decisions])
        return BatchDecision(arms, probabilities, scores, type(self.policies[0]).quantity())

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        for i, policy in enumerate(self.policies):
            policy.update(t, contexts[i], int(arms[i]), float(rewards[i]))

    def diagnostics_batch(self) -> list[dict[str, float]]:
        return [policy.diagnostics() for policy in self.policies]
