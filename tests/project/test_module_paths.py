"""Every place that names a module by its path still finds it: the checklist of docs/architecture.md
("Moving a module") as a test. A move that forgets one fails here, not in a user's sweep.

The places: the registry's "module:Class" strings, the code identity's SHARED_ROOTS and SHARDED_ROOTS,
core.engine.state_codec's MOVED_CLASSES, pyproject.toml's package list (a non-editable install holds every
sub-package and module), the entries a Ray job uploads (PACKAGE_ENTRIES), the modules whose classes
a checkpoint may name (registry.trusted_module), and the paths README.md and docs/ name."""

import ast
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from paths import REPO

from banditsweep.core.engine import registry
from banditsweep.core.engine.state_codec import MOVED_CLASSES
from banditsweep.workers.execution.ray_connection import PACKAGE_ENTRIES
from banditsweep.workers.provenance.code_identity import SHARDED_ROOTS, SHARED_ROOTS

LAYERS = ("core", "workers", "sweeps")


def _file_of(module: str) -> Path:
    assert module == "banditsweep" or module.startswith("banditsweep."), module
    parts = module.split(".")[1:]
    path = REPO.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    assert (path / "__init__.py").is_file(), f"{module}: no such module in the tree"
    return path / "__init__.py"


def _top_names(module: str) -> set[str]:
    names = set()
    for node in ast.parse(_file_of(module).read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _registry_table() -> dict[str, str]:
    """The registry's "module:Class" strings as core/engine/registry.py writes them (its dicts resolve them to
    classes once used)."""
    strings = {}
    for node in ast.parse((REPO / "core" / "engine" / "registry.py").read_text()).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and ":" in str(value.value):
                    strings[key.value] = value.value
    return strings


def test_the_registry_names_modules_that_define_its_classes():
    strings = _registry_table()
    assert len(strings) >= 15 and set(strings) <= set(registry.registered_algorithms()) | set(
        registry.environment_names())
    for name, target in strings.items():
        module, _, qualname = target.partition(":")
        assert qualname.split(".")[0] in _top_names(module), f"registry {name!r}: {target} is not defined there"


def test_the_code_identitys_roots_exist():
    for module, name in (*SHARED_ROOTS, *SHARDED_ROOTS):
        assert name is None or name in _top_names(module), f"{module}:{name}"


def test_moved_classes_lead_to_classes_that_exist():
    for (old_module, old_name), (module, qualname) in MOVED_CLASSES.items():
        assert qualname.split(".")[0] in _top_names(module), f"MOVED_CLASSES {old_module}:{old_name} -> {module}"
        assert registry.trusted_module(module)


def _packages_in_tree() -> set[str]:
    found = {"banditsweep"}
    for layer in LAYERS:
        for init in (REPO / layer).rglob("__init__.py"):
            found.add(".".join(["banditsweep", *init.parent.relative_to(REPO).parts]))
    return found


def test_pyproject_lists_every_sub_package():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _packages_in_tree()
    for package, folder in config["package-dir"].items():
        expected = "." if package == "banditsweep" else "/".join(package.split(".")[1:])
        assert folder == expected, f"package-dir {package} -> {folder}"
    # Every folder of Python code is a package (a folder without __init__.py would not be installed).
    for layer in LAYERS:
        for source in (REPO / layer).rglob("*.py"):
            assert (source.parent / "__init__.py").is_file(), f"{source.relative_to(REPO)}: its folder is no package"


def test_a_non_editable_install_holds_every_module(tmp_path):
    """The wheel pip builds for a plain ``pip install .`` holds every module of the three layers."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "No module named" in done.stderr:
        pytest.skip(f"cannot build a wheel here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("banditsweep-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for layer in LAYERS:
        for source in (REPO / layer).rglob("*.py"):
            inside = "banditsweep/" + source.relative_to(REPO).as_posix()
            assert inside in names, f"{inside} is missing from the wheel"


def test_a_ray_job_uploads_every_layer():
    assert {"__init__.py", "__main__.py", *LAYERS} <= set(PACKAGE_ENTRIES)
    for entry in PACKAGE_ENTRIES:
        assert (REPO / entry).exists(), entry


def test_every_core_module_may_be_named_by_a_checkpoint():
    for source in (REPO / "core").rglob("*.py"):
        parts = source.relative_to(REPO).with_suffix("").parts
        module = ".".join(["banditsweep", *(parts[:-1] if parts[-1] == "__init__" else parts)])
        assert registry.trusted_module(module), module


_PATH = re.compile(r"`((?:core|workers|sweeps|tests|benchmarks|docs|examples)/[\w./\-*]+?)(?::\w+)?`")
_DOTTED = re.compile(r"`(?:banditsweep\.)?((?:core|workers|sweeps)(?:\.\w+)+)")


def _is_named(dotted: str) -> bool:
    """A module, or a name at most two attributes below one (``core.kernel.kernels.growth_rate``,
    ``core.engine.trial.TrialRun.advance``)."""
    parts = dotted.split(".")
    for length in range(len(parts), 0, -1):
        path = REPO.joinpath(*parts[:length])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return len(parts) - length <= 2
    return False


@pytest.mark.parametrize("document", ["README.md", *sorted(p.name for p in (REPO / "docs").glob("*.md"))])
def test_the_docs_name_paths_and_modules_that_exist(document):
    path = REPO / document if document == "README.md" else REPO / "docs" / document
    text = path.read_text()
    for match in _PATH.finditer(text):
        named = match.group(1).rstrip(".")
        exists = list(REPO.glob(named)) if "*" in named else (REPO / named).exists()
        assert exists, f"{document} names {named}, which does not exist"
    for match in _DOTTED.finditer(text):
        assert _is_named(match.group(1)), f"{document} names {match.group(1)}, which is no module"
