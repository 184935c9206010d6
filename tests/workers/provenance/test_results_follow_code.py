"""Results that follow the code, through the CLI: a researcher runs a sweep, changes an algorithm in
a copy of the package (what an edited checkout is) and runs again. The changed algorithm's trials
never hide behind their old numbers; the others are untouched; `verify` re-runs a sample and names
what differs; `verify --accept` re-stamps trials after a change that moves no number."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from paths import REPO

# Each test starts an embedded Ray several times (about 2.5 minutes in all): in the slow set.
pytestmark = pytest.mark.slow

SPEC = """\
sweep: codechg
horizon: 30
seeds: 2
environments:
  - {kind: synthetic, function: h1}
algorithms:
  - {name: linucb, label: LinUCB}
  - {name: lints, label: LinTS}
  - {name: random, label: Random}
log_every: 10
"""
LINUCB_INDEX = "        return mean + self.params.nu * np.sqrt(np.maximum(variance, 0.0))"


def _tree(tmp_path: Path) -> Path:
    """A copy of the package as an edited checkout would hold it, importable as ``banditsweep``."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO, tree / "banditsweep", ignore=shutil.ignore_patterns(
        ".venv", ".git", "tests", "docs", "benchmarks", "__pycache__", "*.egg-info", "test-artifacts"))
    return tree


def _cli(tree: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("BANDITSWEEP_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "banditsweep", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def _trials(results: Path) -> pd.DataFrame:
    frame = pd.read_parquet(results / "codechg" / "trials")
    return frame.set_index("trial_id")


@pytest.fixture
def sweep(tmp_path):
    tree = _tree(tmp_path)
    (tmp_path / "spec.yaml").write_text(SPEC)
    results = tmp_path / "results"
    done = _cli(tree, "run", "spec.yaml", "--results", str(results), "--sink", "none", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tree, tmp_path, results


def test_a_changed_algorithm_never_hides_behind_its_old_numbers(sweep):
    tree, cwd, results = sweep
    common = ("spec.yaml", "--results", str(results))
    before = _trials(results)
    assert before["code_digest"].notna().all() and (before["runtime_cpu"] != "").all()
    linear = tree / "banditsweep" / "core" / "baselines" / "linear.py"

    # Comments and docstrings change no number: nothing is flagged.
    _edit(linear, '    """LinUCB (Li et al. 2010): ridge estimate plus nu sqrt(x^T V^-1 x)."""',
          '    """LinUCB (Li et al. 2010), reworded."""\n    # a new comment')
    status = _cli(tree, "status", *common, cwd=cwd)
    assert status.returncode == 0 and "other code" not in status.stdout, status.stdout

    # LinUCB's index changed (the exploration term's sign): its trials are flagged, LinTS's and
    # Random's (LinTS shares linear.py) are not.
    _edit(linear, LINUCB_INDEX, LINUCB_INDEX.replace("mean + ", "mean - "))
    status = _cli(tree, "status", *common, cwd=cwd)
    assert status.returncode == 0, status.stderr
    assert "| LinUCB | synthetic:h1 | 0 | 0 | 0 | 2 |" in status.stdout, status.stdout
    assert "| LinTS | synthetic:h1 | 2 | 0 | 0 | 0 |" in status.stdout
    assert "2 finished trial(s) were computed by other code (core/baselines/linear.py changed)" in status.stdout
    plan = _cli(tree, "plan", *common, "--probe-seconds", "0.1", cwd=cwd)
    assert "re-running them is about" in plan.stdout, plan.stdout

    # Kept on request: the report marks the cell and names the module; a new seed of the same cell
    # computed by today's code makes it a cell of two code versions.
    kept = _cli(tree, "run", *common, "--set", "seeds=3", "--keep-changed", "--sink", "none", "--no-progress", cwd=cwd)
    assert kept.returncode == 0, kept.stderr
    assert "kept (--keep-changed)" in kept.stdout
    report = _cli(tree, "report", *common, "--set", "seeds=3", cwd=cwd)
    assert report.returncode == 0, report.stderr
    table = (results / "codechg" / "report" / "final_regret_mean.md").read_text()
    assert "†‡ |" in table.splitlines()[[i for i, line in enumerate(table.splitlines()) if "LinUCB" in line][0]]
    assert "† its trials were computed by more than one code version" in table
    # The same mark wherever the cell's numbers are read: every table, pair, figure legend and caption.
    folder = results / "codechg" / "report"
    for name, mark in [("final_regret_ci.md", "†‡"), ("final_regret_ci.csv", "†‡"), ("best_params.csv", "†‡"),
                       ("final_regret_ci.tex", r"$^\dagger$$^\ddagger$"), ("best_params.tex", r"$^\dagger$$^\ddagger$"),
                       ("by_setting.md", "LinUCB†‡"), ("by_setting.tex", r"LinUCB$^\dagger$$^\ddagger$"),
                       ("pairs.md", "a †‡"), ("pairs.csv", "a †‡"), ("figures.md", "LinUCB†‡"),
                       ("figures.tex", r"LinUCB$^\dagger$$^\ddagger$")]:
        text = (folder / name).read_text()
        assert mark in text, (name, text[:600])
        if not name.endswith(".csv"):
            assert "computed by more than one code version" in text, name
    assert "†" not in (folder / "pairs.csv").read_text().split("LinTS,Random")[-1].splitlines()[0]
    code = (results / "codechg" / "report" / "code.md").read_text()
    assert "LinUCB | synthetic:h1: 2 of its 3 trials were computed by other code than today's " \
           "(core/baselines/linear.py changed since)" in code
    assert "| LinTS" in table and "LinTS | synthetic:h1" not in code

    # By default a run computes them again, and only them.
    rerun = _cli(tree, "run", *common, "--set", "seeds=3", "--sink", "none", "--no-progress", cwd=cwd)
    assert rerun.returncode == 0, rerun.stderr
    assert "2 finished trial(s) were computed by other code (core/baselines/linear.py changed)" in rerun.stdout
    assert "2 finished, 0 failed" in rerun.stdout
    after = _trials(results)
    linucb = before.index[before["label"] == "LinUCB"]
    others = before.index[before["label"] != "LinUCB"]
    assert (after.loc[linucb, "final_regret"] != before.loc[linucb, "final_regret"]).all()
    pd.testing.assert_series_equal(after.loc[others, "final_regret"], before.loc[others, "final_regret"])
    pd.testing.assert_series_equal(after.loc[others, "finished_at"], before.loc[others, "finished_at"])

    # A refactor that moves no number: verify re-runs a sample, --accept re-stamps the trials.
    _edit(linear, "mean, variance = self.stats.mean_and_variance(contexts)",
          "mean, spread = self.stats.mean_and_variance(contexts)")
    _edit(linear, "np.maximum(variance, 0.0))", "np.maximum(spread, 0.0))")
    status = _cli(tree, "status", *common, "--set", "seeds=3", cwd=cwd)
    assert "3 finished trial(s) were computed by other code" in status.stdout, status.stdout
    accepted = _cli(tree, "verify", *common, "--set", "seeds=3", "--accept", "--sample", "2", "--seed", "7",
                    "--no-progress", cwd=cwd)
    assert accepted.returncode == 0, accepted.stderr
    assert "sample seed 7" in accepted.stdout and "reproduced 3 of 3" in accepted.stdout, accepted.stdout
    assert "accepted: 3 finished trial(s)" in accepted.stdout
    status = _cli(tree, "status", *common, "--set", "seeds=3", cwd=cwd)
    assert status.returncode == 0 and "other code" not in status.stdout, status.stdout
    stamped = _trials(results)
    record = json.loads(stamped.loc[stamped["label"] == "LinUCB", "code_accepted"].iloc[0])
    assert record["changed"] == ["core/baselines/linear.py"] and record["seed"] == 7 and record["sample"]


def _replant(curves: Path, trial_id: str, t: int, column: str, value: float) -> None:
    """Change one stored value and make the file's checksum agree, as a planted file would."""
    [path] = [p for p in curves.glob("*.parquet") if not p.name.startswith(".")]
    table = pq.read_table(path)
    frame = table.to_pandas()
    frame.loc[(frame["trial_id"] == trial_id) & (frame["t"] == t), column] = value

    planted = pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False)
    pq.write_table(planted, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.rename(path.with_name(path.name[: -len(".parquet") - 64] + digest + ".parquet"))


def test_verify_names_the_trial_round_and_quantity_that_differ(sweep):
    tree, cwd, results = sweep
    common = ("spec.yaml", "--results", str(results))
    ok = _cli(tree, "verify", *common, "--sample", "6", "--seed", "1", "--no-progress", cwd=cwd)
    assert ok.returncode == 0, ok.stderr
    assert "reproduced 6 of 6 (sample seed 1)" in ok.stdout, ok.stdout
    trials = _trials(results)
    victim = trials.index[trials["label"] == "LinTS"][0]
    _replant(results / "codechg" / "curves", victim, 17, "reward", 123.5)
    status = _cli(tree, "status", *common, cwd=cwd)
    assert status.returncode == 0, status.stdout + status.stderr   # well-formed: only a re-run can tell
    bad = _cli(tree, "verify", *common, "--sample", "6", "--seed", "1", "--no-progress", cwd=cwd)
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert "reproduced 5 of 6" in bad.stdout
    line = next(line for line in bad.stderr.splitlines() if line.startswith("differs:"))
    assert f"(trial {victim}): round 17: reward" in line and "(stored 123.5)" in line, line
    assert "recorded on this machine's CPU" not in line   # the arms agree: the curves never parted
    # --accept stamps nothing of a code version whose sample differs.
    refused = _cli(tree, "verify", *common, "--sample", "6", "--seed", "1", "--accept", "--no-progress", cwd=cwd)
    assert refused.returncode == 4 and "accepted:" not in refused.stdout
