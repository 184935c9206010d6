"""The batched gradient-ascent optimiser shared by every neural algorithm (SPEC 1.4-1.5).

All neural methods of SPEC 1 fit their networks the same way: J full-batch gradient steps with step
size eta on the regularised surrogate log-likelihood (paper eq. 9-10)

    l_lambda(F_t; theta) = sum_{s<t} (r_s f(x_s; theta) - b(f(x_s; theta))) - (m lambda / 2) ||theta - theta_0||^2,

plus, for NeuralRBMLE-GA, the reward bias alpha(t) f(x_{t,a}; theta) (eq. 12). With the Gaussian
likelihood this is gradient descent on the squared loss with weight decay of NeuralUCB / NeuralTS,
so the baselines use the same code. ``objective_scale="mean"`` divides the whole objective by the
history length max(1, t - 1): the same maximiser, a step size that does not grow with t.

One call trains G x S stacked networks (core.networks) at once: per step one forward and one
backward pass over the history written as batched matmuls, no autograd graph and no Python loop over
arms or trials. The history is kept grouped by first-layer block (the block-sparse layer of SPEC 1.3).

One hidden layer (L = 2, the paper's experiments, SPEC 1.6) has a fused path,
:func:`_ascend_one_hidden_layer`: the gradients are derived by hand and a step is ten tensor
operations on buffers allocated once per call, with the trial axis G and the block axis B merged
into the batch of one ``bmm`` (so a lockstep batch of trials costs one batched matmul per product,
not one per trial). It iterates on Delta = theta - theta_0 (what the ridge term pulls towards 0):

    pre   = X W1_0 + X Delta1            (X W1_0 is fixed for the round: one baddbmm per step)
    act   = relu(pre)
    f     = act V,                       V = sqrt(m)-scaled output layer as a block-diagonal (S m, S) matrix
    coef  = c1 (d/df log-likelihood * mask + bias)
    Delta1 <- (1 - c2) Delta1 + X^T (coef V^T * 1[pre > 0])          (one baddbmm_)
    V      <- V + c2 (V_0 - V) + out_scale^2 * diag(act^T coef)

which is exactly the update theta <- theta + c1 grad - c2 (theta - theta_0) of the generic path.
The block-diagonal form of the output layer turns its three products (f, the back-propagated
signal and the output gradient) into batched matmuls; they cost S times the minimal FLOPs of those
small products, a few percent of the first layer's.
"""

from __future__ import annotations

import numpy as np
import torch

from banditsweep.core import likelihoods
from banditsweep.core.networks import StackedNetwork


class History:
    """Observed (x, r) of G trials, grouped by first-layer block, on the device.

    Block b holds ``reserved`` leading rows for the current round's contexts (used by GA's reward
    bias), then its observations. ``mask`` (G, B, n, S_mask) weighs each row in the likelihood:
    1 for an observation, 0 for padding and reserved rows, and BootstrappedNN's per-network
    resampling weights when S_mask > 1. Rows are zero-padded to the longest block of the batch.
    """

    def __init__(self, groups: int, blocks: int, block_dim: int, reserved: int, mask_sets: int,
                 device, dtype, capacity: int = 64):
        self.groups, self.blocks, self.block_dim = groups, blocks, block_dim
        self.reserved, self.mask_sets = reserved, mask_sets
        self.device, self.dtype = device, dtype
        self.counts = np.zeros((groups, blocks), dtype=np.int64)
        self.rows = np.zeros(groups, dtype=np.int64)
        # Arrival order of each group's observations: (block, slot), for per-row draws (DeepFPL).
        self.positions: list[list[tuple[int, int]]] = [[] for _ in range(groups)]
        self._allocate(reserved + capacity)

    def _allocate(self, capacity: int) -> None:
        G, B = self.groups, self.blocks
        old = getattr(self, "X", None)
        X = torch.zeros(G, B, capacity, self.block_dim, device=self.device, dtype=self.dtype)
        reward = torch.zeros(G, B, capacity, device=self.device, dtype=self.dtype)
        mask = torch.zeros(G, B, capacity, self.mask_sets, device=self.device, dtype=self.dtype)
        if old is not None:
            used = old.shape[2]
            X[:, :, :used] = old
            reward[:, :, :used] = self.reward
            mask[:, :, :used] = self.mask
        self.X, self.reward, self.mask = X, reward, mask

    @property
    def used(self) -> int:
        """Rows per block in use: reserved + the longest block of the batch."""
        return self.reserved + int(self.counts.max(initial=0))

    def append(self, x_rows: torch.Tensor, blocks: np.ndarray, rewards: np.ndarray,
               weights: np.ndarray | None = None) -> None:
        """Add one observation per group: x_rows (G, d_b) into ``blocks`` (G,), with mask ``weights`` (G, S_mask)."""
        slots = self.reserved + self.counts[np.arange(self.groups), blocks]
        if int(slots.max()) >= self.X.shape[2]:
            self._allocate(2 * self.X.shape[2])
        g = torch.arange(self.groups, device=self.device)
        b = torch.as_tensor(blocks, device=self.device)
        s = torch.as_tensor(slots, device=self.device)
        self.X[g, b, s] = x_rows.to(self.dtype)
        self.reward[g, b, s] = torch.as_tensor(rewards, device=self.device, dtype=self.dtype)
        w = np.ones((self.groups, self.mask_sets)) if weights is None else weights
        self.mask[g, b, s] = torch.as_tensor(w, device=self.device, dtype=self.dtype)
        for group in range(self.groups):
            self.positions[group].append((int(blocks[group]), int(slots[group])))
        self.counts[np.arange(self.groups), blocks] += 1
        self.rows += 1

    def set_current(self, rows: torch.Tensor) -> None:
        """Write the current contexts, rows (G, B, reserved, d_b), into the reserved slots."""
        self.X[:, :, :self.reserved] = rows

    def view(self):
        """(X, reward, mask) over the used rows, contiguous: one copy per round, not per step."""
        used = self.used
        return (self.X[:, :, :used].contiguous(), self.reward[:, :, :used].contiguous(),
                self.mask[:, :, :used].contiguous())


def per_group(values, like: torch.Tensor, ndim: int) -> torch.Tensor:
    """A per-group scalar (G,) shaped to broadcast against a (G, ...) tensor of ``ndim`` dims."""
    tensor = torch.as_tensor(np.asarray(values, dtype=np.float64), device=like.device, dtype=like.dtype)
    return tensor.reshape(-1, *([1] * (ndim - 1)))


def gradient_ascent(network: StackedNetwork, initial: StackedNetwork, X: torch.Tensor, reward: torch.Tensor,
                    mask: torch.Tensor, likelihood: str, steps: int, step_size: np.ndarray,
                    ridge: np.ndarray, bias: torch.Tensor | None = None) -> None:
    """J steps of theta <- theta + c1 * grad l(F_t; theta) + c1 * grad bias - c2 (theta - theta_0), in place.

    ``step_size`` c1 = eta * scale and ``ridge`` c2 = eta * scale * m * lambda are per group (G,);
    ``bias`` (G, B, n, S) adds d(bias)/df per row (GA: alpha(t) on arm a's current context for set a).
    """
    ascend = _ascend_one_hidden_layer if not network.hidden else _ascend_layers
    ascend(network, initial, X, reward, mask, likelihood, steps, step_size, ridge, bias)


def _ascend_layers(network: StackedNetwork, initial: StackedNetwork, X: torch.Tensor, reward: torch.Tensor,
                   mask: torch.Tensor, likelihood: str, steps: int, step_size: np.ndarray,
                   ridge: np.ndarray, bias: torch.Tensor | None) -> None:
    """:func:`gradient_ascent` for any depth, through StackedNetwork.forward_rows / backward_rows."""
    params = network.tensors()
    c1 = [per_group(step_size, p, p.dim()) for p in params]
    keep = [1.0 - per_group(ridge, p, p.dim()) for p in params]
    pull = [per_group(ridge, p, p.dim()) * p0 for p, p0 in zip(params, initial.tensors())]
    reward = reward.unsqueeze(-1)
    for _ in range(steps):
        f, cache = network.forward_rows(X)
        coef = likelihoods.derivative(likelihood, reward, f) * mask
        if bias is not None:
            coef = coef + bias
        grads = network.backward_rows(X, cache, coef)
        for p, grad, factor, kept, pulled in zip(params, grads, c1, keep, pull):
            p.mul_(kept).add_(pulled).addcmul_(grad, factor)


def _ascend_one_hidden_layer(network: StackedNetwork, initial: StackedNetwork, X: torch.Tensor,
                             reward: torch.Tensor, mask: torch.Tensor, likelihood: str, steps: int,
                             step_size: np.ndarray, ridge: np.ndarray, bias: torch.Tensor | None) -> None:
    """:func:`gradient_ascent` for L = 2 as fused batched matmuls (module docstring; SPEC 1.3-1.4)."""
    if steps == 0:
        return
    G, B, n, d = X.shape
    S, m = network.W1.shape[3], network.W1.shape[4]
    scale = network.out_scale
    batch, rows, cols = G * B, B * n, S * m
    Xb = X.reshape(batch, n, d)
    Xt = Xb.transpose(1, 2)
    delta = (network.W1 - initial.W1).reshape(batch, d, cols)
    fixed = torch.bmm(Xb, initial.W1.reshape(batch, d, cols))  # X W1_0, constant during the call
    act = torch.empty_like(fixed)
    back = torch.empty_like(fixed)
    act_rows, back_rows = act.view(G, rows, cols), back.view(G, rows, cols)
    # Output layer, sqrt(m)-scaled, as the block-diagonal (S m, S) matrix of each group: V[s m + j, s] = s_out w[s, j].
    V = torch.zeros(G, S, m, S, device=X.device, dtype=X.dtype)
    V_diagonal = torch.diagonal(V, dim1=1, dim2=3)  # (G, m, S) view
    V_diagonal.copy_(network.w.transpose(1, 2) * scale)
    V0_diagonal = initial.w.transpose(1, 2) * scale
    V_matrix = V.view(G, cols, S)
    V_transposed = V_matrix.transpose(1, 2)
    grad_V = torch.empty(G, cols, S, device=X.device, dtype=X.dtype)
    grad_V_diagonal = torch.diagonal(grad_V.view(G, S, m, S), dim1=1, dim2=3)
    f = torch.empty(G, rows, S, device=X.device, dtype=X.dtype)
    f_rows = f.view(G, B, n, S)
    coef = torch.empty(G, B, n, S, device=X.device, dtype=X.dtype)
    coef_rows = coef.view(G, rows, S)
    c1 = per_group(step_size, X, 4)
    c2 = per_group(ridge, X, 3)
    uniform_ridge = bool(np.all(np.asarray(ridge) == np.asarray(ridge).flat[0]))
    keep = 1.0 - float(np.asarray(ridge).flat[0])
    keep_t = (1.0 - c2).reshape(G, 1, 1, 1).expand(G, B, 1, 1).reshape(batch, 1, 1)
    reward = reward.unsqueeze(-1)
    weight = mask * c1  # (G, B, n, S_mask)
    gaussian = likelihood == "gaussian"
    if gaussian:  # c1 ((r - f) mask + bias) = offset - f * weight
        offset = (reward * weight).expand(G, B, n, S)
        offset = offset + bias * c1 if bias is not None else offset.contiguous()
    elif bias is not None:
        bias_c1 = bias * c1
    for _ in range(steps):
        torch.baddbmm(fixed, Xb, delta, out=act)
        act.relu_()
        torch.bmm(act_rows, V_matrix, out=f)
        if gaussian:
            torch.addcmul(offset, f_rows, weight, value=-1.0, out=coef)
        else:
            torch.mul(likelihoods.derivative(likelihood, reward, f_rows), weight, out=coef)
            if bias is not None:
                coef.add_(bias_c1)
        torch.bmm(coef_rows, V_transposed, out=back_rows)
        torch.bmm(act_rows.transpose(1, 2), coef_rows, out=grad_V)
        torch.ops.aten.threshold_backward.grad_input(back, act, 0, grad_input=back)
        if uniform_ridge:
            delta.baddbmm_(Xt, back, beta=keep)
        else:
            delta.mul_(keep_t).baddbmm_(Xt, back)
        V_diagonal.lerp_(V0_diagonal, c2).add_(grad_V_diagonal, alpha=scale * scale)
    torch.add(initial.W1, delta.view(network.W1.shape), out=network.W1)
    torch.div(V_diagonal.transpose(1, 2), scale, out=network.w)


def log_likelihood(network: StackedNetwork, initial: StackedNetwork, X: torch.Tensor, reward: torch.Tensor,
                   mask: torch.Tensor, likelihood: str, ridge: np.ndarray):
    """l_lambda(F_t; theta_s) of eq. (10) for every (group, set): (G, S); also f on all rows (G, B, n, S).

    ``ridge`` is m * lambda per group."""
    f, _ = network.forward_rows(X)
    value = (likelihoods.value(likelihood, reward.unsqueeze(-1), f) * mask).sum(dim=(1, 2))
    penalty = sum(((p - p0) ** 2).flatten(start_dim=2).sum(-1)
                  for p, p0 in zip(_per_set(network), _per_set(initial)))
    return value - 0.5 * per_group(ridge, value, 2) * penalty, f


def _per_set(network: StackedNetwork) -> list[torch.Tensor]:
    """Every parameter tensor with the set axis second: (G, S, ...)."""
    return [network.W1.permute(0, 3, 1, 2, 4), *network.hidden, network.w]


def intra_op_threads(history_rows: float, block_dim: int, width: int, parameter_sets: int, groups: int = 1,
                     cores: int | None = None, flops_per_thread: float = 2.0e9) -> int:
    """How many intra-op threads pay off for one gradient step of this size (a pure function).

    A step's first-layer work is ~4 n d' S m FLOPs per trial (SPEC 1.7, block-sparse: the forward
    and the weight-gradient products) with n = ``history_rows`` (e.g. half the horizon for a whole
    trial). Small steps are a few dozen microseconds of work per operation: there, waking a second
    thread costs more than it saves, and on a shared machine it can stall every operation for a
    scheduler time slice. One thread per ``flops_per_thread`` FLOPs of step work, at least one, at most
    ``cores`` (default: the CPUs of this process). ``torch.set_num_threads`` is process-global, so
    this only advises: the process that owns the trial (a trial actor, benchmarks/neural_step.py)
    applies it; library code never does.
    """
    import os
    available = cores if cores is not None else len(os.sched_getaffinity(0))
    work = 4.0 * groups * history_rows * block_dim * parameter_sets * width
    return int(max(1, min(available, work // flops_per_thread)))
