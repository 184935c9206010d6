"""The names of a sweep folder's entries, spelt here and nowhere else in the package: every other
module, of this room, of the other rooms and of ``sweeps``, asks :class:`SweepFolder` for a result
path, so that a renamed entry cannot leave a reader looking in the old place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

JOURNAL = ".journal"
CURVES = "curves"
TRIALS = "trials"
TRIALS_FILE = "trials.parquet"
QUARANTINE = "quarantine"
CHECKPOINTS = ".checkpoints"
RUNS = ".runs"
REPORT = "report"
README = "README.txt"
LOCK = ".run.lock"
FORMAT = ".format.json"
RUNNING = "running.json"

# The entries the store checks before it reads or writes through them (SweepStore.check_layout);
# running.json is checked by its reader (workers.storage.live_run), report/ by the report's writer.
FOLDERS = (JOURNAL, CURVES, TRIALS, QUARANTINE, CHECKPOINTS, RUNS)
FILES = (README, LOCK, FORMAT)


@dataclass
class SweepFolder:
    """The paths of one sweep folder, ``<results root>/<sweep>``."""

    root: Path

    @property
    def journal_dir(self) -> Path:
        return self.root / JOURNAL

    @property
    def curves_dir(self) -> Path:
        return self.root / CURVES

    @property
    def trials_dir(self) -> Path:
        return self.root / TRIALS

    @property
    def trials_file(self) -> Path:
        return self.root / TRIALS / TRIALS_FILE

    @property
    def quarantine_dir(self) -> Path:
        return self.root / QUARANTINE

    @property
    def checkpoints_dir(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def runs_dir(self) -> Path:
        return self.root / RUNS

    @property
    def report_dir(self) -> Path:
        return self.root / REPORT

    @property
    def readme_file(self) -> Path:
        return self.root / README

    @property
    def lock_file(self) -> Path:
        return self.root / LOCK

    @property
    def format_file(self) -> Path:
        return self.root / FORMAT

    @property
    def running_file(self) -> Path:
        return self.root / RUNNING
