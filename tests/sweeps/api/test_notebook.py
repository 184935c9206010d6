"""examples/custom_policy.ipynb runs as written on a real kernel of this Python (ipykernel, through
nbclient): its policy, defined in a cell, is shipped to the embedded Ray's workers, and its trials
finish; the statistics are printed and the figure drawn. Results go to the test's folder
(``$BANDITSWEEP_RESULTS``, which the notebook reads)."""

import json
import os
import sys
from pathlib import Path

import pytest

import banditsweep

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


def _kernel_spec(folder):
    """A kernel spec of this interpreter (the venv's Python), in a folder of the test's own."""
    spec = folder / "kernels" / "banditsweep-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "banditsweep test", "language": "python"}))
    return folder


def test_the_custom_policy_notebook_runs(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(_kernel_spec(tmp_path / "jupyter")))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.delenv("MPLBACKEND", raising=False)   # the kernel's inline backend: figures as PNG outputs
    # The kernel imports the banditsweep under test, as this process does.
    package = Path(banditsweep.__file__).parent
    if package.name == "banditsweep":   # not an editable install's folder: its parent goes on the path
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(package.parent),
                                                                       os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(repo / "examples" / "custom_policy.ipynb", as_version=4)
    client = nbclient.NotebookClient(notebook, kernel_name="banditsweep-test", timeout=240,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()

    outputs = {index: cell.get("outputs", []) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"}
    text = "\n".join(output.get("text", "") for cell in outputs.values() for output in cell if output.get("name") == "stdout")
    # progress=False: nothing of tqdm or Ray's notebook widgets said (Ray imports tqdm.auto, which warns
    # "IProgress not found" in a kernel without ipywidgets; Ray logs "Missing packages: ['ipywidgets']").
    said = "\n".join(output.get("text", "") for cell in outputs.values() for output in cell if output.get("name") == "stderr")
    for noise in ("tqdm", "IProgress", "ipywidgets", "Traceback"):
        assert noise not in said, said
    assert "12 trials finished, 0 failed" in text   # 3 seeds of LinEpsGreedy, LinTS and LinUCB's 2 values of nu
    assert "LinEpsGreedy" in text and "LinUCB" in text and "LinTS" in text
    images = [output for cell in outputs.values() for output in cell
              if output.get("output_type") in ("display_data", "execute_result") and "image/png" in output.get("data", {})]
    assert len(images) == 1
    import pandas as pd

    trials = pd.read_parquet(tmp_path / "results" / "custom_policy" / "trials")
    custom = trials[trials["algorithm"] == "lin_eps_greedy"]
    assert len(custom) == 3 and (custom["status"] == "finished").all()
    assert not json.loads(custom["code"].iloc[0])["__main__.py"].startswith("unknown")


def test_a_run_without_progress_imports_nothing_of_tqdm():
    """The progress display of a run with progress=False (a notebook's) draws no bar and imports no tqdm."""
    import subprocess

    code = ("import sys; from banditsweep.sweeps.cli.commands.progress import ProgressDisplay; "
            "from banditsweep.workers import Progress; display = ProgressDisplay(3, 'x', bar=False); "
            "display.show(Progress(total=3, done=1, running=1, actors=1)); display.close(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tqdm'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
