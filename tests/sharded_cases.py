"""Sharded kernel trials run in this process, for the tests of core.kernel.sharded and of the
checkpoints that hold sharded states: the environments they play, a sharded trial's spec, its shards as
one LocalShards group, and checkpoints kept in a dict."""

from banditsweep.core.engine.trial import TrialSpec
from banditsweep.core.kernel.sharded.partition import shard_ranges
from banditsweep.core.kernel.sharded.protocol import LocalShards
from banditsweep.core.kernel.sharded.shard import KernelShard, domain_shape

ENVIRONMENTS = {
    "setting1": {"kind": "adversarial_kernel", "setting": 1, "candidates": 60, "centers": 10},
    "setting2": {"kind": "adversarial_kernel", "setting": 2, "kernel": "matern52", "candidates": 60, "centers": 10},
    "uniform": {"kind": "adversarial_kernel", "domain": {"uniform": 300, "dim": 2}, "candidates": 40, "centers": 8},
}


def sharded_spec(algorithm, environment, seed=4, horizon=40, **params):
    return TrialSpec.create(algorithm, params, ENVIRONMENTS[environment], seed, horizon, sharded=True)


def local_shards(spec, count):
    n, _ = domain_shape(spec)
    return LocalShards([KernelShard(spec, a, b) for a, b in shard_ranges(n, count)])


class MemoryCheckpoints:
    """Checkpoints kept in a dict (core.engine.round_loop.Checkpoints). The shards of a LocalShards group
    save their parts into it in this process, as Ray shard actors save theirs to files."""

    def __init__(self, every: int):
        self.every, self.states, self.rejected = every, {}, []

    def load(self, key):
        return self.states.get(key)

    def save(self, key, state):
        self.states[key] = state
        return True

    def discard(self, key):
        for name in [name for name in self.states if name == key or name.startswith(key + "/")]:
            del self.states[name]

    def reject(self, key, reason):
        self.rejected.append(reason)
        self.discard(key)
