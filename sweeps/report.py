"""Aggregation of a sweep's Parquet results into the tables and figures a paper needs.

The tuning rule of both papers: for each (algorithm, environment) keep the grid point with the
lowest mean final regret over seeds; report that point's mean and standard deviation.

The files for a paper name algorithms by display name (the spec's ``label``, else the algorithm's
usual name: ``LinUCB``, ``NeuralRBMLE-GA``), figures as PDF and PNG with the chosen grid point in
the legend and the band stated (mean ± 1 std over n seeds), LaTeX tables with booktabs rules, a
``\label`` and the best value of each column in bold. Markdown and CSV tables keep the labels the
Parquet results hold, so that they join with them.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from banditsweep.core.canonical import canonical_json
from banditsweep.sweeps.paper_comparison import compare_with_papers, write_paper_comparisons
from banditsweep.sweeps.tables import (MISSING, label_slug, latex_escape, latex_table, latex_text_table, markdown_table,
                                       slug)
from banditsweep.workers.record import FINISHED
from banditsweep.workers.store import SweepStore

# The usual names of the registered algorithms, for figures and LaTeX tables of a spec that gives
# no ``label`` (a label the spec gives is used as it is).
DISPLAY_NAMES = {
    "random": "Random", "linucb": "LinUCB", "lints": "LinTS", "linrbmle": "LinRBMLE",
    "neural_rbmle_ga": "NeuralRBMLE-GA", "neural_rbmle_pc": "NeuralRBMLE-PC", "neural_ucb": "NeuralUCB",
    "neural_ts": "NeuralTS", "deep_fpl": "DeepFPL", "bootstrapped_nn": "BootstrappedNN",
    "neural_eps_greedy": "Neural ε-greedy", "kernel_exp3": "Kernelized Exp3",
    "rls_kernel_exp3": "RLS-Kernelized Exp3", "rls_kernel_exp3_amvr": "RLS-Kernelized Exp3 (AMVR)",
    "apg_exp3": "APG-Exp3",
}


def display_name(label: str, algorithm: str | None = None) -> str:
    """The name a paper shows: the spec's label, or the algorithm's usual name when the label is
    just its registry name."""
    if algorithm is not None and label != algorithm:
        return label
    return DISPLAY_NAMES.get(label, label)


@dataclass
class Summary:
    best: pd.DataFrame        # one row per (label, environment): params, grid_point, mean, std, seeds, seconds/round
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
    named = {"algorithm": ("algorithm", "first")} if "algorithm" in trials.columns else {}
    grouped = (trials.groupby(["label", "environment", "params"], sort=False)
               .agg(mean=("final_regret", "mean"), std=("final_regret", "std"), seeds=("seed", "nunique"),
                    seconds_per_round=("seconds_per_round", "mean"), trial_ids=("trial_id", list), **named)
               .reset_index())
    grouped["std"] = grouped["std"].fillna(0.0)
    best = grouped.loc[grouped.groupby(["label", "environment"], sort=False)["mean"].idxmin()].reset_index(drop=True)
    best["grid_point"] = [grid_point(grouped, row["label"], row["environment"], row["params"])
                          for _, row in best.iterrows()]
    best["display"] = [display_name(row["label"], row.get("algorithm")) for _, row in best.iterrows()]
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


def grid_point(grouped: pd.DataFrame, label: str, environment: str, params: str) -> str:
    """The values of ``params`` that the grid varied for this (label, environment), as the legend
    shows them (``nu=0.1``); empty when the label had one point there."""
    cell = grouped[(grouped["label"] == label) & (grouped["environment"] == environment)]
    points = [json.loads(text) for text in cell["params"]]
    chosen = json.loads(params)
    varied = [k for k in chosen if len({json.dumps(p.get(k), sort_keys=True) for p in points}) > 1]
    return ", ".join(f"{k}={chosen[k]}" for k in varied)




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


def _write_table(directory: Path, name: str, table: pd.DataFrame, digits: int, caption: str, sweep: str,
                 names: dict[str, str], bold: str | None = "min", latex_digits: int | None = None) -> None:
    (directory / f"{name}.md").write_text(f"{caption}\n\n{markdown_table(table, digits)}\n")
    table.to_csv(directory / f"{name}.csv")
    (directory / f"{name}.tex").write_text(latex_table(
        table.rename(index=names), caption, f"tab:{label_slug(sweep)}:{label_slug(name)}",
        digits if latex_digits is None else latex_digits, bold))


# Distinct at a glance and in black and white: a colour, a line style and a marker per algorithm.
LINE_STYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]


def legend_entry(row) -> str:
    point = row.get("grid_point") or ""
    return f"{row['display']} ({point})" if point else row["display"]


def band_text(seeds: list[int]) -> str:
    """What the shaded band is."""
    counts = sorted(set(seeds))
    over = f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds (per algorithm)"
    return f"line: mean; band: ±1 std over {over}"


def plot_curves(store: SweepStore, summary: Summary, directory: Path, sweep: str = "") -> list[Path]:
    """One figure per environment, as PDF and PNG: mean cumulative regret vs round of each
    algorithm's chosen grid point, ±1 std over its seeds as a band (the legend says so); and
    ``figures.tex``, one LaTeX figure per environment with its caption and label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary.mean.index)   # the spec's order: colours and styles follow it
    written, latex = [], []
    style = {"pdf.fonttype": 42, "ps.fonttype": 42, "font.size": 9, "axes.labelsize": 9, "legend.fontsize": 7.5,
             "axes.spines.top": False, "axes.spines.right": False}
    with plt.rc_context(style):
        for environment in dict.fromkeys(summary.best["environment"]):
            rows = summary.best[summary.best["environment"] == environment]
            rows = rows.assign(order=[labels.index(label) for label in rows["label"]]).sort_values("order")
            fig, ax = plt.subplots(figsize=(4.8, 3.3))
            seeds = []
            for _, row in rows.iterrows():
                curves = store.read_curves(row["trial_ids"])
                if curves.empty:
                    continue
                matrix = curves.pivot(index="t", columns="trial_id", values="cum_regret")
                mean, std = matrix.mean(axis=1), matrix.std(axis=1).fillna(0.0)
                i = labels.index(row["label"])
                color = plt.cm.tab10(i % 10)
                step = max(1, len(mean) // 8)   # markers staggered between algorithms, so that none hides another
                ax.plot(mean.index, mean.values, label=legend_entry(row), color=color, lw=1.4,
                        linestyle=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)], ms=4,
                        markevery=(i * step // max(1, len(labels)) % step, step))
                ax.fill_between(mean.index, (mean - std).values, (mean + std).values, color=color, alpha=0.18, lw=0)
                seeds.append(matrix.shape[1])
            if not seeds:
                plt.close(fig)
                continue
            band = band_text(seeds)
            ax.set_xlabel("round $t$")
            ax.set_ylabel("cumulative regret")
            ax.set_title(environment, fontsize=9)
            ax.grid(alpha=0.25, lw=0.5)
            ax.set_xlim(left=0)
            ax.legend(title=band, title_fontsize=7, frameon=False, loc="upper left")
            fig.tight_layout()
            stem = f"regret_{slug(environment)}"
            for suffix, options in ((".pdf", {}), (".png", {"dpi": 200})):
                fig.savefig(directory / f"{stem}{suffix}", **options)
                written.append(directory / f"{stem}{suffix}")
            plt.close(fig)
            names = ", ".join(legend_entry(row) for _, row in rows.iterrows())
            caption = (f"{sweep}: cumulative regret on {environment} of {names} (each at its grid point of lowest "
                       f"mean final regret). Lines are the mean, shaded bands ±1 standard deviation over "
                       f"{band.split('over ', 1)[1]}.")
            latex += [r"\begin{figure}[t]", r"\centering", rf"\includegraphics[width=\linewidth]{{{stem}.pdf}}",
                      rf"\caption{{{latex_escape(caption)}}}",
                      rf"\label{{fig:{label_slug(sweep)}:{label_slug(stem)}}}", r"\end{figure}", ""]
    if latex:
        (directory / "figures.tex").write_text("\n".join(latex))
    return written


def write_report(store: SweepStore, summary: Summary, sweep: str, echo=print) -> list[Path]:
    """Write the report into a fresh folder that then replaces ``report/`` (no stale files from an
    earlier report survive, and a reader never sees a half-written report). A comparison with a
    paper's published values, when the sweep has one, is also handed to ``echo`` (printed)."""
    final = store.report_dir
    directory = final.with_name(".report-new")
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    comparison = _write_report_files(directory, store, summary, sweep)
    previous = final.with_name(".report-old")
    shutil.rmtree(previous, ignore_errors=True)
    if final.exists():
        os.replace(final, previous)
    os.replace(directory, final)
    shutil.rmtree(previous, ignore_errors=True)
    if comparison and echo is not None:
        echo(comparison)
    return sorted(final.iterdir())


def _seeds_text(summary: Summary) -> str:
    counts = sorted(set(summary.best["seeds"]))
    return f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds"


def _write_report_files(directory: Path, store: SweepStore, summary: Summary, sweep: str) -> str:
    """Every file of the report; returns the vs-paper Markdown (empty when no paper matches)."""
    names = {row["label"]: row["display"] for _, row in summary.best.iterrows()}
    seeds = _seeds_text(summary)
    _write_table(directory, "final_regret_mean", summary.mean, 1,
                 f"{sweep}: mean final cumulative regret over {seeds} (best grid point per cell; "
                 f"lowest per column in bold)", sweep, names)
    _write_table(directory, "final_regret_std", summary.std, 2,
                 f"{sweep}: standard deviation of the final cumulative regret over {seeds}", sweep, names, bold=None)
    _write_table(directory, "seconds_per_round", summary.seconds, 4,
                 f"{sweep}: mean wall seconds per round (fastest per column in bold)", sweep, names)
    caption = (f"{sweep}: final cumulative regret, mean ± standard deviation over {seeds} (best grid point per "
               f"cell; lowest mean per column in bold)")
    (directory / "final_regret_mean_std.tex").write_text(latex_table(
        summary.mean.rename(index=names), caption, f"tab:{label_slug(sweep)}:final-regret-mean-std", 1, "min",
        std=summary.std.rename(index=names)))
    by_setting = summary.by_setting.copy()
    by_setting.columns = [f"{a} {b}" for a, b in by_setting.columns]
    (directory / "by_setting.md").write_text(
        f"{sweep}: mean ± std final regret and seconds per round, per environment setting\n\n"
        f"{markdown_table(by_setting, 2)}\n")
    by_setting.to_csv(directory / "by_setting.csv")
    (directory / "by_setting.tex").write_text(latex_text_table(
        by_setting.set_axis([f"{names.get(a, a)} {b}" for a, b in summary.by_setting.columns], axis=1),
        f"{sweep}: final regret (mean ± std over {seeds}) and seconds per round, per environment setting",
        f"tab:{label_slug(sweep)}:by-setting"))
    best = summary.best.drop(columns=["trial_ids", "display"]).drop(columns=["algorithm"], errors="ignore")
    best = best.rename(columns={"label": "algorithm"})
    best.to_csv(directory / "best_params.csv", index=False)
    (directory / "best_params.md").write_text(f"{sweep}: chosen grid point per cell\n\n"
                                              f"{markdown_table(best, 4, index=False)}\n")
    if not summary.diagnostics.empty:
        (directory / "timing.md").write_text(f"{sweep}: time per round and time in named steps (seconds)\n\n"
                                             f"{markdown_table(summary.diagnostics, 4, index=False)}\n")
        summary.diagnostics.to_csv(directory / "timing.csv", index=False)
    plot_curves(store, summary, directory, sweep)
    trials = store.read_trials()
    return write_paper_comparisons(directory, compare_with_papers(summary.best, trials), sweep)


