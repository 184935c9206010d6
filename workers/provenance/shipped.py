"""Classes that travel with a sweep: algorithms and environments registered in the driver's process
(``banditsweep.register_algorithm(name, cls)`` from a notebook or a script) rather than by a plugin
module every worker imports.

A :class:`ShippedClass` goes to every trial actor as a constructor argument. Ray pickles it with
cloudpickle, which pickles a class defined in ``__main__`` (a notebook's cells, a script run as a
program) by value: the worker gets the class itself, not a name it would have to import. The actor
registers it (:meth:`ShippedClass.install`) before it runs a trial, on the embedded Ray and on a
cluster alike.

Its code identity must be the same wherever it is computed (the driver compares finished trials
with today's code; the actor stamps each record), and a worker has no source of the driver's
``__main__``: so the source of the file or notebook cell that defines the class is read here, where
it was registered, and travels with it (workers.provenance.code_identity digests it as the module's
source, per definition, as any other). A class whose source cannot be read (made by ``exec`` of a
string) travels without; its part of a trial's code is then ``unknown: ...``.

Layer: the workers layer; nothing here imports Ray.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass

from banditsweep.core.engine import registry
from banditsweep.workers.provenance import code_identity

ALGORITHM, ENVIRONMENT = "algorithm", "environment"
NO_SOURCE = ("no source (Python kept none of the class's definition: made by exec of a string, or typed where no "
             "source is kept); changes to it go unseen")


@dataclass(frozen=True)
class ShippedClass:
    """A registration that travels: ``kind`` (algorithm or environment), its ``name``, the class, and
    the source of its definition as read where it was registered (None, with ``problem``, where none)."""

    kind: str
    name: str
    cls: type
    source: str | None
    problem: str = ""

    @classmethod
    def of(cls, kind: str, name: str, target: type) -> "ShippedClass":
        if not ships_source(target):   # imported by name on the workers, digested from its module's file
            return cls(kind, name, target, None)
        source = defining_source(target)
        return cls(kind, name, target, source, "" if source is not None else NO_SOURCE)

    def install(self) -> None:
        """Register the class in this process, with its source for its code identity."""
        if self.kind == ENVIRONMENT:
            registry.register_environment(self.name, self.cls)
        else:
            registry.register_algorithm(self.name, self.cls)
        if ships_source(self.cls):
            code_identity.ship_source(self.cls.__module__, self.cls.__qualname__, self.source, self.problem)


# The registrations of this process that travel with every run it starts, in the order made.
_SHIPPED: dict[tuple[str, str], ShippedClass] = {}


def ship(kind: str, name: str, target: type) -> ShippedClass:
    """Register ``target`` as ``name`` here and in every trial actor of the runs this process starts."""
    shipped = ShippedClass.of(kind, name, target)
    shipped.install()
    _SHIPPED.pop((kind, name), None)
    _SHIPPED[(kind, name)] = shipped
    return shipped


def shipped_classes() -> tuple[ShippedClass, ...]:
    return tuple(_SHIPPED.values())


def install_all(shipped) -> None:
    for item in shipped or ():
        item.install()


def ships_source(cls: type) -> bool:
    """Whether the class's source must travel: a class of ``__main__`` (whose module on a worker is
    Ray's, not the driver's), or of a module without a source file."""
    return cls.__module__ == "__main__" or code_identity.module_source(cls.__module__) is None


def _functions_of(cls: type):
    for value in vars(cls).values():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        code = getattr(value, "__code__", None)
        if code is not None:
            yield code


def defining_source(cls: type) -> str | None:
    """The text of the file or notebook cell that defines ``cls`` (IPython keeps each cell's source in
    ``linecache``, under the file name its functions carry); the class's own text where it is not
    defined at the top level there; None where Python kept no source."""
    for code in _functions_of(cls):
        text = "".join(linecache.getlines(code.co_filename))
        if not text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        if any(isinstance(node, ast.ClassDef) and node.name == cls.__name__ for node in tree.body):
            return text
        for node in ast.walk(tree):
            if (isinstance(node, ast.ClassDef) and node.name == cls.__name__
                    and node.lineno <= code.co_firstlineno <= (node.end_lineno or node.lineno)):
                return textwrap.dedent(ast.get_source_segment(text, node, padded=True) or "") or None
    try:   # a class without functions of its own: where inspect finds it (a script's file)
        text = textwrap.dedent(inspect.getsource(cls))
        tree = ast.parse(text)
    except (OSError, TypeError, SyntaxError):
        return None
    named = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls.__name__]
    return text if named else None
