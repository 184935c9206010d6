"""Sweep specs: the YAML contract, validated in full before anything runs.

A spec is data. It is read with YAML's safe loader and names algorithms and environments only by
their registry keys; nothing in it is ever imported or executed. Every problem is reported as one
line ``<file>: <key path>: <what is wrong> (got <value>); <what is allowed>`` of at most
:data:`MAX_MESSAGE` characters (long values are shortened), and the CLI exits with code 2 before
starting or writing anything.

What is refused besides the schema: a file that is not UTF-8 text or is larger than
:data:`MAX_SPEC_BYTES`; a key given twice in one mapping; YAML aliases that refer to themselves or
expand the document beyond :data:`MAX_VALUES` values (an "alias bomb"), nesting deeper than
:data:`MAX_DEPTH`; numbers that are not finite (``.inf``, ``.nan``); booleans where a number is
expected (``horizon: true`` is not T = 1), and floats where an integer is (``horizon: 10.0``); integers
beyond what the results store holds (int64); a sweep name that is a results root's own file
(:mod:`banditsweep.workers.layout`); sweeps of more than :data:`MAX_TRIALS` trials, counted before a
single trial is built.

A trial is (algorithm, params + one grid point, environment, seed, horizon); see
:class:`banditsweep.core.trial.TrialSpec`.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import math
import os
import stat
import reprlib
import string
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from banditsweep.core import registry
from banditsweep.core.trial import TrialSpec, environment_label
from banditsweep.workers.layout import RESULTS_ROOT_ENTRIES, taken_by_the_results_root

# Keys of an environment entry that belong to the sweep, not to the environment's Config.
ENVIRONMENT_SWEEP_KEYS = ("kind", "horizon", "label", "shards", "shard_points")
# Execution keys of an environment or algorithm entry: split each trial's domain over shards
# (core.kernel_shards); ``shards`` a count, ``shard_points`` the most points per shard.
SHARD_KEYS = ("shards", "shard_points")

MAX_MESSAGE = 500            # characters of one error message, at most
MAX_SPEC_BYTES = 1 << 20     # a spec file is at most 1 MiB
MAX_VALUES = 100_000         # values (mappings, lists, scalars) of a spec with every alias expanded
MAX_DEPTH = 32               # nesting of mappings and lists
MAX_TRIALS = 1_000_000       # trials of one sweep
MAX_NAME = 100               # characters of a sweep name (a folder and an MLflow experiment name)
MAX_SEED = 2**63 - 1         # seeds are stored as int64
# Every integer of a spec is stored (trials table, journal, MLflow) as an int64.
MIN_INT, MAX_INT = -(2**63), 2**63 - 1

_shorten = reprlib.Repr()
_shorten.maxstring = _shorten.maxother = 80
_shorten.maxlist = _shorten.maxtuple = _shorten.maxdict = _shorten.maxset = 8
_shorten.maxlevel = 3


def show(value: Any) -> str:
    """A value as the user wrote it in YAML (``true``, ``null``, ``.inf``), shortened: a message
    never grows with the input."""
    if value is True or value is False:
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, int):
        return _big(value)
    return _shorten.repr(value)


def _big(value: int) -> str:
    """An integer of any size, shortened (Python refuses str() of ints beyond 4300 digits)."""
    digits = value.bit_length() * 0.30103
    if digits < 60:
        return str(value)
    return f"{'-' if value < 0 else ''}about 10**{int(digits)}"


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line of at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SpecError(ValueError):
    """A sweep spec is invalid. ``str(error)`` names the file, the key and what is allowed: one line
    of at most :data:`MAX_MESSAGE` characters."""

    def __init__(self, source: str, location: str, message: str):
        source, location = one_line(source, 200), one_line(location, 200)
        self.source, self.location, self.message = source, location, one_line(message)
        super().__init__(one_line(f"{source}: {location}: {message}" if location else f"{source}: {message}"))


def _number(kind: str, integer: bool = False):
    def check(value: Any) -> Any:
        # YAML's true/false would pass as 1/0 (`horizon: true` ran with T = 1), "100" as 100, 10.0 as 10.
        if isinstance(value, bool):
            raise ValueError(f"must be {kind}, not a boolean (got {show(value)})")
        if isinstance(value, str):
            raise ValueError(f"must be {kind}, not a string (got {show(value)})")
        if integer and isinstance(value, float):
            raise ValueError(f"must be {kind}, not a float (got {show(value)}); write it without a decimal point")
        return value
    return BeforeValidator(check)


Int = Annotated[int, _number("an integer", integer=True)]
Float = Annotated[float, _number("a number")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class AlgorithmEntry(_Strict):
    name: str
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    when: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None
    # Split each trial's domain over this many shards (or shards of at most shard_points points).
    shards: Int | None = Field(None, ge=1)
    shard_points: Int | None = Field(None, ge=1)

    @field_validator("grid")
    @classmethod
    def _grid_not_empty(cls, grid):
        for key, values in grid.items():
            if not values:
                raise ValueError(f"grid {key!r} is empty; give at least one value")
        return grid


class Resources(_Strict):
    cpus_per_trial: Float = Field(1.0, gt=0)
    # None: one GPU per trial actor when the cluster has GPUs, none otherwise.
    gpus_per_trial: Float | None = Field(None, ge=0)
    # None: chosen per device (see banditsweep.workers.dispatcher.default_batch_size).
    batch_trials: Int | None = Field(None, ge=1)
    # Each shard actor of a sharded trial (its placement-group bundle).
    cpus_per_shard: Float = Field(1.0, gt=0)
    gpus_per_shard: Float = Field(0.0, ge=0)


class SweepSpec(_Strict):
    # The name is a folder under the results root and an MLflow experiment name.
    sweep: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=MAX_NAME)
    horizon: Int = Field(ge=1)
    seeds: int | list[int]
    environments: list[dict[str, Any]] = Field(min_length=1)
    algorithms: list[AlgorithmEntry] = Field(min_length=1)
    resources: Resources = Field(default_factory=Resources)
    log_every: Int = Field(100, ge=1)
    # Rounds between in-trial checkpoints (None: no checkpoints): a trial whose actor dies resumes
    # from its last checkpoint, bit-identical to a run never stopped.
    checkpoint_every: Int | None = Field(None, ge=1)
    # Result sinks mirroring the Parquet results (registry names; None: the default, MLflow).
    sinks: list[str] | None = None

    @field_validator("sweep")
    @classmethod
    def _not_a_results_root_entry(cls, name):
        # `sweep: mlflow.db` would make the MLflow store's path a sweep folder (and MLflow unusable).
        if taken_by_the_results_root(name):
            raise ValueError(f"{show(name)} is the name of a results root's own file; a sweep may not be "
                             f"named {', '.join(RESULTS_ROOT_ENTRIES)}")
        return name

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, seeds):
        allowed = (f"allowed: a positive count n <= {MAX_TRIALS} (seeds 0..n-1) or a list of distinct "
                   f"integer seeds >= 0 and <= 2**63-1")
        if isinstance(seeds, int) and not isinstance(seeds, bool):
            if not 1 <= seeds <= MAX_TRIALS:
                raise ValueError(f"must be a positive count of seeds (got {seeds}); {allowed}")
            return seeds
        if isinstance(seeds, list):
            if not seeds:
                raise ValueError(f"the list of seeds is empty; {allowed}")
            for index, seed in enumerate(seeds):
                if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
                    raise ValueError(f"seed [{index}] must be an integer >= 0 and <= 2**63-1 (got {show(seed)})")
            if len(set(seeds)) != len(seeds):
                repeated = next(seed for seed in seeds if seeds.count(seed) > 1)
                raise ValueError(f"seeds are repeated (got {repeated} twice); give each seed once")
            return seeds
        raise ValueError(f"must be a count or a list of seeds (got {show(seeds)}); {allowed}")

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


@dataclass(frozen=True)
class PlannedTrial:
    """A trial of a sweep, with the names it is shown under."""

    spec: TrialSpec
    label: str              # algorithm display name
    environment: str        # environment display name
    grid_point: tuple[tuple[str, Any], ...] = ()   # the grid values of this trial not named by its label
    shards: int = 0         # > 0: the trial's domain is split over this many shard actors

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id

    @property
    def run_name(self) -> str:
        """The name of the trial's run: label and grid point, environment, seed."""
        point = "".join(f" {key}={value}" for key, value in self.grid_point)
        return f"{self.label}{point} | {self.environment} | seed {self.spec.seed}"

    @property
    def group(self) -> str:
        """What the seeds of one cell share (MLflow's Group-by aggregates over them)."""
        point = "".join(f" {key}={value}" for key, value in self.grid_point)
        return f"{self.label}{point} | {self.environment}"


@dataclass
class Sweep:
    spec: SweepSpec
    source: str
    trials: list[PlannedTrial]

    @property
    def name(self) -> str:
        return self.spec.sweep


def _loc(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _input_loc(loc: tuple, raw: Any) -> tuple:
    """The parts of a pydantic error location that are keys or indices of the input (pydantic adds
    the names of union members, ``[key]`` and the like, which mean nothing to the spec's author)."""
    parts, node = [], raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            parts.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(part)
            node = node[part]
        elif isinstance(node, dict) and part == "[key]":
            continue
        elif not isinstance(node, (dict, list)) or isinstance(part, str) and part[:1].isupper():
            continue   # a union member's name ('GridDomain', 'int', 'function-before[...]')
        else:
            parts.append(part)   # a missing key: still the name the message is about
            node = None
    return tuple(parts)


def _models_in(annotation) -> list[type[BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys allowed in the mapping at ``loc`` (a pydantic location, last part the key itself)."""
    return list(dict.fromkeys(name for m in _models_at(model, loc[:-1]) for name in m.model_fields))


def _models_at(model: type[BaseModel], loc: tuple) -> list[type[BaseModel]]:
    """The models whose mapping sits at pydantic location ``loc`` (a union: several)."""
    models = [model]
    for part in loc:
        if isinstance(part, int) or part == "[key]":
            continue
        named = [m for m in models if m.__name__ == part]
        if named:
            models = named
            continue
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            continue
        models = _models_in(fields[0].annotation)
        if not models:
            return []
    return models


def did_you_mean(name: Any, candidates) -> str:
    """`` (did you mean 'horizon'?)`` for a misspelt name, else ''."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [c for c in candidates if isinstance(c, str)], n=1, cutoff=0.6)
    return f" (did you mean {show(close[0])}?)" if close else ""


def _member_at(loc: tuple, raw: Any, kind: str) -> int | None:
    """The index in ``loc`` of a union member's name (pydantic's ``GridDomain``, ``int``...), if any:
    a part the input does not have that is not the missing key itself."""
    node = raw
    for index, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif part == "[key]":
            return None
        elif isinstance(part, str) and (index < len(loc) - 1 or kind != "missing"):
            return index
        else:
            return None
    return None


def _choose_variant(errors: list[dict], raw: Any, model: type[BaseModel] | None):
    """The errors of the union member the author chose (``domain: {uniform: 0, dim: 2}`` is the
    uniform domain: its error, not the grid's missing ``grid``), and a note naming that choice; a
    SpecError's (location parts, message) where the input matches no member at all."""
    note = ""
    for _ in range(MAX_DEPTH):
        first = errors[0]
        index = _member_at(tuple(first["loc"]), raw, first["type"])
        if index is None:
            return errors, note, None
        prefix = tuple(first["loc"][:index])
        group = [e for e in errors if tuple(e["loc"][:index]) == prefix and len(e["loc"]) > index
                 and _member_at(tuple(e["loc"]), raw, e["type"]) == index]
        members = list(dict.fromkeys(e["loc"][index] for e in group))
        try:
            node = _at(raw, _input_loc(prefix, raw)) if raw is not None else None
        except (KeyError, IndexError, TypeError):
            return errors, note, None

        def keys_of(member) -> list[str]:
            found = _models_at(model, (*prefix, member)) if model is not None else []
            return list(found[0].model_fields) if found and found[0].__name__ == member else []

        def shape(member) -> str:
            keys = keys_of(member)
            return "{" + ", ".join(keys) + "}" if keys else str(member)

        choices = ", ".join(shape(m) for m in members)
        if isinstance(node, dict):
            def matched(member) -> int:
                extra = sum(1 for e in group if e["loc"][index] == member and e["type"] == "extra_forbidden"
                            and len(e["loc"]) == index + 2)
                return len(node) - extra
            best = max(members, key=lambda m: (matched(m), -sum(1 for e in group if e["loc"][index] == m)))
            if matched(best) == 0 or not node:
                keys = ", ".join(str(k) for k in node) or "none"
                return errors, note, (prefix, f"matches none of the choices {choices} (got keys {keys}); "
                                              f"give the keys of exactly one of them")
        else:
            type_errors = all(e["type"].endswith("_type") or e["type"] in ("literal_error", "model_type")
                              for e in group)
            if type_errors:
                return errors, note, (prefix, f"must be one of {choices} (got {show(node)})")
            best = min(members, key=lambda m: sum(1 for e in group if e["loc"][index] == m))
        note = f" (the {shape(best)} choice)" if keys_of(best) else note
        errors = [e for e in group if e["loc"][index] == best]
    return errors, note, None


def _raise_from_validation(source: str, prefix: str, error: ValidationError, model: type[BaseModel] | None = None,
                           raw: Any = None, extra_keys: tuple[str, ...] = ()) -> None:
    """One SpecError for the first problem pydantic found: where (as the spec's author wrote it),
    what is wrong, the value, what is allowed. ``extra_keys`` are allowed at the top level besides
    ``model``'s fields. An unknown key is named before the missing one it may be a misspelling of;
    in a choice between kinds of mapping (a domain), the kind the author chose is the one checked."""
    errors, note, no_match = _choose_variant(list(error.errors()), raw, model)
    if no_match is not None:
        parts, message = no_match
        loc = _input_loc(parts, raw) if raw is not None else parts
        raise SpecError(source, ".".join(p for p in [prefix, _loc(loc)] if p), message) from None
    first = errors[0]
    if first["type"] == "missing":
        parent = tuple(first["loc"][:-1])
        unknown = [e for e in errors if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == parent]
        first = unknown[0] if unknown else first
    missing_here = [e["loc"][-1] for e in errors if e["type"] == "missing"
                    and tuple(e["loc"][:-1]) == tuple(first["loc"][:-1])]
    loc = _input_loc(first["loc"], raw) if raw is not None else tuple(first["loc"])
    location = ".".join(p for p in [prefix, _loc(loc)] if p)
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if "[key]" in first["loc"]:
        message = f"key {show(first.get('input'))} is not a name; keys are strings"
        location = ".".join(p for p in [prefix, _loc(loc[:-1])] if p) or location
    elif first["type"] == "extra_forbidden":
        name = first["loc"][-1]
        allowed = _keys_at(model, tuple(first["loc"])) if model is not None else []
        if len(first["loc"]) == 1:
            allowed = [*extra_keys, *allowed]
        message = f"unknown key {show(name)}{did_you_mean(name, missing_here or allowed)}"
        if missing_here:
            message += f"; missing: {', '.join(str(m) for m in missing_here)}"
        if allowed:
            message += f"; allowed: {', '.join(allowed)}"
    elif first["type"] == "missing":
        name = first["loc"][-1]
        models = _models_at(model, tuple(first["loc"][:-1])) if model is not None else []
        required = [k for k, f in (models[0].model_fields.items() if models else []) if f.is_required()]
        message = f"missing key {show(name)}" + (f"; required keys: {', '.join(required)}" if required else "")
        location = ".".join(p for p in [prefix, _loc(loc[:-1])] if p) or location
    elif "(got " not in message and "input" in first and not isinstance(first["input"], dict):
        message += f" (got {show(first['input'])})"
    raise SpecError(source, location, message + note) from None


# ---------------------------------------------------------------------------------------------
# Reading the YAML: one document, every key once, aliases that do not explode, finite numbers.


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader (no Python objects, no code) that refuses what the safe loader lets pass
    silently: a key given twice (the last one would win), aliases referring to themselves, documents
    whose aliases expand them beyond :data:`MAX_VALUES` values, nesting beyond :data:`MAX_DEPTH`."""

    def __init__(self, stream, source: str):
        super().__init__(stream)
        self.source = source

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # Python refuses to read integers of more than 4300 digits (a ValueError, not a YAML error);
        # anything beyond 20 digits is out of int64's range anyway.
        digits = sum(1 for c in str(node.value) if c.isalnum())
        if digits > 40:
            raise SpecError(self.source, f"line {node.start_mark.line + 1}",
                            f"integer out of range (got {digits} digits); the results store holds integers from "
                            f"-2**63 to 2**63-1 (int64)")
        return super().construct_yaml_int(node)

    def check_node(self, root: yaml.Node) -> None:
        sizes: dict[int, int] = {}
        active: set[int] = set()

        def size(node: yaml.Node, path: tuple, depth: int) -> int:
            key = id(node)
            if key in sizes:
                return sizes[key]
            if key in active:
                raise SpecError(self.source, _loc(path), f"a YAML alias refers to a value that contains it "
                                                          f"(line {node.start_mark.line + 1}); aliases must not nest themselves")
            if depth > MAX_DEPTH:
                raise SpecError(self.source, _loc(path), f"nested more than {MAX_DEPTH} levels deep "
                                                          f"(line {node.start_mark.line + 1})")
            active.add(key)
            total = 1
            if isinstance(node, yaml.SequenceNode):
                for index, child in enumerate(node.value):
                    total += size(child, (*path, index), depth + 1)
            elif isinstance(node, yaml.MappingNode):
                seen: dict[tuple, int] = {}
                for key_node, value_node in node.value:
                    name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                    if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                        line = key_node.start_mark.line + 1
                        identity = (key_node.tag, key_node.value)
                        if identity in seen:
                            lines = f"lines {seen[identity]} and {line}" if seen[identity] != line else f"line {line}"
                            raise SpecError(self.source, _loc((*path, name)),
                                            f"key {show(name)} is given twice ({lines}); give each key once")
                        seen[identity] = line
                    total += size(key_node, path, depth + 1) + size(value_node, (*path, name), depth + 1)
            active.discard(key)
            if total > MAX_VALUES:
                raise SpecError(self.source, _loc(path), f"expands to more than {MAX_VALUES} values through "
                                                          f"YAML aliases; a spec holds at most {MAX_VALUES}")
            sizes[key] = total
            return total

        size(root, (), 0)


_SpecLoader.add_constructor("tag:yaml.org,2002:int", _SpecLoader.construct_yaml_int)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error on one line: what and where."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = error.problem or error.context or "syntax error"
        context = f" ({error.context})" if error.context and error.problem else ""
        return f"not valid YAML{where}: {what}{context}"
    return f"not valid YAML: {error}"


def load_yaml(text: str, source: str) -> Any:
    """The data of one YAML document, read safely and checked (see :class:`_SpecLoader`)."""
    loader = _SpecLoader(text, source)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        loader.check_node(node)
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise SpecError(source, "", _yaml_problem(error)) from None
    except RecursionError:
        raise SpecError(source, "", f"not valid YAML: nested too deeply; at most {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def _check_values(source: str, value: Any, path: tuple = ()) -> None:
    """Every number finite (``.inf`` and ``.nan`` have no place in a trial's content: its id is
    canonical JSON) and every integer an int64: the results store holds no other (a larger one was
    written to the journal, and every later run failed reading it back)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(source, _loc(path), f"must be a finite number (got {show(value)})")
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_INT <= value <= MAX_INT:
        raise SpecError(source, _loc(path), f"integer out of range (got {_big(value)}); the results store holds "
                                            f"integers from -2**63 to 2**63-1 (int64)")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_values(source, item, (*path, key if isinstance(key, (str, int)) else show(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_values(source, item, (*path, index))


# ---------------------------------------------------------------------------------------------
# Booleans where a number is expected, floats where an integer is (pydantic's lax mode takes true
# as 1 and 10.0 as 10).


def _admits(annotation, kind: type) -> bool:
    """Whether ``annotation`` takes values of type ``kind`` (bool, int or float) as they are."""
    if annotation is kind or annotation is Any or annotation is object:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(type(arg) is kind for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType, Annotated):
        return any(_admits(arg, kind) for arg in typing.get_args(annotation))
    return False


def _misplaced(value: Any, annotation) -> bool:
    """A boolean where ``annotation`` expects something else, or a float where it expects an integer."""
    if isinstance(value, bool):
        return not _admits(annotation, bool)
    if isinstance(value, float):
        return _admits(annotation, int) and not _admits(annotation, float)
    return False


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(show(arg) for arg in typing.get_args(annotation))
    if origin is Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _boolean_where_number(value: Any, annotation) -> tuple | None:
    """The path (within ``value``) of a boolean that ``annotation`` expects to be something else, or
    of a float where it expects an integer, if any."""
    if isinstance(value, (bool, float)):
        return () if _misplaced(value, annotation) else None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _boolean_where_number(value, args[0])
    if origin in (typing.Union, types.UnionType):
        found = [_boolean_where_number(value, arg) for arg in args if _could_be(value, arg)]
        return None if not found or None in found else found[0]
    if isinstance(value, list) and origin in (list, tuple, set, frozenset, typing.Sequence) and args:
        for index, item in enumerate(value):
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                item_type = args[index] if index < len(args) else Any
            else:
                item_type = args[0]
            path = _boolean_where_number(item, item_type)
            if path is not None:
                return (index, *path)
    if isinstance(value, dict):
        if origin is dict and len(args) == 2:
            for key, item in value.items():
                path = _boolean_where_number(item, args[1])
                if path is not None:
                    return (key, *path)
        for model in _models_in(annotation)[:1] if inspect.isclass(annotation) else []:
            for key, item in value.items():
                if key in model.model_fields:
                    path = _boolean_where_number(item, model.model_fields[key].annotation)
                    if path is not None:
                        return (key, *path)
    return None


def _could_be(value: Any, annotation) -> bool:
    """Whether ``value`` could be meant as a member ``annotation`` of a union (a mapping as a model
    only if the model has all of its keys)."""
    if annotation is type(None):
        return value is None
    if isinstance(value, dict) and inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return all(key in annotation.model_fields for key in value)
    return True


def _check_booleans(source: str, where: str, values: dict[str, Any], model: type[BaseModel],
                    candidates: bool = False) -> None:
    """No boolean where ``model``'s field expects a number, no float where it expects an integer;
    ``candidates``: each value is a list of candidate values (a grid)."""
    for key, value in values.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            continue
        annotation = list[field.annotation] if candidates else field.annotation
        path = _boolean_where_number(value, annotation)
        if path is not None:
            location = f"{where}.{key}" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            found = _at(value, path)
            kind = "a boolean" if isinstance(found, bool) else "a float"
            raise SpecError(source, location, f"{kind} is not allowed here (got {show(found)}); "
                                              f"allowed: {_type_name(field.annotation)}")


def _at(value: Any, path: tuple) -> Any:
    for part in path:
        value = value[part]
    return value


# ---------------------------------------------------------------------------------------------
# --set overrides


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are YAML scalars (``horizon=200``, ``seeds=[0,1]``)."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError("--set", show(pair), "expected key=value, e.g. --set horizon=200 --set seeds=2")
        key = key.strip()
        if key not in OVERRIDABLE:
            raise SpecError("--set", key, f"cannot be overridden{did_you_mean(key, OVERRIDABLE)}; "
                                          f"allowed: {', '.join(OVERRIDABLE)}")
        try:
            overrides[key] = load_yaml(value, f"--set {key}")
        except SpecError as error:
            raise SpecError("--set", key, f"{error.message} (got {show(value)})") from None
        _check_values("--set", overrides[key], (key,))
    return overrides


OVERRIDABLE = ("sweep", "horizon", "seeds", "log_every", "checkpoint_every", "resources.cpus_per_trial",
                "resources.gpus_per_trial", "resources.batch_trials", "resources.cpus_per_shard",
                "resources.gpus_per_shard")


def _apply_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    raw = dict(raw)
    for key, value in overrides.items():
        if key not in OVERRIDABLE:
            raise SpecError("--set", key, f"cannot be overridden; allowed: {', '.join(OVERRIDABLE)}")
        if key.startswith("resources."):
            resources = raw.get("resources") or {}
            if not isinstance(resources, dict):
                continue   # the spec's own `resources:` is reported as it is
            raw["resources"] = {**resources, key.split(".", 1)[1]: value}
        else:
            raw[key] = value
        if key == "horizon" and isinstance(raw.get("environments"), list):
            # A horizon override applies to every environment, also those with their own horizon.
            raw["environments"] = [
                {**env, "horizon": value} if isinstance(env, dict) and "horizon" in env else env
                for env in raw["environments"]
            ]
    return raw


def read_spec_text(path: str | Path) -> str:
    """A spec file's text: a regular file (not a FIFO, which would block, a device such as /dev/zero,
    or a directory) of at most :data:`MAX_SPEC_BYTES`, UTF-8."""
    source = str(path)
    try:
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer (forever).
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise SpecError(source, "", f"cannot read the spec file ({error.strerror or error})") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise SpecError(source, "", "cannot read the spec file (Is a directory); a spec is a YAML text file")
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise SpecError(source, "", f"not a regular file: {kind}; a spec is a YAML text file")
    with os.fdopen(descriptor, "rb") as handle:
        try:
            data = handle.read(MAX_SPEC_BYTES + 1)   # never more, however large the file
        except OSError as error:
            raise SpecError(source, "", f"cannot read the spec file ({error.strerror or error})") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(source, "", f"the spec file is larger than {MAX_SPEC_BYTES // 1024} KiB; a spec is a "
                                    f"small YAML text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SpecError(source, "", f"not a UTF-8 text file (byte {data[error.start]:#04x} at offset {error.start}); "
                                    f"a spec is a YAML text file in UTF-8") from None


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None) -> Sweep:
    source = str(path)
    raw = load_yaml(read_spec_text(path), source)
    return parse_sweep(raw, source, overrides)


def parse_sweep(raw: Any, source: str = "<spec>", overrides: dict[str, Any] | None = None) -> Sweep:
    if not isinstance(raw, dict):
        raise SpecError(source, "", f"a sweep spec is a YAML mapping with keys sweep, horizon, seeds, "
                                    f"environments, algorithms (optional: resources, log_every, checkpoint_every, "
                                    f"sinks) (got {show(raw)})")
    _check_values(source, raw)
    if overrides:
        raw = _apply_overrides(raw, overrides)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as error:
        try:
            _raise_from_validation(source, "", error, SweepSpec, raw)
        except SpecError as spec_error:
            # A value that came from --set is named as such.
            key = spec_error.location
            if overrides and any(key == k or key.startswith(k + ".") or key.startswith(k + "[") for k in overrides):
                raise SpecError("--set", key, spec_error.message) from None
            raise
    environments = [_check_environment(source, i, env, spec.horizon) for i, env in enumerate(spec.environments)]
    _check_trial_count(source, spec, environments)
    trials: dict[str, PlannedTrial] = {}
    for index, entry in enumerate(spec.algorithms):
        for planned in _expand_algorithm(source, index, entry, environments, spec.seed_list):
            trials.setdefault(planned.trial_id, planned)
            if len(trials) > MAX_TRIALS:
                raise SpecError(source, "algorithms", f"the sweep has more than {MAX_TRIALS} trials; at most "
                                                      f"{MAX_TRIALS} (split it into several sweeps)")
    if not trials:
        raise SpecError(source, "algorithms", "no trial matches: every algorithm's `when` filter or "
                                              "environment support excludes every environment")
    return Sweep(spec=spec, source=source, trials=list(trials.values()))


def _check_trial_count(source: str, spec: SweepSpec, environments: list[dict]) -> None:
    """Refuse a sweep of more than :data:`MAX_TRIALS` trials from its sizes alone (grid values x seeds
    x the environments each entry runs on, its ``when`` and the algorithm's interaction respected),
    before a single trial is built: building 1.2 M took 90 s and 800 MB only to be refused."""
    seeds = len(spec.seeds) if isinstance(spec.seeds, list) else spec.seeds
    total, largest = 0, (0, "")
    for index, entry in enumerate(spec.algorithms):
        try:
            supports = registry.algorithm_class(entry.name).supports
        except (KeyError, ImportError):
            continue   # reported with its name when the entry is expanded
        matching = sum(1 for env in environments if _matches(entry.when, env)
                       and registry.environment_class(env["kind"]).interaction in supports)
        points = math.prod(len(values) for values in entry.grid.values())
        count = points * seeds * matching
        total += count
        if count > largest[0]:
            sizes = " x ".join(str(len(v)) for v in entry.grid.values()) or "1"
            largest = (count, f"algorithms[{index}]: {sizes} grid values x {seeds} seeds x {matching} environments")
    if total > MAX_TRIALS:
        raise SpecError(source, "algorithms", f"the sweep expands to {total} trials; a sweep has at most "
                                              f"{MAX_TRIALS} (the most from {largest[1]} = {largest[0]}; split it "
                                              f"into several sweeps)")


def _check_environment(source: str, index: int, env: dict, default_horizon: int) -> dict:
    where = f"environments[{index}]"
    kinds = registry.environment_names()
    for key in env:
        if not isinstance(key, str):
            raise SpecError(source, where, f"key {show(key)} is not a name; keys are strings")
    if "kind" not in env:
        raise SpecError(source, where, f"missing key 'kind'; allowed kinds: {', '.join(kinds)}")
    kind = env["kind"]
    if not isinstance(kind, str) or kind not in kinds:
        raise SpecError(source, f"{where}.kind", f"unknown environment kind {show(kind)}{did_you_mean(kind, kinds)}; "
                                                 f"allowed: {', '.join(kinds)}")
    for key in SHARD_KEYS:
        if key in env and (not isinstance(env[key], int) or isinstance(env[key], bool) or env[key] < 1):
            raise SpecError(source, f"{where}.{key}", f"must be a positive integer (got {show(env[key])})")
    if all(key in env for key in SHARD_KEYS):
        raise SpecError(source, f"{where}.shards", "give one of 'shards' and 'shard_points', not both")
    horizon = env.get("horizon", default_horizon)
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise SpecError(source, f"{where}.horizon", f"must be a positive integer (got {show(horizon)})")
    if "label" in env and not isinstance(env["label"], str):
        raise SpecError(source, f"{where}.label", f"must be a string (got {show(env['label'])})")
    config_cls = registry.environment_class(kind).Config
    settings = {k: v for k, v in env.items() if k not in ENVIRONMENT_SWEEP_KEYS}
    _check_booleans(source, where, settings, config_cls)
    try:
        config_cls(**settings)
    except ValidationError as error:
        from banditsweep.core.kernel_shards import SHARDABLE_ENVIRONMENTS

        sweep_keys = tuple(k for k in ENVIRONMENT_SWEEP_KEYS if kind in SHARDABLE_ENVIRONMENTS or k not in SHARD_KEYS)
        _raise_from_validation(source, where, error, config_cls, settings, sweep_keys)
    except (ValueError, TypeError) as error:
        raise SpecError(source, where, str(error)) from None
    return {**env, "horizon": horizon}


def _matches(when: dict[str, Any], env: dict) -> bool:
    for key, wanted in when.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        if env.get(key) not in values:
            return False
    return True


def _label_fields(source: str, where: str, label: str | None, params_cls) -> list[str]:
    """The ``{param}`` placeholders of a label template, e.g. ``"GA ({likelihood})"``: one row and
    one curve per value in the report instead of the best value per cell. Only plain parameter names
    are allowed (no attribute or index access, no format specs)."""
    if not label:
        return []
    try:
        parsed = list(string.Formatter().parse(label))
    except ValueError as error:
        raise SpecError(source, f"{where}.label", f"bad label template {show(label)}: {error}") from None
    fields = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in params_cls.model_fields or spec or conversion:
            raise SpecError(source, f"{where}.label",
                            f"placeholder {{{field}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} "
                            f"is not a parameter name; allowed: {', '.join(params_cls.model_fields)}")
        fields.append(field)
    return fields


def _expand_algorithm(source: str, index: int, entry: AlgorithmEntry, environments: list[dict],
                      seeds: list[int]):
    where = f"algorithms[{index}]"
    names = registry.algorithm_names()
    if entry.name not in names:
        raise SpecError(source, f"{where}.name", f"unknown algorithm {show(entry.name)}"
                                                 f"{did_you_mean(entry.name, names)}; allowed: {', '.join(names)}")
    try:
        policy_cls = registry.algorithm_class(entry.name)
    except ImportError as error:
        raise SpecError(source, f"{where}.name", f"algorithm {show(entry.name)} cannot be loaded: {error}") from None
    params_cls = policy_cls.Params
    overlap = set(entry.grid) & set(entry.params)
    if overlap:
        raise SpecError(source, f"{where}.grid", f"key {show(sorted(overlap)[0])} is in both grid and params; keep one")
    allowed_params = ", ".join(params_cls.model_fields) or "(none)"
    for key in [*entry.grid, *entry.params]:
        if key not in params_cls.model_fields:
            section = "grid" if key in entry.grid else "params"
            raise SpecError(source, f"{where}.{section}.{key}",
                            f"unknown parameter of {show(entry.name)}{did_you_mean(key, params_cls.model_fields)}; "
                            f"allowed: {allowed_params}")
    env_keys = {k for env in environments for k in env}
    for key in entry.when:
        if key not in env_keys:
            raise SpecError(source, f"{where}.when.{key}",
                            f"no environment has key {show(key)}; environment keys: {', '.join(sorted(env_keys))}")
    keys = list(entry.grid)
    count = math.prod(len(entry.grid[k]) for k in keys) * len(seeds) * len(environments)
    if count > MAX_TRIALS:
        raise SpecError(source, f"{where}.grid", f"{len(seeds)} seeds x {len(environments)} environments x "
                                                 f"{' x '.join(str(len(entry.grid[k])) for k in keys) or 1} grid "
                                                 f"values make {count} trials; a sweep has at most {MAX_TRIALS}")
    _check_booleans(source, f"{where}.params", entry.params, params_cls)
    _check_booleans(source, f"{where}.grid", entry.grid, params_cls, candidates=True)
    points = [dict(zip(keys, values)) for values in itertools.product(*(entry.grid[k] for k in keys))]
    for point in points:
        try:
            params_cls(**entry.params, **point)
        except ValidationError as error:
            first = error.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else ""
            section = "grid" if key in entry.grid else "params"
            _raise_from_validation(source, f"{where}.{section}" if key else where, error, params_cls,
                                   {**entry.params, **point})
    label_fields = _label_fields(source, where, entry.label, params_cls)
    for env_index, env in enumerate(environments):
        if not _matches(entry.when, env):
            continue
        env_cls = registry.environment_class(env["kind"])
        if env_cls.interaction not in policy_cls.supports:
            continue
        env_config = {k: v for k, v in env.items() if k not in ("horizon", *SHARD_KEYS)}
        env_name = environment_label(env_config)
        sharding = _sharding(source, where, entry, env, f"environments[{env_index}]")
        for point in points:
            for seed in seeds:
                spec = TrialSpec.create(entry.name, {**entry.params, **point}, env_config, seed, env["horizon"],
                                        sharded=sharding is not None)
                shards = _shard_count(source, where, spec, sharding) if sharding else 0
                label = (entry.label or entry.name).format_map({k: spec.params[k] for k in label_fields})
                unnamed = tuple((k, point[k]) for k in keys if k not in label_fields)
                yield PlannedTrial(spec=spec, label=label, environment=env_name, grid_point=unnamed, shards=shards)


def _sharding(source: str, where: str, entry: AlgorithmEntry, env: dict, env_where: str
              ) -> tuple[str, str, int] | None:
    """(where it was asked, the key, its value) of a sharding request; the algorithm entry's wins."""
    if entry.shards is not None and entry.shard_points is not None:
        raise SpecError(source, f"{where}.shards", "give one of 'shards' and 'shard_points', not both")
    for owner, values in ((where, {"shards": entry.shards, "shard_points": entry.shard_points}), (env_where, env)):
        for key in SHARD_KEYS:
            if values.get(key) is not None:
                return owner, key, int(values[key])
    return None


def _shard_count(source: str, where: str, spec: TrialSpec, sharding: tuple[str, str, int]) -> int:
    from banditsweep.core.kernel_shards import check_shardable, domain_shape
    from banditsweep.core.sharding import max_shards, shards_for

    asked_at, key, value = sharding
    try:
        check_shardable(spec)
    except ValueError as error:
        raise SpecError(source, f"{asked_at}.{key}", str(error)) from None
    n, _ = domain_shape(spec)
    count = shards_for(n, value if key == "shards" else None, value if key == "shard_points" else None)
    if count > max_shards(n):
        raise SpecError(source, f"{asked_at}.{key}", f"a domain of {n} points splits into at most {max_shards(n)} "
                                                    f"shards (got {value})")
    return count
