"""Reading a sweep spec: the file (a regular UTF-8 text file of at most :data:`MAX_SPEC_BYTES`), its
YAML (the safe loader, refusing what it lets pass silently: a key given twice, aliases that refer to
themselves or expand the document beyond :data:`MAX_VALUES` values, nesting deeper than
``MAX_DEPTH``), and its values where pydantic's lax mode would take them for others: numbers that
are not finite, integers beyond int64, booleans where a number is expected, floats where an integer
is.
"""

from __future__ import annotations

import inspect
import math
import os
import stat
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel

from banditsweep.sweeps.spec.errors import MAX_DEPTH, SpecError, big_int, key_path, models_in, show, value_at

MAX_SPEC_BYTES = 1 << 20     # a spec file is at most 1 MiB
MAX_VALUES = 100_000         # values (mappings, lists, scalars) of a spec with every alias expanded
# Every integer of a spec is stored (trials table, journal, MLflow) as an int64.
MIN_INT, MAX_INT = -(2**63), 2**63 - 1


class SpecText(str):
    """A spec given as YAML text (or as data, written as YAML) rather than as a file: the string is
    the name messages give it (``<spec>``), ``text`` the YAML (``banditsweep.run(text_or_dict)``)."""

    text: str

    def __new__(cls, text: str, name: str = "<spec>") -> "SpecText":
        spec = super().__new__(cls, name)
        spec.text = text
        return spec

    def __reduce__(self):
        return SpecText, (self.text, str(self))


def read_spec_text(path: str | Path) -> str:
    """A spec file's text: a regular file (not a FIFO, which would block, a device such as /dev/zero,
    or a directory) of at most :data:`MAX_SPEC_BYTES`, UTF-8; the text of a :class:`SpecText`."""
    source = str(path)
    if isinstance(path, SpecText):
        if len(path.text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
            raise SpecError(source, "", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB; a spec is a small "
                                        "YAML text")
        return path.text
    try:
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer (forever).
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise SpecError(source, "", f"cannot read the spec file ({error.strerror or error})") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise SpecError(source, "", "cannot read the spec file (Is a directory); a spec is a YAML text file")
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise SpecError(source, "", f"not a regular file: {kind}; a spec is a YAML text file")
    with os.fdopen(descriptor, "rb") as handle:
        try:
            data = handle.read(MAX_SPEC_BYTES + 1)   # never more, however large the file
        except OSError as error:
            raise SpecError(source, "", f"cannot read the spec file ({error.strerror or error})") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(source, "", f"the spec file is larger than {MAX_SPEC_BYTES // 1024} KiB; a spec is a "
                                    f"small YAML text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SpecError(source, "", f"not a UTF-8 text file (byte {data[error.start]:#04x} at offset {error.start}); "
                                    f"a spec is a YAML text file in UTF-8") from None


# ---------------------------------------------------------------------------------------------
# Reading the YAML: one document, every key once, aliases that do not explode, finite numbers.


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader (no Python objects, no code) that refuses what the safe loader lets pass
    silently: a key given twice (the last one would win), aliases referring to themselves, documents
    whose aliases expand them beyond :data:`MAX_VALUES` values, nesting beyond :data:`MAX_DEPTH`."""

    def __init__(self, stream, source: str):
        super().__init__(stream)
        self.source = source

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # Python refuses to read integers of more than 4300 digits (a ValueError, not a YAML error);
        # anything beyond 20 digits is out of int64's range anyway.
        digits = sum(1 for c in str(node.value) if c.isalnum())
        if digits > 40:
            raise SpecError(self.source, f"line {node.start_mark.line + 1}",
                            f"integer out of range (got {digits} digits); the results store holds integers from "
                            f"-2**63 to 2**63-1 (int64)")
        return super().construct_yaml_int(node)

    def check_node(self, root: yaml.Node) -> None:
        sizes: dict[int, int] = {}
        active: set[int] = set()

        def size(node: yaml.Node, path: tuple, depth: int) -> int:
            key = id(node)
            if key in sizes:
                return sizes[key]
            if key in active:
                raise SpecError(self.source, key_path(path), f"a YAML alias refers to a value that contains it "
                                                          f"(line {node.start_mark.line + 1}); aliases must not nest themselves")
            if depth > MAX_DEPTH:
                raise SpecError(self.source, key_path(path), f"nested more than {MAX_DEPTH} levels deep "
                                                          f"(line {node.start_mark.line + 1})")
            active.add(key)
            total = 1
            if isinstance(node, yaml.SequenceNode):
                for index, child in enumerate(node.value):
                    total += size(child, (*path, index), depth + 1)
            elif isinstance(node, yaml.MappingNode):
                seen: dict[tuple, int] = {}
                for key_node, value_node in node.value:
                    name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                    if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                        line = key_node.start_mark.line + 1
                        identity = (key_node.tag, key_node.value)
                        if identity in seen:
                            lines = f"lines {seen[identity]} and {line}" if seen[identity] != line else f"line {line}"
                            raise SpecError(self.source, key_path((*path, name)),
                                            f"key {show(name)} is given twice ({lines}); give each key once")
                        seen[identity] = line
                    total += size(key_node, path, depth + 1) + size(value_node, (*path, name), depth + 1)
            active.discard(key)
            if total > MAX_VALUES:
                raise SpecError(self.source, key_path(path), f"expands to more than {MAX_VALUES} values through "
                                                          f"YAML aliases; a spec holds at most {MAX_VALUES}")
            sizes[key] = total
            return total

        size(root, (), 0)


_SpecLoader.add_constructor("tag:yaml.org,2002:int", _SpecLoader.construct_yaml_int)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error on one line: what and where."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = error.problem or error.context or "syntax error"
        context = f" ({error.context})" if error.context and error.problem else ""
        return f"not valid YAML{where}: {what}{context}"
    return f"not valid YAML: {error}"


def load_yaml(text: str, source: str) -> Any:
    """The data of one YAML document, read safely and checked (see :class:`_SpecLoader`)."""
    loader = _SpecLoader(text, source)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        loader.check_node(node)
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise SpecError(source, "", _yaml_problem(error)) from None
    except RecursionError:
        raise SpecError(source, "", f"not valid YAML: nested too deeply; at most {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def check_values(source: str, value: Any, path: tuple = ()) -> None:
    """Every number finite (``.inf`` and ``.nan`` have no place in a trial's content: its id is
    canonical JSON) and every integer an int64: the results store holds no other (a larger one was
    written to the journal, and every later run failed reading it back)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(source, key_path(path), f"must be a finite number (got {show(value)})")
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_INT <= value <= MAX_INT:
        raise SpecError(source, key_path(path), f"integer out of range (got {big_int(value)}); the results store holds "
                                            f"integers from -2**63 to 2**63-1 (int64)")
    if isinstance(value, dict):
        for key, item in value.items():
            check_values(source, item, (*path, key if isinstance(key, (str, int)) else show(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_values(source, item, (*path, index))


# ---------------------------------------------------------------------------------------------
# Booleans where a number is expected, floats where an integer is (pydantic's lax mode takes true
# as 1 and 10.0 as 10).


def _admits(annotation, kind: type) -> bool:
    """Whether ``annotation`` takes values of type ``kind`` (bool, int or float) as they are."""
    if annotation is kind or annotation is Any or annotation is object:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(type(arg) is kind for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType, Annotated):
        return any(_admits(arg, kind) for arg in typing.get_args(annotation))
    return False


def _misplaced(value: Any, annotation) -> bool:
    """A boolean where ``annotation`` expects something else, or a float where it expects an integer."""
    if isinstance(value, bool):
        return not _admits(annotation, bool)
    if isinstance(value, float):
        return _admits(annotation, int) and not _admits(annotation, float)
    return False


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(show(arg) for arg in typing.get_args(annotation))
    if origin is Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _boolean_where_number(value: Any, annotation) -> tuple | None:
    """The path (within ``value``) of a boolean that ``annotation`` expects to be something else, or
    of a float where it expects an integer, if any."""
    if isinstance(value, (bool, float)):
        return () if _misplaced(value, annotation) else None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _boolean_where_number(value, args[0])
    if origin in (typing.Union, types.UnionType):
        found = [_boolean_where_number(value, arg) for arg in args if _could_be(value, arg)]
        return None if not found or None in found else found[0]
    if isinstance(value, list) and origin in (list, tuple, set, frozenset, typing.Sequence) and args:
        for index, item in enumerate(value):
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                item_type = args[index] if index < len(args) else Any
            else:
                item_type = args[0]
            path = _boolean_where_number(item, item_type)
            if path is not None:
                return (index, *path)
    if isinstance(value, dict):
        if origin is dict and len(args) == 2:
            for key, item in value.items():
                path = _boolean_where_number(item, args[1])
                if path is not None:
                    return (key, *path)
        for model in models_in(annotation)[:1] if inspect.isclass(annotation) else []:
            for key, item in value.items():
                if key in model.model_fields:
                    path = _boolean_where_number(item, model.model_fields[key].annotation)
                    if path is not None:
                        return (key, *path)
    return None


def _could_be(value: Any, annotation) -> bool:
    """Whether ``value`` could be meant as a member ``annotation`` of a union (a mapping as a model
    only if the model has all of its keys)."""
    if annotation is type(None):
        return value is None
    if isinstance(value, dict) and inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return all(key in annotation.model_fields for key in value)
    return True


def check_booleans(source: str, where: str, values: dict[str, Any], model: type[BaseModel],
                    candidates: bool = False) -> None:
    """No boolean where ``model``'s field expects a number, no float where it expects an integer;
    ``candidates``: each value is a list of candidate values (a grid)."""
    for key, value in values.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            continue
        annotation = list[field.annotation] if candidates else field.annotation
        path = _boolean_where_number(value, annotation)
        if path is not None:
            location = f"{where}.{key}" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            found = value_at(value, path)
            kind = "a boolean" if isinstance(found, bool) else "a float"
            raise SpecError(source, location, f"{kind} is not allowed here (got {show(found)}); "
                                              f"allowed: {_type_name(field.annotation)}")
