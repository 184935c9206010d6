"""One adversarial-kernel trial with its domain X split over shards (SPEC 4).

- ``partition``: the contiguous ranges of X, the reduction blocks whose exact sums and the keyed
  random numbers that make the result independent of the number of shards;
- ``protocol``: what crosses between the coordinator and its shards, as typed requests and replies,
  and the :class:`~banditsweep.core.kernel.sharded.protocol.ShardGroup` that carries them (in this process:
  ``LocalShards``; over Ray actors: ``workers.execution.sharded_trials.RayShards``);
- ``shard``: :class:`~banditsweep.core.kernel.sharded.shard.KernelShard`, everything indexed by X[start:stop];
- ``algorithm``: an algorithm's two halves, on the coordinator and on the shards, and the Exp3 round
  both Exp3 algorithms share; each shardable algorithm's halves are defined beside it, naming its
  class (``ShardedRandom``, ``ShardedAPGExp3``, ``ShardedRLSKernelExp3``);
- ``coordinator``: :class:`~banditsweep.core.kernel.sharded.coordinator.ShardedKernelTrial`, the kind of the
  one round loop (core.engine.round_loop) that plays the trial through its shards, and ``run_sharded``.
"""
