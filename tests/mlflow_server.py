"""A real ``mlflow server`` for the tests: on loopback, over a SQLite store in the test's folder (or a
database given), in a process group of its own (stopping it ends the server and its workers, nothing
else); with ``auth_password``, MLflow's basic-auth app with an admin user of that password and its user
store in the same folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


class TrackingServer:
    """``backend_uri``: the server's store (default a SQLite file in ``folder``); ``workers``: its worker
    processes (MLflow's default is 4; one keeps a test's server small)."""

    def __init__(self, folder: Path, auth_password: str | None = None, admin: str = "admin",
                 backend_uri: str | None = None, workers: int = 1):
        self.folder, self.port = folder, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.auth_password, self.admin = auth_password, admin
        self.backend_uri = backend_uri or f"sqlite:///{folder / 'server.db'}"
        self.workers = workers
        self.process: subprocess.Popen | None = None

    def start(self, within: float = 120.0) -> float:
        began = time.monotonic()
        env = dict(os.environ)
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--backend-store-uri", self.backend_uri,
                   "--artifacts-destination", str(self.folder / "artifacts"), "--workers", str(self.workers)]
        if self.auth_password is not None:
            config = self.folder / "basic_auth.ini"
            config.write_text(f"[mlflow]\ndefault_permission = READ\n"
                              f"database_uri = sqlite:///{self.folder / 'basic_auth.db'}\n"
                              f"admin_username = {self.admin}\nadmin_password = {self.auth_password}\n"
                              f"authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
            env["MLFLOW_AUTH_CONFIG_PATH"] = str(config)
            env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = os.urandom(16).hex()   # the auth app's CSRF key
            command += ["--app-name", "basic-auth"]
        for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
            env.pop(name, None)
        log = open(self.folder / "server.log", "a")
        self.process = subprocess.Popen(command, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        log.close()
        while time.monotonic() - began < within:
            if self.process.poll() is not None:
                raise AssertionError(f"mlflow server exited: {(self.folder / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return time.monotonic() - began
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise AssertionError(f"mlflow server did not answer within {within:.0f} s")

    def stop(self) -> None:
        """Stopped hard, as a crashed or preempted server is: SIGKILL to its own process group."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None
