"""`banditsweep ui`: it says that the MLflow UI is starting at once, and gives the UI's address only
once the server answers there (MLflow's server takes seconds to a minute to start); a server that
ends first (its port taken) is said, with its exit code."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        DIRECT.open(f"http://127.0.0.1:{port}/health", timeout=5).close()
        return True
    except OSError:
        return False


def _ui(tmp_path: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "banditsweep", "ui", str(REPO / "sweeps" / "quickstart.yaml"),
                             "--results", str(tmp_path / "results"), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True, cwd=tmp_path, env={**os.environ, "MLFLOW_TRACKING_URI": ""})


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)   # `ui` ends its server's process group, then itself
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def test_ui_gives_its_address_only_once_the_server_answers(tmp_path):
    port = _free_port()
    ui = _ui(tmp_path, port)
    try:
        started = time.monotonic()
        first = ui.stdout.readline()
        assert first.startswith(f"quickstart: starting the MLflow UI of sqlite:///{tmp_path}/results/mlflow.db on "
                                f"http://127.0.0.1:{port}"), first
        assert "its address follows once it answers" in first
        lines = []
        while time.monotonic() - started < 300:
            line = ui.stdout.readline()
            assert line, "".join(lines)   # `ui` ended
            lines.append(line)
            if "MLflow UI of" in line and " at http://" in line:
                break
        else:
            raise AssertionError("no address within 300 s:\n" + "".join(lines))
        # The address given answers at once: it was printed after the server answered.
        assert _answers(port), line
        assert f" at http://127.0.0.1:{port}" in line and "Ctrl-C stops it" in line
    finally:
        _stop(ui)
    assert ui.returncode == 0 and not _answers(port)


@pytest.mark.slow   # MLflow's server takes a minute or more to give up on a taken port and exit
def test_ui_says_when_its_server_ends_before_it_answers(tmp_path):
    with socket.socket() as taken:   # the port is taken: MLflow's server cannot listen there
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ui = _ui(tmp_path, port)
        try:
            out, _ = ui.communicate(timeout=300)
        finally:
            _stop(ui)
    assert ui.returncode != 0, out
    assert "starting the MLflow UI" in out and " at http://" not in out
    assert f"error: the MLflow UI ended before it answered on http://127.0.0.1:{port} (exit code" in out
