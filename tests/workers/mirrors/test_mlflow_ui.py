"""The MLflow UI as a researcher sees it: `banditsweep ui` on the store of a quick-start-like sweep,
opened in headless Chromium (Playwright's Python package driving the system's browser).

Skips, saying why, where Playwright or a Chromium executable is missing (`.ci/run` installs both
where it can: Debian's `chromium` and `pip install playwright`). The screenshots are kept in
``$BANDITSWEEP_TEST_ARTIFACTS`` (default: ``test-artifacts/`` in the repository), whatever the
pytest temporary folder is.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from paths import REPO

from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.spec.model import load_sweep
from banditsweep.sweeps.spec.overrides import parse_overrides

QUICKSTART = REPO / "sweeps" / "quickstart.yaml"
OVERRIDES = ["--set", "horizon=200", "--set", "seeds=2"]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> tuple[str | None, str | None]:
    """The browser executable, or why the test cannot run (checked before Ray or a sweep starts)."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None:
        return None, "Playwright's Python package is not installed (pip install playwright)"
    path = os.environ.get("BANDITSWEEP_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if not path:
        return None, (f"no Chromium executable on PATH ({', '.join(BROWSERS)}; or set BANDITSWEEP_CHROMIUM); "
                      "on Debian: apt-get install chromium")
    return path, None


CHROMIUM, MISSING = _chromium()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def _artifacts() -> Path:
    folder = Path(os.environ.get("BANDITSWEEP_TEST_ARTIFACTS", REPO / "test-artifacts")) / "mlflow_ui"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class UI:
    """`banditsweep ui SPEC` in a process of its own (and its MLflow server under it)."""

    def __init__(self, tmp_path: Path):
        self.port = _free_port()
        self.log = open(tmp_path / "ui.log", "w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "banditsweep", "ui", str(QUICKSTART), *OVERRIDES, "--port", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)

    def wait_ready(self, timeout: float = 300) -> str:
        """The experiment's URL that `ui` printed, once the server answers."""
        # `ui` prints the address after its own health check answers, which may be a moment after ours.
        deadline = time.monotonic() + timeout
        pattern = rf"http://127\.0\.0\.1:{self.port}/#/experiments/\d+/runs"
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.output()
            found = re.search(pattern, self.output())
            if found and self.answers():
                return found.group(0)
            time.sleep(0.5)
        pytest.fail(f"the MLflow UI did not answer and print its address within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        """SIGTERM to `ui`, which stops its MLflow server (its own process group) before it exits."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.log.close()

    def answers(self) -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).close()
            return True
        except OSError:
            return False


def test_the_mlflow_ui_shows_the_sweep_runs_by_name_and_compares_them(tmp_path, monkeypatch, capsys, shared_ray):
    executable = CHROMIUM
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    monkeypatch.chdir(tmp_path)
    assert main(["run", str(QUICKSTART), *OVERRIDES, "--no-progress"]) == 0
    capsys.readouterr()
    sweep = load_sweep(str(QUICKSTART), parse_overrides([o for o in OVERRIDES if o != "--set"]))
    expected = {trial.run_name for trial in sweep.trials}
    assert len(expected) == len(sweep.trials) == 28
    first = "LinUCB nu=0.1 | synthetic:h1 | seed 0"
    second = "LinUCB nu=1.0 | synthetic:h1 | seed 0"
    assert {first, second} <= expected

    artifacts = _artifacts()
    ui = UI(tmp_path)
    try:
        url = ui.wait_ready()
        with sync_playwright() as playwright:
            try:
                browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
            except PlaywrightError as error:
                pytest.skip(f"{executable} does not start headless: {str(error).splitlines()[0]}")
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1400})
                page.goto(url, wait_until="load")
                page.get_by_text("matching runs").wait_for(timeout=60_000)
                assistant = page.get_by_role("button", name="Close")
                if assistant.count():
                    assistant.first.click()
                # The experiment page: the parent run, expanded, and every trial run under its own name.
                page.locator("button[data-component-id*='runnamecellrenderer']").first.click()
                page.get_by_text(first, exact=True).wait_for(timeout=30_000)
                names = page.locator("[col-id='attributes.`Run Name`'] a").all_inner_texts()
                parents = [name for name in names if re.fullmatch(r"quickstart \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", name)]
                assert len(parents) == 1, names
                children = [name for name in names if name not in parents]
                assert len(children) == len(set(children)) and set(children) == expected
                assert page.get_by_text("29 matching runs").count() == 1
                page.screenshot(path=str(artifacts / "experiment.png"))

                # The compare view of two grid points of one cell: two names, and final_regret.
                for name in (first, second):
                    page.locator("[role=row]", has_text=name).locator(".ag-checkbox-input-wrapper").click()
                page.get_by_role("button", name="Compare", exact=True).click()
                page.wait_for_url(re.compile(r".*/compare-runs\?runs=.*"), timeout=30_000)
                metric = page.get_by_text("final_regret", exact=True).first
                metric.wait_for(timeout=60_000)
                text = page.inner_text("body")
                assert first in text and second in text
                assert re.search(r"\bnu\s+0\.1\s+1\.0\b", text), text[:2000]   # the grid point that differs
                metric.evaluate("element => element.scrollIntoView({block: 'center'})")
                page.screenshot(path=str(artifacts / "compare.png"))

                # The chart view: one regret chart per environment, none that mixes the two.
                page.goto(url + "?compareRunsMode=CHART", wait_until="load")
                for key in ("cum_regret/synthetic:h1", "cum_regret/synthetic:h3"):
                    page.get_by_text(key, exact=True).first.wait_for(timeout=60_000)
                assert page.get_by_text("cum_regret", exact=True).count() <= 1   # at most the section's name
                page.screenshot(path=str(artifacts / "charts.png"))
            finally:
                browser.close()
    finally:
        ui.stop()
    assert ui.process.returncode is not None and not ui.answers()   # `ui` stopped the server it started
    for name in ("experiment.png", "compare.png", "charts.png"):
        assert (artifacts / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
