"""Sweep specs: the YAML contract, validated in full before anything runs.

A spec is data. It is read with YAML's safe loader and names algorithms and environments only by
their registry keys; nothing in it is ever imported or executed. Every problem is reported as one
line ``<file>: <key path>: <what is wrong> (got <value>); <what is allowed>`` of at most
``MAX_MESSAGE`` characters (long values are shortened; :mod:`banditsweep.sweeps.spec.errors`), and
the CLI exits with code 2 before starting or writing anything.

What is refused besides the schema: a file that is not UTF-8 text or is larger than
``MAX_SPEC_BYTES``; a key given twice in one mapping; YAML aliases that refer to themselves or
expand the document beyond ``MAX_VALUES`` values (an "alias bomb"), nesting deeper than
``MAX_DEPTH``; numbers that are not finite (``.inf``, ``.nan``); booleans where a number is
expected (``horizon: true`` is not T = 1), and floats where an integer is (``horizon: 10.0``); integers
beyond what the results store holds (int64) (all read by :mod:`banditsweep.sweeps.spec.reading`); a
sweep name that is a results root's own file (:mod:`banditsweep.workers.storage.root_entries`); sweeps of more
than :data:`MAX_TRIALS` trials, counted before a single trial is built.

This module holds the schema (pydantic models), the expansion of a spec into its trials, and the
checks of what it expands to: what a valid spec may still not say, because it can only be a
mistake (a grid value given twice, two entries or environments that make the same trials, one label
on two algorithms or on two different trials of one report cell, an entry, an environment or a
``when`` value that makes no trial), each refused with one line naming the key before anything runs.
The checks are the last part of the expansion (they read its entries and planned trials, and it asks
them of what it expands), so they are one subject with it, and the module is long for that. The
``--set`` overrides are :mod:`banditsweep.sweeps.spec.overrides`.

A trial is (algorithm, params + one grid point, environment, seed, horizon); see
:class:`banditsweep.core.engine.trial.TrialSpec`.
"""

from __future__ import annotations

import itertools
import math
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from banditsweep.core.engine import registry
from banditsweep.core.engine.canonical import canonical_json
from banditsweep.core.engine.trial import TrialSpec, environment_label, resolve_environment
from banditsweep.sweeps.spec.errors import SpecError, did_you_mean, raise_from_validation, show
from banditsweep.sweeps.spec.overrides import apply_overrides
from banditsweep.sweeps.spec.reading import check_booleans, check_values, load_yaml, read_spec_text
from banditsweep.workers import MLFLOW_SINK, RESULTS_ROOT_ENTRIES, taken_by_the_results_root

# Where a run mirrors its results unless its spec's `sinks:` or `--sink` say otherwise.
DEFAULT_SINKS = (MLFLOW_SINK,)

# Keys of an environment entry that belong to the sweep, not to the environment's Config.
ENVIRONMENT_SWEEP_KEYS = ("kind", "horizon", "label", "shards", "shard_points")
MAX_TRIALS = 1_000_000       # trials of one sweep
MAX_NAME = 100               # characters of a sweep name (a folder and an MLflow experiment name)
MAX_SEED = 2**63 - 1         # seeds are stored as int64


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


def check_seeds(seeds: Any) -> int | list[int]:
    """A spec's seeds: a count n (seeds 0..n-1) or a list of distinct seeds."""
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


class Resources(_Strict):
    cpus_per_trial: Float = Field(1.0, gt=0)
    # None: one GPU per trial actor when the cluster has GPUs, none otherwise.
    gpus_per_trial: Float | None = Field(None, ge=0)
    # None: chosen per device (see banditsweep.workers.execution.batches.default_batch_size).
    batch_trials: Int | None = Field(None, ge=1)
    # Each shard actor of a sharded trial (its placement-group bundle).
    cpus_per_shard: Float = Field(1.0, gt=0)
    gpus_per_shard: Float = Field(0.0, ge=0)


class Confirm(_Strict):
    """The held-out stage of a sweep: each cell's grid point, chosen on the sweep's ``seeds`` by the
    report's rule (sweeps.results.report.choose_grid_points), runs again on these fresh seeds, and the report
    judges every cell on them alone. A count n: the n seeds after the largest of ``seeds``."""

    seeds: int | list[int]

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, seeds):
        return check_seeds(seeds)


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
    # Result sinks mirroring the Parquet results (registry names; None: DEFAULT_SINKS).
    sinks: list[str] | None = None
    # What MLflow gets: a run per trial, per cell (label x grid point x environment: the seeds' mean
    # and band), or both; auto: per trial up to 2,000 trials, else per cell (workers.mirrors.mlflow.sink).
    mlflow_runs: Literal["auto", "trials", "cells", "both"] = "auto"
    # Chosen grid points run again on fresh seeds, and judged there (None: no held-out stage).
    confirm: Confirm | None = None

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
        return check_seeds(seeds)

    @field_validator("sinks")
    @classmethod
    def _sinks_once(cls, sinks):
        for index, name in enumerate(sinks or []):
            if name in sinks[:index]:
                raise ValueError(f"sink {show(name)} is given twice ([{sinks.index(name)}] and [{index}]); "
                                 f"give each sink once")
        return sinks

    @model_validator(mode="after")
    def _fresh_confirm_seeds(self):
        if self.confirm is not None:
            reused = sorted(set(self.seed_list) & set(self.confirm_seeds))
            if reused:
                raise ValueError(f"confirm.seeds: seed {reused[0]} is also one of `seeds`, which choose the grid "
                                 f"points; the confirming seeds must be fresh (e.g. confirm: {{seeds: 10}}, the "
                                 f"10 seeds after the largest of `seeds`)")
            if max(self.confirm_seeds) > MAX_SEED:
                raise ValueError(f"confirm.seeds: the seeds after {max(self.seed_list)} pass 2**63-1; give a list")
        return self

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def confirm_seeds(self) -> list[int]:
        """The held-out stage's seeds ([] without one)."""
        if self.confirm is None:
            return []
        seeds = self.confirm.seeds
        if isinstance(seeds, int):
            start = max(self.seed_list) + 1
            return list(range(start, start + seeds))
        return list(seeds)


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
    selected_by: str = ""   # the `--only` selectors that cut the spec's trials down, as written

    @property
    def name(self) -> str:
        return self.spec.sweep


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None, max_trials: int = MAX_TRIALS) -> Sweep:
    source = str(path)
    raw = load_yaml(read_spec_text(path), source)
    return parse_sweep(raw, source, overrides, max_trials)


def parse_sweep(raw: Any, source: str = "<spec>", overrides: dict[str, Any] | None = None,
                max_trials: int = MAX_TRIALS) -> Sweep:
    """The sweep a spec's data describes, checked; ``max_trials`` (at most MAX_TRIALS) bounds its
    size, counted before any trial is built."""
    keys = ("a YAML mapping with keys sweep, horizon, seeds, environments, algorithms (optional: resources, "
            "log_every, checkpoint_every, sinks, mlflow_runs, confirm)")
    if not isinstance(raw, dict):
        what = "a list" if isinstance(raw, list) else "text" if isinstance(raw, str) else "nothing" if raw is None else "a value"
        # What the file holds is not shown: a path given by mistake may be any file (a secret's included).
        raise SpecError(source, "", f"not a sweep spec: it holds {what}; a sweep spec is {keys}")
    if raw and not set(map(str, raw)) & set(SweepSpec.model_fields):
        raise SpecError(source, "", f"not a sweep spec: none of its {len(raw)} top-level key(s) is a spec's; "
                                    f"a sweep spec is {keys}")
    check_values(source, raw)
    written = raw   # as the file writes it: what --set horizon replaced is still told apart
    if overrides:
        raw = apply_overrides(raw, overrides)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as error:
        try:
            raise_from_validation(source, "", error, SweepSpec, raw)
        except SpecError as spec_error:
            # A value that came from --set is named as such.
            key = spec_error.location
            if overrides and any(key == k or key.startswith(k + ".") or key.startswith(k + "[") for k in overrides):
                raise SpecError("--set", key, spec_error.message) from None
            raise
    environments = [_check_environment(source, i, env, spec.horizon) for i, env in enumerate(spec.environments)]
    horizons = written_horizons(written, environments) if overrides and "horizon" in overrides else None
    check_environment_repeats(source, environments, horizons)
    _check_trial_count(source, spec, environments, min(max_trials, MAX_TRIALS))
    trials: dict[str, PlannedTrial] = {}
    collisions = Collisions(source, spec.algorithms, environments, horizons)
    for index, entry in enumerate(spec.algorithms):
        for point in _expand_algorithm(source, index, entry, environments, spec.seed_list):
            collisions.add(point)
            for planned in point.trials:
                # A trial made twice is refused above; only environments that --set horizon made
                # equal (different horizons as written) share their trials, shown under the first.
                trials.setdefault(planned.trial_id, planned)
            if len(trials) > MAX_TRIALS:
                raise SpecError(source, "algorithms", f"the sweep has more than {MAX_TRIALS} trials; at most "
                                                      f"{MAX_TRIALS} (split it into several sweeps)")
    check_every_entry_has_trials(source, spec.algorithms, environments, collisions)
    return Sweep(spec=spec, source=source, trials=list(trials.values()))


def _check_trial_count(source: str, spec: SweepSpec, environments: list[dict], limit: int = MAX_TRIALS) -> None:
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
        matching = sum(1 for env in environments if matches(entry.when, env)
                       and registry.environment_class(env["kind"]).interaction in supports)
        points = math.prod(len(values) for values in entry.grid.values())
        count = points * seeds * matching
        total += count
        if count > largest[0]:
            sizes = " x ".join(str(len(v)) for v in entry.grid.values()) or "1"
            largest = (count, f"algorithms[{index}]: {sizes} grid values x {seeds} seeds x {matching} environments")
    if total > limit:
        raise SpecError(source, "algorithms", f"the sweep expands to {total} trials; a sweep has at most "
                                              f"{limit} (the most from {largest[1]} = {largest[0]}; split it "
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
    try:
        config_cls = registry.environment_class(kind).Config
    except ImportError as error:   # a plugin's registered class that cannot be imported
        raise SpecError(source, f"{where}.kind", f"environment kind {show(kind)} cannot be loaded: {error}") from None
    settings = {k: v for k, v in env.items() if k not in ENVIRONMENT_SWEEP_KEYS}
    check_booleans(source, where, settings, config_cls)
    try:
        config_cls(**settings)
    except ValidationError as error:
        from banditsweep.core.kernel.sharded.shard import shardable_environment

        sweep_keys = tuple(k for k in ENVIRONMENT_SWEEP_KEYS if shardable_environment(kind) or k not in SHARD_KEYS)
        raise_from_validation(source, where, error, config_cls, settings, sweep_keys)
    except (ValueError, TypeError) as error:
        raise SpecError(source, where, str(error)) from None
    return {**env, "horizon": horizon}


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
    check_when_values(source, where, entry.when, environments)
    keys = list(entry.grid)
    count = math.prod(len(entry.grid[k]) for k in keys) * len(seeds) * len(environments)
    if count > MAX_TRIALS:
        raise SpecError(source, f"{where}.grid", f"{len(seeds)} seeds x {len(environments)} environments x "
                                                 f"{' x '.join(str(len(entry.grid[k])) for k in keys) or 1} grid "
                                                 f"values make {count} trials; a sweep has at most {MAX_TRIALS}")
    check_booleans(source, f"{where}.params", entry.params, params_cls)
    check_booleans(source, f"{where}.grid", entry.grid, params_cls, candidates=True)
    points = [dict(zip(keys, values)) for values in itertools.product(*(entry.grid[k] for k in keys))]
    for point in points:
        try:
            params_cls(**entry.params, **point)
        except ValidationError as error:
            first = error.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else ""
            section = "grid" if key in entry.grid else "params"
            raise_from_validation(source, f"{where}.{section}" if key else where, error, params_cls,
                                   {**entry.params, **point})
    check_grid_repeats(source, where, entry, params_cls)
    label_fields = _label_fields(source, where, entry.label, params_cls)
    for env_index, env in enumerate(environments):
        if not matches(entry.when, env):
            continue
        env_cls = registry.environment_class(env["kind"])
        if env_cls.interaction not in policy_cls.supports:
            continue
        env_config = {k: v for k, v in env.items() if k not in ("horizon", *SHARD_KEYS)}
        env_name = environment_label(env_config)
        sharding = _sharding(source, where, entry, env, f"environments[{env_index}]")
        for point in points:
            first = TrialSpec.create(entry.name, {**entry.params, **point}, env_config, seeds[0], env["horizon"],
                                     sharded=sharding is not None)
            label = (entry.label or entry.name).format_map({k: first.params[k] for k in label_fields})
            unnamed = tuple((k, point[k]) for k in keys if k not in label_fields)
            planned = []
            for seed in seeds:
                spec = first.with_seed(seed)
                shards = _shard_count(source, where, spec, sharding) if sharding else 0
                planned.append(PlannedTrial(spec=spec, label=label, environment=env_name, grid_point=unnamed,
                                            shards=shards))
            yield GridPoint(index, env_index, point, first, label, unnamed, env_name, planned)


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
    from banditsweep.core.kernel.sharded.partition import max_shards, shards_for
    from banditsweep.core.kernel.sharded.shard import check_shardable, domain_shape

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


# ---- the checks of what a spec expands to ------------------------------------------------------
# What a valid spec may still not say, because it can only be a mistake. Each is refused with one
# line naming the key (sweeps.spec.errors), before anything runs; the expansion above asks them of
# what it expands.

# Execution keys of an environment or algorithm entry: split each trial's domain over shards
# (core.kernel.sharded); ``shards`` a count, ``shard_points`` the most points per shard.
SHARD_KEYS = ("shards", "shard_points")


def matches(when: dict[str, Any], env: dict) -> bool:
    for key, wanted in when.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        if env.get(key) not in values:
            return False
    return True


@dataclass(frozen=True)
class GridPoint:
    """The trials (one per seed) of one algorithm entry's grid point on one environment."""

    entry: int                  # algorithms[entry]
    environment: int            # environments[environment]
    values: dict[str, Any]      # the grid point as written
    first: TrialSpec            # its trial of the first seed
    label: str
    grid_point: tuple[tuple[str, Any], ...]   # the grid values its label does not name
    environment_name: str
    trials: list[PlannedTrial]

    @property
    def cell(self) -> str:
        """The report cell (and MLflow group) its trials are shown in."""
        point = "".join(f" {key}={value}" for key, value in self.grid_point)
        return f"{self.label}{point} | {self.environment_name}"

    def describe(self) -> str:
        """What the trial is, for a message: ``linucb nu=0.1 on synthetic:h1``."""
        values = "".join(f" {key}={show(value)}" for key, value in self.values.items())
        return f"{self.first.algorithm}{values} on {self.environment_name}"


# ---------------------------------------------------------------------------------------------
# Repeats and collisions: a list value given twice, two entries making the same trial, one label
# naming two algorithms, two different trials in one report cell, an entry that makes no trial.


def _same_value(a: Any, b: Any) -> bool:
    """Whether two values of a spec are written the same (1 and 1.0 are not; true and 1 are not)."""
    return type(a) is type(b) and a == b


def check_grid_repeats(source: str, where: str, entry: AlgorithmEntry, params_cls) -> None:
    """Each grid list gives each value once, also once validated: ``nu: [0.1, 0.1]`` and ``nu: [1,
    1.0]`` (a float parameter) are one value, and would be one trial."""
    base = {key: values[0] for key, values in entry.grid.items()}
    for key, values in entry.grid.items():
        if len(values) < 2:
            continue
        seen: dict[str, int] = {}
        for index, value in enumerate(values):
            earlier = next((i for i in range(index) if _same_value(values[i], value)), None)
            if earlier is not None:
                raise SpecError(source, f"{where}.grid.{key}[{index}]",
                                f"{show(value)} is repeated (also at [{earlier}]); give each grid value once")
            # Every point was validated above: this one is a point of the grid.
            resolved = params_cls(**entry.params, **{**base, key: value}).model_dump(mode="json")
            identity = canonical_json(resolved)
            if identity in seen:
                earlier = seen[identity]
                raise SpecError(source, f"{where}.grid.{key}[{index}]",
                                f"{show(value)} is the same value of {key} as {show(values[earlier])} at [{earlier}] "
                                f"(both {show(resolved.get(key))} once validated), so the same trials; give each "
                                f"grid value once")
            seen[identity] = index


def check_when_values(source: str, where: str, when: dict[str, Any], environments: list[dict]) -> None:
    """Each value of a ``when`` filter is given once and is some environment's value of its key (a
    value no environment has is a typo that silently drops trials)."""
    for key, wanted in when.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        present = [env.get(key) for env in environments]
        for index, value in enumerate(values):
            at = f"{where}.when.{key}" + (f"[{index}]" if isinstance(wanted, list) else "")
            if any(earlier == value for earlier in values[:index]):   # as matches compares them
                raise SpecError(source, at, f"{show(value)} is given twice; give each value once")
            if not any(have == value for have in present):
                shown = list(dict.fromkeys(show(v) for v in present if v is not None))
                raise SpecError(source, at, f"no environment has {key} {show(value)}, so it selects nothing; "
                                            f"the environments' values: {', '.join(shown)}")


def written_horizons(written: dict, environments: list[dict]) -> list[str]:
    """Each environment's horizon as the file writes it (``--set horizon`` gives every environment
    its value): environments that differ only by it are different environments of the spec."""
    entries = written.get("environments")
    entries = entries if isinstance(entries, list) and len(entries) == len(environments) else [{}] * len(environments)
    return [repr(entry.get("horizon", written.get("horizon")) if isinstance(entry, dict) else written.get("horizon"))
            for entry in entries]


def _environment_content(env: dict) -> dict:
    """What the trials of an environment entry are made of: its kind and settings, defaults filled
    in (its label, horizon and shard count are not settings)."""
    config = {k: v for k, v in env.items() if k not in ("horizon", *SHARD_KEYS)}
    return {"kind": env["kind"], **resolve_environment(config).model_dump(mode="json")}


def check_environment_repeats(source: str, environments: list[dict], horizons: list[str] | None) -> None:
    """No environment given twice: the same settings (once validated, defaults filled in) and
    horizon run the very same trials, whatever their labels."""
    seen: dict[str, int] = {}
    for index, env in enumerate(environments):
        content = _environment_content(env)
        horizon = horizons[index] if horizons is not None else env["horizon"]
        identity = canonical_json([content, horizon, any(k in env for k in SHARD_KEYS)])
        if identity in seen:
            earlier = seen[identity]
            other = environments[earlier]
            name = environment_label({k: v for k, v in env.items() if k not in ("horizon", *SHARD_KEYS)})
            written_alike = ({k: v for k, v in env.items() if k not in ("horizon", "label")}
                             == {k: v for k, v in other.items() if k not in ("horizon", "label")})
            how = ("" if written_alike else " (equal once defaults are filled in)") + (
                "; their labels differ, but a label does not change a trial" if env.get("label") != other.get("label")
                else "")
            raise SpecError(source, f"environments[{index}]",
                            f"is the same environment as environments[{earlier}] ({name}, horizon {env['horizon']})"
                            f"{how}: both would run the very same trials; give each environment once")
        seen[identity] = index


def _difference(a: TrialSpec, b: TrialSpec, horizons: tuple[str, str] | None = None) -> str:
    """How the trials ``a`` and ``b`` differ, briefly: ``lam 10.0 vs 1.0, horizon 500 vs 100``."""
    parts = []
    for what, x, y in (("params", a.params, b.params), ("environment", a.environment, b.environment)):
        for key in dict.fromkeys([*x, *y]):
            if x.get(key) != y.get(key):
                parts.append(f"{key} {show(x.get(key))} vs {show(y.get(key))}")
    if a.horizon != b.horizon:
        parts.append(f"horizon {a.horizon} vs {b.horizon}")
    elif horizons is not None and horizons[0] != horizons[1]:
        parts.append(f"horizon {horizons[0]} vs {horizons[1]} as written")
    if a.sharded != b.sharded:
        parts.append(f"{'sharded' if a.sharded else 'not sharded'} vs {'sharded' if b.sharded else 'not sharded'}")
    return ", ".join(parts[:4]) + (", ..." if len(parts) > 4 else "")


class Collisions:
    """The trials of a sweep's points, checked as they are made: no trial made twice (two entries,
    two environments or two grid values alike), no label naming two algorithms, no two different
    trials shown in one report cell (label, grid point, environment) for a seed. Checked once per
    point, with its first seed's trial: the seeds are the same for every entry."""

    def __init__(self, source: str, entries: list[AlgorithmEntry], environments: list[dict],
                 horizons: list[str] | None):
        self.source, self.entries, self.environments, self.horizons = source, entries, environments, horizons
        self.by_trial: dict[str, GridPoint] = {}
        self.by_label: dict[str, GridPoint] = {}
        self.by_cell: dict[tuple, GridPoint] = {}
        self.entry_points = [0] * len(entries)
        self.environment_points = [0] * len(environments)

    def identity(self, point: GridPoint) -> str:
        """The trial's id, or under ``--set horizon`` its content with the horizon as written: the
        spec's own repeats are refused, those the override makes are not."""
        if self.horizons is None:
            return point.first.trial_id
        return canonical_json({**point.first.content(), "horizon": self.horizons[point.environment]})

    def add(self, point: GridPoint) -> None:
        self.entry_points[point.entry] += 1
        self.environment_points[point.environment] += 1
        identity = self.identity(point)
        other = self.by_trial.setdefault(identity, point)
        if other is not point:
            self._made_twice(other, point)
        known = self.by_label.setdefault(point.label, point)
        if known.first.algorithm != point.first.algorithm:
            self._label_of_two_algorithms(known, point)
        other = self.by_cell.setdefault((point.label, point.grid_point, point.environment_name), point)
        if other is not point and self.identity(other) != identity:
            self._one_cell(other, point)

    def _made_twice(self, other: GridPoint, point: GridPoint) -> None:
        trial = point.describe()
        if point.entry != other.entry:
            envs = "" if point.environment == other.environment else \
                f" (on environments[{point.environment}] and environments[{other.environment}])"
            raise SpecError(self.source, f"algorithms[{point.entry}]",
                            f"makes the same trials as algorithms[{other.entry}]{envs}: both make {trial}, every "
                            f"seed; a trial runs once, under one label: give each entry once, or tell them apart "
                            f"by their grid values or `when`")
        if point.environment != other.environment:
            raise SpecError(self.source, f"environments[{point.environment}]",
                            f"makes the same trials as environments[{other.environment}] ({trial}); give each "
                            f"environment once")
        raise SpecError(self.source, f"algorithms[{point.entry}].grid",
                        f"two grid points make the same trial ({trial}); give each grid value once")

    def _label_of_two_algorithms(self, known: GridPoint, point: GridPoint) -> None:
        entry = self.entries[point.entry]
        at = point.entry if entry.label is not None else known.entry
        raise SpecError(self.source, f"algorithms[{at}].label",
                        f"label {show(point.label)} names two algorithms, {known.first.algorithm} "
                        f"(algorithms[{known.entry}]) and {point.first.algorithm} (algorithms[{point.entry}]): their "
                        f"rows and curves would merge in the report; give each algorithm its own label")

    def _one_cell(self, other: GridPoint, point: GridPoint) -> None:
        horizons = None if self.horizons is None else (self.horizons[point.environment],
                                                       self.horizons[other.environment])
        difference = _difference(point.first, other.first, horizons)
        in_environment = (point.first.params == other.first.params and point.environment != other.environment)
        merge = f"their results would merge in one report cell ({point.cell})"
        if in_environment:
            raise SpecError(self.source, f"environments[{point.environment}]",
                            f"is shown as {show(point.environment_name)} like environments[{other.environment}], but "
                            f"their trials differ ({difference}): {merge}; give the environments different labels")
        key = next((k for k in point.first.params if point.first.params[k] != other.first.params.get(k)), None)
        placeholder = f" (a {{{key}}} placeholder in it)" if key else ""
        if point.entry == other.entry:
            raise SpecError(self.source, f"algorithms[{point.entry}].label",
                            f"two of its grid points are shown alike but differ ({difference}): {merge}; name "
                            f"what differs in the label{placeholder}")
        raise SpecError(self.source, f"algorithms[{point.entry}]" + (".label" if self.entries[point.entry].label else ""),
                        f"its trials and those of algorithms[{other.entry}] differ ({difference}) but are shown "
                        f"alike: {merge}; give the entries different labels{placeholder}, put the values in one "
                        f"entry's grid, or part them by `when`")


def _runs_on(policy_cls) -> list[str]:
    """The environment kinds an algorithm runs on (their interaction is one it supports)."""
    kinds = []
    for kind in registry.environment_names():
        try:
            if registry.environment_class(kind).interaction in policy_cls.supports:
                kinds.append(kind)
        except ImportError:
            continue
    return kinds


def check_every_entry_has_trials(source: str, entries: list[AlgorithmEntry], environments: list[dict],
                                  collisions: Collisions) -> None:
    """Every algorithm entry makes a trial, and every environment has one: an entry whose `when`
    filter or environment support excludes every environment (``kernel_exp3`` on a ``synthetic``
    environment) is a mistake, named with the kinds it runs on and those the spec has."""
    kinds = list(dict.fromkeys(env["kind"] for env in environments))
    spec_kinds = f"the spec's environment kinds: {', '.join(kinds)}"
    empty = [index for index, count in enumerate(collisions.entry_points) if count == 0]
    if empty:
        reasons = []
        for index in empty:
            entry = entries[index]
            runs_on = _runs_on(registry.algorithm_class(entry.name))
            selected = [env for env in environments if matches(entry.when, env)]
            fix = "fix the filter, or remove the entry"
            if not selected:
                reasons.append((f"algorithms[{index}].when", f"{entry.name}'s `when` filter matches no environment "
                                f"(none has all of {show(entry.when)})", fix))
            elif entry.when and any(env["kind"] in runs_on for env in environments):
                names = ", ".join(environment_label({k: v for k, v in env.items() if k not in ("horizon", *SHARD_KEYS)})
                                  for env in selected)
                reasons.append((f"algorithms[{index}].when", f"{entry.name}'s `when` filter selects only environments "
                                f"it does not run on ({names}); {entry.name} runs on {', '.join(runs_on) or 'no kind'}",
                                fix))
            else:
                reasons.append((f"algorithms[{index}].name", f"{entry.name} runs on no environment of the spec: it "
                                f"runs on {', '.join(runs_on) or 'no registered kind'}",
                                "add an environment it runs on, or remove the entry"))
        if len(reasons) == 1:
            location, reason, fix = reasons[0]
            raise SpecError(source, location, f"makes no trial: {reason}; {spec_kinds}; {fix}")
        listed = "; ".join(f"{location.rsplit('.', 1)[0]}: {reason}" for location, reason, _ in reasons)
        what = "no algorithm entry makes a trial" if len(empty) == len(entries) else f"{len(empty)} entries make no trial"
        raise SpecError(source, "algorithms", f"{what}: {listed}; {spec_kinds}; each entry must make a trial")
    for index, count in enumerate(collisions.environment_points):
        if count == 0:
            env = environments[index]
            name = environment_label({k: v for k, v in env.items() if k not in ("horizon", *SHARD_KEYS)})
            raise SpecError(source, f"environments[{index}]",
                            f"no algorithm runs on {name}: every entry's `when` filter or environment support "
                            f"excludes it (the entries run on: "
                            f"{', '.join(dict.fromkeys(k for e in entries for k in _runs_on(registry.algorithm_class(e.name))))}"
                            f"); add an algorithm that runs on it, or remove it")
