"""What a run of trials is given and what it gives back, as values: the options of a run, the trials
to run (:class:`Job`), the progress it reports while it runs and the outcome it answers. The CLI
builds the first two from the spec and its arguments; nothing here reads the environment."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from banditsweep.core.engine.trial import TrialSpec
from banditsweep.workers.storage.record import TrialRecord
from banditsweep.workers.mirrors.sinks import MirrorStatus


@dataclass
class RunOptions:
    results_root: str
    sinks: list[str] = field(default_factory=list)   # registered sink names (none: Parquet only)
    # Each sink's own options, by the name of the sink that reads them (SinkContext.sink_options).
    sink_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    batch_trials: int | None = None
    max_workers: int | None = None
    checkpoint_every: int | None = None   # rounds between in-trial checkpoints (None: none)
    spec_path: str = ""                   # recorded with the run (the sinks' parent run)
    spec_text: str = ""
    source_commit: str = ""
    address: str | None = None            # a Ray cluster's address; None or "local": an embedded Ray
    env_vars: dict[str, str] = field(default_factory=dict)   # for every Ray worker process (plugins)
    cpus_per_shard: float = 1.0
    gpus_per_shard: float = 0.0
    # Where the trial actors read dataset files; None: wherever their own environment says (their
    # BANDITSWEEP_DATA, else their per-user cache).
    data_dir: str | None = None
    settings: dict[str, str] = field(default_factory=dict)   # the sweep-level settings, for the parent run
    # Classes registered in the driver's process that every trial actor registers too
    # (workers.provenance.shipped: a notebook's policy, shipped by value).
    shipped: tuple = ()


@dataclass
class Job:
    """One trial to run: its spec, its record, and how many of its attempts ended with its worker's
    death (counted by the dispatcher when it re-queues the trial, nowhere else). A trial whose worker
    died holding it runs ``isolated`` from then on: alone in its actor's queue, so that a later death
    is its own."""

    spec: TrialSpec
    record: TrialRecord
    attempts: int = 0
    isolated: bool = False
    shards: int = 0     # > 0: a sharded trial (workers.execution.sharded_trials), run by the driver after the pool's trials

    def next_attempt(self) -> TrialRecord:
        """The record of the attempt about to be handed out."""
        return replace(self.record, attempts=self.attempts + 1)


@dataclass
class Progress:
    total: int
    done: int = 0
    failed: int = 0
    running: int = 0            # trials handed to actors and not yet back
    actors: int = 0             # trial actors placed and built
    waiting_actors: int = 0     # trial actors asked for and not yet built (starting, or not placed)
    unplaced_actors: int = 0    # of those, the ones no node that is up has room for (autoscaler demand)
    device: str = "CPU"
    messages: list[str] = field(default_factory=list)   # lines to show once each (which Ray, sink outages)


@dataclass
class SweepOutcome:
    finished: int
    failed: int
    workers: int                # the most trial actors at work at once
    device: str
    reconcile: dict[str, int]
    mirror: MirrorStatus
    seconds: float
    ray: str = ""               # which Ray ran it, and what that held
    notes: list[str] = field(default_factory=list)   # warnings from trial actors
    sharded: int = 0            # sharded trials run (each over its own shard actors)
