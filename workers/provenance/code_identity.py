"""The code a trial runs on, as digests that name what changed, and the machine it ran on.

A trial's id is its content (core.trial.TrialSpec.trial_id); what its numbers *mean* also depends
on the code that computed them. :func:`trial_code` answers, for a trial, one digest per module of
that code, each over only the definitions the trial reaches:

- its algorithm's class (with its base classes and everything it names, followed through imports),
- its environment's class likewise,
- the code every trial runs: the round loop and the trial (``core.round_loop``, ``core.trial``'s
  ``TrialRun`` and ``run_trials``), seeding, and the trial actor's device and thread set-up
  (``workers.execution.trial_setup``); a sharded trial also its shards' modules.

The closure is drawn from the source, statically (nothing is imported to digest it): a top-level
definition (a class, function or assignment) names other definitions of its module and imported
ones; each reached definition is normalised (its AST without docstrings, so comments and
docstrings change nothing) and hashed per module. So a change to LinUCB's methods changes the digest
of ``core/algorithms/linear.py`` for LinUCB's trials only (LinTS and LinRBMLE, in the same module,
do not reach LinUCB's code), while a change to ``neural_base.py`` rightly changes every neural
method's. Modules of installed libraries (torch, numpy, scipy) are recorded by version instead
(workers.provenance.runtime). The registry (a table of names) is not part of any trial's code: the class
it resolves to is.

What the static closure cannot see is said, not hidden: a module whose source cannot be read (a
compiled extension, a class defined where no source is kept) makes the part ``unknown: why``.

Layer: the workers layer (it reads source files); nothing here imports Ray or MLflow.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

PACKAGE = "banditsweep"
# A name table, not code that computes anything: the class it resolves to is each trial's code.
NOT_CODE = frozenset({f"{PACKAGE}.core.registry"})
# What every trial runs, whatever its algorithm: (module, top-level name), or (module, None) whole.
SHARED_ROOTS = (
    (f"{PACKAGE}.core.trial", "TrialRun"),
    (f"{PACKAGE}.core.trial", "run_trials"),
    (f"{PACKAGE}.core.round_loop", None),
    (f"{PACKAGE}.core.seeding", None),
    (f"{PACKAGE}.workers.execution.trial_setup", None),
)
# A sharded trial's engine: its partition, shard halves and coordinator (chosen by name at run time,
# which the static closure would not follow), whole.
SHARDED_ROOTS = (
    (f"{PACKAGE}.core.sharded_trial", None),
    (f"{PACKAGE}.core.kernel_shards", None),
    (f"{PACKAGE}.core.sharding", None),
    (f"{PACKAGE}.workers.execution.sharded_trials", None),
)
UNKNOWN = "unknown"
DIGEST_CHARS = 16


@dataclass(frozen=True)
class CodeIdentity:
    """The code of one trial: ``parts`` maps each module it reaches (``core/algorithms/linear.py``)
    to the digest of what it uses there, or to ``"unknown: why"`` where the source could not be read."""

    parts: dict[str, str]

    @functools.cached_property
    def digest(self) -> str:
        text = "\n".join(f"{name}={value}" for name, value in sorted(self.parts.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]

    @property
    def unknown(self) -> list[str]:
        """The parts whose source could not be digested, with why."""
        return [f"{name} ({value})" for name, value in sorted(self.parts.items()) if value.startswith(UNKNOWN)]


def changed_parts(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The modules whose digest differs between two identities (added and removed ones too)."""
    return sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name))


def code_of(spec) -> CodeIdentity:
    """The code identity of the trial ``spec`` (a core.trial.TrialSpec), through the registry."""
    from banditsweep.core import registry

    return trial_code(spec.policy_class, registry.environment_class(spec.environment["kind"]), spec.sharded)


def trial_code(algorithm_class: type, environment_class: type, sharded: bool = False) -> CodeIdentity:
    """The code identity of a trial of ``algorithm_class`` on ``environment_class``."""
    return _trial_code(algorithm_class, environment_class, bool(sharded), _current_stamp())


# (when taken, stamp): the source files are looked at again at most every STAMP_SECONDS, so that a
# sweep of 10^5 trials digests each (algorithm, environment) pair once.
_stamp: list = [-1e9, ()]
STAMP_SECONDS = 1.0


def _current_stamp() -> tuple:
    import time

    now = time.monotonic()
    if now - _stamp[0] > STAMP_SECONDS:
        _stamp[:] = [now, _source_stamp()]
    return _stamp[1]


@functools.lru_cache(maxsize=512)
def _trial_code(algorithm_class: type, environment_class: type, sharded: bool, stamp: tuple) -> CodeIdentity:
    roots: list[tuple[str, str | None]] = [*SHARED_ROOTS, *(SHARDED_ROOTS if sharded else ())]
    classes = (algorithm_class, environment_class)
    tops = {PACKAGE} | {cls.__module__.split(".")[0] for cls in classes}
    parts: dict[str, str] = {}
    for cls in classes:
        module = cls.__module__
        if _module_source(module) is None:
            parts.update(_class_alone(cls))
        else:
            roots.append((module, cls.__qualname__.split(".")[0]))
    parts.update(_Closure(tops).digests(roots))
    return CodeIdentity(parts)


def _source_stamp() -> tuple:
    """Changes when a tracked source file changes (mtime and size), so that a long-lived process
    (a notebook, a test) digests edited code anew; the digests themselves are of the source only."""
    stamp = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (name == PACKAGE or name.startswith(PACKAGE + ".") or name.split(".")[0] in _PLUGIN_TOPS):
            try:
                info = os.stat(path)
            except OSError:
                continue
            stamp.append((name, info.st_mtime_ns, info.st_size))
    return tuple(sorted(stamp))


# Top-level packages of classes digested so far besides banditsweep (plugins): their files are stamped too.
_PLUGIN_TOPS: set[str] = set()


def _class_alone(cls: type) -> dict[str, str]:
    """A class whose module has no readable source file: its own source where Python kept it (the
    class alone: what it reaches is not followed), else unknown."""
    name = f"{cls.__module__}:{cls.__qualname__}"
    try:
        source = inspect.getsource(cls)
        tree = ast.parse(_dedent(source))
    except (OSError, TypeError, SyntaxError) as error:
        return {name: f"{UNKNOWN}: no source ({type(error).__name__})"}
    return {name: _hash([_normal(node) for node in tree.body])}


def _dedent(source: str) -> str:
    import textwrap

    return textwrap.dedent(source)


class _Closure:
    """The definitions reached from some roots, followed through names and imports, digested per module."""

    def __init__(self, tops: set[str]):
        self.tops = tops
        _PLUGIN_TOPS.update(tops - {PACKAGE})
        self.reached: dict[str, set[int]] = {}      # module -> indices of its top-level statements reached
        self.whole: set[str] = set()
        self.followed: set[tuple[str, int, str | None]] = set()
        self.problems: dict[str, str] = {}

    def tracked(self, module: str) -> bool:
        return module.split(".")[0] in self.tops and module not in NOT_CODE

    def digests(self, roots: Iterable[tuple[str, str | None]]) -> dict[str, str]:
        work: list[tuple[str, str | None]] = list(roots)
        while work:
            module, name = work.pop()
            if not self.tracked(module):
                continue
            parsed = _parsed(module)
            if isinstance(parsed, str):
                self.problems[module] = parsed
                continue
            if name is None:
                if module in self.whole:
                    continue
                self.whole.add(module)
                wanted = range(len(parsed.statements))
            else:
                wanted = parsed.binding.get(name, ())
            seen = self.reached.setdefault(module, set())
            for index in [*wanted, *parsed.preamble]:
                # An import statement is followed per name it binds (each alias is its own definition).
                alias = name if name is not None and parsed.is_import(index) else None
                if (module, index, alias) in self.followed:
                    continue
                self.followed.add((module, index, alias))
                seen.add(index)
                work.extend(parsed.references(index, alias))
        parts = {}
        for module, indices in self.reached.items():
            parsed = _parsed(module)
            if indices:
                parts[_part_name(module, parsed.path)] = _hash(parsed.normal[i] for i in sorted(indices))
        for module, problem in self.problems.items():
            parts[_part_name(module, None)] = f"{UNKNOWN}: {problem}"
        return parts


def _hash(texts: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:DIGEST_CHARS]


def _part_name(module: str, path: str | None) -> str:
    """``core/algorithms/linear.py`` for the package's modules, the dotted path as a file elsewhere."""
    parts = module.split(".")
    if parts[0] == PACKAGE:
        parts = parts[1:]
    if path is not None and os.path.basename(path) == "__init__.py":
        return "/".join([*parts, "__init__.py"])
    return "/".join(parts) + ".py" if parts else "__init__.py"


def _module_source(module: str) -> str | None:
    """The path of a module's Python source, without importing it where it is not imported yet."""
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None) if loaded is not None else None
    if path is None and loaded is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError, AttributeError):
            return None
        path = spec.origin if spec is not None else None
    if path is None or not path.endswith(".py") or not os.path.isfile(path):
        return None
    return path


def _is_module(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


@dataclass
class _Parsed:
    module: str
    path: str
    package: str                                     # for relative imports
    statements: list[ast.stmt]
    normal: list[str]                                # each statement normalised
    binding: dict[str, list[int]] = field(default_factory=dict)   # name -> statements binding it
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)   # name -> (module, attr)
    preamble: set[int] = field(default_factory=set)  # statements binding nothing (run on import)

    def is_import(self, index: int) -> bool:
        return isinstance(self.statements[index], (ast.Import, ast.ImportFrom))

    def references(self, index: int, name: str | None) -> list[tuple[str, str | None]]:
        """The definitions statement ``index`` names (for an import, only what binds ``name``)."""
        node = self.statements[index]
        local = dict(self.imports)
        found: list[tuple[str, str | None]] = []
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias_name, target in _import_targets(node, self.package):
                if name is None or alias_name == name:
                    found.append(target)
            return found
        for inner in ast.walk(node):   # imports inside functions bind names there
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                for alias_name, target in _import_targets(inner, self.package):
                    local[alias_name] = target
        for chain in _name_chains(node):
            head = chain[0]
            if head in local:
                module, attr = local[head]
                found.extend(_resolve(module, attr, chain[1:]))
            elif head in self.binding:
                found.append((self.module, head))
        return found


def _resolve(module: str, attr: str | None, rest: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """What ``module[.attr].rest...`` names: a definition of a module, or a whole module."""
    if attr is not None:
        if _is_module(f"{module}.{attr}"):
            module = f"{module}.{attr}"
        else:
            return [(module, attr)]
    for index, part in enumerate(rest):
        if _is_module(f"{module}.{part}"):
            module = f"{module}.{part}"
            continue
        return [(module, part)]
    return [(module, None)]   # the module itself is used: all of it


def _import_targets(node: ast.Import | ast.ImportFrom, package: str) -> list[tuple[str, tuple[str, str | None]]]:
    """(name bound, (module, attribute or None)) for each alias of an import statement."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                out.append((alias.asname, (alias.name, None)))
            else:
                top = alias.name.split(".")[0]
                out.append((top, (top, None)))
        return out
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parent = parts[: len(parts) - node.level + 1]
        base = ".".join([*parent, *([base] if base else [])])
    for alias in node.names:
        if alias.name == "*":
            out.append(("*", (base, None)))
        else:
            out.append((alias.asname or alias.name, (base, alias.name)))
    return out


def _name_chains(node: ast.AST) -> list[tuple[str, ...]]:
    """Every name a statement reads, with the attributes read from it (``seeding.stream`` as
    ("seeding", "stream")). Function signatures' annotations are left out: they change no number
    (a class's field annotations are kept: a pydantic model validates by them)."""
    chains: list[tuple[str, ...]] = []
    skip: set[int] = set()
    for inner in ast.walk(node):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in [*inner.args.args, *inner.args.posonlyargs, *inner.args.kwonlyargs,
                        *([inner.args.vararg] if inner.args.vararg else []),
                        *([inner.args.kwarg] if inner.args.kwarg else [])]:
                if arg.annotation is not None:
                    skip.update(id(n) for n in ast.walk(arg.annotation))
            if inner.returns is not None:
                skip.update(id(n) for n in ast.walk(inner.returns))
    for inner in ast.walk(node):
        if id(inner) in skip:
            continue
        if isinstance(inner, ast.Attribute):
            attrs, base = [], inner
            while isinstance(base, ast.Attribute):
                attrs.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name):
                skip.add(id(base))
                chains.append((base.id, *reversed(attrs)))
                # The inner attributes of this chain are walked too: only the longest one is kept.
                node_ = inner.value
                while isinstance(node_, ast.Attribute):
                    skip.add(id(node_))
                    node_ = node_.value
        elif isinstance(inner, ast.Name):
            chains.append((inner.id,))
    return chains


def _bound_names(node: ast.stmt) -> list[str]:
    """The top-level names a module statement binds (compound statements: what their bodies bind)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [name for name, _ in _import_targets(node, "")]
    if isinstance(node, ast.Assign):
        return [n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
    names: list[str] = []
    for body in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(node, body, []) or []:
            if isinstance(child, ast.ExceptHandler):
                for grandchild in child.body:
                    names += _bound_names(grandchild)
            elif isinstance(child, ast.stmt):
                names += _bound_names(child)
    return names


@functools.lru_cache(maxsize=None)
def _parsed_at(module: str, path: str, mtime: int, size: int) -> "_Parsed | str":
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError) as error:
        return f"source not readable ({type(error).__name__})"
    statements = [node for node in tree.body if not _is_docstring(node)]
    package = module if os.path.basename(path) == "__init__.py" else module.rpartition(".")[0]
    parsed = _Parsed(module, path, package, statements, [_normal(node) for node in statements])
    for index, node in enumerate(statements):
        names = _bound_names(node)
        if not names or names == ["annotations"] and isinstance(node, ast.ImportFrom) and node.module == "__future__":
            parsed.preamble.add(index)
        for name in names:
            parsed.binding.setdefault(name, []).append(index)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, target in _import_targets(node, package):
                parsed.imports[name] = target
    for name in ("__all__",):   # what `import *` exports, never a computation
        for index in parsed.binding.pop(name, []):
            parsed.preamble.discard(index)
    return parsed


def _parsed(module: str) -> "_Parsed | str":
    path = _module_source(module)
    if path is None:
        loaded = sys.modules.get(module)
        origin = getattr(loaded, "__file__", None) or ""
        return "compiled extension" if origin.endswith((".so", ".pyd")) else "no source file"
    info = os.stat(path)
    return _parsed_at(module, path, info.st_mtime_ns, info.st_size)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


_SKIPPED_FIELDS = frozenset({"ctx", "type_comment", "kind"})


def _normal(node: Any) -> str:
    """A statement as text that changes only when its meaning does: the AST's node types and
    fields (no positions, comments or docstrings; empty fields left out, so that another Python's
    new empty fields change nothing)."""
    if isinstance(node, ast.AST):
        fields = []
        for name, value in ast.iter_fields(node):
            if name in _SKIPPED_FIELDS or value is None or value == []:
                continue
            if isinstance(value, list) and name in ("body", "orelse", "finalbody"):
                value = [item for item in value if not _is_docstring(item)]
            fields.append(f"{name}={_normal(value)}")
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_normal(item) for item in node) + "]"
    return repr(node)
