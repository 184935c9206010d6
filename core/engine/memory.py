"""What one trial needs in memory, estimated from its content before anything runs.

A trial whose arrays cannot fit on any node must be refused with the sweep's other bad input (exit
2), not found out by a MemoryError in every trial actor. The estimate adds up, in bytes:

- its per-round results: arm, reward, regret, cumulative regret and seconds, and each of the
  environment's ``round_extras``, 8 bytes a round each, held by the trial actor and again by the
  driver that writes them;
- the environment's own arrays (:meth:`Environment.footprint`: contexts, a dataset, a domain and
  its candidate table);
- the policy's state (:meth:`Policy.footprint`: ridge matrices, networks and Z, kernel matrices).

Each is an estimate of the largest arrays, not of every temporary; a sharded trial's domain-sized
parts are spread over its shards.
"""

from __future__ import annotations

import math

from banditsweep.core.engine import registry
from banditsweep.core.engine.trial import TrialSpec, resolve_algorithm, resolve_environment

ROUND_ARRAYS = 5   # arm, reward, regret, cum_regret, seconds


def trial_footprint(spec: TrialSpec, shards: int = 0) -> dict[str, int]:
    """Bytes of one trial by part (``results``, ``environment``, ``algorithm``) on the node that
    holds the most of it."""
    env_cls = registry.environment_class(spec.environment["kind"])
    arms, dim, environment = env_cls.footprint(resolve_environment(spec.environment), spec.horizon)
    algorithm = spec.policy_class.footprint(resolve_algorithm(spec.algorithm, spec.params), arms, dim, spec.horizon)
    if shards > 1:   # each shard actor holds its slice of the domain
        environment, algorithm = math.ceil(environment / shards), math.ceil(algorithm / shards)
    results = 2 * 8 * spec.horizon * (ROUND_ARRAYS + len(env_cls.round_extras))
    return {"results": results, "environment": environment, "algorithm": algorithm}


def gib(size: int | float) -> str:
    """A byte count for messages: in KiB, MiB, GiB, TiB... whichever keeps it readable."""
    value, unit = float(size), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.3g} {unit}" if value < 1e6 else f"{value:.2e} {unit}"
