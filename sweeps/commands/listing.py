"""``banditsweep list``: every registered algorithm and environment kind with its parameters and
their defaults, the result sinks, and what can be sharded."""

from __future__ import annotations

import argparse
import typing

from banditsweep.core import registry
from banditsweep.core.kernel_shards import SHARDABLE_ALGORITHMS, SHARDABLE_ENVIRONMENTS
from banditsweep.workers.sinks import DEFAULT_SINKS, sink_names


def _kind(annotation) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _describe(model) -> str:
    fields = []
    for name, field in model.model_fields.items():
        default = "required" if field.is_required() else repr(field.default)
        fields.append(f"{name}={default} ({_kind(field.annotation)})")
    return ", ".join(fields) or "(no parameters)"


def main(args: argparse.Namespace) -> int:
    print("algorithms:")
    for name in registry.algorithm_names():
        policy = registry.algorithm_class(name)
        print(f"  {name} [{', '.join(sorted(policy.supports))}]: {_describe(policy.Params)}")
    print("environment kinds:")
    for name in registry.environment_names():
        environment = registry.environment_class(name)
        print(f"  {name} [{environment.interaction}]: {_describe(environment.Config)}")
    print(f"result sinks (default: {', '.join(DEFAULT_SINKS)}): {', '.join(sink_names())}")
    print(f"sharded trials (shards: N or shard_points: P on an environment or algorithm entry): "
          f"{', '.join(SHARDABLE_ALGORITHMS)} on {', '.join(SHARDABLE_ENVIRONMENTS)}")
    return 0
