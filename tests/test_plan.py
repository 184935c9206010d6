"""``banditsweep plan``: a sweep's cost before it runs, checked against the same sweep's measured time."""

import re

import pandas as pd
import yaml

from banditsweep.sweeps.cli import main


def _plan_rows(text: str) -> dict[str, float]:
    """cell -> estimated seconds per round, from the plan's table."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^(.+?\|.+?)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+(?:e[-+]\d+)?)\s", line)
        if match:
            rows[match.group(1).strip()] = float(match.group(4))
    return rows


def test_the_plan_estimates_a_small_sweep_within_3x(tmp_path, monkeypatch, shared_ray, capsys):
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "planned", "horizon": 300, "seeds": 2, "log_every": 50,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 8}],
            "algorithms": [{"name": "linucb", "params": {"nu": 0.1}},
                           {"name": "neural_ucb", "params": {"width": 16, "steps": 10, "nu": 0.1}}],
            "resources": {"cpus_per_trial": 1, "batch_trials": 1}}
    (tmp_path / "planned.yaml").write_text(yaml.safe_dump(spec))
    assert main(["plan", "planned.yaml", "--probe-seconds", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 trials, 1,200 trial-rounds" in out and "on 2 worker(s)" in out
    estimated = _plan_rows(out)
    assert sorted(estimated) == ["linucb | synthetic:h1,dim=8", "neural_ucb | synthetic:h1,dim=8"], out
    assert main(["run", "planned.yaml", "--sink", "none", "--no-progress", "--max-workers", "1"]) == 0
    trials = pd.read_parquet("results/planned/trials")
    measured = trials.groupby(trials["label"].astype(str) + " | " + trials["environment"].astype(str))["seconds_per_round"].mean()
    for cell, seconds in estimated.items():
        # An estimate for planning, from a probe of a second against a run beside Ray on a shared
        # machine: the right order of magnitude is what is checked (LinUCB's round is ~1e-4 s).
        ratio = seconds / measured[cell]
        assert 1 / 3 <= ratio <= 3.0, (cell, seconds, measured[cell])
    # Once trials are in the store, the plan takes their measured cost and leaves them out. (These
    # trials need no GPU, so a cluster of 0 GPUs is a real one.)
    capsys.readouterr()
    assert main(["plan", "planned.yaml", "--gpus", "0"]) == 0
    again = capsys.readouterr().out
    assert "0 trials" in again and "4 trials of the spec are finished" in again


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
