"""The kernel paper's table layout: one row per environment setting, per algorithm its final regret
(mean ± std) and seconds per round; the settings that tell the sweep's environments apart index it."""

from __future__ import annotations

import json

import pandas as pd

from banditsweep.core.engine.canonical import canonical_json
from banditsweep.sweeps.publishing.tables import MISSING


def _setting_value(value):
    """A setting as an index value: scalars as they are, dicts and lists as canonical JSON text
    (``{"grid":[5,5]}``; hashable, and the same text for the same value), unset as ``MISSING``."""
    if value is None:
        return MISSING
    if isinstance(value, (dict, list)):
        return canonical_json(value)  # as the environment's name writes it
    return value


def setting_keys(configs: dict[str, dict], envs: list[str]) -> list[str]:
    """The settings that tell the environments apart: ``kind`` when the kinds differ, then every
    setting whose value varies among the environments of one kind. Settings are compared within a
    kind only: another kind's settings are not there to compare (a mixed sweep would otherwise list
    the union of every kind's settings, mostly empty), and a setting constant within its kind is
    named by the kind."""
    groups: dict[str, list[str]] = {}
    for env in envs:
        groups.setdefault(configs[env].get("kind"), []).append(env)

    def varies(key: str) -> bool:
        return any(len({json.dumps(configs[e].get(key), sort_keys=True) for e in group}) > 1
                   for group in groups.values())

    keys = ["kind"] if len(groups) > 1 else []
    return keys + [k for k in dict.fromkeys(k for env in envs for k in configs[env]) if k != "kind" and varies(k)]


def setting_table(trials: pd.DataFrame, best: pd.DataFrame, labels: list[str], envs: list[str]) -> pd.DataFrame:
    """The kernel paper's layout: one row per environment, indexed by the settings that vary across
    the sweep's environments (e.g. setting x kernel; see ``setting_keys`` for sweeps of several
    kinds), and per algorithm the mean ± std final regret and the mean seconds per round. Dict and
    list settings show as JSON text, a setting an environment lacks as ``MISSING``; when the
    settings do not tell every environment apart, the environment's name leads the index."""
    configs = {env: json.loads(config) for env, config in
               trials.drop_duplicates("environment")[["environment", "environment_config"]].itertuples(index=False)}
    keys = setting_keys(configs, envs)
    index = {env: tuple(_setting_value(configs[env].get(k)) for k in keys) for env in envs}
    if not keys or len(set(index.values())) < len(envs):
        keys, index = ["environment", *keys], {env: (env, *values) for env, values in index.items()}
    rows = []
    for env in envs:
        row = dict(zip(keys, index[env]))
        cells = best[best["environment"] == env].set_index("label")
        for label in labels:
            if label in cells.index:
                cell = cells.loc[label]
                row[(label, "regret")] = f"{cell['mean']:.1f} ± {cell['std']:.1f}"
                row[(label, "s/round")] = f"{cell['seconds_per_round']:.2e}"
        rows.append(row)
    table = pd.DataFrame(rows).set_index(keys)
    table.columns = pd.MultiIndex.from_tuples(table.columns) if len(table.columns) else table.columns
    return table
