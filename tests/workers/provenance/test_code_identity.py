"""The code a trial runs on (workers.provenance.code_identity): one digest per module of what its algorithm,
its environment and the shared round loop reach; a change flags exactly the trials whose code it
touches, and text that changes no number (comments, docstrings) flags none."""

import importlib
import sys
import textwrap

import pytest

from banditsweep.core.engine import registry
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
    """LinUCB, LinTS and LinRBMLE share core/baselines/linear.py, but not each other's methods;
    every neural method reaches neural_base.py; every trial reaches the round loop."""
    env = registry.environment_class("synthetic")
    codes = {name: trial_code(registry.algorithm_class(name), env)
             for name in ("linucb", "lints", "linrbmle", "neural_ucb", "neural_rbmle_ga", "random")}
    linear = {name: codes[name].parts["core/baselines/linear.py"] for name in ("linucb", "lints", "linrbmle")}
    assert len(set(linear.values())) == 3
    assert all("core/neural/algorithms/neural_base.py" in codes[n].parts for n in ("neural_ucb", "neural_rbmle_ga"))
    assert "core/neural/algorithms/neural_base.py" not in codes["linucb"].parts
    for code in codes.values():
        assert {"core/engine/round_loop.py", "core/engine/seeding.py",
                "workers/execution/trial_setup.py"} <= set(code.parts)
        assert "core/engine/registry.py" not in code.parts   # a name table, not computation
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


def _reimported(module="codepkg.algos"):
    for name in [m for m in sys.modules if m == "codepkg" or m.startswith("codepkg.")]:
        del sys.modules[name]
    code_identity._stamp[0] = -1e9
    return importlib.import_module(module)


def test_moving_and_renaming_modules_changes_no_digest(package):
    """A module put into a new sub-package and one renamed, their imports rewritten (also the name a
    module is used by): the content is the same, so is every trial's digest; the files are said to
    have moved, not changed."""
    root, algos = package
    first, second = _digests(algos)
    (root / "util").mkdir()
    (root / "util" / "__init__.py").write_text("")
    (root / "helpers.py").rename(root / "util" / "tools.py")
    _edit(root / "algos.py", "from codepkg import helpers", "from codepkg.util import tools")
    _edit(root / "algos.py", "helpers.score(x)", "tools.score(x)")
    (root / "deep.py").rename(root / "depth.py")
    _edit(root / "util" / "tools.py", "from codepkg.deep import deeper", "from codepkg.depth import deeper")
    moved = _reimported()
    first_after, second_after = _digests(moved)
    assert (first_after.digest, second_after.digest) == (first.digest, second.digest)
    assert "codepkg/util/tools.py" in first_after.parts and "codepkg/helpers.py" not in first_after.parts
    assert changed_parts(first.parts, first_after.parts) == []
    # The algorithms' own module moved too: still the same trials.
    (root / "algos").mkdir()
    (root / "algos" / "__init__.py").write_text("")
    (root / "algos.py").rename(root / "algos" / "methods.py")
    moved = _reimported("codepkg.algos.methods")
    assert [code.digest for code in _digests(moved)] == [first.digest, second.digest]
    # A real edit after the moves is seen, for the class it touches only.
    _edit(root / "algos" / "methods.py", "return x - 1", "return x - 2")
    first_edit, second_edit = _digests(_reimported("codepkg.algos.methods"))
    assert first_edit.digest == first.digest and second_edit.digest != second.digest
    assert changed_parts(second.parts, second_edit.parts) == ["codepkg/algos/methods.py"]
    # So is an edit of a definition reached through the moved, renamed modules.
    _edit(root / "depth.py", "SCALE = 2.0", "SCALE = 2.5")
    first_deep, second_deep = _digests(_reimported("codepkg.algos.methods"))
    assert first_deep.digest != first.digest and second_deep.digest == second_edit.digest
    assert changed_parts(first_edit.parts, first_deep.parts) == ["codepkg/depth.py"]


def test_which_definition_a_name_reaches_is_part_of_the_digest(package):
    """Names are digested by what they resolve to: the same text calling another function (of equal
    name, elsewhere) is other code, and two tables of where things live are not code at all."""
    root, algos = package
    first, _ = _digests(algos)
    (root / "other.py").write_text("def deeper(x):\n    return x * 7\n")
    _edit(root / "helpers.py", "from codepkg.deep import deeper", "from codepkg.other import deeper")
    assert _digests(_reimported())[0].digest != first.digest
    _edit(root / "helpers.py", "from codepkg.other import deeper", "from codepkg.deep import deeper")
    _edit(root / "deep.py", "SCALE = 2.0", "SCALE = 2.0\nMOVED_CLASSES = {('a', 'B'): ('c', 'B')}")
    _edit(root / "deep.py", "return x * SCALE", "return x * SCALE if MOVED_CLASSES else x * SCALE")
    changed = _digests(_reimported())[0]
    assert changed.digest != first.digest   # the function's text changed
    _edit(root / "deep.py", "{('a', 'B'): ('c', 'B')}", "{('a', 'B'): ('c', 'B'), ('d', 'E'): ('f', 'E')}")
    assert _digests(_reimported())[0].digest == changed.digest   # a new entry of the move table: no change


def test_recursive_definitions_are_digested_together(package):
    """Definitions that reach each other (a cycle has no order to hash in) get digests of the cycle's
    content: an edit of either member changes both, a move neither."""
    root, algos = package
    (root / "cycle.py").write_text(textwrap.dedent('''
        def even(n):
            return True if n == 0 else odd(n - 1)

        def odd(n):
            return False if n == 0 else even(n - 1)
    '''))
    _edit(root / "algos.py", "return x - 1", "from codepkg.cycle import even\n        return even(x)")
    second = _digests(_reimported())[1]
    (root / "cycle.py").rename(root / "parity.py")
    _edit(root / "algos.py", "from codepkg.cycle import even", "from codepkg.parity import even")
    assert _digests(_reimported())[1].digest == second.digest
    _edit(root / "parity.py", "return False if n == 0", "return True if n == 0")
    assert _digests(_reimported())[1].digest != second.digest


def test_digests_of_earlier_records_stand_for_their_content():
    """Records stamped before digests were of content carry 16-digit path-keyed ones: the table made on
    that tree maps every registered trial kind's to today's content digest, also where the code has
    moved since (LinUCB's module did), and today's code gives the path-keyed digest of its files where
    they are now."""
    from banditsweep.workers.provenance.legacy_digests import LEGACY_DIGESTS
    from banditsweep.workers.provenance.legacy_identity import content_digest_of, is_path_digest

    code = trial_code(registry.algorithm_class("linucb"), registry.environment_class("synthetic"))
    assert len(code.digest) == 24 and not is_path_digest(code.digest)
    assert is_path_digest(code.path_digest) and code.same_code(code.path_digest)
    stamped = [old for old, new in LEGACY_DIGESTS.items() if new == code.digest]
    assert stamped and all(content_digest_of(old) == code.digest and code.same_code(old) for old in stamped)
    assert not code.same_code("0" * 16) and not code.same_code("0" * 24) and not code.same_code(None)
    # A record of the earlier kind names the changed files in its own terms.
    stale = {**code.path_parts, "core/baselines/linear.py": "0" * 16}
    assert code.changed_since(stale, "0" * 16) == ["core/baselines/linear.py"]


def test_a_known_identity_is_taken_only_where_the_sources_are_the_same_bytes(package):
    """A trial actor takes the driver's identity (code_of's ``known``) where every source it was
    computed from has the same bytes here, and digests the code itself where one differs."""
    from banditsweep.workers.provenance.code_identity import code_of

    root, algos = package

    class Spec:   # what code_of reads of a trial
        policy_class, environment, sharded = algos.First, {"kind": "synthetic"}, False

    known = trial_code(algos.First, registry.environment_class("synthetic"))
    assert {module for module, _ in known.sources} >= {"codepkg.algos", "codepkg.helpers", "codepkg.deep"}
    assert code_of(Spec, known) is known
    forged = code_identity.CodeIdentity(known.parts, "f" * 24, known._roots, known._tops, known.sources)
    assert code_of(Spec, forged) is forged   # taken on the strength of the bytes alone
    _edit(root / "deep.py", "SCALE = 2.0", "SCALE = 2.5")
    code_identity._stamp[0] = -1e9
    mine = code_of(Spec, forged)
    assert mine is not forged and mine.digest not in (known.digest, forged.digest)


def test_a_trial_run_by_code_edited_after_it_was_loaded_is_recorded_unknown(package):
    """A process stamps the code it runs, not the files on disk: where a loaded module's source changed
    after the process imported it (an edit while a sweep runs), the trial's code is unknown, naming
    the file, and a fresh import is digested as usual."""
    from banditsweep.workers.provenance.code_identity import note_loaded, running_code

    root, algos = package

    class Spec:
        policy_class, environment, sharded = algos.Second, {"kind": "synthetic"}, False

    note_loaded()
    assert running_code(Spec).digest == trial_code(algos.Second, registry.environment_class("synthetic")).digest
    _edit(root / "algos.py", "return x - 1", "return x - 2")
    code_identity._stamp[0] = -1e9
    stale = running_code(Spec)
    assert stale.digest is None and "codepkg/algos.py changed on disk after this process loaded it" in \
        stale.parts["codepkg/algos.py"]
    fresh = _reimported()

    class Again:
        policy_class, environment, sharded = fresh.Second, {"kind": "synthetic"}, False

    note_loaded()
    assert running_code(Again).digest is not None


def test_a_digest_a_move_changed_stands_for_todays_code(monkeypatch):
    """A trial stamped before a move that had to split an import statement of a module a root takes
    whole (workers.provenance.moved_digests) is current: its digest leads to today's, through every
    later such move; any other digest does not."""
    from banditsweep.workers.provenance import legacy_identity
    from banditsweep.workers.provenance.moved_digests import MOVED_DIGESTS

    assert MOVED_DIGESTS and all(len(old) == len(new) == 24 for old, new in MOVED_DIGESTS.items())
    code = trial_code(registry.algorithm_class("random"), registry.environment_class("adversarial_kernel"), True)
    monkeypatch.setattr(legacy_identity, "MOVED_DIGESTS", {"a" * 24: "b" * 24, "b" * 24: code.digest})
    assert legacy_identity.content_digest_of("a" * 24) == code.digest
    assert code.same_code("a" * 24) and code.same_code("b" * 24) and code.same_code(code.digest)
    assert not code.same_code("c" * 24)
