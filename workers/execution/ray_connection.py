"""The driver's connection to Ray: a cluster named by its address (workers.execution.ray_address), or an
embedded Ray on loopback; Ray's token; the code a submitted Ray job hands its workers; and what this
machine offers a Ray started here.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from typing import Any

import ray

import banditsweep
from banditsweep.workers.execution.ray_address import check_reachable
from banditsweep.workers.execution.signals import abandon_ray, stop_cleanly_on_sigterm, terminated

# Worker processes an embedded Ray starts at once. Ray's default is its CPU count, so a pool of many
# light actors (cpus_per_trial < 1) came up a few at a time and the first ones ran alone for seconds
# (16 actors on 2 CPUs: the last started 3.9 s after the first; all within 0.5 s with this,
# docs/benchmarks.md). The environment variable, where set, wins.
WORKER_STARTUP_CONCURRENCY = 64

# Seconds an embedded Ray's processes get to end after this process's SIGTERM before they are taken
# to be up (RayConnection.lost). Ray's processes often end within a second of theirs but may take
# longer; workers.execution.signals' deadline covers what this misses.
RAY_END_WAIT = 2.0


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
            maybe_enable_token_auth_if_token_available,
        )
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


# What of a checkout is the installed package (pyproject.toml's package-dir): what workers import.
PACKAGE_ENTRIES = ("__init__.py", "__main__.py", "core", "workers", "sweeps")


def submitted_code() -> dict[str, Any]:
    """The runtime env that gives a Ray job's workers the code the job was submitted with: the
    package of the submitted checkout (``banditsweep.SUBMITTED_TREE``) as ``py_modules``, a folder
    named ``banditsweep`` that Ray puts before the installed package. {} outside such a job.

    The folder holds links to the package's entries only: Ray names an upload by its content, and
    the whole checkout is already uploaded as the job's working_dir (unpacked without a folder of
    its own name, so it could not serve as the module)."""
    if not banditsweep.SUBMITTED_TREE:
        return {}
    package = os.path.join(tempfile.mkdtemp(prefix="banditsweep-submitted-"), "banditsweep")
    os.mkdir(package)
    for entry in PACKAGE_ENTRIES:
        if os.path.exists(os.path.join(banditsweep.SUBMITTED_TREE, entry)):
            os.symlink(os.path.join(banditsweep.SUBMITTED_TREE, entry), os.path.join(package, entry))
    return {"py_modules": [package]}


@contextmanager
def _environment(variables: dict[str, str]):
    """``variables`` set in this process's environment for the block, then as they were."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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

    def __enter__(self) -> RayConnection:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            return self
        if self.address:
            runtime_env = {**({"env_vars": self.env_vars} if self.env_vars else {}), **submitted_code()} or None
        else:
            # An embedded Ray's processes inherit this process's environment, so the variables go
            # there for the start; as a runtime_env they would keep actors off the workers Ray
            # prestarts (each actor then waits for a worker of its own: 2 s more for 4 actors).
            runtime_env = None
        try:
            with _environment(self.env_vars if not self.address else {}):
                self._init(runtime_env)
        except BaseException:
            self._drop_own_token()
            raise
        finally:
            for package in (runtime_env or {}).get("py_modules", []):   # uploaded by ray.init: the links go
                shutil.rmtree(os.path.dirname(package), ignore_errors=True)
        self.started = True
        stop_cleanly_on_sigterm()  # ray.init installs a SIGTERM handler that aborts the driver
        self._quiet_after_a_stop()
        return self

    def _init(self, runtime_env: dict | None) -> None:
        if self.address:
            host = check_reachable(self.address)
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
                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
                self.own_token = True
                _token_changed()
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, runtime_env=runtime_env,
                     log_to_driver=False, logging_level=logging.WARNING, _node_ip_address="127.0.0.1")

    def __exit__(self, *exc) -> None:
        if self.started and self.lost():
            self._end_what_is_left()
        elif self.started:
            ray.shutdown()
        self._drop_own_token()

    def _quiet_after_a_stop(self) -> None:
        """The driver prints the errors Ray's processes publish (a worker that died, the autoscaler's
        failure). When a batch scheduler ends a job it signals every process of it, the cluster's
        too, and each reports its own end, some with a traceback: after this process's SIGTERM, and
        for processes ended by a signal at any time, those reports say nothing the run does not
        say itself. A private interface, hence the guard."""
        try:
            from ray._private import worker as ray_worker
        except ImportError:
            return
        original = ray_worker.print_to_stdstream
        if getattr(original, "banditsweep_quiet", False):
            return

        def print_to_stdstream(data, *args, **kwargs):
            lines = data.get("lines") if isinstance(data, dict) else None
            if lines is not None and data.get("pid") == "raylet" and (terminated() or any(
                    "Terminated with signal" in str(line) or "SIGTERM" in str(line) for line in lines or [])):
                return None
            return original(data, *args, **kwargs)

        print_to_stdstream.banditsweep_quiet = True
        ray_worker.print_to_stdstream = print_to_stdstream

    def _end_what_is_left(self) -> None:
        """The embedded Ray ended under the driver: its processes still running (this process's
        children) are ended, and Ray's own shutdown is left out (workers.execution.signals.abandon_ray).
        A cluster's processes are not this process's to end: only the shutdown is left out."""
        if self.address:
            abandon_ray()
            return
        try:
            from ray._private.worker import _global_node as node

            node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
        except Exception:   # a private interface; the processes end with their session anyway
            pass
        abandon_ray()

    def _drop_own_token(self) -> None:
        if self.own_token:
            os.environ.pop("RAY_AUTH_TOKEN", None)
            self.own_token = False
            _token_changed()

    def lost(self) -> bool:
        """Whether the embedded Ray's own processes (its raylet, its GCS) are ending. A SIGTERM sent
        to the whole process group (a batch scheduler's, ``kill -- -PGID``) reaches them as it
        reaches the driver, and calls on actors would then hang until Ray gives up on its GCS
        (60 s, then it ends the process: past a scheduler's grace period). After a SIGTERM they get
        a moment to end (a SIGTERM to the driver alone leaves them up). Always False for a cluster:
        its processes are not this process's children.

        A cluster: only after a SIGTERM, whether its head stopped taking connections within
        RAY_END_WAIT seconds. A batch scheduler (Slurm ending a job that was preempted, requeued or
        cancelled) signals the cluster's processes with the driver when the cluster is the job's
        own (cluster-slurm.sbatch); a SIGTERM to the driver alone (``ray job stop``, the batch
        script's time-limit stop) leaves the head answering."""
        if not self.started:
            return False
        if self.address:
            return terminated() and self._head_stopped_answering()
        try:
            from ray._private import ray_constants
            from ray._private.worker import _global_node as node

            infos = [info for kind in (ray_constants.PROCESS_TYPE_RAYLET, ray_constants.PROCESS_TYPE_GCS_SERVER)
                     for info in node.all_processes.get(kind, [])]
        except Exception:   # a private interface: without it, Ray is taken to be up
            return False
        deadline = time.monotonic() + (RAY_END_WAIT if terminated() else 0.0)
        while True:
            if any(info.process.poll() is not None for info in infos):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def _head_stopped_answering(self) -> bool:
        if "://" in self.address or ":" not in self.address:
            return False   # `auto`, `ray://`: Ray resolves it; taken to be up
        host, _, port = self.address.rpartition(":")
        deadline = time.monotonic() + RAY_END_WAIT
        while True:
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=0.5).close()
            except ValueError:
                return False
            except OSError:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def describe(self) -> str:
        """One line: which Ray, and what it holds now."""
        resources = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        held = ", ".join(f"{resources[name]:g} {name}" for name in ("CPU", "GPU") if resources.get(name))
        where = f"cluster at {self.address}" if self.address else (
            "embedded Ray on 127.0.0.1" if self.started else "the Ray this process is connected to")
        return f"Ray: {where}: {nodes} node(s), {held or 'no CPU or GPU'}"
