"""The floors pyproject.toml states hold: every dependency of the project and of its test extra,
pinned to exactly the release its floor names (read from pyproject.toml), installs together in a
fresh venv on this Python; there the installed releases are the floors, README's quick start runs as
written, and a few tests of each layer pass (the round loop's recorded results, Parquet, the MLflow
sink on SQLite and behind a login, the statistics and the report, a notebook, a sweep through Ray).

Marked ``floors`` and left out of the default suite: it downloads about 3 GB (torch's floor on PyPI is
its CUDA build, with NVIDIA's libraries) and takes about 16 minutes on 2 busy cores, 6 to 8 of them
installing. It skips, saying why, where pip cannot reach a package index, and fails there instead with
BANDITSWEEP_REQUIRE_FLOORS=1 (CI).
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from paths import REPO
from readme_commands import quickstart_step

pytestmark = pytest.mark.floors

# What pip says when it cannot reach an index (DNS, refused or cut connections, a proxy), as opposed to
# a release it reached and could not install.
UNREACHABLE = re.compile(r"NewConnectionError|Failed to establish a new connection|Temporary failure in name "
                         r"resolution|Name or service not known|Network is unreachable|Max retries exceeded|"
                         r"ProxyError|ConnectTimeoutError|Read timed out", re.I)

# The tests run in the venv of floors, each for what the floors could break: results equal to the
# recorded ones (numpy, torch), the spec's checks (pydantic), Bessel K (scipy), the store's Parquet and
# the docs' recipes (pyarrow, pandas, polars, duckdb), the MLflow sink on SQLite, the statistics
# (scipy.stats), the report's LaTeX and figures (jinja2, matplotlib), a policy of a notebook's own
# shipped to Ray (nbclient, nbformat, ipykernel, pydantic, ray) and a sweep run, resumed and reported
# through Ray end to end.
SUBSET = [
    "tests/core/engine/test_golden.py",
    "tests/core/baselines/test_linear_baselines.py",
    "tests/core/kernel/test_kernels.py",
    "tests/sweeps/spec/test_spec.py",
    "tests/workers/storage/test_tidy_parquet.py",
    "tests/workers/storage/test_results_tables.py",
    "tests/workers/mirrors/test_sink.py",
    "tests/sweeps/analysis/test_statistics.py",
    "tests/sweeps/results/test_report.py::test_summarise_picks_the_lowest_mean_grid_point_per_cell",
    "tests/sweeps/results/test_report.py::test_report_writes_publication_figures_and_latex",
    "tests/sweeps/api/test_notebook.py",
    "tests/workers/execution/test_end_to_end.py::test_run_resume_report",
]
# A test of the slow set: MLflow's basic-auth server (Flask, Flask-WTF) with a sweep mirrored through it.
SLOW_SUBSET = ["tests/workers/mirrors/test_mlflow_login.py::"
               "test_with_the_login_every_trial_is_mirrored_and_the_password_is_nowhere"]


def stated_floors() -> dict[str, str]:
    """Each dependency's floor (the release its ``>=`` names) of pyproject.toml's dependencies and test
    extra, by name as pyproject.toml writes it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floors = {}
    for text in project["dependencies"] + project["optional-dependencies"]["test"]:
        requirement = Requirement(text)
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(lower) == 1, f"{text!r} states no floor (one `>=`) that this test could install"
        floors[requirement.name] = lower[0]
    return floors


def _index_out_of_reach(why: str) -> None:
    if os.environ.get("BANDITSWEEP_REQUIRE_FLOORS") == "1":
        pytest.fail(f"BANDITSWEEP_REQUIRE_FLOORS=1 and {why}")
    pytest.skip(why)


def _run(argv: list[str], timeout: float, **options) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **options)


def _env(**changes: str) -> dict[str, str]:
    """This process's environment without what the suite's fixtures point at this test's folder (the
    results root, the MLflow store) or put on the import path: the venv's commands choose as a
    user's would, or as their own tests' fixtures do."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("BANDITSWEEP_RESULTS", "MLFLOW_TRACKING_URI", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(RAY_USAGE_STATS_ENABLED="0", PIP_DISABLE_PIP_VERSION_CHECK="1", **changes)
    return env


def _summary(output: str) -> str:
    return output.strip().splitlines()[-1] if output.strip() else ""


def test_every_floor_installs_together_and_runs_the_quick_start_and_tests(tmp_path):
    floors = stated_floors()
    constraints = tmp_path / "floors.txt"
    constraints.write_text("".join(f"{name}=={floor}\n" for name, floor in floors.items()))
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        started = time.monotonic()
        # -e, as README installs it: the venv runs this checkout. The constraints pin each dependency
        # to its floor; what the floors need beyond them is pip's choice, as it is a user's.
        install = _run([str(python), "-m", "pip", "install", "-q", "--retries", "2", "-c", str(constraints),
                        "-e", f"{REPO}[test]"], timeout=2400, cwd=tmp_path, env=_env())
        if install.returncode != 0 and UNREACHABLE.search(install.stdout + install.stderr):
            _index_out_of_reach(f"pip could not reach a package index to install the floors:\n{install.stderr[-2000:]}")
        assert install.returncode == 0, ("the floors do not install together:\n"
                                         f"{install.stdout[-3000:]}\n{install.stderr[-5000:]}")
        print(f"the floors installed in {time.monotonic() - started:.0f} s")

        # (a) Each dependency is at its floor (torch's build label, +cu121, aside).
        script = ("import json, sys\nfrom importlib.metadata import version\n"
                  "print(json.dumps({name: version(name) for name in sys.argv[1:]}))")
        listed = _run([str(python), "-c", script, *floors], timeout=120, env=_env())
        assert listed.returncode == 0, listed.stderr
        installed = json.loads(listed.stdout)
        off = {name: (installed[name], floor) for name, floor in floors.items()
               if Version(Version(installed[name]).public) != Version(floor)}
        assert not off, f"installed, floor: {off}"

        # (b) README's quick start, its sweep run as written by the venv's banditsweep, results in tmp_path.
        argv = shlex.split(quickstart_step())
        argv[0] = str(venv / argv[0].removeprefix(".venv/"))
        results = tmp_path / "results"
        quick = _run(argv, timeout=900, cwd=REPO, env=_env(BANDITSWEEP_RESULTS=str(results)))
        assert quick.returncode == 0, f"{quick.stdout[-3000:]}\n{quick.stderr[-5000:]}"
        assert "42 finished, 0 failed" in quick.stdout and "| LinUCB |" in quick.stdout, quick.stdout
        assert f"results: {results / 'quickstart'}" in quick.stdout and (results / "mlflow.db").is_file()

        # (c) The tests, in the venv of floors (its own pytest, at its floor too); none may skip.
        for selection, extra in ((SUBSET, []), (SLOW_SUBSET, ["-m", "slow"])):
            tests = _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                          str(tmp_path / "pytest"), *extra, *selection], timeout=1800, cwd=REPO, env=_env())
            said = _summary(tests.stdout)
            assert tests.returncode == 0, f"{tests.stdout[-15000:]}\n{tests.stderr[-3000:]}"
            assert re.search(r"\d+ passed", said) and not re.search(r"skipped|error", said), said
    finally:
        shutil.rmtree(venv, ignore_errors=True)   # several GB; pytest keeps the last three runs' folders
