"""``banditsweep list [NAME]``: every registered algorithm and environment kind (or the one named)
with its one-line summary and its parameters as a spec writes them: the allowed values, the default
and what the parameter does; then the result sinks and what can be sharded."""

from __future__ import annotations

import sys
import textwrap
import types
import typing

import annotated_types
import yaml
from pydantic import BaseModel

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import ListRequest
from banditsweep.core.engine import registry
from banditsweep.core.kernel.sharded.shard import shardable_algorithms, shardable_environments
from banditsweep.sweeps.cli.commands import EXIT_BAD_INPUT
from banditsweep.sweeps.spec.errors import did_you_mean, show
from banditsweep.sweeps.spec.model import DEFAULT_SINKS
from banditsweep.workers import sink_names

WIDTH = 100        # columns of the listing
INDENT = "    "    # a parameter under its algorithm or environment; its description below it, deeper
NOUNS = {int: "an integer", float: "a number", str: "a text", bool: "true | false", dict: "a mapping"}
PLURALS = {int: "integers", float: "numbers", str: "texts", bool: "booleans"}


def yaml_value(value) -> str:
    """``value`` as a spec writes it: ``0.001``, ``paper``, ``[20, 20]``, ``none`` for unset."""
    if value is None:
        return "none"
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip()
    return text.removesuffix("...").strip()


def _bounds(metadata) -> str:
    """`` >= 2``, `` > 0 and < 1`` from a field's ge/gt/le/lt constraints."""
    parts = []
    for item in metadata:
        for attribute, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            bound = getattr(item, attribute, None)
            if bound is not None and isinstance(item, annotated_types.BaseMetadata):
                parts.append(f"{symbol} {bound:g}")
    return (" " + " and ".join(parts)) if parts else ""


def _min_length(metadata) -> int | None:
    return next((item.min_length for item in metadata if isinstance(item, annotated_types.MinLen)), None)


def _mapping(model: type[BaseModel]) -> str:
    """A nested settings model as the mapping a spec writes: ``{uniform: integer, dim: integer}``."""
    def short(annotation) -> str:
        if typing.get_origin(annotation) is list:
            (item,) = typing.get_args(annotation) or (object,)
            return f"[{short(item)}, ...]"
        return NOUNS.get(annotation, getattr(annotation, "__name__", "a value")).split(" ", 1)[-1]

    return "{" + ", ".join(f"{name}: {short(field.annotation)}" for name, field in model.model_fields.items()) + "}"


def allowed_values(annotation, metadata=()) -> str:
    """What a spec may give for a parameter: ``paper | default``, ``a number > 0``, ``an integer >= 1``,
    ``a list of integers``, ``{grid: [integer, ...]} | ...``; never a Python type's name. Unset
    (None), where allowed, is the default and shows there."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(yaml_value(choice) for choice in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return " | ".join(allowed_values(member, metadata) for member in members)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return allowed_values(inner, [*metadata, *extra])
    if origin in (list, tuple, set):
        (item, *_) = typing.get_args(annotation) or (object,)
        text = f"a list of {PLURALS.get(item, allowed_values(item))}"
        least = _min_length(metadata)
        return text + (f" (at least {least})" if least and least > 1 else (" (not empty)" if least == 1 else ""))
    if origin is dict:
        return "a mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _mapping(annotation)
    if annotation in (int, float):
        return NOUNS[annotation] + _bounds(metadata)
    return NOUNS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def describe_parameters(model: type[BaseModel]) -> list[str]:
    """Lines of ``model``'s parameters: ``name: allowed (default: value)`` and the description below."""
    if not model.model_fields:
        return [f"{INDENT}(no parameters)"]
    lines = []
    for name, field in model.model_fields.items():
        default = "required" if field.is_required() else f"default: {yaml_value(field.default)}"
        head = f"{name}: {allowed_values(field.annotation, field.metadata)} ({default})"
        lines += textwrap.wrap(head, WIDTH, initial_indent=INDENT, subsequent_indent=INDENT * 2,
                               break_on_hyphens=False)
        if field.description:
            lines += textwrap.wrap(field.description, WIDTH, initial_indent=INDENT * 2,
                                   subsequent_indent=INDENT * 2, break_on_hyphens=False)
    return lines


def summary(cls: type) -> str:
    """The first line of the class's own docstring, else of its module's."""
    text = cls.__dict__.get("__doc__") or sys.modules[cls.__module__].__doc__ or ""
    return " ".join(text.strip().split("\n\n", 1)[0].split())


def describe(name: str, cls: type, model: type[BaseModel], kinds: str) -> list[str]:
    head = f"{name} [{kinds}]" + (f": {summary(cls)}" if summary(cls) else "")
    return [*textwrap.wrap(head, WIDTH, subsequent_indent="  ", break_on_hyphens=False),
            *describe_parameters(model), ""]


def _algorithm(name: str) -> list[str]:
    policy = registry.algorithm_class(name)
    return describe(name, policy, policy.Params, ", ".join(sorted(policy.supports)))


def _environment(name: str) -> list[str]:
    environment = registry.environment_class(name)
    return describe(name, environment, environment.Config, environment.interaction)


HEADER = ("Each parameter: its allowed values (default: what an unset parameter is; none: unset), "
          "then what it does. [..]: the interactions an algorithm runs on / an environment offers.")


def main(args: ListRequest) -> int:
    algorithms, environments = registry.algorithm_names(), registry.environment_names()
    name = getattr(args, "name", None)
    if name is not None:
        if name not in algorithms and name not in environments:
            say(f"error: banditsweep list: unknown algorithm or environment kind {show(name)}"
                  f"{did_you_mean(name, [*algorithms, *environments])}; "
                  f"algorithms: {', '.join(algorithms)}; environment kinds: {', '.join(environments)}",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        lines = [*(_algorithm(name) if name in algorithms else []),
                 *(_environment(name) if name in environments else [])]
        say("\n".join(lines).rstrip())
        return 0
    lines = [*textwrap.wrap(HEADER, WIDTH), "", "ALGORITHMS (a spec's algorithms[].name; its params and grid)", ""]
    for name in algorithms:
        lines += _algorithm(name)
    lines += ["ENVIRONMENT KINDS (a spec's environments[].kind and its settings)", ""]
    for name in environments:
        lines += _environment(name)
    lines += textwrap.wrap(f"Result sinks (default: {', '.join(DEFAULT_SINKS)}): {', '.join(sink_names())}", WIDTH)
    lines += textwrap.wrap(f"Sharded trials (shards: N or shard_points: P on an environment or algorithm entry): "
                           f"{', '.join(shardable_algorithms())} on {', '.join(shardable_environments())}", WIDTH)
    say("\n".join(lines))
    return 0
