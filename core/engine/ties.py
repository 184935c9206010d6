"""The tie rule of the kernel algorithms' design and pivot choices: no choice hangs on rounding.

On a regular grid the greedy quantities of the kernel algorithms tie exactly in real arithmetic (a
posterior variance at x and at 1 - x, at (i, j) and at (j, i)); ``np.argmax`` then gives the choice to
the last bits of ``exp`` and of BLAS, which differ between CPUs, BLAS builds, thread counts and shard
layouts, and the whole design (hence the regret) with them. Here every such choice is

    tied(v) = { x : v(x) >= max_x v - RTOL * max(|max_x v|, scale) }          (argmin: mirrored)
    choice  = the point of tied(v) with the largest priority pi(x)

with ``scale`` the quantity's own scale where it shrinks as the choice proceeds (the prior variance
max_x k(x, x) for MVR and the P-greedy power function, whose late values are small next to the
rounding of the first ones), and pi(x) = SplitMix64(key, x) in [0, 1), a per-point priority keyed by
the trial's seed and the choice's purpose (:func:`tie_key`): the same on every CPU and shard layout,
different between seeds (equally valid designs spread over the seeds, so that intervals over seeds
show what the design choice costs), and drawn from no stream (a tie never moves a later draw).
Ties of priorities (probability 2^-53) go to the smallest index. Values at least RTOL apart are never
tied: RTOL = 1e-9 is 10^4 to 10^6 times the rounding of these quantities after hundreds of steps
(eps = 2.2e-16 per operation) and far below any difference that matters to a design.

Only the kernel algorithms reach this module (core.kernel.mvr, core.kernel.exp3, core.kernel.nystrom,
the kernel policies and their sharded halves); the environment's adversary keeps SPEC 2.3's
smallest-index rule, and the neural and linear policies' arm choices are not decided here.
"""

from __future__ import annotations

import hashlib

import numpy as np

from banditsweep.core.engine.seeding import POLICY_STREAM

RTOL = 1e-9
# The rule's version, saved by what it decides (a sharded trial's half): 1 is this module's.
RULE = 1
# The seeding stream of the tie priorities (core.engine.seeding has 0: environment, 1: policy; the sharded
# Nystrom sampler's keyed draws use 2).
TIE_STREAM = 3
# What a key is for: one priority order per purpose, so that two choices of a trial do not share one.
MVR, APPROXIMATE_MVR, P_GREEDY, DESIGN, DESIGN_AWAY, LANDMARK = 1, 2, 3, 4, 5, 6

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def derive_key(*words: int) -> int:
    """A 64-bit key from integers (a trial's seed, a stream number, a round, a level)."""
    return int(np.random.SeedSequence([int(w) for w in words]).generate_state(1, np.uint64)[0])


def splitmix(key: int, counters: np.ndarray) -> np.ndarray:
    """SplitMix64's output at ``counters`` (uint64) for the draw ``key``, as uniforms in [0, 1)."""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + np.asarray(counters, dtype=np.uint64) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def priorities(key: int, indices: np.ndarray) -> np.ndarray:
    """pi(x) of the points ``indices`` (global indices into X)."""
    return splitmix(key, np.asarray(indices, dtype=np.uint64) + np.uint64(1))


def seed_words(rng: np.random.Generator) -> tuple[int, ...]:
    """The words a trial's stream was seeded with (core.engine.seeding.stream: (seed, stream)), read without
    drawing. Read it when the policy is built: a stream restored from a checkpoint keeps its state, not
    its seed, so a policy keeps the key it derives (:func:`tie_key`) as state."""
    sequence = rng.bit_generator.seed_seq
    entropy = sequence.entropy
    words = list(entropy) if isinstance(entropy, (list, tuple, np.ndarray)) else [entropy]
    return (*(int(w) for w in words), *(int(w) for w in sequence.spawn_key))


def trial_seed_words(trial) -> tuple[int, ...]:
    """:func:`seed_words` of a sharded trial's policy stream (core.kernel.sharded), from its seed."""
    return (int(trial.spec.seed), POLICY_STREAM)


def design_digest(*parts: np.ndarray) -> float:
    """A trial's design (its sequence of points, pivots or support) as data a record keeps: the first
    52 bits of the SHA-256 of the integer arrays, a float that holds them exactly."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(np.ascontiguousarray(np.asarray(part, dtype=np.int64)).tobytes())
        digest.update(b"|")
    return float(int.from_bytes(digest.digest()[:8], "big") >> 12)


def tie_key(words: tuple[int, ...], purpose: int) -> int:
    """The key of the priorities of one purpose's choices of a trial (``words``: :func:`seed_words`)."""
    return derive_key(*words, TIE_STREAM, purpose)


def threshold(top: float, scale: float = 0.0, lowest: bool = False) -> float:
    """The edge of the tied set of a maximum (``lowest``: minimum) ``top`` at ``scale``."""
    width = RTOL * max(abs(top), abs(scale))
    return top + width if lowest else top - width


def tied_argmax(values: np.ndarray, key: int | None, scale: float = 0.0, indices: np.ndarray | None = None,
                lowest: bool = False) -> int:
    """The choice among ``values`` (1-D) by the module's rule: its position in ``values``.
    ``indices``: the global index of each value (priorities are of points of X; default: the
    positions); ``key`` None: the smallest tied position (a deterministic rule for callers without a
    seed); ``lowest``: argmin."""
    values = np.asarray(values)
    top = float(values.min() if lowest else values.max())
    if not np.isfinite(top):    # NaN or infinite: as np.argmax (the round loop's checks name it)
        return int(np.argmin(values) if lowest else np.argmax(values))
    tied = _tied(values, threshold(top, scale, lowest), lowest)
    if len(tied) == 1 or key is None:
        return int(tied[0])
    return int(tied[np.argmax(priorities(key, tied if indices is None else np.asarray(indices)[tied]))])


def _tied(values: np.ndarray, edge: float, lowest: bool) -> np.ndarray:
    return np.flatnonzero(values <= edge if lowest else values >= edge)


def tied_among(values: np.ndarray, edge: float, key: int, indices: np.ndarray,
               lowest: bool = False) -> tuple[float, int] | None:
    """A shard's part of a choice over X: among its ``values`` at or beyond ``edge`` (the tied set's
    edge of the global maximum, :func:`threshold`), (priority, position) of the one with the largest
    priority (``indices``: the values' global indices); None where none is. The choice is the largest
    priority over the shards, ties of priorities to the smallest global index."""
    tied = _tied(np.asarray(values), edge, lowest)
    if not len(tied):
        return None
    chosen = priorities(key, np.asarray(indices)[tied])
    best = int(np.argmax(chosen))
    return float(chosen[best]), int(tied[best])
