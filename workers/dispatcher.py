"""The driver side of a sweep: connect to Ray, start the mirror and the trial actors, hand out
batches of trials until none is left, make every outcome durable, re-queue the trials of actors
that died.

Ray Core does the scheduling (actors placed by their resource requests); this module keeps a queue
and a pool. One trial actor per GPU when the cluster has GPUs, else one per ``cpus_per_trial``
CPUs, capped by ``max_workers``. Each actor holds up to two batches (the one it runs and the next),
so it never waits for the driver; the driver writes the outcomes that arrive together as one group
(workers.store) and only then counts them done.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from banditsweep.core.trial import TrialSpec, batch_key
from banditsweep.workers.actors import MirrorActor, TrialActor
from banditsweep.workers.checkpoints import CheckpointFiles
from banditsweep.workers.errors import RayUnreachableError, ResourceRequestError, StoreWriteError
from banditsweep.workers.record import FINISHED, MAX_ATTEMPTS, TrialOutcome, TrialRecord, thinned_curve
from banditsweep.workers.signals import stop_cleanly_on_sigterm
from banditsweep.workers.sinks import MirrorStatus, SinkContext
from banditsweep.workers.store import SweepStore, TrialsTable

# Batches an actor holds at once: the one it runs and the next one, queued on the actor.
ACTOR_QUEUE = 2
# Seconds between two questions to the mirror about the sinks' troubles.
PROBLEMS_EVERY = 2.0
# Seconds the end of a run waits for the sinks to catch up before it reports how far behind they are.
MIRROR_CLOSE_TIMEOUT = 120.0
# Worker processes an embedded Ray starts at once. Ray's default is its CPU count, so a pool of many
# light actors (cpus_per_trial < 1) came up a few at a time and the first ones ran alone for seconds
# (16 actors on 2 CPUs: the last started 3.9 s after the first; all within 0.5 s with this,
# docs/benchmarks.md). The environment variable, where set, wins.
WORKER_STARTUP_CONCURRENCY = 64

# Lockstep batch sizes when neither the spec (resources.batch_trials) nor the algorithm says otherwise.
# On a GPU, batching trials is what fills the device. On a CPU slot it pays little for the neural
# algorithms (0.8-2.1x throughput for 10 trials with both cores, docs/benchmarks.md: every trial has
# its own weights, so a batch only saves per-operation overhead), and a one-CPU trial actor would
# hold ten trials' results back until the slowest finishes, so trials run one at a time there.
CPU_BATCH = 1
GPU_BATCH = 32
# Rounds between the checkpoints of a sharded trial when the spec sets no checkpoint_every: a lost
# node then costs at most this many rounds of a trial that may run for hours.
SHARDED_CHECKPOINT_EVERY = 50


@dataclass
class RunOptions:
    results_root: str
    tracking_uri: str
    sinks: list[str] = field(default_factory=lambda: ["mlflow"])
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    batch_trials: int | None = None
    max_workers: int | None = None
    checkpoint_every: int | None = None   # rounds between in-trial checkpoints (None: none)
    spec_path: str = ""                   # recorded with the run (the sinks' parent run)
    spec_text: str = ""
    source_commit: str = ""
    address: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    cpus_per_shard: float = 1.0
    gpus_per_shard: float = 0.0


@dataclass
class Job:
    """One trial to run: its spec, its record, how often it was tried."""

    spec: TrialSpec
    record: TrialRecord
    attempts: int = 0
    shards: int = 0     # > 0: a sharded trial (workers.shards), run by the driver after the pool's trials


@dataclass
class Progress:
    total: int
    done: int = 0
    failed: int = 0
    running: int = 0            # trials handed to actors and not yet back
    actors: int = 0             # trial actors placed and built
    waiting_actors: int = 0     # trial actors Ray cannot place yet (demand for the autoscaler)
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


def _keep_local_ray_on_loopback() -> None:
    """An embedded Ray must listen on 127.0.0.1 only. On Linux Ray resolves "127.0.0.1" to the
    machine's external address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which it reads when it is
    first imported; set it for the processes Ray starts and for this already-imported Ray."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _use_the_token_if_there_is_one() -> None:
    """Connect with Ray's token when one is at hand (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``) and ``RAY_AUTH_MODE`` does not say otherwise, as ``ray start`` does: a
    cluster started with token authentication (Ray's default) refuses a driver without it, also on
    its own head. Ray offers this only through a private module, hence the guard."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available)
    except ImportError:
        return
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


DEFAULT_TOKEN = os.path.join("~", ".ray", "auth_token")


def _tighten_token_files() -> None:
    """Ray's token files hold the key to every Ray on the machine: readable by their owner only.
    Ray writes ``~/.ray/auth_token`` with the umask's mode (0644 under the usual 022); a token file
    readable by others is made 0600 (and said so)."""
    for path in {os.path.expanduser(DEFAULT_TOKEN), os.environ.get("RAY_AUTH_TOKEN_PATH") or ""} - {""}:
        try:
            mode = os.stat(path).st_mode & 0o777
            if mode & 0o077:
                os.chmod(path, 0o600)
                logging.getLogger(__name__).warning("Ray token %s was readable by other users (mode %o): now 0600",
                                                    path, mode)
        except OSError:
            pass   # absent, or not ours to change: Ray reads it as it is


def _token_changed() -> None:
    """Ray caches the token it found; a token set or removed by this process must be looked up again."""
    try:
        from ray._raylet import AuthenticationTokenLoader
    except ImportError:
        return
    AuthenticationTokenLoader.instance().reset_cache()


def _token_at_hand() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or os.path.exists(os.path.expanduser(DEFAULT_TOKEN)))


def local_node() -> dict[str, float]:
    """What a Ray node started on this machine holds, as Ray itself detects it (cgroup limits and
    visible GPUs included): CPU and GPU counts, memory in bytes. Known before any Ray starts."""
    from ray._private import accelerators, utils

    try:
        manager = accelerators.get_accelerator_manager_for_resource("GPU")
        visible = manager.get_current_process_visible_accelerator_ids()
        gpus = len(visible) if visible is not None else manager.get_current_node_num_accelerators()
    except Exception:   # a private interface: without it, no GPUs are assumed
        gpus = 0
    return {"CPU": float(utils.get_num_cpus()), "GPU": float(gpus), "memory": float(utils.get_system_memory())}


def _check_reachable(address: str, timeout: float = 5.0) -> str | None:
    """A ``host:port`` address must accept a connection within ``timeout`` seconds: Ray itself keeps
    retrying an address that does not answer for minutes. Returns the host (None for addresses
    Ray resolves itself, such as ``auto`` or ``ray://``)."""
    import socket

    if "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as error:
        raise RayUnreachableError(f"--address {address}: no Ray head answers there ({error}); start one with "
                                  "`ray start --head`, or leave --address out to run on an embedded Ray") from None
    return host


# What of a checkout is the installed package (pyproject.toml's package-dir): what workers import.
PACKAGE_ENTRIES = ("__init__.py", "__main__.py", "core", "workers", "sweeps")


def submitted_code() -> dict[str, Any]:
    """The runtime env that gives a Ray job's workers the code the job was submitted with: the
    package of the submitted checkout (``banditsweep.SUBMITTED_TREE``) as ``py_modules``, a folder
    named ``banditsweep`` that Ray puts before the installed package. {} outside such a job.

    The folder holds links to the package's entries only: Ray names an upload by its content, and
    the whole checkout is already uploaded as the job's working_dir (unpacked without a folder of
    its own name, so it could not serve as the module)."""
    import tempfile

    import banditsweep

    if not banditsweep.SUBMITTED_TREE:
        return {}
    package = os.path.join(tempfile.mkdtemp(prefix="banditsweep-submitted-"), "banditsweep")
    os.mkdir(package)
    for entry in PACKAGE_ENTRIES:
        if os.path.exists(os.path.join(banditsweep.SUBMITTED_TREE, entry)):
            os.symlink(os.path.join(banditsweep.SUBMITTED_TREE, entry), os.path.join(package, entry))
    return {"py_modules": [package]}


class RayConnection:
    """``ray.init`` to ``address`` (or ``RAY_ADDRESS``), or an embedded local Ray on loopback.

    Embedded means embedded: without an address a private Ray starts (``address="local"``) even
    when another Ray runs on the machine; joining that one is only ever done by naming it."""

    def __init__(self, address: str | None, env_vars: dict[str, str], num_cpus: int | None = None):
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.env_vars = {k: v for k, v in env_vars.items() if v is not None}
        self.num_cpus = num_cpus
        self.started = False
        self.own_token = False   # the embedded Ray's token lives in this process's environment only

    def __enter__(self) -> "RayConnection":
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            return self
        runtime_env = {**({"env_vars": self.env_vars} if self.env_vars else {}), **submitted_code()} or None
        try:
            self._init(runtime_env)
        except BaseException:
            self._drop_own_token()
            raise
        finally:
            for package in (runtime_env or {}).get("py_modules", []):   # uploaded by ray.init: the links go
                shutil.rmtree(os.path.dirname(package), ignore_errors=True)
        self.started = True
        stop_cleanly_on_sigterm()  # ray.init installs a SIGTERM handler that aborts the driver
        return self

    def _init(self, runtime_env: dict | None) -> None:
        if self.address:
            host = _check_reachable(self.address)
            if host in ("127.0.0.1", "localhost"):
                _keep_local_ray_on_loopback()   # else Ray rewrites 127.0.0.1 to the machine's address
            _tighten_token_files()
            _use_the_token_if_there_is_one()
            ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False,
                     logging_level=logging.WARNING)
        else:
            _keep_local_ray_on_loopback()
            os.environ.setdefault("RAY_worker_maximum_startup_concurrency", str(WORKER_STARTUP_CONCURRENCY))
            # The embedded Ray keeps Ray's token authentication on; its notice that it does would
            # only break into the progress bar.
            logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
            _tighten_token_files()
            if os.environ.get("RAY_AUTH_MODE", "token").lower() == "token" and not _token_at_hand():
                # Without a token at hand Ray would write one to ~/.ray/auth_token with the umask's
                # mode; an embedded Ray gets one of its own instead, handed to its processes in
                # their environment (readable by this user only) and gone when it stops.
                import secrets

                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
                self.own_token = True
                _token_changed()
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, runtime_env=runtime_env,
                     log_to_driver=False, logging_level=logging.WARNING, _node_ip_address="127.0.0.1")

    def __exit__(self, *exc) -> None:
        if self.started:
            ray.shutdown()
        self._drop_own_token()

    def _drop_own_token(self) -> None:
        if self.own_token:
            os.environ.pop("RAY_AUTH_TOKEN", None)
            self.own_token = False
            _token_changed()

    def describe(self) -> str:
        """One line: which Ray, and what it holds now."""
        resources = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        held = ", ".join(f"{resources[name]:g} {name}" for name in ("CPU", "GPU") if resources.get(name))
        where = f"cluster at {self.address}" if self.address else (
            "embedded Ray on 127.0.0.1" if self.started else "the Ray this process is connected to")
        return f"Ray: {where}: {nodes} node(s), {held or 'no CPU or GPU'}"


def preferred_batch_size(spec: TrialSpec, on_gpu: bool) -> int:
    """How many trials like ``spec`` to run in one lockstep batch on this kind of device: the
    algorithm's ``preferred_batch_size`` where it states one, else the defaults above."""
    preferred = spec.policy_class.preferred_batch_size(spec, on_gpu)
    if preferred is None:
        return GPU_BATCH if on_gpu else CPU_BATCH
    return max(1, int(preferred))


def default_batch_size(spec: TrialSpec, on_gpu: bool, group_size: int, workers: int) -> int:
    """What the algorithm prefers on this device, but small enough that every worker gets a batch."""
    return max(1, min(preferred_batch_size(spec, on_gpu), math.ceil(group_size / max(1, workers))))


def make_batches(jobs: list[Job], batch_trials: int | None, on_gpu: bool, workers: int) -> list[list[Job]]:
    groups: dict[Any, list[Job]] = {}
    singles: list[list[Job]] = []
    for job in jobs:
        key = batch_key(job.spec)
        if key is None:
            singles.append([job])
        else:
            groups.setdefault(key, []).append(job)
    batches = []
    for group in groups.values():
        size = batch_trials or default_batch_size(group[0].spec, on_gpu, len(group), workers)
        batches.extend(group[i:i + size] for i in range(0, len(group), size))
    return batches + singles


def autoscaler_max_resources() -> dict[str, float]:
    """What the cluster's autoscaler could provide at most (its node types x max counts), or {}
    where there is no autoscaler. Ray publishes this only through a private accessor, hence the
    guard: without it, the pool follows the nodes that are up."""
    try:
        from ray._private.state import state

        return dict(state.get_max_resources_from_cluster_config() or {})
    except Exception:
        return {}


def actor_resources(options: RunOptions) -> tuple[float, float]:
    """(CPUs, GPUs) each trial actor asks Ray for. An explicit request is kept as it is, also when
    no node can hold it yet (the actors wait for one, and an autoscaler sees the demand); by
    default, one GPU per actor when the cluster has GPUs or its autoscaler can launch some."""
    if options.gpus_per_trial is not None:
        return options.cpus_per_trial, float(options.gpus_per_trial)
    gpus = ray.cluster_resources().get("GPU", 0.0) or autoscaler_max_resources().get("GPU", 0.0)
    return options.cpus_per_trial, (1.0 if gpus else 0.0)


def placeable(cpus_each: float, gpus_each: float) -> int:
    """How many such actors the nodes that are up could hold (their total resources)."""
    resources = ray.cluster_resources()
    counts = []
    if cpus_each > 0:
        counts.append(int(resources.get("CPU", 0.0) // cpus_each))
    if gpus_each > 0:
        counts.append(int(resources.get("GPU", 0.0) // gpus_each))
    return min(counts) if counts else 1


@dataclass
class Slot:
    actor: Any
    ready_ref: Any                 # resolves when the actor is placed and built
    ready: bool = False
    queued: int = 0                # batches the actor holds


class TrialPool:
    """The trial actors of a run, asked of Ray by what the spec requests and never sized once.

    The pool aims at ``wanted`` actors (the batches left, capped by ``--max-workers``) and holds as
    many as the nodes that are up can place, plus one waiting actor when none can be placed yet:
    actors Ray cannot place are the demand an autoscaler answers, and ``request_resources`` states
    the whole demand. Every few seconds the pool grows to what newly joined nodes hold; an actor
    whose node left is dropped (its batches run again elsewhere); once the queue is empty, idle
    actors are released so the autoscaler can remove their nodes.
    """

    CHECK_SECONDS = 2.0

    def __init__(self, mirror, cpus_each: float, gpus_each: float, cap: int | None, use_autoscaler: bool):
        self.mirror, self.cpus_each, self.gpus_each = mirror, cpus_each, gpus_each
        self.cap = cap if cap and cap > 0 else None
        self.use_autoscaler = use_autoscaler
        self.slots: list[Slot] = []
        self.checked_at = -math.inf
        self.most_ready = 0
        self.notes: list[str] = []

    @property
    def device(self) -> str:
        return "GPU" if self.gpus_each > 0 else "CPU"

    def ready_slots(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.ready]

    def waiting(self) -> int:
        return sum(1 for slot in self.slots if not slot.ready)

    def grow(self, wanted: int) -> None:
        """Aim at ``wanted`` actors (at most the cap), holding what the cluster can place now."""
        if time.monotonic() - self.checked_at < self.CHECK_SECONDS:
            return
        self.checked_at = time.monotonic()
        target = wanted if self.cap is None else min(wanted, self.cap)
        if self.use_autoscaler:
            self._request(target)
        target = min(target, max(placeable(self.cpus_each, self.gpus_each), 1))
        while len(self.slots) < target:
            actor = TrialActor.options(num_cpus=self.cpus_each, num_gpus=self.gpus_each).remote(
                self.mirror, max(1, int(self.cpus_each)))
            self.slots.append(Slot(actor, actor.ready.remote()))

    def _request(self, count: int) -> None:
        from ray.autoscaler.sdk import request_resources

        bundle = {"CPU": self.cpus_each, **({"GPU": self.gpus_each} if self.gpus_each else {})}
        request_resources(bundles=[bundle] * count)

    def readiness(self) -> list:
        """The ready calls of the actors not yet placed."""
        return [slot.ready_ref for slot in self.slots if not slot.ready]

    def became_ready(self, ref) -> bool:
        """``ref`` was an actor's ready call: mark it (or drop the actor if it died first)."""
        for slot in self.slots:
            if slot.ready_ref is ref:
                try:
                    warning = ray.get(ref)
                except ray.exceptions.RayActorError:
                    self.slots.remove(slot)
                    return True
                slot.ready = True
                if warning and warning not in self.notes:
                    self.notes.append(warning)
                self.most_ready = max(self.most_ready, len(self.ready_slots()))
                return True
        return False

    def drop(self, actor) -> None:
        """The actor died: its slot goes (the next check adds actors where the cluster has room)."""
        self.slots = [slot for slot in self.slots if slot.actor is not actor]
        self.checked_at = -math.inf

    def release_idle(self) -> None:
        """Nothing left to hand out: let idle and still-waiting actors go."""
        for slot in [slot for slot in self.slots if slot.queued == 0]:
            ray.kill(slot.actor)
            self.slots.remove(slot)
        if self.use_autoscaler:
            self._request(0)

    def shutdown(self) -> None:
        for slot in self.slots:
            ray.kill(slot.actor)
        self.slots = []
        if self.use_autoscaler:
            self._request(0)


class ResultWriter:
    """The driver's side of the record of truth: durable groups of outcomes, the trials table, and
    the mirror told once they are durable."""

    def __init__(self, store: SweepStore, mirror, progress: Progress):
        self.store, self.mirror, self.progress = store, mirror, progress
        self.table = TrialsTable(store, store.journal())

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
            self.table.add(outcome.record for outcome in outcomes)
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


def _check_shards_fit(sharded: list[Job], options: RunOptions) -> None:
    """On the embedded Ray every shard bundle sits on this machine: they must fit at once."""
    held = ray.cluster_resources()
    for job in sharded:
        cpus, gpus = job.shards * options.cpus_per_shard, job.shards * options.gpus_per_shard
        if cpus > held.get("CPU", 0) or gpus > held.get("GPU", 0):
            raise ResourceRequestError(
                f"a sharded trial ({job.record.run_name}) asks for {job.shards} shards of "
                f"{options.cpus_per_shard:g} CPU and {options.gpus_per_shard:g} GPU, but the embedded Ray on this "
                f"machine has {held.get('CPU', 0):g} CPU and {held.get('GPU', 0):g} GPU; lower "
                "resources.cpus_per_shard (shards may share a CPU, e.g. 0.5) or run on a cluster with --address")


def _run_sharded_job(job: Job, options: RunOptions, store: SweepStore, mirror, writer: "ResultWriter",
                     progress: Progress, on_progress: Callable[[Progress], None] | None) -> None:
    """One sharded trial, coordinated from the driver (workers.shards), made durable like any other."""
    from banditsweep.workers.shards import run_sharded_trial

    job.attempts += 1
    record = replace(job.record, attempts=job.attempts)
    mirror.started.remote([record])
    progress.running += 1
    if on_progress:
        on_progress(progress)

    def stream(t: int, cumulative_regret: float) -> None:
        mirror.progress.remote(record.trial_id, [(t, cumulative_regret)])

    def say(message: str) -> None:
        progress.messages.append(message)
        if on_progress:
            on_progress(progress)

    outcome = run_sharded_trial(job.spec, record, job.shards, options.cpus_per_shard, options.gpus_per_shard,
                                store.root / ".checkpoints", options.checkpoint_every or SHARDED_CHECKPOINT_EVERY,
                                stream, say)
    progress.running -= 1
    writer.write([outcome])
    if on_progress:
        on_progress(progress)


def run_sweep(sweep_name: str, jobs: list[Job], options: RunOptions,
              on_progress: Callable[[Progress], None] | None = None) -> SweepOutcome:
    """Run ``jobs`` (trials not yet finished) on Ray; every outcome is made durable by the driver."""
    started = time.perf_counter()
    sharded = [job for job in jobs if job.shards]
    jobs = [job for job in jobs if not job.shards]
    store = SweepStore.for_sweep(options.results_root, sweep_name)
    context = SinkContext(sweep_name, str(store.root.parent), options.tracking_uri, spec_path=options.spec_path,
                          spec_text=options.spec_text, source_commit=options.source_commit)
    with RayConnection(options.address, options.env_vars) as connection:
        ray_line = connection.describe()
        here = ray.get_runtime_context().get_node_id()
        mirror = MirrorActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
        ).remote(options.sinks, context, [job.record.trial_id for job in jobs + sharded])
        progress = Progress(total=len(jobs) + len(sharded), messages=[ray_line])
        problems_ref, problems_asked_at = None, time.monotonic()
        writer = ResultWriter(store, mirror, progress)
        if on_progress:
            on_progress(progress)
        cpus_each, gpus_each = actor_resources(options)
        if sharded and not connection.address:
            _check_shards_fit(sharded, options)
        if jobs and not connection.address and placeable(cpus_each, gpus_each) == 0:
            held = ray.cluster_resources()
            raise ResourceRequestError(
                f"resources: each trial asks for {cpus_each:g} CPU and {gpus_each:g} GPU, but the embedded Ray "
                f"on this machine has {held.get('CPU', 0):g} CPU and {held.get('GPU', 0):g} GPU and no node can "
                "join it; lower resources.cpus_per_trial / gpus_per_trial, or run on a cluster with --address")
        pool = TrialPool(mirror, cpus_each, gpus_each, options.max_workers, use_autoscaler=bool(connection.address))
        planned = max(1, min(placeable(cpus_each, gpus_each), options.max_workers or math.inf))
        batches = deque(make_batches(jobs, options.batch_trials, gpus_each > 0, planned))
        in_flight: dict[Any, tuple[Slot, list[Job]]] = {}  # ref -> (slot, batch), in the order handed out
        checkpoints = (CheckpointFiles(store.root / ".checkpoints", options.checkpoint_every)
                       if options.checkpoint_every else None)
        status = "FINISHED"

        def hand_out() -> None:
            # Every idle actor gets a batch first; a second one only while there is more work than actors.
            ready = pool.ready_slots()
            for depth in range(1, ACTOR_QUEUE + 1):
                for slot in ready:
                    if not batches or (depth > 1 and len(batches) <= len(ready)):
                        return
                    if slot.queued < depth:
                        batch = batches.popleft()
                        for job in batch:
                            job.attempts += 1
                        items = [(job.spec, replace(job.record, attempts=job.attempts)) for job in batch]
                        in_flight[slot.actor.run.remote(items, checkpoints)] = (slot, batch)
                        slot.queued += 1
                        progress.running += len(batch)

        try:
            while batches or in_flight:
                pool.grow(len(batches) + len(in_flight))
                hand_out()
                progress.actors, progress.waiting_actors, progress.device = (
                    len(pool.ready_slots()), pool.waiting(), pool.device)
                # The sinks' troubles, asked for without waiting: shown while the sweep goes on.
                if problems_ref is None and time.monotonic() - problems_asked_at > PROBLEMS_EVERY:
                    problems_ref, problems_asked_at = mirror.problems.remote(), time.monotonic()
                elif problems_ref is not None and ray.wait([problems_ref], timeout=0)[0]:
                    progress.messages += [f"warning: {p}" for p in ray.get(problems_ref) if f"warning: {p}" not in progress.messages]
                    problems_ref, problems_asked_at = None, time.monotonic()
                if on_progress:
                    on_progress(progress)
                ready, rest = ray.wait(list(in_flight) + pool.readiness(), num_returns=1, timeout=1.0)
                if ready and rest:
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready += more
                arrived: list[TrialOutcome] = []
                for ref in ready:
                    if ref not in in_flight:
                        if ref in pool.readiness():
                            pool.became_ready(ref)
                        continue
                    slot, batch = in_flight[ref]
                    try:
                        arrived += ray.get(ref)
                    except ray.exceptions.RayActorError as error:
                        # The actor died (node lost, out of memory, a crash in native code). Only the
                        # first batch it held had started: those queued behind it go back whole, their
                        # attempt not counted. The started batch runs again whole the first time (from
                        # its checkpoint, if the spec asks for them), then one trial at a time, so that
                        # a trial that kills its worker fails alone after MAX_ATTEMPTS.
                        pool.drop(slot.actor)
                        held = [r for r, (other, _) in in_flight.items() if other is slot]
                        # Every other call on the dead actor settles soon: with its result if it
                        # finished before the death (its result may still be on its way), else failed.
                        others = [r for r in held if r is not ref]
                        if others:
                            ray.wait(others, num_returns=len(others), timeout=10.0)
                        lost = []
                        for held_ref in held:
                            _, held_batch = in_flight.pop(held_ref)
                            progress.running -= len(held_batch)
                            if held_ref is not ref:
                                try:   # it finished before the actor died: its results count
                                    arrived += ray.get(held_ref, timeout=0)
                                    continue
                                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                                    pass
                            lost.append(held_batch)
                        for position, held_batch in enumerate(lost):
                            if position > 0:
                                for job in held_batch:
                                    job.attempts -= 1
                                batches.appendleft(held_batch)
                            elif len(held_batch) > 1 and held_batch[0].attempts == 1:
                                batches.appendleft(held_batch)
                            else:
                                for job in held_batch:
                                    if job.attempts >= MAX_ATTEMPTS:
                                        record = replace(job.record, attempts=job.attempts)
                                        arrived.append(TrialOutcome.of(record.failed(
                                            f"worker died {job.attempts} times: {error}", None, at=time.time())))
                                    else:
                                        batches.appendleft([job])
                    else:
                        del in_flight[ref]
                        slot.queued -= 1
                        progress.running -= len(batch)
                hand_out()   # the actors get their next batch before the driver writes
                writer.write(arrived)
                if not batches:
                    pool.release_idle()
                if on_progress and ready:
                    on_progress(progress)
            pool.shutdown()   # the shards of sharded trials get the CPUs the trial actors held
            for job in sharded:
                _run_sharded_job(job, options, store, mirror, writer, progress, on_progress)
        except StoreWriteError:
            status = "FAILED"
            raise
        except BaseException:
            status = "KILLED"
            raise
        finally:
            pool.shutdown()
            summary = {"trials_finished": progress.done, "trials_failed": progress.failed}
            unwritable = None
            try:
                writer.close()   # before the sinks close: they may read the compacted journal
            except OSError as error:
                if status == "FINISHED":   # else the store's trouble is already what the run reports
                    status, unwritable = "FAILED", error
            closing = mirror.close.remote(status, summary, MIRROR_CLOSE_TIMEOUT)
            reconcile = ray.get(mirror.reconciled.remote())
            mirrored = ray.get(closing)
            if unwritable is not None:
                raise unwritable
        return SweepOutcome(progress.done, progress.failed, pool.most_ready, pool.device, reconcile, mirrored,
                            time.perf_counter() - started, ray_line, pool.notes, len(sharded))
