"""The journal of a sweep (``<sweep>/.journal/``): the record of truth, one JSON line per trial
outcome (:class:`~banditsweep.workers.storage.record.TrialRecord`) in segment files named by their
checksum. Each line carries the SHA-256 of its record's canonical JSON, so that one damaged record
is found (and named) while the others of its segment are kept.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from banditsweep.workers.storage.checksums import named_digest
from banditsweep.workers.errors import one_line
from banditsweep.workers.storage.record import TrialRecord
from banditsweep.workers.storage.untrusted_files import MAX_LINE_BYTES, json_value, open_regular

# Each journal line holds its record's fields and this key: the SHA-256 of the record's canonical
# JSON, so one damaged record is found (and named) while the others of its segment are kept.
RECORD_DIGEST = "sha256"


def journal_text(records: Iterable[TrialRecord]) -> str:
    """Journal lines: each record's fields with the SHA-256 of their canonical JSON."""
    lines = []
    for record in records:
        values = record.to_json()
        lines.append(json.dumps({**values, RECORD_DIGEST: record_digest(values)}, sort_keys=True,
                                allow_nan=False) + "\n")
    return "".join(lines)


def record_digest(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":"),
                                     allow_nan=False).encode()).hexdigest()


@dataclass
class JournalFile:
    records: list[TrialRecord]   # its valid records
    damage: str = ""             # what is wrong with it ("" when nothing)


_TRIAL_ID = re.compile(r'"trial_id":\s*"([^"\\]{1,64})"')


def _lines(handle, digest) -> Iterable[str | None]:
    """The file's lines as text (each fed to ``digest`` as bytes); None for a line longer than
    MAX_LINE_BYTES, after which nothing more is read."""
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        digest.update(line)
        if len(line) > MAX_LINE_BYTES:
            yield None
            return
        yield line.decode(errors="replace").rstrip("\r\n")


def read_records(path: Path, planned: set[str] = frozenset()) -> JournalFile:
    """The valid records of one journal file and what is wrong with the rest: a line that is not a
    JSON object, a record that is not a valid TrialRecord, one whose checksum does not match, one
    whose trial id (a ``planned`` one) is not its content's; and a segment whose bytes do not match
    the checksum in its name (a record lost or repeated). Records without a checksum (written
    before records had one) are checked for everything else."""
    good, bad = [], []
    whole = hashlib.sha256()
    try:
        with open_regular(path) as handle:   # not a link, a FIFO or a device: each would be read for ever
            lines = list(_lines(handle, whole))
    except OSError as error:
        return JournalFile([], f"not readable: {error.strerror or one_line(error)}")
    for number, line in enumerate(lines, 1):
        if line is None:
            # A record is a few KB: a line this long is not one (a sparse or planted file); what
            # follows it is not read.
            bad.append(f"line {number}: longer than {MAX_LINE_BYTES:,} bytes")
            break
        if not line.strip():
            continue
        named = _TRIAL_ID.search(line)   # to name the trial also when the line is not JSON
        trial = f" (trial {named.group(1)})" if named else ""
        try:
            values = json_value(line)
            if isinstance(values, dict):
                digest = values.pop(RECORD_DIGEST, None)
                if digest is not None and digest != record_digest(values):
                    raise ValueError("its content does not match its checksum")
            record = TrialRecord.from_json(values)
            if record.trial_id in planned and record.trial_id not in record.content_ids():
                raise ValueError(f"trial_id: {record.trial_id} is not the id of its content (algorithm, params, "
                                 f"environment_config, seed, horizon give {record.content_ids()[0]})")
            good.append(record)
        except ValueError as error:   # json's errors, RecordError and the checks above
            text = str(error) if not isinstance(error, json.JSONDecodeError) else f"not JSON ({error})"
            bad.append(f"line {number}{trial}: {one_line(text)}")
        except RecursionError:
            bad.append(f"line {number}{trial}: JSON nested too deeply to be a record")
    if bad:
        more = f"; and {len(bad) - 1} more" if len(bad) > 1 else ""
        return JournalFile(good, f"{len(bad)} unreadable record(s): {bad[0]}{more}")
    expected = named_digest(path)
    if expected and whole.hexdigest() != expected:
        return JournalFile(good, f"its bytes do not match the SHA-256 in its name ({len(good)} record(s) kept)")
    return JournalFile(good)
