"""The driver side of a sweep: connect to Ray, start the mirror and the trial actors, hand out
batches of trials until none is left, make every outcome durable, re-queue the trials of actors
that died.

Ray Core does the scheduling (actors placed by their resource requests); this module keeps a queue
and a pool (workers.execution.pool). One trial actor per GPU when the cluster has GPUs, else one per
``cpus_per_trial`` CPUs, capped by ``max_workers``. Each actor holds up to two batches (the one it
runs and the next), so it never waits for the driver; the driver writes the outcomes that arrive
together as one group (workers.storage.store) and only then counts them done.

:class:`SweepLoop` steps through named phases until the queue and the actors are empty, as Ray
Tune's controller steps through its own:

- **grow** the pool towards the batches left (what the nodes that are up can place);
- **hand out** batches to actors with room in their queue;
- **watch the sinks**: ask the mirror, without waiting, what went wrong with them, and which trials
  run and how far they are (for ``running.json``, workers.storage.live_run);
- **collect** what arrived: outcomes, actors that became ready, actors that died;
- **requeue the dead**: the batches of an actor that died go back to the queue (the one place a
  trial's attempts are counted), or fail after ``MAX_ATTEMPTS``;
- **feed** the outcomes to the store (durable) and then to the sinks (through the mirror);
- **release** idle actors once nothing is left to hand out.

Sharded trials run after the pool's trials, one at a time, from the driver (workers.execution.sharded_trials).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from banditsweep.core.engine.round_loop import TrialStopped
from banditsweep.core.engine.trial import checkpoint_key
from banditsweep.workers.execution.actors import NOT_STARTED, MirrorActor, drain_mirror
from banditsweep.workers.execution.batches import make_batches
from banditsweep.workers.execution.checkpoint_keeper import run_checkpoints
from banditsweep.workers.storage.checkpoint_files import CheckpointFiles
from banditsweep.workers.errors import ResourceRequestError, StoreWriteError
from banditsweep.workers.storage.live_run import WRITE_EVERY, Heartbeat, RunningTrials
from banditsweep.workers.execution.run_values import Job, Progress, RunOptions, SweepOutcome
from banditsweep.workers.execution.pool import Slot, TrialPool, actor_resources, check_shards_fit, placeable
from banditsweep.workers.execution.ray_connection import RayConnection
from banditsweep.workers.execution.shipped_datasets import ship_datasets
from banditsweep.workers.provenance.code_identity import known_code
from banditsweep.workers.execution.result_writer import ResultWriter
from banditsweep.workers.storage.record import MAX_ATTEMPTS, TrialOutcome
from banditsweep.workers.mirrors.prepare import finish_preparing, start_preparing
from banditsweep.workers.mirrors.sinks import MirrorStatus, SinkContext
from banditsweep.workers.mirrors.mlflow.store_checks import mlflow_login
from banditsweep.workers.storage.store import SweepStore

__all__ = ["Job", "Progress", "RunOptions", "SweepOutcome", "run_sweep"]

# Batches an actor holds at once: the one it runs and the next one, queued on the actor.
ACTOR_QUEUE = 2
# Seconds between two questions to the mirror about the sinks' troubles.
PROBLEMS_EVERY = 2.0
# Seconds the driver waits for something to arrive before it goes round the loop again.
COLLECT_WAIT = 1.0
# Seconds the other calls on an actor that died get to settle (with their result, if they finished
# before the death, which may still be on its way).
SETTLE_SECONDS = 10.0

# Rounds between the checkpoints of a sharded trial when the spec sets no checkpoint_every: a lost
# node then costs at most this many rounds of a trial that may run for hours.
SHARDED_CHECKPOINT_EVERY = 50
# Seconds a stopping run waits for its running trials to save their state (SweepLoop.save_running):
# well inside the stop's deadline (signals.STOP_DEADLINE, 20 s) and a scheduler's usual 30 s grace.
STOP_SAVE_SECONDS = 8.0


@dataclass
class InFlight:
    """A batch handed to an actor and not yet back."""

    slot: Slot
    batch: list[Job]


class SweepLoop:
    """One run's queue, pool and writer on a connected Ray, stepped through the phases of the
    module docstring until nothing is left."""

    def __init__(self, jobs: list[Job], options: RunOptions, store: SweepStore, context: SinkContext,
                 connection: RayConnection, on_progress: Callable[[Progress], None] | None):
        self.options, self.store, self.on_progress = options, store, on_progress
        self.context = context
        self.sharded = [job for job in jobs if job.shards]
        pooled = [job for job in jobs if not job.shards]
        self.connection, self.ray_line, self.ray_lost = connection, connection.describe(), False
        here = ray.get_runtime_context().get_node_id()
        self.mirror = MirrorActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote(options.sinks, context, [job.record.trial_id for job in jobs], mlflow_login(options.sinks))
        self.progress = Progress(total=len(jobs), messages=[self.ray_line])
        self.writer = ResultWriter(store, self.mirror, self.progress)
        self.problems_ref, self.problems_asked_at = None, time.monotonic()
        self.running_ref, self.running_asked_at = None, time.monotonic()
        self.heartbeat = Heartbeat(store.root)
        self.heartbeat.update(done=0, failed=0, total=len(jobs))
        self.show()
        cpus_each, gpus_each = actor_resources(options)
        if not connection.address:
            self._check_embedded_ray_fits(pooled, cpus_each, gpus_each)
        self.pool = TrialPool(self.mirror, cpus_each, gpus_each, options.max_workers,
                              use_autoscaler=bool(connection.address), data_dir=options.data_dir,
                              shipped=options.shipped, datasets=ship_datasets(pooled, options, connection.address))
        # The stop marker is this run's own (workers.storage.checkpoint_files): one an earlier run
        # left, had it been killed before removing it, asks nothing of this run.
        # On a cluster the folder is reached through a keeper on this node (workers.execution.checkpoint_keeper):
        # the nodes may share no disk.
        self.cluster = bool(connection.address)
        files = (CheckpointFiles(store.checkpoints_dir, options.checkpoint_every, stop_marker=f".stop-{uuid.uuid4().hex}")
                 if options.checkpoint_every else None)
        self.checkpoints = run_checkpoints(files, self.cluster) if files is not None else None
        planned = max(1, min(placeable(cpus_each, gpus_each), options.max_workers or math.inf))
        # Batches an earlier run saved a state of are formed again as they were, to resume from it.
        self.batches = deque(make_batches(pooled, options.batch_trials, gpus_each > 0, planned,
                                          files.saved_batches() if files is not None else []))
        if files is not None:
            files.note_batches({checkpoint_key([job.spec for job in batch]): [job.spec.trial_id for job in batch]
                                for batch in self.batches})
        self.in_flight: dict[Any, InFlight] = {}   # ref -> batch, in the order handed out

    def _check_embedded_ray_fits(self, pooled: list[Job], cpus_each: float, gpus_each: float) -> None:
        """The embedded Ray is all there will be: a trial (or a sharded trial's shards) asking for
        more than it holds would wait forever."""
        if self.sharded:
            check_shards_fit(self.sharded, self.options)
        if pooled and placeable(cpus_each, gpus_each) == 0:
            held = ray.cluster_resources()
            raise ResourceRequestError(
                f"resources: each trial asks for {cpus_each:g} CPU and {gpus_each:g} GPU, but the embedded Ray "
                f"on this machine has {held.get('CPU', 0):g} CPU and {held.get('GPU', 0):g} GPU and no node can "
                "join it; lower resources.cpus_per_trial / gpus_per_trial, or run on a cluster with --address")

    # ---- the loop -------------------------------------------------------------------------------

    def run(self) -> tuple[dict[str, int], Any]:
        """Step until the pool's trials are done, run the sharded ones, close the writer and the
        mirror; returns what the sinks reconciled and the mirror's status."""
        status = "FINISHED"
        try:
            self.heartbeat.start()
            while self.batches or self.in_flight:
                self.step()
            self.pool.shutdown()   # the shards of sharded trials get the CPUs the trial actors held
            for job in self.sharded:
                self.run_sharded(job)
        except StoreWriteError:
            status = "FAILED"
            raise
        except BaseException:
            status = "KILLED"
            raise
        finally:
            self.ray_lost = self.connection.lost()
            if not self.ray_lost:   # else the actors are gone with their Ray
                if status == "KILLED":
                    self.save_running()
                self.pool.shutdown()
            if self.checkpoints is not None:
                self.checkpoints.clear_stop()
                self.checkpoints.forget_batches()
                if self.cluster and not self.ray_lost:
                    self.checkpoints.close()   # the keeper: every actor that could call it has ended
            closed = self.close(status)
        return closed

    def save_running(self) -> None:
        """The run is stopping (SIGTERM, Ctrl-C): with ``checkpoint_every`` in the spec, its running
        trials save their state at the round they have reached and stop (core.engine.round_loop.play_out),
        so that the next run loses no round of them, if they do within ``STOP_SAVE_SECONDS`` (a
        scheduler's SIGKILL follows its SIGTERM after its grace time, 30 s by default; the stop's
        own deadline is workers.execution.signals.STOP_DEADLINE). A trial whose round takes longer
        is stopped as without it, losing the rounds since its last periodic checkpoint."""
        if self.checkpoints is None or not self.in_flight or not self.checkpoints.request_stop():
            return
        waiting = list(self.in_flight)
        try:
            stopped, _ = ray.wait(waiting, num_returns=len(waiting), timeout=STOP_SAVE_SECONDS)
        except BaseException:   # a second signal: stop at once
            return
        met = {ref: _stop_outcome(ref) for ref in stopped}
        kinds = {ref: kind for ref, (kind, _) in met.items()}
        for kind, keys in met.values():
            # A batch that met the stop before its first round has nothing to resume: a state it saved
            # would only be refused by the next run (core's loop saves whenever it is stopped).
            if kind == "not started" and keys and keys[0] != NOT_STARTED:
                self.checkpoints.discard(keys[0])
        # A batch that ended before it saw the stop has its results: they are kept like any others.
        ended = [outcome for kind, outcomes in met.values() if kind == "ended" for outcome in outcomes]
        if ended:
            self.feed(ended)
        saved = sum(len(self.in_flight[ref].batch) for ref in stopped if kinds[ref] == "saved")
        running = sum(len(flight.batch) for ref, flight in self.in_flight.items()
                      if kinds.get(ref) not in ("not started", "ended"))
        self.progress.messages.append(
            f"saved the state of {saved} of {running} running trial(s) "
            "at the round they had reached: the next run resumes them there"
            + (f" ({len(ended)} more finished before the stop reached them, and are kept)" if ended else ""))
        self.show()

    def step(self) -> None:
        """One turn: every phase once, in order."""
        self.pool.grow(len(self.batches) + len(self.in_flight))
        self.hand_out()
        self.watch_sinks()
        self.watch_running()
        self.progress.actors, self.progress.waiting_actors = len(self.pool.ready_slots()), self.pool.waiting()
        self.progress.unplaced_actors = self.pool.unplaced()
        self.progress.device = self.pool.device
        self.show()
        arrived, anything = self.collect()
        self.hand_out()   # the actors get their next batch before the driver writes
        self.feed(arrived)
        if not self.batches:
            self.pool.release_idle()
        if anything:
            self.show()

    # ---- the phases -----------------------------------------------------------------------------

    def hand_out(self) -> None:
        """Every idle actor gets a batch first; a second one only while there is more work than actors.
        An isolated batch (its worker died holding it) goes only to an idle actor, and nothing joins it
        in that actor's queue."""
        ready = self.pool.ready_slots()
        for depth in range(1, ACTOR_QUEUE + 1):
            for slot in ready:
                if not self.batches or (depth > 1 and len(self.batches) <= len(ready)):
                    return
                isolated = self.batches[0][0].isolated
                if slot.queued < depth and not slot.isolated and not (isolated and slot.queued):
                    batch = self.batches.popleft()
                    items, known = [(job.spec, job.next_attempt()) for job in batch], known_code(batch[0].spec)
                    self.in_flight[slot.actor.run.remote(items, self.checkpoints, known)] = InFlight(slot, batch)
                    slot.queued += 1
                    slot.isolated = isolated
                    self.progress.running += len(batch)

    def watch_sinks(self) -> None:
        """The sinks' troubles, asked for without waiting: shown while the sweep goes on."""
        if self.problems_ref is None:
            if time.monotonic() - self.problems_asked_at > PROBLEMS_EVERY:
                self.problems_ref, self.problems_asked_at = self.mirror.problems.remote(), time.monotonic()
        elif ray.wait([self.problems_ref], timeout=0)[0]:
            for problem in ray.get(self.problems_ref):
                if f"warning: {problem}" not in self.progress.messages:
                    self.progress.messages.append(f"warning: {problem}")
            self.problems_ref, self.problems_asked_at = None, time.monotonic()

    def watch_running(self) -> None:
        """The running trials' rounds, asked of the mirror without waiting, handed to the heartbeat."""
        self.heartbeat.update(done=self.progress.done, failed=self.progress.failed, total=self.progress.total)
        if self.running_ref is None:
            if time.monotonic() - self.running_asked_at > WRITE_EVERY / 2:   # a fresh picture for each write
                self.running_ref, self.running_asked_at = self.mirror.running.remote(), time.monotonic()
        elif ray.wait([self.running_ref], timeout=0)[0]:
            # Only trials out on an actor now: one written since the mirror answered, or whose actor
            # died (it waits in the queue), may still be in its answer.
            out = {job.record.trial_id for flight in self.in_flight.values() for job in flight.batch}
            self.heartbeat.update([trial for trial in ray.get(self.running_ref) if trial["trial_id"] in out])
            self.running_ref, self.running_asked_at = None, time.monotonic()

    def collect(self) -> tuple[list[TrialOutcome], bool]:
        """Wait (at most COLLECT_WAIT) for outcomes and actors that became ready; the outcomes that
        arrived, and whether anything did."""
        ready, rest = ray.wait(list(self.in_flight) + self.pool.readiness(), num_returns=1, timeout=COLLECT_WAIT)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        arrived: list[TrialOutcome] = []
        for ref in ready:
            flight = self.in_flight.get(ref)
            if flight is None:
                self.pool.became_ready(ref)   # an actor placed and built (or dead before it was)
                continue
            try:
                outcomes = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as error:
                arrived += self.requeue_dead(flight.slot, ref, error)
                continue
            del self.in_flight[ref]
            flight.slot.queued -= 1
            flight.slot.isolated = False
            self.progress.running -= len(flight.batch)
            arrived += outcomes
        return arrived, bool(ready)

    def requeue_dead(self, slot: Slot, failed_ref, error: Exception) -> list[TrialOutcome]:
        """The actor of ``slot`` died (node lost, out of memory, a crash in native code), or a call's
        answer was lost with its node before the driver fetched it: its batches go back to the queue.
        Returns what settled all the same: calls that finished before the death, trials failed for good.

        The first lost call had started, so its trials have one more attempt counted (here, and only
        here); those queued behind it go back without one. The driver cannot see more: a death
        within moments of a call's end (its answer lost with the process) is counted for that call
        though the next one was running. So every trial of a lost call runs isolated from then on,
        alone in its actor's queue, where any death is its own: a trial is counted at most one death
        it did not cause, and one that kills its worker is counted each of its isolated deaths. A
        lockstep batch runs again whole the first time (from its checkpoint, if the spec asks for
        them), then one trial at a time, so that a trial that kills its worker fails alone after
        MAX_ATTEMPTS."""
        self.pool.drop(slot.actor)
        held = [ref for ref, flight in self.in_flight.items() if flight.slot is slot]
        others = [ref for ref in held if ref is not failed_ref]
        if others:
            ray.wait(others, num_returns=len(others), timeout=SETTLE_SECONDS)
        settled: list[TrialOutcome] = []
        lost: list[list[Job]] = []
        for ref in held:
            batch = self.in_flight.pop(ref).batch
            self.progress.running -= len(batch)
            if ref is not failed_ref:
                try:   # it finished before the actor died: its results count
                    settled += ray.get(ref, timeout=0)
                    continue
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.GetTimeoutError):
                    pass
            lost.append(batch)
        for job in (job for batch in lost for job in batch):
            job.isolated = True
        if not lost:
            return settled
        started, queued = lost[0], lost[1:]
        for job in started:
            job.attempts += 1
        again: list[list[Job]] = []
        if len(started) > 1 and started[0].attempts == 1:
            again.append(started)
        else:
            for job in started:
                if job.attempts >= MAX_ATTEMPTS:
                    record = replace(job.record, attempts=job.attempts)
                    settled.append(TrialOutcome.of(record.failed(f"worker died {job.attempts} times: {error}", None,
                                                                 at=time.time())))
                else:
                    again.append([job])
        # First in the queue, in the order they were handed out.
        self.batches.extendleft(reversed(again + queued))
        return settled

    def feed(self, arrived: list[TrialOutcome]) -> None:
        """Make the outcomes durable, then hand them to the sinks (ResultWriter does both, in that order)."""
        self.writer.write(arrived)
        self.heartbeat.drop({outcome.record.trial_id for outcome in arrived})

    def show(self) -> None:
        if self.on_progress:
            self.on_progress(self.progress)

    # ---- after the pool -------------------------------------------------------------------------

    def run_sharded(self, job: Job) -> None:
        """One sharded trial, coordinated from the driver (workers.execution.sharded_trials), made durable like any other."""
        from banditsweep.workers.execution.sharded_trials import run_sharded_trial

        record = job.next_attempt()
        self.mirror.started.remote([record])
        self.progress.running += 1
        self.show()
        running = RunningTrials()   # the driver runs it: the heartbeat hears of its rounds here
        running.started([replace(record, started_at=time.time())])
        self.heartbeat.update(running.snapshot(), done=self.progress.done, failed=self.progress.failed)

        def stream(t: int, cumulative_regret: float) -> None:
            self.mirror.progress.remote(record.trial_id, [(t, cumulative_regret)])
            running.progress(record.trial_id, [(t, cumulative_regret)])
            self.heartbeat.update(running.snapshot())

        def say(message: str) -> None:
            self.progress.messages.append(message)
            self.show()

        every = self.options.checkpoint_every or SHARDED_CHECKPOINT_EVERY
        checkpoints = (self.checkpoints if self.checkpoints is not None
                       else run_checkpoints(CheckpointFiles(self.store.checkpoints_dir, every), self.cluster))
        try:
            outcome = run_sharded_trial(job.spec, record, job.shards, self.options.cpus_per_shard,
                                        self.options.gpus_per_shard, checkpoints, stream, say)
        finally:
            if checkpoints is not self.checkpoints and hasattr(checkpoints, "close"):
                checkpoints.close()
        self.progress.running -= 1
        self.feed([outcome])
        self.heartbeat.update([], done=self.progress.done, failed=self.progress.failed)
        self.show()

    def close(self, status: str) -> tuple[dict[str, int], Any]:
        """Tidy the store, then close the mirror (the sinks may read the compacted journal). A store
        that cannot be written at this point fails a run that had not failed already."""
        summary = {"trials_finished": self.progress.done, "trials_failed": self.progress.failed}
        unwritable = None
        try:
            self.writer.close()
        except OSError as error:
            if status == "FINISHED":   # else the store's trouble is already what the run reports
                status, unwritable = "FAILED", error
        # The trials have ended (the sinks may still take a while): `status` no longer lists them.
        self.heartbeat.update(done=self.progress.done, failed=self.progress.failed)
        self.heartbeat.end(status)

        def say(line: str) -> None:
            self.progress.messages.append(line)
            self.show()

        if self.ray_lost:
            return {}, self.catch_up_here(status, summary, say)
        reconcile = ray.get(self.mirror.reconciled.remote())
        mirrored = drain_mirror(self.mirror, status, summary, say)
        if unwritable is not None:
            raise unwritable
        return reconcile, mirrored

    def catch_up_here(self, status: str, summary: dict[str, int], say) -> MirrorStatus:
        """Ray's processes ended with the run (a signal to the whole process group, or to every
        process of a batch job), the mirror with them: the sinks are brought up to date with the
        Parquet results from this process (the finished trials' runs written, the parent run
        closed, the runs of the trials that were running removed: they run again), within the
        stop's deadline (workers.execution.signals)."""
        from banditsweep.workers.mirrors.sinks import open_sinks

        cut_off = ("Ray's own processes ended with the run (a signal to the whole process group): the result "
                   "sinks lack what the mirror had not written; `banditsweep sync-mlflow SPEC` (or the next "
                   "run) brings them up to date from the Parquet results")
        if not self.options.sinks:
            return MirrorStatus()
        abandoned = [job.record.trial_id for flight in self.in_flight.values() for job in flight.batch]
        try:
            sinks, _, errors = open_sinks(self.options.sinks, self.context, self.store.journal(), abandoned)
            notes = [note for note in (sink.close(status, summary) for sink in sinks) if note]
        except Exception as error:   # the deadline is near and nothing of it is lost: the next run catches up
            say(f"{cut_off} ({type(error).__name__}: {error})"[:600])
            return MirrorStatus(errors=[cut_off])
        if errors:
            say(cut_off)
            return MirrorStatus(errors=[*errors, cut_off])
        say("Ray's own processes ended with the run (a signal to every process of the job): the result sinks "
            "were brought up to date from the Parquet results")
        return MirrorStatus(notes=notes)


def _stop_outcome(ref) -> tuple[str, list[TrialOutcome]]:
    """How the batch behind ``ref`` met the run's stop: "saved" (stopped with its state saved),
    "not started" (queued on its actor, or stopped before its first round: nothing to resume; with
    its checkpoint key), "lost" (stopped without its state, or failed), "ended" (it finished before
    it saw the stop; with its outcomes)."""
    try:
        return "ended", ray.get(ref)
    except Exception as error:
        stopped = error if isinstance(error, TrialStopped) else getattr(error, "cause", None)
        if not isinstance(stopped, TrialStopped):
            return "lost", []
        if stopped.key == NOT_STARTED or stopped.next_round <= 1:
            return "not started", [stopped.key]   # (a state before round 1, if saved, is of no use)
        return ("saved" if stopped.saved else "lost"), []


def sink_context(sweep_name: str, store: SweepStore, options: RunOptions) -> SinkContext:
    return SinkContext(sweep_name, str(store.root.parent), spec_path=options.spec_path, spec_text=options.spec_text,
                       source_commit=options.source_commit, settings=options.settings,
                       sink_options=options.sink_options, retried_by_mirror=True)


def run_sweep(sweep_name: str, jobs: list[Job], options: RunOptions,
              on_progress: Callable[[Progress], None] | None = None) -> SweepOutcome:
    """Run ``jobs`` (trials not yet finished) on Ray; every outcome is made durable by the driver."""
    started = time.perf_counter()
    store = SweepStore.for_sweep(options.results_root, sweep_name)
    context = sink_context(sweep_name, store, options)
    preparing = start_preparing(options.sinks, context, options.env_vars)
    try:
        with RayConnection(options.address, options.env_vars) as connection:
            sweep = SweepLoop(jobs, options, store, context, connection, on_progress)
            reconcile, mirrored = sweep.run()
    finally:
        finish_preparing(preparing)
    return SweepOutcome(sweep.progress.done, sweep.progress.failed, sweep.pool.most_ready, sweep.pool.device,
                        reconcile, mirrored, time.perf_counter() - started, sweep.ray_line, sweep.pool.notes,
                        len(sweep.sharded))
