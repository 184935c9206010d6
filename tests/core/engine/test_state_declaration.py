"""What a checkpoint holds is declared per class (core.engine.state_declaration): read from the source, every
attribute a checkpointed class sets is declared, so that the rule is kept when the code is written
and not found out when a checkpoint is played; at run time the codec writes only what is declared,
refuses what is not, and reads a stored object back against its class's declaration. A plugin's
class that declares nothing is saved whole; one that declares is held to it."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from paths import GOLDEN, PLUGINS, REPO

sys.path.insert(0, str(GOLDEN))

from cases import DATA, specs  # noqa: E402

from banditsweep.core.engine.state_codec import StateFormatError, decode_state, encode_state  # noqa: E402
from banditsweep.core.engine.state_declaration import (StateDeclarationError,  # noqa: E402
                                                       declaration)
from banditsweep.core.engine.trial import TrialRun, TrialSpec, run_trial  # noqa: E402

KINDS = ("STATE", "OPTIONAL_STATE", "TRANSIENT")


# ---- from the source ------------------------------------------------------------------------------

@dataclass
class ClassSource:
    module: str
    name: str
    bases: list[tuple[str, str]]           # resolved to (module, name) where the base is in the sources read
    declared: dict[str, set[str]]          # kind -> names, the class body's own (a dataclass's fields in STATE)
    written: bool                          # the body assigns one of KINDS (``STATE = ()`` included)
    fields: set[str]                       # a dataclass's fields: set by its generated __init__
    library: bool
    assigned: dict[str, int] = field(default_factory=dict)   # attribute -> the line that sets it
    dataclass: bool = False                # decorated @dataclass: it declares by its fields, even none

    @property
    def declares(self) -> bool:
        """As core.engine.state_declaration.declaration reads a class: a declaration in its body, or a
        dataclass of the library."""
        return self.written or (self.library and self.dataclass)


def _sources() -> dict[str, Path]:
    """Module name -> file: banditsweep.core and the test plugins."""
    found = {}
    for path in sorted((REPO / "core").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        module = ".".join(("banditsweep", *(parts[:-1] if parts[-1] == "__init__" else parts)))
        found[module] = path
    for path in sorted(PLUGINS.glob("*.py")):
        found[path.stem] = path
    return found


def _names_of(node: ast.expr) -> set[str] | None:
    if isinstance(node, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                       for e in node.elts):
        return {e.value for e in node.elts}
    return None


def _decorator_names(node: ast.ClassDef | ast.FunctionDef) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def _self_targets(target: ast.expr, self_name: str) -> list[ast.Attribute]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [found for element in target.elts for found in _self_targets(element, self_name)]
    if isinstance(target, ast.Starred):
        return _self_targets(target.value, self_name)
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == self_name:
        return [target]
    return []


def _assigned(method: ast.FunctionDef) -> dict[str, int]:
    """The instance attributes ``method`` sets: ``self.x = ``, ``self.x: T = ``, ``self.x += ``, a
    tuple of them, ``setattr(self, "x", ...)``, ``object.__setattr__(self, "x", ...)`` (nested
    functions included: they close over ``self``)."""
    # __init_subclass__ is a class method without the decorator: what it sets is the class's.
    if not method.args.args or {"staticmethod", "classmethod"} & _decorator_names(method) \
            or method.name in ("__init_subclass__", "__class_getitem__"):
        return {}
    self_name = method.args.args[0].arg
    found: dict[str, int] = {}
    for node in ast.walk(method):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            function = node.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
            if name in ("setattr", "__setattr__") and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id == self_name:
                found.setdefault(str(node.args[1].value), node.lineno)
        for target in targets:
            for attribute in _self_targets(target, self_name):
                found.setdefault(attribute.attr, attribute.lineno)
    return found


def _class_source(module: str, node: ast.ClassDef, imports: dict[str, tuple[str, str]]) -> ClassSource:
    declared: dict[str, set[str]] = {kind: set() for kind in KINDS}
    written = False
    is_dataclass = "dataclass" in _decorator_names(node)
    fields: set[str] = set()
    assigned: dict[str, int] = {}
    for statement in node.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id in KINDS:
            names = _names_of(statement.value)
            assert names is not None, f"{module}.{node.name}.{statement.targets[0].id} is not a tuple of names"
            declared[statement.targets[0].id] = names
            written = True
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and is_dataclass:
            if "ClassVar" not in ast.unparse(statement.annotation):
                fields.add(statement.target.id)
        elif isinstance(statement, ast.FunctionDef):
            assigned.update({k: v for k, v in _assigned(statement).items() if k not in assigned})
            if "cached_property" in _decorator_names(statement):   # it sets the instance attribute
                assigned.setdefault(statement.name, statement.lineno)
    declared["STATE"] |= fields
    bases = []
    for base in node.bases:
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        if name is not None:
            bases.append(imports.get(name, (module, name)))
    return ClassSource(module, node.name, bases, declared, written, fields, module.startswith("banditsweep.core"),
                       assigned, is_dataclass)


def _classes() -> dict[tuple[str, str], ClassSource]:
    classes = {}
    for module, path in _sources().items():
        tree = ast.parse(path.read_text())
        imports = {alias.asname or alias.name: (statement.module, alias.name)
                   for statement in tree.body if isinstance(statement, ast.ImportFrom) and statement.module
                   for alias in statement.names}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[(module, node.name)] = _class_source(module, node, imports)
    return classes


CLASSES = _classes()


def _ancestors(key: tuple[str, str]) -> list[ClassSource]:
    """The class and its bases among the sources read, nearest first (each once)."""
    order, pending = [], [key]
    while pending:
        current = pending.pop(0)
        if current in CLASSES and CLASSES[current] not in order:
            order.append(CLASSES[current])
            pending += CLASSES[current].bases
    return order


def _checkpointed() -> list[tuple[str, str]]:
    """Classes that declare their state, and every class derived from one."""
    return sorted(key for key in CLASSES if any(source.declares for source in _ancestors(key)))


def test_the_source_reader_finds_the_checkpointed_classes():
    found = set(_checkpointed())
    for key in [("banditsweep.core.engine.trial", "TrialRun"), ("banditsweep.core.baselines.linear", "LinUCB"),
                ("banditsweep.core.neural.z_matrix", "ZMatrix"), ("banditsweep.core.engine.trial", "TrialSpec"),
                ("stateful_policies", "DeclaredCountingRandom"), ("faulty_algorithms", "CrashOnce")]:
        assert key in found, key
    assert "marker" in CLASSES[("faulty_algorithms", "CrashOnce")].assigned
    assert {"domain", "kernel"} <= set(CLASSES[("banditsweep.core.kernel.kernel_lower_bound",
                                                "KernelLowerBound")].assigned)


def test_every_attribute_a_checkpointed_class_sets_is_declared():
    problems = []
    for key in _checkpointed():
        source = CLASSES[key]
        if not source.declares:
            if source.library:   # a plugin's class may declare nothing: it is saved whole
                problems.append(f"{key[0]}.{key[1]} derives from a checkpointed class and declares no STATE "
                                "(STATE = () when it adds nothing)")
            continue
        lineage = _ancestors(key)
        declared = set().union(*(ancestor.declared[kind] for ancestor in lineage for kind in KINDS))
        # A base that declares is checked as itself; one that does not is checked with each class that does.
        for setter in [source] + [ancestor for ancestor in lineage[1:] if not ancestor.declares]:
            problems += [f"{setter.module}.{setter.name} sets {name} (line {line}), declared in none of "
                         f"{', '.join(KINDS)} of {key[1]} or its bases"
                         for name, line in sorted(setter.assigned.items()) if name not in declared]
    assert not problems, "\n".join(sorted(set(problems)))


def test_every_saved_attribute_is_set_by_the_class_its_bases_or_its_subclasses():
    problems = []
    for key in _checkpointed():
        source = CLASSES[key]
        related = _ancestors(key) + [CLASSES[other] for other in CLASSES if CLASSES[key] in _ancestors(other)]
        set_anywhere = set().union(*(set(other.assigned) | other.fields for other in related))
        # TRANSIENT may name what nothing sets any longer: an attribute retired that stored checkpoints hold.
        for kind in ("STATE", "OPTIONAL_STATE"):
            problems += [f"{key[0]}.{key[1]}.{kind} names {name}, which nothing sets"
                         for name in sorted(source.declared[kind] - set_anywhere)]
    assert not problems, "\n".join(problems)


# ---- at run time ----------------------------------------------------------------------------------

SYNTHETIC = {"kind": "synthetic", "function": "h1", "dim": 6}


def _stopped(case_specs: list[TrialSpec], rounds: int = 5) -> TrialRun:
    run = TrialRun(case_specs)
    run.advance(rounds)
    return run


def _edited(state: bytes, change) -> bytes:
    """``state`` with its structure changed by ``change(root)`` (the arrays kept)."""
    with np.load(io.BytesIO(state), allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    structure = json.loads(arrays.pop("state_json").tobytes())
    change(structure["root"])
    buffer = io.BytesIO()
    np.savez(buffer, state_json=np.frombuffer(json.dumps(structure).encode(), dtype=np.uint8), **arrays)
    return buffer.getvalue()


def _objects(node, qualname: str) -> list[dict]:
    """The stored objects of class ``qualname`` in a state's structure."""
    found = []
    if isinstance(node, dict):
        if node.get("t") == "object" and node["cls"][1] == qualname:
            found.append(node)
        for value in node.values():
            found += _objects(value, qualname)
    elif isinstance(node, list):
        for value in node:
            found += _objects(value, qualname)
    return found


def _same_results(first, second) -> None:
    for before, after in zip(first, second):
        for name in ("arm", "reward", "regret", "cum_regret"):
            np.testing.assert_array_equal(getattr(after, name), getattr(before, name), err_msg=name)


def test_a_state_holds_exactly_the_declared_attributes():
    run = _stopped(specs("linucb_h1"))
    run.specs[0].trial_id   # the cached id, set on the spec once asked for
    state = run.snapshot()
    attributes = decode_state(state)
    assert set(attributes) == declaration(TrialRun).saved   # the round a restore goes on from is not saved
    assert "trial_id" not in attributes["specs"][0].__dict__
    assert attributes["specs"][0].trial_id == run.specs[0].trial_id


def test_an_attribute_declared_nowhere_is_refused_when_saved_naming_class_and_attribute():
    run = _stopped(specs("linucb_h1"))
    run.policy.policies[0].newcomer = 1
    with pytest.raises(StateDeclarationError, match=r"baselines\.linear\.LinUCB carries newcomer"):
        run.snapshot()


def test_a_library_class_that_declares_nothing_is_refused():
    class Undeclared:
        def __init__(self):
            self.value = 1

    Undeclared.__module__ = "banditsweep.core.engine.trial"
    with pytest.raises(StateDeclarationError, match="Undeclared declares no STATE"):
        encode_state({"x": Undeclared()})


def test_the_sharded_engine_declares_its_state_as_the_rest_does():
    """The coordinator, its algorithm halves and the shards save the names their classes declare
    (bases included), and name what they rebuild."""
    from banditsweep.core.kernel.algorithms.rls_kernel_exp3 import Landmarks, ShardedRLSKernelExp3
    from banditsweep.core.kernel.sharded.coordinator import ShardedKernelTrial
    from banditsweep.core.kernel.sharded.shard import KernelShard

    assert declaration(ShardedKernelTrial).saved == set(ShardedKernelTrial.STATE)
    assert "group" in declaration(ShardedKernelTrial).transient   # the process's handle, never saved
    assert ShardedRLSKernelExp3.saved() == sorted({"eta", "alpha", "log_totals", "values", "landmark_counts",
                                                   "effective_dimensions", "tie_rule"})
    assert {"table", "points"} <= declaration(KernelShard).transient
    assert declaration(Landmarks).saved == {field.name for field in dataclasses.fields(Landmarks)}


def test_a_stored_object_lacking_a_declared_attribute_is_refused_naming_it():
    spec = specs("linucb_h1")
    state = _edited(_stopped(spec).snapshot(), lambda root: [
        node["attrs"].update(v=[pair for pair in node["attrs"]["v"] if pair[0] != "stats"])
        for node in _objects(root, "LinUCB")])
    with pytest.raises(StateFormatError, match="LinUCB lacks stats, which it declares saved"):
        TrialRun.restore(state, spec)


def test_a_stored_attribute_its_class_does_not_declare_is_refused_naming_it():
    spec = specs("linucb_h1")
    state = _edited(_stopped(spec).snapshot(), lambda root: [
        node["attrs"]["v"].append(["select", 1]) for node in _objects(root, "LinUCB")])
    with pytest.raises(StateFormatError, match="LinUCB holds select, which it does not declare"):
        TrialRun.restore(state, spec)
    state = _edited(_stopped(spec).snapshot(), lambda root: root["v"].append(["stray", 1]))
    with pytest.raises(StateFormatError, match="TrialRun holds stray"):
        TrialRun.restore(state, spec)


def test_a_stored_transient_attribute_is_dropped_on_reading():
    """As in a checkpoint written before the declarations, which holds every attribute."""
    spec = specs("linucb_h1")
    state = _edited(_stopped(spec).snapshot(), lambda root: root["v"].append(["resumed_from", 3]))
    restored = TrialRun.restore(state, spec)
    assert restored.resumed_from == 6
    restored.advance()
    _same_results([run_trial(spec[0])], restored.results())


@pytest.fixture
def stateful_plugins(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("BANDITSWEEP_PLUGINS", "stateful_policies")


def test_a_plugins_class_that_declares_nothing_is_saved_whole(stateful_plugins):
    spec = TrialSpec.create("counting_random", {}, SYNTHETIC, 0, 12)
    assert declaration(type(TrialRun([spec]).policy.policies[0])) is None
    restored = TrialRun.restore(_stopped([spec]).snapshot(), [spec])
    assert restored.policy.policies[0].rounds_seen == 5
    restored.advance()
    assert restored.policy.policies[0].rounds_seen == 12
    _same_results([run_trial(spec)], restored.results())


def test_a_plugins_class_that_declares_is_held_to_its_declaration(stateful_plugins):
    spec = TrialSpec.create("declared_counting_random", {}, SYNTHETIC, 0, 12)
    run = _stopped([spec])
    restored = TrialRun.restore(run.snapshot(), [spec])
    policy = restored.policy.policies[0]
    assert policy.rounds_seen == 5 and not hasattr(policy, "last_reward")
    restored.advance()
    _same_results([run_trial(spec)], restored.results())
    run.policy.policies[0].scratch = 0
    with pytest.raises(StateDeclarationError, match="DeclaredCountingRandom carries scratch"):
        run.snapshot()
