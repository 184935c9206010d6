"""The network of the NeuralRBMLE paper (SPEC 1.3, paper eq. 2), stacked and block-sparse.

    f(x; theta) = out_scale * W_L sigma(W_{L-1} ... sigma(W_1 x)),   sigma = ReLU, no biases,

with out_scale = sqrt(m) for the paper's parameterisation. theta = [vec(W_1), ..., vec(W_L)] has
p = m + m d + m^2 (L - 1) entries; g(x; theta) = grad_theta f(x; theta).

Layout. Many parameter vectors are kept stacked so that one tensor program trains them all:
``G`` groups (trials of a lockstep batch) times ``S`` parameter sets per group (NeuralRBMLE-GA's K
arm-specific estimators, BootstrappedNN's q networks, or 1). Weights are stored input-major
("(in, out)", so a layer is ``a @ W``):

    W1      (G, B, d_b, S, m)   first layer, split into B column blocks of width d_b
    hidden  (G, S, m, m)        one per hidden-to-hidden layer (L - 2 of them)
    w       (G, S, m)           output layer

Block-sparse first layer (SPEC 1.3). With the disjoint encoding of the classification bandits
(SPEC 1.2, Problem.disjoint_block = d'), arm a's context is zero outside column block a, so
W_1 x = W_1[:, block a] x'. The first layer is stored as B = K blocks of d_b = d' columns and every
row is multiplied only with its own block: rows are kept grouped by block (core.training.History),
which turns the first layer into one batched matmul of B blocks — 1/K of the dense FLOPs and
identical results (the skipped products are exact zeros). Dense contexts are the case B = 1.

Initialisation (paper sec. 2.2, ``init="paper"``): every W_l, l < L, is block diagonal [[W, 0], [0, W]]
with W_ij ~ N(0, 2/m); W_L = (w^T, -w^T) with w_j ~ N(0, 1/m); then f(x; theta_0) = 0 whenever
x_j = x_{j + d/2}. When an input dimension is odd, its last column gets its own N(0, 2/m) entries
(project choice). ``init="default"`` is PyTorch's nn.Linear default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
with out_scale = 1 as in the baselines' reference code (no biases either way: eq. 2 has none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PAPER = "paper"
DEFAULT = "default"


def output_scale(width: int, init: str) -> float:
    return math.sqrt(width) if init == PAPER else 1.0


def _paper_layer(out_dim: int, in_dim: int, generator: torch.Generator) -> torch.Tensor:
    """[[W, 0], [0, W]] with W_ij ~ N(0, 2/m), returned as (out, in); m = out_dim."""
    half_out, half_in = out_dim // 2, in_dim // 2
    std = math.sqrt(2.0 / out_dim)
    block = torch.randn(half_out, half_in, generator=generator, dtype=torch.float64) * std
    layer = torch.zeros(out_dim, in_dim, dtype=torch.float64)
    layer[:half_out, :half_in] = block
    layer[half_out:, half_in:2 * half_in] = block
    if in_dim % 2:
        layer[:, -1] = torch.randn(out_dim, generator=generator, dtype=torch.float64) * std
    return layer


def _default_layer(out_dim: int, in_dim: int, generator: torch.Generator) -> torch.Tensor:
    bound = 1.0 / math.sqrt(in_dim)
    return (torch.rand(out_dim, in_dim, generator=generator, dtype=torch.float64) * 2.0 - 1.0) * bound


def initial_parameters(width: int, depth: int, dim: int, init: str, generator: torch.Generator):
    """theta_0 of one network as float64 CPU tensors in (in, out) layout: W1 (d, m), hidden [(m, m)], w (m,)."""
    if depth < 2:
        raise ValueError("depth L must be at least 2 (one hidden layer)")
    if init == PAPER:
        if width % 2:
            raise ValueError("the paper initialisation needs an even width m")
        first = _paper_layer(width, dim, generator).T.contiguous()
        hidden = [_paper_layer(width, width, generator).T.contiguous() for _ in range(depth - 2)]
        half = torch.randn(width // 2, generator=generator, dtype=torch.float64) / math.sqrt(width)
        output = torch.cat([half, -half])
    elif init == DEFAULT:
        first = _default_layer(width, dim, generator).T.contiguous()
        hidden = [_default_layer(width, width, generator).T.contiguous() for _ in range(depth - 2)]
        output = _default_layer(1, width, generator)[0]
    else:
        raise ValueError(f"unknown init {init!r}")
    return first, hidden, output


@dataclass
class StackedNetwork:
    """G x S networks of eq. (2) in the layout of the module docstring."""

    W1: torch.Tensor
    hidden: list[torch.Tensor]
    w: torch.Tensor
    out_scale: float

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(G, B, d_b, S, m)."""
        return tuple(self.W1.shape)  # type: ignore[return-value]

    def tensors(self) -> list[torch.Tensor]:
        return [self.W1, *self.hidden, self.w]

    def clone(self) -> "StackedNetwork":
        return StackedNetwork(self.W1.clone(), [h.clone() for h in self.hidden], self.w.clone(), self.out_scale)

    @classmethod
    def stack(cls, networks: list[tuple], blocks: int, sets: int, out_scale: float,
              device: str | torch.device, dtype: torch.dtype) -> "StackedNetwork":
        """Stack per-group lists of ``sets`` single networks (from :func:`initial_parameters`)."""
        firsts, hiddens, outputs = [], [], []
        for group in networks:
            firsts.append(torch.stack([first.reshape(blocks, -1, first.shape[1]) for first, _, _ in group], dim=2))
            hiddens.append([torch.stack([net[1][i] for net in group]) for i in range(len(group[0][1]))])
            outputs.append(torch.stack([output for _, _, output in group]))
        W1 = torch.stack(firsts).to(device=device, dtype=dtype).contiguous()
        hidden = [torch.stack([h[i] for h in hiddens]).to(device=device, dtype=dtype).contiguous()
                  for i in range(len(hiddens[0]))]
        w = torch.stack(outputs).to(device=device, dtype=dtype).contiguous()
        return cls(W1, hidden, w, out_scale)

    # ---- rows grouped by block: the history, trained on by core.training -----------------------

    def forward_rows(self, X: torch.Tensor):
        """f for rows ``X`` (G, B, n, d_b) (row i of block b uses W1[:, b]) under every parameter set.

        Returns f (G, B, n, S) and the cache for :meth:`backward_rows`."""
        G, B, n, d = X.shape
        S, m = self.W1.shape[3], self.W1.shape[4]
        pre = [torch.matmul(X, self.W1.reshape(G, B, d, S * m)).view(G, B, n, S, m)]
        act = torch.relu(pre[0])
        acts = [act]
        for W in self.hidden:
            pre.append(torch.einsum("gbnsi,gsij->gbnsj", act, W))
            act = torch.relu(pre[-1])
            acts.append(act)
        f = torch.einsum("gbnsm,gsm->gbns", act, self.w) * self.out_scale
        return f, (pre, acts)

    def backward_rows(self, X: torch.Tensor, cache, coef: torch.Tensor) -> list[torch.Tensor]:
        """sum_rows coef * g(x_row; theta_s) for every parameter set: grads in the layout of ``tensors()``.

        ``coef`` (G, B, n, S) is d(objective)/df per row and parameter set."""
        pre, acts = cache
        G, B, n, d = X.shape
        S, m = self.W1.shape[3], self.W1.shape[4]
        scaled = coef * self.out_scale
        grad_w = torch.einsum("gbns,gbnsm->gsm", scaled, acts[-1])
        delta = scaled.unsqueeze(-1) * self.w[:, None, None]
        grads_hidden = []
        for index in range(len(self.hidden) - 1, -1, -1):
            delta = torch.ops.aten.threshold_backward(delta, pre[index + 1], 0)
            grads_hidden.append(torch.einsum("gbnsi,gbnsj->gsij", acts[index], delta))
            delta = torch.einsum("gbnsj,gsij->gbnsi", delta, self.hidden[index])
        delta = torch.ops.aten.threshold_backward(delta, pre[0], 0)
        grad_W1 = torch.matmul(X.transpose(-1, -2), delta.view(G, B, n, S * m)).view(G, B, d, S, m)
        return [grad_W1, *reversed(grads_hidden), grad_w]

    # ---- one row per arm: the current contexts --------------------------------------------------

    def arm_parameters(self, block_of_arm: torch.Tensor, parameter_set: int | torch.Tensor = 0) -> "ArmParameters":
        """theta restricted to what f(x_{t,a}) depends on, one copy per arm: (G, K, ...).

        ``parameter_set`` picks one of the S sets, the same for all groups or one per group (G,)."""
        G = self.W1.shape[0]
        if isinstance(parameter_set, int):
            W1 = self.W1[:, :, :, parameter_set]
            hidden = [h[:, parameter_set] for h in self.hidden]
            w = self.w[:, parameter_set]
        else:
            rows = torch.arange(G, device=self.W1.device)
            W1 = self.W1[rows, :, :, parameter_set]
            hidden = [h[rows, parameter_set] for h in self.hidden]
            w = self.w[rows, parameter_set]
        K = block_of_arm.shape[0]
        W1 = W1[:, block_of_arm] if W1.shape[1] > 1 else W1.expand(G, K, *W1.shape[2:])
        return ArmParameters(W1, [h.unsqueeze(1).expand(G, K, *h.shape[1:]) for h in hidden],
                             w.unsqueeze(1).expand(G, K, w.shape[-1]), self.out_scale)


@dataclass
class ArmParameters:
    """One parameter vector per (group, arm), restricted to the arm's block of W1 (K rows of
    d_b columns) and the other layers: all that f(x_{t,a}) and g(x_{t,a}) involve (SPEC 1.3)."""

    W1: torch.Tensor            # (G, K, d_b, m)
    hidden: list[torch.Tensor]  # (G, K, m, m)
    w: torch.Tensor             # (G, K, m)
    out_scale: float

    def tensors(self) -> list[torch.Tensor]:
        return [self.W1, *self.hidden, self.w]

    def plus(self, other: "ArmParameters", weight: torch.Tensor) -> "ArmParameters":
        """self + weight * other, ``weight`` broadcast as (G, K) or scalar."""
        def scaled(a, b):
            factor = weight.reshape(*weight.shape, *([1] * (b.dim() - weight.dim()))) if torch.is_tensor(weight) else weight
            return a + factor * b
        return ArmParameters(scaled(self.W1, other.W1), [scaled(a, b) for a, b in zip(self.hidden, other.hidden)],
                             scaled(self.w, other.w), self.out_scale)

    def forward(self, x: torch.Tensor, with_gradient: bool = False):
        """f(x_{t,a}; theta_a) for x (G, K, d_b) (each arm's active block); with g(x_{t,a}; theta_a)
        as :class:`ArmParameters` when ``with_gradient``."""
        pre = [torch.einsum("gkd,gkdm->gkm", x, self.W1)]
        acts = [torch.relu(pre[0])]
        for W in self.hidden:
            pre.append(torch.einsum("gki,gkij->gkj", acts[-1], W))
            acts.append(torch.relu(pre[-1]))
        f = (acts[-1] * self.w).sum(-1) * self.out_scale
        if not with_gradient:
            return f, None
        grad_w = acts[-1] * self.out_scale
        delta = self.w * self.out_scale
        grads_hidden = []
        for index in range(len(self.hidden) - 1, -1, -1):
            delta = torch.ops.aten.threshold_backward(delta, pre[index + 1], 0)
            grads_hidden.append(acts[index].unsqueeze(-1) * delta.unsqueeze(-2))
            delta = torch.einsum("gkj,gkij->gki", delta, self.hidden[index])
        delta = torch.ops.aten.threshold_backward(delta, pre[0], 0)
        grad_W1 = x.unsqueeze(-1) * delta.unsqueeze(-2)
        return f, ArmParameters(grad_W1, list(reversed(grads_hidden)), grad_w, self.out_scale)


def rows_of_contexts(x_active: torch.Tensor, disjoint: bool) -> torch.Tensor:
    """Current contexts (G, K, d_b) as rows grouped by block: (G, K, 1, d_b) when arm a owns block a,
    else (G, 1, K, d) (one dense block)."""
    return x_active.unsqueeze(2) if disjoint else x_active.unsqueeze(1)


def rows_to_arms(f: torch.Tensor, disjoint: bool) -> torch.Tensor:
    """Inverse of :func:`rows_of_contexts` for outputs (G, B, n, S) -> (G, K, S)."""
    return f[:, :, 0] if disjoint else f[:, 0]
