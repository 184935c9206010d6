"""The report's files of statistics (sweeps.analysis.comparisons): ``final_regret_ci`` (each cell's interval),
``pairs`` (every pair of an environment compared by seed), ``across_environments`` (IQM of normalised
regret with stratified-bootstrap intervals, the probability of improvement) and the performance
profile figure, each as Markdown, CSV and LaTeX (the figure as PDF and PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from banditsweep.sweeps.analysis.comparisons import PAIRS_CAPTION, SAME_SEEDS, AcrossEnvironments
from banditsweep.sweeps.publishing.figures import WIDTH_INCHES, figure_style, style_of
from banditsweep.sweeps.analysis.statistics import IQM_INTERVAL_FROM, SEED
from banditsweep.sweeps.publishing.tables import (marks_legend, MISSING, label_slug, latex_escape, latex_text_table,
                                                  markdown_table)

PROFILE_RESAMPLES = 500   # stratified-bootstrap resamples behind the profile's bands


def _shown(value, digits: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return MISSING
    return f"{value:{digits}}"


def write_intervals(directory: Path, summary, sweep: str, names: dict[str, str]) -> None:
    """``final_regret_ci.md`` / ``.csv`` / ``.tex``: each cell's mean final regret with its 95% interval
    and n (the CSV one row per cell: mean, std, n, ci_low, ci_high, ci_method)."""
    best = summary.best
    methods = sorted(set(best["ci_method"]))
    caption = (f"{sweep}: mean final cumulative regret [95% confidence interval of the mean] over n seeds "
               f"(best grid point per cell; interval: {', '.join(methods)}; a t-interval below 30 seeds, where a "
               f"bootstrap is too narrow){marks_legend(summary.marks)}")
    cells = {(row["label"], summary.columns.get(row["environment"], row["environment"])):
             f"{row['mean']:.1f} [{row['ci_low']:.1f}, {row['ci_high']:.1f}] (n = {int(row['seeds'])})"
             if np.isfinite(row["ci_low"]) else f"{row['mean']:.1f} (n = {int(row['seeds'])})"
             for _, row in best.iterrows()}
    columns = list(summary.mean.columns)
    table = pd.DataFrame([[cells.get((label, column), MISSING) for column in columns] for label in summary.mean.index],
                         index=pd.Index(list(summary.mean.index), name="algorithm"), columns=columns)
    (directory / "final_regret_ci.md").write_text(f"{caption}\n\n{markdown_table(table, marks=summary.marks)}\n")
    long = best[["label", "environment", "mean", "std", "seeds", "ci_low", "ci_high", "ci_method", "code"]]
    long.rename(columns={"label": "algorithm", "seeds": "n"}).to_csv(directory / "final_regret_ci.csv", index=False)
    marked = table.copy()
    for (column, label), mark in summary.marks.items():
        if label in marked.index and column in marked.columns:
            marked.loc[label, column] = f"{marked.loc[label, column]}{mark}"
    (directory / "final_regret_ci.tex").write_text(latex_text_table(
        marked.rename(index=names, columns=summary.titles), caption, f"tab:{label_slug(sweep)}:final-regret-ci"))


def with_pair_marks(pairs: pd.DataFrame, marks: dict) -> pd.DataFrame:
    """``pairs`` with ``code``: which side's cell is marked for its code, and how (``a ‡``, ``b †``)."""
    if pairs.empty:
        return pairs.assign(code=pd.Series(dtype=str))
    return pairs.assign(code=[", ".join(f"{side} {marks[(env, label)]}" for side, label in (("a", a), ("b", b))
                                        if marks.get((env, label)))
                              for env, a, b in zip(pairs["environment"], pairs["a"], pairs["b"])])


def write_pairs(directory: Path, pairs: pd.DataFrame, sweep: str, names: dict[str, str], chosen: str = SAME_SEEDS,
                marks: dict | None = None) -> None:
    """``pairs.md`` / ``.csv`` / ``.tex``: the pairwise comparisons of each environment; ``chosen``
    says on which seeds the grid points were chosen; ``code`` names the side whose cell is marked
    (``marks``: (table column, label) -> mark, as the report's tables mark them)."""
    marks = marks or {}
    pairs = pairs if "code" in pairs.columns else with_pair_marks(pairs, marks)
    shown = pairs.assign(**{column: [_shown(value) for value in pairs[column]]
                            for column in ("difference", "ci_low", "ci_high", "p", "p_holm")},
                         seeds_needed=[MISSING if not isinstance(v, str) or not v else v for v in pairs["seeds_needed"]])
    caption = f"{sweep}: {PAIRS_CAPTION}. {chosen}{marks_legend(marks)}"
    (directory / "pairs.md").write_text(f"{caption}\n\n{markdown_table(shown, index=False)}\n")
    pairs.to_csv(directory / "pairs.csv", index=False)
    named = shown.assign(a=[names.get(a, a) for a in shown["a"]], b=[names.get(b, b) for b in shown["b"]])
    (directory / "pairs.tex").write_text(latex_text_table(named.set_index(["environment", "a", "b"]), caption,
                                                          f"tab:{label_slug(sweep)}:pairs"))


def across_caption(sweep: str, across: AcrossEnvironments) -> str:
    envs = len(across.references)
    return (f"{sweep}: interquartile mean (IQM: the mean of the middle 50% of runs) of the final regret "
            f"normalised per environment by the uniformly random policy's (0: no regret, 1: no better than random), "
            f"over {envs} environments and every seed of each, with its 95% stratified-bootstrap interval (seeds "
            f"resampled within each environment, Agarwal et al., NeurIPS 2021; each resample's spread corrected "
            f"and t quantiles: measured to cover 95% on normal and 92% on skewed scores at {IQM_INTERVAL_FROM} runs "
            f"per environment; with fewer runs none is given, the uncorrected percentile interval having covered "
            f"86% at 3). Two intervals that do not "
            f"overlap are no test: pairs.md compares algorithms")


def write_across(directory: Path, across: AcrossEnvironments, sweep: str, names: dict[str, str],
                 labels: list[str] | None = None, marks: dict | None = None) -> list[Path]:
    """``across_environments.md`` / ``.csv`` / ``.tex`` (IQM and the probability of improvement),
    ``improvement.csv`` and the performance-profile figure; the figure files written. ``code``: the
    marks of an algorithm's cells (``marks``: (table column, label) -> mark) that its aggregate spans."""
    marks = marks or {}
    owned = {label: "".join(sorted({c for (_, marked), mark in marks.items() if marked == label for c in mark}))
             for label in across.iqm["algorithm"]}
    across.iqm = across.iqm.assign(code=[owned[label] for label in across.iqm["algorithm"]])
    caption = across_caption(sweep, across) + marks_legend(owned)
    table = across.iqm.assign(**{c: [_shown(v, ".3f") for v in across.iqm[c]] for c in ("iqm", "ci_low", "ci_high",
                                                                                         "mean")})
    improvement = across.improvement.map(lambda v: _shown(v, ".2f"))
    references = across.references.assign(reference_regret=[f"{v:.1f}" for v in across.references["reference_regret"]])
    notes = "".join(f"\n- {note}" for note in across.notes)
    (directory / "across_environments.md").write_text(
        f"{caption}\n\n{markdown_table(table, index=False)}\n\n"
        f"Probability of improvement: P(row's normalised final regret < column's) for a run of each on a random "
        f"environment (ties count half; Agarwal et al.)\n\n{markdown_table(improvement)}\n\n"
        f"Reference regret of each environment\n\n{markdown_table(references, index=False)}\n"
        + (f"\nLeft out:{notes}\n" if notes else ""))
    across.iqm.to_csv(directory / "across_environments.csv", index=False)
    across.improvement.to_csv(directory / "improvement.csv")
    (directory / "across_environments.tex").write_text(latex_text_table(
        table.assign(algorithm=[names.get(a, a) for a in table["algorithm"]]).set_index("algorithm"), caption,
        f"tab:{label_slug(sweep)}:across-environments"))
    return _plot_profile(directory, across, sweep, {label: names.get(label, label) + owned[label] for label in owned},
                         labels)


def _plot_profile(directory: Path, across: AcrossEnvironments, sweep: str, names: dict[str, str],
                  labels: list[str] | None = None) -> list[Path]:
    """The performance profile: per algorithm, the fraction of runs whose normalised final regret is
    at most tau, against tau, with a 95% stratified-bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top = max(float(np.max(np.concatenate(list(by_env.values())))) for by_env in across.scores.values())
    thresholds = np.linspace(0.0, max(1.0, top) * 1.02, 201)
    rng = np.random.default_rng(SEED)
    written = []
    with plt.rc_context(figure_style()):
        fig, ax = plt.subplots(figsize=(WIDTH_INCHES, 3.4), layout="constrained")
        for i, (label, by_env) in enumerate(across.scores.items()):
            strata = list(by_env.values())
            curve = across.profile(thresholds)[label]
            draws = np.array([(np.concatenate([s[rng.integers(0, len(s), len(s))] for s in strata])[:, None]
                               <= thresholds[None, :]).mean(axis=0) for _ in range(PROFILE_RESAMPLES)])
            low, high = np.quantile(draws, [0.025, 0.975], axis=0)
            color, linestyle, marker = style_of(label, labels or list(across.scores))
            ax.plot(thresholds, curve, color=color, lw=1.4, linestyle=linestyle, marker=marker, ms=3.5,
                    markevery=(i * 7 % 25, 25), label=names.get(label, label))
            ax.fill_between(thresholds, low, high, color=color, alpha=0.15, lw=0)
        ax.set_xlabel(r"normalised final regret $\tau$ (1: the random policy)")
        ax.set_ylabel(r"fraction of runs with regret $\leq \tau$")
        ax.set_ylim(0, 1.02)
        ax.set_xlim(0, thresholds[-1])
        ax.grid(alpha=0.25, lw=0.5)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False,
                   title="line: fraction of runs; band: 95% stratified-bootstrap interval", title_fontsize=7)
        for suffix, options in ((".pdf", {}), (".png", {"dpi": 200})):
            path = directory / f"performance_profile{suffix}"
            fig.savefig(path, metadata={"Title": f"{sweep}: performance profile"}, **options)
            written.append(path)
        plt.close(fig)
    caption = (f"{latex_escape(sweep)}: performance profile over {len(across.references)} environments: the "
               f"fraction of runs (seeds and environments) whose final regret, normalised by the random policy's, is "
               f"at most $\\tau$; higher is better. Bands: 95\\% stratified-bootstrap intervals.")
    (directory / "performance_profile.tex").write_text(
        "\n".join([r"\begin{figure}[t]", r"\centering", r"\includegraphics[width=\linewidth]{performance_profile.pdf}",
                   rf"\caption{{{caption}}}", rf"\label{{fig:{label_slug(sweep)}:performance-profile}}",
                   r"\end{figure}", ""]))
    return written
