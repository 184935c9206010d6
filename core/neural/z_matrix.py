"""Z = lambda I + c sum_s g(x_s) g(x_s)^T and its inverse products, shared by PC, NeuralUCB and NeuralTS.

SPEC 1.4-1.5: Z_0 = lambda I, Z_t = Z_{t-1} + g g^T / m (paper eq. 15 and Alg. 2 line 10; NeuralUCB,
NeuralTS), i.e. c = 1/m; the baselines' reference code accumulates g g^T without the 1/m (c = 1).

Two representations (``mode``):

- ``diag``: Z^{-1} is replaced by the inverse of Z's diagonal U = lambda + c sum_s g_s^2 — the
  surrogate of the paper's experiments (App. F) and of the reference code. O(p) per update and product.
- ``full``: the exact p x p inverse, kept up to date by Sherman-Morrison,
  Z^{-1} <- Z^{-1} - (Z^{-1} u)(Z^{-1} u)^T / (1 + u^T Z^{-1} u), u = sqrt(c) g: O(p^2) per round, never
  a fresh O(p^3) inversion. p = m + m d + m^2 (L - 1) (37 900 on Covertype), so this is a device option.
  With ``inverse="invert"`` Z itself is kept and inverted afresh after every update (a Cholesky
  factorisation and its inverse, O(p^3)): what the paper's Table 3 times as "the time to invert Z"
  (its NeuralUCB / NeuralTS rows), for comparison with the update; the two agree to rounding.

Gradients come as :class:`ArmParameters` (only the arm's first-layer block is nonzero, SPEC 1.3); the
flat order of theta is [vec W1 (blocks, d_b, m), vec hidden layers, w, biases]. A network with biases
(the baselines' ``training="reference"``) has them in Z too: the reference code's U has one entry per
element of ``func.parameters()``, biases included (uclaml/NeuralTS ``learner_diag.py`` lines 25-26,
37-38 and 44). Time spent here is accumulated
in ``seconds`` (the "time to invert Z" of the paper's Table 3).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from banditsweep.core.neural.networks import ArmParameters, StackedNetwork


class ZMatrix:
    STATE = ("invert", "mode", "scale", "blocks", "block_dim", "width", "num_hidden", "bias_sizes", "device",
             "dtype", "seconds")
    # The factors of one mode: U_* for "diag"; the inverse for "full", and Z itself when it is inverted anew.
    OPTIONAL_STATE = ("U_W1", "U_hidden", "U_w", "U_biases", "inverse", "matrix")

    def __init__(self, network: StackedNetwork, lam: np.ndarray, scale: float, mode: str, inverse: str = "update"):
        if mode not in ("diag", "full"):
            raise ValueError(f"unknown z mode {mode!r}")
        if inverse not in ("update", "invert"):
            raise ValueError(f"unknown z inverse {inverse!r}")
        self.invert = mode == "full" and inverse == "invert"
        G, B, d_b, _, m = network.W1.shape
        self.mode, self.scale = mode, scale
        self.blocks, self.block_dim, self.width = B, d_b, m
        self.num_hidden = len(network.hidden)
        self.bias_sizes = [b.shape[2] if b.dim() == 3 else 1 for b in network.biases]  # m per hidden layer, 1
        self.device, self.dtype = network.W1.device, network.W1.dtype
        self.seconds = 0.0
        lam_t = torch.as_tensor(np.asarray(lam, dtype=np.float64), device=self.device, dtype=self.dtype)
        if mode == "diag":
            self.U_W1 = lam_t.view(G, 1, 1, 1).expand(G, B, d_b, m).clone()
            self.U_hidden = [lam_t.view(G, 1, 1).expand(G, m, m).clone() for _ in range(self.num_hidden)]
            self.U_w = lam_t.view(G, 1).expand(G, m).clone()
            self.U_biases = [lam_t.view(G, 1).expand(G, m).clone() if b.dim() == 3 else lam_t.clone()
                             for b in network.biases]
        else:
            p = self.size
            self.inverse = torch.eye(p, device=self.device, dtype=self.dtype).repeat(G, 1, 1) / lam_t.view(G, 1, 1)
            if self.invert:
                self.matrix = torch.eye(p, device=self.device, dtype=self.dtype).repeat(G, 1, 1) * lam_t.view(G, 1, 1)

    @property
    def size(self) -> int:
        return (self.blocks * self.block_dim * self.width + self.num_hidden * self.width ** 2 + self.width
                + sum(self.bias_sizes))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ---- flat <-> structured ------------------------------------------------------------------

    def flatten(self, g: ArmParameters, block_of_arm: torch.Tensor) -> torch.Tensor:
        """(G, K, p) full vectors of per-arm gradients."""
        G, K = g.w.shape[:2]
        first = torch.zeros(G, K, self.blocks, self.block_dim * self.width, device=self.device, dtype=self.dtype)
        first[:, torch.arange(K, device=self.device), block_of_arm] = g.W1.reshape(G, K, -1)
        parts = [first.reshape(G, K, -1)] + [h.reshape(G, K, -1) for h in g.hidden] + [g.w]
        parts += [b.reshape(G, K, -1) for b in g.biases]
        return torch.cat(parts, dim=-1)

    def _unflatten(self, v: torch.Tensor, block_of_arm: torch.Tensor, out_scale: float) -> ArmParameters:
        G, K, _ = v.shape
        n1 = self.blocks * self.block_dim * self.width
        first = v[..., :n1].reshape(G, K, self.blocks, self.block_dim, self.width)
        first = first[:, torch.arange(K, device=self.device), block_of_arm]
        offset, hidden = n1, []
        for _ in range(self.num_hidden):
            hidden.append(v[..., offset:offset + self.width ** 2].reshape(G, K, self.width, self.width))
            offset += self.width ** 2
        w = v[..., offset:offset + self.width]
        offset += self.width
        biases = []
        for size in self.bias_sizes:
            part = v[..., offset:offset + size]
            biases.append(part if size > 1 else part[..., 0])
            offset += size
        return ArmParameters(first, hidden, w, out_scale, biases)

    # ---- products -------------------------------------------------------------------------------

    def solve(self, g: ArmParameters, block_of_arm: torch.Tensor) -> ArmParameters:
        """Z^{-1} g for every (group, arm), restricted to what f(x_{t,a}) depends on."""
        start = time.perf_counter()
        if self.mode == "diag":
            result = ArmParameters(g.W1 / self.U_W1[:, block_of_arm],
                                   [gh / U.unsqueeze(1) for gh, U in zip(g.hidden, self.U_hidden)],
                                   g.w / self.U_w.unsqueeze(1), g.out_scale,
                                   [gb / U.unsqueeze(1) for gb, U in zip(g.biases, self.U_biases)])
        else:
            flat = self.flatten(g, block_of_arm)
            result = self._unflatten(torch.einsum("gpq,gkq->gkp", self.inverse, flat), block_of_arm, g.out_scale)
        self._sync()
        self.seconds += time.perf_counter() - start
        return result

    def quadratic(self, g: ArmParameters, block_of_arm: torch.Tensor) -> torch.Tensor:
        """g^T Z^{-1} g for every (group, arm): (G, K)."""
        solved = self.solve(g, block_of_arm)
        G, K = g.w.shape[:2]
        return sum((a * b).reshape(G, K, -1).sum(-1) for a, b in zip(g.tensors(), solved.tensors()))

    def add(self, g: ArmParameters, blocks: torch.Tensor) -> None:
        """Z <- Z + c g g^T for one gradient per group: g with K = 1, in first-layer ``blocks`` (G,)."""
        start = time.perf_counter()
        G = g.w.shape[0]
        if self.mode == "diag":
            rows = torch.arange(G, device=self.device)
            self.U_W1[rows, blocks] += self.scale * g.W1[:, 0] ** 2
            for U, gh in zip(self.U_hidden, g.hidden):
                U += self.scale * gh[:, 0] ** 2
            self.U_w += self.scale * g.w[:, 0] ** 2
            for U, gb in zip(self.U_biases, g.biases):
                U += self.scale * gb[:, 0] ** 2
        else:
            u = self._flat_one(g, blocks) * self.scale ** 0.5
            if self.invert:
                self.matrix += u.unsqueeze(-1) * u.unsqueeze(-2)
                self.inverse = torch.cholesky_inverse(torch.linalg.cholesky(self.matrix))
                self._sync()
                self.seconds += time.perf_counter() - start
                return
            solved = torch.einsum("gpq,gq->gp", self.inverse, u)
            denominator = 1.0 + (u * solved).sum(-1)
            self.inverse -= solved.unsqueeze(-1) * solved.unsqueeze(-2) / denominator.view(G, 1, 1)
        self._sync()
        self.seconds += time.perf_counter() - start

    def _flat_one(self, g: ArmParameters, blocks: torch.Tensor) -> torch.Tensor:
        """(G, p) flat vectors of one gradient per group, each in its own block."""
        G = g.w.shape[0]
        first = torch.zeros(G, self.blocks, self.block_dim * self.width, device=self.device, dtype=self.dtype)
        first[torch.arange(G, device=self.device), blocks] = g.W1[:, 0].reshape(G, -1)
        parts = [first.reshape(G, -1)] + [h[:, 0].reshape(G, -1) for h in g.hidden] + [g.w[:, 0]]
        parts += [b[:, 0].reshape(G, -1) for b in g.biases]
        return torch.cat(parts, dim=-1)
