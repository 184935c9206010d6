"""A spec's held-out stage (``confirm:``): the grid point chosen for each cell, run again on fresh seeds.

A grid point chosen on the seeds it is then judged on looks better than it is, and the more candidates
a cell chose among, the more so. A spec that says ::

    seeds: 3                 # every grid point runs on seeds 0, 1, 2: they choose
    confirm: {seeds: 10}     # the chosen point of each cell runs on seeds 3..12: they judge

is run in two stages by one ``banditsweep run``: every grid point on ``seeds``; then, for each
(algorithm label, environment) cell whose trials have all ended, the grid point the report's rule
chooses (:func:`banditsweep.sweeps.results.report.choose_grid_points`: lowest mean final regret, failed points
left out, ties within a relative 1e-9 to the earliest in the grid's order) on each of the confirming
seeds. ``report`` then chooses on ``seeds`` and judges every number, interval, pair and claim on the
confirming seeds alone, and says so in its captions.

The confirming trials are ordinary trials (a trial's identity is its content: algorithm, parameters,
environment, seed, horizon), so one that a larger grid already ran is reused, and the choice is made
again from the store each time the sweep is planned: a choice can only change where the choosing
trials changed (run again on new code, say), and the trials of the old choice then stay in the store,
unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from banditsweep.sweeps.spec.model import PlannedTrial, Sweep
from banditsweep.workers import FAILED, FINISHED, SweepStore


@dataclass(frozen=True)
class Confirmation:
    """Where a sweep's held-out stage stands: the cells of the choosing stage, those whose trials have
    all ended (and so have a chosen grid point), and the confirming trials planned for them."""

    seeds: tuple[int, ...]
    cells: int
    chosen: int
    trials: tuple[PlannedTrial, ...]

    @property
    def waiting(self) -> int:
        """Cells whose choosing trials have not all ended: their confirming trials are not planned yet."""
        return self.cells - self.chosen

    @property
    def planned_when_done(self) -> int:
        return self.cells * len(self.seeds)


def confirmation(sweep: Sweep, store: SweepStore | None) -> Confirmation | None:
    """The held-out stage of ``sweep`` as ``store`` allows it now (None: the spec has none)."""
    seeds = sweep.spec.confirm_seeds
    if not seeds:
        return None
    choosing = set(sweep.spec.seed_list)
    cells: dict[tuple[str, str], list[PlannedTrial]] = {}
    for trial in sweep.trials:
        if trial.spec.seed in choosing:   # (a sweep given with its confirming trials already added)
            cells.setdefault((trial.label, trial.environment), []).append(trial)
    journal = store.journal() if store is not None and store.root.is_dir() else {}
    ended = {tid: record.status for tid, record in journal.items() if record.status in (FINISHED, FAILED)}
    ready = [trial for trials in cells.values() if all(t.trial_id in ended for t in trials) for trial in trials]
    if not ready:
        return Confirmation(tuple(seeds), len(cells), 0, ())
    # The report's own rule on the same records, so the run confirms what the report will judge.
    from banditsweep.sweeps.results.report import choose_grid_points, finished_trials, recorded_trials

    recorded = recorded_trials(store)
    choice = choose_grid_points(finished_trials(recorded, ready), finished_trials(recorded, ready, FAILED))
    chosen = {(row["label"], row["environment"]): set(row["trial_ids"]) for _, row in choice.best.iterrows()}
    planned = []
    for key, trials in cells.items():
        ids = chosen.get(key)
        if not ids:
            continue
        first = next(trial for trial in trials if trial.trial_id in ids)
        planned.extend(replace(first, spec=first.spec.with_seed(seed)) for seed in seeds)
    return Confirmation(tuple(seeds), len(cells), len(chosen), tuple(planned))


def with_costed_confirmation(sweep: Sweep, store: SweepStore | None) -> tuple[Sweep, Confirmation | None]:
    """:func:`with_confirmation` plus, for each cell not chosen yet, its first grid point on the
    confirming seeds: what ``plan`` costs the held-out stage by (a cell's grid points differ in
    parameters, seldom much in cost per round)."""
    planned, stage = with_confirmation(sweep, store)
    if stage is None or not stage.waiting:
        return planned, stage
    chosen = {(trial.label, trial.environment) for trial in stage.trials}
    first: dict[tuple[str, str], PlannedTrial] = {}
    for trial in sweep.trials:
        if trial.spec.seed in set(sweep.spec.seed_list):
            first.setdefault((trial.label, trial.environment), trial)
    extra = [replace(trial, spec=trial.spec.with_seed(seed)) for key, trial in first.items() if key not in chosen
             for seed in stage.seeds]
    return replace(planned, trials=[*planned.trials, *extra]), stage


def with_confirmation(sweep: Sweep, store: SweepStore | None) -> tuple[Sweep, Confirmation | None]:
    """``sweep`` with its confirming trials added, as far as ``store`` has chosen them."""
    stage = confirmation(sweep, store)
    if stage is None or not stage.trials:
        return sweep, stage
    known = {trial.trial_id for trial in sweep.trials}
    extra = [trial for trial in stage.trials if trial.trial_id not in known]
    return replace(sweep, trials=[*sweep.trials, *extra]), stage


def describe(stage: Confirmation) -> str:
    """One line on the held-out stage, for ``run``, ``plan`` and ``status``."""
    seeds = list(stage.seeds)
    shown = f"{seeds[0]}..{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2 else \
        ", ".join(map(str, seeds))
    if not stage.waiting:
        return (f"held-out stage: the chosen grid point of each of the {stage.cells} cells on fresh seeds {shown} "
                f"({len(stage.trials)} trials planned)")
    return (f"held-out stage: {stage.chosen} of {stage.cells} cells chosen so far; each cell's chosen grid point "
            f"runs on fresh seeds {shown} once its trials have ended (up to {stage.planned_when_done} trials)")
