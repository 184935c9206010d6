"""The results folder's records as strict pydantic models, and what a record that fails one says.

A file of the folder may come from anyone (workers.storage.untrusted_files), so what is read from it
is checked whole before anything is built from it: a model refuses a boolean for an integer, text
for a number, NaN or infinity, a key it does not know, and each field states its bounds once, in
its type. Pydantic's errors name the field but in its own words; :func:`said` puts the first one in
the words of the file it came from, naming the field (the caller adds the file and the line).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

STRICT = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


@dataclass(frozen=True)
class Says:
    """A field's own words for a value that fails its checks, where pydantic's would mislead (a
    timestamp's bounds are a date's, not two numbers)."""

    text: str


# What a failed check says, by pydantic's error type, in the words of the journal's messages.
WORDS = {
    "int_type": "must be an integer", "int_from_float": "must be an integer",
    "float_type": "must be a number", "finite_number": "must be a finite number",
    "string_type": "must be a string", "bool_type": "must be a boolean",
    "dict_type": "must be a JSON object", "model_type": "must be a JSON object", "list_type": "must be a list",
    "literal_error": "must be {expected}", "none_required": "must be null",
    "greater_than_equal": "must be >= {ge}", "less_than_equal": "must be <= {le}",
    "greater_than": "must be > {gt}", "less_than": "must be < {lt}",
    "string_too_short": "must be a non-empty string", "string_too_long": "must be at most {max_length} characters",
    "too_long": "holds more than {max_length} entries", "too_short": "holds fewer than {min_length} entries",
    "string_pattern_mismatch": "must match {pattern}",
}


@dataclass(frozen=True)
class Problem:
    """The first failure of a record: where (field names from the record's top, list places left
    out), in words, and the value found there."""

    field: str            # "" for the record as a whole (a rule across its fields)
    kind: str             # pydantic's error type: "missing", "extra_forbidden", "value_error", ...
    words: str
    value: Any


def first_problem(error: ValidationError, model: type[BaseModel], words: Mapping[str, str] = WORDS) -> Problem:
    """The first failure in ``error`` (of ``model``): a check's own message (a validator that raised
    ValueError), else the field's :class:`Says`, else ``words`` for pydantic's error type."""
    first = error.errors(include_url=False)[0]
    names = [str(part) for part in first["loc"] if isinstance(part, str)]
    kind, context = first["type"], first.get("ctx") or {}
    if kind == "value_error":
        text = str(context.get("error", first["msg"]))
    else:
        own = model.model_fields.get(names[0]) if len(names) == 1 else None
        says = next((item for item in own.metadata if isinstance(item, Says)), None) if own is not None else None
        text = says.text if says is not None else words.get(kind, first["msg"]).format(**context)
    return Problem(".".join(names), kind, text, first.get("input"))


def fields_of(cls: type) -> dict[str, Any]:
    """The fields of the dataclass ``cls`` (their annotated types and defaults) for ``create_model``:
    the dataclass is written once, its model made from it."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):
        if spec.default is not dataclasses.MISSING:
            fields[spec.name] = (hints[spec.name], spec.default)
        elif spec.default_factory is not dataclasses.MISSING:
            fields[spec.name] = (hints[spec.name], Field(default_factory=spec.default_factory))
        else:
            fields[spec.name] = (hints[spec.name], ...)
    return fields
