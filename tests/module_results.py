"""What a module-scoped fixture needs to run commands once for every test of its module: a test's
results and MLflow store go to its own folder (tests/conftest.py's ``results_in_tmp``), but a fixture
of the module is set up before any fixture of a test, so it points them at a folder of its own
(``results_folder``), loads the test plugins where its sweep needs them (``load_test_plugins``, also
what conftest's ``plugins`` does for one test) and keeps what a command printed (``command``):
capsys belongs to one test."""

import contextlib
import io
import os
from pathlib import Path

import pytest
from paths import PLUGINS

# The test plugins the driver and the shared Ray's workers load (tests/plugins/).
PLUGIN_MODULES = "faulty_algorithms,jsonl_sink,late_starts,slow_mlflow"


def load_test_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver loads the test plugins as the shared Ray's workers do."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("BANDITSWEEP_PLUGINS", PLUGIN_MODULES)


@contextlib.contextmanager
def results_folder(folder: Path, plugins: bool = False):
    """Inside: the working folder is ``folder``, results go to ``folder/results`` and the MLflow store
    is ``folder/mlflow.db``; ``plugins``: the test plugins are loaded. Everything is restored after."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(folder)
        monkeypatch.setenv("BANDITSWEEP_RESULTS", str(folder / "results"))
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder}/mlflow.db")
        if plugins:
            load_test_plugins(monkeypatch)
        yield monkeypatch


def command(*arguments: str) -> tuple[int, str, str]:
    """``banditsweep ARGUMENTS`` (the command line's main): its exit code, and what it printed to
    stdout and to stderr."""
    from banditsweep.sweeps.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(arguments))
    return code, out.getvalue(), err.getvalue()
