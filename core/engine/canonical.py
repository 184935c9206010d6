"""Canonical JSON: the one spelling of a value that trial ids, batch keys and labels are made from."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the same content gives the same bytes everywhere."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
