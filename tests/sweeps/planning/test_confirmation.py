"""A spec's held-out stage (``confirm:``, sweeps.planning.confirmation): each cell's grid point chosen on the
spec's seeds runs again on fresh seeds in the same ``run``, and every reader (report, ``.statistics``,
``run``'s table) judges on those alone; grid points whose means tie within the stated tolerance go to
the earliest in the spec's grid order, whatever order their trials finished in."""

import dataclasses
import json

import numpy as np
import pytest

import banditsweep
from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.cli.commands.shared import record_of
from banditsweep.sweeps.results.report import CHOICE_RTOL, finished_trials, judged_summary, recorded_trials
from banditsweep.sweeps.spec.model import parse_sweep
from banditsweep.sweeps.spec.errors import SpecError
from banditsweep.workers import FINISHED, SweepStore, TrialOutcome

SPEC = {
    "sweep": "held_out", "horizon": 40, "seeds": 2, "confirm": {"seeds": 3},
    "environments": [{"kind": "synthetic", "function": "h1"}],
    "algorithms": [{"name": "linucb", "grid": {"nu": [0.1, 1.0, 3.0]}, "label": "LinUCB"},
                   {"name": "random", "label": "Random"}],
}


def test_the_chosen_grid_point_runs_on_fresh_seeds_and_is_judged_there(tmp_path, capsys):
    result = banditsweep.run(SPEC, results=tmp_path, sinks="none", quiet=True, max_workers=2)
    assert result.ok and result.ran == 8 + 2 * 3 and result.total == 14
    # Quiet: nothing printed, everything said kept as data (sweeps.events), the stage's line included.
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == ""
    assert any(line.startswith("held-out stage: the chosen grid point of each of the 2 cells") for _, line in
               result.output.lines)
    assert "The grid points were chosen on seeds 0, 1 and are judged on fresh seeds 2, 3, 4" in result.output.notes
    assert result.warnings == []
    trials, _ = banditsweep.load(tmp_path, "held_out")
    linucb = trials[trials["label"] == "LinUCB"]
    # The choice, recomputed here: the lowest mean over seeds 0 and 1 (ties to the grid's first).
    choosing = linucb[linucb["seed"] < 2].assign(nu=lambda t: [eval_nu(p) for p in t["params"]])
    means = choosing.groupby("nu", sort=False)["final_regret"].mean().reindex([0.1, 1.0, 3.0])
    chosen = means.index[int(np.argmax(means.values <= means.min() * (1 + CHOICE_RTOL)))]
    fresh = linucb[linucb["seed"] >= 2]
    assert sorted(fresh["seed"]) == [2, 3, 4]
    assert {eval_nu(p) for p in fresh["params"]} == {chosen}
    random_fresh = trials[(trials["label"] == "Random") & (trials["seed"] >= 2)]
    assert sorted(random_fresh["seed"]) == [2, 3, 4]

    statistics = result.statistics
    assert "chosen on seeds 0, 1 and are judged on fresh seeds 2, 3, 4" in statistics.chosen
    cells = statistics.cells.set_index("algorithm")
    assert cells.loc["LinUCB", "n"] == 3 and cells.loc["LinUCB", "grid_point"] == f"nu={chosen}"
    assert cells.loc["LinUCB", "mean"] == pytest.approx(fresh["final_regret"].mean(), rel=1e-12)
    assert cells.loc["Random", "mean"] == pytest.approx(random_fresh["final_regret"].mean(), rel=1e-12)
    pair = statistics.pairs.iloc[0]
    assert pair["n"] == 3 and pair["candidates_a"] == 3 and pair["candidates_b"] == 1

    # Run again: nothing left; the report judges the same store the same way, and says how.
    again = banditsweep.run(SPEC, results=tmp_path, sinks="none")   # not quiet: shown and kept alike
    assert again.ran == 0 and again.finished_before == 14
    shown = capsys.readouterr().out
    assert shown.splitlines() == [line for stream, line in again.output.lines if stream == "out"]
    written = banditsweep.report(SPEC, results=tmp_path, mlflow_uri=f"sqlite:///{tmp_path}/m.db", quiet=True)
    assert written.exit_code == 0 and capsys.readouterr().out == ""   # (no MLflow run to attach to: sinks none)
    assert tmp_path / "held_out" / "report" / "pairs.md" in written.files
    pairs = (tmp_path / "held_out" / "report" / "pairs.md").read_text()
    assert "chosen on seeds 0, 1 and are judged on fresh seeds 2, 3, 4" in pairs
    assert written.statistics.cells.equals(statistics.cells)   # one summary behind the files and the result
    # verify from Python: two of the finished trials re-run on today's code reproduce.
    checked = banditsweep.verify(SPEC, results=tmp_path, sample=2, seed=1, quiet=True)
    assert checked.ok and checked.reproduced == 2 and len(checked.sample) == 2 and checked.exit_code == 0
    # --same-seeds judges on the choosing seeds alone (the fresh ones ran the chosen point only).
    same = banditsweep.compare(tmp_path, "held_out", same_seeds=True)
    assert same.cells.set_index("algorithm").loc["LinUCB", "n"] == 5   # without the spec: every seed


def test_the_confirming_seeds_must_be_fresh(tmp_path, capsys):
    with pytest.raises(SpecError, match=r"confirm\.seeds: seed 1 is also one of `seeds`"):
        parse_sweep({**SPEC, "confirm": {"seeds": [1, 5]}})
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(banditsweep_yaml({**SPEC, "confirm": {"seeds": [7, 8]}}))
    assert main(["plan", str(spec_file), "--results", str(tmp_path), "--set", "seeds=[0,7]"]) == 2
    assert "seed 7 is also one of `seeds`" in capsys.readouterr().err
    assert main(["plan", str(spec_file), "--results", str(tmp_path), "--set", "confirm.seeds=2"]) == 0
    out = capsys.readouterr().out
    assert "0 of 2 cells chosen so far" in out and "fresh seeds 2, 3" in out
    assert not (tmp_path / "held_out").exists()


def test_tied_grid_points_go_to_the_earliest_in_the_grid_whatever_order_they_finished_in(tmp_path):
    spec = {**SPEC, "confirm": None, "seeds": 2}
    sweep = parse_sweep({k: v for k, v in spec.items() if v is not None})
    store = SweepStore.for_sweep(tmp_path, "held_out")
    # nu = 3.0 a hair lower than nu = 0.1 (1e-12 relative: another CPU's rounding), nu = 1.0 clearly worse;
    # written to the journal last grid point first.
    finals = {0.1: [10.0, 20.0], 1.0: [30.0, 30.0], 3.0: [20.0, 10.0 * (1 - 1e-12)]}
    outcomes = []
    for trial in reversed(sweep.trials):
        if trial.label != "LinUCB":
            continue
        final = finals[trial.spec.params["nu"]][trial.spec.seed]
        record = dataclasses.replace(record_of(sweep, trial), status=FINISHED, final_regret=final,
                                     wall_seconds=1.0, seconds_per_round=1e-3)
        cum = np.linspace(final / 40, final, 40)
        outcomes.append(TrialOutcome(record, {"arm": np.zeros(40, int), "reward": np.zeros(40),
                                              "regret": np.diff(cum, prepend=0), "cum_regret": cum,
                                              "seconds": np.full(40, 1e-3)}))
    store.write_outcomes(outcomes)
    recorded = recorded_trials(store)
    environment = recorded["environment"].iloc[0]
    for order in (recorded, recorded.iloc[::-1], recorded.sample(frac=1.0, random_state=3)):
        trials = finished_trials(order, sweep.trials)
        summary, how = judged_summary(trials, ["LinUCB"], [environment], same_seeds=True)
        assert how == "same" and summary.best.iloc[0]["grid_point"] == "nu=0.1"
    # Beyond the tolerance the lower mean wins.
    assert CHOICE_RTOL < 1e-6
    lower = trials.assign(final_regret=np.where(trials["params"].str.contains('"nu": 3.0'),
                                                trials["final_regret"] * (1 - 1e-6), trials["final_regret"]))
    summary, _ = judged_summary(lower, ["LinUCB"], [environment], same_seeds=True)
    assert summary.best.iloc[0]["grid_point"] == "nu=3.0"


def eval_nu(params: str) -> float:
    return float(json.loads(params)["nu"])


def banditsweep_yaml(spec: dict) -> str:
    import yaml

    return yaml.safe_dump(spec, sort_keys=False)
