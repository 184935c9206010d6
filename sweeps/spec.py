"""Sweep specs: the YAML contract, validated in full before anything runs.

A spec is data. It is read with ``yaml.safe_load`` and names algorithms and environments only by
their registry keys; nothing in it is ever imported or executed. Every problem is reported as
``<file>: <key path>: <what is wrong>; <what is allowed>`` and the CLI exits with code 2 before
starting or writing anything.

A trial is (algorithm, params + one grid point, environment, seed, horizon); see
:class:`banditsweep.core.trial.TrialSpec`.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from banditsweep.core import registry
from banditsweep.core.trial import TrialSpec, environment_label

# Keys of an environment entry that belong to the sweep, not to the environment's Config.
ENVIRONMENT_SWEEP_KEYS = ("kind", "horizon", "label")


class SpecError(ValueError):
    """A sweep spec is invalid. ``str(error)`` names the file, the key and what is allowed."""

    def __init__(self, source: str, location: str, message: str):
        self.source, self.location, self.message = source, location, message
        super().__init__(f"{source}: {location}: {message}" if location else f"{source}: {message}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class AlgorithmEntry(_Strict):
    name: str
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    when: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None

    @field_validator("grid")
    @classmethod
    def _grid_not_empty(cls, grid):
        for key, values in grid.items():
            if not values:
                raise ValueError(f"grid {key!r} is empty; give at least one value")
        return grid


class Resources(_Strict):
    cpus_per_trial: float = Field(1.0, gt=0)
    # None: one GPU per trial actor when the cluster has GPUs, none otherwise.
    gpus_per_trial: float | None = Field(None, ge=0)
    # None: chosen per device (see banditsweep.workers.dispatcher.default_batch_size).
    batch_trials: int | None = Field(None, ge=1)


class SweepSpec(_Strict):
    sweep: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    horizon: int = Field(ge=1)
    seeds: int | list[int]
    environments: list[dict[str, Any]] = Field(min_length=1)
    algorithms: list[AlgorithmEntry] = Field(min_length=1)
    resources: Resources = Field(default_factory=Resources)
    log_every: int = Field(100, ge=1)
    # Rounds between in-trial checkpoints (None: no checkpoints): a trial whose actor dies resumes
    # from its last checkpoint, bit-identical to a run never stopped.
    checkpoint_every: int | None = Field(None, ge=1)
    # Result sinks mirroring the Parquet results (registry names; None: the default, MLflow).
    sinks: list[str] | None = None

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds):
        if isinstance(seeds, int):
            if seeds < 1:
                raise ValueError("seeds must be a positive count n (seeds 0..n-1) or a list of seeds >= 0")
            return seeds
        if not seeds:
            raise ValueError("the list of seeds is empty")
        if any(s < 0 for s in seeds):
            raise ValueError("seeds must be >= 0")
        if len(set(seeds)) != len(seeds):
            raise ValueError("seeds are repeated")
        return seeds

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


@dataclass(frozen=True)
class PlannedTrial:
    """A trial of a sweep, with the names it is shown under."""

    spec: TrialSpec
    label: str              # algorithm display name
    environment: str        # environment display name

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id


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


def _raise_from_validation(source: str, prefix: str, error: ValidationError, allowed: str = "") -> None:
    first = error.errors()[0]
    location = ".".join(p for p in [prefix, _loc(first["loc"])] if p)
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = f"unknown key {first['loc'][-1]!r}"
        if allowed:
            message += f"; allowed: {allowed}"
    elif first["type"] in ("literal_error", "enum"):
        message += f" (got {first.get('input')!r})"
    elif "input" in first and not isinstance(first["input"], dict):
        message += f" (got {first['input']!r})"
    raise SpecError(source, location, message) from None


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are YAML scalars (``horizon=200``, ``seeds=[0,1]``)."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecError("--set", pair, "expected key=value, e.g. --set horizon=200 --set seeds=2")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


_OVERRIDABLE = ("sweep", "horizon", "seeds", "log_every", "checkpoint_every", "resources.cpus_per_trial",
                "resources.gpus_per_trial", "resources.batch_trials")


def _apply_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    raw = dict(raw)
    for key, value in overrides.items():
        if key not in _OVERRIDABLE:
            raise SpecError("--set", key, f"cannot be overridden; allowed: {', '.join(_OVERRIDABLE)}")
        if key.startswith("resources."):
            raw["resources"] = {**(raw.get("resources") or {}), key.split(".", 1)[1]: value}
        else:
            raw[key] = value
        if key == "horizon" and isinstance(raw.get("environments"), list):
            # A horizon override applies to every environment, also those with their own horizon.
            raw["environments"] = [
                {**env, "horizon": value} if isinstance(env, dict) and "horizon" in env else env
                for env in raw["environments"]
            ]
    return raw


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None) -> Sweep:
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise SpecError(source, "", f"cannot read the spec file ({error.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SpecError(source, "", f"not valid YAML: {error}") from None
    return parse_sweep(raw, source, overrides)


def parse_sweep(raw: Any, source: str = "<spec>", overrides: dict[str, Any] | None = None) -> Sweep:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a sweep spec is a YAML mapping with keys sweep, horizon, seeds, "
                                    "environments, algorithms (optional: resources, log_every)")
    if overrides:
        raw = _apply_overrides(raw, overrides)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as error:
        _raise_from_validation(source, "", error, ", ".join(SweepSpec.model_fields))
    environments = [_check_environment(source, i, env, spec.horizon) for i, env in enumerate(spec.environments)]
    trials: dict[str, PlannedTrial] = {}
    for index, entry in enumerate(spec.algorithms):
        for planned in _expand_algorithm(source, index, entry, environments, spec.seed_list):
            trials.setdefault(planned.trial_id, planned)
    if not trials:
        raise SpecError(source, "algorithms", "no trial matches: every algorithm's `when` filter or "
                                              "environment support excludes every environment")
    return Sweep(spec=spec, source=source, trials=list(trials.values()))


def _check_environment(source: str, index: int, env: dict, default_horizon: int) -> dict:
    where = f"environments[{index}]"
    kinds = registry.environment_names()
    if "kind" not in env:
        raise SpecError(source, where, f"missing key 'kind'; allowed kinds: {', '.join(kinds)}")
    kind = env["kind"]
    if kind not in kinds:
        raise SpecError(source, f"{where}.kind", f"unknown environment kind {kind!r}; allowed: {', '.join(kinds)}")
    horizon = env.get("horizon", default_horizon)
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise SpecError(source, f"{where}.horizon", f"must be a positive integer (got {horizon!r})")
    if "label" in env and not isinstance(env["label"], str):
        raise SpecError(source, f"{where}.label", f"must be a string (got {env['label']!r})")
    config_cls = registry.environment_class(kind).Config
    settings = {k: v for k, v in env.items() if k not in ENVIRONMENT_SWEEP_KEYS}
    try:
        config_cls(**settings)
    except ValidationError as error:
        allowed = ", ".join([*ENVIRONMENT_SWEEP_KEYS, *config_cls.model_fields])
        _raise_from_validation(source, where, error, allowed)
    except ValueError as error:
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
        raise SpecError(source, f"{where}.label", f"bad label template {label!r}: {error}") from None
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
        raise SpecError(source, f"{where}.name", f"unknown algorithm {entry.name!r}; allowed: {', '.join(names)}")
    try:
        policy_cls = registry.algorithm_class(entry.name)
    except ImportError as error:
        raise SpecError(source, f"{where}.name", f"algorithm {entry.name!r} cannot be loaded: {error}") from None
    params_cls = policy_cls.Params
    overlap = set(entry.grid) & set(entry.params)
    if overlap:
        raise SpecError(source, f"{where}.grid", f"key {sorted(overlap)[0]!r} is in both grid and params; keep one")
    allowed_params = ", ".join(params_cls.model_fields) or "(none)"
    for key in [*entry.grid, *entry.params]:
        if key not in params_cls.model_fields:
            section = "grid" if key in entry.grid else "params"
            raise SpecError(source, f"{where}.{section}.{key}",
                            f"unknown parameter of {entry.name!r}; allowed: {allowed_params}")
    env_keys = {k for env in environments for k in env}
    for key in entry.when:
        if key not in env_keys:
            raise SpecError(source, f"{where}.when.{key}",
                            f"no environment has key {key!r}; environment keys: {', '.join(sorted(env_keys))}")
    keys = list(entry.grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(entry.grid[k] for k in keys))]
    for point in points:
        try:
            params_cls(**entry.params, **point)
        except ValidationError as error:
            first = error.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else ""
            section = "grid" if key in entry.grid else "params"
            _raise_from_validation(source, f"{where}.{section}" if key else where, error, allowed_params)
    label_fields = _label_fields(source, where, entry.label, params_cls)
    for env in environments:
        if not _matches(entry.when, env):
            continue
        env_cls = registry.environment_class(env["kind"])
        if env_cls.interaction not in policy_cls.supports:
            continue
        env_config = {k: v for k, v in env.items() if k != "horizon"}
        env_name = environment_label(env_config)
        for point in points:
            for seed in seeds:
                spec = TrialSpec.create(entry.name, {**entry.params, **point}, env_config, seed, env["horizon"])
                label = (entry.label or entry.name).format_map({k: spec.params[k] for k in label_fields})
                yield PlannedTrial(spec=spec, label=label, environment=env_name)
