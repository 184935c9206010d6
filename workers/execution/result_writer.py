"""The driver's writer of outcomes: each group that arrives is made durable in the store (journal,
then the trials table) and only then handed to the mirror and counted done, so a sink never shows
a trial the record of truth lacks."""

from __future__ import annotations

from banditsweep.workers.errors import StoreWriteError
from banditsweep.workers.execution.run_values import Progress
from banditsweep.workers.storage.record import FINISHED, TrialOutcome, thinned_curve
from banditsweep.workers.storage.store import SweepStore, TrialsTable


class ResultWriter:
    """The driver's side of the record of truth: durable groups of outcomes, the trials table, and
    the mirror told once they are durable."""

    def __init__(self, store: SweepStore, mirror, progress: Progress):
        self.store, self.mirror, self.progress = store, mirror, progress
        self.table = TrialsTable(store)

    def write(self, outcomes: list[TrialOutcome]) -> None:
        if not outcomes:
            return
        try:
            self.store.write_outcomes(outcomes)
        except OSError as error:
            raise StoreWriteError(
                f"cannot write results to {error.filename or self.store.root}: {error.strerror or error}; the "
                f"{len(outcomes)} trial(s) just computed are not recorded (nothing half-written) and run again "
                "with the next `run`") from None
        try:
            self.table.added()
        except OSError as error:
            raise self.unwritable(error) from None
        self.mirror.ended.remote([(o.record, thinned_curve(o.arrays, o.record.log_every) if o.arrays else [])
                                  for o in outcomes])
        for outcome in outcomes:
            if outcome.record.status == FINISHED:
                self.progress.done += 1
            else:
                self.progress.failed += 1

    def close(self) -> None:
        try:
            self.store.compact()
            self.table.flush()
        except OSError as error:
            raise self.unwritable(error) from None

    def unwritable(self, error: OSError) -> StoreWriteError:
        """The results recorded so far are durable (the journal); what failed is derived from it."""
        return StoreWriteError(
            f"cannot write results to {error.filename or self.store.root}: {error.strerror or error}; the trials "
            "recorded so far are kept (the journal), the next `run` finishes the rest")
