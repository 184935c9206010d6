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
