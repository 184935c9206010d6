"""The Ray token that guards a machine's Ray is readable by its owner only: an embedded run writes no
token file (its Ray gets a token of its own, in its processes' environment), and a token file that
other users can read is made 0600 before Ray uses it."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml


def _run(tmp_path: Path, home: Path, results: str) -> subprocess.CompletedProcess:
    spec = {"sweep": "token", "horizon": 5, "seeds": 1,
            "environments": [{"kind": "synthetic", "function": "h1", "dim": 3}], "algorithms": [{"name": "random"}]}
    (tmp_path / "token.yaml").write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run([sys.executable, "-m", "banditsweep", "run", str(tmp_path / "token.yaml"), "--no-progress",
                           "--sink", "none", "--results", str(tmp_path / results)],
                          env=env, capture_output=True, text=True, timeout=300)


def test_an_embedded_run_leaves_no_token_that_others_can_read(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = _run(tmp_path, home, "first")
    assert done.returncode == 0, done.stderr
    token = home / ".ray" / "auth_token"
    assert not token.exists() or stat.S_IMODE(token.stat().st_mode) == 0o600

    # A token file Ray wrote earlier with the umask's mode is tightened before it is used.
    token.parent.mkdir(exist_ok=True)
    token.write_text("0" * 64)
    token.chmod(0o644)
    done = _run(tmp_path, home, "second")   # trials to run: an embedded Ray starts
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert "now 0600" in done.stderr
