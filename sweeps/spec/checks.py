"""What a valid spec may still not say, because it can only be a mistake: a grid value given twice,
two entries or environments that make the same trials, one label on two algorithms or on two
different trials of one report cell, an entry (or an environment, or a ``when`` value) that makes
no trial. Each is refused with one line naming the key (sweeps.spec.errors), before anything runs.
``sweeps.spec.model`` expands the spec and asks these checks of what it expands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from banditsweep.core.engine import registry
from banditsweep.core.engine.canonical import canonical_json
from banditsweep.core.engine.trial import TrialSpec, environment_label, resolve_environment
from banditsweep.sweeps.spec.errors import SpecError, show

if TYPE_CHECKING:
    from banditsweep.sweeps.spec.model import AlgorithmEntry, PlannedTrial

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
