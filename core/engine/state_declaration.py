"""What a checkpoint holds of an object: the attributes its class declares, not whatever it carries.

A class whose instances a checkpoint holds declares, in its own body, ``STATE``: the attributes it
sets that are saved, and, where it has them, ``OPTIONAL_STATE``: saved attributes that only some of
its objects carry (those of one mode), and ``TRANSIENT``: those it sets that are not saved (a cache
that is computed again when asked, a value that a restore sets anew). A class's names are those of
its own declaration and of its bases' (a subclass declares only what it adds, ``STATE = ()`` when
nothing). A dataclass's fields are saved without being repeated in ``STATE`` (a dataclass of the
library declares by its fields alone). Settings models and enumerations are stored by their fields
and values (core.engine.state_codec) and declare nothing.

So an attribute added to a checkpointed class is a decision about the checkpoint format, taken when
it is written: the codec (core.engine.state_codec) writes exactly the declared saved attributes, refuses
to save an object that carries an attribute its class declares neither saved nor transient
(:class:`StateDeclarationError`, naming both), and on reading requires every attribute of
``STATE``, drops transient ones (checkpoints written before the declarations hold every attribute)
and refuses any other. tests/core/engine/test_state_declaration.py checks, from the source, that every
attribute a checkpointed class of ``banditsweep.core`` sets is declared.

A plugin's class (core.engine.registry) may declare nothing and is then saved whole (every attribute, as
before declarations: code outside this package keeps working unchanged); one that declares is held
to its declaration. A class of ``banditsweep.core`` that declares nothing is refused. The sharded
trial's coordinator and shards save their declared ``STATE`` as name tables of their own
(core.kernel.sharded), under the same declarations.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass
from typing import Any

_LIBRARY = "banditsweep.core"
# The declarations a class body may hold, in the order of Declaration's fields.
_KINDS = ("STATE", "OPTIONAL_STATE", "TRANSIENT")


class StateDeclarationError(TypeError):
    """A class's declaration and what its object carries disagree (or a library class declares
    nothing): a mistake in the code, found when the object is saved, not a damaged checkpoint."""


@dataclass(frozen=True)
class Declaration:
    """The attributes of a class that a checkpoint holds (``saved`` always, ``optional`` where the
    object has them) and those it leaves out (``transient``), its bases' included."""

    saved: frozenset[str]
    optional: frozenset[str]
    transient: frozenset[str]

    def undeclared(self, names: set[str] | dict) -> list[str]:
        return sorted(set(names) - self.saved - self.optional - self.transient)

    def missing(self, names: set[str] | dict) -> list[str]:
        return sorted(self.saved - set(names))


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _library(cls: type) -> bool:
    module = cls.__module__
    return module == _LIBRARY or module.startswith(_LIBRARY + ".")


def _saved_whole(cls: type) -> bool:
    return not _library(cls)


def _own_dataclass(cls: type) -> bool:
    return "__dataclass_fields__" in cls.__dict__


def _names(cls: type, kind: str) -> tuple[str, ...]:
    names = cls.__dict__.get(kind, ())
    if not (isinstance(names, tuple) and all(isinstance(name, str) and name.isidentifier() for name in names)):
        raise StateDeclarationError(f"{qualified(cls)}.{kind} is not a tuple of attribute names")
    return names


@functools.cache
def declaration(cls: type) -> Declaration | None:
    """``cls``'s declaration with its bases'; None for a class saved whole (the module docstring)."""
    # A dataclass declares by its fields, but not where its classes are all saved whole.
    declares = any(kind in cls.__dict__ for kind in _KINDS) or (not _saved_whole(cls) and _own_dataclass(cls))
    if not declares:
        if _saved_whole(cls):
            return None
        raise StateDeclarationError(
            f"{qualified(cls)} declares no STATE: a class of {_LIBRARY} that a checkpoint holds names the "
            "attributes it saves in STATE (and those it does not in TRANSIENT), core.state_declaration")
    names: dict[str, set[str]] = {kind: set() for kind in _KINDS}
    for klass in reversed(cls.__mro__):
        for kind in _KINDS:
            names[kind].update(_names(klass, kind))
        if _own_dataclass(klass):
            names["STATE"].update(field.name for field in dataclasses.fields(klass))
    for first, second in itertools.combinations(_KINDS, 2):
        both = names[first] & names[second]
        if both:
            raise StateDeclarationError(f"{qualified(cls)} declares {', '.join(sorted(both))} in both {first} "
                                        f"and {second}")
    return Declaration(*(frozenset(names[kind]) for kind in _KINDS))


def instance_attributes(value: Any) -> dict[str, Any]:
    """Every attribute ``value`` carries: its ``__dict__`` and its slots."""
    attributes = dict(getattr(value, "__dict__", {}))
    for klass in type(value).__mro__:
        for slot in klass.__dict__.get("__slots__", ()):
            if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                attributes[slot] = getattr(value, slot)
    return attributes


def attributes_to_save(value: Any) -> dict[str, Any]:
    """The attributes of ``value`` a checkpoint holds, in the order the object carries them: the
    declared saved ones, or all of them for a class saved whole. :class:`StateDeclarationError` for
    an attribute declared neither saved nor transient, or a saved one the object lacks."""
    attributes = instance_attributes(value)
    found = declaration(type(value))
    if found is None:
        return attributes
    undeclared = found.undeclared(attributes)
    if undeclared:
        raise StateDeclarationError(
            f"{qualified(type(value))} carries {', '.join(undeclared)}, declared in none of STATE, OPTIONAL_STATE "
            "(saved) and TRANSIENT (not saved): declare it in the class that sets it")
    missing = found.missing(attributes)
    if missing:
        raise StateDeclarationError(f"{qualified(type(value))} lacks {', '.join(missing)}, which it declares saved")
    return {name: attribute for name, attribute in attributes.items() if name not in found.transient}
