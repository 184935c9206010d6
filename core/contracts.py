"""The small contracts every environment and policy honours.

A trial runs one :class:`Policy` against one :class:`Environment` for ``horizon`` rounds:

    for t in 1..T:
        contexts = env.contexts(t)                 # K x d context vectors (or the domain X)
        decision = policy.select(t, contexts)      # the arm, and P_t for Exp3-type policies
        feedback = env.step(t, decision)           # reward, regret increment, cumulative regret
        policy.update(t, contexts, decision.arm, feedback.reward)

Exp3-type policies expose their sampling distribution P_t in ``Decision.probabilities``:
the adaptive adversary of the kernel paper (SPEC 2.3) is allowed to read it before it picks f_t.

Hyperparameters and environment settings are :class:`Config` models (pydantic): typed, immutable,
unknown keys rejected, validated on construction — the policy contract of Open Bandit Pipeline with
exact error locations for the sweep-spec validator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict


class Config(BaseModel):
    """Base of every hyperparameter set and environment setting: typed, frozen, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


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


@dataclass
class Decision:
    arm: int
    probabilities: np.ndarray | None = None  # P_t over the arms, for Exp3-type policies


@dataclass
class Feedback:
    reward: float
    regret: float  # increment of the cumulative regret this round
    cumulative_regret: float
    extras: dict[str, float] = field(default_factory=dict)


class Environment(ABC):
    """A bandit environment; every random draw comes from ``rng`` (derived from the trial seed)."""

    Config: ClassVar[type[Config]]
    interaction: ClassVar[str] = CONTEXTUAL

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
        """Derived values worth recording with the trial (e.g. the realised norm bound)."""
        return {}


class Policy(ABC):
    """A bandit algorithm. ``Params`` is its typed hyperparameter model."""

    Params: ClassVar[type[Config]]
    supports: ClassVar[frozenset[str]] = frozenset({CONTEXTUAL})

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
        """Derived values recorded per trial (step sizes, design sizes, time spent inverting Z...)."""
        return {}
