"""A module's source as the code identity reads it (workers.provenance.code_identity): its
top-level statements, each normalised (its AST without positions, comments or docstrings), which
names each binds and what each names, followed through imports. Nothing is imported here.
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def find_spec_unimported(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of module ``name`` found without importing anything. ``importlib.util.find_spec``
    imports a dotted name's parents (``torch.nn`` imports torch: 1.2 s in every trial
    actor, which digests names such as ``torch.nn`` it never follows); here a loaded module gives its
    own spec, a top-level name is looked up by the import system's finders (which import nothing),
    and each further part on its parent's search path."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return getattr(loaded, "__spec__", None) or importlib.machinery.ModuleSpec(name, None)
    parent, _, _ = name.rpartition(".")
    try:
        if not parent:
            return importlib.util.find_spec(name)
        parent_spec = find_spec_unimported(parent)
        locations = parent_spec.submodule_search_locations if parent_spec is not None else None
        if locations is None:
            return None
        return importlib.machinery.PathFinder.find_spec(name, list(locations))
    except (ImportError, ValueError, AttributeError):
        return None


def _is_module(name: str) -> bool:
    return find_spec_unimported(name) is not None


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
    _bare: dict[tuple[int, str | None], str] = field(default_factory=dict)
    _chain_cache: dict[tuple[int, str | None], list] = field(default_factory=dict)

    def is_import(self, index: int) -> bool:
        return isinstance(self.statements[index], (ast.Import, ast.ImportFrom))

    def hidden(self, index: int) -> frozenset[str]:
        """The names statement ``index`` resolves to definitions (of its module or imported, also by
        imports inside it): :meth:`bare` writes them as ``@``, since what they name is digested as
        a reference, wherever it lives."""
        names = set(self.binding) | set(self.imports)
        for inner in ast.walk(self.statements[index]):
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                names.update(bound for bound, _ in _import_targets(inner, self.package))
        return frozenset(names)

    def bare(self, index: int, alias: str | None = None) -> str:
        """Statement ``index`` as text that says what it does but not where anything it names lives:
        its normal form with the names it resolves written ``@`` and every import (here or nested)
        reduced to the names it binds (for an import reached through one name, that name alone).
        Moving a module rewrites imports and nothing here."""
        text = self._bare.get((index, alias))
        if text is None:
            node = self.statements[index]
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [bound for bound, _ in _import_targets(node, self.package) if alias is None or bound == alias]
                text = f"Import({','.join(names)})"
            else:
                text = _normal(node, self.hidden(index))
            self._bare[(index, alias)] = text
        return text

    def references(self, index: int, name: str | None) -> list[tuple[str, str | None]]:
        """The definitions statement ``index`` names (for an import, only what binds ``name``)."""
        found: list[tuple[str, str | None]] = []
        for kind, target, rest in self._chains(index, name):
            if kind == "import":
                found.append(target)
            elif kind == "imported":
                found.extend(_resolve(target[0], target[1], rest))
            else:
                found.append((self.module, target))
        return found

    def _chains(self, index: int, name: str | None) -> list[tuple[str, Any, tuple[str, ...]]]:
        """What :meth:`references` resolves, read off the AST once per statement: an import's targets,
        or each name chain with where its head comes from (an import, or this module)."""
        key = (index, name)
        chains = self._chain_cache.get(key)
        if chains is not None:
            return chains
        node = self.statements[index]
        chains = []
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias_name, target in _import_targets(node, self.package):
                if name is None or alias_name == name:
                    chains.append(("import", target, ()))
        else:
            local = dict(self.imports)
            for inner in ast.walk(node):   # imports inside functions bind names there
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    for alias_name, target in _import_targets(inner, self.package):
                        local[alias_name] = target
            for chain in _name_chains(node):
                head = chain[0]
                if head in local:
                    chains.append(("imported", local[head], chain[1:]))
                elif head in self.binding:
                    chains.append(("own", head, ()))
        self._chain_cache[key] = chains
        return chains


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
    return _parsed_tree(module, path, tree)


@functools.lru_cache(maxsize=64)
def _parsed_text(module: str, text: str) -> "_Parsed | str":
    """A shipped module's source (``_SHIPPED_SOURCES``), parsed as a file of that module would be."""
    try:
        tree = ast.parse(text, filename=f"<{module}>")
    except (SyntaxError, ValueError) as error:
        return f"source not readable ({type(error).__name__})"
    return _parsed_tree(module, f"<{module}>", tree)


def _parsed_tree(module: str, path: str, tree: ast.Module) -> "_Parsed":
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


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


_SKIPPED_FIELDS = frozenset({"ctx", "type_comment", "kind"})


def _normal(node: Any, hidden: frozenset[str] = frozenset()) -> str:
    """A statement as text that changes only when its meaning does: the AST's node types and
    fields (no positions, comments or docstrings; empty fields left out, so that another Python's
    new empty fields change nothing). With ``hidden`` (see :meth:`_Parsed.bare`), a name in it is
    written ``Name(@)`` and an import as the names it binds."""
    if isinstance(node, ast.AST):
        if hidden:
            if isinstance(node, ast.Name) and node.id in hidden:
                return "Name(@)"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                return f"Import({','.join(bound for bound, _ in _import_targets(node, ''))})"
        fields = []
        for name, value in ast.iter_fields(node):
            if name in _SKIPPED_FIELDS or value is None or value == []:
                continue
            if isinstance(value, list) and name in ("body", "orelse", "finalbody"):
                value = [item for item in value if not _is_docstring(item)]
            fields.append(f"{name}={_normal(value, hidden)}")
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_normal(item, hidden) for item in node) + "]"
    return repr(node)
