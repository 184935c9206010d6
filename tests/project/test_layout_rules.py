"""The rules that keep the layout readable, checked from the code (AST, imports inside functions
included): layers import one way, each room owns its subject (core's and sweeps' rooms by what they
may import of each other, workers' by the one library each alone imports; in sweeps, only the command
line parses a command line or prints), and ``sweeps`` enters ``workers`` by its front door. A module's
size is no rule: a long one is a smell its docstring explains, never a reason to split one subject in
two. The tests follow the same rooms: each test file lives in the folder of the room whose behaviour it
checks (tests/core/engine/, tests/workers/storage/, ...) or in tests/clusters/ or tests/project/, and no
test module imports another."""

import ast
import importlib
from pathlib import Path

import pytest
from paths import REPO

PACKAGE_DIRS = ("core", "workers", "sweeps")
# core's rooms and, for each, the rooms it may import (its front door, core/<room>/__init__.py, says so):
# the engine runs every trial and knows no paper; the baselines build on the engine alone; each paper
# builds on the engine and the baselines and never on the other paper.
CORE_ROOMS = {
    "engine": set(),
    "baselines": {"engine"},
    "neural": {"engine", "baselines"},
    "kernel": {"engine", "baselines"},
}
# sweeps' rooms and, for each, the rooms it may import (its front door, sweeps/<room>/__init__.py, says
# so): the spec, the statistics (analysis) and how results look (publishing) know no other room; a
# sweep's results build on those three; planning on the spec, publishing (display names) and the
# results (the held-out stage chooses by the report's rule); the command line on every room below it;
# the Python API on the command line, whose commands it runs. A room is named by its subject, never by
# who calls it: a module goes where what it does is, and the table says what it may build on.
SWEEPS_ROOMS = {
    "spec": set(),
    "analysis": set(),
    "publishing": set(),
    "results": {"spec", "analysis", "publishing"},
    "planning": {"spec", "publishing", "results"},
    "cli": {"spec", "analysis", "publishing", "results", "planning"},
    "api": {"spec", "planning", "results", "cli"},
}
# Modules of sweeps outside the rooms: its map (__init__.py) and what every room says things through
# (events.py: the terminal for the command line, a collector for Python), which imports no room.
SWEEPS_SHARED = {"sweeps/__init__.py", "sweeps/events.py"}


def _modules():
    for folder in PACKAGE_DIRS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path.relative_to(REPO).as_posix(), path


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


IMPORTS = {name: _imports(path) for name, path in _modules()}


def _importers(prefix: str) -> set[str]:
    return {module for module, names in IMPORTS.items()
            if any(name == prefix or name.startswith(prefix + ".") for name in names)}


def test_layers_import_one_way():
    for module, names in IMPORTS.items():
        if module.startswith("core/"):
            assert not [n for n in names if n.split(".")[0] in ("ray", "mlflow")
                        or n.startswith(("banditsweep.workers", "banditsweep.sweeps"))], module
        if module.startswith("workers/"):
            assert not [n for n in names if n.startswith("banditsweep.sweeps")], module


def test_one_room_imports_ray_and_one_imports_mlflow():
    assert _importers("ray") and all(m.startswith("workers/execution/") for m in _importers("ray")), _importers("ray")
    assert _importers("mlflow") and all(m.startswith("workers/mirrors/mlflow/") for m in _importers("mlflow"))


def test_sweeps_enter_workers_by_the_front_door():
    for module, names in IMPORTS.items():
        if module.startswith("sweeps/"):
            inner = [n for n in names if n.startswith("banditsweep.workers.") and not _front_door_name(n)]
            assert not inner, f"{module} imports {inner}: import from banditsweep.workers"


def _front_door_name(name: str) -> bool:
    """``banditsweep.workers.X`` where X is a name the front door exports (a from-import of it)."""
    import banditsweep.workers as workers

    parts = name.split(".")
    return len(parts) == 3 and parts[2] in workers.__all__


def test_every_name_of_the_front_door_resolves():
    import banditsweep.workers as workers

    for name in workers.__all__:
        assert getattr(workers, name) is not None, name


def test_the_front_door_loads_neither_ray_nor_mlflow():
    import subprocess
    import sys

    code = ("import sys; from banditsweep.workers import SweepStore, TrialRecord, RunOptions, compare_code, "
            "check_tracking_uri; print('ray' in sys.modules, 'mlflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def _room(name: str) -> str | None:
    """The room of core a dotted name belongs to (``banditsweep.core.neural.training`` -> "neural"),
    "core" for core's own package, None outside core."""
    parts = name.split(".")
    if parts[:2] != ["banditsweep", "core"]:
        return None
    return parts[2] if len(parts) > 2 else "core"


def test_every_module_of_core_lives_in_a_room():
    for module in IMPORTS:
        if module.startswith("core/") and module != "core/__init__.py":
            assert module.split("/")[1] in CORE_ROOMS, f"{module}: not in a room of core ({', '.join(CORE_ROOMS)})"


@pytest.mark.parametrize("room", list(CORE_ROOMS))
def test_each_room_of_core_imports_only_the_rooms_it_builds_on(room):
    allowed = CORE_ROOMS[room] | {room}
    for module, names in IMPORTS.items():
        if module.startswith(f"core/{room}/"):
            wrong = sorted({name for name in names if _room(name) is not None and _room(name) not in allowed})
            assert not wrong, f"{module} imports {wrong}: core.{room} builds on {sorted(CORE_ROOMS[room]) or 'none'}"


def test_the_papers_rooms_never_import_each_other():
    """The table above may gain rooms, never these permissions: the neural and the kernel paper know
    nothing of each other, the engine knows no paper and no baseline, the baselines know the engine only."""
    assert "kernel" not in CORE_ROOMS["neural"] and "neural" not in CORE_ROOMS["kernel"]
    assert CORE_ROOMS["engine"] == set() and CORE_ROOMS["baselines"] == {"engine"}


def test_every_room_of_core_has_a_light_front_door():
    """Each room's ``__init__.py`` is its front page (what lives there, what it may import) and imports
    nothing: naming a room loads none of its modules, nor torch."""
    import json
    import subprocess
    import sys

    for room in CORE_ROOMS:
        doc = importlib.import_module(f"banditsweep.core.{room}").__doc__
        assert doc and len(doc) > 200 and "import" in doc, room
    code = ("import json, sys; import " + ", ".join(f"banditsweep.core.{room}" for room in CORE_ROOMS) + "; "
            "loaded = sorted(m for m in sys.modules if m.startswith('banditsweep.core.')); "
            "print(json.dumps([loaded, 'torch' in sys.modules]))")
    loaded, torch = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                              check=True).stdout)
    assert loaded == sorted(f"banditsweep.core.{room}" for room in CORE_ROOMS) and not torch, loaded


def test_every_room_has_a_front_page():
    for room in ("execution", "storage", "provenance", "mirrors", "mirrors/mlflow"):
        doc = importlib.import_module("banditsweep.workers." + room.replace("/", ".")).__doc__
        assert doc and len(doc) > 80, room


def test_no_module_below_the_command_line_reads_its_parsing():
    """The command line parses into the request objects of sweeps/cli/options.py and hands them on: no
    module but the parser (sweeps/cli/main.py) and the options' one argparse adaptor reads argparse."""
    # (and legacy_table.py, a maintainers' script run as `python -m`, with a command line of its own)
    allowed = {"sweeps/cli/main.py", "sweeps/cli/options.py", "workers/provenance/legacy_table.py"}
    readers = sorted(str(path.relative_to(REPO)) for layer in ("core", "workers", "sweeps")
                     for path in (REPO / layer).rglob("*.py")
                     if "argparse" in path.read_text() and str(path.relative_to(REPO)) not in allowed)
    assert readers == [], readers
    options = (REPO / "sweeps" / "cli" / "options.py").read_text()
    assert options.count("import argparse") == 1 and "def add_options(" in options


def _sweeps_room(name: str) -> str | None:
    """The room of sweeps a dotted name belongs to (``banditsweep.sweeps.results.report`` -> "results"),
    "sweeps" for sweeps' own package and its shared modules, None outside sweeps."""
    parts = name.split(".")
    if parts[:2] != ["banditsweep", "sweeps"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in SWEEPS_ROOMS else "sweeps"


def test_every_module_of_sweeps_lives_in_a_room():
    for module in IMPORTS:
        if module.startswith("sweeps/") and module not in SWEEPS_SHARED:
            assert module.split("/")[1] in SWEEPS_ROOMS, (
                f"{module}: not in a room of sweeps ({', '.join(SWEEPS_ROOMS)}) nor shared")


@pytest.mark.parametrize("room", list(SWEEPS_ROOMS))
def test_each_room_of_sweeps_imports_only_the_rooms_it_builds_on(room):
    allowed = SWEEPS_ROOMS[room] | {room, "sweeps"}
    for module, names in IMPORTS.items():
        if module.startswith(f"sweeps/{room}/"):
            wrong = sorted({name for name in names if _sweeps_room(name) not in (None, *allowed)})
            assert not wrong, (f"{module} imports {wrong}: "
                               f"sweeps.{room} builds on {sorted(SWEEPS_ROOMS[room]) or 'none'}")


def test_the_shared_modules_of_sweeps_import_no_room():
    for module in SWEEPS_SHARED:
        rooms = sorted({_sweeps_room(name) for name in IMPORTS[module]} - {None, "sweeps"})
        assert not rooms, f"{module} imports the rooms {rooms}: every room imports it"


def test_the_rooms_of_sweeps_build_one_way():
    """The table above may gain rooms, never a cycle: a room never builds on one that builds on it."""
    done: list[str] = []
    waiting = dict(SWEEPS_ROOMS)
    while waiting:
        ready = [room for room, below in waiting.items() if below <= set(done)]
        assert ready, f"the rooms {sorted(waiting)} build on each other"
        done += ready
        for room in ready:
            del waiting[room]
    assert SWEEPS_ROOMS["spec"] == SWEEPS_ROOMS["analysis"] == SWEEPS_ROOMS["publishing"] == set()
    assert not any("api" in below for below in SWEEPS_ROOMS.values())


def _writes_to_the_terminal(tree: ast.AST) -> list[int]:
    """Lines that print: ``print`` called or handed on (``echo=print``), or ``sys.stdout`` /
    ``sys.stderr`` written to."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "print":
            lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and node.attr == "write" and isinstance(node.value, ast.Attribute)
              and node.value.attr in ("stdout", "stderr") and isinstance(node.value.value, ast.Name)
              and node.value.value.id == "sys"):
            lines.append(node.lineno)
    return lines


def test_only_the_command_line_parses_a_command_line_or_prints():
    """Below the command line (sweeps/cli/), nothing reads argparse or prints: what a module has to say
    it says through sweeps.events (``say``), which the command line shows on the terminal and the
    Python API keeps as data (``quiet=True`` prints nothing and loses nothing). The one print outside
    the command line is events.py's ``Terminal``, where what is said meets the terminal."""
    for module, path in _modules():
        if not module.startswith("sweeps/") or module.startswith("sweeps/cli/"):
            continue
        tree = ast.parse(path.read_text())
        assert not [n for n in IMPORTS[module] if n.split(".")[0] == "argparse"], f"{module} imports argparse"
        if module == "sweeps/events.py":
            [terminal] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Terminal"]
            printed = [line for line in _writes_to_the_terminal(tree)
                       if not terminal.lineno <= line <= terminal.end_lineno]
        else:
            printed = _writes_to_the_terminal(tree)
        assert not printed, f"{module} prints on lines {printed}: say it through sweeps.events"


def test_every_room_of_sweeps_has_a_light_front_door():
    """Each room's ``__init__.py`` is its front page (what lives there, what it may import) and imports
    nothing: naming a room loads none of its modules, nor numpy, pandas or torch; sweeps' own
    ``__init__.py`` is the map that names every room."""
    import json
    import subprocess
    import sys

    sweeps_map = importlib.import_module("banditsweep.sweeps").__doc__
    for room in SWEEPS_ROOMS:
        doc = importlib.import_module(f"banditsweep.sweeps.{room}").__doc__
        assert doc and len(doc) > 200 and "import" in doc, room
        assert f"``sweeps.{room}``" in sweeps_map, f"sweeps/__init__.py does not name the room {room}"
    code = ("import json, sys; import " + ", ".join(f"banditsweep.sweeps.{room}" for room in SWEEPS_ROOMS) + "; "
            "loaded = sorted(m for m in sys.modules if m.startswith('banditsweep.sweeps.')); "
            "print(json.dumps([loaded, sorted(m for m in ('numpy', 'pandas', 'torch') if m in sys.modules)]))")
    loaded, heavy = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                              check=True).stdout)
    assert loaded == sorted(f"banditsweep.sweeps.{room}" for room in SWEEPS_ROOMS) and not heavy, (loaded, heavy)


# ---- the tests' own layout ---------------------------------------------------------------------------
# A test file lives in the folder of the room whose behaviour it checks: tests/<layer>/<room>/ (as
# tests/core/engine/, tests/workers/storage/, tests/sweeps/cli/), or in one of the folders of its own:
# tests/clusters/ (whole clusters: multi-node Ray, ray up, ray job, Slurm, separate hosts) and
# tests/project/ (these rules, README, the paths the docs name). Helper modules and data stay at tests/
# root, which pytest puts on sys.path. No test folder is a package, so a test file's name is its module's
# name and must be unique; and no test module imports another: what two share is a helper module.
TESTS = REPO / "tests"
TEST_FOLDERS_OF_THEIR_OWN = ("clusters", "project")


def _test_files(tests: Path) -> list[Path]:
    return sorted(p for p in tests.rglob("test_*.py") if "__pycache__" not in p.parts)


def _misplaced_test_files(tests: Path, repo: Path) -> list[str]:
    """The test files under ``tests`` that are not in a folder naming a room of the package at ``repo``
    (a sub-package of a layer: tests/core/kernel/ for core/kernel/) or a folder of their own."""
    misplaced = []
    for path in _test_files(tests):
        folder = path.parent.relative_to(tests)
        of_its_own = folder.parts in [(name,) for name in TEST_FOLDERS_OF_THEIR_OWN]
        a_room = (len(folder.parts) >= 2 and folder.parts[0] in PACKAGE_DIRS
                  and (repo / folder / "__init__.py").is_file())
        if not (of_its_own or a_room):
            misplaced.append(path.relative_to(tests).as_posix())
    return misplaced


def _imports_of_test_modules(tests: Path) -> dict[str, list[str]]:
    """For each module under ``tests`` (test files, helpers, plugins), the test modules it imports:
    ``import test_x``, ``from test_x import ...`` or ``importlib.import_module("test_x")``."""
    found = {}
    for path in sorted(tests.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        names = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
                names.append(node.args[0].value)
        tests_imported = sorted({name for name in names if name.split(".")[0].startswith("test_")})
        if tests_imported:
            found[path.relative_to(tests).as_posix()] = tests_imported
    return found


def test_every_test_file_lives_in_the_folder_of_a_room_or_a_folder_of_its_own():
    assert _test_files(TESTS), "no test files found"
    assert _misplaced_test_files(TESTS, REPO) == [], (
        "test files belong in tests/<layer>/<room>/ of the room whose behaviour they check, or in "
        + " or ".join(f"tests/{name}/" for name in TEST_FOLDERS_OF_THEIR_OWN))


def test_no_test_module_imports_another():
    assert _imports_of_test_modules(TESTS) == {}, "what test modules share belongs in a helper module at tests/ root"


def test_test_file_names_are_unique_and_no_test_folder_is_a_package():
    names = [path.name for path in _test_files(TESTS)]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
    assert [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("__init__.py")] == []


def test_the_rules_of_the_tests_layout_find_a_file_at_the_root_and_an_import_of_a_test_module(tmp_path):
    (tmp_path / "core" / "engine").mkdir(parents=True)
    (tmp_path / "core" / "engine" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    for folder in ("core/engine", "core/nowhere", "project", "clusters/deeper"):
        (tests / folder).mkdir(parents=True)
    (tests / "helper.py").write_text("import json\nimport test_shared\n")
    (tests / "test_flat.py").write_text("from test_shared import CASES\n")
    (tests / "core" / "engine" / "test_shared.py").write_text("CASES = []\n")
    (tests / "core" / "engine" / "test_lazy.py").write_text(
        "import importlib\n\ndef test_it():\n    importlib.import_module('test_flat')\n")
    (tests / "core" / "nowhere" / "test_lost.py").write_text("")
    (tests / "project" / "test_rules.py").write_text("import paths\n")
    (tests / "clusters" / "deeper" / "test_deep.py").write_text("")
    assert _misplaced_test_files(tests, tmp_path) == ["clusters/deeper/test_deep.py", "core/nowhere/test_lost.py",
                                                     "test_flat.py"]
    assert _imports_of_test_modules(tests) == {"core/engine/test_lazy.py": ["test_flat"],
                                               "helper.py": ["test_shared"], "test_flat.py": ["test_shared"]}
