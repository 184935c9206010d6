"""``--set KEY=VALUE``: top-level values of a spec overridden on the command line. The keys are
:data:`OVERRIDABLE`, the one list that the parser, its help and the messages name; the values are
YAML scalars, read and checked as the spec's own.
"""

from __future__ import annotations

from typing import Any

from banditsweep.sweeps.spec.errors import SpecError, did_you_mean, show
from banditsweep.sweeps.spec.reading import check_values, load_yaml

OVERRIDABLE = ("sweep", "horizon", "seeds", "log_every", "checkpoint_every", "resources.cpus_per_trial",
               "resources.gpus_per_trial", "resources.batch_trials", "resources.cpus_per_shard",
               "resources.gpus_per_shard", "mlflow_runs", "confirm.seeds")


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs; values are YAML scalars (``horizon=200``, ``seeds=[0,1]``)."""
    overrides: dict[str, Any] = {}
    given: dict[str, str] = {}   # the text each key was given as, for the message
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError("--set", show(pair), "expected key=value, e.g. --set horizon=200 --set seeds=2")
        key = key.strip()
        if key not in OVERRIDABLE:
            raise SpecError("--set", key, f"cannot be overridden{did_you_mean(key, OVERRIDABLE)}; "
                                          f"allowed: {', '.join(OVERRIDABLE)}")
        try:
            loaded = load_yaml(value, f"--set {key}")
        except SpecError as error:
            raise SpecError("--set", key, f"{error.message} (got {show(value)})") from None
        check_values("--set", loaded, (key,))
        if key in overrides and overrides[key] != loaded:
            # Two values for one key is a slip (an edited command line); neither silently wins.
            raise SpecError("--set", key, f"given twice with different values ({show(given[key])} and {show(value)}); "
                                          "give it once")
        overrides[key], given[key] = loaded, value
    return overrides


def apply_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    """The spec's data with the overrides in place (a horizon override reaches every environment)."""
    raw = dict(raw)
    for key, value in overrides.items():
        if key not in OVERRIDABLE:
            raise SpecError("--set", key, f"cannot be overridden; allowed: {', '.join(OVERRIDABLE)}")
        if "." in key:   # resources.cpus_per_trial, confirm.seeds: one value of a section
            section, name = key.split(".", 1)
            values = raw.get(section) or {}
            if not isinstance(values, dict):
                continue   # the spec's own section is reported as it is
            raw[section] = {**values, name: value}
        else:
            raw[key] = value
        if key == "horizon" and isinstance(raw.get("environments"), list):
            # A horizon override applies to every environment, also those with their own horizon.
            raw["environments"] = [
                {**env, "horizon": value} if isinstance(env, dict) and "horizon" in env else env
                for env in raw["environments"]
            ]
    return raw
