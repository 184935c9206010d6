"""The bad-input cases' machinery, for the tests of what the command line refuses before anything
starts: a valid spec and a kernel one to change one thing in (``GOOD``, ``KERNEL``, ``edit``, ``add``), a
case (``Case``: the bad input, the command, the fragment its one line must say), running one through
the CLI with the sweep itself replaced by a failure (``run_case``), and the check that a case was
refused in one bounded line having written nothing and reached no Ray (``refused_writing_nothing``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

import banditsweep.sweeps.cli.commands.run as run_command
from banditsweep.sweeps.cli.main import main

MAX_LINE = 500

GOOD = """\
sweep: unit
horizon: 100
seeds: 2
environments:
  - {kind: synthetic, function: h1}
algorithms:
  - name: linucb
    grid: {nu: [0.1, 1.0]}
    params: {lam: 1.0}
  - {name: random}
"""

KERNEL = """\
sweep: kern
horizon: 50
seeds: 1
environments:
  - {kind: adversarial_kernel, setting: 1}
algorithms:
  - {name: apg_exp3, grid: {max_iterations: [10, true]}}
"""


def edit(old: str, new: str, text: str = GOOD) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def add(line: str, text: str = GOOD) -> str:
    return text + line + "\n"


@dataclass
class Case:
    id: str
    what: str                       # the bad input, as the catalogue names it
    args: list[str]                 # "{spec}" is the spec file, "{tmp}" the test's folder
    fragment: str                   # what the message must say
    spec: str | bytes = GOOD
    setup: Callable | None = field(default=None, repr=False)   # (tmp_path, monkeypatch) -> None


RUN = ["run", "{spec}", "--no-progress"]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _reached_the_sweep(*args, **kwargs):
    pytest.fail("bad input reached the sweep")


def refused_writing_nothing(case, tmp_path, monkeypatch, capsys, setup=None) -> None:
    """``case`` exits 2 with one line naming it, never reaches Ray, and leaves the folder as it was
    after ``setup`` (the case's own, or one given)."""
    import banditsweep.workers.execution.ray_connection as ray_connection

    before = None

    def snapshot(tmp_path, monkeypatch):
        nonlocal before
        if setup is not None:
            setup(tmp_path, monkeypatch)
        before = tree(tmp_path)

    def no_ray(self):
        raise AssertionError("bad input reached Ray")

    monkeypatch.setattr(ray_connection.RayConnection, "__enter__", no_ray)   # also when a Ray is up already
    code = run_case(Case(**{**case.__dict__, "setup": snapshot}), tmp_path, monkeypatch)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err[:2000]
    assert lines[0].startswith("error: ") and case.fragment in lines[0], lines[0]
    assert len(lines[0]) <= MAX_LINE
    # Nothing written: no sweep folder, .run.lock, README.txt or MLflow store; the results root untouched.
    assert tree(tmp_path) == before


def _registry_of_a_new_process(monkeypatch) -> None:
    """The registry as a new ``banditsweep`` process has it: the library's own algorithms and
    environment kinds only. A test plugin that an earlier test loaded into this process
    ($BANDITSWEEP_PLUGINS) stays registered for the rest of the session, and the messages of the
    cases that list what an algorithm runs on would name it."""
    from banditsweep.core.engine import registry

    for table, kind in ((registry._ALGORITHMS, "algorithm"), (registry._ENVIRONMENTS, "environment")):
        for name in sorted(set(table) - registry._BUILTIN[kind]):
            monkeypatch.delitem(table, name)


def run_case(case: Case, tmp_path: Path, monkeypatch, sweep: Callable = _reached_the_sweep) -> int:
    """Run one case through the CLI (``sweep`` stands in for running the trials), on the registry a new
    process has; its exit code."""
    spec = tmp_path / "bad.yaml"
    if isinstance(case.spec, bytes):
        spec.write_bytes(case.spec)
    else:
        spec.write_text(case.spec)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BANDITSWEEP_DATA", raising=False)
    _registry_of_a_new_process(monkeypatch)
    # A case that reached the sweep itself would start Ray: fail it instead.
    monkeypatch.setattr(run_command, "run_locked", sweep)
    if case.setup:
        case.setup(tmp_path, monkeypatch)
    args = [a.format(spec="bad.yaml", tmp=tmp_path) for a in case.args]
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code
    return code
