"""Where a sweep's store stands before a ``run``, and bringing what derives from it up to date.

:func:`plan_resume` checks every result file and reads the journal: which of the sweep's trials are
finished, failed or still to run (a finished trial whose curves were lost runs again).
:func:`catch_up` brings the files derived from the journal (the compacted curves and journal, the
trials table) and the sinks up to date with it: what a ``run`` with nothing left to run does, and
``sync-mlflow``. :func:`failed_records` names the sweep's failed trials after a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from banditsweep.workers.provenance.code_check import CodeComparison, compare_code
from banditsweep.workers.execution.run_values import Job
from banditsweep.workers.storage.record import FAILED, FINISHED, TrialRecord
from banditsweep.workers.mirrors.sinks import SinkContext, open_sinks
from banditsweep.workers.storage.store import StoreHealth, SweepStore


@dataclass
class ResumePlan:
    total: int                  # the sweep's trials
    finished: int               # ... recorded finished, with their results
    failed: int                 # ... recorded failed before this run
    pending: list[Job]          # ... to run now (with the finished ones computed by other code, if re-run)
    health: StoreHealth         # what the check of the result files found (files moved aside, results lost)
    code: CodeComparison = field(default_factory=CodeComparison)   # finished trials against today's code
    rerun_changed: bool = True  # whether the trials computed by other code are among ``pending``
    rerun_unknown: bool = False  # ... and those of code unknown


# What `run` does with finished trials computed by other code: run them again on today's code (the
# default), also those of code unknown (recorded before trials carried their code: asked for
# explicitly), or keep them.
RERUN, RERUN_ALL, KEEP = "rerun", "rerun all", "keep"


def plan_resume(store: SweepStore, jobs: list[Job], retry_failed: bool, changed: str = RERUN) -> ResumePlan:
    """Check the store's files (damaged ones are moved to quarantine) and work out which of ``jobs``
    run: those the journal does not hold as finished with their results, nor as failed unless
    ``retry_failed``; and, unless ``changed`` is KEEP, those finished by code other than today's
    (with RERUN_ALL also those of code unknown)."""
    health = store.verify(planned=[job.record.trial_id for job in jobs])
    journal = store.journal()
    state = {trial_id: record.status for trial_id, record in journal.items()
             if trial_id not in health.missing_results}
    code = compare_code(((job.spec, f"{job.record.label} | {job.record.environment}") for job in jobs),
                        {trial_id: record for trial_id, record in journal.items() if trial_id in state})
    skip = {FINISHED} if retry_failed else {FINISHED, FAILED}
    rerun = changed != KEEP
    again = set(code.other) | (set(code.unknown) if changed == RERUN_ALL else set())
    return ResumePlan(total=len(jobs),
                      finished=sum(1 for job in jobs if state.get(job.record.trial_id) == FINISHED),
                      failed=sum(1 for job in jobs if state.get(job.record.trial_id) == FAILED),
                      pending=[job for job in jobs if state.get(job.record.trial_id) not in skip
                               or rerun and job.record.trial_id in again],
                      health=health, code=code, rerun_changed=rerun, rerun_unknown=changed == RERUN_ALL)


@dataclass
class CatchUp:
    trials: int                 # trials the journal holds
    sinks: int                  # sinks that opened (and were brought up to date)
    rebuilt_runs: int = 0       # MLflow runs rebuilt from the Parquet results
    deleted_runs: int = 0       # stale MLflow runs deleted
    warnings: list[str] = field(default_factory=list)   # sinks that could not open, what sinks said opening
    notes: list[str] = field(default_factory=list)      # what the sinks said closing (where to look)


def catch_up(store: SweepStore, sinks: list[str], context: SinkContext) -> CatchUp:
    """Compact the store and rebuild its trials table from the journal (a crash may have left either
    behind), then open every sink (which reconciles it with the journal) and close it."""
    store.compact()
    journal = store.journal()
    if journal:
        store.write_trials_table(list(journal.values()))
    opened, counts, warnings = open_sinks(sinks, context, journal, [])
    notes = [note for note in (sink.close("FINISHED", {}) for sink in opened) if note]
    return CatchUp(trials=len(journal), sinks=len(opened), rebuilt_runs=counts.get("rebuilt_runs", 0),
                   deleted_runs=counts.get("deleted_runs", 0), warnings=warnings, notes=notes)


def failed_records(store: SweepStore, trial_ids: list[str]) -> list[TrialRecord]:
    """The records of those of ``trial_ids`` the journal holds as failed, in the trials table's
    order (label, environment, seed, trial id)."""
    wanted = set(trial_ids)
    failed = [record for trial_id, record in store.journal().items()
              if trial_id in wanted and record.status == FAILED]
    return sorted(failed, key=lambda r: (r.label, r.environment, r.seed, r.trial_id))
