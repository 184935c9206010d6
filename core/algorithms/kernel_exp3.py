"""Kernelized Exp3 (the kernel paper's Alg. 1; SPEC 3.1), exact, in the kernel form.

Before the first round:
    gamma_T = (log T)^{d+1} (log log T)^{-d}                  (SE)
            = T^{d/(2nu+d)} (log T)^{(4nu+d)/(2nu+d)}          (Matern)          (core.kernels.growth_rate)
    eta = c3 / sqrt(T gamma_T),   alpha = c4 eta gamma_T,   beta = B sqrt(lambda / T),   mu = lambda / T
    pi = empirical distribution of the MVR sequence of length ceil(T alpha), GP noise lambda (SPEC 3.2)

Round t:
    P_t = (1 - alpha) P~_t + alpha pi,  P~_t(x) proportional to exp(eta sum_{s<t} u_s(x))    (core.exp3)
    draw x_t ~ P_t, observe y_t = f_t(x_t)
    G_t = sum_x P_t(x) psi(x) psi(x)^T + mu I,   f^_t(x) = psi(x)^T G_t^{-1} psi(x_t) y_t        (eq. 3)
    u_t(x) = f^_t(x) + beta ||psi(x)||_{G_t^{-1}}

No feature map is formed: with D = diag(P_t) and M_t = Psi G_t^{-1} Psi^T,

    M_t = (1/mu) [K - K D^{1/2} (D^{1/2} K D^{1/2} + mu I)^{-1} D^{1/2} K],
    f^_t(x) = M_t[x, x_t] y_t,    ||psi(x)||^2_{G_t^{-1}} = M_t[x, x],

one Cholesky L L^T = D^{1/2} K D^{1/2} + mu I and one triangular solve V = L^{-1} D^{1/2} K per round:
O(n^3) time, float64, on ``device`` (CUDA when the trial is given one). This is the one algorithm
that holds the n x n matrix K (and three more n x n work arrays): it checks the free memory first.

Project choices (recorded in diagnostics): alpha is capped at 1 (the tuning grid reaches
c4 eta gamma_T > 1, where the formula is not a mixing weight); ``beta`` overrides the formula.
Defaults are the paper's selected SE constants (c3, c4, lambda) = (5, 0.1, 1); the paper selected
(10, 0.1, 10) for Matern 5/2 and (5, 0.1, 5) for Matern 3/2 (sweeps/kernel_exp3/table3.yaml).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field

from banditsweep.core.contracts import Config
from banditsweep.core.exp3 import Exp3Policy, ExponentialWeights, empirical_distribution
from banditsweep.core.kernels import check_memory, growth_rate
from banditsweep.core.mvr import mvr_sequence

# n x n float64 arrays alive at the peak of a round: K, D^{1/2} K, the system and its factor.
EXACT_WORK_MATRICES = 4


class KernelExp3Params(Config):
    c3: float = Field(5.0, gt=0, description="eta = c3 / sqrt(T gamma_T)")
    c4: float = Field(0.1, gt=0, description="alpha = c4 eta gamma_T")
    lam: float = Field(1.0, gt=0, description="lambda: GP noise of MVR, ridge mu = lambda / T")
    beta: float | None = Field(None, ge=0, description="confidence width; None: B sqrt(lambda / T)")


class Exp3Schedule:
    """The derived constants shared by Kernelized Exp3 and RLS-Kernelized Exp3 (SPEC 3.1, 3.4)."""

    def __init__(self, params: KernelExp3Params, problem, beta_factor: float = 1.0):
        horizon, dim = problem.horizon, problem.dim
        self.gamma_T = growth_rate(problem.kernel, horizon, dim)
        self.eta = params.c3 / math.sqrt(horizon * self.gamma_T)
        self.alpha_formula = params.c4 * self.eta * self.gamma_T
        self.alpha = min(1.0, self.alpha_formula)
        self.mu = params.lam / horizon
        self.beta_formula = beta_factor * problem.norm_bound * math.sqrt(params.lam / horizon)
        self.beta = self.beta_formula if params.beta is None else float(params.beta)
        self.design_length = max(1, math.ceil(horizon * self.alpha))

    def as_dict(self) -> dict[str, float]:
        return {"gamma_T": self.gamma_T, "eta": self.eta, "alpha": self.alpha,
                "alpha_formula": self.alpha_formula, "beta": self.beta, "beta_formula": self.beta_formula,
                "mu": self.mu, "mvr_length": float(self.design_length)}


def kernel_form_statistics(kernel_matrix: torch.Tensor, probabilities: torch.Tensor, mu: float,
                           index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(M_t[:, x_t], diag M_t) of the kernel form above, for x_t = ``index``."""
    root = probabilities.sqrt()
    weighted = root[:, None] * kernel_matrix                   # D^{1/2} K
    system = weighted * root[None, :]                          # D^{1/2} K D^{1/2}
    system.diagonal().add_(mu)
    factor = torch.linalg.cholesky(system)
    del system
    solved = torch.linalg.solve_triangular(factor, weighted, upper=False)   # L^{-1} D^{1/2} K
    del weighted, factor
    column = (kernel_matrix[:, index] - solved.T @ solved[:, index]) / mu
    diagonal = (kernel_matrix.diagonal() - torch.linalg.vector_norm(solved, dim=0) ** 2) / mu
    return column, diagonal


class KernelExp3(Exp3Policy):
    Params = KernelExp3Params

    def __init__(self, params, problem, rng, device="cpu"):
        super().__init__(params, problem, rng, device)
        self.schedule = Exp3Schedule(params, problem)
        self.torch_device = torch.device(device)
        self.kernel_matrix: torch.Tensor | None = None
        self.mvr_distinct = 0

    def prepare(self, domain: np.ndarray) -> ExponentialWeights:
        n = len(domain)
        check_memory(EXACT_WORK_MATRICES * n * n * 8, str(self.torch_device),
                     f"exact kernel_exp3 on |X| = {n}")
        kernel = self.problem.kernel
        self.kernel_matrix = torch.from_numpy(kernel.matrix(domain)).to(self.torch_device)
        sequence, _ = mvr_sequence(kernel, domain, self.schedule.design_length, self.params.lam)
        self.mvr_distinct = len(np.unique(sequence))
        return ExponentialWeights(n, self.schedule.eta, self.schedule.alpha, empirical_distribution(sequence, n))

    def estimate(self, probabilities: np.ndarray, arm: int, reward: float) -> np.ndarray:
        p = torch.from_numpy(probabilities).to(self.torch_device)
        column, diagonal = kernel_form_statistics(self.kernel_matrix, p, self.schedule.mu, arm)
        width = torch.sqrt(torch.clamp(diagonal, min=0.0))
        return (column * reward + self.schedule.beta * width).cpu().numpy()

    def diagnostics(self) -> dict[str, float]:
        return {**self.schedule.as_dict(), "mvr_distinct_points": float(self.mvr_distinct)}
