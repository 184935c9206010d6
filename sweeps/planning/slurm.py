"""A sweep on a Slurm allocation: the ``#SBATCH`` lines ``banditsweep plan SPEC --slurm`` prints
for ``cluster-slurm.sbatch`` (nodes, GPUs, CPUs, a ``--time`` from the plan's cost model, requeue
and the stop signal), and what ``run`` says inside a Slurm job whose time limit is shorter than a
trial that cannot checkpoint (requeued, such a trial would start again from round 1 for ever).

Slurm's time format: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from banditsweep.sweeps.spec.errors import SpecError

if TYPE_CHECKING:   # sweeps.planning.plan loads numpy and core: the command line imports this module before them
    from banditsweep.sweeps.planning.plan import SweepPlan


def duration(seconds: float) -> str:
    from banditsweep.sweeps.planning.plan import duration

    return duration(seconds)

# Seconds before the time limit at which Slurm signals the batch script (--signal=B:USR1@LEAD): the
# run stops within seconds (workers.execution.signals' deadline at the latest, 20 s) and the job
# requeues itself.
SIGNAL_LEAD = 120
# Seconds a job spends before and after its trials: Ray's start on every node, the trial actors'
# start, the mirror's last writes and the store's compaction.
JOB_OVERHEAD = 180
# The cost model is of one trial on one core and within 2x of what a sweep measures
# (tests/sweeps/planning/test_plan.py): the time asked for covers the estimate this many times over.
TIME_SAFETY = 1.5
# A trial without checkpoints longer than this share of a job's time for trials is at risk.
CHECKPOINT_TARGET_SECONDS = 600.0   # a checkpoint about every 10 minutes of a trial, as suggested

TIME_FORMS = "M, M:S, H:M:S, D-H, D-H:M or D-H:M:S (e.g. 90, 4:00:00, 1-12)"


def parse_time(text: str) -> int:
    """Seconds of a Slurm time (``--time``, ``squeue -o %l``); ValueError for another text."""
    text = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise ValueError(f"{text!r} is not a Slurm time; give {TIME_FORMS}")
    days, first, second, third = match.groups()
    if days is not None:   # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if third is not None:   # H:M:S
        return (int(first) * 60 + int(second)) * 60 + int(third)
    if second is not None:   # M:S
        return int(first) * 60 + int(second)
    return int(first) * 60   # M


def format_time(seconds: float) -> str:
    """Whole minutes, rounded up, as Slurm writes a time: ``D-HH:MM:SS`` or ``HH:MM:SS``."""
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:00"
    return f"{days}-{clock}" if days else clock


@dataclass
class Allocation:
    """What one job asks of Slurm, and how many trials it runs at once."""

    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    gpus_per_trial: float
    cpus_per_trial: float
    time_limit: int | None = None   # the longest --time the partition allows (seconds), if one was given

    @property
    def workers(self) -> int:
        from banditsweep.sweeps.planning.plan import default_workers

        per_node = default_workers(self.cpus_per_node, self.cpus_per_trial, self.gpus_per_node, self.gpus_per_trial)
        return self.nodes * per_node

    @classmethod
    def of(cls, resources, nodes: int = 1, gpus_per_node: int = 0, cpus_per_node: int | None = None,
           time_limit: int | None = None) -> "Allocation":
        """The job's nodes, GPUs and CPUs for trials that ask for ``resources`` (a spec's
        ``resources:``); refused, naming the flag, where a trial cannot run on such a node."""
        gpus = gpus_per_node or 0
        if gpus < 0:
            raise SpecError("--gpus-per-node", str(gpus), "give 0 or more GPUs per node")
        asked = resources.gpus_per_trial
        if asked and not gpus:
            raise SpecError("--gpus-per-node", "0", f"the spec's trials ask for {asked:g} GPU(s) each "
                                                   "(resources.gpus_per_trial); give the nodes' GPUs, or --set "
                                                   "resources.gpus_per_trial=0 to plan them on CPUs")
        # On a cluster with GPUs a trial actor asks for one GPU unless the spec says otherwise.
        gpus_per_trial = (asked if asked is not None else 1.0) if gpus else 0.0
        if gpus_per_trial > gpus > 0:
            raise SpecError("--gpus-per-node", str(gpus), f"a trial asks for {gpus_per_trial:g} GPUs "
                                                          "(resources.gpus_per_trial): more than a node has")
        cpus = cpus_per_node
        if cpus is None:
            if gpus:
                actors = math.floor(gpus / gpus_per_trial)
                cpus = max(1, math.ceil(actors * resources.cpus_per_trial))
            else:
                cpus = len(os.sched_getaffinity(0))
        if resources.cpus_per_trial > cpus:
            raise SpecError("--cpus-per-node", str(cpus), f"a trial asks for {resources.cpus_per_trial:g} CPUs "
                                                          "(resources.cpus_per_trial): more than a node has")
        return cls(nodes, gpus, cpus, gpus_per_trial, resources.cpus_per_trial, time_limit)


def job_seconds(plan: "SweepPlan") -> float:
    """The --time one job needs for the whole sweep: the estimate with its margin, Ray's start and
    the stop before the limit."""
    return plan.trial_seconds * TIME_SAFETY + JOB_OVERHEAD + SIGNAL_LEAD


def trial_time_per_job(limit: int) -> float:
    """Seconds of a job of ``limit`` seconds that are left for its trials (at least half of a short
    job: its start and stop are those of a small sweep)."""
    return max(limit - JOB_OVERHEAD - SIGNAL_LEAD, limit / 2)


def too_long_trials(plan: "SweepPlan", limit: int, checkpoint_every: int | None) -> list[str]:
    """Warnings for the cells whose trials cannot finish within one job of ``limit`` seconds and
    have no checkpoints: each job would start them again from round 1."""
    if checkpoint_every:
        return []
    usable = trial_time_per_job(limit)
    warnings = []
    for cell in plan.cells:
        if math.isnan(cell.seconds_per_trial):
            continue
        trial = cell.seconds_per_trial * TIME_SAFETY
        if trial > usable:
            every = max(1, int(cell.horizon * CHECKPOINT_TARGET_SECONDS / max(cell.seconds_per_trial, 1e-9)))
            warnings.append(
                f"warning: a trial of {cell.label} | {cell.environment} takes about {duration(cell.seconds_per_trial)}, "
                f"longer than the {duration(usable)} a job of --time {format_time(limit)} has for trials; without "
                f"checkpoints it starts again from round 1 in every requeued job and never finishes: set "
                f"checkpoint_every (e.g. --set checkpoint_every={min(every, cell.horizon)}) or ask for a longer --time")
    return warnings


def sbatch_lines(job: Allocation, plan: "SweepPlan", submit: list[str], checkpoint_every: int | None) -> list[str]:
    """What ``plan --slurm`` prints after the plan: the #SBATCH lines, ``submit`` (the command that
    sends the job), and warnings."""
    needed = job_seconds(plan)
    limit = job.time_limit
    asked = needed if limit is None else min(needed, limit)
    lines = ["", f"# Slurm: {job.nodes} node(s) x {job.workers // job.nodes} trial(s) at once = {job.workers} "
                 f"worker(s); about {duration(plan.trial_seconds)} of trials (x{TIME_SAFETY:g}, plus "
                 f"{JOB_OVERHEAD + SIGNAL_LEAD} s for Ray's start and the stop)",
             f"#SBATCH --nodes={job.nodes}", "#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={job.cpus_per_node}"]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    lines += [f"#SBATCH --time={format_time(asked)}", "#SBATCH --requeue", f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD}",
              "#SBATCH --open-mode=append"]
    lines.append("# then: " + " ".join(shlex.quote(part) for part in submit))
    if plan.unknown:
        lines.append(f"# ({plan.unknown} cell(s) not estimated: --time covers the others only)")
    if limit is not None and needed > limit:
        jobs = math.ceil(plan.trial_seconds * TIME_SAFETY / max(1.0, trial_time_per_job(limit)))
        lines.append(f"# the sweep needs about {jobs} jobs of --time {format_time(limit)}: each stops "
                     f"{SIGNAL_LEAD} s before its limit, requeues itself and the next resumes where it stopped")
    if limit is not None:
        lines += too_long_trials(plan, limit, checkpoint_every)
    return lines


# ---- inside a Slurm job ---------------------------------------------------------------------------

def job_time_limit(environ=os.environ) -> int | None:
    """Seconds of this Slurm job's time limit, or None outside a job (or without one): from
    ``$SLURM_JOB_START_TIME`` / ``$SLURM_JOB_END_TIME`` where Slurm sets them (23.02 and later),
    else ``squeue -h -j $SLURM_JOB_ID -o %l``."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    start, end = environ.get("SLURM_JOB_START_TIME"), environ.get("SLURM_JOB_END_TIME")
    if start and end and start.isdigit() and end.isdigit() and int(end) > int(start):
        return int(end) - int(start)
    try:
        done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%l"], capture_output=True, text=True, timeout=10)
        return parse_time(done.stdout.strip().splitlines()[0]) if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None   # UNLIMITED, INVALID, or no squeue here


def job_time_left(environ=os.environ) -> float | None:
    """Seconds until this Slurm job's end ($SLURM_JOB_END_TIME, else ``squeue -o %e``), or None."""
    end = environ.get("SLURM_JOB_END_TIME")
    if end and end.isdigit():
        return int(end) - time.time()
    return None


def time_limit_notes(plan: "SweepPlan", checkpoint_every: int | None, environ=os.environ) -> list[str]:
    """What ``run`` says inside a Slurm job whose time limit is too short for a trial without
    checkpoints (nothing outside Slurm)."""
    limit = job_time_limit(environ)
    if limit is None:
        return []
    return [line.replace("warning: ", "warning (Slurm job {}): ".format(environ.get("SLURM_JOB_ID")), 1)
            for line in too_long_trials(plan, limit, checkpoint_every)]
