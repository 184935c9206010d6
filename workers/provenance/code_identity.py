"""The code a trial runs on, as digests that name what changed, and the machine it ran on.

A trial's id is its content (core.engine.trial.TrialSpec.trial_id); what its numbers *mean* also depends
on the code that computed them. :func:`trial_code` answers, for a trial, one digest per module of
that code, each over only the definitions the trial reaches:

- its algorithm's class (with its base classes and everything it names, followed through imports),
- its environment's class likewise,
- the code every trial runs: the round loop and the trial (``core.engine.round_loop``, ``core.engine.trial``'s
  ``TrialRun`` and ``run_trials``), seeding, and the trial actor's device and thread set-up
  (``workers.execution.trial_setup``); a sharded trial also its engine and its algorithm's sharded half.

The closure is drawn from the source, statically (nothing is imported to digest it): a top-level
definition (a class, function or assignment) names other definitions of its module and imported
ones; each reached definition is normalised (its AST without docstrings, so comments and
docstrings change nothing) and hashed per module. So a change to LinUCB's methods changes the digest
of ``core/baselines/linear.py`` for LinUCB's trials only (LinTS and LinRBMLE, in the same module,
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

from banditsweep.workers.provenance.legacy_identity import content_digest_of, is_path_digest, path_digest, path_parts
from banditsweep.workers.provenance.content_closure import PACKAGE, UNKNOWN, ContentClosure, content_hash, part_name
from banditsweep.workers.provenance.source_index import _Parsed, _normal, _parsed_at, _parsed_text, find_spec_unimported

# What the digests of earlier records left out (workers.provenance.legacy_identity): the registry only.
_PATH_DIGEST_NOT_CODE = f"{PACKAGE}.core.engine.registry"
# What every trial runs, whatever its algorithm: (module, top-level name), or (module, None) whole.
SHARED_ROOTS = (
    (f"{PACKAGE}.core.engine.trial", "TrialRun"),
    (f"{PACKAGE}.core.engine.trial", "run_trials"),
    (f"{PACKAGE}.core.engine.round_loop", None),
    (f"{PACKAGE}.core.engine.seeding", None),
    (f"{PACKAGE}.workers.execution.trial_setup", None),
)
# A sharded trial's engine, whole (core.kernel.sharded and the shard actors; the algorithm's half is a root of
# its own, core.kernel.sharded.algorithm.sharded_half): no algorithm class names it, so no closure reaches it.
SHARDED_ROOTS = tuple((f"{PACKAGE}.{module}", None) for module in (
    "core.kernel.sharded.coordinator", "core.kernel.sharded.shard", "core.kernel.sharded.algorithm",
    "core.kernel.sharded.protocol", "core.kernel.sharded.partition", "workers.execution.sharded_trials"))


@dataclass(frozen=True)
class CodeIdentity:
    """The code of one trial: ``digest``, of its content (what the trial's roots reach, wherever it
    lives), and for messages ``parts``, which maps each file it reaches (``core/baselines/linear.py``)
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

        return {**path_parts(self._roots, _parsed, tracked, part_name), **extra}

    @functools.cached_property
    def path_digest(self) -> str:
        return path_digest(self.path_parts)

    def same_code(self, stored: str | None) -> bool:
        """Whether a stored code digest (of either kind) is of this code."""
        if not stored:
            return False
        if not is_path_digest(stored):
            return content_digest_of(stored) == self.digest   # itself, or what a move made of it
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
    """The code identity of the trial ``spec`` (a core.engine.trial.TrialSpec), through the registry.
    ``known``: the identity another process (the driver) computed for it, taken where this process
    reads the same bytes in every module it was computed from; a trial actor so spares the parse of
    every source file (0.2 s of CPU per actor, 16 actors on 2 cores) and still records the code it runs."""
    if known is not None and known.sources and all(_source_sha(module) == sha for module, sha in known.sources):
        return known
    from banditsweep.core.engine import registry

    return trial_code(spec.policy_class, registry.environment_class(spec.environment["kind"]), spec.sharded)


def known_code(spec) -> CodeIdentity | None:
    """:func:`code_of` for the driver to send with a batch (the actor takes it where its sources have the
    same bytes); None where it cannot be had here (the actor digests it, and fails the trial where it
    cannot either)."""
    try:
        return code_of(spec)
    except Exception:
        return None


def running_code(spec, known: CodeIdentity | None = None) -> CodeIdentity:
    """The code identity to stamp on a trial this process runs: :func:`code_of`, unless a source file
    of a module this process has loaded changed on disk since it was loaded (an edit while a sweep
    runs): the file then says what the process would load, not what it runs, and the trial's code is
    recorded unknown, naming the file (``status`` counts it, ``run --rerun-changed`` runs it again)."""
    code = code_of(spec, known)
    changed = [name for name in _changed_since_loaded() if name in {module for module, _ in code.sources}]
    if not changed:
        return code
    files = ", ".join(part_name(name, sys.modules[name].__file__) for name in sorted(changed)[:4])
    return CodeIdentity({name: f"{UNKNOWN}: {files} changed on disk after this process loaded it" for name in
                         (part_name(m, sys.modules[m].__file__) for m in changed)}, None, code._roots, code._tops)


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
    if sharded:   # imported here: core.kernel.sharded.algorithm loads scipy, which a pooled trial may never need
        from banditsweep.core.kernel.sharded.algorithm import sharded_half

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
    _PLUGIN_TOPS.update(tops - {PACKAGE})
    closure = ContentClosure(tops, _parsed)
    root_digests, reached = closure.digests(roots)
    reached_modules = {key[1] for key in closure.nodes if key[0] in ("stmt", "module", "preamble", "name")
                       and closure.tracked(key[1])}
    parts.update(reached)
    # The trial's digest: its roots' content digests as a set (which module holds them plays no part),
    # with the classes digested alone (no file behind them) by name and text.
    digest = content_hash(["trial", *sorted(root_digests), *alone])
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
    return {name: content_hash([_normal(node) for node in tree.body])}


def _dedent(source: str) -> str:
    import textwrap

    return textwrap.dedent(source)


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


