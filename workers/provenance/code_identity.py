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

from banditsweep.workers.provenance.legacy_identity import content_digest_of, is_path_digest, path_digest, path_parts
from banditsweep.workers.provenance.source_index import _Parsed, _bound_names, _normal, _parsed_at, _parsed_text, find_spec_unimported

PACKAGE = "banditsweep"
# Not code that computes anything, so no trial's code: the registry (a name table: the class it resolves
# to is each trial's code) and this room (what a trial records about its code and machine; the sharded
# trials' module, a root whole, imports it).
NOT_CODE = (f"{PACKAGE}.core.registry", f"{PACKAGE}.workers.provenance")
# What the digests of earlier records left out (workers.provenance.legacy_identity): the registry only.
_PATH_DIGEST_NOT_CODE = f"{PACKAGE}.core.registry"


# Top-level names that are tables of where things live, not computation, wherever they are defined:
# ``MOVED_CLASSES`` (core.state_codec) gains an entry with every move of a class a checkpoint may
# hold, which must not make every trial that can checkpoint "other code".
NOT_CODE_NAMES = frozenset({"MOVED_CLASSES"})


def _is_not_code(parsed: _Parsed, index: int) -> bool:
    """Whether a top-level statement only binds names of :data:`NOT_CODE_NAMES` (``MOVED_CLASSES = {}``,
    ``MOVED_CLASSES[old] = new``)."""
    names = set(_bound_names(parsed.statements[index])) if not parsed.is_import(index) else set()
    return bool(names) and names <= NOT_CODE_NAMES


def _not_code(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in NOT_CODE)
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
DIGEST_CHARS = 24


@dataclass(frozen=True)
class CodeIdentity:
    """The code of one trial: ``digest``, of its content (what the trial's roots reach, wherever it
    lives), and for messages ``parts``, which maps each file it reaches (``core/algorithms/linear.py``)
    to a digest of what it uses there, or to ``"unknown: why"`` where the source could not be read.
    ``path_digest`` and ``path_parts`` (computed on demand) are the same code in the terms of records
    stamped before digests were of content (workers.provenance.legacy_identity)."""

    parts: dict[str, str]
    digest: str | None           # None: not known (running_code: the loaded code is not the files')
    _roots: tuple = ()
    _tops: frozenset = frozenset()
    # (module, SHA-256 of its source's bytes) of every module the digest read: another process with
    # the same bytes would compute the same identity (:func:`code_of`'s ``known``).
    sources: tuple = ()

    @property
    def unknown(self) -> list[str]:
        """The parts whose source could not be digested, with why."""
        return [f"{name} ({value})" for name, value in sorted(self.parts.items()) if value.startswith(UNKNOWN)]

    @functools.cached_property
    def path_parts(self) -> dict[str, str]:
        # A class digested alone: the same hash, of which earlier records kept the first 16 digits.
        extra = {name: value if value.startswith(UNKNOWN) else value[:16]
                 for name, value in self.parts.items() if ":" in name}
        def tracked(module: str) -> bool:
            return module.split(".")[0] in self._tops and module != _PATH_DIGEST_NOT_CODE

        return {**path_parts(self._roots, _parsed, tracked, _part_name), **extra}

    @functools.cached_property
    def path_digest(self) -> str:
        return path_digest(self.path_parts)

    def same_code(self, stored: str | None) -> bool:
        """Whether a stored code digest (of either kind) is of this code."""
        if not stored:
            return False
        if not is_path_digest(stored):
            return stored == self.digest
        return content_digest_of(stored) == self.digest or stored == self.path_digest

    def changed_since(self, stored_parts: dict[str, str] | None, stored_digest: str | None) -> list[str]:
        """The files whose code differs from a record's (``stored_parts``, by its kind)."""
        today = self.path_parts if is_path_digest(stored_digest) else self.parts
        return changed_parts(stored_parts or {}, today)


def changed_parts(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The files of ``new`` whose code differs from ``old``'s, named where they are now: a file
    added or edited; not one that moved unchanged (its digest is in ``old`` under another name), nor
    one no longer reached (what stopped reaching it changed, and is named)."""
    before = set(old.values())
    return sorted(name for name, value in new.items() if old.get(name) != value and value not in before)


def code_of(spec, known: CodeIdentity | None = None) -> CodeIdentity:
    """The code identity of the trial ``spec`` (a core.trial.TrialSpec), through the registry.
    ``known``: the identity another process (the driver) computed for it, taken where this process
    reads the same bytes in every module it was computed from; a trial actor so spares the parse of
    every source file (0.2 s of CPU per actor, 16 actors on 2 cores) and still records the code it runs."""
    if known is not None and known.sources and all(_source_sha(module) == sha for module, sha in known.sources):
        return known
    from banditsweep.core import registry

    return trial_code(spec.policy_class, registry.environment_class(spec.environment["kind"]), spec.sharded)


def running_code(spec, known: CodeIdentity | None = None) -> CodeIdentity:
    """The code identity to stamp on a trial this process runs: :func:`code_of`, unless a source file
    of a module this process has loaded changed on disk since it was loaded (an edit while a sweep
    runs): the file then says what the process would load, not what it runs, and the trial's code is
    recorded unknown, naming the file (``status`` counts it, ``run --rerun-changed`` runs it again)."""
    code = code_of(spec, known)
    changed = [name for name in _changed_since_loaded() if name in {module for module, _ in code.sources}]
    if not changed:
        return code
    files = ", ".join(_part_name(name, sys.modules[name].__file__) for name in sorted(changed)[:4])
    return CodeIdentity({name: f"{UNKNOWN}: {files} changed on disk after this process loaded it" for name in
                         (_part_name(m, sys.modules[m].__file__) for m in changed)}, None, code._roots, code._tops)


# module -> (id of the module object, mtime, size) of its source when this process first saw it loaded:
# what it runs. A module imported anew (another object) is noted anew.
_LOADED: dict[str, tuple[int, int, int]] = {}


def note_loaded() -> None:
    """Note the source files of the package's (and digested plugins') modules loaded now: called when
    a trial actor starts and before each batch, close to when each module was imported."""
    _changed_since_loaded()


def _changed_since_loaded() -> list[str]:
    changed = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or not (name == PACKAGE or name.startswith(PACKAGE + ".") or name.split(".")[0] in _PLUGIN_TOPS):
            continue
        try:
            info = os.stat(path)
        except OSError:
            continue
        now = (id(module), info.st_mtime_ns, info.st_size)
        before = _LOADED.setdefault(name, now)
        if before[0] != id(module):
            _LOADED[name] = now
        elif before != now:
            changed.append(name)
    return changed


def _source_sha(module: str) -> str | None:
    if module in _SHIPPED_SOURCES:
        text = _shipped_text(module)
        return hashlib.sha256(text.encode()).hexdigest() if text is not None else None
    path = _module_source(module)
    if path is None:
        return None
    info = os.stat(path)
    return _file_sha(path, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=1024)
def _file_sha(path: str, mtime: int, size: int) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


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
        elif shipped is not None or _module_source(module) is not None:
            roots.append((module, cls.__qualname__.split(".")[0]))
        else:
            parts.update(_class_alone(cls))
    alone = sorted(f"{name}={value}" for name, value in parts.items())
    closure = _Closure(tops)
    root_digests, reached = closure.digests(roots)
    reached_modules = {key[1] for key in closure.nodes if key[0] in ("stmt", "module", "preamble", "name")
                       and closure.tracked(key[1])}
    parts.update(reached)
    # The trial's digest: its roots' content digests as a set (which module holds them plays no part),
    # with the classes digested alone (no file behind them) by name and text.
    digest = _hash(["trial", *sorted(root_digests), *alone])
    sources = () if alone else tuple(sorted((module, _source_sha(module)) for module in reached_modules))
    return CodeIdentity(parts, digest, tuple(roots), frozenset(tops), sources)


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
    """The definitions reached from some roots, each digested by its content (Merkle-style).

    A node is a top-level statement of a module (an import one per name it binds), the statements
    binding one name of a module, a whole module, or a module's preamble (its statements that bind
    nothing, run whenever it is imported: every statement of the module reaches it). Its own text is
    its AST with the names it resolves written ``@`` (source_index's ``bare``); its digest covers
    that text and, in order, the digests of what those names resolve to, so a definition's digest
    is that of everything it reaches and of nothing else, and no file path enters any of them.
    Definitions that reach each other (recursion, a class naming itself) are digested together as
    one strongly connected component, each by its own text within the component's digest.
    Names outside the tracked packages are leaves named by what they are (``numpy.linalg.solve``;
    the libraries' versions are in the runtime), the name table of the registry a leaf of its own.
    """

    def __init__(self, tops: set[str]):
        self.tops = tops
        _PLUGIN_TOPS.update(tops - {PACKAGE})
        self.nodes: dict[tuple, tuple[str, list[tuple]]] = {}
        self.digest: dict[tuple, str] = {}
        self.problems: dict[str, str] = {}

    def tracked(self, module: str) -> bool:
        return module.split(".")[0] in self.tops and not _not_code(module)

    def root(self, module: str, name: str | None) -> tuple:
        return ("module", module) if name is None else ("name", module, name)

    def node(self, key: tuple) -> tuple[str, list[tuple]]:
        """(own text, references in order) of a node."""
        found = self.nodes.get(key)
        if found is None:
            found = self.nodes[key] = self._expand(key)
        return found

    def _expand(self, key: tuple) -> tuple[str, list[tuple]]:
        kind, module = key[0], key[1]
        if kind == "leaf":
            return module, []
        if _not_code(module):
            return "", [("leaf", "not code")]
        if not self.tracked(module):
            return "", [("leaf", module if kind == "module" else f"{module}.{key[2]}")]
        parsed = _parsed(module)
        if isinstance(parsed, str):
            self.problems[module] = parsed
            return "", [("leaf", f"{UNKNOWN}: {parsed}")]
        if kind == "module":
            return "module", [("stmt", module, i, None) for i in range(len(parsed.statements))
                              if not _is_not_code(parsed, i)]
        if kind == "preamble":
            return "preamble", [("stmt", module, i, None) for i in sorted(parsed.preamble)]
        if kind == "name":
            if key[2] in NOT_CODE_NAMES:
                return "", [("leaf", "not code")]
            indices = parsed.binding.get(key[2], ())
            refs = [("stmt", module, i, key[2] if parsed.is_import(i) else None) for i in indices]
            return ("name" if indices else f"name not bound: {key[2]}"), refs
        index, alias = key[2], key[3]
        refs = [self.root(target, name) for target, name in parsed.references(index, alias)]
        if not parsed.is_import(index) and index not in parsed.preamble and parsed.preamble:
            refs.append(("preamble", module))
        return parsed.bare(index, alias), refs

    def digests(self, roots: Iterable[tuple[str, str | None]]) -> tuple[list[str], dict[str, str]]:
        """The digest of each root, and per module reached (named by its file) a digest of the own
        texts of its reached statements, for saying which files changed: a file is named where its
        own code changed, not where it merely reaches a change (that is in the roots' digests), and a
        file moved unchanged keeps its value under its new name."""
        keys = [self.root(module, name) for module, name in roots]
        for key in keys:
            if key not in self.digest:
                self._components(key)
        by_module: dict[str, list[str]] = {}
        for key, (text, _) in self.nodes.items():
            if key[0] == "stmt":
                by_module.setdefault(key[1], []).append(text)
        parts = {}
        for module, digests in by_module.items():
            parts[_part_name(module, _parsed(module).path)] = _hash(sorted(digests))
        for module, problem in self.problems.items():
            parts[_part_name(module, None)] = f"{UNKNOWN}: {problem}"
        return [self.digest[key] for key in keys], parts

    def _components(self, start: tuple) -> None:
        """Tarjan's strongly connected components from ``start`` (without recursion: closures run
        deep), digesting each component when it closes, after everything it reaches."""
        index: dict[tuple, int] = {}
        low: dict[tuple, int] = {}
        stack: list[tuple] = []
        on_stack: set[tuple] = set()

        def enter(key):
            index[key] = low[key] = len(index)
            stack.append(key)
            on_stack.add(key)
            return key, iter(self.node(key)[1])

        work = [enter(start)]
        while work:
            key, refs = work[-1]
            for ref in refs:
                if ref in self.digest:
                    continue
                if ref not in index:
                    work.append(enter(ref))
                    break
                if ref in on_stack:
                    low[key] = min(low[key], index[ref])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[key])
                if low[key] == index[key]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == key:
                            break
                    self._digest_component(component)

    def _digest_component(self, component: list[tuple]) -> None:
        members = set(component)
        if len(component) == 1 and component[0] not in self.node(component[0])[1]:
            key = component[0]
            text, refs = self.node(key)
            self.digest[key] = _hash([text, *(self.digest[ref] for ref in refs)])
            return
        # Within a component a reference to a member is written by the member's own text: the
        # component is digested as the sorted set of its members' signatures, each member by its text
        # within that digest (where the members live and the order they were met in play no part).
        own = {key: _hash([self.node(key)[0]]) for key in component}
        signatures = sorted(_hash([own[key], *(f"@{own[ref]}" if ref in members else self.digest[ref]
                                                for ref in self.node(key)[1])]) for key in component)
        whole = _hash(signatures)
        for key in component:
            self.digest[key] = _hash([whole, own[key]])


def _hash(texts: Iterable[str]) -> str:
    """A content digest: DIGEST_CHARS hexadecimal digits (the path-keyed digests of earlier records
    have 16, which is how the two are told apart)."""
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


