"""A plain PyTorch implementation of the neural bandits, the yardstick of benchmarks/neural_step.py.

Written the straightforward way: one network per arm as a list of autograd leaves, a Python loop over
arms, dense d'K-dimensional contexts, one trial at a time, autograd for every gradient. Same
computation as banditsweep.core.neural.algorithms (paper eq. 2, 10, 12-15; SPEC 1.4-1.5) with the Gaussian
likelihood, the diagonal Z and ``objective_scale="mean"``.
"""

from __future__ import annotations

import math

import torch


class PlainNetwork:
    def __init__(self, dim: int, width: int, generator: torch.Generator, device: str = "cpu"):
        self.width = width
        self.W1 = (torch.randn(dim, width, generator=generator) * math.sqrt(2.0 / width)).to(device).requires_grad_(True)
        self.w = (torch.randn(width, generator=generator) / math.sqrt(width)).to(device).requires_grad_(True)
        self.initial = [self.W1.detach().clone(), self.w.detach().clone()]

    def params(self):
        return [self.W1, self.w]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return math.sqrt(self.width) * torch.relu(x @ self.W1) @ self.w

    def penalty(self) -> torch.Tensor:
        return sum(((p - p0) ** 2).sum() for p, p0 in zip(self.params(), self.initial))

    def gradient(self, x: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.autograd.grad(self.forward(x[None])[0], self.params()))

    def ascend(self, X, r, steps, lr, lam, bias_x=None, alpha=0.0):
        scale = 1.0 / max(1, len(r))
        for _ in range(steps):
            f = self.forward(X)
            objective = (r * f - 0.5 * f * f).sum() - 0.5 * self.width * lam * self.penalty()
            if bias_x is not None:
                objective = objective + alpha * self.forward(bias_x[None])[0]
            grads = torch.autograd.grad(scale * objective, self.params())
            with torch.no_grad():
                for p, g in zip(self.params(), grads):
                    p += lr * g


class PlainBandit:
    """GA, PC, UCB or TS for one trial; ``history`` holds dense rows."""

    def __init__(self, algorithm, num_arms, dim, width=100, steps=100, lr=0.001, lam=0.001, nu=1.0, seed=0,
                 device="cpu"):
        self.algorithm, self.K, self.steps, self.lr, self.lam, self.nu = algorithm, num_arms, steps, lr, lam, nu
        generator = torch.Generator().manual_seed(seed)
        count = num_arms if algorithm == "ga" else 1
        base = PlainNetwork(dim, width, generator, device)
        self.nets = []
        for _ in range(count):
            net = PlainNetwork(dim, width, generator, device)
            net.W1 = base.W1.detach().clone().requires_grad_(True)
            net.w = base.w.detach().clone().requires_grad_(True)
            net.initial = [p.clone() for p in base.initial]
            self.nets.append(net)
        self.width = width
        self.U = [torch.full_like(p, lam) for p in self.nets[0].params()]
        self.device = device
        self.X = torch.zeros(0, dim, device=device)
        self.r = torch.zeros(0, device=device)
        self.noise = torch.Generator().manual_seed(seed + 1)

    def select(self, t: int, contexts: torch.Tensor) -> int:
        alpha = self.nu * math.sqrt(t)
        scores = []
        if self.algorithm == "ga":
            for a in range(self.K):  # Algorithm 1, lines 5-7: one arm at a time
                net = self.nets[a]
                net.ascend(self.X, self.r, self.steps, self.lr, self.lam, contexts[a], alpha)
                with torch.no_grad():
                    f = net.forward(self.X)
                    index = (self.r * f - 0.5 * f * f).sum() - 0.5 * self.width * self.lam * net.penalty()
                    scores.append(float(index + alpha * net.forward(contexts[a][None])[0]))
        else:
            net = self.nets[0]
            for a in range(self.K):
                g = net.gradient(contexts[a])
                with torch.no_grad():
                    if self.algorithm == "pc":
                        bar = [p + alpha / self.width * gi / u for p, gi, u in zip(net.params(), g, self.U)]
                        scores.append(float(math.sqrt(self.width) * torch.relu(contexts[a] @ bar[0]) @ bar[1]))
                    else:
                        mean = float(net.forward(contexts[a][None])[0])
                        quadratic = float(sum((gi * gi / u).sum() for gi, u in zip(g, self.U)))
                        if self.algorithm == "ucb":
                            scores.append(mean + self.nu * math.sqrt(quadratic / self.width))
                        else:
                            std = math.sqrt(self.nu ** 2 * self.lam * quadratic / self.width)
                            scores.append(mean + std * float(torch.randn(1, generator=self.noise)))
        return int(max(range(self.K), key=lambda a: scores[a]))

    def update(self, t: int, contexts: torch.Tensor, arm: int, reward: float) -> None:
        net = self.nets[0]
        if self.algorithm in ("ucb", "ts"):
            self._add(net.gradient(contexts[arm]))
        self.X = torch.cat([self.X, contexts[arm][None]])
        self.r = torch.cat([self.r, torch.tensor([reward], device=self.device)])
        if self.algorithm != "ga":
            net.ascend(self.X, self.r, self.steps, self.lr, self.lam)
        if self.algorithm == "pc":
            self._add(net.gradient(contexts[arm]))

    def _add(self, g):
        for u, gi in zip(self.U, g):
            u += gi * gi / self.width
