"""Result stores built or changed by hand, for the tests of the results folder: four records of known
values (two LinUCB trials on a synthetic bandit, a finished and a failed Random trial on a kernel
grid), a store written from them in two groups and compacted, and a journal record edited in place."""

import json

import numpy as np

from banditsweep.workers.storage.record import FAILED, FINISHED, TrialOutcome, TrialRecord
from banditsweep.workers.storage.store import SweepStore, TrialsTable

H1 = {"kind": "synthetic", "function": "h1", "arms": 4, "dim": 5, "noise": 0.1}
GRID = {"kind": "adversarial_kernel", "domain": {"grid": [5, 5]}, "kernel": "se", "candidates": 20}


def make_record(trial_id, label, env_name, env, seed, params, final=None, status=FINISHED):
    done = status == FINISHED
    return TrialRecord(trial_id=trial_id, sweep="s", algorithm=label.lower(), label=label, environment=env_name,
                       seed=seed, horizon=3, params=params, environment_config=env, log_every=1, status=status,
                       attempts=1, final_regret=final if done else None, wall_seconds=0.5 if done else None,
                       seconds_per_round=2.5e-5 if done else None,
                       diagnostics={"update_seconds": 1e-5, "batch_size": 2} if done else {},
                       error=None if done else "ValueError: x", started_at=1.7e9, finished_at=1.7e9 + 0.25,
                       node="127.0.0.1", device="cpu")


def make_outcome(record):
    if record.status != FINISHED:
        return TrialOutcome(record)
    cum = np.array([1.0, 2.0, record.final_regret])
    return TrialOutcome(record, {"arm": np.array([0, 1, 2]), "reward": np.zeros(3), "regret": np.diff(cum, prepend=0),
                                 "cum_regret": cum, "seconds": np.full(3, 2.5e-5)})


RECORDS = [
    make_record("a" * 20, "LinUCB", "synthetic:h1", H1, 0, {"nu": 0.1, "lam": 1.0}, final=4.0),
    make_record("b" * 20, "LinUCB", "synthetic:h1", H1, 1, {"nu": 0.1, "lam": 1.0}, final=6.0),
    make_record("c" * 20, "Random", "kernel:se", GRID, 0, {}, final=9.0),
    make_record("d" * 20, "Random", "kernel:se", GRID, 1, {}, status=FAILED),
]


def make_store(tmp_path, groups=((0, 1), (2, 3))) -> SweepStore:
    store = SweepStore.for_sweep(tmp_path / "results", "s")
    for group in groups:
        store.write_outcomes([make_outcome(RECORDS[i]) for i in group])
    TrialsTable(store).flush()
    store.compact()
    return store


def edit_journal(store: SweepStore, change, keep_digest: bool = False) -> tuple[str, str]:
    """Apply ``change`` to the first record of the journal (as text, or as a dict); the record's
    checksum is dropped (as in a record of an earlier version) unless ``keep_digest``. Returns the
    segment's path and the trial id of the record."""
    (segment,) = store.journal_dir.glob("*.jsonl")
    lines = segment.read_text().splitlines()
    values = json.loads(lines[0])
    trial_id = values["trial_id"]
    if not keep_digest:
        del values["sha256"]
    lines[0] = change(values) if callable(change) else change
    if not isinstance(lines[0], str):
        lines[0] = json.dumps(lines[0])
    segment.write_text("\n".join(lines) + "\n")
    return segment, trial_id


def write_spec_results(folder, spec: dict, final=lambda trial: 10.0 + trial.spec.seed, failed=lambda trial: False,
                       name: str = "spec.yaml", overrides: tuple[str, ...] = (), note_run: bool = False) -> SweepStore:
    """The trials of ``spec`` (written to ``folder/name``, planned with the --set pairs ``overrides``)
    as a run leaves them in ``folder/results``, without running anything: each finished with the
    final regret ``final(trial)`` at the end of a straight-line curve of its horizon's rounds, and
    stamped with today's code (so that `status` and `report` see trials of the code they read);
    those for which ``failed(trial)`` holds failed. ``note_run``: the run noted with its --set, as
    `run` notes it (workers.storage.run_notes)."""
    import dataclasses

    import yaml

    from banditsweep.sweeps.cli.commands.shared import record_of
    from banditsweep.sweeps.spec.model import load_sweep
    from banditsweep.sweeps.spec.overrides import parse_overrides
    from banditsweep.workers.provenance.code_identity import code_of
    from banditsweep.workers.provenance.runtime import runtime_info
    from banditsweep.workers.storage.run_notes import record_run

    (folder / name).write_text(yaml.safe_dump(spec))
    sweep = load_sweep(folder / name, parse_overrides(list(overrides)))
    store = SweepStore.for_sweep(folder / "results", sweep.name)
    runtime = runtime_info("cpu")
    outcomes = []
    for trial in sweep.trials:
        record = dataclasses.replace(record_of(sweep, trial), attempts=1, node="127.0.0.1", device="cpu",
                                     started_at=1.7e9, finished_at=1.7e9 + 1).ran_on(code_of(trial.spec), runtime)
        if failed(trial):
            outcomes.append(TrialOutcome(dataclasses.replace(
                record, status=FAILED, error="NonFiniteError: round 3: the reward is nan")))
            continue
        value, horizon = float(final(trial)), trial.spec.horizon
        record = dataclasses.replace(record, status=FINISHED, final_regret=value, wall_seconds=1.0,
                                     seconds_per_round=1e-4)
        cum = np.linspace(value / horizon, value, horizon)
        outcomes.append(TrialOutcome(record, {"arm": np.zeros(horizon, int), "reward": np.zeros(horizon),
                                              "regret": np.diff(cum, prepend=0), "cum_regret": cum,
                                              "seconds": np.full(horizon, 1e-4)}))
    store.write_outcomes(outcomes)
    TrialsTable(store).flush()
    store.compact()
    if note_run:
        # A note is named by the second and process it was written in: numbered here, so that two
        # notes written within one second stay two, the later one sorting as the later run.
        path = record_run(store.root, list(overrides), len(sweep.trials))
        path.rename(path.with_name(f"{path.stem}-{len(list(path.parent.glob('run-*.json'))):03d}.json"))
    return store
