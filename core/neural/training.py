"""The batched gradient-ascent optimiser shared by every neural algorithm (SPEC 1.4-1.5).

All neural methods of SPEC 1 fit their networks the same way: J full-batch gradient steps with step
size eta on the regularised surrogate log-likelihood (paper eq. 9-10)

    l_lambda(F_t; theta) = sum_{s<t} (r_s f(x_s; theta) - b(f(x_s; theta))) - (m lambda / 2) ||theta - theta_0||^2,

plus, for NeuralRBMLE-GA, the reward bias alpha(t) f(x_{t,a}; theta) (eq. 12). With the Gaussian
likelihood this is gradient descent on the squared loss with weight decay of NeuralUCB / NeuralTS,
so the baselines use the same code. ``objective_scale="mean"`` divides the whole objective by the
history length max(1, t - 1): the same maximiser, a step size that does not grow with t.

The baselines' reference recipe (``training="reference"`` of NeuralUCB, NeuralTS, DeepFPL and
BootstrappedNN; uclaml/NeuralTS ``learner_diag.py`` lines 47-64, ``neural_boost.py`` lines 38-55) is
the same update with other constants. One ``optim.SGD(lr, weight_decay=wd)`` step on
``nn.MSELoss()`` (the mean of (f - r)^2 over n rows, gradient 2 (f - r) / n) is

    theta <- theta - lr (2/n sum_s (f(x_s) - r_s) g(x_s) + wd theta)
           = theta + c1 sum_s w_s (r_s - f(x_s)) g(x_s) - c2 (theta - 0),

i.e. this optimiser's Gaussian step with c1 = 2 lr, row weights w_s = 1/n (``mask`` divided by its
count), c2 = lr wd and theta_0 replaced by a zero network (weight decay pulls towards 0, not
theta_0); biases included (:attr:`StackedNetwork.biases`). NeuralRBMLE-GA/-PC keep eq. (10).

One call trains G x S stacked networks (core.neural.networks) at once: per step one forward and one
backward pass over the history written as batched matmuls, no autograd graph and no Python loop over
arms or trials. The history is kept grouped by first-layer block (the block-sparse layer of SPEC 1.3).

One hidden layer (L = 2, the paper's experiments, SPEC 1.6) has a fused path,
:func:`ascend_one_hidden_layer`: the gradients are derived by hand and a step is ten tensor
operations on buffers allocated once per call, with the trial axis G and the block axis B merged
into the batch of one ``bmm`` (so a lockstep batch of trials costs one batched matmul per product,
not one per trial). It iterates on Delta = theta - theta_0 (what the ridge term pulls towards 0):

    pre   = X W1_0 + X Delta1            (X W1_0 is fixed for the round: one baddbmm per step)
    act   = relu(pre)                    (S m columns: S parameter sets of m hidden units)
    f[s]  = sum_j act[s, j] v[s, j],     v = out_scale w, the sqrt(m)-scaled output layer
    coef  = c1 (d/df log-likelihood * mask + bias)
    Delta1 <- (1 - c2) Delta1 + X^T (coef[s] v[s, j] * 1[pre > 0])   (one baddbmm_)
    v      <- v + c2 (v_0 - v) + out_scale^2 sum_rows act[s, j] coef[s]

which is exactly the update theta <- theta + c1 grad - c2 (theta - theta_0) of the generic path.
The output layer's three products (f, the back-propagated signal and the output gradient) are
broadcast multiplications and sums over the (rows, S, m) view of the activations: the S output
weights act on disjoint columns. (Written as one batched matmul with the block-diagonal (S m, S)
matrix they cost S times that work, and a matmul library's kernels for a 7- or 10-column product
can be slower still: on an AMD EPYC, MKL ran them at ~4 GFLOP/s and they took 60% of a GA step.)

Three refinements keep the first layer at the work it really needs, all exact (tests compare them
with the layer-by-layer path and dense autograd):

- Buckets (:func:`bucket_blocks`). A batched matmul needs equal heights, so blocks are padded to the
  tallest; a policy that mostly plays one arm (Shuttle's majority class holds 78% of the rows) would
  make every block as tall as that one. Blocks of similar height share a bucket, one set of products
  per bucket.
- Gram form (:class:`_Bucket`). While a block holds fewer rows n than its d' columns, the steps run
  on X Delta = E through E <- (1 - c2) E + (X X^T) back and never touch the (d', S m) weights:
  n^2 instead of n d' per row and column (MNIST: d' = 784, a few dozen rows per block early on).
- Threads. The G x S optimisations are independent (GA's K arms, BootstrappedNN's q networks, the
  trials of a batch); on a CPU, a step large enough (:data:`MIN_CHUNK_FLOPS`) is split over the
  process's intra-op threads, one chunk of sets or trials each.

Its length is that of one subject: the optimiser of every neural method, forward and backward
written out once for each of these forms.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import torch

from banditsweep.core.neural import likelihoods
from banditsweep.core.neural.networks import StackedNetwork


class History:
    """Observed (x, r) of G trials, grouped by first-layer block, on the device.

    Block b holds ``reserved`` leading rows for the current round's contexts (used by GA's reward
    bias), then its observations. ``mask`` (G, B, n, S_mask) weighs each row in the likelihood:
    1 for an observation, 0 for padding and reserved rows, and BootstrappedNN's per-network
    resampling weights when S_mask > 1. Rows are zero-padded to the longest block of the batch.
    """

    STATE = ("groups", "blocks", "block_dim", "reserved", "mask_sets", "device", "dtype", "counts", "rows",
             "positions", "X", "reward", "mask")

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
                    ridge: np.ndarray, bias: torch.Tensor | None = None, workers: int | None = None,
                    block_rows: np.ndarray | None = None) -> None:
    """J steps of theta <- theta + c1 * grad l(F_t; theta) + c1 * grad bias - c2 (theta - theta_0), in place.

    ``step_size`` c1 = eta * scale and ``ridge`` c2 = eta * scale * m * lambda are per group (G,);
    ``bias`` (G, B, n, S) adds d(bias)/df per row (GA: alpha(t) on arm a's current context for set a).
    ``block_rows`` (G, B), the rows in use per block (the rest of ``n`` is zero padding), lets the
    one-hidden-layer path skip the padding. On a CPU the G x S independent optimisations are split
    over ``workers`` threads (default: torch's intra-op thread count; each thread then runs its
    operations single-threaded).
    """
    ascend = ascend_one_hidden_layer if not network.hidden else ascend_layers
    G, S = network.W1.shape[0], network.W1.shape[3]
    workers = torch.get_num_threads() if workers is None else workers
    step_flops = 4.0 * float(np.prod(X.shape)) * S * network.W1.shape[4]
    chunks = independent_chunks(G, S, workers, step_flops) if X.device.type == "cpu" else []
    if len(chunks) <= 1:
        ascend(network, initial, X, reward, mask, likelihood, steps, step_size, ridge, bias, block_rows)
        return

    def run(chunk):
        groups, sets = chunk
        masked = mask[groups, ..., sets] if mask.shape[-1] == S and S > 1 else mask[groups]
        ascend(_select(network, groups, sets), _select(initial, groups, sets), X[groups], reward[groups],
               masked, likelihood, steps, step_size[groups], ridge[groups],
               None if bias is None else bias[groups, ..., sets],
               None if block_rows is None else np.asarray(block_rows)[groups])

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per chunk: the chunks are the parallelism
    try:
        list(_pool(len(chunks)).map(run, chunks))
    finally:
        torch.set_num_threads(threads)


#: Least first-layer FLOPs per step for a thread of its own: below this, waking threads and
#: contending for the interpreter costs more than the split saves (measured: GA on covertype's
#: shape runs 1.1x faster on 2 threads at 30 history rows per block, 1.9x at 140, slower below 12).
MIN_CHUNK_FLOPS = 2.5e7


def independent_chunks(groups: int, sets: int, workers: int, step_flops: float = float("inf")
                        ) -> list[tuple[slice, slice]]:
    """Split the G x S independent optimisations into at most ``workers`` parts (along S, else G).

    GA's K arm-specific networks, BootstrappedNN's q networks and the trials of a lockstep batch
    share nothing during training: a chunk is a self-contained problem for one CPU thread.
    ``step_flops`` (the first-layer FLOPs of one step, all chunks) limits the parts to one per
    :data:`MIN_CHUNK_FLOPS`."""
    if MIN_CHUNK_FLOPS > 0:
        workers = min(workers, int(step_flops // MIN_CHUNK_FLOPS))
    if workers <= 1:
        return []
    axis, size = (1, sets) if sets >= workers or sets >= groups else (0, groups)
    parts = min(workers, size)
    bounds = np.linspace(0, size, parts + 1).round().astype(int)
    full = slice(None)
    return [(full, slice(a, b)) if axis else (slice(a, b), full) for a, b in zip(bounds[:-1], bounds[1:])]


def _select(network: StackedNetwork, groups: slice, sets: slice) -> StackedNetwork:
    """A view of some groups and parameter sets of a stacked network (writes go through)."""
    return StackedNetwork(network.W1[groups, :, :, sets], [h[groups, sets] for h in network.hidden],
                          network.w[groups, sets], network.out_scale, [b[groups, sets] for b in network.biases])


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="banditsweep-ascent")
    return _POOLS[workers]


def ascend_layers(network: StackedNetwork, initial: StackedNetwork, X: torch.Tensor, reward: torch.Tensor,
                   mask: torch.Tensor, likelihood: str, steps: int, step_size: np.ndarray,
                   ridge: np.ndarray, bias: torch.Tensor | None, block_rows: np.ndarray | None = None) -> None:
    """:func:`gradient_ascent` for any depth, through StackedNetwork.forward_rows / backward_rows
    (over all n rows: ``block_rows`` is accepted for the common signature; padding rows are zeros).
    Public as the reference path the fused one-hidden-layer form is checked against."""
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


def ascend_one_hidden_layer(network: StackedNetwork, initial: StackedNetwork, X: torch.Tensor,
                             reward: torch.Tensor, mask: torch.Tensor, likelihood: str, steps: int,
                             step_size: np.ndarray, ridge: np.ndarray, bias: torch.Tensor | None,
                             block_rows: np.ndarray | None = None) -> None:
    """:func:`gradient_ascent` for L = 2 as fused batched matmuls (module docstring; SPEC 1.3-1.4).

    The blocks are split into buckets of similar height (:func:`bucket_blocks`); each bucket's first
    layer is one batched matmul over exactly its rows, so a block that holds most of the history does
    not pad every other block to its height. A bucket shorter than d' runs in the Gram form of
    :class:`_Bucket` (no weight traffic during the steps)."""
    if steps == 0:
        return
    G, B, n, d = X.shape
    S, m = network.W1.shape[3], network.W1.shape[4]
    scale = network.out_scale
    cols = S * m
    heights = np.full(B, n) if block_rows is None else np.asarray(block_rows).reshape(G, B).max(axis=0)
    buckets = bucket_blocks(heights, d, G * cols, X.device.type)
    # Output layer, sqrt(m)-scaled: v[s, j] = s_out w[s, j], broadcast over the rows (module docstring).
    v = network.w * scale                        # (G, S, m)
    v0 = initial.w * scale
    v_rows = v.unsqueeze(1)                      # (G, 1, S, m)
    grad_v = torch.empty_like(v)
    c1 = per_group(step_size, X, 4)
    c2 = per_group(ridge, X, 3)
    ridge = np.asarray(ridge, dtype=np.float64)
    keep = 1.0 - float(ridge.flat[0]) if np.all(ridge == ridge.flat[0]) else None
    gaussian = likelihood == "gaussian"
    # Biases (the baselines' reference recipe): b1 (G, S m) is shared by all blocks, b2 (G, S).
    with_biases = bool(network.biases)
    if with_biases:
        b1, b2 = network.biases[0].reshape(G, cols).clone(), network.biases[1].clone()  # written back at the end
        b1_0, b2_0 = initial.biases[0].reshape(G, cols), initial.biases[1]
        grad_b1 = torch.empty_like(b1)
        grad_b2 = torch.empty_like(b2)
        c2_b = per_group(ridge, X, 2)
    parts = [_Bucket(network, initial, X, reward, mask, bias, blocks, height, c1, c2, keep, gaussian)
             for blocks, height in buckets]
    # One step as a fixed list of argument-free calls on the buffers above (_Bucket.step_tape): the
    # step's tensor operations in their order, with no attribute, view or branch looked up per step.
    tape = []
    for index, part in enumerate(parts):
        tape += part.step_tape(index == 0, v_rows, grad_v, likelihood,
                               (b1, b2, grad_b1, grad_b2) if with_biases else None)
    tape += [partial(v.lerp_, v0, c2), partial(v.add_, grad_v, alpha=scale * scale)]
    if with_biases:  # b <- b - c2 (b - b_0) + grad, as every other parameter
        tape += [partial(b1.lerp_, b1_0, c2_b), partial(b1.add_, grad_b1),
                 partial(b2.lerp_, b2_0, c2_b), partial(b2.add_, grad_b2)]
    for _ in range(steps):
        for call in tape:
            call()
    for part in parts:
        delta = part.delta(steps).view(G, len(part.blocks), d, S, m)
        if part.all_blocks:   # every block in this bucket, in order: no gather and scatter of W1
            network.W1.copy_(initial.W1 + delta)
        else:
            network.W1[:, part.blocks] = initial.W1[:, part.blocks] + delta
    torch.div(v, scale, out=network.w)
    if with_biases:
        network.biases[0].copy_(b1.view(G, S, m))
        network.biases[1].copy_(b2)


#: threshold_backward's out= overload (the gate of the ReLU's backward pass), called without the
#: Python wrapper of torch.ops where torch exposes the builtin.
_THRESHOLD_BACKWARD = getattr(torch.ops.aten.threshold_backward.grad_input, "_op",
                              torch.ops.aten.threshold_backward.grad_input)


class _Bucket:
    """First layer of one bucket of blocks for :func:`ascend_one_hidden_layer`.

    Rows ``:height`` of the bucket's blocks, the trial axis G and the block axis merged into the batch
    of each ``bmm``. Works on Delta = W1 - W1_0 (what the ridge term pulls towards 0) with X W1_0
    computed once per call. Each step is Delta <- k Delta + X^T back (k = 1 - c2), in one of two
    exactly equivalent forms:

    - weight form: Delta itself, updated each step; X Delta costs 2 n d' S m FLOPs per product and
      reads the (d', S m) weights of every block.
    - Gram form (height < d'): Delta_j = k^j Delta_0 + X^T C_j with C_j = k C_{j-1} + back_j, so
      X Delta_j = E_j with E_j = k E_{j-1} + (X X^T) back_j. A step then costs 2 n^2 S m per
      product and touches only (n, S m) buffers; Delta is formed once, at the end of the call.
    """

    def __init__(self, network, initial, X, reward, mask, bias, blocks, height, c1, c2, keep, gaussian):
        G, _, _, d = X.shape
        S, m = network.W1.shape[3], network.W1.shape[4]
        count, cols = len(blocks), S * m
        self.blocks = torch.as_tensor(blocks, device=X.device)
        batch, rows = G * count, count * height
        whole = count == X.shape[1] and height == X.shape[2]
        self.all_blocks = count == X.shape[1]  # blocks are sorted (bucket_blocks): 0, ..., B - 1
        pick = (lambda t: t) if whole else (lambda t: t[:, self.blocks, :height])
        self.X = pick(X).reshape(batch, height, d)
        self.Xt = self.X.transpose(1, 2)
        W1_0 = initial.W1 if whole else initial.W1[:, self.blocks]
        W1 = network.W1 if whole else network.W1[:, self.blocks]
        self.weights = (W1 - W1_0).reshape(batch, d, cols)  # Delta (weight form) or Delta_0 (Gram form)
        self.fixed = torch.bmm(self.X, W1_0.reshape(batch, d, cols))  # X W1_0, constant during the call
        self.keep = keep  # k, shared by all trials; else per batch entry:
        self.keep_entries = (1.0 - c2).reshape(G, 1, 1, 1).expand(G, count, 1, 1).reshape(batch, 1, 1)
        self.gram = height < d
        if self.gram:
            self.gram_matrix = torch.bmm(self.X, self.Xt)
            self.E = torch.bmm(self.X, self.weights)
            self.C = torch.zeros_like(self.E)
        self.act = torch.empty_like(self.fixed)
        self.back = torch.empty_like(self.fixed)
        self.act_rows, self.back_rows = self.act.view(G, rows, cols), self.back.view(G, rows, cols)
        self.act_sets, self.back_sets = self.act.view(G, rows, S, m), self.back.view(G, rows, S, m)
        self.product = torch.empty(G, rows, S, m, device=X.device, dtype=X.dtype)   # act * (v or coef)
        self.f = torch.empty(G, rows, S, device=X.device, dtype=X.dtype)
        self.f_rows = self.f.view(G, count, height, S)
        self.coef = torch.empty(G, count, height, S, device=X.device, dtype=X.dtype)
        self.coef_rows = self.coef.view(G, rows, S)
        self.reward = pick(reward).unsqueeze(-1)
        self.weight = pick(mask) * c1  # (G, count, height, S_mask)
        part_bias = None if bias is None else pick(bias)
        self.bias_c1, self.offset = None, None
        if gaussian:
            offset = (self.reward * self.weight).expand(G, count, height, S)
            self.offset = offset + part_bias * c1 if part_bias is not None else offset.contiguous()
        elif part_bias is not None:
            self.bias_c1 = part_bias * c1

    def step_tape(self, first: bool, v_rows: torch.Tensor, grad_v: torch.Tensor, likelihood: str,
                  biases: tuple | None) -> list:
        """This bucket's part of one step of :func:`ascend_one_hidden_layer` as argument-free calls, in
        order, each writing into this bucket's buffers:

            act = relu(X W1_0 + X Delta (+ b1));  f = sum_j act v (+ b2);  coef = c1 (d/df l mask + bias)
            back = 1[act > 0] coef v;  grad_v (+)= sum_rows act coef;  (grad_b1 (+)= sum back, grad_b2 (+)= sum coef)
            Delta <- k Delta + X^T back

        ``first``: the first bucket writes the step's output-layer (and bias) gradients, the others add
        theirs. ``biases`` = (b1 (G, S m), b2 (G, S), grad_b1, grad_b2) with the reference recipe's biases.
        """
        tape = []
        if self.gram:
            tape.append(partial(torch.add, self.fixed, self.E, out=self.act))
        else:
            tape.append(partial(torch.baddbmm, self.fixed, self.X, self.weights, out=self.act))
        if biases is not None:
            b1, b2, grad_b1, grad_b2 = biases
            tape.append(partial(self.act.view(b1.shape[0], -1, self.act.shape[-1]).add_, b1.unsqueeze(1)))
        tape.append(self.act.relu_)
        tape.append(partial(torch.mul, self.act_sets, v_rows, out=self.product))
        tape.append(partial(torch.sum, self.product, dim=-1, out=self.f))
        if biases is not None:
            tape.append(partial(self.f.add_, b2.unsqueeze(1)))
        if self.offset is not None:  # Gaussian: c1 ((r - f) mask + bias) = offset - f * weight
            tape.append(partial(torch.addcmul, self.offset, self.f_rows, self.weight, value=-1.0, out=self.coef))
        else:
            reward, f_rows, weight, coef = self.reward, self.f_rows, self.weight, self.coef

            def coefficient():
                torch.mul(likelihoods.derivative(likelihood, reward, f_rows), weight, out=coef)
            tape.append(coefficient)
            if self.bias_c1 is not None:
                tape.append(partial(self.coef.add_, self.bias_c1))
        coef_cols = self.coef_rows.unsqueeze(-1)
        tape.append(partial(torch.mul, coef_cols, v_rows, out=self.back_sets))
        tape.append(partial(torch.mul, self.act_sets, coef_cols, out=self.product))

        def summed(source, total, out):
            """sum over the rows into ``total`` (first bucket) or into ``out`` and then added to ``total``."""
            if first:
                return [partial(torch.sum, source, dim=1, out=total)]
            return [partial(torch.sum, source, dim=1, out=out), partial(total.add_, out)]
        tape += summed(self.product, grad_v, torch.empty_like(grad_v))
        tape.append(partial(_THRESHOLD_BACKWARD, self.back, self.act, 0, grad_input=self.back))
        if biases is not None:  # sums over every row of every block of the gated signal and of coef
            tape += summed(self.back_rows, grad_b1, torch.empty_like(grad_b1))
            tape += summed(self.coef_rows, grad_b2, torch.empty_like(grad_b2))
        # Delta <- k Delta + X^T back (weight form), or its Gram form on E and C
        if self.gram:
            if self.keep is not None:
                tape += [partial(self.E.baddbmm_, self.gram_matrix, self.back, beta=self.keep),
                         partial(torch.add, self.back, self.C, alpha=self.keep, out=self.C)]
            else:
                tape += [partial(self.E.mul_, self.keep_entries), partial(self.E.baddbmm_, self.gram_matrix, self.back),
                         partial(self.C.mul_, self.keep_entries), partial(self.C.add_, self.back)]
        elif self.keep is not None:
            tape.append(partial(self.weights.baddbmm_, self.Xt, self.back, beta=self.keep))
        else:
            tape += [partial(self.weights.mul_, self.keep_entries), partial(self.weights.baddbmm_, self.Xt, self.back)]
        return tape

    def delta(self, steps: int) -> torch.Tensor:
        """Delta after ``steps`` steps, (batch, d', S m)."""
        if not self.gram:
            return self.weights
        decay = self.keep ** steps if self.keep is not None else self.keep_entries ** steps
        return self.weights.mul_(decay).baddbmm_(self.Xt, self.C)


#: Fixed cost of one more bucket (about eight more tensor operations per step) in FLOPs of first-layer
#: work: ~40 us on a CPU core at ~100 GFLOP/s; ~100 us of kernel launches on a GPU at ~50 TFLOP/s.
BUCKET_OVERHEAD_FLOPS = {"cpu": 4.0e6, "cuda": 5.0e9}


def bucket_blocks(heights: np.ndarray, block_dim: int, columns: int, device_type: str = "cpu",
                  max_buckets: int = 3) -> list[tuple[np.ndarray, int]]:
    """Split blocks with ``heights`` rows into buckets, each padded to its tallest block (a pure function).

    One batched matmul needs equal heights, so a single bucket pads every block to the tallest: on a
    skewed history (a policy that mostly plays one arm, e.g. Shuttle's 78% majority class) that is
    up to K times the useful first-layer work. Blocks are sorted by height and cut into at most
    ``max_buckets`` runs; the cut minimising the first-layer FLOPs of a step (two products of
    2 h min(h, d') ``columns`` per block of padded height h: weight or Gram form, see _Bucket)
    plus ``BUCKET_OVERHEAD_FLOPS`` per extra bucket wins. Returns (blocks, height) pairs.
    """
    heights = np.asarray(heights, dtype=np.int64)
    order = np.argsort(-heights, kind="stable")
    tall = heights[order]
    overhead = BUCKET_OVERHEAD_FLOPS.get(device_type, BUCKET_OVERHEAD_FLOPS["cuda"])
    B = len(heights)
    if B == 1:
        return [(order, int(tall[0]))]
    # Candidates in the order (), (i,) for 0 < i < B, then (i, j) for 0 < i < j < B; the first of least
    # cost wins. A run of blocks a..b-1 padded to tall[a] does (b - a) tall[a] min(tall[a], d') work.
    padded = tall * np.minimum(tall, block_dim)
    cuts = np.arange(1, B)
    works = [np.array([B * padded[0]]), cuts * padded[0] + (B - cuts) * padded[cuts]]
    pairs = np.empty((0, 2), dtype=np.int64)
    if max_buckets >= 3:
        pairs = np.array([(i, j) for i in range(1, B) for j in range(i + 1, B)], dtype=np.int64).reshape(-1, 2)
        i, j = pairs[:, 0], pairs[:, 1]
        works.append(i * padded[0] + (j - i) * padded[i] + (B - j) * padded[j])
    counts = np.concatenate([np.zeros(1), np.ones(B - 1), np.full(len(pairs), 2.0)])
    cost = 4.0 * columns * np.concatenate(works).astype(np.float64) + overhead * counts
    best = int(np.argmin(cost))
    chosen = () if best == 0 else (int(cuts[best - 1]),) if best < B else tuple(int(c) for c in pairs[best - B])
    bounds = [0, *chosen, B]
    return [(np.sort(order[a:b]), int(tall[a])) for a, b in zip(bounds[:-1], bounds[1:])]


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
    G, S = network.w.shape[:2]
    return [network.W1.permute(0, 3, 1, 2, 4), *network.hidden, network.w, *[b.reshape(G, S, -1) for b in network.biases]]


def intra_op_threads(history_rows: float, block_dim: int, width: int, parameter_sets: int, groups: int = 1,
                     cores: int | None = None, flops_per_thread: float = 2.0e9) -> int:
    """How many intra-op threads pay off for one gradient step of this size (a pure function).

    A step's first-layer work is ~4 n d' S m FLOPs per trial (SPEC 1.7, block-sparse: the forward
    and the weight-gradient products) with n = ``history_rows`` (e.g. half the horizon for a whole
    trial). Small steps are a few dozen microseconds of work per operation: there, waking a second
    thread costs more than it saves, and on a shared machine it can stall every operation for a
    scheduler time slice. One thread per ``flops_per_thread`` FLOPs of step work, at least one, at most
    ``cores`` (default: the CPUs of this process). ``torch.set_num_threads`` is process-global, so
    this only advises whoever owns the process: benchmarks/neural_step.py applies it, while a trial
    actor keeps one thread per CPU it was given (workers.execution.actors); library code changes the count only
    inside :func:`gradient_ascent`'s thread split, and restores it there.
    """
    import os
    available = cores if cores is not None else len(os.sched_getaffinity(0))
    work = 4.0 * groups * history_rows * block_dim * parameter_sets * width
    return int(max(1, min(available, work // flops_per_thread)))
