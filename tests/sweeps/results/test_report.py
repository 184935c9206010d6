"""The report's tables from hand-made trials with known final regrets, and the results table that
``banditsweep run`` prints for a sweep mixing environment kinds (one with a dict-valued setting)."""

import json
import math
import types
from pathlib import Path

import pandas as pd
import pytest
from store_builders import write_spec_results

from banditsweep.core.engine.trial import TrialSpec, environment_label
from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.results.report import MISSING, markdown_table, setting_table, summarise

H1 = {"kind": "synthetic", "function": "h1", "dim": 5}
H3 = {"kind": "synthetic", "function": "h3", "dim": 5}
GRID = {"kind": "adversarial_kernel", "domain": {"grid": [5, 5]}, "kernel": "se", "candidates": 20, "centers": 5}
SETTING = {"kind": "adversarial_kernel", "setting": 1, "kernel": "matern52"}
SMALL = {"kind": "synthetic", "function": "h1", "dim": 3}


def _name(env: dict) -> str:
    return environment_label(env)


def _trials(cells: list) -> pd.DataFrame:
    """Rows as the trials table stores them: ``cells`` lists (label, environment dict, params dict,
    [(final_regret, seconds_per_round), ...] with one pair per seed)."""
    rows = []
    for label, env, params, results in cells:
        config = TrialSpec.create("random", {}, env, 0, 10).environment  # resolved: every default filled in
        for seed, (regret, seconds) in enumerate(results):
            rows.append({"trial_id": f"t{len(rows)}", "label": label, "environment": _name(env),
                         "params": json.dumps(params, sort_keys=True),
                         "environment_config": json.dumps(config, sort_keys=True),
                         "diagnostics": json.dumps({"batch_size": 1, "batch_wall_seconds": 9.0,
                                                    "update_seconds": seconds / 2}),
                         "seed": seed, "final_regret": float(regret), "seconds_per_round": seconds,
                         "status": "finished"})
    return pd.DataFrame(rows)


# Two algorithms x two grid points x two synthetic environments; listed in an order unlike the
# label and environment orders given to `summarise`, so the tables' order must come from those.
CELLS = [
    ("alpha", H1, {"c": 1}, [(7, 1e-3), (7, 3e-3)]),
    ("alpha", H1, {"c": 2}, [(4, 2e-3), (6, 4e-3)]),                # best: mean 5, std sqrt(2)
    ("alpha", H3, {"c": 1}, [(20, 1e-3), (24, 1e-3)]),              # best: mean 22, std sqrt(8)
    ("alpha", H3, {"c": 2}, [(30, 1e-3), (30, 1e-3)]),
    ("zeta", H1, {"nu": 0.1}, [(1, 1e-4), (2, 2e-4), (3, 3e-4)]),   # best: mean 2, std 1
    ("zeta", H1, {"nu": 1.0}, [(5, 1e-4), (5, 1e-4), (8, 1e-4)]),
    ("zeta", H3, {"nu": 0.1}, [(10, 1e-4), (12, 1e-4), (14, 1e-4)]),
    ("zeta", H3, {"nu": 1.0}, [(8, 5e-4), (9, 6e-4), (10, 7e-4)]),  # best: mean 9, std 1
]
LABELS = ["zeta", "alpha", "ghost"]  # "ghost" has no trials: left out of the tables
ENVS = [_name(H3), _name(H1)]


@pytest.fixture(scope="module")
def summarised():
    """CELLS as trials, and their summary for LABELS and ENVS."""
    trials = _trials(CELLS)
    return trials, summarise(trials, LABELS, ENVS)


def test_summarise_picks_the_lowest_mean_grid_point_per_cell(summarised):
    trials, summary = summarised
    best = summary.best.set_index(["label", "environment"])
    assert len(best) == 4
    expected = [("zeta", H3, {"nu": 1.0}, 9.0, 1.0, 3, 6e-4), ("zeta", H1, {"nu": 0.1}, 2.0, 1.0, 3, 2e-4),
                ("alpha", H3, {"c": 1}, 22.0, math.sqrt(8), 2, 1e-3), ("alpha", H1, {"c": 2}, 5.0, math.sqrt(2), 2, 3e-3)]
    for label, env, params, mean, std, seeds, seconds in expected:
        row = best.loc[(label, _name(env))]
        assert json.loads(row["params"]) == params
        assert row["mean"] == pytest.approx(mean) and row["std"] == pytest.approx(std)
        assert row["seeds"] == seeds and row["seconds_per_round"] == pytest.approx(seconds)
        chosen = trials[(trials["label"] == label) & (trials["environment"] == _name(env))
                        & (trials["params"] == row["params"])]
        assert sorted(row["trial_ids"]) == sorted(chosen["trial_id"])


def test_summary_tables_follow_the_given_orders_and_drop_the_shared_kind(summarised):
    """Pivoted tables: rows in the given label order, columns in the given environment order, named
    without the kind they all share."""
    _, summary = summarised
    columns = ["h3,dim=5", "h1,dim=5"]
    expected_mean = pd.DataFrame([[9.0, 2.0], [22.0, 5.0]], index=pd.Index(["zeta", "alpha"], name="algorithm"),
                                 columns=columns)
    pd.testing.assert_frame_equal(summary.mean, expected_mean, check_names=True)
    expected_std = pd.DataFrame([[1.0, 1.0], [math.sqrt(8), math.sqrt(2)]], index=expected_mean.index, columns=columns)
    pd.testing.assert_frame_equal(summary.std, expected_std)
    expected_seconds = pd.DataFrame([[6e-4, 2e-4], [1e-3, 3e-3]], index=expected_mean.index, columns=columns)
    pd.testing.assert_frame_equal(summary.seconds, expected_seconds)


def test_summary_timing_diagnostics_are_the_chosen_points_means_but_the_batchs_wall_time(summarised):
    """The chosen point's mean of every *_seconds value but the batch's wall time."""
    diagnostics = summarised[1].diagnostics.set_index(["algorithm", "environment"])
    assert "batch_wall_seconds" not in diagnostics.columns
    assert diagnostics.loc[("zeta", _name(H3)), "update_seconds"] == pytest.approx(3e-4)


def test_the_by_setting_table_has_a_row_per_environment_indexed_by_the_setting_that_varies(summarised):
    by_setting = summarised[1].by_setting
    assert by_setting.index.names == ["function"] and list(by_setting.index) == ["h3", "h1"]
    assert list(by_setting.columns) == [("zeta", "regret"), ("zeta", "s/round"), ("alpha", "regret"), ("alpha", "s/round")]
    assert by_setting.loc["h3", ("zeta", "regret")] == "9.0 ± 1.0"
    assert by_setting.loc["h3", ("alpha", "regret")] == "22.0 ± 2.8"
    assert by_setting.loc["h1", ("zeta", "regret")] == "2.0 ± 1.0"
    assert by_setting.loc["h1", ("alpha", "regret")] == "5.0 ± 1.4"
    assert by_setting.loc["h3", ("zeta", "s/round")] == "6.00e-04"
    assert by_setting.loc["h1", ("alpha", "s/round")] == "3.00e-03"


def test_summarise_a_single_seed():
    summary = summarise(_trials([("zeta", H1, {}, [(3.5, 1e-3)])]), ["zeta"], [_name(H1)])
    row = summary.best.iloc[0]
    assert (row["mean"], row["std"], row["seeds"]) == (3.5, 0.0, 1)
    # One environment: no setting varies, so its name indexes the by-setting table.
    assert summary.by_setting.index.names == ["environment"]
    assert summary.by_setting.loc[_name(H1), ("zeta", "regret")] == "3.5 ± 0.0"


def test_summarise_no_trials():
    assert summarise(pd.DataFrame(), ["zeta"], [_name(H1)]).mean.empty


def test_setting_table_of_mixed_kinds_and_dict_settings():
    """Kinds differ: ``kind`` leads the index, then the settings that vary within a kind; a dict
    setting shows as canonical JSON, a setting of another kind (or unset) as MISSING."""
    envs = [GRID, SETTING, SMALL, H3 | {"dim": 3}]
    cells = [("random", env, {}, [(10 * (i + 1), 1e-5), (10 * (i + 1) + 2, 3e-5)]) for i, env in enumerate(envs)]
    cells.append(("apg", GRID, {"c1": 0.5}, [(1, 1e-4), (3, 1e-4)]))
    names = [_name(env) for env in envs]
    summary = summarise(_trials(cells), ["random", "apg"], names)
    # Kinds differ: the environments keep their full names.
    assert list(summary.mean.columns) == names
    table = summary.by_setting
    assert table.index.names == ["kind", "candidates", "centers", "domain", "kernel", "setting", "function"]
    assert list(table.index) == [
        ("adversarial_kernel", 20, 5, '{"grid":[5,5]}', "se", MISSING, MISSING),
        ("adversarial_kernel", 1000, 100, MISSING, "matern52", 1, MISSING),
        ("synthetic", MISSING, MISSING, MISSING, MISSING, MISSING, "h1"),
        ("synthetic", MISSING, MISSING, MISSING, MISSING, MISSING, "h3"),
    ]
    assert list(table[("random", "regret")]) == ["11.0 ± 1.4", "21.0 ± 1.4", "31.0 ± 1.4", "41.0 ± 1.4"]
    # apg ran on one environment only: its other cells are empty.
    assert table[("apg", "regret")].iloc[0] == "2.0 ± 1.4" and table[("apg", "regret")].iloc[1:].isna().all()

    flat = table.copy()
    flat.columns = [f"{a} {b}" for a, b in flat.columns]
    text = markdown_table(flat)
    assert '| adversarial_kernel | 20 | 5 | {"grid":[5,5]} | se | — | — | 11.0 ± 1.4 | 2.00e-05 | 2.0 ± 1.4 | 1.00e-04 |' in text
    assert "| synthetic | — | — | — | — | — | h3 | 41.0 ± 1.4 | 2.00e-05 | — | — |" in text


def test_setting_table_names_environments_the_settings_cannot_tell_apart():
    """Two environments with the same settings under different labels: the name leads the index."""
    trials = _trials([("random", H1, {}, [(1, 1e-5)]), ("random", H3, {}, [(2, 1e-5)])])
    trials.loc[trials["environment"] == _name(H3), "environment_config"] = trials["environment_config"].iloc[0]
    summary = summarise(trials, ["random"], [_name(H1), _name(H3)])
    table = setting_table(trials, summary.best, ["random"], [_name(H1), _name(H3)])
    assert table.index.names == ["environment"]
    assert list(table.index) == [_name(H1), _name(H3)]


MIXED = {
    "sweep": "mixed",
    "horizon": 20,
    "seeds": 1,
    "log_every": 10,
    "environments": [GRID, SMALL],
    "algorithms": [{"name": "random"}],
}


@pytest.fixture
def mixed(tmp_path, monkeypatch):
    """MIXED's trials finished in this test's results folder (nothing run: what `run` prints and
    `report` writes is read from the store), the spec as mixed.yaml in the working folder."""
    monkeypatch.chdir(tmp_path)
    write_spec_results(tmp_path, MIXED, name="mixed.yaml")
    return tmp_path / "results" / "mixed"


def test_run_prints_the_results_table_of_a_sweep_of_mixed_kinds(mixed, capsys):
    """Regression: a dict-valued setting (``domain``) beside another kind crashed the results table
    that `run` prints at its end (also when nothing was left to run, as here)."""
    assert main(["run", "mixed.yaml", "--no-progress", "--sink", "none"]) == 0
    out = capsys.readouterr().out
    assert "2 finished, 0 failed" in out
    header = next(line for line in out.splitlines() if line.startswith("| algorithm"))
    assert header == f"| algorithm | {_name(GRID)} | {_name(SMALL)} |"
    assert next(line for line in out.splitlines() if line.startswith("| Random |"))   # as the figures name it


def test_the_report_of_a_sweep_of_mixed_kinds_tables_both_kinds_and_no_paper(mixed):
    assert main(["report", "mixed.yaml"]) == 0
    by_setting = (mixed / "report" / "by_setting.md").read_text()
    assert "| adversarial_kernel |" in by_setting and "| synthetic |" in by_setting
    # No environment here is one of a paper's (the kernel paper's are settings 1-4): no vs-paper section.
    assert not (mixed / "report" / "vs_paper.md").exists()


def test_a_report_into_a_new_mlflow_store_shows_the_report_not_mlflows_migrations(mixed, tmp_path):
    """Reported into a new MLflow store (created by the report, which attaches its files there), as
    a user runs it: the terminal shows the report, not MLflow's schema migrations."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "banditsweep", "report", "mixed.yaml", "--mlflow-uri",
                           f"sqlite:///{tmp_path}/fresh.db"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "fresh.db").exists()
    assert "INFO" not in done.stdout + done.stderr and "database tables" not in done.stdout + done.stderr


def _report_store(tmp_path):
    """A store with curves: linucb (no label: shown as LinUCB) at two grid points, a labelled
    NeuralRBMLE-GA and random, two seeds each, on one environment; final regrets known."""
    import numpy as np

    from banditsweep.workers.storage.record import FINISHED, TrialOutcome, TrialRecord
    from banditsweep.workers.storage.store import SweepStore, TrialsTable

    store = SweepStore.for_sweep(tmp_path / "results", "paper_sweep")
    outcomes = []
    cells = [("linucb", "linucb", {"nu": 0.1, "lam": 1.0}, [4.0, 6.0], 2.5e-5),
             ("linucb", "linucb", {"nu": 1.0, "lam": 1.0}, [8.0, 9.0], 2.5e-5),
             ("neural_rbmle_ga", "NeuralRBMLE-GA", {"nu": 1.0}, [2.0, 3.0], 1.5e-2),
             ("random", "random", {}, [20.0, 22.0], 1e-6)]
    for algorithm, label, params, finals, seconds in cells:
        for seed, final in enumerate(finals):
            record = TrialRecord(trial_id=f"{len(outcomes):040d}", sweep="paper_sweep", algorithm=algorithm, label=label,
                                 environment="synthetic:h1", seed=seed, horizon=20, params=params,
                                 environment_config=H1, status=FINISHED, final_regret=final, wall_seconds=1.0,
                                 seconds_per_round=seconds, started_at=1.7e9, finished_at=1.7e9 + 1)
            cum = np.linspace(final / 20, final, 20)
            outcomes.append(TrialOutcome(record, {"arm": np.zeros(20, int), "reward": np.zeros(20),
                                                  "regret": np.diff(cum, prepend=0), "cum_regret": cum,
                                                  "seconds": np.full(20, seconds)}))
    store.write_outcomes(outcomes)
    TrialsTable(store).flush()
    store.compact()
    return store


PAPER_LABELS = ["linucb", "NeuralRBMLE-GA", "random"]


@pytest.fixture(scope="module")
def paper_report(tmp_path_factory):
    """_report_store's trials summarised and reported once for the module's tests below: the summary,
    the report's folder, and what each saved figure showed (its path, legend title and entries, its
    lines' styles and markers, and the dpi it was saved at)."""
    import matplotlib.figure

    from banditsweep.sweeps.results.report import write_report

    store = _report_store(tmp_path_factory.mktemp("paper_report"))
    summary = summarise(store.read_trials(), PAPER_LABELS, ["synthetic:h1"])
    shown = []
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(fig, path, **options):
        (legend,) = fig.legends   # the figure's, outside the axes
        lines = fig.axes[0].get_lines()
        shown.append((str(path), legend.get_title().get_text(), [t.get_text() for t in legend.get_texts()],
                      [(line.get_linestyle(), line.get_marker()) for line in lines], options.get("dpi")))
        return real_savefig(fig, path, **options)

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
        write_report(store, summary, "paper_sweep")
    return types.SimpleNamespace(summary=summary, report=store.report_dir, shown=shown)


def test_the_chosen_grid_point_is_named_by_the_parameters_that_vary(paper_report):
    best = paper_report.summary.best.set_index("label")
    assert best.loc["linucb", "grid_point"] == "nu=0.1"   # lam was fixed
    assert best.loc["NeuralRBMLE-GA", "grid_point"] == ""


def test_report_writes_publication_figures(paper_report):
    """PDF and PNG of each environment; display names, the chosen grid point and what the band is."""
    report, shown = paper_report.report, paper_report.shown
    assert (report / "regret_synthetic_h1.pdf").read_bytes()[:5] == b"%PDF-"
    assert (report / "regret_synthetic_h1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [Path(p).suffix for p, *_ in shown] == [".pdf", ".png"] and shown[1][4] == 200
    _, title, entries, styles, _ = shown[0]
    assert title == "line: mean; band: 95% CI of the mean over 2 seeds"
    assert entries == ["LinUCB (ν = 0.1)", "NeuralRBMLE-GA", "Random"]
    assert len(set(styles)) == 3   # each algorithm its own line style and marker
    figures = (report / "figures.tex").read_text()
    assert r"\includegraphics[width=\linewidth]{regret_synthetic_h1.pdf}" in figures
    assert r"\label{fig:paper-sweep:regret-synthetic-h1}" in figures
    assert r"shaded bands the 95\% confidence interval of the mean (t) over 2 seeds" in figures


def test_report_writes_latex_tables_with_the_best_of_each_column_in_bold(paper_report):
    """Booktabs, a label, display names, the best value of each column in bold."""
    report = paper_report.report
    mean = (report / "final_regret_mean.tex").read_text()
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\label{tab:paper-sweep:final-regret-mean}"):
        assert rule in mean
    # Not bold at 2 seeds: against LinUCB (differences -2 and -3) the paired t-test's p is 0.13.
    assert r"LinUCB & $5.0$ \\" in mean and r"NeuralRBMLE-GA & $2.5$ \\" in mean and r"\mathbf" not in mean
    assert "bold: lower than every other algorithm of its column at 5\\% after Holm's adjustment" in mean
    assert r"Random & $21.0$ \\" in mean and "over 2 seeds" in mean
    both = (report / "final_regret_mean_std.tex").read_text()
    assert r"\label{tab:paper-sweep:final-regret-mean-std}" in both and r"\toprule" in both
    assert r"NeuralRBMLE-GA & $2.5 \pm 0.7$ \\" in both and r"LinUCB & $5.0 \pm 1.4$ \\" in both
    seconds = (report / "seconds_per_round.tex").read_text()
    assert r"LinUCB & $2.50\times10^{-5}$ \\" in seconds and r"NeuralRBMLE-GA & $0.0150$ \\" in seconds
    assert r"Random & $\mathbf{1.00\times10^{-6}}$ \\" in seconds
    assert r"\mathbf" not in (report / "final_regret_std.tex").read_text()
    by_setting = (report / "by_setting.tex").read_text()
    assert r"\label{tab:paper-sweep:by-setting}" in by_setting and r"\midrule" in by_setting
    assert r"LinUCB regret & LinUCB s/round & NeuralRBMLE-GA regret" in by_setting
    assert r"5.0 $\pm$ 1.4 & 2.50e-05 & 2.5 $\pm$ 0.7 & 1.50e-02" in by_setting


def test_report_keeps_the_parquet_results_labels_in_its_csv_tables(paper_report):
    assert list(pd.read_csv(paper_report.report / "final_regret_mean.csv", index_col=0).index) == PAPER_LABELS


REP = {"sweep": "rep", "horizon": 10, "seeds": 2, "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}],
       "algorithms": [{"name": "random"}]}


@pytest.fixture
def reported(tmp_path, monkeypatch, capsys):
    """REP's trials finished (nothing run) and reported once; the report's folder. `report`
    replaces report/ whole each time."""
    monkeypatch.chdir(tmp_path)
    write_spec_results(tmp_path, REP, name="rep.yaml")
    assert main(["report", "rep.yaml"]) == 0
    capsys.readouterr()
    return tmp_path / "results" / "rep" / "report"


def test_report_names_the_entries_it_did_not_write_that_went_with_the_old_folder(reported, capsys):
    (reported / "my_notes.md").write_text("notes")
    assert main(["report", "rep.yaml"]) == 0
    assert "1 of its entries are not part of this report and went with it: my_notes.md" in capsys.readouterr().out
    assert not (reported / "my_notes.md").exists() and (reported / "final_regret_mean.csv").exists()


def test_report_from_python_with_quiet_prints_nothing_and_keeps_the_line_in_its_output(reported, capsys):
    """quiet=True: the same line kept in the result's output (sweeps.events)."""
    import banditsweep

    (reported / "my_notes.md").write_text("notes")
    result = banditsweep.report("rep.yaml", quiet=True)
    assert capsys.readouterr().out == "" and not (reported / "my_notes.md").exists()
    assert "1 of its entries are not part of this report and went with it: my_notes.md" in result.output.text


def test_report_shows_what_the_journal_holds_not_a_trials_table_edited_to_differ(reported, tmp_path):
    """Nor one left behind to differ."""
    mean = (reported / "final_regret_mean.csv").read_text()
    table = tmp_path / "results" / "rep" / "trials" / "trials.parquet"
    edited = pd.read_parquet(table)
    edited["final_regret"] *= 100
    edited.to_parquet(table)
    assert main(["report", "rep.yaml"]) == 0
    assert (reported / "final_regret_mean.csv").read_text() == mean


def test_a_link_in_the_reports_place_is_refused_and_left_as_it_is(reported, tmp_path, capsys):
    """A link (or a file) in report/'s place is refused with exit 2, the link and what it leads to
    left as they are (it would have been replaced by a folder, or crashed the next report)."""
    import os

    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "draft.tex").write_text("draft")
    written = sorted(p.name for p in reported.iterdir())
    os.rename(reported, tmp_path / "old-report")
    reported.symlink_to(paper)
    assert main(["report", "rep.yaml"]) == 2
    err = capsys.readouterr().err
    assert f"error: {reported} is a link to {paper}: the report is written there as a folder of its own" in err
    assert reported.is_symlink() and [p.name for p in paper.iterdir()] == ["draft.tex"]
    assert not (tmp_path / "results" / "rep" / ".report-new").exists()
    reported.unlink()
    assert main(["report", "rep.yaml"]) == 0 and sorted(p.name for p in reported.iterdir()) == written
