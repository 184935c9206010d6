"""The code a trial runs on, as digests that name what changed, and the machine it ran on.

A trial's id is its content (core.trial.TrialSpec.trial_id); what its numbers *mean* also depends
on the code that computed them. :func:`trial_code` answers, for a trial, one digest per module of
that code, each over only the definitions the trial reaches:

- its algorithm's class (with its base classes and everything it names, followed through imports),
- its environment's class likewise,
- the code every trial runs: the round loop and the trial (``core.round_loop``, ``core.trial``'s
  ``TrialRun`` and ``run_trials``), seeding, and the trial actor's device and thread set-up
  (``workers.execution.trial_setup``); a sharded trial also its engine and its algorithm's sharded half.

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
A class registered where it was defined (a notebook's, a script's ``__main__``) is digested from
the source that travels with it (workers.provenance.shipped), the same on the driver and a worker.
The statements themselves are read by workers.provenance.source_index.

Layer: the workers layer (it reads source files); nothing here imports Ray or MLflow.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Iterable

from banditsweep.workers.provenance.source_index import _Parsed, _normal, _parsed_at, _parsed_text, find_spec_unimported

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
# A sharded trial's engine, whole (core.sharded and the shard actors; the algorithm's half is a root of
# its own, core.sharded.algorithm.sharded_half): no algorithm class names it, so no closure reaches it.
SHARDED_ROOTS = tuple((f"{PACKAGE}.{module}", None) for module in (
    "core.sharded.coordinator", "core.sharded.shard", "core.sharded.algorithm", "core.sharded.protocol",
    "core.sharded.partition", "workers.execution.sharded_trials"))
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
    return _trial_code(algorithm_class, environment_class, bool(sharded), (_current_stamp(), _shipped_version[0]))


# The sources of classes registered where they were defined and shipped to the workers with a sweep
# (workers.provenance.shipped): module -> class qualname -> (source of its file or notebook cell, or
# None, and why not). Such a module is digested from these texts (joined, each once), on the driver
# and on a worker alike: a worker's own ``__main__`` is Ray's, not the driver's.
_SHIPPED_SOURCES: dict[str, dict[str, tuple[str | None, str]]] = {}
_shipped_version = [0]


def ship_source(module: str, qualname: str, source: str | None, problem: str = "") -> None:
    """Digest ``module`` from ``source`` (the text defining ``qualname``) rather than from a file."""
    entries = _SHIPPED_SOURCES.setdefault(module, {})
    if entries.get(qualname) != (source, problem):
        entries[qualname] = (source, problem)
        _shipped_version[0] += 1


def _shipped_text(module: str) -> str | None:
    texts = [source for source, _ in _SHIPPED_SOURCES.get(module, {}).values() if source is not None]
    return "\n\n".join(dict.fromkeys(texts)) if texts else None


def module_source(module: str) -> str | None:
    """The path of a module's Python source file, if it has one (nothing is imported)."""
    return _module_source(module)


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
    half = None
    if sharded:   # imported here: core.sharded.algorithm loads scipy, which a pooled trial may never need
        from banditsweep.core.sharded.algorithm import sharded_half

        half = sharded_half(algorithm_class)
    classes = (algorithm_class, environment_class, *((half,) if half is not None else ()))
    tops = {PACKAGE} | {cls.__module__.split(".")[0] for cls in classes}
    parts: dict[str, str] = {}
    for cls in classes:
        module = cls.__module__
        shipped = _SHIPPED_SOURCES.get(module, {}).get(cls.__qualname__)
        if shipped is not None and shipped[0] is None:
            parts[f"{module}:{cls.__qualname__}"] = f"{UNKNOWN}: {shipped[1] or 'no source'}"
        elif shipped is not None:
            roots.append((module, cls.__qualname__.split(".")[0]))
        elif _module_source(module) is None:
            parts.update(_class_alone(cls))
        else:
            roots.append((module, cls.__qualname__.split(".")[0]))
    parts.update(_Closure(tops).digests(roots))
    return CodeIdentity(parts)


def _source_stamp() -> tuple:
    """Changes when a tracked source file changes (mtime and size), so that a long-lived process
    (a notebook, a test) digests edited code anew; the digests themselves are of the source only.
    Tracked: the loaded modules of the package and its plugins, and every file a digest has read
    (a module the closure reaches need not be imported)."""
    files = dict(_READ_FILES)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (name == PACKAGE or name.startswith(PACKAGE + ".") or name.split(".")[0] in _PLUGIN_TOPS):
            files[name] = path
    stamp = []
    for name, path in files.items():
        try:
            info = os.stat(path)
        except OSError:
            continue
        stamp.append((name, info.st_mtime_ns, info.st_size))
    return tuple(sorted(stamp))


# module -> the source file a digest read for it (see _source_stamp).
_READ_FILES: dict[str, str] = {}


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
        spec = find_spec_unimported(module)
        path = spec.origin if spec is not None else None
    if path is None or not path.endswith(".py") or not os.path.isfile(path):
        return None
    return path


def _parsed(module: str) -> "_Parsed | str":
    if module in _SHIPPED_SOURCES:
        text = _shipped_text(module)
        return _parsed_text(module, text) if text is not None else "no source shipped"
    path = _module_source(module)
    if path is None:
        loaded = sys.modules.get(module)
        origin = getattr(loaded, "__file__", None) or ""
        return "compiled extension" if origin.endswith((".so", ".pyd")) else "no source file"
    _READ_FILES[module] = path
    info = os.stat(path)
    return _parsed_at(module, path, info.st_mtime_ns, info.st_size)


