"""Kernelized Exp3 (the kernel paper's Alg. 1; SPEC 3.1), exact, in the kernel form.

Before the first round:
    gamma_T = (log T)^{d+1} (log log T)^{-d}                  (SE)
            = T^{d/(2nu+d)} (log T)^{(4nu+d)/(2nu+d)}          (Matern)
            = d log T                                          (linear)          (core.kernel.kernels.growth_rate)
    eta = c3 / sqrt(T gamma_T),   alpha = c4 eta gamma_T,   beta = B sqrt(lambda / T),   mu = lambda / T
    pi = the exploration distribution, ``exploration`` (paper Alg. 1 line 2 and App. 16):
         mvr        the empirical distribution of the MVR sequence of length ceil(T alpha), GP noise lambda
                    (SPEC 3.2; the paper's choice, default)
         g_optimal  the generalised G-optimal design of App. 16,
                    pi* = argmin_P max_x psi(x)^T (sum_x' P(x') psi(x') psi(x')^T + lambda / (T alpha) I)^{-1} psi(x),
                    by Frank-Wolfe on log det (core.kernel.exp3.g_optimal_design, the routine of APG-Exp3's design,
                    with ridge lambda / (T alpha)) on features psi of the kernel matrix K (its eigenvectors
                    scaled by the square roots of the eigenvalues; eigenvalues below 1e-12 times the
                    largest are dropped, which moves no g(x) by more than n 1e-12 / ridge). Stops at
                    max g <= (1 + design_epsilon) sum pi g. Cost O(n^3) once (App. 16: Omega(|X|^3)).
         uniform    pi(x) = 1 / |X| (App. 16, "Uniform distribution"; no preparation at all)

Round t:
    P_t = (1 - alpha) P~_t + alpha pi,  P~_t(x) proportional to exp(eta sum_{s<t} u_s(x))    (core.kernel.exp3)
    draw x_t ~ P_t, observe y_t = f_tProject choices (recorded in diagnostics): alpha is capped at 1 (the tuning grid reaches
c4 eta gamma_T > 1, where the formula is not a mixing weight); ``beta`` overrides the formula.
``beta_rule: theorem3`` replaces Theorem 1's width by RLS-Kernelized Exp3's (Theorem 3),
beta = B (1 + sqrt 2) sqrt(lambda / T): exact Kernelized Exp3 with RLS's beta, which isolates the effect
of the larger width from that of the Nystrom approximation (docs/reproduction.md).
Defaults are the paper's selected SE constants (c3, c4, lambda) = (5, 0.1, 1); the paper selected
(10, 0.1, 10) for Matern 5/2 and (5, 0.1, 5) for Matern 3/2 (sweeps/kernel_exp3/table3.yaml).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from banditsweep.core.kernel import domains, kernels
from banditsweep.core.engine.contracts import Config
from banditsweep.core.kernel.exp3 import (RLS_BETA_FACTOR, Exp3Policy, Exp3Schedule, ExponentialWeights,
                                          empirical_distribution, g_optimal_design)
from banditsweep.core.kernel.kernels import check_memory
from banditsweep.core.kernel.mvr import mvr_sequence
from banditsweep.core.engine.ties import DESIGN, MVR, design_digest
from banditsweep.core.engine.canonical import canonical_json

# n x n float64 arrays alive at the peak of a round: K, D^{1/2} K, the system and its factor.
EXACT_WORK_MATRICES = 4
# Environment kinds with a finite domain X described by ``setting`` / ``domain`` (core.kernel.domains).
KERNEL_ENVIRONMENTS = ("adversarial_kernel", "kernel_lower_bound")
# Eigenvalues of K below this fraction of the largest are dropped from the g_optimal design's features.
FEATURE_TOLERANCE = 1e-12
# The lockstep batch a CPU slot runs (preferred_batch_size), and so the one batch_key checks memory for.
LOCKSTEP_BATCH = 8


def work_bytes(n: int, batch: int = 1) -> int:
    """Bytes of float64 work arrays at the peak of a round of ``batch`` trials on |X| = n: the shared K
    and, per trial, D^{1/2} K, the weighted system and its Cholesky factor."""
    return (1 + (EXACT_WORK_MATRICES - 1) * batch) * n * n * 8


def domain_size(environment: dict, horizon: int | None = None) -> int | None:
    """|X| of a kernel environment config (adversarial_kernel, kernel_lower_bound) with a fixed domain:
    a setting, a grid, or a continuous domain's net (from ``horizon``); None for a seed-drawn domain
    ({uniform: n, dim: d}) or another kind of environment."""
    if environment.get("kind") not in KERNEL_ENVIRONMENTS:
        return None
    shape = domains.grid_shape(environment.get("setting"), environment.get("domain"), horizon)
    return None if shape is None else math.prod(shape)


class Exp3ScheduleParams(Config):
    """The constants every Exp3 variant of the kernel paper shares (SPEC 3.1, 3.4)."""

    c3: float = Field(5.0, gt=0, description="eta = c3 / sqrt(T gamma_T)")
    c4: float = Field(0.1, gt=0, description="alpha = c4 eta gamma_T")
    lam: float = Field(1.0, gt=0, description="lambda: GP noise of MVR, ridge mu = lambda / T")
    beta: float | None = Field(None, ge=0, description="confidence width; unset: B sqrt(lambda / T)")


class KernelExp3Params(Exp3ScheduleParams):
    beta_rule: Literal["theorem1", "theorem3"] = Field(
        "theorem1", description="beta when beta is unset: theorem1 B sqrt(lambda / T) (Thm. 1); theorem3 "
                                "B (1 + sqrt 2) sqrt(lambda / T), RLS-Kernelized Exp3's width (Thm. 3)")
    exploration: Literal["mvr", "g_optimal", "uniform"] = Field(
        "mvr", description="exploration distribution pi (App. 16): mvr (Alg. 1), g_optimal (generalised "
                           "G-optimal design, ridge lambda / (T alpha)), uniform (1 / |X|)")
    design_epsilon: float = Field(0.1, gt=0, description="g_optimal: Frank-Wolfe stops at max_x g(x) <= "
                                                         "(1 + eps) sum_x pi(x) g(x)")
    design_max_iterations: int = Field(10_000, ge=1, description="g_optimal: Frank-Wolfe iteration cap")


def kernel_features(kernel_matrix: np.ndarray, tolerance: float = FEATURE_TOLERANCE) -> np.ndarray:
    """Rows psi(x) with psi(x)^T psi(x') = K[x, x'] (paper Sec. 2, feature representation): the
    eigenvectors of K scaled by the square roots of their eigenvalues, those below ``tolerance`` times
    the largest dropped."""
    values, vectors = np.linalg.eigh(kernel_matrix)
    keep = values > tolerance * max(float(values.max()), 0.0)
    return vectors[:, keep] * np.sqrt(values[keep])


def kernel_form_statistics(kernel_matrix: torch.Tensor, probabilities: torch.Tensor, mu, index
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """(M_t[:, x_t], diag M_t) of the kernel form above, for x_t = ``index``.

    Batched: ``probabilities`` (B, n), ``mu`` and ``index`` (B,) give (B, n) results, the B systems
    factorised by one batched Cholesky; with ``probabilities`` (n,) and scalar ``mu``, ``index`` the
    results are (n,) (the batch of one).
    """
    single = probabilities.dim() == 1
    p = probabilities[None] if single else probabilities
    count = p.shape[0]
    mu = torch.as_tensor(mu, dtype=p.dtype, device=p.device).reshape(-1).expand(count)
    index = torch.as_tensor(index, device=p.device).reshape(-1).expand(count)
    rows = torch.arange(count, device=p.device)
    root = p.sqrt()
    weighted = root[:, :, None] * kernel_matrix[None]             # D^{1/2} K: (B, n, n)
    system = weighted * root[:, None, :]                           # D^{1/2} K D^{1/2}
    system.diagonal(dim1=-2, dim2=-1).add_(mu[:, None])
    factor = torch.linalg.cholesky(system)
    del system
    solved = torch.linalg.solve_triangular(factor, weighted, upper=False)   # L^{-1} D^{1/2} K
    del weighted, factor
    chosen = solved[rows, :, index]                                 # L^{-1} D^{1/2} k(x_t): (B, n)
    cross = torch.bmm(solved.transpose(1, 2), chosen[:, :, None])[:, :, 0]
    column = (kernel_matrix[:, index].T - cross) / mu[:, None]
    diagonal = (kernel_matrix.diagonal()[None] - torch.linalg.vector_norm(solved, dim=1) ** 2) / mu[:, None]
    return (column[0], diagonal[0]) if single else (column, diagonal)


class KernelExp3(Exp3Policy):
    """Kernelized Exp3 (kernel paper, Alg. 1): exact exponential weights on kernel ridge estimates."""

    STATE = ("schedule", "torch_device", "kernel_matrix", "mvr_distinct", "design_values")

    Params = KernelExp3Params
    label = "Kernelized Exp3"

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        beta_factor = RLS_BETA_FACTOR if params.beta_rule == "theorem3" else 1.0
        self.schedule = Exp3Schedule(params, problem, beta_factor=beta_factor)
        self.torch_device = torch.device(device)
        self.kernel_matrix: torch.Tensor | None = None
        self.mvr_distinct = 0
        self.design_values: dict[str, float] = {}

    def prepare(self, domain: np.ndarray) -> ExponentialWeights:
        n = len(domain)
        if self.kernel_matrix is None:   # a lockstep batch shares K (create_batch)
            check_memory(work_bytes(n), str(self.torch_device), f"exact kernel_exp3 on |X| = {n}")
            self.kernel_matrix = torch.from_numpy(self.problem.kernel.matrix(domain)).to(self.torch_device)
        return ExponentialWeights(n, self.schedule.eta, self.schedule.alpha, self.exploration_distribution(domain))

    def exploration_distribution(self, domain: np.ndarray) -> np.ndarray:
        """pi of Alg. 1 line 2, by ``exploration`` (module docstring; paper App. 16)."""
        n = len(domain)
        if self.params.exploration == "uniform":
            return np.full(n, 1.0 / n)
        if self.params.exploration == "g_optimal":
            ridge = self.params.lam / (self.problem.horizon * self.schedule.alpha)
            features = kernel_features(self.kernel_matrix.cpu().numpy())
            design, g_max, iterations = g_optimal_design(features, self.params.design_epsilon,
                                                         self.params.design_max_iterations, ridge=ridge,
                                                         key=self.tie_key(DESIGN))
            effective = float(design @ np.einsum(
                "ij,ij->i", features, np.linalg.solve(features.T @ (design[:, None] * features)
                                                      + ridge * np.eye(features.shape[1]), features.T).T))
            self.design_values = {"design_ridge": ridge, "design_features": float(features.shape[1]),
                                  "design_g_max": g_max, "design_effective_dimension": effective,
                                  "design_iterations": float(iterations),
                                  "design_support": float(np.count_nonzero(design > 1e-12)),
                                  "design_digest": design_digest(np.flatnonzero(design > 1e-12))}
            return design
        sequence, _ = mvr_sequence(self.problem.kernel, domain, self.schedule.design_length, self.params.lam,
                                   self.tie_key(MVR))
        self.mvr_distinct = len(np.unique(sequence))
        self.design_values = {"design_digest": design_digest(sequence)}
        return empirical_distribution(sequence, n)

    def estimate(self, probabilities: np.ndarray, arm: int, reward: float) -> np.ndarray:
        return self.estimate_batch([self], probabilities[None], np.array([arm]), np.array([reward]))[0]

    # ---- lockstep trial batching (stepped by the round loop of core.engine.trial) ------------------------

    @classmethod
    def estimate_batch(cls, policies, probabilities: np.ndarray, arms: np.ndarray,
                       rewards: np.ndarray) -> np.ndarray:
        """u_t = f^_t + beta ||psi||_{G^{-1}} of every trial: one batched Cholesky of the B systems."""
        device = policies[0].torch_device
        kernel_matrix = policies[0].kernel_matrix
        if any(policy.kernel_matrix is not kernel_matrix for policy in policies[1:]):
            raise ValueError("the trials of a kernel_exp3 batch must share the kernel matrix (create_batch)")
        p = torch.from_numpy(np.ascontiguousarray(probabilities)).to(device)
        mu = torch.tensor([policy.schedule.mu for policy in policies], dtype=torch.float64, device=device)
        beta = torch.tensor([policy.schedule.beta for policy in policies], dtype=torch.float64, device=device)
        reward = torch.as_tensor(np.asarray(rewards, dtype=np.float64), device=device)
        column, diagonal = kernel_form_statistics(kernel_matrix, p, mu, torch.as_tensor(np.asarray(arms)))
        width = torch.sqrt(torch.clamp(diagonal, min=0.0))
        return (column * reward[:, None] + beta[:, None] * width).cpu().numpy()

    @classmethod
    def create_batch(cls, params, problem, rngs, environments, device="cpu"):
        """One K for the batch, after checking the batch's work arrays fit on the device."""
        batch = super().create_batch(params, problem, rngs, environments, device)
        if len(batch.policies) == 1:
            return batch   # a trial alone builds its K when it first sees the domain (prepare)
        domain = environments[0].contexts(1)
        if any(not np.array_equal(env.contexts(1), domain) for env in environments[1:]):
            raise ValueError("the trials of a kernel_exp3 batch must share the domain")
        torch_device = batch.policies[0].torch_device
        n = len(domain)
        check_memory(work_bytes(n, len(batch.policies)), str(torch_device),
                     f"a lockstep batch of {len(batch.policies)} exact kernel_exp3 trials on |X| = {n}")
        shared = torch.from_numpy(problem.kernel.matrix(domain)).to(torch_device)
        for policy in batch.policies:
            policy.kernel_matrix = shared
        return batch

    @classmethod
    def batch_key(cls, spec) -> tuple | None:
        """Trials with equal keys run in one lockstep batch: same environment config and horizon
        (hence the same domain and K; a continuous domain's net is fixed by the two); seeds and every
        parameter (c3, c4, lam, beta, beta_rule, exploration, ...) may differ (none changes the shapes
        of the round's arrays; each trial keeps its own pi).

        None (the trial runs alone) for a domain drawn from the seed ({uniform: n, dim: d}: the
        trials' K would differ) and when the work arrays of a batch of ``LOCKSTEP_BATCH`` = 8 trials,
        (1 + 3 * 8) n x n float64 (:func:`work_bytes`; n = 10^4: 20 GB), would not fit in the free host
        memory when the key is computed (core.kernel.kernels.check_memory). :meth:`largest_batch` checks the
        memory of the device the batch actually runs on, and the runner splits the batch to fit.
        """
        n = domain_size(spec.environment, spec.horizon)
        if n is None:
            return None
        try:
            check_memory(work_bytes(n, LOCKSTEP_BATCH), "cpu", f"a lockstep batch of kernel_exp3 on |X| = {n}")
        except MemoryError:
            return None
        return (spec.algorithm, canonical_json(spec.environment), spec.horizon)

    @classmethod
    def preferred_batch_size(cls, spec, on_gpu: bool) -> int:
        """On a GPU, 32 (:meth:`largest_batch` splits by the device's memory). On a CPU, batching pays
        only while one round is short: 2-4x throughput for 8 trials at |X| = 400, none at 2000
        (docs/benchmarks.md), so 8 trials up to |X| = 1000 and one at a time beyond."""
        if on_gpu:
            return 32
        n = domain_size(spec.environment, spec.horizon)
        return LOCKSTEP_BATCH if n is not None and n <= 1000 else 1

    @classmethod
    def largest_batch(cls, specs, device: str) -> int:
        """As many trials as the memory of ``device`` holds (at least one)."""
        n = domain_size(specs[0].environment, specs[0].horizon)
        size = len(specs)
        if n is not None:
            available = kernels.available_memory_bytes(str(device))
            while size > 1 and work_bytes(n, size) > available:
                size -= 1
        return size

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        # The exact algorithm's n x n work arrays (work_bytes); the G-optimal design adds the kernel
        # matrix's features, n x n again.
        design = 8 * arms * arms if params.exploration == "g_optimal" else 0
        return super().footprint(params, arms, dim, horizon) + work_bytes(arms) + design

    def diagnostics(self) -> dict[str, float]:
        # design_values: the design's record (design_digest; the G-optimal design's figures too); the
        # uniform exploration has no design.
        if self.params.exploration == "mvr":
            return {**self.schedule.as_dict(), "mvr_distinct_points": float(self.mvr_distinct), **self.design_values}
        return {**self.schedule.as_dict(), **self.design_values}
