"""``banditsweep verify SPEC``: re-run a sample of the sweep's finished trials on today's code, on
the same Ray as ``run``, and compare every stored value but timings (workers.provenance.verification).

The sample is drawn from a seed it prints (``--seed`` draws the same one again), at least one trial
of each code version the store holds, from the trials of the ``--set`` a stored run noted. The
re-runs go to a scratch folder beside the sweep's, removed at the end: the store itself is only
written by ``--accept``, which re-stamps the finished trials of each code version whose sampled
trials all reproduced as computed by today's code, naming the sample and its seed (a refactor, a
module moved, a faster exact kernel then costs no re-run). Exit 0 when every sampled trial
reproduces, 4 when one differs (each named with its first differing round and quantity).
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
from dataclasses import dataclass

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import SweepRequest
from banditsweep.sweeps.cli.commands import EXIT_INCONSISTENT
from banditsweep.sweeps.cli.commands.arguments import results_root
from banditsweep.sweeps.cli.commands.progress import ProgressDisplay
from banditsweep.sweeps.cli.commands.run import run_options
from banditsweep.sweeps.cli.commands.shared import jobs_of, say_health, said_selection, store_of
from banditsweep.sweeps.planning.datasets import chosen_data_dir, ensure_datasets_of_trials
from banditsweep.sweeps.spec.model import Sweep
from banditsweep.workers import current_code
from banditsweep.workers import run_sweep
from banditsweep.workers import InputError
from banditsweep.workers import FINISHED, TrialOutcome
from banditsweep.workers import SweepStore
from banditsweep.workers import accepted_records, code_groups, compare_trial, draw_sample


@dataclass
class VerifyOutcome:
    """What ``verify`` found: the sampled trials, those that differ (trial id -> the first difference,
    workers.provenance.verification), the sample's seed, whether ``--accept`` re-stamped, and the exit
    code (0: all reproduced; 4: one differs)."""

    exit_code: int
    sweep: Sweep
    sample: list[str]
    differences: dict
    seed: int
    accepted: bool = False

    @property
    def reproduced(self) -> int:
        return len(self.sample) - len(self.differences)


def main(args: SweepRequest, sweep: Sweep) -> int:
    return execute(args, sweep).exit_code


def execute(args: SweepRequest, sweep: Sweep) -> VerifyOutcome:
    """The check (what `banditsweep verify` and ``banditsweep.verify`` do), saying what the command says."""
    store = store_of(args, sweep)
    if not store.root.is_dir():
        raise InputError(f"{store.root}: no results of the sweep {sweep.name} here; nothing to verify "
                         f"(`banditsweep run {args.spec}` makes them)")
    sweep = said_selection(args, sweep, store)
    with store.exclusive():   # no run writes the store while its trials are compared (and re-stamped)
        return _verify(args, sweep, store)


def _verify(args: SweepRequest, sweep: Sweep, store: SweepStore) -> VerifyOutcome:
    jobs = jobs_of(sweep)
    health = store.verify(planned=[job.record.trial_id for job in jobs])
    say_health(health)
    journal = store.journal()
    finished = [job for job in jobs if job.record.trial_id in journal
                and journal[job.record.trial_id].status == FINISHED
                and job.record.trial_id not in health.missing_results]
    if not finished:
        raise InputError(f"{store.root}: none of the {len(jobs)} trials of {args.spec} is finished here; nothing "
                         "to verify")
    current = current_code(job.spec for job in finished)
    records = [journal[job.record.trial_id] for job in finished]
    groups = code_groups(records, current)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    sample = draw_sample(groups, args.sample, seed, {r.trial_id: r.wall_seconds for r in records},
                         args.max_trial_seconds)
    say(f"verify: re-running {len(sample)} of {len(finished)} finished trials on today's code ({len(groups)} code "
          f"version(s); sample seed {seed}: `--seed {seed}` draws the same sample)")
    wanted = set(sample)
    to_run = [job for job in finished if job.record.trial_id in wanted]
    data_dir = chosen_data_dir(args.data_dir)
    ensure_datasets_of_trials(args.spec, (job.spec for job in to_run), data_dir)
    scratch = tempfile.mkdtemp(prefix=f".verify-{sweep.name}-", dir=results_root(args))
    try:
        options = run_options(args, sweep, [], data_dir)
        options.results_root = scratch
        display = ProgressDisplay(len(to_run), sweep.name, bar=not args.no_progress)
        try:
            run_sweep(sweep.name, to_run, options, display.show)
        finally:
            display.close()
        rerun = SweepStore.for_sweep(scratch, sweep.name)
        now_records = rerun.journal()
        now_curves = _by_trial(rerun.read_curves(sample))
        stored_curves = _by_trial(store.read_curves(sample))
        differences = {}
        for trial_id in sample:
            difference = compare_trial(journal[trial_id], stored_curves.get(trial_id), now_records.get(trial_id),
                                       now_curves.get(trial_id))
            if difference is not None:
                differences[trial_id] = difference
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for difference in differences.values():
        say(difference.line(), file=sys.stderr)
    say(f"reproduced {len(sample) - len(differences)} of {len(sample)} (sample seed {seed})")
    if args.accept:
        _accept(store, groups, records, current, sample, differences, seed)
    return VerifyOutcome(EXIT_INCONSISTENT if differences else 0, sweep, list(sample), differences, seed,
                         bool(args.accept))


def _by_trial(curves):
    return {trial_id: frame for trial_id, frame in curves.groupby("trial_id", observed=True)} if len(curves) else {}


def _accept(store: SweepStore, groups, records, current, sample, differences, seed) -> None:
    """Re-stamp each code version whose sampled trials all reproduced as computed by today's code."""
    by_id = {record.trial_id: record for record in records}
    stamped, refused = [], []
    for (algorithm, stored, today), ids in sorted(groups.items()):
        sampled = [trial_id for trial_id in ids if trial_id in sample]
        if any(trial_id in differences for trial_id in sampled):
            refused.append(f"{algorithm} ({len(ids)} trial(s) of code {stored}): a sampled trial differs")
            continue
        if stored == today:
            continue
        stamped += accepted_records([by_id[trial_id] for trial_id in ids], current, sampled, seed)
    if stamped:
        store.write_outcomes([TrialOutcome(record) for record in stamped])
        store.write_trials_table(list(store.journal().values()))
        say(f"accepted: {len(stamped)} finished trial(s) computed by other code are stamped as computed by "
              f"today's code (each names the digest it was computed by, its code version's sampled trials and "
              f"the sample seed {seed})")
    elif not refused:
        say("accepted: nothing to stamp (every finished trial was computed by today's code)")
    for line in refused:
        say(f"not accepted: {line}", file=sys.stderr)
