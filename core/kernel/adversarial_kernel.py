"""The adaptive adversarial kernel bandit of the kernel paper's experiments (App. 17; SPEC 2.1, 2.3).

A finite domain X (SPEC 2.2) and a candidate table of ``candidates`` functions in the RKHS ball of
radius B, drawn once from the trial seed:

    f~^(i)(.) = sum_{m=1}^{centers} c^(m,i) k(x^(m,i), .),   x^(m,i) ~ Uniform(X),  c^(m,i) ~ Uniform(-1, 1),
    ||f~^(i)||_k^2 = c^T K c,   f^(i) = min{1, B / ||f~^(i)||_k} f~^(i).

Each round the adversary is fully adaptive: it reads the learner's sampling distribution P_t (the
policy contract exposes it as ``Decision.probabilities``; see ``core.engine.contracts``) and plays the
candidate that maximises the learner's conditional expected regret,

    f_t = argmax_i ( max_x f^(i)(x) - sum_x P_t(x) f^(i)(x) )        (ties: smallest i).

Regret, both forms of SPEC 2.1, with S_t(x) = sum_{s<=t} f_s(x):

    realised  R_t = max_x S_t(x) - sum_{s<=t} f_s(x_s)       (Feedback.cumulative_regret; its increment
                                                               can be negative)
    expected  R^E_t = max_x S_t(x) - sum_{s<=t} sum_x P_s(x) f_s(x)   (extras["expected_regret"])

The table F (candidates x n) is built in column tiles: F[:, tile] = C k(U, X[tile]), with U the
distinct centre points and C the sparse coefficient matrix, so K is never formed.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Callable, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator
from scipy import sparse

from banditsweep.core.kernel import domains
from banditsweep.core.engine.contracts import ADVERSARIAL_DOMAIN, Config, Decision, Environment, Feedback, Problem
from banditsweep.core.kernel.kernels import DEFAULT_TILE_ELEMENTS, Kernel


class KernelDomainConfig(Config):
    """What every kernel-bandit environment is set on: a domain X (the paper's setting, or one given)
    and a kernel with its RKHS-norm bound B."""

    setting: Literal[1, 2, 3, 4] | None = Field(None, description="the paper's domain 1-4 (SPEC 2.2)")
    domain: domains.GridDomain | domains.UniformDomain | domains.ContinuousDomain | None = Field(
        None, description="{grid: [n1, ...]}, {uniform: n, dim: d} or {continuous: d} (the (1/sqrt T)-net "
                          "of [0, 1]^d, core.domains), instead of a setting")
    kernel: Literal["se", "matern52", "matern32", "matern", "linear"] = Field(
        "se", description="k: squared exponential, Matern nu = 5/2, 3/2 or the given nu, or linear")
    nu: float | None = Field(None, gt=0, description="Matern smoothness, only for kernel 'matern'")
    lengthscale: float | None = Field(None, gt=0, description="kernel lengthscale; unset: 0.3 sqrt(d) (linear kernel: sqrt(d))")
    norm_bound: float = Field(2.0, gt=0, description="B, the RKHS-norm bound")

    @model_validator(mode="after")
    def _check(self):
        if (self.setting is None) == (self.domain is None):
            raise ValueError("give exactly one of 'setting' (1-4) and 'domain' "
                             "({grid: [...]}, {uniform: n, dim: d} or {continuous: d})")
        if self.kernel == "matern" and self.nu is None:
            raise ValueError("kernel 'matern' needs 'nu' (e.g. nu: 0.5)")
        if self.kernel != "matern" and self.nu is not None:
            raise ValueError(f"'nu' is only used with kernel 'matern' (kernel {self.kernel!r} fixes it)")
        return self


KERNEL_TITLES = {"se": "SE", "matern52": "Matérn-5/2", "matern32": "Matérn-3/2", "matern": "Matérn ν = {nu:g}",
                 "linear": "linear"}
SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def domain_title(config: KernelDomainConfig) -> str:
    """The domain in a title: ``setting 1``, ``grid 20×20``, ``400 uniform points in [0, 1]²``,
    ``[0, 1]² (continuous)``."""
    if config.setting is not None:
        return f"setting {config.setting}"
    domain = config.domain
    if isinstance(domain, domains.GridDomain):
        return "grid " + "×".join(str(n) for n in domain.grid)
    if isinstance(domain, domains.UniformDomain):
        return f"{domain.uniform} uniform points in [0, 1]{str(domain.dim).translate(SUPERSCRIPTS)}"
    return f"[0, 1]{str(domain.continuous).translate(SUPERSCRIPTS)} (continuous)"


def domain_and_kernel(config: KernelDomainConfig, rng: np.random.Generator, horizon: int) -> tuple[np.ndarray, Kernel]:
    """The domain X (drawn from ``rng`` when it is random) and the kernel on it."""
    domain = domains.build(config.setting, config.domain, rng, horizon)
    return domain, Kernel.create(config.kernel, domain.shape[1], config.lengthscale, config.nu)


class AdversarialKernelConfig(KernelDomainConfig):
    candidates: int = Field(1000, ge=1, description="number of candidate functions")
    centers: int = Field(100, ge=1, description="kernel centres per candidate")


@dataclass(frozen=True)
class CandidateFunctions:
    """The candidates f^(i)(.) = sum_m w^(m,i) k(x^(m,i), .), w = c min{1, B / ||f~^(i)||_k}."""

    centres: np.ndarray          # (candidates, centers, d): the points x^(m,i)
    coefficients: np.ndarray     # (candidates, centers): the scaled coefficients w^(m,i)
    norms: np.ndarray            # ||f~^(i)||_k before scaling
    center_index: np.ndarray     # (candidates, centers): the indices of the centres in X


def candidate_functions(kernel: Kernel, n: int, point_at: Callable[[np.ndarray], np.ndarray], candidates: int,
                        centers: int, norm_bound: float, rng: np.random.Generator) -> CandidateFunctions:
    """Draw the candidates of SPEC 2.3 from ``rng`` on a domain of n points (``point_at(index)``: X[index])."""
    center_index = rng.integers(0, n, size=(candidates, centers))
    coefficients = rng.uniform(-1.0, 1.0, size=(candidates, centers))
    centres = point_at(center_index.reshape(-1)).reshape(candidates, centers, -1)
    # ||f~||_k^2 = c^T K_mm c, one (centers x centers) block per candidate.
    norms = np.empty(candidates)
    for i in range(candidates):
        norms[i] = np.sqrt(max(coefficients[i] @ kernel(centres[i], centres[i]) @ coefficients[i], 0.0))
    scale = np.minimum(1.0, norm_bound / np.maximum(norms, 1e-300))
    return CandidateFunctions(centres, coefficients * scale[:, None], norms, center_index)


@dataclass(frozen=True)
class GridSlice:
    """Points start..stop-1 (first axis slowest) of the regular grid with these axis values."""

    axes: list[np.ndarray]
    start: int
    stop: int


def table_columns(functions: CandidateFunctions, kernel: Kernel, points: np.ndarray,
                  grid: GridSlice | None = None) -> np.ndarray:
    """F[:, points], the candidates' values at ``points``.

    On a grid with the SE kernel, k is a product over the axes, so each candidate's values on a block
    of grid rows are one matrix product, (w E_1)^T (E_2 x ... x E_d) with E_k[m, j] the axis-k factor
    between centre m and grid value j: O(centers |X|) per candidate through BLAS instead of
    centers |X| kernel evaluations. Otherwise the kernel is evaluated on the distinct centres, tile
    by tile. Either way a column's value does not depend on which slice of X is asked for.
    """
    if grid is not None and kernel.name == "se":
        return _separable_table(functions, kernel, grid)
    candidates = functions.coefficients.shape[0]
    distinct, inverse = np.unique(functions.center_index, return_inverse=True)
    centres = functions.centres.reshape(-1, functions.centres.shape[-1])[
        np.unique(inverse.reshape(-1), return_index=True)[1]]
    rows = np.repeat(np.arange(candidates), functions.coefficients.shape[1])
    weights = sparse.csr_matrix((functions.coefficients.reshape(-1), (rows, inverse.reshape(-1))),
                                shape=(candidates, len(distinct)))
    table = np.empty((candidates, len(points)))
    columns_per_tile = max(1, DEFAULT_TILE_ELEMENTS // len(distinct))
    for start in range(0, len(points), columns_per_tile):
        tile = slice(start, min(len(points), start + columns_per_tile))
        table[:, tile] = weights @ kernel(centres, points[tile])
    return table


def _separable_table(functions: CandidateFunctions, kernel: Kernel, grid: GridSlice) -> np.ndarray:
    axes, start, stop = grid.axes, grid.start, grid.stop
    rest = math.prod(len(axis) for axis in axes[1:])
    first, last = start // rest, (stop - 1) // rest + 1
    offset = start - first * rest
    factor = -0.5 / (kernel.lengthscale * kernel.lengthscale)
    table = np.empty((functions.coefficients.shape[0], stop - start))
    for i, (centres, weights) in enumerate(zip(functions.centres, functions.coefficients)):
        left = np.exp(factor * (axes[0][None, first:last] - centres[:, 0:1]) ** 2) * weights[:, None]
        right = np.ones((len(centres), 1))
        for k in range(1, len(axes)):
            along = np.exp(factor * (axes[k][None, :] - centres[:, k:k + 1]) ** 2)
            right = (right[:, :, None] * along[:, None, :]).reshape(len(centres), -1)
        table[i] = (left.T @ right).reshape(-1)[offset:offset + stop - start]
    return table


def grid_slice(config: KernelDomainConfig, horizon: int, start: int, stop: int) -> GridSlice | None:
    """The grid structure of a setting, grid or continuous domain; None for a seed-drawn one."""
    shape = domains.grid_shape(config.setting, config.domain, horizon)
    if shape is None:
        return None
    return GridSlice(domains.axes(shape), start, stop)


def candidate_table(kernel: Kernel, domain: np.ndarray, candidates: int, centers: int, norm_bound: float,
                    rng: np.random.Generator, grid: GridSlice | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The (candidates, n) table F and each candidate's RKHS norm before scaling (SPEC 2.3)."""
    functions = candidate_functions(kernel, len(domain), lambda index: domain[index], candidates, centers,
                                    norm_bound, rng)
    return table_columns(functions, kernel, domain, grid), functions.norms


def kernel_problem(n: int, dim: int, horizon: int, kernel: Kernel, norm_bound: float) -> Problem:
    """What a kernel-bandit policy knows before the first round: X's size and dimension, T, k and B."""
    return Problem(num_arms=n, dim=dim, horizon=horizon, interaction=ADVERSARIAL_DOMAIN, kernel=kernel,
                   norm_bound=norm_bound)


class KernelDomainEnvironment(Environment):
    """An environment on a finite domain X with a kernel (``self.domain``, ``self.kernel``): the arms
    are the points of X, the same every round."""

    STATE = ("domain", "kernel")

    interaction = ADVERSARIAL_DOMAIN
    title_fields = ("setting", "domain", "kernel", "nu")
    title_prefix: ClassVar[str] = "kernel"

    @classmethod
    def title(cls, config: KernelDomainConfig) -> str:
        """``kernel setting 1, Matérn-5/2``, ``kernel grid 20×20, SE``."""
        return f"{cls.title_prefix} {domain_title(config)}, {KERNEL_TITLES[config.kernel].format(nu=config.nu)}"

    @classmethod
    def footprint(cls, config: KernelDomainConfig, horizon: int) -> tuple[int, int, int]:
        # X (n, d) and a few per-point vectors (the cumulative function, the round's values).
        n, d = domains.size(config.setting, config.domain, horizon)
        return n, d, 8 * (n * d + 4 * n)

    @property
    def problem(self) -> Problem:
        n, d = self.domain.shape
        return kernel_problem(n, d, self.horizon, self.kernel, self.config.norm_bound)

    def contexts(self, t: int) -> np.ndarray:
        return self.domain


class RegretTally:
    """Both regret forms of SPEC 2.1, round by round, from f_t(x_t), sum_x P_t(x) f_t(x) and
    max_x S_t(x) (S_t = sum_{s<=t} f_s):

        realised  R_t   = max_x S_t(x) - sum_{s<=t} f_s(x_s)
        expected  R^E_t = max_x S_t(x) - sum_{s<=t} sum_x P_s(x) f_s(x)
    """

    STATE = ("reward", "expected_reward", "regret")

    def __init__(self):
        self.reward = 0.0            # sum_s f_s(x_s)
        self.expected_reward = 0.0   # sum_s sum_x P_s(x) f_s(x)
        self.regret = 0.0            # R_t

    def add(self, reward: float, expected_reward: float, best: float) -> tuple[float, float, float]:
        """Round t's numbers in; (R_t - R_{t-1}, R_t, R^E_t) out (the increment can be negative)."""
        self.reward += reward
        self.expected_reward += expected_reward
        regret = best - self.reward
        increment = regret - self.regret
        self.regret = regret
        return increment, regret, best - self.expected_reward


class AdversarialKernelBandit(KernelDomainEnvironment):
    """Adaptive adversary of the kernel paper (App. 17): each round the candidate RKHS function that
    hurts the learner most."""

    STATE = ("table", "raw_norms", "table_max", "cumulative_function", "tally", "choices")

    Config = AdversarialKernelConfig
    label_always = ("setting", "kernel")  # display name e.g. "adversarial_kernel:setting=1,kernel=se"
    round_extras = {
        "expected_regret": "R^E_t, the expected form of the regret (SPEC 2.1)",
        "adversary_choice": "index i of the candidate function f_t = f^(i) the adversary played",
    }

    @classmethod
    def footprint(cls, config: AdversarialKernelConfig, horizon: int) -> tuple[int, int, int]:
        # Besides X: the candidate table F (candidates, n) and the candidates' centres.
        n, d, own = super().footprint(config, horizon)
        return n, d, own + 8 * config.candidates * (n + config.centers * (d + 2))

    def __init__(self, config: AdversarialKernelConfig, horizon: int, rng: np.random.Generator):
        super().__init__(config, horizon, rng)
        self.domain, self.kernel = domain_and_kernel(config, rng, horizon)
        n = len(self.domain)
        self.table, self.raw_norms = candidate_table(self.kernel, self.domain, config.candidates,
                                                     config.centers, config.norm_bound, rng,
                                                     grid_slice(config, horizon, 0, n))
        self.table_max = self.table.max(axis=1)
        self.cumulative_function = np.zeros(n)   # S_t(x)
        self.tally = RegretTally()
        self.choices = np.zeros(config.candidates, dtype=np.int64)

    def adversary(self, probabilities: np.ndarray) -> int:
        """argmax_i (max_x f^(i)(x) - sum_x P_t(x) f^(i)(x)); np.argmax breaks ties to the smallest i."""
        return int(np.argmax(self.table_max - self.table @ probabilities))

    def step(self, t: int, decision: Decision) -> Feedback:
        probabilities = decision.probabilities
        if probabilities is None:
            raise ValueError("the adversarial_kernel environment reads the learner's distribution P_t: "
                             "the policy must return Decision(arm, probabilities=P_t)")
        probabilities = np.asarray(probabilities, dtype=np.float64)
        if probabilities.shape != (len(self.domain),):
            raise ValueError(f"P_t must have one entry per domain point ({len(self.domain)}), "
                             f"got shape {probabilities.shape}")
        chosen = self.adversary(probabilities)
        self.choices[chosen] += 1
        function = self.table[chosen]
        reward = float(function[decision.arm])
        self.cumulative_function += function
        increment, regret, expected = self.tally.add(reward, float(function @ probabilities),
                                                     float(self.cumulative_function.max()))
        return Feedback(reward=reward, regret=increment, cumulative_regret=regret,
                        extras={"expected_regret": expected, "adversary_choice": float(chosen)})

    def diagnostics(self) -> dict[str, float]:
        return {
            "domain_size": float(len(self.domain)),
            "lengthscale": float(self.kernel.lengthscale),
            "candidates_scaled_fraction": float(np.mean(self.raw_norms > self.config.norm_bound)),
            "distinct_adversary_choices": float(np.count_nonzero(self.choices)),
        }
