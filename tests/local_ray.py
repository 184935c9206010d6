"""Ray heads a test starts for itself, with the ``ray`` command a user runs, and ends itself.

Every process is started in a new session (its own process group) and ended by that group, then by
the session id of whatever it left behind: nothing this module did not start is ever signalled
(no ``ray stop``, which ends every Ray on the machine). Each head gets a private ``--temp-dir``, a
private ``HOME`` (its own ``~/.ray/auth_token`` and default results root) and free ports for every
service, so it can run next to other Rays on the same machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def ray_command() -> str:
    return str(BIN / "ray")


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (held open together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (read from /proc: Linux)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    members.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    return members


def end_session(process: subprocess.Popen, grace: float = 10.0) -> None:
    """End ``process`` (started with ``start_new_session=True``) and every process of its session:
    SIGTERM to the group, then SIGKILL to whatever of the session is left after ``grace`` seconds."""
    sid = process.pid
    try:
        os.killpg(sid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.time() + grace
    while time.time() < deadline:
        if process.poll() is not None and not _session_members(sid):
            break
        time.sleep(0.2)
    for pid in _session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class StartupTimedOut(RuntimeError):
    """``ray start`` gave up waiting for its own raylet (a machine too busy), not a configuration error."""


class LocalHead:
    """``ray start --head --block`` on 127.0.0.1 with a dashboard and token authentication on.

    ``token`` is the cluster's token as a user gets it on the head (``ray get-auth-token``);
    ``submit_env`` is what a user's shell on another machine sets for ``ray job submit``."""

    def __init__(self, num_cpus: int = 2, extra_args: list[str] | None = None, env: dict | None = None):
        self.base = Path(tempfile.mkdtemp(prefix="bsh-"))   # short: Ray's socket paths must fit
        self.home = self.base / "home"
        self.home.mkdir()
        self.temp_dir = self.base / "ray"
        (self.gcs_port, self.dashboard_port, self.agent_port, self.agent_grpc_port, self.runtime_env_port,
         self.metrics_port, self.client_port, self.node_manager_port, self.object_manager_port) = free_ports(9)
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "BANDITSWEEP_", "MLFLOW_"))}
        self.env = {**base_env, "HOME": str(self.home), "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
                    # Ray gives its raylet 30 s to register with the GCS; a 2-core machine busy with
                    # the rest of the suite can take longer, and the head then exits at startup.
                    "RAY_raylet_start_wait_time_s": "120",
                    **(env or {})}
        self.num_cpus = num_cpus
        self.extra_args = extra_args or []
        self.process: subprocess.Popen | None = None
        self.token = ""

    def run(self, *args: str, env: dict | None = None, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """A command as a user on the head would run it (this head's HOME), in a session of its own."""
        return subprocess.run(list(args), env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, start_new_session=True, **kwargs)

    def start(self, timeout: float = 180, attempts: int = 2) -> "LocalHead":
        """Start the head; a head whose startup timed out (a machine too busy for Ray's own startup
        deadlines) is ended and started once more on fresh ports and a fresh temp dir."""
        for attempt in range(attempts):
            try:
                return self._start_once(timeout)
            except StartupTimedOut:
                if attempt == attempts - 1:
                    raise
                self._fresh_ports()

    def _fresh_ports(self) -> None:
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        (self.gcs_port, self.dashboard_port, self.agent_port, self.agent_grpc_port, self.runtime_env_port,
         self.metrics_port, self.client_port, self.node_manager_port, self.object_manager_port) = free_ports(9)
        old_address = self.address
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        # Configs written against the old address (an autoscaler's gcs_address) follow it.
        for path in self.base.glob("*.yaml"):
            path.write_text(path.read_text().replace(old_address, self.address))

    def _start_once(self, timeout: float) -> "LocalHead":
        # A head started by `ray up` has a token; here the head's user makes one, as Ray says to.
        made = self.run(ray_command(), "get-auth-token", "--generate")
        assert made.returncode == 0, made.stderr
        self.token = made.stdout.strip()
        self.log = open(self.base / "ray_start.log", "w")
        self.process = subprocess.Popen(
            [ray_command(), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
             "--port", str(self.gcs_port), "--num-cpus", str(self.num_cpus), "--num-gpus", "0",
             "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
             "--dashboard-port", str(self.dashboard_port),
             "--dashboard-agent-listen-port", str(self.agent_port),
             "--dashboard-agent-grpc-port", str(self.agent_grpc_port),
             "--runtime-env-agent-port", str(self.runtime_env_port),
             "--metrics-export-port", str(self.metrics_port),
             "--ray-client-server-port", str(self.client_port),
             "--node-manager-port", str(self.node_manager_port),
             "--object-manager-port", str(self.object_manager_port),
             "--temp-dir", str(self.temp_dir), "--disable-usage-stats", *self.extra_args],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_for_jobs_api(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def submit_env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def _wait_for_jobs_api(self, timeout: float) -> None:
        """The dashboard answers (with the token) and the head's dashboard agent, which runs the jobs,
        says it is healthy: submitting earlier gets "No available agent to submit job"."""
        deadline = time.time() + timeout
        last = ""
        while time.time() < deadline:
            if self.process.poll() is not None:
                log = self.startup_log()
                kind = StartupTimedOut if "timed out during startup" in log else RuntimeError
                raise kind(f"ray start exited {self.process.returncode}: {log}")
            try:
                for url in (f"{self.dashboard}/api/jobs/", f"http://127.0.0.1:{self.agent_port}/api/healthz"):
                    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
                    with urllib.request.urlopen(request, timeout=5) as response:
                        assert response.status == 200
                return
            except OSError as error:
                last = str(error)
            time.sleep(1.0)
        raise TimeoutError(f"the head's jobs API did not come up in {timeout:.0f} s ({last}): {self.startup_log()}")

    def startup_log(self) -> str:
        text = (self.base / "ray_start.log").read_text(errors="replace") if (self.base / "ray_start.log").exists() else ""
        return text[-4000:]

    def stop(self) -> None:
        if self.process is not None:
            end_session(self.process)
            self.process = None
            self.log.close()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def finished_trial_runs(db: Path, sweep: str) -> int:
    """FINISHED, active trial runs of a sweep's experiment in an MLflow SQLite store (read-only)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return connection.execute(
            "SELECT COUNT(*) FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
            "JOIN experiments ON experiments.experiment_id = runs.experiment_id "
            "WHERE experiments.name = ? AND tags.key = 'kind' AND tags.value = 'trial' "
            "AND runs.status = 'FINISHED' AND runs.lifecycle_stage = 'active'", (sweep,)).fetchone()[0]
