"""The rules that keep the layout readable, checked from the code (AST, imports inside functions
included): layers import one way, each room owns its subject (core's rooms by what they may import of
each other, workers' by the one library each alone imports), and ``sweeps`` enters ``workers`` by its
front door. A module's size is no rule: a long one is a smell its docstring explains, never a reason
to split one subject in two."""

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
