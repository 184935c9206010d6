"""Aggregation of a sweep's Parquet results into the tables and figures a paper needs.

The tuning rule of both papers: for each (algorithm, environment) keep the grid point with the
lowest mean final regret over seeds; report that point's mean and standard deviation.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from banditsweep.core.trial import canonical_json
from banditsweep.workers.store import FINISHED, SweepStore


@dataclass
class Summary:
    best: pd.DataFrame        # one row per (label, environment): params, mean, std, seeds, seconds/round
    mean: pd.DataFrame        # algorithms x environments
    std: pd.DataFrame
    seconds: pd.DataFrame     # mean seconds per round, same layout
    diagnostics: pd.DataFrame  # mean of every *_seconds diagnostic, per (label, environment)
    by_setting: pd.DataFrame  # rows: the environment settings that vary; columns: algorithm x (regret, s/round)


def finished_trials(store: SweepStore, planned) -> pd.DataFrame:
    """The finished trials of a spec (its ``PlannedTrial`` list), named as the spec names them now:
    display names are not part of a trial's identity, so renaming an algorithm's ``label`` (or an
    environment's) in the spec renames it in the report without running anything again."""
    names = {trial.trial_id: (trial.label, trial.environment) for trial in planned}
    trials = store.read_trials()
    trials = trials[trials["trial_id"].isin(names.keys()) & (trials["status"] == FINISHED)].copy()
    trials["label"] = [names[tid][0] for tid in trials["trial_id"]]
    trials["environment"] = [names[tid][1] for tid in trials["trial_id"]]
    return trials


def summarise(trials: pd.DataFrame, label_order: list[str], env_order: list[str]) -> Summary:
    """Best grid point per (algorithm label, environment) by mean final regret."""
    if trials.empty:
        empty = pd.DataFrame()
        return Summary(empty, empty, empty, empty, empty, empty)
    grouped = (trials.groupby(["label", "environment", "params"], sort=False)
               .agg(mean=("final_regret", "mean"), std=("final_regret", "std"), seeds=("seed", "nunique"),
                    seconds_per_round=("seconds_per_round", "mean"), trial_ids=("trial_id", list))
               .reset_index())
    grouped["std"] = grouped["std"].fillna(0.0)
    best = grouped.loc[grouped.groupby(["label", "environment"], sort=False)["mean"].idxmin()].reset_index(drop=True)
    labels = [x for x in label_order if x in set(best["label"])]
    envs = [x for x in env_order if x in set(best["environment"])]

    # Tables name environments without their kind when they all share it ("mushroom", not
    # "classification:mushroom"), as the papers' tables do.
    kinds = {env.split(":", 1)[0] for env in envs}
    short = {env: env.split(":", 1)[-1] for env in envs} if len(kinds) == 1 else {}

    def layout(column: str) -> pd.DataFrame:
        table = best.pivot(index="label", columns="environment", values=column)
        table = table.reindex(index=labels, columns=envs).rename(columns=short)
        return table.rename_axis(index="algorithm", columns=None)

    diag_rows = []
    for _, row in best.iterrows():
        chosen = trials[trials["trial_id"].isin(row["trial_ids"])]
        values = pd.DataFrame([json.loads(d) for d in chosen["diagnostics"]])
        timing = {c: values[c].mean() for c in values.columns if "seconds" in c and c != "batch_wall_seconds"}
        diag_rows.append({"algorithm": row["label"], "environment": row["environment"],
                          "seconds_per_round": row["seconds_per_round"], **timing})
    return Summary(best, layout("mean"), layout("std"), layout("seconds_per_round"), pd.DataFrame(diag_rows),
                   setting_table(trials, best, labels, envs))


MISSING = "—"  # a setting an environment does not have (another kind's key), or left unset (None)


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


def markdown_table(table: pd.DataFrame, digits: int = 2, index: bool = True) -> str:
    frame = table.reset_index() if index else table
    header = [str(c) for c in frame.columns]

    def cell(value) -> str:
        if isinstance(value, (float, np.floating)):
            return "—" if np.isnan(value) else (f"{value:.{digits}f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}")
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _write_table(directory: Path, name: str, table: pd.DataFrame, digits: int, caption: str) -> None:
    (directory / f"{name}.md").write_text(f"{caption}\n\n{markdown_table(table, digits)}\n")
    table.to_csv(directory / f"{name}.csv")
    (directory / f"{name}.tex").write_text(
        table.to_latex(float_format=lambda v: f"{v:.{digits}f}", na_rep="--", caption=caption, escape=True))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def plot_curves(store: SweepStore, summary: Summary, directory: Path) -> list[Path]:
    """One PNG per environment: mean cumulative regret vs round, ±1 std band per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for environment in dict.fromkeys(summary.best["environment"]):
        rows = summary.best[summary.best["environment"] == environment]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for _, row in rows.iterrows():
            curves = store.read_curves(row["trial_ids"])
            if curves.empty:
                continue
            matrix = curves.pivot(index="t", columns="trial_id", values="cum_regret")
            mean, std = matrix.mean(axis=1), matrix.std(axis=1).fillna(0.0)
            ax.plot(mean.index, mean.values, label=row["label"])
            ax.fill_between(mean.index, (mean - std).values, (mean + std).values, alpha=0.2)
        ax.set_xlabel("round t")
        ax.set_ylabel("cumulative regret")
        ax.set_title(environment)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = directory / f"regret_{_slug(environment)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def write_report(store: SweepStore, summary: Summary, sweep: str) -> list[Path]:
    """Write the report into a fresh folder that then replaces ``report/`` (no stale files from an
    earlier report survive, and a reader never sees a half-written report)."""
    final = store.report_dir
    directory = final.with_name(".report-new")
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    _write_report_files(directory, store, summary, sweep)
    previous = final.with_name(".report-old")
    shutil.rmtree(previous, ignore_errors=True)
    if final.exists():
        os.replace(final, previous)
    os.replace(directory, final)
    shutil.rmtree(previous, ignore_errors=True)
    return sorted(final.iterdir())


def _write_report_files(directory: Path, store: SweepStore, summary: Summary, sweep: str) -> None:
    _write_table(directory, "final_regret_mean", summary.mean, 1,
                 f"{sweep}: mean final cumulative regret (best grid point per cell)")
    _write_table(directory, "final_regret_std", summary.std, 2,
                 f"{sweep}: standard deviation of the final cumulative regret over seeds")
    _write_table(directory, "seconds_per_round", summary.seconds, 4,
                 f"{sweep}: mean wall seconds per round")
    by_setting = summary.by_setting.copy()
    by_setting.columns = [f"{a} {b}" for a, b in by_setting.columns]
    (directory / "by_setting.md").write_text(
        f"{sweep}: mean ± std final regret and seconds per round, per environment setting\n\n"
        f"{markdown_table(by_setting, 2)}\n")
    by_setting.to_csv(directory / "by_setting.csv")
    best = summary.best.drop(columns=["trial_ids"]).rename(columns={"label": "algorithm"})
    best.to_csv(directory / "best_params.csv", index=False)
    (directory / "best_params.md").write_text(f"{sweep}: chosen grid point per cell\n\n"
                                              f"{markdown_table(best, 4, index=False)}\n")
    if not summary.diagnostics.empty:
        (directory / "timing.md").write_text(f"{sweep}: time per round and time in named steps (seconds)\n\n"
                                             f"{markdown_table(summary.diagnostics, 4, index=False)}\n")
        summary.diagnostics.to_csv(directory / "timing.csv", index=False)
    plot_curves(store, summary, directory)


def log_report_to_mlflow(tracking_uri: str, store: SweepStore, directory: Path) -> str | None:
    """Attach the report files to the latest parent run of the store the report read (not of another
    results folder of the same sweep); returns its id (None if there is none)."""
    from mlflow.tracking import MlflowClient

    from banditsweep.workers.mlflow_sink import latest_parent_run
    from banditsweep.workers.sinks import store_id

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(store.root.name)
    if experiment is None:
        return None
    run_id = latest_parent_run(client, experiment.experiment_id, store_id(str(store.root.parent), store.root.name))
    if run_id is not None:
        client.log_artifacts(run_id, str(directory), artifact_path="report")
    return run_id
