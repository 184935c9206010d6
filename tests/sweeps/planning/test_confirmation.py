"""A spec's held-out stage (``confirm:``, sweeps.planning.confirmation): each cell's grid point chosen on the
spec's seeds runs again on fresh seeds in the same ``run``, and every reader (report, ``.statistics``,
``run``'s table) judges on those alone; grid points whose means tie within the stated tolerance go to
the earliest in the spec's grid order, whatever order their trials finished in."""

import contextlib
import dataclasses
import io
import json
import types

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


@pytest.fixture(scope="module")
def held_out(tmp_path_factory, shared_ray_session):
    """SPEC run once from Python (quiet) for the module's tests below, then run again (not quiet),
    reported, verified and compared on its choosing seeds: each step's result, what the quiet steps
    and the second run printed, the trials, and LinUCB's grid point recomputed here."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("held_out")
    seen = types.SimpleNamespace(folder=folder)
    seen.result, seen.printed = _printing(lambda: banditsweep.run(SPEC, results=folder, sinks="none", quiet=True,
                                                                  max_workers=2))
    seen.trials, _ = banditsweep.load(folder, "held_out")
    linucb = seen.trials[seen.trials["label"] == "LinUCB"]
    # The choice, recomputed here: the lowest mean over seeds 0 and 1 (ties to the grid's first).
    choosing = linucb[linucb["seed"] < 2].assign(nu=lambda t: [eval_nu(p) for p in t["params"]])
    means = choosing.groupby("nu", sort=False)["final_regret"].mean().reindex([0.1, 1.0, 3.0])
    seen.chosen = means.index[int(np.argmax(means.values <= means.min() * (1 + CHOICE_RTOL)))]
    seen.fresh = linucb[linucb["seed"] >= 2]
    seen.random_fresh = seen.trials[(seen.trials["label"] == "Random") & (seen.trials["seed"] >= 2)]
    seen.again, seen.again_printed = _printing(lambda: banditsweep.run(SPEC, results=folder, sinks="none"))
    seen.written, seen.written_printed = _printing(lambda: banditsweep.report(
        SPEC, results=folder, mlflow_uri=f"sqlite:///{folder}/m.db", quiet=True))
    seen.checked = banditsweep.verify(SPEC, results=folder, sample=2, seed=1, quiet=True)
    seen.same = banditsweep.compare(folder, "held_out", same_seeds=True)
    return seen


def _printing(call):
    """``call()``'s value, and what it printed (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        value = call()
    return value, (out.getvalue(), err.getvalue())


def test_the_chosen_grid_point_runs_on_fresh_seeds_in_the_same_run(held_out):
    result = held_out.result
    assert result.ok and result.ran == 8 + 2 * 3 and result.total == 14
    assert sorted(held_out.fresh["seed"]) == [2, 3, 4]
    assert {eval_nu(p) for p in held_out.fresh["params"]} == {held_out.chosen}
    assert sorted(held_out.random_fresh["seed"]) == [2, 3, 4]


def test_a_quiet_run_prints_nothing_and_keeps_what_it_said_with_the_stages_line(held_out):
    """Quiet: nothing printed, everything said kept as data (sweeps.events), the stage's line included."""
    result = held_out.result
    assert held_out.printed == ("", "")
    assert any(line.startswith("held-out stage: the chosen grid point of each of the 2 cells") for _, line in
               result.output.lines)
    assert "The grid points were chosen on seeds 0, 1 and are judged on fresh seeds 2, 3, 4" in result.output.notes
    assert result.warnings == []


def test_the_statistics_judge_on_the_fresh_seeds_alone(held_out):
    statistics = held_out.result.statistics
    assert "chosen on seeds 0, 1 and are judged on fresh seeds 2, 3, 4" in statistics.chosen
    cells = statistics.cells.set_index("algorithm")
    assert cells.loc["LinUCB", "n"] == 3 and cells.loc["LinUCB", "grid_point"] == f"nu={held_out.chosen}"
    assert cells.loc["LinUCB", "mean"] == pytest.approx(held_out.fresh["final_regret"].mean(), rel=1e-12)
    assert cells.loc["Random", "mean"] == pytest.approx(held_out.random_fresh["final_regret"].mean(), rel=1e-12)
    pair = statistics.pairs.iloc[0]
    assert pair["n"] == 3 and pair["candidates_a"] == 3 and pair["candidates_b"] == 1


def test_a_second_run_finds_nothing_left_and_shows_what_it_keeps(held_out):
    """Not quiet: shown and kept alike."""
    again = held_out.again
    assert again.ran == 0 and again.finished_before == 14
    assert held_out.again_printed[0].splitlines() == [line for stream, line in again.output.lines if stream == "out"]


def test_the_report_judges_the_store_as_the_run_did_and_says_how(held_out):
    written, folder = held_out.written, held_out.folder
    assert written.exit_code == 0 and held_out.written_printed[0] == ""   # (no MLflow run to attach to: sinks none)
    assert folder / "held_out" / "report" / "pairs.md" in written.files
    pairs = (folder / "held_out" / "report" / "pairs.md").read_text()
    assert "chosen on seeds 0, 1 and are judged on fresh seeds 2, 3, 4" in pairs
    assert written.statistics.cells.equals(held_out.result.statistics.cells)   # one summary behind the files and the result


def test_verify_from_python_reproduces_a_sample_of_the_finished_trials(held_out):
    """Two of the finished trials re-run on today's code reproduce."""
    checked = held_out.checked
    assert checked.ok and checked.reproduced == 2 and len(checked.sample) == 2 and checked.exit_code == 0


def test_same_seeds_judges_on_the_choosing_seeds_alone(held_out):
    """--same-seeds: the fresh ones ran the chosen point only; without the spec, every seed counts."""
    assert held_out.same.cells.set_index("algorithm").loc["LinUCB", "n"] == 5


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
