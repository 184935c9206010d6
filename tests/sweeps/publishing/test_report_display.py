"""What ``banditsweep report`` shows a reader: figures titled by the environment's display name,
grid points in math (``ν = 10⁻³``, ``$\\nu = 10^{-3}$``), the legend outside the axes, and bold in
the tables only where the seeds' spread separates the best from every other algorithm."""

import re
import types

import matplotlib.figure
import pandas as pd
import pytest
from module_results import results_folder
from paths import TEST_DATASETS
from store_builders import write_spec_results

from banditsweep.sweeps.cli.main import main

KERNEL_TITLE = "kernel setting 1, Matérn-5/2 (candidates = 20, centers = 5)"
SWEEP = {
    "sweep": "display",
    "horizon": 20,
    "seeds": 2,
    "log_every": 10,
    "environments": [{"kind": "classification", "dataset": "mushroom"},
                     {"kind": "adversarial_kernel", "setting": 1, "kernel": "matern52", "candidates": 20, "centers": 5}],
    "algorithms": [{"name": "linucb", "grid": {"nu": [0.001, 0.002]}}, {"name": "lints"}, {"name": "linrbmle"},
                   {"name": "random"}],
}


def _capture_figures(monkeypatch) -> list:
    """Each figure as saved, with its legend's and its axes' extents once drawn."""
    saved = []
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(fig, path, **options):
        result = real_savefig(fig, path, **options)   # draws: the layout is final
        renderer = fig.canvas.get_renderer()
        (legend,) = fig.legends
        (ax,) = fig.axes
        saved.append({"path": str(path), "title": ax.get_title(), "metadata": options.get("metadata"),
                      "entries": [t.get_text() for t in legend.get_texts()],
                      "legend": legend.get_window_extent(renderer), "axes": ax.get_window_extent(renderer),
                      "axes_with_labels": ax.get_tightbbox(renderer)})
        return result

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return saved


@pytest.fixture(scope="module")
def display(tmp_path_factory):
    """SWEEP's trials finished (nothing run: the report reads the store), reported once for the
    module's tests below: the report's folder, the figures as saved, and the grid point of LinUCB's
    best on Mushroom as text and as LaTeX. nu = 0.002 is the best there (the one of a mantissa)."""
    folder = tmp_path_factory.mktemp("display")

    def final(trial):
        return 10.0 * trial.spec.seed + (1.0 if trial.spec.params.get("nu") == 0.002 else 5.0)

    with results_folder(folder) as monkeypatch:
        monkeypatch.setenv("BANDITSWEEP_DATA", str(TEST_DATASETS))   # the report plans the spec's datasets
        write_spec_results(folder, SWEEP, final, name="display.yaml")
        saved = _capture_figures(monkeypatch)
        code = main(["report", "display.yaml"])
    report = folder / "results" / "display" / "report"
    best = pd.read_csv(report / "best_params.csv").set_index(["algorithm", "environment"])
    nu = best.loc[("linucb", "classification:mushroom"), "grid_point"]
    text, latex = {"nu=0.001": ("10⁻³", "10^{-3}"), "nu=0.002": ("2×10⁻³", r"2 \times 10^{-3}")}[nu]
    return types.SimpleNamespace(code=code, report=report, saved=saved, text=text, latex=latex)


def test_report_titles_figures_by_display_name_with_grid_points_in_math(display):
    assert display.code == 0
    figures = {figure["title"]: figure for figure in display.saved if figure["path"].endswith(".png")}
    assert set(figures) == {"Mushroom", KERNEL_TITLE}
    mushroom = figures["Mushroom"]
    assert mushroom["metadata"] == {"Title": "Mushroom"}
    assert mushroom["entries"] == [f"LinUCB (ν = {display.text})", "LinTS", "LinRBMLE", "Random"]
    assert figures[KERNEL_TITLE]["entries"] == ["Random"]   # the linear ones are contextual only


def test_a_figures_legend_is_outside_the_plot_clear_of_its_labels(display):
    assert display.saved
    for figure in display.saved:
        # The legend is outside the plot, clear of the axes and of their tick labels and title.
        assert not figure["legend"].overlaps(figure["axes"]), figure["path"]
        assert not figure["legend"].overlaps(figure["axes_with_labels"]), figure["path"]
        assert figure["legend"].y1 <= figure["axes_with_labels"].y0 + 1e-6


def test_the_figures_index_and_captions_name_environments_by_title_and_grid_points_in_math(display):
    text, latex = display.text, display.latex
    index = (display.report / "figures.md").read_text()
    assert "## Mushroom\n" in index and f"## {KERNEL_TITLE}\n" in index
    assert f"- LinUCB (ν = {text})\n" in index and "band: 95% CI of the mean over 2 seeds" in index
    assert [line for line in index.splitlines() if line.startswith("## ")] == ["## Mushroom", f"## {KERNEL_TITLE}"]
    captions = (display.report / "figures.tex").read_text()
    assert rf"cumulative regret on Mushroom of LinUCB ($\nu = {latex}$), LinTS, LinRBMLE, Random" in captions
    assert r"on kernel setting 1, Matérn-5/2 (candidates = 20, centers = 5) of Random" in captions
    assert "nu=" not in captions


def test_latex_tables_name_environments_by_title_and_markdown_by_the_trials_names(display):
    grid_table = (display.report / "best_params.tex").read_text()
    assert f"algorithm & Mushroom & {KERNEL_TITLE} \\\\" in grid_table
    assert rf"LinUCB & $\nu = {display.latex}$ & -- \\" in grid_table
    # The kinds differ: LaTeX tables name environments by title, Markdown keeps the trials' names.
    assert f"algorithm & Mushroom & {KERNEL_TITLE}" in (display.report / "final_regret_mean.tex").read_text()
    assert "| algorithm | classification:mushroom | adversarial_kernel:setting=1" in \
        (display.report / "final_regret_mean.md").read_text()


SEPARATION = {
    "sweep": "separation",
    "horizon": 20,
    "seeds": 3,
    "log_every": 10,
    "environments": [{"kind": "synthetic", "function": "h1"}, {"kind": "synthetic", "function": "h3"}],
    "algorithms": [{"name": "linucb", "grid": {"nu": [0.001, 0.1]}}, {"name": "lints"}, {"name": "random"}],
}
# Final regrets of the three seeds. h1: LinUCB 2 ± 1, clear of LinTS 11 ± 1 and Random 21 ± 1.
# h3: LinUCB 6 ± 1 and LinTS 7 ± 1 overlap (7 > 6); Random far off. LinUCB's other point is worse.
FINALS = {("linucb", "h1", 0.001): [1, 2, 3], ("linucb", "h1", 0.1): [4, 5, 6], ("lints", "h1", None): [10, 11, 12],
          ("random", "h1", None): [20, 21, 22], ("linucb", "h3", 0.001): [5, 6, 7], ("linucb", "h3", 0.1): [9, 9, 9],
          ("lints", "h3", None): [6, 7, 8], ("random", "h3", None): [30, 31, 32]}


def _key(trial) -> tuple:
    return (trial.spec.algorithm, trial.spec.environment["function"],
            trial.spec.params["nu"] if trial.spec.algorithm == "linucb" else None)


def _write_finished(tmp_path, spec: dict, failing: frozenset = frozenset()) -> None:
    """The spec's trials as finished, with the final regrets of FINALS and straight-line curves;
    those of ``failing`` (FINALS key + seed) as failed."""
    write_spec_results(tmp_path, spec, lambda trial: FINALS[_key(trial)][trial.spec.seed],
                       lambda trial: (*_key(trial), trial.spec.seed) in failing)


def test_report_bolds_the_best_only_where_a_paired_test_separates_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_finished(tmp_path, SEPARATION)
    assert main(["report", "spec.yaml"]) == 0
    report = tmp_path / "results" / "separation" / "report"

    # LinUCB is below LinTS by the same 9 (h1) or 1 (h3) on each of the 3 seeds: the sign test's p is
    # 2 / 2^3 = 0.25, and nothing is bold (tests/sweeps/results/test_report_comparisons.py has a column that is).
    mean = (report / "final_regret_mean.tex").read_text()
    assert r"algorithm & synthetic h1 & synthetic h3 \\" in mean
    assert r"LinUCB & $2.0$ & $6.0$ \\" in mean
    assert r"LinTS & $11.0$ & $7.0$ \\" in mean and r"Random & $21.0$ & $31.0$ \\" in mean
    assert r"\mathbf" not in mean
    rule = "bold: lower than every other algorithm of its column at 5\\% after Holm's adjustment over the column's " \
           "pairs (paired by seed: the paired t-test; 3 seeds)"
    assert rule in mean
    both = (report / "final_regret_mean_std.tex").read_text()
    assert r"LinUCB & $2.0 \pm 1.0$ & $6.0 \pm 1.0$ \\" in both and rule in both
    markdown = (report / "final_regret_mean.md").read_text()
    assert "| linucb | 2.0 | 6.0 |" in markdown and "| lints | 11.0 | 7.0 |" in markdown
    assert "**" not in markdown and rule.replace("\\%", "%") in markdown
    pairs = pd.read_csv(report / "pairs.csv")
    h1 = pairs[(pairs["a"] == "linucb") & (pairs["b"] == "lints")].iloc[0]
    assert h1["test"] == "sign test (the same difference on every seed)" and h1["p"] == pytest.approx(0.25)
    assert h1["verdict"] == "cannot be told apart at n = 3 (the same difference on every seed; about 6 seeds would)"
    # Equal seconds per round everywhere: a tie, nothing bold.
    assert r"\mathbf" not in (report / "seconds_per_round.tex").read_text()
    assert r"LinUCB & $\nu = 10^{-3}$ & $\nu = 10^{-3}$ \\" in (report / "best_params.tex").read_text()
    assert re.search(r"LinTS & \(one point\) & \(one point\) \\\\", (report / "best_params.tex").read_text())


def test_a_grid_point_with_a_failed_seed_is_not_chosen_as_the_best(tmp_path, monkeypatch, capsys):
    """LinUCB's nu = 0.001 on h1 loses a seed (the one with the highest regret, 3): the two that
    finished average 1.5, which would flatter it. The choice falls on nu = 0.1 (all three finished,
    mean 5), and the report says why."""
    monkeypatch.chdir(tmp_path)
    _write_finished(tmp_path, SEPARATION, failing=frozenset({("linucb", "h1", 0.001, 2)}))
    assert main(["report", "spec.yaml"]) == 0
    out = capsys.readouterr().out
    assert "note: linucb | synthetic:h1: left out of the choice of the best (nu=0.001: 1 of 3 seeds failed)" in out
    report = tmp_path / "results" / "separation" / "report"
    best = pd.read_csv(report / "best_params.csv")
    linucb = best.set_index(["algorithm", "environment"]).loc[("linucb", "synthetic:h1")]
    assert linucb["mean"] == 5.0 and linucb["grid_point"] == "nu=0.1" and linucb["failed"] == 0
    assert "Grid points with failed seeds:" in (report / "best_params.md").read_text()


def test_where_every_grid_point_lost_a_seed_the_best_finished_one_is_shown_and_said_so(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.chdir(tmp_path)
    _write_finished(tmp_path, SEPARATION, failing=frozenset({("linucb", "h3", 0.001, 0), ("linucb", "h3", 0.1, 0)}))
    assert main(["report", "spec.yaml"]) == 0
    out = capsys.readouterr().out
    assert "linucb | synthetic:h3: every grid point has failed seeds: the best of the finished ones is shown" in out
