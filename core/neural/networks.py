"""The network of the NeuralRBMLE paper (SPEC 1.3, paper eq. 2), stacked and block-sparse.

    f(x; theta) = out_scale * W_L sigma(W_{L-1} ... sigma(W_1 x)),   sigma = ReLU, no biases,

with out_scale = sqrt(m) for the paper's parameterisation. theta = [vec(W_1), ..., vec(W_L)] has
p = m + m d + m^2 (L - 1) entries; g(x; theta) = grad_theta f(x; theta).

Optional biases (the baselines' ``training="reference"``): the reference code of the baselines
(uclaml/NeuralTS, ``learner_diag.py`` lines 9-16 and ``neural_boost.py`` lines 8-18) uses
``nn.Linear`` layers *with* biases, so there

    f(x; theta) = out_scale * W_L sigma(... sigma(W_1 x + b_1) ... + b_{L-1}) + b_L,

theta = [vec(W_1), ..., vec(W_L), b_1, ..., b_{L-1}, b_L] (p + m (L - 1) + 1 entries) and g includes
the bias gradients, as BackPACK's ``grad_batch`` over ``func.parameters()`` does in
``learner_diag.py`` line 37. The biases are kept in :attr:`StackedNetwork.biases` (empty without).

Layout. Many parameter vectors are kept stacked so that one tensor program trains them all:
``G`` groups (trials of a lockstep batch) times ``S`` parameter sets per group (NeuralRBMLE-GA's K
arm-specific estimators, BootstrappedNN's q networks, or 1). Weights are stored input-major
("(in, out)", so a layer is ``a @ W``):

    W1      (G, B, d_b, S, m)   first layer, split into B column blocks of width d_b
    hidden  (G, S, m, m)        one per hidden-to-hidden layer (L - 2 of them)
    w       (G, S, m)           output layer
    biases  [(G, S, m)] * (L - 1) + [(G, S)]   hidden-layer biases, output bias (or none)

Block-sparse first layer (SPEC 1.3). With the disjoint encoding of the classification bandits
(SPEC 1.2, Problem.disjoint_block = d'), arm a's context is zero outside column block a, so
W_1 x = W_1[:, block a] x'. The first layer is stored as B = K blocks of d_b = d' columns and every
row is multiplied only with its own block: rows are kept grouped by block (core.neural.training.History),
which turns the first layer into one batched matmul of B blocks — 1/K of the dense FLOPs and
identical results (the skipped products are exact zeros). Dense contexts are the case B = 1.

Initialisation (paper sec. 2.2, ``init="paper"``): every W_l, l < L, is block diagonal [[W, 0], [0, W]]
with W_ij ~ N(0, 2/m); W_L = (w^T, -w^T) with w_j ~ N(0, 1/m); then f(x; theta_0) = 0 whenever
x_j = x_{j + d/2}. When an input dimension is odd, its last column gets its own N(0, 2/m) entries
(project choice). ``init="default"`` is PyTorch's nn.Linear default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
with out_scale = 1 as in the baselines' reference code. Eq. 2 has no biases; :func:`initial_biases`
draws nn.Linear's default bias initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), for the
baselines' reference recipe, after the weights (so the weights of a trial are the same with and
without biases).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

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


def initial_biases(width: int, depth: int, dim: int, generator: torch.Generator) -> list[torch.Tensor]:
    """nn.Linear's default bias initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), of one network:
    [b_1 (m,), ..., b_{L-1} (m,), b_L ()] as float64 CPU tensors (fan_in = d, then m)."""
    biases = []
    for layer in range(depth):
        fan_in = dim if layer == 0 else width
        size = (width,) if layer < depth - 1 else ()
        bound = 1.0 / math.sqrt(fan_in)
        biases.append((torch.rand(size, generator=generator, dtype=torch.float64) * 2.0 - 1.0) * bound)
    return biases


@dataclass
class StackedNetwork:
    """G x S networks of eq. (2) in the layout of the module docstring."""

    W1: torch.Tensor
    hidden: list[torch.Tensor]
    w: torch.Tensor
    out_scale: float
    biases: list[torch.Tensor] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(G, B, d_b, S, m)."""
        return tuple(self.W1.shape)  # type: ignore[return-value]

    def tensors(self) -> list[torch.Tensor]:
        """[W1, *hidden, w, *biases]: the order of :meth:`backward_rows`' gradients."""
        return [self.W1, *self.hidden, self.w, *self.biases]

    def clone(self) -> "StackedNetwork":
        return StackedNetwork(self.W1.clone(), [h.clone() for h in self.hidden], self.w.clone(), self.out_scale,
                              [b.clone() for b in self.biases])

    def zeros_like(self) -> "StackedNetwork":
        """A network of the same shapes with every parameter 0 (the reference recipe's decay target)."""
        return StackedNetwork(torch.zeros_like(self.W1), [torch.zeros_like(h) for h in self.hidden],
                              torch.zeros_like(self.w), self.out_scale, [torch.zeros_like(b) for b in self.biases])

    @classmethod
    def stack(cls, networks: list[list[tuple]], blocks: int, sets: int, out_scale: float,
              device: str | torch.device, dtype: torch.dtype) -> "StackedNetwork":
        """Stack per-group lists of ``sets`` single networks: (W1, hidden, w) from
        :func:`initial_parameters`, or (W1, hidden, w, biases) with :func:`initial_biases`."""
        firsts, hiddens, outputs, biases = [], [], [], []
        for group in networks:
            firsts.append(torch.stack([net[0].reshape(blocks, -1, net[0].shape[1]) for net in group], dim=2))
            hiddens.append([torch.stack([net[1][i] for net in group]) for i in range(len(group[0][1]))])
            outputs.append(torch.stack([net[2] for net in group]))
            if len(group[0]) > 3:
                biases.append([torch.stack([net[3][i] for net in group]) for i in range(len(group[0][3]))])
        place = dict(device=device, dtype=dtype)
        W1 = torch.stack(firsts).to(**place).contiguous()
        hidden = [torch.stack([h[i] for h in hiddens]).to(**place).contiguous() for i in range(len(hiddens[0]))]
        w = torch.stack(outputs).to(**place).contiguous()
        stacked_biases = ([torch.stack([b[i] for b in biases]).to(**place).contiguous() for i in range(len(biases[0]))]
                          if biases else [])
        return cls(W1, hidden, w, out_scale, stacked_biases)

    # ---- rows grouped by block: the history, trained on by core.neural.training ----------------

    def forward_rows(self, X: torch.Tensor):
        """f for rows ``X`` (G, B, n, d_b) (row i of block b uses W1[:, b]) under every parameter set.

        Returns f (G, B, n, S) and the cache for :meth:`backward_rows`."""
        G, B, n, d = X.shape
        S, m = self.W1.shape[3], self.W1.shape[4]
        biases = self.biases
        pre = [torch.matmul(X, self.W1.reshape(G, B, d, S * m)).view(G, B, n, S, m)]
        if biases:
            pre[0] = pre[0] + biases[0][:, None, None]
        act = torch.relu(pre[0])
        acts = [act]
        for index, W in enumerate(self.hidden):
            pre.append(torch.einsum("gbnsi,gsij->gbnsj", act, W))
            if biases:
                pre[-1] = pre[-1] + biases[index + 1][:, None, None]
            act = torch.relu(pre[-1])
            acts.append(act)
        f = torch.einsum("gbnsm,gsm->gbns", act, self.w) * self.out_scale
        if biases:
            f = f + biases[-1][:, None, None]
        return f, (pre, acts)

    def backward_rows(self, X: torch.Tensor, cache, coef: torch.Tensor) -> list[torch.Tensor]:
        """sum_rows coef * g(x_row; theta_s) for every parameter set: grads in the layout of ``tensors()``.

        ``coef`` (G, B, n, S) is d(objective)/df per row and parameter set."""
        pre, acts = cache
        G, B, n, d = X.shape
        S, m = self.W1.shape[3], self.W1.shape[4]
        with_biases = bool(self.biases)
        scaled = coef * self.out_scale
        grad_w = torch.einsum("gbns,gbnsm->gsm", scaled, acts[-1])
        delta = scaled.unsqueeze(-1) * self.w[:, None, None]
        grads_hidden, grads_bias = [], []
        for index in range(len(self.hidden) - 1, -1, -1):
            delta = torch.ops.aten.threshold_backward(delta, pre[index + 1], 0)
            if with_biases:
                grads_bias.append(delta.sum(dim=(1, 2)))
            grads_hidden.append(torch.einsum("gbnsi,gbnsj->gsij", acts[index], delta))
            delta = torch.einsum("gbnsj,gsij->gbnsi", delta, self.hidden[index])
        delta = torch.ops.aten.threshold_backward(delta, pre[0], 0)
        grad_W1 = torch.matmul(X.transpose(-1, -2), delta.view(G, B, n, S * m)).view(G, B, d, S, m)
        grads = [grad_W1, *reversed(grads_hidden), grad_w]
        if with_biases:
            grads_bias.append(delta.sum(dim=(1, 2)))
            grads += [*reversed(grads_bias), coef.sum(dim=(1, 2))]
        return grads

    # ---- one row per arm: the current contexts --------------------------------------------------

    def arm_parameters(self, block_of_arm: torch.Tensor, parameter_set: int | torch.Tensor = 0) -> "ArmParameters":
        """theta restricted to what f(x_{t,a}) depends on, one copy per arm: (G, K, ...).

        ``parameter_set`` picks one of the S sets, the same for all groups or one per group (G,)."""
        G = self.W1.shape[0]
        if isinstance(parameter_set, int):
            pick = lambda t: t[:, parameter_set]  # noqa: E731
            W1 = self.W1[:, :, :, parameter_set]
        else:
            rows = torch.arange(G, device=self.W1.device)
            pick = lambda t: t[rows, parameter_set]  # noqa: E731
            W1 = self.W1[rows, :, :, parameter_set]
        hidden, w, biases = [pick(h) for h in self.hidden], pick(self.w), [pick(b) for b in self.biases]
        K = block_of_arm.shape[0]
        W1 = W1[:, block_of_arm] if W1.shape[1] > 1 else W1.expand(G, K, *W1.shape[2:])
        per_arm = lambda t: t.unsqueeze(1).expand(G, K, *t.shape[1:])  # noqa: E731
        return ArmParameters(W1, [per_arm(h) for h in hidden], per_arm(w), self.out_scale,
                             [per_arm(b) for b in biases])


@dataclass
class ArmParameters:
    """One parameter vector per (group, arm), restricted to the arm's block of W1 (K rows of
    d_b columns) and the other layers: all that f(x_{t,a}) and g(x_{t,a}) involve (SPEC 1.3)."""

    W1: torch.Tensor            # (G, K, d_b, m)
    hidden: list[torch.Tensor]  # (G, K, m, m)
    w: torch.Tensor             # (G, K, m)
    out_scale: float
    biases: list[torch.Tensor] = field(default_factory=list)  # [(G, K, m)] * (L - 1) + [(G, K)], or none

    def tensors(self) -> list[torch.Tensor]:
        return [self.W1, *self.hidden, self.w, *self.biases]

    def plus(self, other: "ArmParameters", weight: torch.Tensor) -> "ArmParameters":
        """self + weight * other, ``weight`` broadcast as (G, K) or scalar."""
        def scaled(a, b):
            factor = weight.reshape(*weight.shape, *([1] * (b.dim() - weight.dim()))) if torch.is_tensor(weight) else weight
            return a + factor * b
        return ArmParameters(scaled(self.W1, other.W1), [scaled(a, b) for a, b in zip(self.hidden, other.hidden)],
                             scaled(self.w, other.w), self.out_scale,
                             [scaled(a, b) for a, b in zip(self.biases, other.biases)])

    def select(self, rows: torch.Tensor, arms: torch.Tensor) -> "ArmParameters":
        """The entries (rows[i], arms[i]) as ArmParameters with K = 1."""
        take = lambda t: t[rows, arms].unsqueeze(1)  # noqa: E731
        return ArmParameters(take(self.W1), [take(h) for h in self.hidden], take(self.w), self.out_scale,
                             [take(b) for b in self.biases])

    def forward(self, x: torch.Tensor, with_gradient: bool = False):
        """f(x_{t,a}; theta_a) for x (G, K, d_b) (each arm's active block); with g(x_{t,a}; theta_a)
        as :class:`ArmParameters` when ``with_gradient``."""
        biases = self.biases
        pre = [torch.einsum("gkd,gkdm->gkm", x, self.W1)]
        if biases:
            pre[0] = pre[0] + biases[0]
        acts = [torch.relu(pre[0])]
        for index, W in enumerate(self.hidden):
            pre.append(torch.einsum("gki,gkij->gkj", acts[-1], W))
            if biases:
                pre[-1] = pre[-1] + biases[index + 1]
            acts.append(torch.relu(pre[-1]))
        f = (acts[-1] * self.w).sum(-1) * self.out_scale
        if biases:
            f = f + biases[-1]
        if not with_gradient:
            return f, None
        grad_w = acts[-1] * self.out_scale
        delta = self.w * self.out_scale
        grads_hidden, grads_bias = [], []
        for index in range(len(self.hidden) - 1, -1, -1):
            delta = torch.ops.aten.threshold_backward(delta, pre[index + 1], 0)
            grads_bias.append(delta)
            grads_hidden.append(acts[index].unsqueeze(-1) * delta.unsqueeze(-2))
            delta = torch.einsum("gkj,gkij->gki", delta, self.hidden[index])
        delta = torch.ops.aten.threshold_backward(delta, pre[0], 0)
        grads_bias.append(delta)
        grad_W1 = x.unsqueeze(-1) * delta.unsqueeze(-2)
        grad_biases = [*reversed(grads_bias), torch.ones_like(f)] if biases else []
        return f, ArmParameters(grad_W1, list(reversed(grads_hidden)), grad_w, self.out_scale, grad_biases)


def rows_of_contexts(x_active: torch.Tensor, disjoint: bool) -> torch.Tensor:
    """Current contexts (G, K, d_b) as rows grouped by block: (G, K, 1, d_b) when arm a owns block a,
    else (G, 1, K, d) (one dense block)."""
    return x_active.unsqueeze(2) if disjoint else x_active.unsqueeze(1)


def rows_to_arms(f: torch.Tensor, disjoint: bool) -> torch.Tensor:
    """Inverse of :func:`rows_of_contexts` for outputs (G, B, n, S) -> (G, K, S)."""
    return f[:, :, 0] if disjoint else f[:, 0]
