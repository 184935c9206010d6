"""What ``banditsweep status`` reports of a sweep's store: per algorithm and environment how many
trials are done, failed, running (a run in progress says so in its ``running.json``,
workers.storage.live_run) and pending, what the run in progress is doing, and (when the store exists)
whether its files are whole and agree with each other (workers.storage.store's check, then
workers.storage.consistency's counts)."""

from __future__ import annotations

from dataclasses import dataclass

from banditsweep.workers.provenance.code_check import CodeComparison, compare_code
from banditsweep.workers.storage.consistency import Consistency, check
from banditsweep.workers.storage.live_run import LiveRun, read_heartbeat
from banditsweep.workers.execution.run_values import Job
from banditsweep.workers.storage.record import FAILED, FINISHED
from banditsweep.workers.storage.store import StoreHealth, SweepStore


@dataclass
class CellCounts:
    algorithm: str              # the trials' label
    environment: str
    done: int = 0
    failed: int = 0
    running: int = 0            # not done, and running now in a run that says so
    pending: int = 0
    other_code: int = 0         # finished, by code other than today's (a `run` runs them again)


@dataclass
class StatusSummary:
    cells: list[CellCounts]             # in the order the spec names them
    health: StoreHealth | None          # None: no results folder yet (nothing checked)
    consistency: Consistency | None
    live: LiveRun | None = None         # the sweep's running.json: the run in progress, or the last one
    live_warning: str | None = None     # why a running.json there was ignored
    code: CodeComparison | None = None  # the finished trials' code against today's

    @property
    def running_now(self) -> bool:
        """A run is going on and its driver wrote lately."""
        return self.live is not None and not self.live.ended and not self.live.stale()

    def total(self, what: str) -> int:
        return sum(getattr(cell, what) for cell in self.cells)

    @property
    def inconsistent(self) -> bool:
        """Damaged files were moved aside, or the files disagree with the journal."""
        return self.health is not None and bool(self.health.quarantined or self.consistency.problems)


def status_summary(store: SweepStore, jobs: list[Job]) -> StatusSummary:
    """Check the store's files (when it exists; damaged ones are moved to quarantine) and count the
    state of each of ``jobs``: a finished trial whose results are lost counts as pending, one that a
    run going on now lists (and that is not done) as running."""
    health = store.verify(planned=[job.record.trial_id for job in jobs]) if store.root.is_dir() else None
    live, live_warning = read_heartbeat(store.root) if store.root.is_dir() else (None, None)
    running = live.running_ids if live is not None and not live.ended and not live.stale() else set()
    journal = store.journal()
    lost = health.missing_results if health is not None else set()
    code = compare_code(((job.spec, f"{job.record.label} | {job.record.environment}") for job in jobs),
                        {trial_id: record for trial_id, record in journal.items() if trial_id not in lost})
    cells: dict[tuple[str, str], CellCounts] = {}
    for job in jobs:
        record = job.record
        state = journal[record.trial_id].status if record.trial_id in journal else None
        if record.trial_id in lost:
            state = None
        cell = cells.setdefault((record.label, record.environment), CellCounts(record.label, record.environment))
        if state == FINISHED and record.trial_id in code.other and record.trial_id not in running:
            cell.other_code += 1
        elif state == FINISHED:
            cell.done += 1
        elif record.trial_id in running:   # also a failed trial run again
            cell.running += 1
        elif state == FAILED:
            cell.failed += 1
        else:
            cell.pending += 1
    consistency = check(store.root, journal) if health is not None else None
    return StatusSummary(list(cells.values()), health, consistency, live, live_warning, code)
