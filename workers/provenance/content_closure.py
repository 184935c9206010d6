"""The content digest of the code a trial reaches (workers.provenance.code_identity uses it): a
closure over definitions, digested Merkle-style, in which no file path plays a part.

Layer: the workers layer; nothing here imports Ray or MLflow, and nothing is imported to digest it.
"""

from __future__ import annotations

import hashlib
import os
from typing import Callable, Iterable

from banditsweep.workers.provenance.source_index import _Parsed, _bound_names

PACKAGE = "banditsweep"
UNKNOWN = "unknown"
DIGEST_CHARS = 24

# Not code that computes anything, so no trial's code: the registry (a name table: the class it resolves
# to is each trial's code) and this room (what a trial records about its code and machine; the sharded
# trials' module, a root whole, imports it).
NOT_CODE = (f"{PACKAGE}.core.engine.registry", f"{PACKAGE}.workers.provenance")


# Top-level names that are tables of where things live, not computation, wherever they are defined:
# ``MOVED_CLASSES`` (core.engine.state_codec) gains an entry with every move of a class a checkpoint may
# hold, which must not make every trial that can checkpoint "other code".
NOT_CODE_NAMES = frozenset({"MOVED_CLASSES"})


def _is_not_code(parsed: _Parsed, index: int) -> bool:
    """Whether a top-level statement only binds names of :data:`NOT_CODE_NAMES` (``MOVED_CLASSES = {}``,
    ``MOVED_CLASSES[old] = new``)."""
    names = set(_bound_names(parsed.statements[index])) if not parsed.is_import(index) else set()
    return bool(names) and names <= NOT_CODE_NAMES


def not_code(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in NOT_CODE)
class ContentClosure:
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

    def __init__(self, tops: set[str], parsed: Callable[[str], "_Parsed | str"]):
        self.tops, self.parsed = tops, parsed
        self.nodes: dict[tuple, tuple[str, list[tuple]]] = {}
        self.digest: dict[tuple, str] = {}
        self.problems: dict[str, str] = {}

    def tracked(self, module: str) -> bool:
        return module.split(".")[0] in self.tops and not not_code(module)

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
        if not_code(module):
            return "", [("leaf", "not code")]
        if not self.tracked(module):
            return "", [("leaf", module if kind == "module" else f"{module}.{key[2]}")]
        parsed = self.parsed(module)
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
            parts[part_name(module, self.parsed(module).path)] = content_hash(sorted(digests))
        for module, problem in self.problems.items():
            parts[part_name(module, None)] = f"{UNKNOWN}: {problem}"
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
            self.digest[key] = content_hash([text, *(self.digest[ref] for ref in refs)])
            return
        # Within a component a reference to a member is written by the member's own text: the
        # component is digested as the sorted set of its members' signatures, each member by its text
        # within that digest (where the members live and the order they were met in play no part).
        own = {key: content_hash([self.node(key)[0]]) for key in component}
        signatures = sorted(content_hash([own[key], *(f"@{own[ref]}" if ref in members else self.digest[ref]
                                                for ref in self.node(key)[1])]) for key in component)
        whole = content_hash(signatures)
        for key in component:
            self.digest[key] = content_hash([whole, own[key]])


def content_hash(texts: Iterable[str]) -> str:
    """A content digest: DIGEST_CHARS hexadecimal digits (the path-keyed digests of earlier records
    have 16, which is how the two are told apart)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:DIGEST_CHARS]


def part_name(module: str, path: str | None) -> str:
    """``core/baselines/linear.py`` for the package's modules, the dotted path as a file elsewhere."""
    parts = module.split(".")
    if parts[0] == PACKAGE:
        parts = parts[1:]
    if path is not None and os.path.basename(path) == "__init__.py":
        return "/".join([*parts, "__init__.py"])
    return "/".join(parts) + ".py" if parts else "__init__.py"


