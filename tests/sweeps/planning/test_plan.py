"""``banditsweep plan``: a sweep's cost before it runs, checked against the same sweep's measured time."""

import math
import re

import pandas as pd
import pytest
import yaml
from store_builders import write_spec_results

from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.planning.plan import RAY_START_SECONDS, CellCost, SweepPlan


def _plan_rows(text: str) -> dict[str, float]:
    """cell -> estimated seconds per round, from the plan's table."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^(.+?\|.+?)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+(?:e[-+]\d+)?)\s", line)
        if match:
            rows[match.group(1).strip()] = float(match.group(4))
    return rows


PLANNED = {"sweep": "planned", "horizon": 300, "seeds": 2, "log_every": 50,
           "environments": [{"kind": "synthetic", "function": "h1", "dim": 8}],
           "algorithms": [{"name": "linucb", "params": {"nu": 0.1}},
                          {"name": "neural_ucb", "params": {"width": 16, "steps": 10, "nu": 0.1}}],
           "resources": {"cpus_per_trial": 1, "batch_trials": 1}}


def test_the_plan_estimates_a_small_sweep_within_3x(tmp_path, monkeypatch, shared_ray, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "planned.yaml").write_text(yaml.safe_dump(PLANNED))
    assert main(["plan", "planned.yaml", "--probe-seconds", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 trials, 1,200 trial-rounds" in out and "on 2 worker(s)" in out
    # The wall time is the trials' and Ray's start and stop, which the total names.
    [total] = [line for line in out.splitlines() if line.startswith("4 trials, ")]
    assert f"Ray's start and stop about {RAY_START_SECONDS:.0f} s" in total, total
    # Then what the MLflow mirror will write, and where.
    assert f"MLflow: 4 run(s) per trial, to sqlite:///{tmp_path}/mlflow.db (written in bulk transactions" in out, out
    estimated = _plan_rows(out)
    # The cells by the names the figures and `run`'s table give them.
    assert sorted(estimated) == ["LinUCB | synthetic:h1,dim=8", "NeuralUCB | synthetic:h1,dim=8"], out
    assert main(["run", "planned.yaml", "--sink", "none", "--no-progress", "--max-workers", "1"]) == 0
    ran = capsys.readouterr().out
    [estimate] = [line for line in ran.splitlines() if line.startswith("estimate:")]
    assert re.fullmatch(r"estimate: about \d+ s on 1 worker\(s\): the trials (about \d+ s|under 1 s), Ray's start "
                        r"and stop about 20 s \(`banditsweep plan planned.yaml` for the breakdown\)", estimate), estimate
    trials = pd.read_parquet("results/planned/trials")
    names = {"linucb": "LinUCB", "neural_ucb": "NeuralUCB"}
    measured = trials.groupby(trials["label"].astype(str).map(names) + " | " + trials["environment"].astype(str))["seconds_per_round"].mean()
    for cell, seconds in estimated.items():
        # An estimate for planning, from a probe of a second against a run beside Ray on a shared
        # machine: the right order of magnitude is what is checked (LinUCB's round is ~1e-4 s).
        ratio = seconds / measured[cell]
        assert 1 / 3 <= ratio <= 3.0, (cell, seconds, measured[cell])


def test_once_every_trial_is_finished_plan_and_run_say_there_is_nothing_to_run(tmp_path, monkeypatch, capsys):
    """And where (these trials need no GPU, so a cluster of 0 GPUs is a real one)."""
    monkeypatch.chdir(tmp_path)
    write_spec_results(tmp_path, PLANNED, name="planned.yaml")
    assert main(["plan", "planned.yaml", "--gpus", "0"]) == 0
    again = capsys.readouterr().out
    folder = tmp_path / "results" / "planned"
    assert again.strip() == f"nothing to run: all 4 trials of the spec are already finished in {folder}"
    assert main(["run", "planned.yaml", "--sink", "none", "--no-progress"]) == 0
    assert f"nothing to run: all 4 trials of the spec are already finished in {folder}" in capsys.readouterr().out


def test_the_wall_time_includes_rays_start_and_says_so():
    """A small sweep's wait is mostly Ray's: the plan's wall time adds it, and its total says how much."""
    cells = [CellCost("linucb", "synthetic:h1", 100, 4, 0.2, 1 << 20, 0.0, "probe (100 of 100 rounds)", "linucb")]
    plan = SweepPlan("s", cells, workers=2)
    assert plan.trial_seconds == pytest.approx(0.4) and plan.wall_seconds == pytest.approx(0.4 + RAY_START_SECONDS)
    assert plan.lines()[-1] == ("4 trials, 400 trial-rounds; about 1 s of one core; on 2 worker(s) about 20 s: "
                                "the trials under 1 s, Ray's start and stop about 20 s")
    assert plan.lines()[2].startswith("LinUCB | synthetic:h1 ")
    # A cell not estimated is named as such; the totals say what they cover, never "about 0 s".
    unknown = SweepPlan("s", [CellCost("mine", "synthetic:h1", 100, 4, math.nan, 1 << 20, 0.0,
                                       "not probed (not one of banditsweep's algorithms: `plan` probes it)", "mine")])
    assert unknown.lines()[-1] == ("4 trials, 400 trial-rounds; the trials' time is not estimated (1 cell(s) not "
                                   "estimated, see source); Ray's start and stop about 20 s")
    both = SweepPlan("s", cells + unknown.cells, workers=2)
    assert "about 0 s" not in both.lines()[-1] and "(1 cell(s) not estimated, left out)" in both.lines()[-1]


def test_code_without_git_is_named_by_its_sources_digest(tmp_path):
    """A Ray job's upload has no .git: the run records a digest of the package's sources, the same
    for the same tree wherever it lies, another for changed code."""
    import shutil
    from pathlib import Path

    import banditsweep
    from banditsweep.workers.provenance.runtime import source_commit as _source_commit

    package = Path(banditsweep.__file__).resolve().parent
    first, second = tmp_path / "a" / "banditsweep", tmp_path / "b" / "banditsweep"
    for copy in (first, second):
        shutil.copytree(package / "core", copy / "core", ignore=shutil.ignore_patterns("__pycache__"))
    named = _source_commit(first)
    assert "source sha256:" in named and "(no git)" in named and named == _source_commit(second)
    trial = second / "core" / "engine" / "trial.py"
    trial.write_text(trial.read_text() + "\n# changed\n")
    assert _source_commit(second) != named
