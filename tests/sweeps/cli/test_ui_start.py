"""`banditsweep ui` whose server ends before it answers (its port taken): said, with its exit code.
(The address given only once the server answers, on loopback, and nothing left behind on SIGTERM:
tests/workers/execution/test_reliability.py.)"""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO


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
