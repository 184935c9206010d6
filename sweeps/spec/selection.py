"""``--only KEY=VALUE[,VALUE...]``: run (or show, or plan) part of a spec.

A big spec is cut down without editing it: ``--only algorithm=kernel_exp3 --only setting=1,2`` keeps the
Kernelized Exp3 trials of settings 1 and 2. The keys:

- ``algorithm``: an algorithm's registry name or its label (``neural_ucb``, ``"NeuralUCB (paper)"``);
- ``environment``: an environment's kind, its display name or its dataset (``classification``,
  ``classification:mushroom``, ``mushroom``);
- ``seed``: seeds;
- any setting of an environment (``setting``, ``kernel``, ``dataset``) or parameter of an algorithm
  (``nu``, ``lr``), compared as the spec writes it (``nu=0.1`` matches 0.1 and 1e-1).

Values match case-insensitively and may use shell-style wildcards (``algorithm='neural_*'``). Several
values of one key are alternatives; several keys must all hold. Selecting only removes trials: each
trial keeps its id, so its results are the ones a full run of the spec stores and reuses.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Any

from banditsweep.sweeps.spec.model import PlannedTrial, Sweep
from banditsweep.sweeps.spec.errors import SpecError, did_you_mean, show

NAMED_KEYS = ("algorithm", "environment", "seed")
ALIASES = {"algo": "algorithm", "env": "environment", "seeds": "seed"}
_SHOWN_VALUES = 12


@dataclass(frozen=True)
class Selector:
    """One ``--only``: a key and the values it accepts."""

    key: str
    values: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.key}={','.join(self.values)}"


def parse_selectors(pairs: list[str]) -> list[Selector]:
    """``--only key=v1,v2`` arguments; a key given twice accepts the values of both."""
    merged: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = ALIASES.get(key.strip().lower(), key.strip())
        values = [value.strip() for value in text.split(",")]
        if not sep or not key or not any(values):
            raise SpecError("--only", show(pair), "expected key=value[,value...], e.g. --only algorithm=linucb "
                                                  "--only environment=mushroom --only setting=1,2")
        if not all(values):
            # `nu=0.1,` or `seed=1,,2`: a value left out by mistake would otherwise go unnoticed.
            raise SpecError("--only", show(pair), "an empty value between commas; give each value, "
                                                  "e.g. --only setting=1,2")
        merged.setdefault(key, []).extend(values)
    return [Selector(key, tuple(values)) for key, values in merged.items()]


def select(sweep: Sweep, selectors: list[Selector]) -> Sweep:
    """The sweep's trials that every selector accepts. A key no trial has, or a value that matches
    none, is an error naming what the sweep holds (a typo should not run nothing, or everything)."""
    if not selectors:
        return sweep
    trials = sweep.trials
    for selector in selectors:
        known = _values_of(sweep.trials, selector.key)
        if not known:
            raise SpecError("--only", selector.key, f"no trial of the sweep has this key"
                                                    f"{did_you_mean(selector.key, _keys_of(sweep.trials))}; "
                                                    f"keys: {', '.join(_keys_of(sweep.trials))}")
        for value in selector.values:
            if not any(_matches(value, candidate) for candidate in known):
                raise SpecError("--only", f"{selector.key}={value}", f"matches no trial; the sweep's values: "
                                                                       f"{_listing(known)}")
        trials = [trial for trial in trials if any(_matches(value, candidate)
                                                   for value in selector.values
                                                   for candidate in _trial_values(trial, selector.key))]
    if not trials:
        raise SpecError("--only", " ".join(map(str, selectors)),
                        "each selector matches trials, but no trial matches all of them")
    return replace(sweep, trials=trials, selected_by=" ".join(f"--only {selector}" for selector in selectors))


def _trial_values(trial: PlannedTrial, key: str) -> list[Any]:
    spec = trial.spec
    if key == "algorithm":
        return [spec.algorithm, trial.label]
    if key == "environment":
        names = [spec.environment["kind"], trial.environment]
        return names + ([spec.environment["dataset"]] if "dataset" in spec.environment else [])
    if key == "seed":
        return [spec.seed]
    return [source[key] for source in (spec.environment, spec.params) if key in source]


def _values_of(trials: list[PlannedTrial], key: str) -> list[Any]:
    seen: dict[str, Any] = {}
    for trial in trials:
        for value in _trial_values(trial, key):
            seen.setdefault(value.lower() if isinstance(value, str) else repr(value), value)
    return list(seen.values())


def _keys_of(trials: list[PlannedTrial]) -> list[str]:
    keys = dict.fromkeys(NAMED_KEYS)
    for trial in trials:
        keys.update(dict.fromkeys(key for key in trial.spec.environment if key != "kind"))
        keys.update(dict.fromkeys(trial.spec.params))
    return list(keys)


def _matches(wanted: str, value: Any) -> bool:
    """As the spec writes it: numbers by value (``1e-1`` is 0.1), text case-insensitively with wildcards."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fnmatch.fnmatchcase(str(value).lower(), wanted.lower())
    try:
        return float(wanted) == float(value)
    except ValueError:
        return fnmatch.fnmatchcase(str(value).lower(), wanted.lower())


def _listing(values: list[Any]) -> str:
    shown = ", ".join(str(value) for value in values[:_SHOWN_VALUES])
    return shown + (f", ... ({len(values)} in all)" if len(values) > _SHOWN_VALUES else "")
