"""A private PostgreSQL for the tests: Debian's ``postgres`` binary, a cluster made by ``initdb`` in a
folder of its own (owned by the ``postgres`` user: PostgreSQL refuses to run as root), listening on
127.0.0.1 at a free port with its socket in that folder, trust authentication for its own user, one
database ``mlflow``; started in a process group of its own and ended by it (a fast shutdown, then
SIGKILL), its folder removed."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def postgres_bin() -> str | None:
    """The folder of Debian's PostgreSQL binaries (the newest installed), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


def unavailable() -> str | None:
    """Why a private PostgreSQL cannot be started here (None where it can)."""
    if postgres_bin() is None:
        return "no PostgreSQL server binaries (Debian's postgresql package) under /usr/lib/postgresql"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user to run the server as"
    if os.geteuid() != 0:
        return "not root: cannot run the server as the postgres user"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (the test extras install psycopg2-binary)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, database: str = "mlflow"):
        self.database = database
        self.folder = tempfile.mkdtemp(prefix="bspg-")
        self.port = _free_port()
        self.process: subprocess.Popen | None = None
        self.uri = f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *command: str) -> list[str]:
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *command]

    def start(self, within: float = 60.0) -> "PostgresServer":
        import psycopg2

        user = pwd.getpwnam("postgres")
        os.chown(self.folder, user.pw_uid, user.pw_gid)
        data = os.path.join(self.folder, "data")
        binaries = postgres_bin()
        made = subprocess.run(self._as_postgres(os.path.join(binaries, "initdb"), "-D", data, "-A", "trust",
                                                "-U", "postgres", "--no-sync"),
                              capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stdout + made.stderr
        log = open(os.path.join(self.folder, "server.log"), "w")
        self.process = subprocess.Popen(
            self._as_postgres(os.path.join(binaries, "postgres"), "-D", data, "-p", str(self.port), "-k", self.folder,
                              "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + within
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"postgres exited: {open(os.path.join(self.folder, 'server.log')).read()[-2000:]}")
            try:
                connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.3)
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{self.database}"')
        connection.close()
        return self

    def sql(self, statement: str):
        """Run ``statement`` in the database; its rows (None for a statement without)."""
        import psycopg2

        with psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=self.database) as connection:
            with connection.cursor() as cursor:
                cursor.execute(statement)
                return cursor.fetchall() if cursor.description else None

    def stop(self) -> None:
        """A fast shutdown (SIGINT to the postmaster's group), SIGKILL to the group after 20 s."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
