"""The report's comparisons on a small constructed result (two classification bandits, three
algorithms, six seeds, final regrets known): bold only where a cell is significantly below every
other of its column after Holm's adjustment, the aggregates across environments (IQM of regret
normalised by the random policy's T (1 - 1/K), probability of improvement, performance profile),
grid points chosen on some seeds and judged on the others, the figures' bands, and the same numbers
from Python (``banditsweep.compare``)."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import banditsweep
from banditsweep.core.engine.trial import environment_label
from banditsweep.sweeps.publishing.figures import band_half_width
from banditsweep.sweeps.results.report import recorded_trials, summarise, summarise_held_out, write_report
from banditsweep.workers import InputError

MUSHROOM = {"kind": "classification", "dataset": "mushroom"}   # K = 2: the random policy's regret T / 2
SHUTTLE = {"kind": "classification", "dataset": "shuttle"}     # K = 7: T 6/7
HORIZON = 100
A_MUSHROOM = [10.0, 12.0, 11.0, 13.0, 9.0, 12.0]
A_SHUTTLE = [20.0, 22.0, 21.0, 23.0, 19.0, 22.0]
WORSE = [8.0, 9.0, 10.0, 11.0, 9.0, 10.0]
FINALS = {  # (label, environment, params) -> final regret per seed 0..5
    ("A", "mushroom", (("nu", 0.1),)): A_MUSHROOM,
    ("A", "mushroom", (("nu", 1.0),)): [5.0, 5.0, 5.0, 30.0, 30.0, 30.0],   # best on seeds 0-2 only
    ("B", "mushroom", ()): [a + w for a, w in zip(A_MUSHROOM, WORSE)],
    ("C", "mushroom", ()): [a + d for a, d in zip(A_MUSHROOM, [1.0, -1.0, 0.5, -0.5, 1.0, -1.5])],  # a tie, nearly
    ("A", "shuttle", (("nu", 0.1),)): A_SHUTTLE,
    ("B", "shuttle", ()): [a + w for a, w in zip(A_SHUTTLE, WORSE)],
    ("C", "shuttle", ()): [a + d for a, d in zip(A_SHUTTLE, [5.0, 6.0, 4.0, 5.0, 6.0, 5.0])],
}
ENVIRONMENTS = {"mushroom": MUSHROOM, "shuttle": SHUTTLE}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from banditsweep.workers import FINISHED, SweepStore, TrialOutcome, TrialRecord

    store = SweepStore.for_sweep(tmp_path_factory.mktemp("results"), "compared")
    outcomes = []
    for (label, env, params), finals in FINALS.items():
        for seed, final in enumerate(finals):
            record = TrialRecord(trial_id=f"{len(outcomes):040d}", sweep="compared", algorithm=label.lower(),
                                 label=label, environment=environment_label(ENVIRONMENTS[env]), seed=seed,
                                 horizon=HORIZON, params=dict(params), environment_config=ENVIRONMENTS[env],
                                 status=FINISHED, final_regret=final, wall_seconds=1.0, seconds_per_round=1e-3,
                                 started_at=1.7e9, finished_at=1.7e9 + 1)
            cum = np.linspace(final / HORIZON, final, HORIZON)
            outcomes.append(TrialOutcome(record, {"arm": np.zeros(HORIZON, int), "reward": np.zeros(HORIZON),
                                                  "regret": np.diff(cum, prepend=0), "cum_regret": cum,
                                                  "seconds": np.full(HORIZON, 1e-3)}))
    store.write_outcomes(outcomes)
    store.compact()
    return store


def _summary(store):
    trials = recorded_trials(store)
    return summarise(trials, ["A", "B", "C"], [environment_label(MUSHROOM), environment_label(SHUTTLE)])


def test_bold_only_where_significantly_below_every_other_of_its_column(store):
    summary = _summary(store)
    write_report(store, summary, "compared", echo=None)
    pairs = pd.read_csv(store.report_dir / "pairs.csv")
    shuttle = pairs[pairs["environment"] == "shuttle"].set_index(["a", "b"])
    test = stats.ttest_rel(A_SHUTTLE, FINALS[("C", "shuttle", ())])
    assert shuttle.loc[("A", "C"), "p"] == pytest.approx(test.pvalue)
    assert shuttle.loc[("A", "C"), "verdict"] == "A lower"
    mushroom = pairs[pairs["environment"] == "mushroom"].set_index(["a", "b"])
    assert mushroom.loc[("A", "C"), "verdict"].startswith("cannot be told apart at n = 6 (at least ")
    mean = (store.report_dir / "final_regret_mean.md").read_text()
    # C has the lowest mean on Mushroom (11.08 against A's 11.17) but is not told apart from A: no bold there.
    assert "**11.1**" not in mean and "| 11.1 " in mean
    assert "**21.2**" in mean   # A on Shuttle
    assert "after Holm's adjustment over the column's pairs" in mean and "6 seeds" in mean
    latex = (store.report_dir / "final_regret_mean.tex").read_text()
    assert latex.count(r"\mathbf") == 1 and r"$\mathbf{21.2}$" in latex


def test_across_environments_normalised_by_the_random_policy(store):
    summary = _summary(store)
    write_report(store, summary, "compared", echo=None)
    iqm = pd.read_csv(store.report_dir / "across_environments.csv").set_index("algorithm")
    runs = np.concatenate([np.array(A_MUSHROOM) / (HORIZON / 2), np.array(A_SHUTTLE) / (HORIZON * 6 / 7)])
    assert iqm.loc["A", "iqm"] == pytest.approx(stats.trim_mean(runs, 0.25))
    assert iqm.loc["A", "runs"] == 12 and iqm.loc["A", "environments"] == 2
    # 6 runs per environment: fewer than the interval was measured to cover at (sweeps.analysis.statistics).
    assert iqm["ci_low"].isna().all() and iqm.loc["A", "interval"].startswith("too few runs for an interval")
    assert "Two intervals that do not overlap are no test" in (store.report_dir / "across_environments.md").read_text()
    improvement = pd.read_csv(store.report_dir / "improvement.csv", index_col=0)
    assert improvement.loc["A", "B"] == 1.0 and improvement.loc["B", "A"] == 0.0
    # A against C: Shuttle 1 (every run of A below every run of C); Mushroom counted pair by pair.
    a, c = np.array(A_MUSHROOM), np.array(FINALS[("C", "mushroom", ())])
    mushroom = (a[:, None] < c[None, :]).mean() + (a[:, None] == c[None, :]).mean() / 2
    assert improvement.loc["A", "C"] == pytest.approx((mushroom + 1.0) / 2)
    text = (store.report_dir / "across_environments.md").read_text()
    assert "T (1 - 1/K)" in text and "| 50.0 |" in text and "| 85.7 |" in text
    assert (store.report_dir / "performance_profile.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r"\label{fig:compared:performance-profile}" in (store.report_dir / "performance_profile.tex").read_text()


def test_grid_points_chosen_on_some_seeds_are_judged_on_the_others(store):
    trials = recorded_trials(store)
    envs = [environment_label(MUSHROOM), environment_label(SHUTTLE)]
    full = summarise(trials, ["A", "B", "C"], envs).best.set_index(["label", "environment"])
    assert full.loc[("A", envs[0]), "grid_point"] == "nu=0.1"
    held_out = summarise_held_out(trials, ["A", "B", "C"], envs, 3)
    best = held_out.best.set_index(["label", "environment"])
    assert best.loc[("A", envs[0]), "grid_point"] == "nu=1.0"     # 5 on seeds 0-2 ...
    assert best.loc[("A", envs[0]), "mean"] == 30.0                # ... and 30 on seeds 3-5
    assert best.loc[("A", envs[0]), "seeds"] == 3
    assert held_out.chosen == "The grid points were chosen on seeds 0, 1, 2 and are judged on seeds 3, 4, 5"
    with pytest.raises(InputError, match="--choose-on-seeds 6: the sweep's finished trials have 6 seeds"):
        summarise_held_out(trials, ["A", "B", "C"], envs, 6)


def test_figure_bands_are_the_interval_of_the_mean_unless_asked(store):
    matrix = pd.DataFrame({seed: np.linspace(0, final, 5) for seed, final in enumerate(A_SHUTTLE)})
    half = band_half_width(matrix)
    assert half.iloc[-1] == pytest.approx(stats.t.ppf(0.975, 5) * np.std(A_SHUTTLE, ddof=1) / np.sqrt(6))
    assert band_half_width(matrix, "std").iloc[-1] == pytest.approx(np.std(A_SHUTTLE, ddof=1))
    assert (band_half_width(matrix[[0]]) == 0).all()   # one seed: no band
    summary = _summary(store)
    write_report(store, summary, "compared", echo=None, band="std")
    assert "band: ±1 std over 6 seeds" in (store.report_dir / "figures.md").read_text()
    write_report(store, summary, "compared", echo=None)
    assert "band: 95% CI of the mean over 6 seeds" in (store.report_dir / "figures.md").read_text()
    assert "95\\% confidence interval of the mean (t)" in (store.report_dir / "figures.tex").read_text()


def test_the_same_statistics_from_python(store):
    result = banditsweep.compare(store.root.parent, "compared", same_seeds=True)
    cells = result.cells.set_index(["algorithm", "environment"])
    a = cells.loc[("A", environment_label(SHUTTLE))]
    half = stats.t.ppf(0.975, 5) * np.std(A_SHUTTLE, ddof=1) / np.sqrt(6)
    assert a["n"] == 6 and a["ci_method"] == "t"
    assert (a["ci_low"], a["ci_high"]) == pytest.approx((np.mean(A_SHUTTLE) - half, np.mean(A_SHUTTLE) + half))
    assert len(result.pairs) == 6 and set(result.pairs["test"]) == {"paired t"}
    assert list(result.across.iqm["algorithm"]) == ["A", "B", "C"]
    held_out = banditsweep.compare(store.root, choose_on_seeds=3)
    assert held_out.cells.set_index(["algorithm", "environment"]).loc[("A", environment_label(MUSHROOM)), "mean"] == 30
    # By default (6 seeds, a grid) the same: half the seeds choose, the others judge.
    default = banditsweep.compare(store.root)
    assert default.chosen == held_out.chosen and default.cells.equals(held_out.cells)
    # The project's error (bad input, exit 2 on the command line), still a FileNotFoundError, naming
    # the sweeps the root does hold.
    with pytest.raises(InputError, match="no sweep results here.*holds the sweeps compared") as raised:
        banditsweep.compare(store.root.parent, "nothing")
    assert isinstance(raised.value, FileNotFoundError)
    with pytest.raises(InputError, match="no sweep results here"):
        banditsweep.load(store.root.parent, "nothing")
    assert json.loads(json.dumps(result.chosen))   # a sentence, for a caption


def test_held_out_by_default_where_the_same_seed_choice_is_optimistic(tmp_path):
    """A constructed store: algorithm G chooses among 8 grid points whose true regrets are all 10 (its
    best on some seeds is luck), algorithm F has one configuration at 9.5. Judged on the seeds it was
    chosen on, G's chosen point looks better than it is; by default the report chooses on half the
    seeds and judges on the others, which shows the optimism."""
    from banditsweep.sweeps.results.compare import statistics_of

    rng = np.random.default_rng(11)
    rows = []
    seeds = range(8)
    for point in range(8):
        for seed in seeds:
            rows.append({"label": "G", "environment": "env", "params": f'{{"lr": {point}}}', "seed": seed,
                         "final_regret": 10.0 + float(rng.normal(0, 2)), "trial_id": f"g{point}-{seed}"})
    for seed in seeds:
        rows.append({"label": "F", "environment": "env", "params": "{}", "seed": seed,
                     "final_regret": 9.5 + float(rng.normal(0, 0.1)), "trial_id": f"f-{seed}"})
    trials = pd.DataFrame(rows).assign(status="finished", seconds_per_round=0.01, algorithm=lambda f: f["label"],
                                       horizon=100, diagnostics="{}", environment_config="{}")
    same = statistics_of(trials, same_seeds=True)
    held = statistics_of(trials)
    g_same = same.cells.set_index("algorithm").loc["G", "mean"]
    g_held = held.cells.set_index("algorithm").loc["G", "mean"]
    assert g_same < g_held   # chosen and judged on the same seeds: the luck of the choice is counted
    assert held.chosen.startswith("The grid points were chosen on seeds 0, 1, 2, 3 and are judged on seeds 4, 5, 6, 7")
    assert "optimistic" in same.chosen
    pair = held.pairs.iloc[0]
    assert {pair["candidates_a"], pair["candidates_b"]} == {8, 1}


def test_an_algorithm_is_drawn_alike_in_every_figure_of_a_report(store, monkeypatch):
    """The regret figures and the performance profile give each algorithm one colour, line style and
    marker, also where the across-environment scores list the algorithms in another order."""
    import matplotlib.axes

    drawn = []
    plot = matplotlib.axes.Axes.plot

    def spy(self, *args, **kwargs):
        if kwargs.get("label"):
            drawn.append((kwargs["label"].split(" (")[0], str(kwargs.get("color")), str(kwargs.get("linestyle")),
                          kwargs.get("marker")))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    trials = recorded_trials(store)
    summary = summarise(trials, ["C", "A", "B"], [environment_label(MUSHROOM), environment_label(SHUTTLE)])
    assert summary.across is not None and list(summary.across.scores) != list(summary.mean.index)
    write_report(store, summary, "compared", echo=None)
    styles: dict[str, set] = {}
    for label, *style in drawn:
        styles.setdefault(label, set()).add(tuple(style))
    assert set(styles) == {"A", "B", "C"}
    assert all(len(found) == 1 for found in styles.values()), styles
    assert len({next(iter(found)) for found in styles.values()}) == 3
