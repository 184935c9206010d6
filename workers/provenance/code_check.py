"""Which of a sweep's finished trials were computed by the code of this tree: the comparison that
`run`, `plan`, `status` and `report` make before they trust a stored number.

Each trial's record names the code it ran on (workers.provenance.code_identity); this compares that with what
the same trial would run on now. A finished trial is then

- **current**: its code digest is today's (also after `verify --accept` re-stamped it); a digest of
  content, which moving code does not change, or one of the earlier path-keyed kind that stands for
  today's content (workers.provenance.legacy_identity);
- **other code**: it was computed by code that differs now, with the modules that changed;
- **code unknown**: recorded before trials carried their code.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from banditsweep.core.engine.trial import TrialSpec
from banditsweep.workers.provenance.code_identity import CodeIdentity, code_of
from banditsweep.workers.storage.record import FINISHED, TrialRecord

CURRENT, OTHER_CODE, CODE_UNKNOWN = "current", "other code", "code unknown"


@dataclass
class CodeComparison:
    current: dict[str, CodeIdentity] = field(default_factory=dict)   # trial id -> the code it runs on now
    other: dict[str, list[str]] = field(default_factory=dict)        # finished trial -> modules changed since
    unknown: list[str] = field(default_factory=list)                 # finished trials without their code
    undigestable: dict[str, list[str]] = field(default_factory=dict)  # algorithm -> parts not digested
    labels: dict[str, str] = field(default_factory=dict)             # trial id -> "label | environment"

    def state(self, trial_id: str) -> str:
        if trial_id in self.other:
            return OTHER_CODE
        return CODE_UNKNOWN if trial_id in self.unknown else CURRENT

    def changed_modules(self) -> list[tuple[str, int]]:
        """Each module that changed, with how many of the finished trials it concerns, most first."""
        counts = Counter(module for modules in self.other.values() for module in modules)
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def other_code_line(self, most_cells: int = 6) -> str:
        """``12 finished trials were computed by other code (core/baselines/linear.py changed):
        LinUCB | synthetic:h1 (6), ...``; "" when there are none."""
        if not self.other:
            return ""
        modules = ", ".join(module for module, _ in self.changed_modules()[:6])
        more = len(self.changed_modules()) - 6
        modules += f" and {more} more" if more > 0 else ""
        return (f"{len(self.other)} finished trial(s) were computed by other code ({modules} changed): "
                + _cells(self.labels[t] for t in self.other)[:most_cells * 60])

    def unknown_line(self) -> str:
        if not self.unknown:
            return ""
        return (f"{len(self.unknown)} finished trial(s) were recorded before trials carried their code (code "
                f"unknown): `banditsweep verify SPEC --accept` re-runs a sample and, where it reproduces, stamps "
                f"them as computed by today's code")

    def undigestable_lines(self) -> list[str]:
        return [f"the code of {algorithm} cannot be fully digested ({', '.join(parts)}): a change there is "
                f"not detected" for algorithm, parts in sorted(self.undigestable.items())]


def _cells(labels: Iterable[str]) -> str:
    counts = Counter(labels)
    return ", ".join(f"{label} ({count})" for label, count in sorted(counts.items()))


def current_code(specs: Iterable[TrialSpec]) -> dict[str, CodeIdentity]:
    """Each trial's code today (digested once per algorithm, environment kind and sharding)."""
    by_kind: dict[tuple, CodeIdentity] = {}
    out = {}
    for spec in specs:
        key = (spec.algorithm, spec.environment["kind"], spec.sharded)
        if key not in by_kind:
            by_kind[key] = code_of(spec)
        out[spec.trial_id] = by_kind[key]
    return out


def compare_code(trials: Iterable[tuple[TrialSpec, str]], records: dict[str, TrialRecord]) -> CodeComparison:
    """Compare the finished ``records`` of ``trials`` ((spec, "label | environment") pairs) with
    the code each trial runs on now."""
    trials = list(trials)
    comparison = CodeComparison(current=current_code(spec for spec, _ in trials))
    for spec, label in trials:
        trial_id = spec.trial_id
        code = comparison.current[trial_id]
        if code.unknown:
            comparison.undigestable.setdefault(spec.algorithm, code.unknown)
        record = records.get(trial_id)
        if record is None or record.status != FINISHED:
            continue
        comparison.labels[trial_id] = label
        if not record.code_digest:
            comparison.unknown.append(trial_id)
        elif not code.same_code(record.code_digest):
            comparison.other[trial_id] = code.changed_since(record.code, record.code_digest) or ["(the digest)"]
    return comparison
