"""The code a trial runs on (workers.provenance.code_identity): one digest per module of what its algorithm,
its environment and the shared round loop reach; a change flags exactly the trials whose code it
touches, and text that changes no number (comments, docstrings) flags none."""

import importlib
import sys
import textwrap

import pytest

from banditsweep.core import registry
from banditsweep.workers.provenance import code_identity
from banditsweep.workers.provenance.code_identity import changed_parts, trial_code

PACKAGE = {
    "__init__.py": "",
    "base.py": '''
        """A base class two algorithms share."""
        class Base:
            def update(self, x):
                return x + 1
    ''',
    "deep.py": '''
        SCALE = 2.0

        def deeper(x):
            return x * SCALE
    ''',
    "helpers.py": '''
        from codepkg.deep import deeper

        def score(x):
            return deeper(x) + 1

        def unused(x):
            return x - 1
    ''',
    "algos.py": '''
        """Two algorithms in one module, as linear.py holds LinUCB and LinTS."""
        from codepkg import helpers
        from codepkg.base import Base

        OFFSET = 3

        def _shared(x):
            return x + OFFSET

        class First(Base):
            """The first."""
            def select(self, x):
                # a comment
                return helpers.score(x) + _shared(x)

        class Second(Base):
            def select(self, x):
                return x - 1

        class Env:
            def step(self, x):
                return x
    ''',
}


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "codepkg"
    root.mkdir()
    for name, text in PACKAGE.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "codepkg" or m.startswith("codepkg.")]:
        del sys.modules[name]
    algos = importlib.import_module("codepkg.algos")
    yield root, algos
    for name in [m for m in sys.modules if m == "codepkg" or m.startswith("codepkg.")]:
        del sys.modules[name]


def _digests(algos):
    code_identity._stamp[0] = -1e9   # the sources are looked at again now, not a second later
    return trial_code(algos.First, algos.Env), trial_code(algos.Second, algos.Env)


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_a_method_change_flags_its_algorithm_only(package):
    root, algos = package
    first, second = _digests(algos)
    assert "codepkg/helpers.py" in first.parts and "codepkg/deep.py" in first.parts
    assert "codepkg/helpers.py" not in second.parts   # Second reaches neither helper
    _edit(root / "algos.py", "return x - 1", "return x - 2")
    first_after, second_after = _digests(algos)
    assert first_after.digest == first.digest
    assert changed_parts(second.parts, second_after.parts) == ["codepkg/algos.py"]


def test_a_module_imported_indirectly_flags_what_reaches_it(package):
    root, algos = package
    first, second = _digests(algos)
    _edit(root / "deep.py", "SCALE = 2.0", "SCALE = 3.0")
    first_after, second_after = _digests(algos)
    assert changed_parts(first.parts, first_after.parts) == ["codepkg/deep.py"]
    assert second_after.digest == second.digest
    # A definition nothing reaches changes no trial's code.
    _edit(root / "helpers.py", "return x - 1", "return x - 5")
    assert _digests(algos)[0].digest == first_after.digest


def test_comments_and_docstrings_change_nothing(package):
    root, algos = package
    before = [code.digest for code in _digests(algos)]
    _edit(root / "algos.py", "# a comment", "# another comment, longer\n                # and a second line")
    _edit(root / "algos.py", '"""The first."""', '"""The first, documented at length."""')
    _edit(root / "base.py", '"""A base class two algorithms share."""', '"""Reworded."""')
    assert [code.digest for code in _digests(algos)] == before


def test_a_shared_base_class_flags_both(package):
    root, algos = package
    first, second = _digests(algos)
    _edit(root / "base.py", "return x + 1", "return x + 2")
    first_after, second_after = _digests(algos)
    assert changed_parts(first.parts, first_after.parts) == ["codepkg/base.py"]
    assert changed_parts(second.parts, second_after.parts) == ["codepkg/base.py"]


def test_the_shipped_algorithms_share_no_class_code():
    """LinUCB, LinTS and LinRBMLE share core/algorithms/linear.py, but not each other's methods;
    every neural method reaches neural_base.py; every trial reaches the round loop."""
    env = registry.environment_class("synthetic")
    codes = {name: trial_code(registry.algorithm_class(name), env)
             for name in ("linucb", "lints", "linrbmle", "neural_ucb", "neural_rbmle_ga", "random")}
    linear = {name: codes[name].parts["core/algorithms/linear.py"] for name in ("linucb", "lints", "linrbmle")}
    assert len(set(linear.values())) == 3
    assert all("core/algorithms/neural_base.py" in codes[n].parts for n in ("neural_ucb", "neural_rbmle_ga"))
    assert "core/algorithms/neural_base.py" not in codes["linucb"].parts
    for code in codes.values():
        assert {"core/round_loop.py", "core/seeding.py", "workers/execution/trial_setup.py"} <= set(code.parts)
        assert "core/registry.py" not in code.parts   # a name table, not computation
        assert not code.unknown


def test_a_class_without_source_is_said_to_be_unknown():
    namespace = {}
    exec("class Made:\n    def select(self):\n        return 1\n", namespace)   # no file behind it
    made = namespace["Made"]
    made.__module__ = "made_in_memory"
    code = trial_code(made, registry.environment_class("synthetic"))
    assert code.unknown and "made_in_memory:Made" in code.unknown[0]


def test_runtime_names_the_machine_and_libraries():
    from banditsweep.workers.provenance.runtime import runtime_info

    info = runtime_info("cpu", 3)
    assert {"banditsweep", "commit", "python", "torch", "numpy", "scipy", "cpu", "device"} <= set(info)
    assert info["cpu"] and info["device"] == "cpu"


def test_digesting_imports_nothing(package, tmp_path):
    """Names the closure meets are looked up on disk, never imported: ``importlib.util.find_spec``
    of ``heavy.sub`` would run ``heavy/__init__.py`` (for torch, 1.2 s in every trial actor)."""
    root, _ = package
    heavy = tmp_path / "heavy"
    (heavy / "sub").mkdir(parents=True)
    (heavy / "__init__.py").write_text("raise RuntimeError('heavy was imported')\n")
    (heavy / "sub" / "__init__.py").write_text("")
    (root / "lazy.py").write_text("def helper(x):\n    return x * 3\n")
    (root / "lazyalgos.py").write_text(textwrap.dedent('''
        class Lazy:
            def select(self, x):
                import heavy.sub
                from codepkg import lazy
                return lazy.helper(heavy.sub.value(x))

        class Env:
            def step(self, x):
                return x
    '''))
    algos = importlib.import_module("codepkg.lazyalgos")
    code_identity._stamp[0] = -1e9
    code = trial_code(algos.Lazy, algos.Env)
    assert "heavy" not in sys.modules and "codepkg.lazy" not in sys.modules
    assert not code.parts["codepkg/lazy.py"].startswith("unknown")
    assert not any(part.startswith("heavy") for part in code.parts)   # not tracked: another package
    (root / "lazy.py").write_text("def helper(x):\n    return x * 4\n")
    code_identity._stamp[0] = -1e9
    assert changed_parts(code.parts, trial_code(algos.Lazy, algos.Env).parts) == ["codepkg/lazy.py"]
