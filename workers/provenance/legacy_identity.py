"""The code digests trials carried before the identity became one of content: how to read them today.

Until then a trial's code digest (16 hexadecimal digits) was a hash of one digest per *file*, each
over the text of the statements the trial reached there, import statements included. It named where
the code lived as much as what it did, so a module moved or renamed changed it. Such a record is
current when

- :data:`LEGACY_DIGESTS` maps its digest to the content digest (workers.provenance.code_identity)
  of the same code: the table was computed on the tree on which those digests were last stamped,
  for every registered algorithm, environment kind and sharding, before any module moved. Content
  digests do not move with the code, so the table stays right through every later move, and it is
  never rewritten: the journal is the record of truth and is not touched; or
- the code of today still has that path-keyed digest (:func:`path_digest`): a plugin's trials,
  which the table cannot know, until a module they reach moves.

Anything else was computed by other code, and :func:`path_parts` of today's tree names the files
that differ, in the terms the record uses.

A content digest is read the same way through :data:`MOVED_DIGESTS` (workers.provenance.moved_digests):
the digests a move changed without changing any code (an import split in a module that a root takes
whole), each mapped to the digest of the same code after the move.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterable

from banditsweep.workers.provenance.legacy_digests import LEGACY_DIGESTS
from banditsweep.workers.provenance.moved_digests import MOVED_DIGESTS

PATH_DIGEST_CHARS = 16


def is_path_digest(digest: str | None) -> bool:
    """Whether a stored code digest is of the earlier, path-keyed kind."""
    return isinstance(digest, str) and len(digest) == PATH_DIGEST_CHARS


def content_digest_of(stored: str | None) -> str | None:
    """The content digest a stored digest stands for today: itself if it is one, the table's entry for
    a path-keyed one (None where the table does not know it, or nothing is stored: None, or a table's
    NaN); either followed through the digests a move changed without changing the code
    (:data:`~banditsweep.workers.provenance.moved_digests.MOVED_DIGESTS`)."""
    if not isinstance(stored, str) or not stored:
        return None
    digest = stored if not is_path_digest(stored) else LEGACY_DIGESTS.get(stored)
    for _ in range(len(MOVED_DIGESTS)):   # one entry per move the code went through since
        if digest not in MOVED_DIGESTS:
            break
        digest = MOVED_DIGESTS[digest]
    return digest


def path_digest(parts: dict[str, str]) -> str:
    """The path-keyed digest of a trial from its files' digests (as records of that kind store it)."""
    text = "\n".join(f"{name}={value}" for name, value in sorted(parts.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:PATH_DIGEST_CHARS]


def path_parts(roots: Iterable[tuple[str, str | None]], parsed: Callable, tracked: Callable[[str], bool],
               part_name: Callable[[str, str | None], str]) -> dict[str, str]:
    """The path-keyed digests of the files that ``roots`` reach: per file, the text of the reached
    statements (an import statement's too) in their order. ``parsed`` reads a module
    (source_index's ``_Parsed``, or a string saying why not)."""
    reached: dict[str, set[int]] = {}
    whole: set[str] = set()
    followed: set[tuple[str, int, str | None]] = set()
    problems: dict[str, str] = {}
    work: list[tuple[str, str | None]] = list(roots)
    while work:
        module, name = work.pop()
        if not tracked(module):
            continue
        source = parsed(module)
        if isinstance(source, str):
            problems[module] = source
            continue
        if name is None:
            if module in whole:
                continue
            whole.add(module)
            wanted = range(len(source.statements))
        else:
            wanted = source.binding.get(name, ())
        seen = reached.setdefault(module, set())
        for index in [*wanted, *source.preamble]:
            alias = name if name is not None and source.is_import(index) else None
            if (module, index, alias) in followed:
                continue
            followed.add((module, index, alias))
            seen.add(index)
            work.extend(source.references(index, alias))
    parts = {}
    for module, indices in reached.items():
        source = parsed(module)
        if indices:
            parts[part_name(module, source.path)] = _hash(source.normal[i] for i in sorted(indices))
    for module, problem in problems.items():
        parts[part_name(module, None)] = f"unknown: {problem}"
    return parts


def _hash(texts: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:PATH_DIGEST_CHARS]
