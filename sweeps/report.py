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

import numpy as np
import pandas as pd

from banditsweep.core.trial import canonical_json
from banditsweep.workers.store import FINISHED, SweepStore


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


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$",
                  "ε": r"$\varepsilon$"}


def latex_escape(text) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in str(text))


def latex_number(value, digits: int = 1) -> str:
    """A number for a LaTeX table, in math mode: fixed with ``digits`` decimals, scientific
    (``2.50\times10^{-5}``) below 0.01 (and below ``10**-digits``), where fixed decimals would
    show one significant digit or none, and from a million up; ``--`` for a missing value."""
    if value is None or (isinstance(value, (float, np.floating)) and not np.isfinite(value)):
        return "--"
    value = float(value)
    if value != 0 and (abs(value) < max(10.0 ** -digits, 1e-2) or abs(value) >= 1e6):
        mantissa, exponent = f"{value:.2e}".split("e")
        return rf"{mantissa}\times10^{{{int(exponent)}}}"
    return f"{value:.{digits}f}"


def latex_table(table: pd.DataFrame, caption: str, label: str, digits: int = 1, bold: str | None = "min",
                std: pd.DataFrame | None = None, std_digits: int | None = None) -> str:
    """A booktabs table of numbers (rows: algorithms, columns: environments) with a caption, a
    ``\label`` and the best value of each column in bold (``bold``: "min", "max" or None). With
    ``std``, each cell is ``mean \pm std`` and the best mean is bold."""
    columns = list(table.columns)
    best = {}
    if bold is not None:
        for column in columns:
            values = pd.to_numeric(table[column], errors="coerce")
            if values.notna().any():
                best[column] = values.min() if bold == "min" else values.max()
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(caption)}}}",
             rf"\label{{{label}}}", r"\begin{tabular}{l" + "r" * len(columns) + "}", r"\toprule",
             " & ".join([latex_escape(table.index.name or ""), *(latex_escape(c) for c in columns)]) + r" \\",
             r"\midrule"]
    for name, row in table.iterrows():
        cells = []
        for column in columns:
            value = row[column]
            if value is None or (isinstance(value, (float, np.floating)) and np.isnan(value)):
                cells.append("--")
                continue
            text = latex_number(value, digits)
            if std is not None:
                text += r" \pm " + latex_number(std.loc[name, column], digits if std_digits is None else std_digits)
            if column in best and value == best[column]:
                text = rf"\mathbf{{{text}}}"
            cells.append(f"${text}$")
        lines.append(" & ".join([latex_escape(name), *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def latex_text_table(table: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs table of text cells (the by-setting table: ``9.0 ± 1.0``) with its index as the
    leading columns, a caption and a ``\label``."""
    frame = table.reset_index()
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    spec = "".join("r" if n and i >= table.index.nlevels else "l" for i, n in enumerate(numeric))
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(caption)}}}", rf"\label{{{label}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in frame.columns) + r" \\", r"\midrule"]
    for row in frame.itertuples(index=False):
        lines.append(" & ".join("--" if pd.isna(v) else latex_escape(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _write_table(directory: Path, name: str, table: pd.DataFrame, digits: int, caption: str, sweep: str,
                 names: dict[str, str], bold: str | None = "min", latex_digits: int | None = None) -> None:
    (directory / f"{name}.md").write_text(f"{caption}\n\n{markdown_table(table, digits)}\n")
    table.to_csv(directory / f"{name}.csv")
    (directory / f"{name}.tex").write_text(latex_table(
        table.rename(index=names), caption, f"tab:{_label_slug(sweep)}:{_label_slug(name)}",
        digits if latex_digits is None else latex_digits, bold))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _label_slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text)


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
            stem = f"regret_{_slug(environment)}"
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
                      rf"\label{{fig:{_label_slug(sweep)}:{_label_slug(stem)}}}", r"\end{figure}", ""]
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
        summary.mean.rename(index=names), caption, f"tab:{_label_slug(sweep)}:final-regret-mean-std", 1, "min",
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
        f"tab:{_label_slug(sweep)}:by-setting"))
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


# ---- ours beside the paper's --------------------------------------------------------------------
#
# The papers' published values and stated claims live in sweeps/papers/*.yaml (shipped with the
# package). A sweep whose environments and algorithms match a paper's (registry name; environment
# settings) gets a "vs paper" section: per cell ours and the paper's value, their ratio, each value's
# ratio to the best baseline of its environment (comparable across horizons, where regret itself is
# not), the Spearman rank correlation per environment and whether each claim holds on our trials.

PAPERS_DIR = Path(__file__).resolve().parent / "papers"
CLAIM_STATISTICS = ("mean", "std", "seconds_per_round")
STATISTIC_NAMES = {"mean": "mean final regret", "std": "std of the final regret", "seconds_per_round": "s/round"}


class PaperDataError(ValueError):
    """A paper data file that does not say what the comparison needs (names the file and key)."""


@dataclass
class PaperData:
    key: str
    paper: str
    source: str
    seeds: int | None
    algorithms: list[dict]           # paper, name (registry), label, role (proposed | baseline)
    environments: list[dict]         # paper, key, label, match (settings), horizon (None: not stated)
    tables: dict[str, pd.DataFrame]  # statistic -> rows: registry names, columns: environment keys
    table_names: dict[str, str]      # statistic -> the paper's table ("Table 1: ...")
    claims: list[dict]

    def algorithm(self, name: str) -> dict:
        return next(a for a in self.algorithms if a["name"] == name)

    @property
    def baselines(self) -> list[str]:
        return [a["name"] for a in self.algorithms if a["role"] == "baseline"]


def load_paper(path: str | Path) -> PaperData:
    """One paper data file, checked: every table row an algorithm of the file, one value per column,
    every claim naming known algorithms, environments and statistics."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text())

    def fail(key: str, message: str):
        raise PaperDataError(f"{path}: {key}: {message}")

    if not isinstance(data, dict):
        fail("(top level)", "not a mapping")
    for key in ("paper", "key", "algorithms", "environments", "tables", "claims"):
        if key not in data:
            fail(key, "missing")
    algorithms, environments = data["algorithms"], data["environments"]
    for i, entry in enumerate(algorithms):
        for key in ("paper", "name", "label", "role"):
            if key not in entry:
                fail(f"algorithms[{i}].{key}", "missing")
        if entry["role"] not in ("proposed", "baseline"):
            fail(f"algorithms[{i}].role", f"{entry['role']!r}; allowed: proposed, baseline")
    for i, entry in enumerate(environments):
        for key in ("paper", "key", "label", "match", "horizon"):
            if key not in entry:
                fail(f"environments[{i}].{key}", "missing")
        if not isinstance(entry["match"], dict) or "kind" not in entry["match"]:
            fail(f"environments[{i}].match", "give the settings an environment must have, its kind included")
    names = [a["name"] for a in algorithms]
    env_keys = [e["key"] for e in environments]
    tables, table_names = {}, {}
    for name, table in (data["tables"] or {}).items():
        statistic = table.get("statistic")
        if statistic not in ("mean", "std"):
            fail(f"tables.{name}.statistic", f"{statistic!r}; allowed: mean, std")
        columns = table.get("columns") or []
        unknown = [c for c in columns if c not in env_keys]
        if unknown:
            fail(f"tables.{name}.columns", f"{unknown} are not environments of the file ({', '.join(env_keys)})")
        rows = {}
        for row, values in (table.get("values") or {}).items():
            if row not in names:
                fail(f"tables.{name}.values.{row}", f"not an algorithm of the file ({', '.join(names)})")
            if not isinstance(values, list) or len(values) != len(columns) or \
                    not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                fail(f"tables.{name}.values.{row}", f"give {len(columns)} numbers, one per column")
            rows[row] = [float(v) for v in values]
        tables[statistic] = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
        table_names[statistic] = str(table.get("table", name))
    for i, claim in enumerate(data["claims"] or []):
        where = f"claims[{i}] ({claim.get('id', '?')})"
        for key in ("id", "text", "algorithm", "statistic", "compare", "than", "environments"):
            if key not in claim:
                fail(f"{where}.{key}", "missing")
        if claim["statistic"] not in CLAIM_STATISTICS:
            fail(f"{where}.statistic", f"{claim['statistic']!r}; allowed: {', '.join(CLAIM_STATISTICS)}")
        if claim["compare"] not in ("lower", "higher"):
            fail(f"{where}.compare", f"{claim['compare']!r}; allowed: lower, higher")
        than = claim["than"] if claim["than"] != "all" else []
        for name in [claim["algorithm"], *than]:
            if name not in names:
                fail(where, f"algorithm {name!r} is not an algorithm of the file ({', '.join(names)})")
        envs = claim["environments"] if claim["environments"] != "all" else []
        for key in envs:
            if key not in env_keys:
                fail(f"{where}.environments", f"{key!r} is not an environment of the file ({', '.join(env_keys)})")
        if not isinstance(claim.get("tolerance", 0.0), (int, float)) or claim.get("tolerance", 0.0) < 0:
            fail(f"{where}.tolerance", f"{claim.get('tolerance')!r}; give a fraction >= 0")
    return PaperData(str(data["key"]), str(data["paper"]), str(data.get("source", "")), data.get("seeds"),
                     algorithms, environments, tables, table_names, list(data["claims"] or []))


def load_papers(directory: str | Path = PAPERS_DIR) -> list[PaperData]:
    """Every paper data file shipped with the package (``sweeps/papers/*.yaml``)."""
    return [load_paper(path) for path in sorted(Path(directory).glob("*.yaml"))]


@dataclass
class PaperComparison:
    paper: PaperData
    cells: pd.DataFrame      # one row per (environment, algorithm) matched
    spearman: pd.DataFrame   # one row per environment with a published table
    claims: pd.DataFrame     # one row per claim: ours and the paper's verdict, with the numbers
    horizons: dict[str, tuple[list[int], int | None]]  # environment -> (our horizons, the paper's)
    notes: list[str]

    @property
    def horizons_differ(self) -> bool:
        return any(paper is None or ours != [paper] for ours, paper in self.horizons.values())


def _matches(config: dict, match: dict) -> bool:
    return all(config.get(key) == value for key, value in match.items())


def _ratio(numerator: float, denominator: float) -> float:
    if not np.isfinite(numerator) or not np.isfinite(denominator) or denominator == 0:
        return float("nan")
    return float(numerator / denominator)


def compare_with_papers(best: pd.DataFrame, trials: pd.DataFrame,
                        papers: list[PaperData] | None = None) -> list[PaperComparison]:
    """Our best grid point per cell (``Summary.best``) beside each paper that has one of the sweep's
    environments and at least one of its algorithms. ``trials``: the finished trials (for each
    environment's settings and each cell's horizon)."""
    if best.empty or "algorithm" not in best.columns:
        return []
    papers = load_papers() if papers is None else papers
    by_id = trials.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    # Each environment's settings through its trials' ids: the report names environments as the spec
    # names them now, which need not be the name the trials were recorded under.
    configs = {row["environment"]: json.loads(by_id.loc[row["trial_ids"][0], "environment_config"])
               for _, row in best.drop_duplicates("environment").iterrows()}
    comparisons = []
    for paper in papers:
        comparison = _compare(paper, best, by_id, configs)
        if comparison is not None:
            comparisons.append(comparison)
    return comparisons


def _compare(paper: PaperData, best: pd.DataFrame, by_id: pd.DataFrame, configs: dict) -> PaperComparison | None:
    notes: list[str] = []
    # Our environments that are one of the paper's, in the report's order.
    matched_envs: dict[str, dict] = {}
    for env in dict.fromkeys(best["environment"]):
        hits = [e for e in paper.environments if _matches(configs.get(env, {}), e["match"])]
        if hits:
            matched_envs[env] = hits[0]
    # Per environment: paper algorithm -> our label (the one label running that registry name, or the
    # one labelled as the paper's row when several do).
    cells: dict[str, dict[str, pd.Series]] = {}
    for env in matched_envs:
        rows = best[best["environment"] == env]
        for entry in paper.algorithms:
            candidates = rows[rows["algorithm"] == entry["name"]]
            if len(candidates) > 1:
                named = candidates[candidates["label"].isin([entry["label"], entry["paper"]])]
                if len(named) != 1:
                    notes.append(f"{env}: labels {', '.join(candidates['label'])} all run {entry['name']}; "
                                 f"label one {entry['label']!r} to compare it with the paper's {entry['paper']}")
                    continue
                candidates = named
            if len(candidates) == 1:
                cells.setdefault(env, {})[entry["name"]] = candidates.iloc[0]
    if not cells:
        return None

    horizons = {}
    for env, row_of in cells.items():
        ids = [tid for row in row_of.values() for tid in row["trial_ids"]]
        horizons[env] = (sorted({int(h) for h in by_id.loc[ids, "horizon"]}), matched_envs[env]["horizon"])

    def ours(env: str, name: str, statistic: str) -> float:
        row = cells.get(env, {}).get(name)
        if row is None:
            return float("nan")
        return float(row["mean" if statistic == "mean" else statistic])

    def published(env: str, name: str, statistic: str) -> float:
        table = paper.tables.get(statistic)
        key = matched_envs[env]["key"]
        if table is None or name not in table.index or key not in table.columns:
            return float("nan")
        return float(table.loc[name, key])

    cell_rows, spearman_rows = [], []
    if "mean" in paper.tables:
        for env, row_of in cells.items():
            names = list(row_of)
            # The best baseline among those run here, for ours and the paper's alike.
            baselines = [n for n in names if n in paper.baselines and np.isfinite(published(env, n, "mean"))]
            best_ours = min((ours(env, n, "mean") for n in baselines), default=float("nan"))
            best_paper = min((published(env, n, "mean") for n in baselines), default=float("nan"))
            ranked = [n for n in names if np.isfinite(published(env, n, "mean"))]
            rank_ours = pd.Series({n: ours(env, n, "mean") for n in ranked}).rank(method="average")
            rank_paper = pd.Series({n: published(env, n, "mean") for n in ranked}).rank(method="average")
            for name in names:
                row = row_of[name]
                mean, paper_mean = ours(env, name, "mean"), published(env, name, "mean")
                cell_rows.append({
                    "environment": env, "algorithm": row["label"], "paper_algorithm": paper.algorithm(name)["paper"],
                    "T_ours": "/".join(str(h) for h in horizons[env][0]),
                    "T_paper": horizons[env][1] if horizons[env][1] is not None else "?",
                    "seeds": int(row["seeds"]), "ours_mean": mean, "ours_std": float(row["std"]),
                    "paper_mean": paper_mean, "paper_std": published(env, name, "std"),
                    "ours_over_paper": _ratio(mean, paper_mean),
                    "ours_over_best_baseline": _ratio(mean, best_ours),
                    "paper_over_best_baseline": _ratio(paper_mean, best_paper),
                    "rank_ours": rank_ours.get(name, float("nan")), "rank_paper": rank_paper.get(name, float("nan"))})
            rho, why = _spearman([ours(env, n, "mean") for n in ranked], [published(env, n, "mean") for n in ranked])
            spearman_rows.append({"environment": env, "paper_environment": matched_envs[env]["paper"],
                                  "algorithms": len(ranked), "spearman": rho, "note": why})
    claim_rows = [_judge_claim(claim, paper, cells, matched_envs, ours, published) for claim in paper.claims]
    return PaperComparison(paper, pd.DataFrame(cell_rows), pd.DataFrame(spearman_rows), pd.DataFrame(claim_rows),
                           horizons, notes)


def _spearman(ours: list[float], paper: list[float]) -> tuple[float, str]:
    """Spearman's rho of two rankings (ties share their average rank); NaN with the reason where it
    is not defined."""
    from scipy.stats import spearmanr

    if len(ours) < 2:
        return float("nan"), f"{len(ours)} algorithm(s) in both: no ranking to compare"
    for values, whose in ((ours, "ours"), (paper, "the paper's")):
        if len(set(values)) == 1:
            return float("nan"), f"all {whose} values tie: no ranking to compare"
    notes = []
    for values, whose in ((ours, "ours"), (paper, "the paper's")):
        tied = sum(values.count(v) for v in set(values) if values.count(v) > 1)
        if tied:
            notes.append(f"{tied} of {whose} share a rank")
    note = "; ".join(notes) + (": average ranks" if notes else "")
    return float(spearmanr(ours, paper).statistic), note


def _judge_claim(claim: dict, paper: PaperData, cells: dict, matched_envs: dict, ours, published) -> dict:
    """Whether a claim holds on our trials and on the paper's numbers, both over the environments
    and algorithms run here (so that the two verdicts speak of the same comparison)."""
    statistic, lower = claim["statistic"], claim["compare"] == "lower"
    tolerance = float(claim.get("tolerance", 0.0))
    name = claim["algorithm"]
    than = [a["name"] for a in paper.algorithms if a["name"] != name] if claim["than"] == "all" else claim["than"]
    scope = [e["key"] for e in paper.environments] if claim["environments"] == "all" else claim["environments"]
    envs = [env for env in cells if matched_envs[env]["key"] in scope]
    run_keys = {matched_envs[env]["key"] for env in envs}
    label = {a["name"]: a["label"] for a in paper.algorithms}

    def judge(values) -> tuple[str, str]:
        verdicts, details = [], []
        for env in envs:
            present = cells[env]
            if name not in present:
                details.append(f"{env}: {label[name]} not run")
                continue
            others = [n for n in than if n in present]
            if not others:
                details.append(f"{env}: none of {', '.join(label[n] for n in than)} run")
                continue
            if statistic == "std" and values is ours and min(int(present[n]["seeds"]) for n in [name, *others]) < 2:
                details.append(f"{env}: a standard deviation needs 2 seeds or more")
                continue
            x = values(env, name, statistic)
            points = {n: values(env, n, statistic) for n in others}
            if not np.isfinite(x) or not all(np.isfinite(v) for v in points.values()):
                details.append(f"{env}: no values")
                continue
            bound = min(points.values()) * (1 + tolerance) if lower else max(points.values()) / (1 + tolerance)
            ok = x <= bound if lower else x >= bound
            verdicts.append(ok)
            listed = ", ".join(f"{label[n]} {_number(v)}" for n, v in points.items())
            scaled = "" if not tolerance else f"{1 + tolerance:g} x " if lower else f"1/{1 + tolerance:g} x "
            sign = ("<=" if ok else ">") if lower else (">=" if ok else "<")
            details.append(f"{env}: {label[name]} {_number(x)} {sign} {_number(bound)} = "
                           f"{scaled}{'min' if lower else 'max'}({listed}): {'yes' if ok else 'NO'}")
        if not verdicts:
            return "cannot be judged", "; ".join(details) or "none of the claim's environments in this sweep"
        failed = verdicts.count(False)
        if failed:
            return f"does not hold (fails on {failed} of {len(verdicts)})", "; ".join(details)
        return f"holds (on {len(verdicts)} of {len(verdicts)})", "; ".join(details)

    ours_verdict, ours_details = judge(ours)
    if statistic in paper.tables:
        paper_verdict, paper_details = judge(published)
    else:
        paper_verdict, paper_details = "no published values", ""
    return {"claim": claim["id"], "text": claim["text"], "statistic": statistic,
            "environments": f"{len(run_keys)} of {len(scope)} run", "ours": ours_verdict, "paper": paper_verdict,
            "ours_details": ours_details, "paper_details": paper_details}


def _number(value: float) -> str:
    """A regret with one decimal, a number below 1 (a time per round) with 3 significant digits."""
    return f"{value:.1f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def _format_cells(cells: pd.DataFrame) -> pd.DataFrame:
    frame = cells.drop(columns=["paper_algorithm"]).copy()
    for column in ("ours_mean", "ours_std", "paper_mean", "paper_std"):
        frame[column] = [MISSING if not np.isfinite(v) else f"{v:.1f}" if "mean" in column else f"{v:.2f}"
                         for v in frame[column]]
    for column in ("ours_over_paper", "ours_over_best_baseline", "paper_over_best_baseline"):
        frame[column] = [MISSING if not np.isfinite(v) else f"{v:.3g}" for v in frame[column]]
    for column in ("rank_ours", "rank_paper"):
        frame[column] = [MISSING if not np.isfinite(v) else f"{v:g}" for v in frame[column]]
    return frame.rename(columns={"ours_over_paper": "ours/paper", "ours_over_best_baseline": "ours/best baseline",
                                 "paper_over_best_baseline": "paper/best baseline"})


def paper_comparison_markdown(comparison: PaperComparison, sweep: str) -> str:
    paper = comparison.paper
    lines = [f"## {sweep} vs paper: {paper.paper}", "",
             f"Paper: {paper.source}" + (f", {paper.seeds} seeds" if paper.seeds else "") + ". "
             "Ours: the grid point of lowest mean final regret per cell (the report's tables)."]
    if not comparison.cells.empty:
        if comparison.horizons_differ:
            lines += ["", "**Horizons differ** (T_ours, T_paper below): regret at different horizons is not "
                      "comparable in magnitude, so ours/paper is for the record only. Compare instead each "
                      "algorithm's regret over the best baseline of its environment (ours/best baseline "
                      "against paper/best baseline, both over the baselines run here), and the rankings."]
        lines += ["", "### Final regret per cell", "", markdown_table(_format_cells(comparison.cells), index=False),
                  "", "### Rank correlation per environment (Spearman, ties at their average rank)", "",
                  markdown_table(comparison.spearman.assign(spearman=[
                      MISSING if not np.isfinite(v) else f"{v:.2f}" for v in comparison.spearman["spearman"]]),
                      index=False)]
    if not comparison.claims.empty:
        claims = comparison.claims
        lines += ["", "### The paper's claims", "",
                  "Each judged on our trials and on the paper's numbers, over the environments and algorithms run here.",
                  "", markdown_table(claims[["claim", "text", "environments", "ours", "paper"]], index=False), ""]
        for row in claims.itertuples(index=False):
            lines.append(f"- {row.claim}: ours: {row.ours_details}"
                         + (f". Paper: {row.paper_details}" if row.paper_details else ""))
    for note in comparison.notes:
        lines.append(f"\nnote: {note}")
    return "\n".join(lines) + "\n"


def write_paper_comparisons(directory: Path, comparisons: list[PaperComparison], sweep: str) -> str:
    """``vs_paper.md`` (every matched paper) and per paper ``vs_paper_<key>_{cells,spearman,claims}.csv``;
    returns the Markdown."""
    if not comparisons:
        return ""
    text = "\n".join(paper_comparison_markdown(c, sweep) for c in comparisons)
    (directory / "vs_paper.md").write_text(text)
    for comparison in comparisons:
        stem = f"vs_paper_{_slug(comparison.paper.key)}"
        for part in ("cells", "spearman", "claims"):
            frame = getattr(comparison, part)
            if not frame.empty:
                frame.to_csv(directory / f"{stem}_{part}.csv", index=False)
    return text
