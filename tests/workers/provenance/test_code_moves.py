"""Moving code stales nothing, editing it still does, through the CLI: a researcher runs a sweep, then
reorganises a copy of the package (a module put into a new sub-package, a module every trial reaches
renamed, the kernels' module moved with the classes checkpoints hold), following the checklist of
docs/architecture.md ("Moving a module"), and runs again. No trial is re-run or called changed, the
shipped results still read as today's code, checkpoints of an earlier release still resume; an
edit of one method after the moves re-runs exactly that class's trials."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from paths import REPO

pytestmark = pytest.mark.slow   # embedded Ray several times and a pytest run in the moved tree: ~2 min

SPEC = """\
sweep: moves
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
# Small shipped folders whose status is checked in the moved tree (the rest: test_shipped_results.py, in
# this folder).
SHIPPED = {"neural_sensitivity_long": "sweeps/neural_rbmle/sensitivity_long.yaml",
           "neural_table3_timing_cpu": "sweeps/neural_rbmle/table3_timing_cpu.yaml"}


def move_module(package: Path, old: str, new: str) -> None:
    """Move module ``old`` to ``new`` (dotted, below banditsweep) in a copy of the package and rewrite
    what names it, as docs/architecture.md's checklist says: imports (``from parent import leaf``
    becomes ``from new_parent import new_leaf as leaf``), dotted paths in strings (the registry's
    "module:Class", SHARED_ROOTS), and a MOVED_CLASSES entry for each class it defines."""
    source = package / (old.replace(".", "/") + ".py")
    target = package / (new.replace(".", "/") + ".py")
    for parent in reversed(target.relative_to(package).parents[:-1]):
        folder = package / parent
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()
    source.rename(target)
    old_parent, old_leaf = old.rsplit(".", 1)
    new_parent, new_leaf = new.rsplit(".", 1)
    classes = [node.name for node in ast.parse(target.read_text()).body if isinstance(node, ast.ClassDef)]
    single = re.compile(rf"^(\s*)from banditsweep\.{re.escape(old_parent)} import ([\w, ]+)$", re.M)

    def split_import(match: re.Match) -> str:
        indent, names = match.group(1), [name.strip() for name in match.group(2).split(",")]
        if old_leaf not in names:
            return match.group(0)
        rest = [name for name in names if name != old_leaf]
        alias = "" if new_leaf == old_leaf else f" as {old_leaf}"
        lines = [f"{indent}from banditsweep.{new_parent} import {new_leaf}{alias}"]
        if rest:
            lines.insert(0, f"{indent}from banditsweep.{old_parent} import {', '.join(rest)}")
        return "\n".join(lines)

    for path in package.rglob("*.py"):
        text = path.read_text()
        edited = single.sub(split_import, text)
        edited = re.sub(rf"(banditsweep|\{{PACKAGE\}})\.{re.escape(old)}(?![\w])", rf"\1.{new}", edited)
        if edited != text:
            path.write_text(edited)
    codec = package / "core" / "engine" / "state_codec.py"
    entries = "".join(f'MOVED_CLASSES[("banditsweep.{old}", "{name}")] = ("banditsweep.{new}", "{name}")\n'
                      for name in classes)
    text = codec.read_text()
    anchor = "MOVED_CLASSES: dict[tuple[str, str], tuple[str, str]] = {}\n"
    assert anchor in text
    codec.write_text(text.replace(anchor, anchor + entries))


def _cli(tree: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("BANDITSWEEP_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "banditsweep", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_moving_modules_stales_nothing_and_an_edit_after_it_is_seen(tmp_path):
    tree = tmp_path / "tree"
    package = tree / "banditsweep"
    shutil.copytree(REPO, package, ignore=shutil.ignore_patterns(
        ".venv", ".git", "docs", "benchmarks", "__pycache__", "*.egg-info", "test-artifacts"))
    shutil.copytree(REPO / "docs" / "results", tmp_path / "shipped")
    (tmp_path / "spec.yaml").write_text(SPEC)
    results = tmp_path / "results"
    common = ("spec.yaml", "--results", str(results))
    done = _cli(tree, "run", *common, "--sink", "none", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    before = pd.read_parquet(results / "moves" / "trials").set_index("trial_id")

    move_module(package, "core.baselines.linear", "core.baselines.linear_family.models")
    move_module(package, "core.engine.seeding", "core.engine.seeds")
    move_module(package, "core.kernel.kernels", "core.kernel.methods.kernels")
    assert not (package / "core" / "engine" / "seeding.py").exists()

    status = _cli(tree, "status", *common, cwd=tmp_path)
    assert status.returncode == 0 and "other code" not in status.stdout, status.stdout + status.stderr
    rerun = _cli(tree, "run", *common, "--sink", "none", "--no-progress", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert "other code" not in rerun.stdout and "0 finished, 0 failed" not in rerun.stdout, rerun.stdout
    after = pd.read_parquet(results / "moves" / "trials").set_index("trial_id")
    pd.testing.assert_series_equal(after["finished_at"], before["finished_at"])
    for folder, spec in SHIPPED.items():
        shipped = _cli(tree, "status", str(package / spec), "--results", str(tmp_path / "shipped"), cwd=tmp_path)
        assert shipped.returncode == 0, shipped.stderr
        assert "other code" not in shipped.stdout and "code unknown" not in shipped.stdout, shipped.stdout

    # Checkpoints an earlier release wrote (their kernels and policies now live elsewhere) resume.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    landed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "tests/core/engine/test_landed_checkpoints.py"], cwd=package, env=env, capture_output=True,
                            text=True, timeout=600)
    assert landed.returncode == 0 and " passed" in landed.stdout, landed.stdout[-3000:]

    # An edit of one method after the moves: that class's trials, and only those.
    models = package / "core" / "baselines" / "linear_family" / "models.py"
    index = "        return mean + self.params.nu * np.sqrt(np.maximum(variance, 0.0))"
    text = models.read_text()
    assert index in text
    models.write_text(text.replace(index, index.replace("mean + ", "mean - ")))
    status = _cli(tree, "status", *common, cwd=tmp_path)
    assert "2 finished trial(s) were computed by other code (core/baselines/linear_family/models.py changed)" \
        in status.stdout, status.stdout
    rerun = _cli(tree, "run", *common, "--sink", "none", "--no-progress", cwd=tmp_path)
    assert rerun.returncode == 0 and "2 finished, 0 failed" in rerun.stdout, rerun.stdout
    edited = pd.read_parquet(results / "moves" / "trials").set_index("trial_id")
    others = before.index[before["label"] != "LinUCB"]
    pd.testing.assert_series_equal(edited.loc[others, "finished_at"], before.loc[others, "finished_at"])
