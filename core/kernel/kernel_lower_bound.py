"""The lower-bound hard instance of the kernel paper (Sec. 5 proof sketch, App. 13 proof of Theorem 4).

The environment reduces the adversarial kernel bandit to a stochastic one with input-dependent
Gaussian noise: a fixed f with ||f||_k <= B/2 plus a random multiple of k(0, .), the kernel centred at
the corner 0 of [0, 1]^d,

    f_t(.) = f(.) + c_t k(0, .),      c_t = B eta_t / (2 m),   eta_t ~ N(0, 1) i.i.d.,   m = sqrt(2 log(2 T^2)),

App. 13's noise function g_t (variance sigma^2 = B^2 / (8 log(2 T^2)), Theta(1 / log T) as the proof
sketch of Sec. 5 requires). Two instances, chosen by ``noise``:

- ``clipped`` (default; App. 13's "problem instance 2", the one inside the paper's Assumption 1):
  |eta_t| >= m is replaced by sign(eta_t) B/2 k(0, .), i.e. c_t = B clip(eta_t, -m, m) / (2 m), so
  ||f_t||_k <= ||f||_k + |c_t| k(0, 0)^{1/2} <= B/2 + B/2 = B in every round and for every draw.
- ``gaussian`` ("problem instance 1"): c_t = B eta_t / (2 m) unclipped; ||f_t||_k may exceed B.

Both instances draw the same eta_1..eta_T from the trial seed, so on the event that no |eta_t| reaches
m they are the same environment for any learner (the coupling of App. 13 eq. 55). P(|eta_t| >= m)
<= 2 exp(-m^2 / 2) = 1 / T^2, so the event "some round is clipped" has probability <= 1 / T and the
gap it opens between the two instances' expected regrets is at most B T / T = B (eq. 56).

f (project choice: the proof takes the worst f of the ball, a construction of Scarlett et al. [50]
we do not reproduce) is drawn from the trial seed like a candidate of App. 17 and scaled to the
boundary of the ball: f~ = sum_{m=1}^{centers} c_m k(x_m, .), x_m ~ Uniform(X), c_m ~ Uniform(-1, 1),
f = (B/2) f~ / ||f~||_k, ||f~||_k^2 = c^T K c. ``centers: 1`` gives a single bump +-(B/2) k(x_1, .).

The environment is oblivious (it does not read P_t): f_t depends only on the seed, which is what the
reduction needs. Regret (SPEC 2.1) and the paper's quantity:

    realised  R_t = max_x sum_{s<=t} f_s(x) - sum_{s<=t} f_s(x_s)       (Feedback.cumulative_regret)
    expected  R^E_t = max_x sum_{s<=t} f_s(x) - sum_{s<=t} sum_x P_s(x) f_s(x)   (extras, NaN without P_t)
    pseudo    sum_{s<=t} (max_x f(x) - f(x_s))  (extras["pseudo_regret"]): the noise has mean zero and
              is independent of x_t, so E[pseudo_T] = sup_x E[R_T(x)], the regret Theorem 4 bounds (eq. 53).

Theorem 4's rate, recorded as the diagnostic ``lower_bound_rate`` (up to (d, l, nu)-dependent
constants) with sigma_T^2 = B^2 / (8 log T) (Lemma 16): SE sqrt(sigma^2 T (log(T / sigma^2))^{d/2});
Matern sigma^{2 nu / (2 nu + d)} T^{(nu + d) / (2 nu + d)}. The theorem covers SE and Matern only;
for the linear kernel k(0, .) is the zero function, so that kernel is not offered.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from banditsweep.core.engine.contracts import Decision, Feedback
from banditsweep.core.kernel.adversarial_kernel import (KernelDomainConfig, KernelDomainEnvironment,
                                                        RegretTally, domain_and_kernel)
from banditsweep.core.kernel.kernels import Kernel


class KernelLowerBoundConfig(KernelDomainConfig):
    # The linear kernel is not offered: k(0, .) is zero for it, so f_t would carry no noise.
    kernel: Literal["se", "matern52", "matern32", "matern"] = Field(
        "se", description="k: squared exponential, Matern nu = 5/2, 3/2 or the given nu")
    lengthscale: float | None = Field(None, gt=0, description="kernel lengthscale; unset: 0.3 sqrt(d)")
    norm_bound: float = Field(2.0, gt=0, description="B: ||f||_k = B/2 and ||f_t||_k <= B (clipped noise)")
    centers: int = Field(100, ge=1, description="kernel centres of the fixed function f")
    noise: Literal["clipped", "gaussian"] = Field(
        "clipped", description="clipped: App. 13's instance 2 (||f_t||_k <= B); gaussian: instance 1")


def noise_threshold(horizon: int) -> float:
    """m = sqrt(2 log(2 T^2)): App. 13 clips |eta_t| at m (P(|eta_t| >= m) <= 1 / T^2)."""
    return math.sqrt(2.0 * math.log(2.0 * horizon * horizon))


def noise_coefficients(eta: np.ndarray, norm_bound: float, horizon: int, clipped: bool) -> np.ndarray:
    """c_t of f_t = f + c_t k(0, .): B eta_t / (2 m), with eta_t clipped to [-m, m] for instance 2."""
    threshold = noise_threshold(horizon)
    values = np.clip(eta, -threshold, threshold) if clipped else eta
    return norm_bound * values / (2.0 * threshold)


def lower_bound_rate(kernel: Kernel, horizon: int, dim: int, norm_bound: float) -> float:
    """Theorem 4's rate R(T, sigma_T^2) with sigma_T^2 = B^2 / (8 log T) (App. 13, Lemma 16), without
    its (d, l, nu)-dependent constant."""
    t = max(float(horizon), math.e)
    variance = norm_bound ** 2 / (8.0 * math.log(t))
    if kernel.name == "se":
        return math.sqrt(variance * t * math.log(t / variance) ** (dim / 2.0))
    nu = kernel.nu
    return variance ** (nu / (2 * nu + dim)) * t ** ((nu + dim) / (2 * nu + dim))


class KernelLowerBound(KernelDomainEnvironment):
    """Hard instance of the kernel paper's lower bound (Sec. 5, App. 13): a fixed f plus noise in the RKHS."""

    STATE = ("center_index", "coefficients", "function", "function_max", "noise_function", "eta", "threshold",
             "coefficient", "cumulative_function", "tally", "cumulative_pseudo", "clipped_rounds")

    Config = KernelLowerBoundConfig
    label_always = ("setting", "kernel")  # e.g. "kernel_lower_bound:setting=1,kernel=se"
    title_prefix = "lower bound,"
    round_extras = {
        "expected_regret": "R^E_t, the expected form of the regret (SPEC 2.1); NaN if the policy gives no P_t",
        "pseudo_regret": "sum_s (max_x f(x) - f(x_s)): the noise-free regret against f, whose expectation "
                         "is sup_x E[R_T(x)] (paper App. 13 eq. 53)",
        "noise_coefficient": "c_t in f_t = f + c_t k(0, .)",
        "clipped": "1 when |eta_t| >= sqrt(2 log(2 T^2)) (c_t = sign(eta_t) B/2 under the clipped noise)",
    }

    def __init__(self, config: KernelLowerBoundConfig, horizon: int, rng: np.random.Generator):
        super().__init__(config, horizon, rng)
        self.domain, self.kernel = domain_and_kernel(config, rng, horizon)
        n, d = self.domain.shape
        # f = (B/2) f~ / ||f~||_k, f~ = sum_m c_m k(x_m, .)
        self.center_index = rng.integers(0, n, size=config.centers)
        raw = rng.uniform(-1.0, 1.0, size=config.centers)
        centers = self.domain[self.center_index]
        raw_norm = math.sqrt(max(float(raw @ self.kernel(centers, centers) @ raw), 0.0))
        if raw_norm <= 0:
            raise ValueError("the drawn function f~ is zero; draw another seed or more centres")
        self.coefficients = raw * (config.norm_bound / 2.0) / raw_norm
        self.function = self.coefficients @ self.kernel(centers, self.domain)       # f on X
        self.function_max = float(self.function.max())
        self.noise_function = self.kernel(np.zeros((1, d)), self.domain)[0]         # k(0, .) on X
        self.eta = rng.standard_normal(horizon)
        self.threshold = noise_threshold(horizon)
        self.coefficient = noise_coefficients(self.eta, config.norm_bound, horizon, config.noise == "clipped")
        self.cumulative_function = np.zeros(n)   # sum_s f_s(x)
        self.tally = RegretTally()
        self.cumulative_pseudo = 0.0
        self.clipped_rounds = 0

    def reward_function(self, t: int) -> np.ndarray:
        """f_t on X (round t, 1-based)."""
        return self.function + self.coefficient[t - 1] * self.noise_function

    def step(self, t: int, decision: Decision) -> Feedback:
        function = self.reward_function(t)
        clipped = bool(abs(self.eta[t - 1]) >= self.threshold)
        self.clipped_rounds += clipped
        reward = float(function[decision.arm])
        self.cumulative_function += function
        self.cumulative_pseudo += self.function_max - float(self.function[decision.arm])
        expected_reward = 0.0
        if decision.probabilities is not None:
            probabilities = np.asarray(decision.probabilities, dtype=np.float64)
            if probabilities.shape != (len(self.domain),):
                raise ValueError(f"P_t must have one entry per domain point ({len(self.domain)}), "
                                 f"got shape {probabilities.shape}")
            expected_reward = float(function @ probabilities)
        increment, regret, expected = self.tally.add(reward, expected_reward, float(self.cumulative_function.max()))
        if decision.probabilities is None:
            expected = float("nan")
        return Feedback(reward=reward, regret=increment, cumulative_regret=regret,
                        extras={"expected_regret": expected, "pseudo_regret": self.cumulative_pseudo,
                                "noise_coefficient": float(self.coefficient[t - 1]),
                                "clipped": float(clipped)})

    def diagnostics(self) -> dict[str, float]:
        n, d = self.domain.shape
        return {
            "domain_size": float(n),
            "lengthscale": float(self.kernel.lengthscale),
            "function_norm": self.config.norm_bound / 2.0,
            "function_max": self.function_max,
            "noise_threshold": self.threshold,
            "noise_variance": self.config.norm_bound ** 2 / (8.0 * math.log(2.0 * self.horizon ** 2)),
            "clipped_rounds": float(self.clipped_rounds),
            "lower_bound_rate": lower_bound_rate(self.kernel, self.horizon, d, self.config.norm_bound),
        }
