"""The partition of one trial's domain X over shards (SPEC 4), and the random numbers and sums that
do not depend on how many shards there are.

A sharded trial must give the same result for 1, 2, 3 or 4 shards. Three things make that hold to
the last bit on identical machines (and to rounding across different CPUs):

- **Per-point work is elementwise.** Whatever decides an argmax over X (the P-greedy and MVR pivots,
  the G-optimal design's leverage, the sampler's keep decisions) is computed point by point with
  numpy elementwise operations (:func:`rowwise_dot`), whose result for a point does not depend on
  which slice holds it. A BLAS matrix-vector product does not promise that: its kernels treat rows
  by their position in the block.
- **Sums over X are exact.** A sum over the domain (the information matrices, the log-partition of
  P_t) is cut into fixed reduction blocks of :func:`block_size` points, aligned the same way for every
  shard count; each block's partial is converted to fixed point (:func:`to_fixed`: two int64 words at
  2^-40 and 2^-80 of a power-of-two bound) and the blocks are added as integers, which is exact and
  so independent of the order. Shards are whole runs of blocks (:func:`shard_ranges`).
- **Random numbers are keyed by the point.** A point's random number in a draw is
  ``keyed_uniforms(key, i, i + 1)``, SplitMix64 at counter i of the draw's key, so any slice of a
  draw is computed without the rest (:func:`keyed_uniforms`).

A maximum over X is the largest of the shards' maxima (:func:`global_argmax`); a choice among the
points tied at it is core.engine.ties' rule, decided against the global maximum (:func:`global_choice`).
"""

from __future__ import annotations

import math
from typing import Sequence, TypeVar

import numpy as np

from banditsweep.core.engine.ties import derive_key, splitmix, threshold  # noqa: F401 (derive_key: the sampler's keys)

# Reduction blocks: at least MIN_BLOCKS per domain, each a power of two of at most MAX_BLOCK points.
MIN_BLOCKS = 64
MAX_BLOCK = 8192


def block_size(n: int) -> int:
    """Points per reduction block of a domain of n points: the largest power of two <= n / 64,
    capped at 8192 (so a domain of n points can be split into up to ceil(n / block) shards)."""
    size = 1
    while size * 2 <= min(MAX_BLOCK, max(1, n // MIN_BLOCKS)):
        size *= 2
    return size


def max_shards(n: int) -> int:
    return math.ceil(n / block_size(n))


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous ranges [start, stop) covering 0..n-1, each a whole number of reduction
    blocks, as equal in size as the blocks allow."""
    blocks, block = max_shards(n), block_size(n)
    if not 1 <= shards <= blocks:
        raise ValueError(f"a domain of {n} points splits into 1 to {blocks} shards, got {shards}")
    edges = [min(n, round(i * blocks / shards) * block) for i in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


def shards_for(n: int, shards: int | None, shard_points: int | None) -> int:
    """The number of shards asked for directly or as a most points per shard (the smallest number of
    shards that keeps every shard at or under ``shard_points``)."""
    if shards is not None:
        return shards
    if shard_points is None:
        return 1
    count = math.ceil(n / shard_points)
    while count < max_shards(n) and max(b - a for a, b in shard_ranges(n, count)) > shard_points:
        count += 1
    return min(count, max_shards(n))


def blocks_in(start: int, stop: int, n: int) -> list[tuple[int, int]]:
    """The reduction blocks inside [start, stop), relative to ``start``."""
    block = block_size(n)
    return [(a - start, min(a + block, stop) - start) for a in range(start, stop, block)]


# ---- exact sums -----------------------------------------------------------------------------------

FIXED_BITS = 40


def fixed_bound(value: float) -> float:
    """The power of two at or above ``value`` (>= 1): the scale of a fixed-point sum."""
    return 2.0 ** max(0, math.ceil(math.log2(max(float(value), 1.0))))


def to_fixed(values: np.ndarray, bound: float) -> np.ndarray:
    """``values`` (each of magnitude <= ``bound``, a power of two) as fixed point: an int64 array with
    a trailing axis of two words, values / bound = (high + low 2^-40) 2^-40, rounded at 2^-80. The
    conversion is elementwise and exact up to that rounding; sums of up to 2^22 such words are exact
    in int64."""
    scaled = np.asarray(values, dtype=np.float64) * (2.0 ** FIXED_BITS / bound)   # exact: power-of-two factor
    if np.any(np.abs(scaled) > 2.0 ** FIXED_BITS):
        raise ValueError(f"a value exceeds the fixed-point bound {bound}")
    high = np.rint(scaled)
    low = np.rint((scaled - high) * 2.0 ** FIXED_BITS)
    return np.stack([high, low], axis=-1).astype(np.int64)


def from_fixed(words: np.ndarray, bound: float) -> np.ndarray:
    """The float64 values of summed fixed-point words (correctly rounded, the same for any order in
    which the words were added)."""
    words = np.asarray(words)
    flat = words.reshape(-1, 2)
    scale = bound / 2.0 ** (2 * FIXED_BITS)
    out = np.array([float((int(high) << FIXED_BITS) + int(low)) * scale for high, low in flat])
    return out.reshape(words.shape[:-1])


def block_sums(blocks: Sequence[tuple[int, int]], reduce, bound: float) -> np.ndarray:
    """sum over X of a quantity, exactly: ``reduce(a, b)`` gives the block [a, b)'s partial (float64,
    any shape), converted to fixed point and added as integers."""
    total = None
    for a, b in blocks:
        words = to_fixed(reduce(a, b), bound)
        total = words if total is None else total + words
    return total


# ---- per-point arithmetic ------------------------------------------------------------------------


def rowwise_dot(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """rows @ vector computed column by column (elementwise), so each point's value is the same
    whichever slice of X holds it."""
    out = np.zeros(rows.shape[0])
    for j in range(rows.shape[1]):
        out += rows[:, j] * vector[j]
    return out


def rowwise_matmul(rows: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """rows @ matrix, elementwise per point (see :func:`rowwise_dot`)."""
    out = np.zeros((rows.shape[0], matrix.shape[1]))
    for j in range(rows.shape[1]):
        out += rows[:, j, None] * matrix[j][None, :]
    return out


# ---- keyed random numbers ------------------------------------------------------------------------

def keyed_uniforms(key: int, start: int, stop: int) -> np.ndarray:
    """Uniform numbers in [0, 1) for the points start..stop-1 of the draw ``key``: SplitMix64's output
    at counter i + 1, so the value of point i does not depend on the slice asked for."""
    return splitmix(key, np.arange(start + 1, stop + 1, dtype=np.uint64))


# ---- where a point is, and maxima over X -------------------------------------------------------


def owner(ranges: Sequence[tuple[int, int]], index: int) -> int:
    """The shard whose range holds point ``index``."""
    for shard, (start, stop) in enumerate(ranges):
        if start <= index < stop:
            return shard
    raise IndexError(f"point {index} is outside the domain")


Maximum = TypeVar("Maximum")


def global_argmax(partials: Sequence[Maximum]) -> Maximum:
    """The largest of the shards' maxima (replies with a ``value`` and a global ``index``, such as
    core.kernel.sharded.protocol.Candidate), ties to the smallest index: where the largest value is all that
    is wanted (a choice among tied points is :func:`global_choice`'s)."""
    return max(partials, key=lambda item: (item.value, -item.index))


def global_choice(group, partials: Sequence, quantity: str, key: int, scale: float = 0.0):
    """The choice over X by core.engine.ties' rule, from the shards' maxima ``partials`` of ``quantity``:
    the tied set's edge from the global maximum (a first reduction), then every shard's most
    prioritised point at or beyond it (a second): a core.kernel.sharded.protocol.Tied. The same choice as
    core.engine.ties.tied_argmax on the whole of X, whatever the shards."""
    from banditsweep.core.kernel.sharded.protocol import Ties

    top = max(part.value for part in partials)
    tied = [part for part in group.map(Ties(quantity, threshold(top, scale), key)) if part is not None]
    return max(tied, key=lambda part: (part.priority, -part.index))
