"""The report's regret figures: one per environment, as PDF and PNG, titled by the environment's
display name, the algorithms at their chosen grid points (``LinUCB (ν = 10⁻³)``) in a legend below
the axes, never over the curves; ``figures.tex`` (caption and label of each) and ``figures.md``
(what each figure shows: title, legend, band)."""

from __future__ import annotations

from pathlib import Path

from banditsweep.sweeps.publishing.display import latex_entry, legend_entry
from banditsweep.sweeps.publishing.tables import label_slug, latex_escape, marks_legend, slug
from banditsweep.workers import SweepStore

# Distinct at a glance and in black and white: a colour, a line style and a marker per algorithm.
LINE_STYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
WIDTH_INCHES = 4.8
AXES_INCHES = 2.9          # height of the plot itself; the legend's rows come below it
ROW_INCHES = 0.17          # one row of the legend at its font size


BANDS = {"ci": "95% CI of the mean", "std": "±1 std"}   # what a figure's band can show: --band


def band_text(seeds: list[int], band: str = "ci") -> str:
    """What the shaded band is."""
    counts = sorted(set(seeds))
    over = f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds (per algorithm)"
    return f"line: mean; band: {BANDS[band]} over {over}"


def band_half_width(matrix, band: str = "ci"):
    """Per round, the band's half-width around the mean of ``matrix`` (rounds x seeds): the
    t-interval's half-width of the mean (``ci``; as the tables' intervals below 30 seeds, and at
    every n here: a bootstrap per round would cost a resample per point) or one standard deviation
    (``std``). Zero where a single seed gives no spread."""
    from scipy import stats

    n = matrix.shape[1]
    std = matrix.std(axis=1).fillna(0.0)
    if band == "std" or n < 2:
        return std
    return std * float(stats.t.ppf(0.975, n - 1)) / n ** 0.5


def figure_style() -> dict:
    """The report figures' matplotlib settings: TrueType fonts in PDF, the paper's 9 pt."""
    return {"pdf.fonttype": 42, "ps.fonttype": 42, "font.size": 9, "axes.labelsize": 9, "legend.fontsize": 7.5,
            "axes.spines.top": False, "axes.spines.right": False}


def legend_columns(entries: list[str]) -> int:
    """As many columns as the figure's width holds for the longest entry (about 0.055 in a character
    at the legend's 7.5 pt, plus the line sample)."""
    longest = max(len(entry) for entry in entries)
    return max(1, min(len(entries), int(WIDTH_INCHES // (0.055 * longest + 0.55))))


def _point(row) -> dict:
    return row.get("grid_values") or {}


def style_of(label: str, labels: list[str]) -> tuple:
    """An algorithm's colour, line style and marker in every figure of a report: by its place in the
    report's label order (the spec's), so a figure that shows some of the algorithms draws each as the
    others do."""
    import matplotlib.pyplot as plt

    i = labels.index(label)
    return plt.cm.tab10(i % 10), LINE_STYLES[i % len(LINE_STYLES)], MARKERS[i % len(MARKERS)]


def _mark(row) -> str:
    """The cell's mark for code other than today's (report.code_marks), as its tables show it."""
    mark = row.get("code")
    return mark if isinstance(mark, str) else ""


def _rows_of(summary, environment: str, labels: list[str]):
    rows = summary.best[summary.best["environment"] == environment]
    return rows.assign(order=[labels.index(label) for label in rows["label"]]).sort_values("order")


def draw_environment(ax, store: SweepStore, rows, entries: list[str], labels: list[str], band: str = "ci"):
    """On ``ax``, the mean cumulative regret of each of ``rows`` (one environment's cells of a
    report.Summary) with its band; (the seeds of each curve drawn, (row, legend entry) of each)."""
    seeds, shown = [], []
    for (_, row), entry in zip(rows.iterrows(), entries):
        curves = store.read_curves(row["trial_ids"])
        if curves.empty:
            continue
        matrix = curves.pivot(index="t", columns="trial_id", values="cum_regret")
        mean, half = matrix.mean(axis=1), band_half_width(matrix, band)
        i = labels.index(row["label"])
        color, linestyle, marker = style_of(row["label"], labels)
        step = max(1, len(mean) // 8)   # markers staggered between algorithms, so that none hides another
        ax.plot(mean.index, mean.values, label=entry, color=color, lw=1.4, linestyle=linestyle, marker=marker, ms=4,
                markevery=(i * step // max(1, len(labels)) % step, step))
        ax.fill_between(mean.index, (mean - half).values, (mean + half).values, color=color, alpha=0.18, lw=0)
        seeds.append(matrix.shape[1])
        shown.append((row, entry))
    return seeds, shown


def _axes_text(ax, title: str) -> None:
    ax.set_xlabel("round $t$")
    ax.set_ylabel("cumulative regret")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.25, lw=0.5)
    ax.set_xlim(left=0)


def regret_figure(store: SweepStore, summary, band: str = "ci", environments: list[str] | None = None):
    """One matplotlib figure of the report's regret curves: a panel per environment of ``summary``
    (or of ``environments``), each algorithm at its chosen grid point with the report's band, one
    legend below the panels (``banditsweep.run(...).plot()``). Nothing is written; the figure is not
    pyplot's (a notebook shows the one returned, once; ``figure.savefig(path)`` writes it)."""
    import matplotlib
    from matplotlib.figure import Figure

    labels = list(summary.mean.index)
    shown_envs = list(dict.fromkeys(summary.best["environment"]))
    if environments is not None:
        unknown = [env for env in environments if env not in shown_envs]
        if unknown:
            raise ValueError(f"no finished trials of {', '.join(unknown)}; the environments: {', '.join(shown_envs)}")
        shown_envs = list(environments)
    with matplotlib.rc_context(figure_style()):
        count = max(1, len(shown_envs))
        fig = Figure(figsize=(WIDTH_INCHES * min(count, 3) * 0.8, AXES_INCHES + 0.6), layout="constrained")
        axes = fig.subplots(1, count, squeeze=False)
        handles: dict[str, object] = {}
        seeds: list[int] = []
        for ax, environment in zip(axes[0], shown_envs):
            rows = _rows_of(summary, environment, labels)
            entries = [legend_entry(row["display"], _point(row)) + _mark(row) for _, row in rows.iterrows()]
            drawn, _ = draw_environment(ax, store, rows, entries, labels, band)
            seeds += drawn
            _axes_text(ax, summary.titles.get(environment, environment))
            for handle, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        if handles:
            fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                       ncols=legend_columns(list(handles)), title=band_text(seeds, band), title_fontsize=7,
                       frameon=False)
    return fig


def plot_curves(store: SweepStore, summary, directory: Path, sweep: str = "", band: str = "ci") -> list[Path]:
    """One figure per environment of ``summary`` (a report.Summary): mean cumulative regret vs round
    of each algorithm's chosen grid point, with a band over its seeds (``band``: the 95% interval of
    the mean, or ±1 std: :data:`BANDS`), said in legend and caption; the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary.mean.index)   # the spec's order: colours and styles follow it
    written, latex, index = [], [], [f"{sweep}: regret figures (mean cumulative regret vs round)", ""]
    with plt.rc_context(figure_style()):
        for environment in dict.fromkeys(summary.best["environment"]):
            rows = _rows_of(summary, environment, labels)
            entries = [legend_entry(row["display"], _point(row)) + _mark(row) for _, row in rows.iterrows()]
            columns = legend_columns(entries)
            legend_rows = -(-len(entries) // columns) + 1   # and the legend's title
            fig, ax = plt.subplots(figsize=(WIDTH_INCHES, AXES_INCHES + ROW_INCHES * legend_rows),
                                   layout="constrained")
            seeds, shown = draw_environment(ax, store, rows, entries, labels, band)
            if not seeds:
                plt.close(fig)
                continue
            legend_title = band_text(seeds, band)
            title = summary.titles.get(environment, environment)
            _axes_text(ax, title)
            # Outside the axes, below them: 7 algorithms' entries would cover the curves inside.
            fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=columns, title=legend_title,
                       title_fontsize=7, frameon=False)
            stem = f"regret_{slug(environment)}"
            for suffix, options in ((".pdf", {}), (".png", {"dpi": 200})):
                fig.savefig(directory / f"{stem}{suffix}", metadata={"Title": title}, **options)
                written.append(directory / f"{stem}{suffix}")
            plt.close(fig)
            over = legend_title.split("over ", 1)[1]
            shaded = ("the 95\\% confidence interval of the mean (t)" if band == "ci"
                      else f"{latex_escape('±')}1 standard deviation")
            names = ", ".join(latex_entry(row["display"], _point(row)) + latex_escape(_mark(row)) for row, _ in shown)
            legend = marks_legend([_mark(row) for row, _ in shown])
            caption = (f"{latex_escape(sweep)}: cumulative regret on {latex_escape(title)} of {names} (each at its "
                       f"grid point of lowest mean final regret). Lines are the mean, shaded bands "
                       f"{shaded} over {latex_escape(over)}{latex_escape(legend.replace(';', '.', 1))}.")
            latex += [r"\begin{figure}[t]", r"\centering", rf"\includegraphics[width=\linewidth]{{{stem}.pdf}}",
                      rf"\caption{{{caption}}}", rf"\label{{fig:{label_slug(sweep)}:{label_slug(stem)}}}",
                      r"\end{figure}", ""]
            index += [f"## {title}", "", f"`{stem}.pdf`, `{stem}.png` (environment `{environment}`); {legend_title}"
                      f"{marks_legend([_mark(row) for row, _ in shown])}", "",
                      *(f"- {entry}" for _, entry in shown), ""]
    if latex:
        (directory / "figures.tex").write_text("\n".join(latex))
        (directory / "figures.md").write_text("\n".join(index))
    return written
