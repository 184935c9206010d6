"""The rules that keep the layout readable, checked from the code (AST, imports inside functions
included): layers import one way, each room owns its subject, ``sweeps`` enters ``workers`` by its
front door, and no module grows past the size a reader holds in mind without a stated reason."""

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("core", "workers", "sweeps")
# Modules allowed past MAX_LINES, with why.
LONG_MODULES = {
    "core/neural/training.py": "the batched optimiser of every neural method, forward and backward written out once",
    "core/kernel/sharded/protocol.py": "the shard protocol: every request and reply, a few lines each, declared in one "
                                "place so that it reads as the protocol's table",
    "core/engine/state_codec.py": "the checkpoint format, and at its end the table of where the classes a "
                                  "checkpoint may name live now (MOVED_CLASSES, one line a class)",
    "sweeps/spec.py": "the spec's whole contract: every key's model and its expansion into trials, read top to "
                      "bottom as the reference a spec's error messages point to",
}
MAX_LINES = 450


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


@pytest.mark.parametrize("module,path", list(_modules()))
def test_no_module_grows_past_what_a_reader_holds(module, path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES or module in LONG_MODULES, f"{module}: {lines} lines (> {MAX_LINES}) without a reason"


def test_every_room_has_a_front_page():
    for room in ("execution", "storage", "provenance", "mirrors", "mirrors/mlflow"):
        doc = importlib.import_module("banditsweep.workers." + room.replace("/", ".")).__doc__
        assert doc and len(doc) > 80, room


def test_no_module_below_the_command_line_reads_its_parsing():
    """The command line parses into the request objects of sweeps/options.py and hands them on: no
    module but the parser (sweeps/cli.py) and the options' one argparse adaptor reads argparse."""
    # (and legacy_table.py, a maintainers' script run as `python -m`, with a command line of its own)
    allowed = {"sweeps/cli.py", "sweeps/options.py", "workers/provenance/legacy_table.py"}
    readers = sorted(str(path.relative_to(REPO)) for layer in ("core", "workers", "sweeps")
                     for path in (REPO / layer).rglob("*.py")
                     if "argparse" in path.read_text() and str(path.relative_to(REPO)) not in allowed)
    assert readers == [], readers
    options = (REPO / "sweeps" / "options.py").read_text()
    assert options.count("import argparse") == 1 and "def add_options(" in options
