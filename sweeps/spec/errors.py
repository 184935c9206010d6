"""How a sweep spec's mistakes are said: one line ``<file>: <key path>: <what is wrong> (got
<value>); <what is allowed>`` of at most :data:`MAX_MESSAGE` characters, values shown as the author
wrote them in YAML and shortened. :func:`raise_from_validation` turns pydantic's first error into
such a line, naming the key as the author wrote it (not pydantic's location, which names the
members of unions) and, in a choice between kinds of mapping, the kind the author chose.
"""

from __future__ import annotations

import difflib
import inspect
import math
import reprlib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from banditsweep.workers import one_line as _one_line

MAX_MESSAGE = 500            # characters of one error message, at most
MAX_DEPTH = 32               # nesting of mappings and lists

_shorten = reprlib.Repr()
_shorten.maxstring = _shorten.maxother = 80
_shorten.maxlist = _shorten.maxtuple = _shorten.maxdict = _shorten.maxset = 8
_shorten.maxlevel = 3


def show(value: Any) -> str:
    """A value as the user wrote it in YAML (``true``, ``null``, ``.inf``), shortened: a message
    never grows with the input."""
    if value is True or value is False:
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, int):
        return big_int(value)
    return _shorten.repr(value)


def big_int(value: int) -> str:
    """An integer of any size, shortened (Python refuses str() of ints beyond 4300 digits)."""
    digits = value.bit_length() * 0.30103
    if digits < 60:
        return str(value)
    return f"{'-' if value < 0 else ''}about 10**{int(digits)}"


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line of at most ``limit`` characters (workers.errors.one_line, at a spec
    message's length)."""
    return _one_line(text, limit)


class SpecError(ValueError):
    """A sweep spec is invalid. ``str(error)`` names the file, the key and what is allowed: one line
    of at most :data:`MAX_MESSAGE` characters."""

    def __init__(self, source: str, location: str, message: str):
        source, location = one_line(source, 200), one_line(location, 200)
        self.source, self.location, self.message = source, location, one_line(message)
        super().__init__(one_line(f"{source}: {location}: {message}" if location else f"{source}: {message}"))


def key_path(parts) -> str:
    """A location as the spec's author writes it: ``algorithms[0].grid.nu``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _input_loc(loc: tuple, raw: Any) -> tuple:
    """The parts of a pydantic error location that are keys or indices of the input (pydantic adds
    the names of union members, ``[key]`` and the like, which mean nothing to the spec's author)."""
    parts, node = [], raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            parts.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(part)
            node = node[part]
        elif isinstance(node, dict) and part == "[key]":
            continue
        elif not isinstance(node, (dict, list)) or isinstance(part, str) and part[:1].isupper():
            continue   # a union member's name ('GridDomain', 'int', 'function-before[...]')
        else:
            parts.append(part)   # a missing key: still the name the message is about
            node = None
    return tuple(parts)


def models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation names (the members of a union among them)."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in models_in(arg)]


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys allowed in the mapping at ``loc`` (a pydantic location, last part the key itself)."""
    return list(dict.fromkeys(name for m in _models_at(model, loc[:-1]) for name in m.model_fields))


def _models_at(model: type[BaseModel], loc: tuple) -> list[type[BaseModel]]:
    """The models whose mapping sits at pydantic location ``loc`` (a union: several)."""
    models = [model]
    for part in loc:
        if isinstance(part, int) or part == "[key]":
            continue
        named = [m for m in models if m.__name__ == part]
        if named:
            models = named
            continue
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            continue
        models = models_in(fields[0].annotation)
        if not models:
            return []
    return models


def did_you_mean(name: Any, candidates) -> str:
    """`` (did you mean 'horizon'?)`` for a misspelt name, else ''."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [c for c in candidates if isinstance(c, str)], n=1, cutoff=0.6)
    return f" (did you mean {show(close[0])}?)" if close else ""


def _member_at(loc: tuple, raw: Any, kind: str) -> int | None:
    """The index in ``loc`` of a union member's name (pydantic's ``GridDomain``, ``int``...), if any:
    a part the input does not have that is not the missing key itself."""
    node = raw
    for index, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif part == "[key]":
            return None
        elif isinstance(part, str) and (index < len(loc) - 1 or kind != "missing"):
            return index
        else:
            return None
    return None


def _choose_variant(errors: list[dict], raw: Any, model: type[BaseModel] | None):
    """The errors of the union member the author chose (``domain: {uniform: 0, dim: 2}`` is the
    uniform domain: its error, not the grid's missing ``grid``), and a note naming that choice; a
    SpecError's (location parts, message) where the input matches no member at all."""
    note = ""
    for _ in range(MAX_DEPTH):
        first = errors[0]
        index = _member_at(tuple(first["loc"]), raw, first["type"])
        if index is None:
            return errors, note, None
        prefix = tuple(first["loc"][:index])
        group = [e for e in errors if tuple(e["loc"][:index]) == prefix and len(e["loc"]) > index
                 and _member_at(tuple(e["loc"]), raw, e["type"]) == index]
        members = list(dict.fromkeys(e["loc"][index] for e in group))
        try:
            node = value_at(raw, _input_loc(prefix, raw)) if raw is not None else None
        except (KeyError, IndexError, TypeError):
            return errors, note, None

        def keys_of(member) -> list[str]:
            found = _models_at(model, (*prefix, member)) if model is not None else []
            return list(found[0].model_fields) if found and found[0].__name__ == member else []

        def shape(member) -> str:
            keys = keys_of(member)
            return "{" + ", ".join(keys) + "}" if keys else str(member)

        choices = ", ".join(shape(m) for m in members)
        if isinstance(node, dict):
            def matched(member) -> int:
                extra = sum(1 for e in group if e["loc"][index] == member and e["type"] == "extra_forbidden"
                            and len(e["loc"]) == index + 2)
                return len(node) - extra
            best = max(members, key=lambda m: (matched(m), -sum(1 for e in group if e["loc"][index] == m)))
            if matched(best) == 0 or not node:
                keys = ", ".join(str(k) for k in node) or "none"
                return errors, note, (prefix, f"matches none of the choices {choices} (got keys {keys}); "
                                              f"give the keys of exactly one of them")
        else:
            type_errors = all(e["type"].endswith("_type") or e["type"] in ("literal_error", "model_type")
                              for e in group)
            if type_errors:
                return errors, note, (prefix, f"must be one of {choices} (got {show(node)})")
            best = min(members, key=lambda m: sum(1 for e in group if e["loc"][index] == m))
        note = f" (the {shape(best)} choice)" if keys_of(best) else note
        errors = [e for e in group if e["loc"][index] == best]
    return errors, note, None


def raise_from_validation(source: str, prefix: str, error: ValidationError, model: type[BaseModel] | None = None,
                           raw: Any = None, extra_keys: tuple[str, ...] = ()) -> None:
    """One SpecError for the first problem pydantic found: where (as the spec's author wrote it),
    what is wrong, the value, what is allowed. ``extra_keys`` are allowed at the top level besides
    ``model``'s fields. An unknown key is named before the missing one it may be a misspelling of;
    in a choice between kinds of mapping (a domain), the kind the author chose is the one checked."""
    errors, note, no_match = _choose_variant(list(error.errors()), raw, model)
    if no_match is not None:
        parts, message = no_match
        loc = _input_loc(parts, raw) if raw is not None else parts
        raise SpecError(source, ".".join(p for p in [prefix, key_path(loc)] if p), message) from None
    first = errors[0]
    if first["type"] == "missing":
        parent = tuple(first["loc"][:-1])
        unknown = [e for e in errors if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == parent]
        first = unknown[0] if unknown else first
    missing_here = [e["loc"][-1] for e in errors if e["type"] == "missing"
                    and tuple(e["loc"][:-1]) == tuple(first["loc"][:-1])]
    loc = _input_loc(first["loc"], raw) if raw is not None else tuple(first["loc"])
    location = ".".join(p for p in [prefix, key_path(loc)] if p)
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if "[key]" in first["loc"]:
        message = f"key {show(first.get('input'))} is not a name; keys are strings"
        location = ".".join(p for p in [prefix, key_path(loc[:-1])] if p) or location
    elif first["type"] == "extra_forbidden":
        name = first["loc"][-1]
        allowed = _keys_at(model, tuple(first["loc"])) if model is not None else []
        if len(first["loc"]) == 1:
            allowed = [*extra_keys, *allowed]
        message = f"unknown key {show(name)}{did_you_mean(name, missing_here or allowed)}"
        if missing_here:
            message += f"; missing: {', '.join(str(m) for m in missing_here)}"
        if allowed:
            message += f"; allowed: {', '.join(allowed)}"
    elif first["type"] == "missing":
        name = first["loc"][-1]
        models = _models_at(model, tuple(first["loc"][:-1])) if model is not None else []
        required = [k for k, f in (models[0].model_fields.items() if models else []) if f.is_required()]
        message = f"missing key {show(name)}" + (f"; required keys: {', '.join(required)}" if required else "")
        location = ".".join(p for p in [prefix, key_path(loc[:-1])] if p) or location
    elif "(got " not in message and "input" in first and not isinstance(first["input"], dict):
        message += f" (got {show(first['input'])})"
    raise SpecError(source, location, message + note) from None


def value_at(value: Any, path: tuple) -> Any:
    """The value at ``path`` (keys and indices) within ``value``."""
    for part in path:
        value = value[part]
    return value
