"""``--only``: a big spec cut down on the command line, by algorithm, environment, seed, setting or
parameter; the selected trials keep their ids, so a later run of the whole spec reuses them."""

import re
import shlex
import subprocess
import sys

import pandas as pd
import pytest

from banditsweep.sweeps.cli.main import main

TABLE3 = "sweeps/kernel_exp3/table3.yaml"


def _status_line(out: str) -> str:
    return next(line for line in out.splitlines() if " trials" in line and "pending" in line)


def test_only_selects_by_setting_algorithm_and_parameter(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert main(["status", TABLE3]) == 0
    assert "kernel_table3: 480 trials" in _status_line(capsys.readouterr().out)
    assert main(["status", TABLE3, "--set", "seeds=2", "--only", "setting=1,2"]) == 0
    out = capsys.readouterr().out
    assert "48 trials (selected by --only setting=1,2): 0 done, 0 failed, 48 pending" in _status_line(out)
    assert "setting=3" not in out and "setting=1,kernel=se" in out
    # Two keys must both hold; two values of one key are alternatives; names, labels and wildcards match.
    assert main(["status", TABLE3, "--only", "algorithm=random,APG-Exp3", "--only", "kernel=se",
                 "--only", "seed=0"]) == 0
    out = capsys.readouterr().out
    assert "8 trials" in _status_line(out)   # 2 algorithms x 4 settings x 1 kernel x 1 seed
    assert set(re.findall(r"^\| (Random|APG-Exp3|Kernelized Exp3|RLS-Kernelized Exp3) ", out, re.M)) == {
        "Random", "APG-Exp3"}
    assert main(["status", TABLE3, "--only", "algorithm=*rls*", "--only", "setting=1", "--only", "seed=0,1"]) == 0
    assert "6 trials" in _status_line(capsys.readouterr().out)   # 3 kernels x 2 seeds


def test_only_by_number_and_dataset(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    spec = "sweeps/neural_rbmle/sensitivity_baselines.yaml"
    assert main(["status", spec, "--only", "nu=1e-5", "--only", "env=mushroom"]) == 0
    # NeuralUCB x2, NeuralTS x2, DeepFPL x2 (a grid over training), LinRBMLE: 7 cells x 3 seeds.
    assert "21 trials" in _status_line(capsys.readouterr().out)


@pytest.mark.parametrize("selector, message", [
    ("settng=1", "error: --only: settng: no trial of the sweep has this key (did you mean 'setting'?)"),
    ("setting=5", "error: --only: setting=5: matches no trial; the sweep's values: 1, 2, 3, 4"),
    ("algorithm=linucb", "error: --only: algorithm=linucb: matches no trial; the sweep's values: random, apg_exp3, APG-Exp3"),
    ("setting", "error: --only: 'setting': expected key=value[,value...]"),
    ("setting=,", "error: --only: 'setting=,': expected key=value[,value...]"),
    ("setting=1,", "error: --only: 'setting=1,': an empty value between commas"),
    ("seed=0,,1", "error: --only: 'seed=0,,1': an empty value between commas"),
])
def test_a_selector_that_selects_nothing_is_refused(repo, tmp_path, monkeypatch, capsys, selector, message):
    monkeypatch.chdir(repo)
    results = tmp_path / "results"
    assert main(["run", TABLE3, "--results", str(results), "--sink", "none", "--only", selector]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not results.exists()


def test_selectors_that_exclude_each_other_are_refused(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert main(["status", "sweeps/quickstart.yaml", "--only", "algorithm=random", "--only", "nu=0.1"]) == 2
    assert "no trial matches all of them" in capsys.readouterr().err


def test_selected_trials_are_the_whole_specs_trials(tmp_path, monkeypatch, capsys, shared_ray):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cut.yaml").write_text(
        "sweep: cut\nhorizon: 20\nseeds: 2\n"
        "environments: [{kind: synthetic, function: h1, dim: 4}, {kind: synthetic, function: h3, dim: 4}]\n"
        "algorithms: [{name: random}, {name: linucb, grid: {nu: [0.1, 1.0]}}]\n")
    assert main(["run", "cut.yaml", "--sink", "none", "--no-progress", "--only", "nu=0.1",
                 "--only", "function=h1"]) == 0
    out = capsys.readouterr().out
    assert "cut: 2 trials (selected by --only nu=0.1 --only function=h1), 0 finished" in out
    assert "--only nu=0.1 --only function=h1`" in out   # the `next:` hint repeats the selection
    trials = pd.read_parquet("results/cut/trials")
    assert len(trials) == 2 and set(trials["nu"]) == {0.1} and set(trials["env_function"]) == {"h1"}
    # The whole spec then runs only what the selection left out.
    assert main(["run", "cut.yaml", "--sink", "none", "--no-progress"]) == 0
    assert "cut: 12 trials, 2 finished, 0 failed, 10 to run" in capsys.readouterr().out
    assert len(pd.read_parquet("results/cut/trials")) == 12


@pytest.mark.slow
def test_the_docs_shrink_example_finishes_in_minutes(repo, tmp_path):
    """docs/specs.md's cut of Table 3 as written (its results root and MLflow store moved to a temporary folder)."""
    page = (repo / "docs" / "specs.md").read_text()
    line = next(line for line in page.splitlines() if "table3.yaml" in line and "--only" in line
                and line.startswith(".venv/bin/banditsweep run"))
    command = [sys.executable, "-m", "banditsweep", *shlex.split(line)[1:], "--no-progress"]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=1800,
                          env={**__import__("os").environ, "BANDITSWEEP_RESULTS": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "48 finished, 0 failed" in done.stdout
    trials = pd.read_parquet(tmp_path / "kernel_table3" / "trials")
    assert len(trials) == 48 and set(trials["env_setting"]) == {1, 2} and set(trials["horizon"]) == {100}
