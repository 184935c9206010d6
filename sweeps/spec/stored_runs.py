"""Which of a spec's selections a sweep's store holds: a sweep run with ``--set horizon=100`` holds
trials the spec alone does not plan, and ``status`` / ``report`` without that ``--set`` would find
none of them. :func:`select_sweep` keeps the spec as given when the store holds any of its trials;
else it takes the selection of the latest run (workers.storage.run_notes) whose overrides plan trials the store
has finished, and says which overrides those are. A store written before runs were noted is matched
by the horizon and seeds of its trial records.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from banditsweep.sweeps.spec.model import Sweep, load_sweep
from banditsweep.sweeps.spec.errors import SpecError
from banditsweep.sweeps.spec.overrides import parse_overrides
from banditsweep.workers import FINISHED, TrialRecord
from banditsweep.workers import recorded_runs
from banditsweep.workers import SweepStore

# Distinct override sets tried at most (each is a load of the spec).
MAX_CANDIDATES = 10
CANDIDATE_TRIALS = 10_000   # a noted run of up to this many trials is always considered


@dataclass
class Candidate:
    overrides: tuple[str, ...]
    sweep: Sweep
    done: frozenset         # its trials finished in the store
    unseen: int             # ... of them not among the trials of the selection given
    inferred: bool = False  # from the trial records, not from a noted run

    @property
    def finished(self) -> int:
        return len(self.done)

    @property
    def flags(self) -> str:
        return " ".join(f"--set {shlex.quote(pair)}" for pair in self.overrides)

    def describe(self) -> str:
        run = f"the run with {self.flags}" if self.overrides else "the run without --set"
        return f"{run} (as its trials' records say)" if self.inferred else run


@dataclass
class Selection:
    sweep: Sweep                       # the trials to show
    overrides: tuple[str, ...]         # the --set pairs that plan them
    switched: bool = False             # not the selection the command was given
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def select_sweep(spec_path: str | Path, sweep: Sweep, given: list[str], store: SweepStore) -> Selection:
    """The selection of ``spec_path`` (loaded with ``given`` as ``sweep``) whose trials ``store`` holds."""
    selection = Selection(sweep, tuple(given))
    journal = store.journal() if store.root.is_dir() else {}
    if not journal:
        return selection
    finished = {trial_id for trial_id, record in journal.items() if record.status == FINISHED}
    planned = frozenset(trial.trial_id for trial in sweep.trials)
    runs, selection.warnings = recorded_runs(store.root)
    candidates = _candidates(spec_path, sweep, planned, [run.overrides for run in runs], journal, finished)
    usable = [candidate for candidate in candidates if candidate.finished]
    if planned & journal.keys():
        for candidate in usable:
            if candidate.unseen:
                selection.notes.append(f"the store also holds {candidate.unseen} finished trials of "
                                       f"{candidate.describe()} not shown here; pass {_flags(candidate)} to see them")
        return selection
    if not usable:
        return selection
    chosen = usable[0]
    asked = f"the trials planned with {' '.join(f'--set {shlex.quote(p)}' for p in given)}" if given else "the spec's trials"
    selection.notes.append(
        f"{asked} have no results here; showing the {len(chosen.sweep.trials)} trials of {chosen.describe()} "
        f"({chosen.finished} finished); pass {_flags(chosen)} to select it explicitly")
    others = [c for c in usable[1:] if not c.done <= chosen.done]
    if others:
        listed = "; ".join(f"{c.describe()} ({c.finished} finished)" for c in others)
        selection.notes.append(f"the store also holds {listed}; shown: the latest run's")
    selection.sweep, selection.overrides, selection.switched = chosen.sweep, chosen.overrides, True
    return selection


def _flags(candidate: Candidate) -> str:
    return candidate.flags if candidate.overrides else "no --set"


def _candidates(spec_path, sweep: Sweep, planned: frozenset, noted: list[tuple[str, ...]],
                journal: dict[str, TrialRecord], finished: set[str]) -> list[Candidate]:
    """The selections other than ``planned`` that noted runs (newest first), then the trial records,
    plan: one per distinct set of trials."""
    seen: set[frozenset] = {planned}
    candidates: list[Candidate] = []
    tried: set[tuple[str, ...]] = set()
    inferred_overrides = _inferred(spec_path, journal, finished)
    # A noted run is data (its file may be planted): one whose trials far outnumber what the store
    # and the spec hold is not expanded (10^6 trials take a minute), as it could show little of them.
    largest = max(10 * len(journal), len(planned), CANDIDATE_TRIALS)
    for overrides, inferred in [*((o, False) for o in noted), (inferred_overrides, True)]:
        if overrides is None or overrides in tried or len(tried) >= MAX_CANDIDATES:
            continue
        tried.add(overrides)
        try:
            other = load_sweep(spec_path, parse_overrides(list(overrides)), max_trials=largest)
        except SpecError:
            continue   # overrides the spec (as it is now) does not take: they select nothing of it
        ids = frozenset(trial.trial_id for trial in other.trials)
        if other.name != sweep.name or ids in seen:
            continue
        seen.add(ids)
        candidates.append(Candidate(overrides, other, ids & finished, len((ids & finished) - planned), inferred))
    return candidates


def _inferred(spec_path, journal: dict[str, TrialRecord], finished: set[str]) -> tuple[str, ...] | None:
    """The horizon and seeds overrides of the spec that the finished trials' records say they were
    run with (a store written before runs were noted): None when they name no one horizon and seed
    set, or the spec's own."""
    records = [journal[trial_id] for trial_id in finished]
    horizons = {record.horizon for record in records}
    seeds = sorted({record.seed for record in records})
    if len(horizons) != 1 or not seeds:
        return None
    try:
        sweep = load_sweep(spec_path)
    except SpecError:
        return None
    overrides = []
    if horizons != {trial.spec.horizon for trial in sweep.trials}:
        overrides.append(f"horizon={horizons.pop()}")
    if set(seeds) != set(sweep.spec.seed_list):
        overrides.append(f"seeds={len(seeds)}" if seeds == list(range(len(seeds)))
                         else f"seeds=[{','.join(map(str, seeds))}]")
    return tuple(overrides) or None
