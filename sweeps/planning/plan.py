"""What a sweep will cost before it runs: ``banditsweep plan SPEC`` (and the first lines of ``run``).

Per cell of the sweep (label x environment x horizon: the trials that differ only by seed and grid
point cost the same) the plan gives the trials, the trial-rounds, the seconds a round takes, the
memory a trial needs (core.engine.memory) and the GPUs it asks for; then the total as wall time on the
cluster at hand, or on ``--workers N`` / ``--gpus N``.

Seconds per round come from, in order of trust:

1. ``measured``: finished trials of the same cell in the sweep's store (their mean wall time), at
   the rate of a quiet core (:func:`quiet_seconds`): a trial records the machine's mean load average
   L while it ran and the machine's CPU count C (workers.provenance.load). Trials measured quietly
   (L <= C: every runnable process had a CPU) are taken as they are, and when a cell has any, only
   they count; otherwise each crowded trial's time is scaled by C / L (above C, a CPU-bound process
   gets about C / L of a core), i.e. by min(1, C / max(L, 1)). A trial without a recorded load (an
   older store) counts as quiet, as measured. The source column says how many trials were scaled;
2. ``probe``: a short timed run of the cell's first trial on this machine, in this process, of at
   most :data:`PROBE_SECONDS` (at least :data:`PROBE_MIN_ROUNDS` rounds), extrapolated to the horizon
   by the algorithm's asymptotics: a round's cost is constant in t, or (``round_cost_grows``: the
   neural methods, which train on the whole history every round) a + b t, fitted to the probe's
   rounds. The first round (building the environment and the policy) is counted once.

The model is of one trial on one core; lockstep batches and several threads make a sweep faster,
cold starts slower. ``tests/sweeps/planning/test_plan.py`` checks it within 2x of a small sweep's measured time.

A run also pays for Ray whatever its trials: :data:`RAY_START_SECONDS` for the start of an embedded
Ray, its trial actors and its stop, which the wall time includes and the plan's last line names (on a
small sweep it is most of the wait). A cell that is not estimated (sharded, too big to build here, a
probe that failed, or in ``run``'s first lines an algorithm not of banditsweep's own) is named as such
and left out of the totals: the totals say what they cover, never "about 0 s" for trials not timed.
"""

from __future__ import annotations

import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from banditsweep.core.neural.datasets import DATA_ENV_VAR
from banditsweep.core.engine.memory import gib, trial_footprint
from banditsweep.core.engine.trial import TrialRun
from banditsweep.sweeps.publishing.display import display_name
from banditsweep.workers import quiet_factor

PROBE_SECONDS = 3.0       # per cell, at most (a probe stops at the first round past it)
PROBE_MIN_ROUNDS = 3
PROBE_MAX_ROUNDS = 200
# A trial larger than this is not built in the planning process (its cost is left unknown).
PROBE_MAX_BYTES = 2 * 1024 ** 3
# A run whose estimate exceeds this says so before it starts.
LONG_RUN_SECONDS = 3600.0
# Seconds a run on an embedded Ray spends on Ray whatever its trials: `ray.init`, the trial actors'
# worker processes, the mirror's last writes and `ray.shutdown`. docs/benchmarks.md ("Start-up and
# tear-down") measures 12-25 s for the quick-start sweep on a 2-core machine (start-up 9-22 s,
# tear-down 2-4 s), against 1.5 s of trials: on a small sweep it is most of the wait. A Slurm job's
# own overhead (Ray on every node of the allocation) is sweeps.planning.slurm.JOB_OVERHEAD.
RAY_START_SECONDS = 20.0


#: The plan's last line where a cell's cost is measured (module docstring, item 1).
MEASURED_RULE = ("measured: at a quiet core's rate; a trial run at load L on C CPUs counts as it is when "
                 "L <= C (only such trials, where a cell has them), else scaled by min(1, C / max(L, 1))")


@dataclass
class CellCost:
    label: str
    environment: str
    horizon: int
    trials: int
    seconds_per_trial: float
    memory_bytes: int
    gpus_per_trial: float
    source: str                          # measured (n trials) | probe (k rounds)
    algorithm: str | None = None         # its registry name (the label's display name follows from it)

    @property
    def name(self) -> str:
        """The cell as a figure names it: ``LinUCB | synthetic:h1``, not ``linucb | synthetic:h1``."""
        return f"{display_name(self.label, self.algorithm)} | {self.environment}"

    @property
    def trial_rounds(self) -> int:
        return self.trials * self.horizon

    @property
    def seconds_per_round(self) -> float:
        return self.seconds_per_trial / self.horizon

    @property
    def seconds(self) -> float:
        return self.trials * self.seconds_per_trial


@dataclass
class SweepPlan:
    sweep: str
    cells: list[CellCost] = field(default_factory=list)
    workers: int = 1
    pending: int | None = None           # trials left to run (the store's finished ones done)
    ray_start_seconds: float = RAY_START_SECONDS   # Ray's start and stop, whatever the trials

    @property
    def trials(self) -> int:
        return sum(cell.trials for cell in self.cells)

    @property
    def trial_rounds(self) -> int:
        return sum(cell.trial_rounds for cell in self.cells)

    @property
    def unknown(self) -> int:
        """Cells whose cost could not be estimated (left out of the totals)."""
        return sum(1 for cell in self.cells if math.isnan(cell.seconds_per_trial))

    @property
    def serial_seconds(self) -> float:
        return sum(cell.seconds for cell in self.cells if not math.isnan(cell.seconds))

    @property
    def estimated(self) -> bool:
        """Whether any cell's cost is known (the totals cover those that are)."""
        return self.unknown < len(self.cells)

    @property
    def trial_seconds(self) -> float:
        """The trials on ``workers`` parallel actors: the work shared out, never less than the longest
        trial (Ray's start not included)."""
        longest = max((cell.seconds_per_trial for cell in self.cells if not math.isnan(cell.seconds_per_trial)),
                      default=0.0)
        return max(self.serial_seconds / max(1, self.workers), longest)

    @property
    def wall_seconds(self) -> float:
        """What the run takes: its trials on ``workers`` parallel actors and Ray's start and stop
        (nothing when no trial is left to run)."""
        return self.trial_seconds + self.ray_start_seconds if self.cells else 0.0

    def total_line(self) -> str:
        """The plan's total: trials, rounds, time of one core and wall time, each saying what it covers."""
        counted = f"{self.trials:,} trials, {self.trial_rounds:,} trial-rounds"
        if not self.cells:
            return f"{counted}: nothing left to run"
        ray = f"Ray's start and stop {about(self.ray_start_seconds)}"
        if not self.estimated:
            return (f"{counted}; the trials' time is not estimated ({self.unknown} cell(s) not estimated, see "
                    f"source); {ray}")
        unknown = f" ({self.unknown} cell(s) not estimated, left out)" if self.unknown else ""
        return (f"{counted}; {about(self.serial_seconds)} of one core{unknown}; on {self.workers} worker(s) "
                f"{about(self.wall_seconds)}: the trials {about(self.trial_seconds)}, {ray}")

    def lines(self) -> list[str]:
        """The plan as a table and a total, for the terminal."""
        if not self.cells:
            return [self.total_line()]
        names = [cell.name for cell in self.cells]
        width = min(max([len(name) for name in names] + [4]), 90)
        header = f"{'cell':<{width}} {'trials':>7} {'rounds':>11} {'s/round':>9} {'memory':>10} {'GPU':>4}  source"
        rows = [header, "-" * len(header)]
        for cell, name in zip(self.cells, names):
            name = name if len(name) <= width else name[:width - 3] + "..."
            per_round = "?" if math.isnan(cell.seconds_per_round) else f"{cell.seconds_per_round:.3g}"   # 9.17e-05: fast rounds keep their digits
            rows.append(f"{name:<{width}} {cell.trials:>7,} {cell.trial_rounds:>11,} {per_round:>9} "
                        f"{gib(cell.memory_bytes):>10} {cell.gpus_per_trial:>4g}  {cell.source}")
        rows.append(self.total_line())
        if any(cell.source.startswith("measured") for cell in self.cells):
            rows.append(MEASURED_RULE)
        return rows


def about(seconds: float) -> str:
    """``about 3 min``, or ``under 1 s``."""
    return "under 1 s" if seconds < 0.5 else f"about {duration(seconds)}"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def probe(spec, budget: float = PROBE_SECONDS, threads: int = 1) -> tuple[float, int]:
    """(estimated seconds of the whole trial, rounds probed): a short timed run, extrapolated. The
    probe runs with the trial actor's thread count (``threads``: its CPUs), as the trial will."""
    spec.policy_class   # imports the algorithm's module (and torch, if it uses it)
    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(max(1, threads))
    try:
        return _timed(spec, budget)
    finally:
        if torch is not None:
            torch.set_num_threads(previous)


def _timed(spec, budget: float) -> tuple[float, int]:
    started = time.perf_counter()
    run = TrialRun([spec])
    build = time.perf_counter() - started
    times: list[float] = []
    while not run.done and len(times) < PROBE_MAX_ROUNDS:
        round_started = time.perf_counter()
        run.play_round()
        times.append(time.perf_counter() - round_started)
        if len(times) >= PROBE_MIN_ROUNDS and time.perf_counter() - started > budget:
            break
    horizon, probed = spec.horizon, len(times)
    if probed == horizon:
        return build + sum(times), probed
    later = np.asarray(times[1:]) if probed > 1 else np.asarray(times)
    t = np.arange(2, probed + 1, dtype=float) if probed > 1 else np.ones(1)
    slope, intercept = 0.0, float(np.mean(later))
    if getattr(spec.policy_class, "round_cost_grows", False) and len(later) >= 4:
        # a + b t from the means of the probe's two halves: a round's time has heavy tails on a shared
        # machine, and a least-squares slope through a few dozen of them extrapolates the noise.
        half = len(later) // 2
        early, late = later[:half].mean(), later[half:].mean()
        slope = max(0.0, (late - early) / (t[half:].mean() - t[:half].mean()))
        intercept = float(later.mean() - slope * t.mean())
    rest = np.arange(probed + 1, horizon + 1, dtype=float)
    return build + sum(times) + float(np.sum(np.maximum(intercept + slope * rest, 0.0))), probed


def plan_sweep(sweep, workers: int, store_records=None, budget: float = PROBE_SECONDS,
               done: set[str] | None = None, probe_plugins: bool = True) -> SweepPlan:
    """The plan of ``sweep`` (a parsed spec) on ``workers`` parallel trials. ``store_records``:
    the records of its store (measured costs come from their finished trials); ``done``: trial ids
    already finished (left out of the totals). A cell is not probed when its trial is sharded or
    too big to build here, or (``probe_plugins=False``) when its algorithm is a plugin's; a probe
    that raises leaves the cell's cost unknown: planning never fails a run."""
    measured: dict[tuple, list] = {}
    for record in (store_records or {}).values():
        if record.status == "finished" and record.wall_seconds:
            measured.setdefault((record.label, record.environment, record.horizon), []).append(record)
    cells: dict[tuple, list] = {}
    for trial in sweep.trials:
        if done and trial.spec.trial_id in done:
            continue
        cells.setdefault((trial.label, trial.environment, trial.spec.horizon), []).append(trial)
    resources = sweep.spec.resources
    plan = SweepPlan(sweep.spec.sweep, workers=workers, pending=sum(len(v) for v in cells.values()))
    for (label, environment, horizon), trials in cells.items():
        first = trials[0]
        times = measured.get((label, environment, horizon))
        memory = sum(trial_footprint(first.spec, first.shards).values())
        if times:
            seconds, source = quiet_seconds(times)
        elif first.shards:
            seconds, source = math.nan, "not probed (sharded)"
        elif memory > PROBE_MAX_BYTES:
            seconds, source = math.nan, f"not probed ({gib(memory)} a trial)"
        elif not probe_plugins and not first.spec.policy_class.__module__.startswith("banditsweep."):
            seconds, source = math.nan, "not probed (not one of banditsweep's algorithms: `plan` probes it)"
        else:
            try:
                seconds, rounds = probe(first.spec, budget, max(1, int(resources.cpus_per_trial)))
                source = f"probe ({rounds} of {horizon} rounds)"
            except Exception as error:   # the trial itself will say what is wrong, in its record
                seconds, source = math.nan, f"probe failed ({type(error).__name__})"
        gpus = resources.gpus_per_trial or 0.0
        plan.cells.append(CellCost(label, environment, horizon, len(trials), seconds, memory, gpus, source,
                                   first.spec.algorithm))
    return plan


def quiet_seconds(records) -> tuple[float, str]:
    """A cell's seconds per trial from its finished trials' records, at a quiet core's rate (module
    docstring, item 1), and the plan's source text: ``measured (n trials)``, ``measured (n trials, k
    quiet)`` when crowded ones were set aside, ``measured (n trials, k scaled for load)``."""
    factors = [quiet_factor(record.load_average, (record.runtime or {}).get("machine_cpus")) for record in records]
    quiet = [record.wall_seconds for record, factor in zip(records, factors) if factor == 1.0]
    n = len(records)
    counted = f"{n} trial{'s' if n > 1 else ''}"
    if len(quiet) == n:
        return float(np.mean(quiet)), f"measured ({counted})"
    if quiet:
        return float(np.mean(quiet)), f"measured ({counted}, {len(quiet)} quiet)"
    scaled = [record.wall_seconds * factor for record, factor in zip(records, factors)]
    return float(np.mean(scaled)), f"measured ({counted}, {n} scaled for load)"


def default_workers(cpus: float, cpus_per_trial: float, gpus: float = 0.0, gpus_per_trial: float = 0.0) -> int:
    """Trials at once on ``cpus`` CPUs (and ``gpus`` GPUs when trials ask for GPUs)."""
    by_cpu = math.floor(cpus / cpus_per_trial) if cpus_per_trial > 0 else 1
    if gpus_per_trial > 0:
        return max(1, min(by_cpu, math.floor(gpus / gpus_per_trial)))
    return max(1, by_cpu)


@contextmanager
def data_directory(data_dir):
    """The probes build classification environments in this process: they read the data directory
    from its environment, as a trial actor's do; restored afterwards."""
    before = os.environ.get(DATA_ENV_VAR)
    if data_dir is not None:
        os.environ[DATA_ENV_VAR] = str(data_dir)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(DATA_ENV_VAR, None)
        else:
            os.environ[DATA_ENV_VAR] = before
